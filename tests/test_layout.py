"""Every worked example of the seeds on LMEM addressing, layouts and weight reorder."""

import numpy as np
import pytest

from lgopt.hw import layout as L

X4 = 4  # the seeds illustrate with 4 NPUs


# --- seed 000/001: "Address of Tensor in Local Memory" (X = 4, S = 1024) ---------------------------
@pytest.mark.parametrize("addr,lane,offset", [(340, 0, 340), (1472, 1, 448), (2300, 2, 252), (3088, 3, 16)])
def test_address_split_abcd(addr, lane, offset):
    assert L.split_address(addr, 1024) == (lane, offset)


# --- "Scatter Features to Different NPUs": ceil((Q + C) / X) --------------------------------------
@pytest.mark.parametrize("c,q,expected", [
    (X4 - 1, 0, 1),   # C = X-1 from NPU 0: NPU X-1 holds nothing, 1 channel per lane
    (X4 - 1, 1, 1),   # C = X-1 from NPU 1: NPU 0 holds nothing
    (X4 + 2, 0, 2),   # C = X+2 from NPU 0: second block row holds 2 channels
    (X4 + 2, X4 - 1, 3),  # C = X+2 from NPU X-1: three block rows ("terrible")
])
def test_channels_per_lane(c, q, expected):
    assert L.channels_per_lane(c, X4, q) == expected


def test_same_lane_iff_congruent_mod_x():
    for c0 in range(12):
        for c1 in range(12):
            assert (L.lane_of_element(c0, X4)[0] == L.lane_of_element(c1, X4)[0]) == (c0 % X4 == c1 % X4)


def test_scatter_c_x_plus_2_from_last_lane():
    # C = X+2 from NPU X-1: channel 0 on NPU X-1, channel 1 on NPU 0, channel X+1 on NPU 0 of row 2
    assert L.lane_of_element(0, X4, X4 - 1) == (X4 - 1, 0)
    assert L.lane_of_element(1, X4, X4 - 1) == (0, 1)
    assert L.lane_of_element(X4 + 1, X4, X4 - 1) == (0, 2)


# --- "Strides in Local Memory" ------------------------------------------------------------------
def test_local_strides_example_2_5_3_4_fp32():
    """(2,5,3,4) fp32 from NPU 0, W stride 2, H stride 16, C stride 56, N stride 120."""
    shape, st = (2, 5, 3, 4), L.Strides(120, 56, 16, 2)
    assert L.channels_per_lane(5, X4) == 2
    # c and c + X share a lane, c + X one C stride further on
    lane0, off0 = L.element_offset((0, 0, 0, 0), st, X4)
    lane4, off4 = L.element_offset((0, 4, 0, 0), st, X4)
    assert (lane0, lane4) == (0, 0) and off4 - off0 == 56
    assert L.element_offset((1, 4, 2, 3), st, X4) == (0, 120 + 56 + 32 + 6)
    assert L.element_offset((0, 3, 2, 3), st, X4) == (3, 32 + 6)
    # the strides leave no element of one lane on top of another
    seen = {}
    for idx in np.ndindex(*shape):
        key = L.element_offset(idx, st, X4)
        assert key not in seen, (idx, seen.get(key))
        seen[key] = idx


def test_local_strides_example_2_3_1_10_from_npu1():
    """(2,3,1,10) fp32 from NPU 1: one channel per lane, so C and H strides make no sense."""
    assert L.channels_per_lane(3, X4, 1) == 1
    st = L.Strides(120, 999, 999, 2)  # C and H strides are irrelevant: any value gives the same offsets
    st2 = L.Strides(120, 7, 5, 2)
    for idx in np.ndindex(2, 3, 1, 10):
        assert L.element_offset(idx, st, X4, 1) == L.element_offset(idx, st2, X4, 1)


def test_continuous_layout():
    assert L.continuous_strides((2, 3, 4, 5)) == (60, 20, 5, 1)


# --- aligned and compact layouts -------------------------------------------------------------------
def test_128_byte_aligned_fp32_from_npu0_and_npu2():
    """(2,3,4,5) fp32, 128-byte aligned: C stride ceil(20/32)*32 = 32; N stride 32 from NPU 0, 64 from NPU 2."""
    s0 = L.aligned_strides((2, 3, 4, 5), "f32", 128, X4, 0)
    s2 = L.aligned_strides((2, 3, 4, 5), "f32", 128, X4, 2)
    assert (s0.c, s0.n, s0.h, s0.w) == (32, 32, 5, 1)
    assert (s2.c, s2.n) == (32, 64)
    assert 32 - 4 * 5 == 12  # empty blocks appended to each feature


@pytest.mark.parametrize("dtype,unit", [("f32", 32), ("f16", 64), ("int8", 128)])
def test_128_byte_aligned_c_stride_units(dtype, unit):
    assert L.aligned_strides((1, 1, 3, 7), dtype, 128, X4).c == unit


def test_64_byte_aligned_fp16_bm1684x_examples():
    """Seed 003: 64-byte aligned, (2,3,4,5) fp16: C stride ceil(20, 32) = 32; N stride 32 (NPU0) / 64 (NPU2)."""
    assert L.aligned_strides((2, 3, 4, 5), "f16", 64, X4, 0) == (32, 32, 5, 1)
    assert L.aligned_strides((2, 3, 4, 5), "f16", 64, X4, 2) == (64, 32, 5, 1)
    for dt, unit in (("f32", 16), ("f16", 32), ("int8", 64)):
        assert L.aligned_strides((1, 1, 1, 1), dt, 64, X4).c == unit


def test_compact_layout_from_npu0_and_npu2():
    assert L.compact_strides((2, 3, 4, 5), X4, 0) == (20, 20, 5, 1)
    assert L.compact_strides((2, 3, 4, 5), X4, 2) == (40, 20, 5, 1)


def test_line_aligned_layout():
    st = L.line_aligned_strides((2, 3, 4, 5), "f16", 64, X4)
    assert (st.h, st.c, st.w) == (32, 128, 1)


def test_64ic_32ic_kernel_layout():
    st = L.ic_interleaved_strides(ic=100, kh=3, kw=3, ic_par=64)
    assert (st.w, st.h, st.c, st.n) == (64, 64 * 3, 64 * 3 * 3 * 2, 64 * 3 * 3 * 2)
    st = L.ic_interleaved_strides(ic=100, kh=3, kw=3, ic_par=32)
    assert (st.w, st.h, st.c) == (32, 96, 32 * 9 * 4)


# --- matrix layout: 2 x 40 fp32, 4 NPUs, 128-byte aligned (32 fp32 per EU row) ----------------------
@pytest.mark.parametrize("w,c,row_elems", [
    (40, 1, 64),  # all columns in NPU 0, ceil(40/32)*32 = 64 blocks
    (20, 2, 32),  # evenly over NPU 0 and 1
    (10, 4, 32),  # over all NPUs
    (8, 5, 64),   # C = 5 > X: two channels per lane
    (15, 3, 32),  # last channel holds 40 - 2*15 = 10
    (6, 7, 64),   # more memory than W = 15
])
def test_matrix_layout(w, c, row_elems):
    assert L.matrix_shape(2, 40, w) == (2, c, 1, w)
    assert L.matrix_row_elems_per_lane(40, w, "f32", 128, X4) == row_elems


def test_matrix_last_channel_and_advice():
    assert L.last_matrix_channel_elems(40, 15) == 10
    assert L.last_matrix_channel_elems(40, 8) == 8
    per = {w: L.matrix_row_elems_per_lane(40, w, "f32", 128, X4) for w in (6, 15)}
    assert per[6] > per[15]
    with pytest.raises(ValueError):
        L.matrix_shape(2, 40, 41)


# --- storage modes --------------------------------------------------------------------------------
def test_4n_mode_int8():
    st = L.stored_form((6, 5, 4, 5), "int8", align_4n=True)
    assert st.shape == (2, 5, 4, 5) and st.dtype_bytes == 4 and st.dummies == 2


def test_2n_mode_int16():
    st = L.stored_form((3, 5, 4, 5), "int16", align_4n=True)
    assert st.shape == (2, 5, 4, 5) and st.dtype_bytes == 4 and st.dummies == 1


def test_no_packing_on_other_chips_or_types():
    assert L.stored_form((6, 5, 4, 5), "int8", align_4n=False).shape == (6, 5, 4, 5)
    assert L.stored_form((6, 5, 4, 5), "f32", align_4n=True).shape == (6, 5, 4, 5)


def test_2ic_mode():
    shape, dummies = L.two_ic_shape(ic=5, oc=3, kh=3, kw=3)
    assert shape == (3, 3, 3, 3) and dummies == 1


def test_activation_lane_bytes_4n_packs_batches():
    # 6 int8 batches pack into 2 int8x4 words; EU counted in 32-bit words (128 B / 4 = 32)
    assert L.activation_lane_bytes((6, 5, 4, 5), "int8", X4, 128, align_4n=True) == 2 * 2 * 32 * 4
    assert L.activation_lane_bytes((6, 5, 4, 5), "int8", X4, 128, align_4n=False) == 6 * 2 * 128


# --- seed 002: weight reorder on BM1684X, replayed with numpy ------------------------------------------
def _resize(src, shape):
    out = np.zeros(shape, dtype=src.dtype)
    out[tuple(slice(0, min(i, j)) for i, j in zip(src.shape, shape))] = src
    return out


def test_lmem_scatter_of_2_5_2_3_activation():
    """Seed: (2,5,2,3) over 4 NPUs with EU 4 becomes (npu=4, n=2, c=2, h=2, w=4)."""
    a = np.arange(60).reshape(2, 5, 2, 3)
    b = _resize(a.reshape(2, 5, 6), (2, 8, 8)).reshape(2, 2, 4, 2, 4).transpose(2, 0, 1, 3, 4)
    assert b.shape == (4, 2, 2, 2, 4)
    per_lane = int(np.prod(b.shape[1:]))
    assert per_lane == L.activation_lane_bytes((2, 5, 2, 3), "int8", X4, 4)  # 1-byte elems: bytes == elems
    assert b[1, 0, 0, 0, 0] == a[0, 1, 0, 0] and b[0, 1, 1, 0, 0] == a[1, 4, 0, 0]


def test_conv_weight_reorder_and_bias_merge():
    """Seed: filter (oc=2, ic=5, kh=2, kw=3), 4 NPUs, IC aligned to EU 4 -> per lane 1 x 2 x 6 x 4."""
    a = np.arange(60).reshape(2, 5, 2, 3)
    c = _resize(a.reshape(2, 5, 6), (1 * 4, 2 * 4, 6)).reshape(1, 4, 2, 4, 6).transpose(1, 0, 2, 4, 3)
    assert c.shape == (4, 1, 2, 6, 4)
    lane_elems = int(np.prod(c.shape[1:]))
    # our formula with 1-byte elements and ic_parallel = 4 bytes gives the same per-lane size
    assert L.conv_filter_lane_bytes(2, 5, 2, 3, "int8", X4, 4) == lane_elems == 48
    # IC_PAR input channels innermost: lane 0, ic group 1, kernel pos 0 holds ic 4..7 (5..7 padding)
    assert list(c[0, 0, 1, 0]) == [a[0, 4, 0, 0], 0, 0, 0]
    # bias (5 values) compact over lanes, EU-aligned, merged in front of the filter: 4 + 48 per lane
    d = _resize(np.arange(60, 65).reshape(1, 5, 1, 1), (1, 8, 1, 1)).reshape(1, 2, 4, 1, 1).transpose(2, 0, 3, 4, 1)
    d = _resize(d, (4, 1, 1, 1, 4))
    e = np.concatenate((d.reshape(4, 1, 4), c.reshape(4, 12, 4)), axis=1)
    assert e.shape == (4, 13, 4)
    bias = L.bias_lane_bytes(5, X4, bias_bytes=1)
    assert bias == 2
    assert L.merged_coeff_lane_bytes(48, bias, eu_bytes=4) == int(np.prod(e.shape[1:])) == 52


def test_depthwise_filter_bytes():
    assert L.depthwise_filter_lane_bytes(oc=96, kh=3, kw=3, dtype="f16", npu_num=64) == 2 * 9 * 2
