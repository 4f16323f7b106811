"""Files in and out: the problem format, ONNX import, the bundled zoo, plan files, the MiniMalloc CSV,
and the exporters by name (TPU-MLIR's cache is :mod:`lgopt.tpumlir`'s, registered as a plugin).

May import :mod:`lgopt.model` and :mod:`lgopt.hw`; never a planner (:mod:`lgopt.group`,
:mod:`lgopt.strategies`): reading a file does not solve anything.
"""
