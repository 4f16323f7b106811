"""A rule of TPU-MLIR 1.30.2's time-step pass that lgopt's slicing does not have: forks it cannot slice.

TPU-MLIR slices a group backwards from its outputs (``backward_update_slice``).  When a tensor made in the
group is wanted with different rows by two of its uses (one branch reaches the group's outputs through a 3 x 3
conv, which adds halo rows, another through a 1 x 1 conv or straight out of the group), it merges the two
slicings only if every in-group user of the tensor can take margins: a conv, an elementwise binary op, a
Concat or a Slice.  An Upsample, a pool or an activation cannot, and the pass fails with "time step assign
failed" (or the next pass crashes on the table it left half built).  lgopt runs such a group: each slice
computes the union of what its uses want.  Its search must not hand TPU-MLIR one.

TPU-MLIR runs the pass at its own first estimate of the slice counts, not the cache's
(``init_group_data_secs``: each op's whole operands, weights and output per lane over the LMEM, rounded up,
cut along N first, then H).  :func:`tpumlir_fork` checks the fork at the largest of the estimate's H slices,
the group's and two.  yolov5s_like / BM1688: lgopt's group
[128-177], one H slice, holds the neck's Upsample, whose input also leaves the group and whose output feeds a
3 x 3 conv; TPU-MLIR estimated several H slices and refused it (docs/tpu-mlir.md, "Forks, transformer rows
and the reference's casts").  TPU-MLIR's own group [155-181] at two H slices has an Upsample too, followed by
a 1 x 1 conv: its uses want the same rows, and it compiles.

On several cores (BM1688's 2, BM1690's 8) the pass merges less: where the uses want slices that begin on
different rows (a 3 x 3 conv's halo before a 1 x 1 conv's or a store's first row), it fails whatever the users
("multi-branch backward failed", read with TPU-MLIR's layer-group debugger); slices that differ only in where
they end it merges, as on one core (ResNet-50's stage-1 output, wanted by a 1 x 1 conv and a stride-2 1 x 1
downsample, compiles at two H slices).  A group's input is held to the same rule there, though one core loads
it per slice as its uses want: resnet18's residual blocks at two to eight H slices (the input feeds the 3 x 3
conv1 and the Add, or a stride-2 conv1 and the 1 x 1 downsample) are refused on BM1688's 2 cores, in INT8 and
F16, and on BM1690's 8 ("local memory allocate failed"), and compile on one core; the same blocks without the
second use compile.  The exception is BM1688's depthwise conv: a fork whose in-group users
are all depthwise convs compiles there (ConvNeXt-Tiny F16 on 2 cores, 2 of 2: a block's output, stored and read
by the next block's 7 x 7 depthwise conv), where BM1690 refuses the same forks (7 of 7; the debugger names the
depthwise conv).  Over ``benchmarks/settings.py``'s scorings on several cores that lgopt read and TPU-MLIR refused,
the rule names 50 of 94, and none TPU-MLIR compiled.

Also on several cores, TPU-MLIR's allocator refuses a slicing in which a tensor's rows for one H slice end within
the previous slice's (:func:`_nested_window`): its sections are even, and at many slices the clipped bottom
slice's halo reaches back past the slice before.
"""

from __future__ import annotations

from functools import lru_cache

from lgopt.group.slicing import GroupSlicing, SliceError, UpsampleSliceError, slice_group
from lgopt.hw.chip import Chip
from lgopt.hw.sizing import activation_bytes, group_weight_bytes, is_depthwise
from lgopt.model import ops as opsem
from lgopt.model.network import Network

# the chips on which TPU-MLIR 1.30.2 on several cores gives a depthwise conv's input rows before its first
DEPTHWISE_TAKES_OFFSETS = frozenset({"bm1688"})
# the op types whose input TPU-MLIR can give margins (rows beyond what one use wants): Conv2D and the binary
# elementwise ops, Concat and Slice (``backward_update_slice``'s list, in lgopt's op types), and a standalone
# BatchNormalization, which it runs as a per-channel scale (RepGhostNet's fusion_bn on a fork: compiled at two H
# slices on BM1688, the zoo)
MARGIN_TYPES = frozenset({"Conv", "Add", "Sub", "Mul", "Div", "Max", "Min", "Concat", "Slice", "BatchNormalization"})


@lru_cache(maxsize=1 << 12)
def estimated_secs(chip: Chip, net: Network, ops: tuple[str, ...]) -> tuple[int, int]:
    """TPU-MLIR's first (N, H) slice counts for a group: the largest op's whole operands, output and weights
    per lane over the LMEM, rounded up, given to N up to the batch and the rest to H.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.io.problem import load_problem
    >>> net = load_problem("problems/resnet18.json")
    >>> estimated_secs(get_chip("bm1684x"), net, tuple(op.name for op in net.ops[:2]))
    (1, 1)
    """
    most = 0
    for name in ops:
        op = net.op(name)
        lane = sum(activation_bytes(chip, net.tensor(t), net.tensor(t).n, net.tensor(t).h)
                   for t in op.inputs + op.outputs)
        most = max(most, lane + group_weight_bytes(chip, net, op))
    total = -(-most // chip.lmem_bytes)
    batch = min(net.tensor(t).n for o in ops for t in net.op(o).outputs)
    n = min(batch, total)
    return n, -(-total // n)


def tpumlir_fork(chip: Chip, net: Network, ops: tuple[str, ...], h_slices: int) -> str:
    """Why TPU-MLIR's time-step pass may refuse this group (``""``: not on this rule): a tensor whose uses want
    different rows, with a user that cannot take margins, or an Upsample whose output slices miss its factor,
    at the H slices TPU-MLIR may try: the group's, its estimate's, and at least two.  lgopt's estimate is a
    floor of TPU-MLIR's (it leaves out the ops' scratch and the f32 copies of the ops TPU-MLIR computes in f32),
    and the compiler's own one-slice groups show the rule only bites where TPU-MLIR's estimate slices H, so the
    check is a caution for groups TPU-MLIR has not compiled, not a predictor: over the calibration's groups
    it flags 3 of the 12 TPU-MLIR failed to build and 65 of the 4,041 it compiled (``docs/tpu-mlir.md``).
    The several-core rule (slices from different first rows) is checked where the group or the estimate slices
    H, not at two: it would refuse every new one-slice group holding a residual block, which compile.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.io.problem import load_problem
    >>> net = load_problem("problems/resnet18.json")
    >>> tpumlir_fork(get_chip("bm1684x"), net, tuple(op.name for op in net.ops[:3]), 1)
    ''
    >>> block, two = tuple(op.name for op in net.ops[4:8]), get_chip("bm1688", {"used_cores": 2})
    >>> tpumlir_fork(two, net, block, 1), tpumlir_fork(two, net, block, 2)[:40]
    ('', '/Relu_14_output_0 is wanted from differe')
    """
    order = tuple(sorted(ops, key=net.op_index.__getitem__))
    hs = max(h_slices, estimated_secs(chip, net, ops)[1])
    return _fork(net, order, max(hs, 2), "") or (_fork(net, order, hs, _several(chip)) if hs > 1 else "")


def forced_fork(chip: Chip, net: Network, ops: tuple[str, ...], h_slices: int) -> str:
    """Why TPU-MLIR refuses a group forced at ``h_slices`` by a layer-group cache (``""``: not on this rule): the
    fork rules of :func:`tpumlir_fork` at the cache's own H slices, which TPU-MLIR takes as given
    (``use_layergroup_cache``).  The reader's check: over ``benchmarks/settings.py``'s INT8 scorings on one core
    it names 7 TPU-MLIR refused and none it compiled.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.io.problem import load_problem
    >>> net = load_problem("problems/resnet18.json")
    >>> block = tuple(op.name for op in net.ops[4:8])  # an Add whose output a 3 x 3 conv and the next Add read
    >>> forced_fork(get_chip("bm1688"), net, block, 2)
    ''
    >>> forced_fork(get_chip("bm1688", {"used_cores": 2}), net, block, 2).split(": ")[0]
    '/Relu_14_output_0 is wanted from different first rows by its uses (/Conv_16, /Add_22)'
    """
    if h_slices <= 1:
        return ""
    return _fork(net, tuple(sorted(ops, key=net.op_index.__getitem__)), h_slices, _several(chip))


def _several(chip: Chip) -> str:
    """The chip's name when it runs several cores (the key of the several-core fork rule), else ``""``."""
    return chip.name if chip.used_cores > 1 else ""


@lru_cache(maxsize=1 << 12)
def _fork(net: Network, ops: tuple[str, ...], h_slices: int, multicore_chip: str) -> str:
    try:
        sl = slice_group(net, ops, 1, h_slices, h_ratio=None)
    except UpsampleSliceError as e:  # TPU-MLIR's Upsample rule fails in the same pass
        return f"{e} (at {h_slices} H slices)"
    except SliceError:  # other limits (a group output lower than the slices) cap TPU-MLIR's counts instead
        return ""
    inside = set(ops)
    for t in sl.windows:
        made = net.producer.get(t)
        loaded = made is None or made.name not in inside  # a group input: on one core loaded as its uses want
        if loaded and not multicore_chip:
            continue
        users = [o.name for o in net.consumers.get(t, ()) if o.name in inside]
        wanted: list[tuple[tuple[int, int], ...]] = []
        if t in sl.stores:
            wanted.append(tuple(w.h for w in sl.stores[t]))
        for u in users:
            op = net.op(u)
            out = net.tensor(op.outputs[0])
            for k, name in enumerate(op.inputs):
                if name == t:
                    wanted.append(tuple(opsem.backward_h(op, k, w.h, net.tensor(t).h, out.h)
                                        for w in sl.windows[op.outputs[0]]))
        if len(set(wanted)) > 1:
            stuck = [u for u in users if net.op(u).type not in MARGIN_TYPES]
            if stuck and not loaded:
                return (f"{t} is wanted with different rows by its uses and {stuck[0]} ({net.op(stuck[0]).type}) "
                        f"cannot take margins: TPU-MLIR's time-step pass fails at {h_slices} H slices")
            offsets = multicore_chip in DEPTHWISE_TAKES_OFFSETS and all(is_depthwise(net.op(u)) for u in users)
            if multicore_chip and not offsets and len({tuple(first for first, _ in rows) for rows in wanted}) > 1:
                return (f"{'group input ' if loaded else ''}{t} is wanted from different first rows by its uses "
                        f"({', '.join(users)}{' and its store' if t in sl.stores else ''}): on several cores "
                        f"TPU-MLIR's time-step pass does not merge such slicings and fails at {h_slices} H slices")
    nested = _nested_window(sl) if multicore_chip else ""
    if nested:
        return f"{nested}: on several cores TPU-MLIR's allocator refuses such slices ({h_slices} H slices)"
    return ""


def _nested_window(sl: GroupSlicing) -> str:
    """A tensor whose rows for one H slice end where (or before) the previous slice's end, the halo of a
    clipped bottom slice reaching back past the slice before (``""``: none).  TPU-MLIR 1.30.2 refused every
    such slicing forced on several cores (session 26, one group at a time: ShuffleNet-V2's stage-3 branch, 14
    rows, at 8 H slices on BM1690 INT8 and BM1688 INT8 and F16, where 7 compile; VGG-16's conv5 pair at 5-7, where
    3 and 4 compile, its conv4 pair at 14, where 7 compiles) and compiled every slicing of those groups without one.

    >>> from lgopt.io.problem import load_problem
    >>> net = load_problem("problems/resnet18.json")
    >>> ops = tuple(op.name for op in net.ops[1:3])
    >>> _nested_window(slice_group(net, ops, 1, 2, h_ratio=None))
    ''
    """
    h, w = sl.h_slices, sl.w_slices
    for t, ws in sl.windows.items():
        if len(ws) != sl.num_slices:
            continue
        for base in range(sl.n_slices * sl.c_slices):
            for wi in range(w):
                run = [ws[(base * h + hi) * w + wi].h for hi in range(h)]
                bad = next((i for i in range(1, h) if run[i] != run[i - 1] and run[i][1] <= run[i - 1][1]), None)
                if bad is not None:
                    return f"{t}'s rows {run[bad]} in H slice {bad} end within slice {bad - 1}'s {run[bad - 1]}"
    return ""
