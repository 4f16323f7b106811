"""One layer group: slicing and windows, the pipelined timestep table, LMEM allocation and exact
packing, the hand-over of a tensor between groups, and plan assembly and totals (costed by :mod:`lgopt.cost`).

May import :mod:`lgopt.model`, :mod:`lgopt.hw` and :mod:`lgopt.cost`.  Knows nothing of how groups are chosen.
"""
