"""The CP-SAT optimiser: the candidate space and its evaluation (:mod:`.candidates`), the weight
load-row subproblem and the group as a CP-SAT sub-model (:mod:`.loadrows`), and the monolithic and
decomposed searches over it (:mod:`.optimise`).  See ``docs/optimiser.md``.
"""
