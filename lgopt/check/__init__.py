"""Independent checks of a plan: the verifier (:mod:`.verify`) and the simulator that runs a plan
on a model of LMEM (:mod:`.simulate`, :mod:`.kernels`).

May import :mod:`lgopt.model` and :mod:`lgopt.hw` only: none of the planner's modules
(:mod:`lgopt.group`, :mod:`lgopt.strategies`), so a planner bug cannot hide in a shared helper.
"""
