"""The chip: presets and parameters (:mod:`.chip`), the LMEM layouts of the seed documents
(:mod:`.layout`) and the bytes per lane an op's buffers take on a chip (:mod:`.sizing`).

May import :mod:`lgopt.model`.  The verifier shares these formulas on purpose (they are the seeds'
worked examples, tested against them), so they sit below both the planner and the checker.
"""
