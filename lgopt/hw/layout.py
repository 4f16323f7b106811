"""LMEM addressing, layouts and storage modes (seed "Address of Tensor in Local Memory").

LMEM is ``X`` lanes of ``S`` bytes with lane-major addresses.  A tensor's
channels are scattered round-robin over lanes starting at the lane its address
falls in; everything lgopt sizes is *bytes per lane*, because every lane holds
the same slice of every buffer.

Strides here are in elements, as the seeds give them.  The worked examples of
the seeds are the unit tests of this module (``tests/test_layout.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from lgopt.model.dtype import dtype_bytes


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def align_up(x: int, a: int) -> int:
    return cdiv(x, a) * a


class Strides(NamedTuple):
    n: int
    c: int
    h: int
    w: int


def split_address(addr: int, lane_bytes: int) -> tuple[int, int]:
    """A = Q*S + R: the tensor starts at lane Q, offset R."""
    return addr // lane_bytes, addr % lane_bytes


def channels_per_lane(c: int, npu_num: int, start_lane: int = 0) -> int:
    """ceil((Q + C) / X): the block rows a C-channel tensor starting at lane Q needs."""
    return cdiv(start_lane + c, npu_num)


def continuous_strides(shape: tuple[int, int, int, int]) -> Strides:
    """System-memory (GMEM) layout."""
    _, c, h, w = shape
    return Strides(c * h * w, h * w, w, 1)


def eu_elems(eu_bytes: int, dtype: str) -> int:
    return max(1, eu_bytes // dtype_bytes(dtype))


def aligned_strides(shape: tuple[int, int, int, int], dtype: str, eu_bytes: int, npu_num: int,
                    start_lane: int = 0) -> Strides:
    """EU-aligned layout: each channel's H*W padded to whole EU rows."""
    _, c, h, w = shape
    cs = align_up(h * w, eu_elems(eu_bytes, dtype))
    return Strides(cs * channels_per_lane(c, npu_num, start_lane), cs, w, 1)


def compact_strides(shape: tuple[int, int, int, int], npu_num: int, start_lane: int = 0) -> Strides:
    _, c, h, w = shape
    return Strides(h * w * channels_per_lane(c, npu_num, start_lane), h * w, w, 1)


def line_aligned_strides(shape: tuple[int, int, int, int], dtype: str, eu_bytes: int, npu_num: int,
                         start_lane: int = 0) -> Strides:
    """Row (line) aligned layout: each W row padded to whole EU rows."""
    _, c, h, w = shape
    hs = align_up(w, eu_elems(eu_bytes, dtype))
    return Strides(h * hs * channels_per_lane(c, npu_num, start_lane), h * hs, hs, 1)


def ic_interleaved_strides(ic: int, kh: int, kw: int, ic_par: int) -> Strides:
    """64IC/32IC conv-kernel layout: ``ic_par`` input channels innermost."""
    groups = cdiv(ic, ic_par)
    c = ic_par * kw * kh * groups
    return Strides(c, c, ic_par * kw, ic_par)


def lane_of_element(c: int, npu_num: int, start_lane: int = 0) -> tuple[int, int]:
    """(lane, block row) of channel ``c``: channels c0, c1 share a lane iff c0 = c1 mod X (from lane 0)."""
    k = start_lane + c
    return k % npu_num, k // npu_num


def element_offset(index: tuple[int, int, int, int], strides: Strides, npu_num: int,
                   start_lane: int = 0) -> tuple[int, int]:
    """(lane, element offset within the lane, relative to the tensor's offset R)."""
    n, c, h, w = index
    lane, row = lane_of_element(c, npu_num, start_lane)
    return lane, n * strides.n + row * strides.c + h * strides.h + w * strides.w


def lane_elems(shape: tuple[int, int, int, int], strides: Strides, npu_num: int, start_lane: int = 0) -> int:
    """Elements a lane must reserve: one past the last element any lane holds."""
    n, c, h, w = shape
    rows = channels_per_lane(c, npu_num, start_lane)
    return (n - 1) * strides.n + (rows - 1) * strides.c + (h - 1) * strides.h + (w - 1) * strides.w + 1


# --- matrix layout ---------------------------------------------------------------------------

def matrix_shape(rows: int, cols: int, w: int) -> tuple[int, int, int, int]:
    """An N x M matrix viewed as (N, ceil(M/W), 1, W) in the aligned layout."""
    if not 1 <= w <= cols:
        raise ValueError(f"matrix W must be in [1, {cols}], got {w}")
    return (rows, cdiv(cols, w), 1, w)


def matrix_row_elems_per_lane(cols: int, w: int, dtype: str, eu_bytes: int, npu_num: int) -> int:
    """Elements one matrix row takes in each lane: channels-per-lane x EU-aligned W."""
    _, c, _, _ = matrix_shape(1, cols, w)
    return channels_per_lane(c, npu_num) * align_up(w, eu_elems(eu_bytes, dtype))


def last_matrix_channel_elems(cols: int, w: int) -> int:
    """If M is not divisible by W the last channel holds M - W*floor(M/W) elements."""
    return cols - w * (cols // w) if cols % w else w


# --- storage modes ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Stored:
    """A tensor as the hardware sees it after the N-packing storage mode."""

    shape: tuple[int, int, int, int]
    dtype_bytes: int
    dummies: int  # padding elements appended along N


def n_packing(dtype: str, align_4n: bool) -> int:
    """Batch elements packed into one 32-bit word: 4N for 8-bit, 2N for 16-bit (on 4N chips)."""
    if not align_4n:
        return 1
    return {1: 4, 2: 2}.get(dtype_bytes(dtype), 1)


def stored_form(shape: tuple[int, int, int, int], dtype: str, align_4n: bool) -> Stored:
    """4N-mode int8 -> int8x4 of shape (ceil(N/4), C, H, W); 2N-mode int16 -> int16x2."""
    n, c, h, w = shape
    k = n_packing(dtype, align_4n)
    if k == 1:
        return Stored(shape, dtype_bytes(dtype), 0)
    m = cdiv(n, k)
    return Stored((m, c, h, w), 4, m * k - n)


def two_ic_shape(ic: int, oc: int, kh: int, kw: int) -> tuple[tuple[int, int, int, int], int]:
    """2IC mode for fp32 conv weights [I, O, H, W] -> ([ceil(I/2), O, H, W] of fp32x2, dummies)."""
    j = cdiv(ic, 2)
    return (j, oc, kh, kw), 2 * j - ic


# --- bytes per lane for what lgopt allocates ---------------------------------------------------

@lru_cache(maxsize=1 << 16)
def activation_lane_bytes(shape: tuple[int, int, int, int], dtype: str, npu_num: int, eu_bytes: int,
                          align_4n: bool = False, eu_align: bool = True) -> int:
    """Per-lane bytes of an activation slice in the aligned (or compact) layout, from lane 0.

    ``n * ceil(c/X) * align(h*w, EU) * bytes``; on 4N chips N is packed first and
    the EU is counted in 32-bit words, as the hardware does.
    """
    st = stored_form(shape, dtype, align_4n)
    n, c, h, w = st.shape
    eu = max(1, eu_bytes // st.dtype_bytes)
    hw = align_up(h * w, eu) if eu_align else h * w
    return n * channels_per_lane(c, npu_num) * hw * st.dtype_bytes


def conv_filter_lane_bytes(oc: int, ic_per_group: int, kh: int, kw: int, dtype: str, npu_num: int,
                           ic_parallel: int) -> int:
    """Seed "Weight Reorder": filter as [1, oc, 1, ceil(ic/IC_PAR)*kh*kw*IC_PAR], oc over lanes.

    ``IC_PAR = ic_parallel / bytes`` input channels are interleaved innermost, so
    ic is padded to a multiple of IC_PAR; the layout is compact (no EU padding).
    """
    ic_par = max(1, ic_parallel // dtype_bytes(dtype))
    per_oc = cdiv(ic_per_group, ic_par) * ic_par * kh * kw
    return channels_per_lane(oc, npu_num) * per_oc * dtype_bytes(dtype)


def depthwise_filter_lane_bytes(oc: int, kh: int, kw: int, dtype: str, npu_num: int) -> int:
    """Depthwise filter [1, oc, 1, kh*kw]: one kernel per channel, compact."""
    return channels_per_lane(oc, npu_num) * kh * kw * dtype_bytes(dtype)


def bias_lane_bytes(oc: int, npu_num: int, bias_bytes: int = 4) -> int:
    """Bias [1, oc, 1, 1] in 32 bits, compact: ceil(oc/X) * 4."""
    return channels_per_lane(oc, npu_num) * bias_bytes


def merged_coeff_lane_bytes(filter_bytes: int, bias_bytes: int, eu_bytes: int) -> int:
    """Bias merged in front of the filter in one buffer (one DMA), filter start EU-aligned."""
    return (align_up(bias_bytes, eu_bytes) if bias_bytes else 0) + filter_bytes
