"""How ``gn.weightless.onnx`` and its TPU-MLIR caches were made (needs torch and TPU-MLIR 1.30.2, not the tests).

    PEER=/work/peer/venv/bin                  # ../shared/tpu-mlir/install.sh's environment
    $PEER/python make_gn.py                    # gn.onnx: torch 2.11, the legacy exporter, opset 13
    for chip in bm1684x bm1688; do
      mkdir -p $chip && cd $chip
      $PEER/model_transform --model_name gn --model_def ../gn.onnx --input_shapes [[1,16,30,30]] --mlir gn.mlir
      $PEER/model_deploy --mlir gn.mlir --chip $chip --quantize F16 --model gn_${chip}_f16.bmodel --skip_validation
      cd ..
    done

The caches are TPU-MLIR's own grouping (opt2) of the model; its weights were stripped afterwards (the
initializers marked external and absent).  Measured (codegen timeline, ``compiler_profile_0.txt``):
22,138 cycles on BM1684X, 57,775 on BM1688; the two tpu.GroupNorm ops 666 and 1,331 cycles (BM1684X), 2,830
and 3,020 (BM1688), their buffers 7,424 and 6,144 bytes (BM1684X), 14,464 and 11,136 (BM1688).
"""

import torch
import torch.nn as nn


class TwoGroupNorms(nn.Module):
    """Conv, GroupNorm(16 groups of 4), ReLU; strided conv, GroupNorm(32 groups of 6), ReLU; 1x1 conv."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(16, 64, 3, padding=1)
        self.g1 = nn.GroupNorm(16, 64)
        self.c2 = nn.Conv2d(64, 192, 3, stride=2, padding=1)
        self.g2 = nn.GroupNorm(32, 192)
        self.c3 = nn.Conv2d(192, 32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.g1(self.c1(x)))
        y = torch.relu(self.g2(self.c2(y)))
        return self.c3(y)


if __name__ == "__main__":
    torch.manual_seed(0)
    m = TwoGroupNorms().eval()
    with torch.no_grad():
        for g in (m.g1, m.g2):  # an affine that is not the identity, so TPU-MLIR keeps it
            g.weight.uniform_(0.5, 1.5)
            g.bias.uniform_(-0.5, 0.5)
    torch.onnx.export(m, torch.randn(1, 16, 30, 30), "gn.onnx", opset_version=13, dynamo=False,
                      input_names=["x"], output_names=["y"])
