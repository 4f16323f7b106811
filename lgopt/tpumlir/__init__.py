"""Everything lgopt knows of TPU-MLIR 1.30.2, the compiler that judges its plans.

* Reading: its layer-group caches (:mod:`.cache`) mapped onto lgopt's ops, the network lowered and fused as its
  canonicalisation lowers it (:mod:`.lowering`, :mod:`.fusions`), its own grouping built by lgopt
  (:mod:`.grouping`).
* Writing: a cache it compiles (:mod:`.export`).
* Its rules: forks its time-step pass cannot slice (:mod:`.forks`), row sections (:mod:`.rules`), the casts of
  its F16 flow (:mod:`.casts`).
* Searching: within what it compiles, against its own grouping (:mod:`.space`, ``--reference``), and with it
  measuring (:mod:`.judge`, :mod:`.judged`).
* Running it as a user does: its tools (:mod:`.compiler`) and ``lgopt deploy`` (:mod:`.deploy`).
* Its measurements: the calibration format read and mapped for ``lgopt fit`` (:mod:`.measurements`,
  :mod:`.opmap`, :mod:`.calibrate`, :mod:`.heldout`), what its own timelines allow any grouping to gain
  (:mod:`.floor`), and the round trips' outputs kept as one archive (:mod:`.runs`).

A plugin (:mod:`.plugin`, :mod:`lgopt.plugins`): it may import every layer below the report, and none of
them imports it (``pyproject.toml``'s contracts), so the planner stays a planner for any compiler.
"""
