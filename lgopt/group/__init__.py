"""One layer group: slicing and windows, the pipelined timestep table, LMEM allocation and exact
packing, the hand-over of a tensor between groups, the cost model, and plan assembly and totals.

May import :mod:`lgopt.model` and :mod:`lgopt.hw`.  Knows nothing of how groups are chosen.
"""
