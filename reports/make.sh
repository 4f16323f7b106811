#!/usr/bin/env bash
# Regenerate the example reports: every bundled problem on bm1684x and cv181x, greedy vs cpsat, with
# TPU-MLIR's own grouping of the fixture models scored beside them on bm1684x.  About 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
TL=${TIME_LIMIT:-30}
CACHES=../shared/fixtures/tpu-mlir
lgopt compare problems/*.json --chip bm1684x --time-limit "$TL" -o reports/bm1684x \
  --strategies "greedy,cpsat,tpu-mlir=$CACHES/resnet18_bm1684x_f16.layer_group_cache.json,tpu-mlir=$CACHES/yolov5s_like_bm1684x_f16.layer_group_cache.json"
lgopt compare problems/*.json --chip cv181x --time-limit "$TL" -o reports/cv181x --strategies greedy,cpsat
lgopt sweep problems/resnet18.json --chip bm1684x --set lmem_bytes=32K,64K,128K,256K,512K --set npu_num=8,16,32,64 \
  --strategies greedy -o reports/sweep-resnet18
