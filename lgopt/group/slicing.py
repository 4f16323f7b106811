"""Slicing a candidate group along N, channels (heads), H and W, and the h/2 rule.

The group outputs are split as evenly as possible (slice sizes differ by at
most one unit); every other tensor's per-slice window is inferred backwards
through the ops (:func:`lgopt.model.ops.backward_h`, ``backward_w``), a tensor with several in-group
consumers taking the union of what they need.  Slices run N-major, W innermost: slice
``s = (ni * h_slices + hi) * w_slices + wi`` (TPU-MLIR's loop nest, W last).

**W slices** are what TPU-MLIR uses once N and H are exhausted (its ``shape_secs`` ``[n, c, d, h, w]``, e.g.
``[1, 1, 1, 16, 2]`` on yolov5s_like / BM1688): columns get windows with halos exactly as rows do, and an op
allows W slicing exactly where it allows H slicing (sliding windows, elementwise, resize, concat, views that
keep H and therefore W; not global pooling, not a row-wise Softmax or LayerNorm, which needs every column of
its row).  With ``w_slices == 1`` every window holds all columns (``SliceWindow.w`` is the whole width), so
nothing changes for plans that do not slice W.  The reader of TPU-MLIR's caches builds them.

**Column (C/OC) slicing** of transformer groups is W slicing of rank-3 tensors, whose last axis (a MatMul's
output columns N) folds onto W: a MatMul reads every column of its A (the contracted K) for any output
columns, and with a ``[K, N]`` weight it needs only the weight's columns of its slice, which the timestep table
then reloads per slice (:mod:`lgopt.group.timestep`).  What is supported: a run of column-local ops
(elementwise ops, MatMuls with weights whose output columns are sliced, SwiGLU's gate, up, SiLU and Mul) W-sliced
with their weights reloaded per slice.  A MatMul that contracts over a sliced axis (the down projection after
them) reads its A whole, so in the same group it forces its producers to compute every column (correct, and
priced as such); partial-sum accumulation over K slices is not implemented, so the searches end the group
there in practice.  Greedy and CP-SAT choose W slices after N and H.

**Channel (heads) slicing** cuts the channels of a group whose every op keeps each channel to itself
(:func:`lgopt.model.ops.channel_reason`): an attention's heads lie on the channels of ``[B, heads, T, D]``, and
K transposed on each lane, Q x K^T, its scale, Softmax over the keys and x V compute each head alone.  A slice
holds its run of heads of every tensor (a broadcast operand's single channel whole), TPU-MLIR's ``csecs``.  It
pays where the heads outnumber the lanes (a lane then holds one head of a slice instead of several); where they
do not, a lane holds one head either way and each slice costs the vector units what the whole did.  It is also
the one cut of a group that transposes K on the lanes, which H slicing cannot cut.

The **h/2 rule** (seed "LayerGroup"): a group fails when, for some tensor, the
rows loaded or computed more than once, ``sum(slice heights) - H``, exceed
``ratio * H`` (default ratio 0.5).  With h = 100, windows [0,80) and [20,100)
duplicate 60 rows and fail; [0,60) and [20,100) duplicate 40 and pass.  lgopt
also requires every H slice to advance past the previous one.  W, the other halo axis, has the rule's
analogue (:func:`check_column_halos`); channels have no halo.

``h_ratio=None`` is TPU-MLIR 1.30.2's rule instead (shared/reference s3.5): its
``check_hsecs`` call is commented out and it compiles slices that do not advance
(the calibration groupings show both on BM1684X and BM1688), so only an empty
slice fails, and a nearest Resize by a whole factor (TPU-MLIR's Upsample) needs
output slices aligned to the factor.  lgopt reads the compiler's own groupings under that rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from lgopt.errors import LgoptError
from lgopt.hw.layout import cdiv
from lgopt.model import ops as opsem
from lgopt.model.network import Network, Op

Window = tuple[int, int]
DEFAULT_H_RATIO = 0.5


class SliceError(LgoptError):
    """This (group, n_slices, h_slices) cannot be sliced; the message says why."""


class UpsampleSliceError(SliceError):
    """An output slice of a nearest Resize by a whole factor misses a multiple of the factor (TPU-MLIR's
    Upsample rule, :func:`_check_upsample`)."""


@dataclass(frozen=True)
class SliceWindow:
    """What one slice of one tensor covers: batches ``n``, rows ``h``, columns ``w`` and, in a group cut into
    channel (heads) slices, channels ``c`` (half-open; ``None``: every channel)."""

    n: Window
    h: Window
    w: Window
    c: Window | None = None

    @property
    def n_len(self) -> int:
        return self.n[1] - self.n[0]

    @property
    def h_len(self) -> int:
        return self.h[1] - self.h[0]

    @property
    def w_len(self) -> int:
        return self.w[1] - self.w[0]

    @property
    def c_len(self) -> int | None:
        return None if self.c is None else self.c[1] - self.c[0]

    @property
    def shape(self) -> tuple[int, int, int, int | None]:
        """(batches, rows, columns, channels or None for all): what buffer sizes and costs depend on."""
        return self.n_len, self.h_len, self.w_len, self.c_len


@dataclass(frozen=True)
class GroupIO:
    inputs: tuple[str, ...]  # activations the group loads from GMEM
    outputs: tuple[str, ...]  # activations the group stores to GMEM
    internal: tuple[str, ...]  # activations that never leave LMEM


@dataclass(frozen=True)
class GroupSlicing:
    ops: tuple[str, ...]
    n_slices: int
    h_slices: int
    io: GroupIO
    windows: Mapping[str, tuple[SliceWindow, ...]]  # every group tensor, one window per slice
    stores: Mapping[str, tuple[SliceWindow, ...]]  # group outputs: the part each slice writes back
    w_slices: int = 1
    c_slices: int = 1

    @property
    def num_slices(self) -> int:
        return self.n_slices * self.c_slices * self.h_slices * self.w_slices


def even_split(length: int, parts: int, unit: int = 1) -> list[Window]:
    """``parts`` half-open ranges covering [0, length), sizes in whole ``unit``s differing by at most one unit.

    >>> even_split(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    units = cdiv(length, unit)
    if parts < 1 or parts > units:
        raise SliceError(f"cannot split {length} into {parts} non-empty parts of unit {unit}")
    base, extra = divmod(units, parts)
    out, start = [], 0
    for i in range(parts):
        size = (base + (1 if i < extra else 0)) * unit
        out.append((start, min(length, start + size)))
        start += size
    return out


def group_io(net: Network, ops: Iterable[str]) -> GroupIO:
    names = list(ops)
    members = set(names)
    produced: list[str] = []
    consumed: list[str] = []
    for name in names:
        op = net.op(name)
        consumed.extend(op.inputs)
        produced.extend(op.outputs)
    prod_set = set(produced)
    inputs = tuple(dict.fromkeys(t for t in consumed if t not in prod_set))
    net_out = set(net.outputs)
    outputs = tuple(t for t in produced
                    if t in net_out or any(c.name not in members for c in net.consumers.get(t, ())))
    out_set = set(outputs)
    internal = tuple(t for t in produced if t not in out_set)
    return GroupIO(inputs, outputs, internal)


def _check_members(net: Network, names: Sequence[str], n_slices: int, h_slices: int, w_slices: int,
                   c_slices: int = 1) -> list[Op]:
    if not names:
        raise SliceError("empty group")
    if n_slices < 1 or h_slices < 1 or w_slices < 1 or c_slices < 1:
        raise SliceError(f"slice counts must be positive (n={n_slices}, c={c_slices}, h={h_slices}, w={w_slices})")
    ops = [net.op(n) for n in names]
    order = net.op_index
    if [order[o.name] for o in ops] != sorted(order[o.name] for o in ops):
        raise SliceError("group ops are not in the network's topological order")
    for op in ops:
        if not op.local:
            raise SliceError(f"op {op.name} ({op.type}) is a global layer: {op.reason}")
        if h_slices > 1 and not op.h_split:
            raise SliceError(f"op {op.name} ({op.type}) does not allow slicing H")
        if w_slices > 1 and not op.h_split:  # W is sliceable exactly where H is (module docstring)
            raise SliceError(f"op {op.name} ({op.type}) does not allow slicing W")
        spec = opsem.OP_SPECS.get(op.type)
        if w_slices > 1 and spec is not None and spec.family is opsem.Family.ROWWISE:
            raise SliceError(f"op {op.name} ({op.type}) normalises whole rows: a group with it may not slice W")
        if n_slices > 1 and not op.n_split:
            raise SliceError(f"op {op.name} ({op.type}) does not allow slicing N")
        if c_slices > 1 and (why := opsem.channel_reason(net, op)):
            raise SliceError(f"op {op.name} ({op.type}) {why}: a group with it may not be cut into channel slices")
    return ops


def slice_group(net: Network, names: Sequence[str], n_slices: int, h_slices: int, *, w_slices: int = 1,
                n_unit: int = 1, h_ratio: float | None = DEFAULT_H_RATIO, c_slices: int = 1) -> GroupSlicing:
    """Per-slice windows of every tensor in the group, or :class:`SliceError` naming the rule broken.

    Slices run in TPU-MLIR's loop order: ``s = ((ni * c_slices + ci) * h_slices + hi) * w_slices + wi``.
    ``c_slices`` > 1 cuts the channels (an attention's heads) of a group of channel-local ops
    (:func:`lgopt.model.ops.channel_reason`): every slice holds its run of channels of every tensor, a
    broadcast operand's single channel whole."""
    ops = _check_members(net, names, n_slices, h_slices, w_slices, c_slices)
    io = group_io(net, names)
    batch = max(net.tensor(t).n for t in io.outputs)
    n_parts = even_split(batch, n_slices, n_unit)
    stores: dict[str, tuple[SliceWindow, ...]] = {}
    for t in io.outputs:
        ten = net.tensor(t)
        if ten.h < h_slices:
            raise SliceError(f"h_slices={h_slices} exceeds the height {ten.h} of group output {t}")
        if ten.w < w_slices:
            raise SliceError(f"w_slices={w_slices} exceeds the width {ten.w} of group output {t}")
        if ten.c < c_slices:
            raise SliceError(f"c_slices={c_slices} exceeds the {ten.c} channels of group output {t}")
        hs = even_split(ten.h, h_slices)
        cs = even_split(ten.w, w_slices)
        chans: list[Window | None] = list(even_split(ten.c, c_slices)) if c_slices > 1 else [None]
        ns = n_parts if ten.n == batch else [(0, ten.n)] * n_slices
        stores[t] = tuple(SliceWindow(n, h, c, ch) for n in ns for ch in chans for h in hs for c in cs)
    num = n_slices * c_slices * h_slices * w_slices
    need: dict[str, list[SliceWindow | None]] = {t: list(w) for t, w in stores.items()}
    for op in reversed(ops):
        out = op.outputs[0]
        out_t = net.tensor(out)
        wins = need.get(out)
        if wins is None:
            raise SliceError(f"op {op.name} has an output nobody in or after the group uses")
        if h_ratio is None and h_slices > 1:
            _check_upsample(op, [w.h if w else None for w in wins], net.tensor(op.inputs[0]).h if op.inputs else 0,
                            out_t.h, "rows")
        if h_ratio is None and w_slices > 1:
            _check_upsample(op, [w.w if w else None for w in wins], net.tensor(op.inputs[0]).w if op.inputs else 0,
                            out_t.w, "columns")
        for k, t in enumerate(op.inputs):
            ten = net.tensor(t)
            cur = need.setdefault(t, [None] * num)
            for s, w in enumerate(wins):
                assert w is not None
                hw = opsem.backward_h(op, k, w.h, ten.h, out_t.h)
                nw = opsem.backward_n(op, k, w.n, ten.n)
                cw = opsem.backward_w(op, k, w.w, ten.w, out_t.w) if w_slices > 1 else (0, ten.w)
                chw = None if w.c is None else opsem.backward_c(w.c, ten.c)
                prev = cur[s]
                cur[s] = SliceWindow(nw, hw, cw, chw) if prev is None else SliceWindow(
                    opsem.window_union(prev.n, nw), opsem.window_union(prev.h, hw), opsem.window_union(prev.w, cw),
                    None if chw is None else opsem.window_union(prev.c, chw))
    windows = {t: tuple(w for w in ws if w is not None) for t, ws in need.items()}
    for t, ws in windows.items():
        check_windows(t, net.tensor(t).h, ws, h_slices, h_ratio, w_slices, net.tensor(t).w)
    return GroupSlicing(tuple(names), n_slices, h_slices, io, windows, stores, w_slices, c_slices)


def _check_upsample(op: Op, wins: Sequence[Window | None], in_size: int, out_size: int, what: str) -> None:
    """TPU-MLIR's rule for a nearest Resize by a whole factor (its Upsample): every output slice starts and
    ends on a multiple of the factor (reference s3.5), so each reads whole input rows (columns, when W is
    sliced)."""
    if op.type != "Resize" or op.attrs.get("mode") != "nearest" or not in_size or out_size % in_size \
            or out_size == in_size:
        return
    f = out_size // in_size
    for w in wins:
        if w is not None and (w[0] % f or (w[1] % f and w[1] != out_size)):
            raise UpsampleSliceError(f"TPU-MLIR's Upsample {op.name} needs output slices on multiples of its "
                                     f"factor {f}; a slice covers {what} {w[0]}:{w[1]}")


def check_windows(tensor: str, height: int, ws: Sequence[SliceWindow], h_slices: int,
                  h_ratio: float | None = DEFAULT_H_RATIO, w_slices: int = 1, width: int = 0) -> None:
    """Empty, non-advancing and h/2 checks for one tensor's windows (N-major slice order, W innermost: the H
    rule looks at each H slice's first W slice, the rows do not depend on the columns), and the rule's
    analogue on W's halos (:func:`check_column_halos`); with ``h_ratio=None`` (TPU-MLIR's rule) only the
    empty check."""
    for s, w in enumerate(ws):
        if w.n_len <= 0 or w.h_len <= 0 or w.w_len <= 0 or (w.c_len is not None and w.c_len <= 0):
            raise SliceError(f"slice {s} of tensor {tensor} is empty (n={w.n}, h={w.h}, w={w.w}, c={w.c})")
    if h_ratio is not None and w_slices > 1 and width > 1:
        check_column_halos(tensor, width, ws, w_slices, h_ratio)
    if h_slices <= 1 or height <= 1 or h_ratio is None:
        return
    by_h = ws[::w_slices]
    for start in range(0, len(by_h), h_slices):
        _check_run(tensor, height, [w.h for w in by_h[start:start + h_slices]], "H", h_ratio)


def check_column_halos(tensor: str, width: int, ws: Sequence[SliceWindow], w_slices: int, ratio: float) -> None:
    """The h/2 rule's analogue on W, the other halo axis: within each run of W slices (W innermost), a
    tensor's column windows advance and the columns repeated by halos stay within ``ratio * W``.  A run in
    which every slice holds every column is exempt: that is an operand read whole (a column-sliced MatMul's
    A, whose K columns every output column reads), reloaded per slice, not a halo.

    >>> ws = [SliceWindow((0, 1), (0, 4), (0, 7)), SliceWindow((0, 1), (0, 4), (3, 10))]
    >>> check_column_halos("x", 10, ws, 2, 0.5)  # 4 columns repeated of 10: within 5
    >>> try:
    ...     check_column_halos("x", 10, ws, 2, 0.3)
    ... except SliceError as e:
    ...     print(e)
    w/2 rule: tensor x repeats 4 of its 10 columns over 2 W slices (limit 0.3 x W)
    """
    for start in range(0, len(ws), w_slices):
        run = [w.w for w in ws[start:start + w_slices]]
        if any(c != (0, width) for c in run):
            _check_run(tensor, width, run, "W", ratio)


def _check_run(tensor: str, size: int, run: Sequence[Window], axis: str, ratio: float) -> None:
    """One run of slices along a halo axis (``"H"`` rows, ``"W"`` columns): every window advances past the one
    before, and the elements repeated stay within ``ratio * size`` (the h/2 rule, or its W analogue)."""
    what = "rows" if axis == "H" else "columns"
    for i in range(1, len(run)):
        if run[i][0] < run[i - 1][0] or run[i][1] <= run[i - 1][1]:
            raise SliceError(f"tensor {tensor}: {axis} slice {i} ({run[i]}) does not advance past slice {i - 1} "
                             f"({run[i - 1]})")
    dup = h_overlap(size, run)
    if dup > ratio * size:
        raise SliceError(f"{axis.lower()}/2 rule: tensor {tensor} repeats {dup} of its {size} {what} over "
                         f"{len(run)} {axis} slices (limit {ratio:g} x {axis})")


def h_overlap(height: int, windows: Sequence[Window]) -> int:
    """Rows loaded or computed more than once: sum of slice heights minus H."""
    return sum(b - a for a, b in windows) - height
