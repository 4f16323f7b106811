#!/bin/sh
# Install the dynamo exporter's onnxscript (and the newer onnx it needs) into DIR, a folder of its own, for
# TPU-MLIR's Python: its own environment pins onnx 1.14.1 and protobuf 3.20.3, so nothing goes there.
#   benchmarks/zoo/exporters.sh DIR [PYTHON]   (PYTHON: default $LGOPT_TPU_MLIR/bin/python)
# then: PYTHONPATH=DIR $LGOPT_TPU_MLIR/bin/python benchmarks/zoo/export.py OUT_DIR
# (pip warns that tpu-mlir wants other numpy/protobuf versions: they go to DIR only, TPU-MLIR keeps its own.)
set -eu
dir=${1:?usage: exporters.sh DIR [PYTHON]}
py=${2:-${LGOPT_TPU_MLIR:?set LGOPT_TPU_MLIR or pass PYTHON}/bin/python}
"$py" -m pip install --quiet --target "$dir" "onnxscript>=0.5"
PYTHONPATH="$dir" "$py" -c "import onnxscript, onnx; print('onnxscript', onnxscript.__version__, 'onnx', onnx.__version__, 'in $dir')"
