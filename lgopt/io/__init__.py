"""Files in and out: the problem format, ONNX import, the bundled zoo, plan files, the MiniMalloc CSV,
and TPU-MLIR's layer-group caches.

May import :mod:`lgopt.model` and :mod:`lgopt.hw`; never a planner (:mod:`lgopt.group`,
:mod:`lgopt.strategies`): reading a file does not solve anything.
"""
