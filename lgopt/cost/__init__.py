"""The cost model: what a group, a global layer and a plan cost on a chip, and the bounds below them.

One replaceable part with one contract (:class:`lgopt.cost.model.CostModel`) and a registry of models by
name (:mod:`.registry`); the models are the documented analytic one (:mod:`.analytic`) and the one fitted on
a compiler's measured timeline (:mod:`.fitted`, its constants made by :mod:`.fit` from measurements).  Around
them: what an op and a transfer amount to whatever the model (:mod:`.work`), cycles by the chip's model
(:mod:`.cycles`), a group's pipelined cost (:mod:`.pipeline`) and the network's lower bound (:mod:`.bound`).

May import :mod:`lgopt.hw` and :mod:`lgopt.model`; never a planner, a reader or a strategy: the cost of a
plan does not depend on who made it.
"""
