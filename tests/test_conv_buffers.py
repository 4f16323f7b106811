"""Convolution work buffers and filters as TPU-MLIR 1.30.2 sizes them (``lgopt.hw.sizing.conv_buffer_bytes``,
``three_ic``, ``runs_as_conv``): each case is a conv of the calibration models with the ``buffer_size`` its
``final.mlir`` gives (TPU-MLIR's own opt2 compile, the scoring tool's model cache), slices as that compile cut
them.  TPU-MLIR rounds to the EU; lgopt's sizes are EU-aligned, so they agree within one EU."""

import pytest

from lgopt.hw.chip import get_chip
from lgopt.hw.sizing import conv_buffer_bytes, runs_as_conv, scratch_bytes, three_ic, weight_bytes
from lgopt.model.network import Network, Op, Tensor, Weight


def _conv(ic, oc, k, s, dtype, group=1, hw=224, consumers=1):
    x = Tensor("x", (1, ic, hw, hw), dtype)
    y = Tensor("y", (1, oc, hw // s, hw // s), dtype)
    f = Weight("w", (oc, ic // group, k, k), dtype, "filter")
    op = Op("conv", "Conv", ("x",), ("y",), weights=(f,), attrs={"kernel": (k, k), "strides": (s, s),
                                                                 "pads": (k // 2,) * 4, "group": group})
    others = tuple(Op(f"r{i}", "Relu", ("x",), (f"z{i}",)) for i in range(consumers - 1))
    tensors = {"x": x, "y": y, **{f"z{i}": Tensor(f"z{i}", x.shape, dtype) for i in range(consumers - 1)}}
    return Network("n", tensors, (op,) + others, ("x",), ("y",) + tuple(f"z{i}" for i in range(consumers - 1))), op


@pytest.mark.parametrize("chip,dtype,ic,oc,k,s,group,hw,in_rows,out_rows,want", [
    # ResNet's stem, rows folded into 21 input channels: int32 output + the depthwise pass (BM1684X, BM1690 INT8)
    ("bm1684x", "int8", 3, 64, 7, 2, 1, 224, 224, 112, 75456),
    ("bm1690", "int8", 3, 64, 7, 2, 1, 224, 224, 112, 75456),
    ("bm1688", "int8", 3, 64, 7, 2, 1, 224, 117, 57, 63888),   # BM1688: only a folded conv holds the int32 output
    ("bm1688", "f16", 3, 64, 7, 2, 1, 224, 63, 29, 13040),      # F16: no int32 output, the rows folded
    ("bm1684x", "int8", 3, 32, 3, 2, 1, 224, 224, 112, 62912),  # MobileNet's stem: both taps folded in INT8
    ("bm1684x", "int8", 64, 64, 3, 1, 1, 56, 58, 56, 12544),    # ResNet's layer1 conv: the int32 output alone
    ("bm1688", "int8", 64, 64, 3, 1, 1, 56, 58, 56, 0),         # on BM1688 none
    ("bm1690", "f16", 3, 64, 7, 2, 1, 224, 224, 112, 0),        # BM1690 folds no F16 taps
    ("bm1684", "int8", 3, 64, 7, 2, 1, 224, 224, 112, 0),       # BM1684: no conv buffer in any final.mlir
    # depthwise: re-laid input, int32 output (twice in INT8 on BM1684X), kernel taps; BM1688 INT8 the input only
    ("bm1684x", "int8", 96, 96, 3, 2, 96, 112, 112, 56, 62740),
    ("bm1688", "f16", 96, 96, 7, 1, 96, 56, 56, 56, 44055),
    ("bm1688", "int8", 96, 96, 7, 1, 96, 56, 56, 56, 3138),
])
def test_a_conv_buffer_is_what_tpu_mlir_gives_it(chip, dtype, ic, oc, k, s, group, hw, in_rows, out_rows, want):
    c = get_chip(chip)
    net, op = _conv(ic, oc, k, s, dtype, group, hw)
    got = conv_buffer_bytes(c, net, op, (1, in_rows, hw, None), (1, out_rows, hw // s, None))
    assert want <= got < want + c.eu_bytes
    assert scratch_bytes(c, net, op, (1, in_rows, hw, None), (1, out_rows, hw // s, None)) == got


def test_an_input_read_elsewhere_too_is_broadcast_to_a_buffer_of_its_own():
    """``use_3ic_optimize & 0x20``: when the stem's input has other readers, the folded conv copies it first."""
    c = get_chip("bm1684x")
    one, op1 = _conv(3, 32, 3, 2, "int8")
    two, op2 = _conv(3, 32, 3, 2, "int8", consumers=2)
    a = conv_buffer_bytes(c, one, op1, (1, 224, 224, None), (1, 112, 112, None))
    b = conv_buffer_bytes(c, two, op2, (1, 224, 224, None), (1, 112, 112, None))
    assert b - a == 224 * 224  # one copy of the slice, the 27 folded channels on one lane


def test_the_folded_taps_shape_the_filter_too():
    """TPU-MLIR's stem filter, ``[oc, ic * kh, 1, kw]`` with the 21 channels padded to 32 (BM1688) or 64
    (BM1684X): 480 and 512 bytes a lane with the merged requantisation, as its ``_merge`` loads are."""
    for chip, want in (("bm1688", 480), ("bm1684x", 512)):
        _, op = _conv(3, 64, 7, 2, "int8")
        assert three_ic(get_chip(chip), op) == (1, 7)
        assert weight_bytes(get_chip(chip), op) == want


@pytest.mark.parametrize("chip,dtype,channels,as_conv", [
    ("bm1684x", "int8", 64, True), ("bm1684x", "int8", 72, False), ("bm1688", "int8", 32, True),
    ("bm1688", "int8", 48, False), ("bm1688", "f16", 16, True), ("bm1688", "f16", 24, False),
    ("bm1690", "f16", 32, True), ("bm1690", "f16", 48, False), ("bm1684", "int8", 16, False)])
def test_a_narrow_depthwise_conv_runs_as_an_ordinary_one(chip, dtype, channels, as_conv):
    """A depthwise conv of at most a lane's worth of ``npu_num / bytes`` channels is an ordinary conv in TPU-MLIR
    (``group = 1`` in every such conv of the calibration models), so its filter holds every input channel."""
    c = get_chip(chip)
    _, op = _conv(channels, channels, 3, 1, dtype, group=channels, hw=28)
    assert runs_as_conv(c, op) is as_conv
    full = weight_bytes(c, op)
    _, dense = _conv(channels, channels, 3, 1, dtype, hw=28)
    assert (full == weight_bytes(c, dense)) is as_conv


def test_a_layer_scale_is_a_one_by_one_depthwise_conv():
    """ConvNeXt's ``x * gamma`` (``[1, 96, 1, 1]``) runs as a 1 x 1 depthwise ``tpu.Conv2D``: 53,316 bytes of buffer
    for a 56 x 56 slice in INT8 on BM1684X."""
    c = get_chip("bm1684x")
    x = Tensor("x", (1, 96, 56, 56), "int8")
    y = Tensor("y", (1, 96, 56, 56), "int8")
    op = Op("mul", "Mul", ("x",), ("y",), weights=(Weight("g", (1, 96, 1, 1), "int8", "const"),))
    net = Network("n", {"x": x, "y": y}, (op,), ("x",), ("y",))
    got = scratch_bytes(c, net, op, (1, 56, 56, None), (1, 56, 56, None))
    assert 53316 <= got < 53316 + c.eu_bytes
