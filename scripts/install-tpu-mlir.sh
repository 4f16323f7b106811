#!/usr/bin/env bash
# Install TPU-MLIR 1.30.2 beside lgopt, in its own Python 3.10 environment (its wheels are cp310 only), for
# `lgopt deploy` and the benchmarks that compile with it.  Idempotent: a finished step is skipped.
#
#   scripts/install-tpu-mlir.sh DIR        # ~2 min and ~6.4 GB the first time (torch pulls CUDA wheels it never uses)
#   export LGOPT_TPU_MLIR=DIR/venv         # or pass --tpu-mlir DIR/venv to lgopt deploy
#
# Ends with "TPU-MLIR ready: ..." and exit 0 once TPU-MLIR compiled a small convolution network; exit 1 naming the
# step that failed otherwise.  DIR must be outside the repository.
set -euo pipefail
DIR="${1:?usage: scripts/install-tpu-mlir.sh DIR (a folder outside the repository)}"
mkdir -p "$DIR" && DIR="$(cd "$DIR" && pwd)" && cd "$DIR"
say() { echo "[install-tpu-mlir] $*"; }
fail() { echo "[install-tpu-mlir] FAILED: $*" >&2; exit 1; }

# 1. a Python 3.10 environment (pyenv's python3.10 shim needs PYENV_VERSION when 3.10 is installed but not selected)
py310() {
  if command -v pyenv >/dev/null 2>&1 && pyenv versions --bare 2>/dev/null | grep -q '^3\.10'; then
    PYENV_VERSION=$(pyenv versions --bare | grep -m1 '^3\.10') python3.10 "$@"
  else python3.10 "$@"; fi
}
if [ ! -x venv/bin/python ]; then
  py310 -c "" 2>/dev/null || fail "no python3.10: install it (pyenv install 3.10, or apt-get install python3.10-venv)"
  py310 -m venv venv || fail "python3.10 -m venv venv"
fi
# 2. TPU-MLIR and what its front end imports
if ! venv/bin/python -c "import tpu_mlir, torch, psutil, onnx" 2>/dev/null; then
  say "pip install tpu_mlir[onnx]==1.30.2 torch==2.11.0 psutil"
  venv/bin/pip install -q --upgrade pip
  venv/bin/pip install -q "tpu_mlir[onnx]==1.30.2" torch==2.11.0 psutil || fail "pip install"
fi
# 3. the wheel ships its own glibc pieces, which clash with the system's: move them aside
TP=venv/lib/python3.10/site-packages/tpu_mlir/lib/third_party
mkdir -p hidden_glibc
for f in libc.so.6 libm.so.6 libpthread.so.0; do [ -e "$TP/$f" ] && mv "$TP/$f" hidden_glibc/; done
# 4. one compile of a small network with random weights, as a check
if [ ! -f check/.ok ]; then
  rm -rf check && mkdir check && cd check
  ../venv/bin/python - <<'PY' || fail "writing the check network"
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
r = np.random.default_rng(0)
w = [numpy_helper.from_array(r.standard_normal(s).astype(np.float32), n)
     for n, s in (("w1", (16, 3, 3, 3)), ("b1", (16,)), ("w2", (16, 16, 3, 3)), ("b2", (16,)))]
nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["y"])]
g = helper.make_graph(nodes, "check", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 64, 64])], w)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "check.onnx")
PY
  PATH="$DIR/venv/bin:$PATH" model_transform --model_name check --model_def check.onnx --input_shapes [[1,3,64,64]] \
    --mlir check.mlir > transform.log 2>&1 || fail "model_transform: see $PWD/transform.log"
  PATH="$DIR/venv/bin:$PATH" model_deploy --mlir check.mlir --chip bm1684x --quantize F16 --model check.bmodel \
    --skip_validation > deploy.log 2>&1 || fail "model_deploy: see $PWD/deploy.log"
  grep -q "API_END total_cycle" compiler_profile_0.txt || fail "codegen wrote no timeline: see $PWD/deploy.log"
  touch .ok && cd ..
fi
say "TPU-MLIR ready: $(venv/bin/pip show tpu_mlir 2>/dev/null | sed -n 's/^Version: /tpu_mlir /p') in $DIR/venv; export LGOPT_TPU_MLIR=$DIR/venv"
