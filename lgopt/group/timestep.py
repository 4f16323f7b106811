"""The timestep table of a group and the lifetimes of its buffers.

Seed "Dividing the Mem Cycle" and shared/reference s4.1-4.5, in :func:`schedule_group`:

* one op per row; a load sits one row before the first use of what it loads,
  a store one row after production (later if an op still reads the tensor in
  that row: GDMA and the NPU do not touch one tensor in the same row);
* the 3-stage software pipeline: loads for the first op go in the last row and
  serve the *next* slice (stage 0); stores that fall past the last row wrap to
  the first rows and serve the *previous* slice (stage 2).  An extra row is
  appended when a wrap would make a buffer collide with its own next slice;
* lifetimes are wrap-around intervals over the rows;
* weights: resident for the whole loop when the group is sliced (the seed's end
  point "corrected to positive infinity", loaded once before the loop); in an
  unsliced group they are ordinary buffers, loaded while the previous weighted
  op computes (the seed's w4 moved from [T5,T5] to [T2,T5]).  A sliced group
  whose weights together fill LMEM cannot hold them: as TPU-MLIR 1.30 does
  (reference s4.5, "holding is cancelled"), they are then loaded like an
  unsliced group's, once per slice (:func:`holds_weights`);
* column slicing (issue 16): in a W-sliced group, a MatMul whose weight can be cut by output columns and whose
  output is cut by W loads only its slice's columns of the weight, once per slice, in its own buffer sized for
  the widest slice (:func:`column_sliced_ops`); the other weights follow the rules above;
* scratch lives in its op's row;
* buffer ids are assigned breadth-first over the group's DAG.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from lgopt.group.handover import store_skipped
from lgopt.group.slicing import GroupSlicing, SliceError, SliceWindow
from lgopt.hw.chip import Chip
from lgopt.hw.sizing import activation_bytes, column_weights, group_weight_bytes, scratch_bytes, weight_bytes
from lgopt.model.network import Network
from lgopt.model.plan import Buffer, GroupPlan, Row, Stage, Transfer, core_chunks


@dataclass(frozen=True)
class Event:
    row: int
    stage: int  # 0, 1 or 2, as in Transfer.stage; op events are stage 1
    what: str  # load | use | produce | store

    def time(self, num_rows: int) -> int:
        """Position on the unrolled timeline of the slice this event serves."""
        return -Stage(self.stage).serves * num_rows + self.row


def interval(events: list[Event], num_rows: int, name: str) -> tuple[int, int]:
    """(start row, end row) of the wrap-around interval covering ``events``."""
    times = [e.time(num_rows) for e in events]
    lo, hi = min(times), max(times)
    if hi - lo + 1 > num_rows:
        raise SliceError(f"timestep table: {name} would live {hi - lo + 1} rows, longer than one iteration "
                         f"({num_rows} rows)")
    return lo % num_rows, hi % num_rows


def _breadth_first_ops(net: Network, ops: tuple[str, ...]) -> list[str]:
    """Ops by depth from the group's inputs (a breadth-first layering), ties in network order."""
    depth: dict[str, int] = {}
    producer_in_group: dict[str, str] = {}
    for name in ops:
        op = net.op(name)
        depth[name] = 1 + max((depth[producer_in_group[t]] for t in op.inputs if t in producer_in_group), default=-1)
        for t in op.outputs:
            producer_in_group[t] = name
    return sorted(ops, key=lambda n: (depth[n], net.op_index[n]))


def _place_stores(net: Network, ops: tuple[str, ...], outputs: tuple[str, ...], num_rows: int
                  ) -> dict[str, tuple[int, int]] | None:
    """Store row and stage per group output; None when a wrap needs one more row.

    Each store goes one row after its producer, as TPU-MLIR's nearest assignment puts it (reference s4.1),
    also when an op of that row reads the tensor (the store and the op only read the buffer): yolov5s's
    ``Concat_1`` on BM1688, stored in the row of the conv that reads it, is not live into the next slice's
    first row, which its group's allocation needs."""
    prod = {t: i for i, o in enumerate(ops) for t in net.op(o).outputs}
    k = len(ops)
    placed: dict[str, tuple[int, int]] = {}
    for t in outputs:
        j = prod[t]
        r = j + 1
        if k > 1 and r == k:
            # the last op's stores go to op0's row of the next slice (reference s4.2), also when a row was
            # appended for the next slice's loads: that row holds loads only.  MobileNetV2 / BM1688's
            # features.3 group (its Add reads the group's input) stores under the next slice's first conv
            placed[t] = (0, 2)
        elif r < num_rows:
            placed[t] = (r, 1)
        else:
            wrapped = r - num_rows
            if wrapped >= j:  # would still be live when the next slice produces it
                return None
            placed[t] = (wrapped, 2)
    return placed


def schedule_group(net: Network, chip: Chip, sl: GroupSlicing, prefetch: int = 1,
                   kept_in: tuple[str, ...] = (), kept_out: tuple[str, ...] = (), f32_copies: tuple[str, ...] = (),
                   receivers: tuple[str, ...] = (), reload_columns: bool = True, sections: int | None = None
                   ) -> GroupPlan:
    """Timestep table and sized, unplaced buffers for one sliced group.

    ``prefetch`` (unsliced groups): a weight is loaded in the row of the
    ``prefetch``-th previous weighted op, so larger values hide weight DMA under
    more compute at the price of LMEM; 1 is the seed's rule.
    ``kept_in`` / ``kept_out``: tensors the previous group hands over in LMEM
    (not loaded) and that this group hands to the next (stored only if someone
    else reads them); both held whole and resident (:mod:`lgopt.group.handover`).
    ``reload_columns``: a W-sliced group's MatMuls load only their slice's weight columns, per slice (column
    slicing); False loads weights whole as TPU-MLIR 1.30 does (its weight reload is disabled), for the reader
    of its caches.
    ``receivers``: the ops of the group receiving ``kept_out``, when the caller knows it: a handed-over tensor
    that only they read is not stored (without it, only when the first of them is its sole reader).
    ``f32_copies``: tensors the compiler also holds as f32 in the group (the casts TPU-MLIR's F16 lowering
    inserts: the f32 network input it loads and converts, ops it computes in f32); their buffers are widened
    by the f32 copy of the slice, the LMEM the compiler needs for them (costs are not changed).
    ``sections``: the sections the compiler's allocator sees, where they are more than the slices run (a
    TPU-MLIR cache's ``hsecs`` beyond an output's rows: :func:`holds_weights`).
    """
    ops = sl.ops
    k = len(ops)
    kept = set(kept_in) | set(kept_out)
    if kept and sl.c_slices > 1:
        raise SliceError("a group cut into channel slices holds no tensor whole for a hand-over")
    if kept and chip.used_cores > 1:
        raise SliceError("several cores: each core has its own LMEM, so no tensor is handed over in it")
    if kept_out:
        after = net.op_index[ops[-1]] + 1
        rec = set(receivers)  # the receiving group's ops, when known: a tensor only they read needs no store
        skipped = {t for t in kept_out if store_skipped(net, t, after)
                   or rec and t not in net.outputs and all(c.name in rec for c in net.consumers.get(t, ()))}
    else:
        skipped = set()
    loaded = tuple(t for t in sl.io.inputs if t not in kept_in)
    stored = tuple(t for t in sl.io.outputs if t not in skipped)
    uses: dict[str, list[int]] = {}
    for i, name in enumerate(ops):
        for t in dict.fromkeys(net.op(name).inputs):
            uses.setdefault(t, []).append(i)
    weighted = [i for i, name in enumerate(ops) if weight_bytes(chip, net.op(name))]
    by_cols = column_sliced_ops(net, sl) if reload_columns else frozenset()
    hold = holds_weights(net, chip, sl, by_cols, sections)

    num_rows, stores = _rows_and_stores(net, ops, loaded, stored, uses, weighted, hold)
    loads: dict[int, list[Transfer]] = {r: [] for r in range(num_rows)}
    st: dict[int, list[Transfer]] = {r: [] for r in range(num_rows)}
    events = _activation_events(net, ops, num_rows, kept_in, loaded, stores, uses, loads, st)
    preloads = _weight_loads(ops, weighted, hold, prefetch, num_rows, loads, events, by_cols)
    buffers = _buffers(net, chip, sl, kept, num_rows, events, hold, frozenset(f32_copies), by_cols)

    rows = tuple(Row((ops[r],) if r < k else (), tuple(loads[r]), tuple(st[r])) for r in range(num_rows))
    wsl = sl.w_slices > 1  # columns are recorded only when W is sliced (GroupPlan)
    return GroupPlan(ops, sl.n_slices, sl.h_slices, rows, tuple(preloads), buffers,
                     {t: tuple((w.n[0], w.n[1], w.h[0], w.h[1]) for w in ws) for t, ws in sl.windows.items()},
                     {t: tuple((w.n[0], w.n[1], w.h[0], w.h[1]) for w in ws) for t, ws in sl.stores.items()
                      if t not in skipped},
                     kept_in=tuple(kept_in), kept_out=tuple(kept_out), w_slices=sl.w_slices,
                     w_windows={t: tuple(w.w for w in ws) for t, ws in sl.windows.items()} if wsl else {},
                     w_stores={t: tuple(w.w for w in ws) for t, ws in sl.stores.items() if t not in skipped}
                     if wsl else {},
                     weight_cols={o: tuple(w.w for w in sl.windows[net.op(o).outputs[0]]) for o in ops if o in by_cols},
                     f32_in=tuple(t for t in loaded if t in f32_copies and t in net.inputs),
                     f32_out=tuple(t for t in stored if t in f32_copies and t in net.outputs),
                     c_slices=sl.c_slices, c_windows=_channels(sl.windows) if sl.c_slices > 1 else {},
                     c_stores=_channels({t: ws for t, ws in sl.stores.items() if t not in skipped})
                     if sl.c_slices > 1 else {},
                     core_slices=core_chunks(sl.n_slices * sl.c_slices * sl.h_slices * sl.w_slices, chip.used_cores)
                     if chip.used_cores > 1 else ())


def _channels(windows: Mapping[str, tuple[SliceWindow, ...]]) -> dict[str, tuple[tuple[int, int], ...]]:
    """The channels of every window of a group cut into channel slices (each window gives them)."""
    return {t: tuple(w.c if w.c is not None else (0, 0) for w in ws) for t, ws in windows.items()}


def column_sliced_ops(net: Network, sl: GroupSlicing) -> frozenset[str]:
    """The ops of a W-sliced group that load only their slice's columns of their weights, per slice: MatMuls
    whose weights can be cut by columns (:func:`lgopt.hw.sizing.column_weights`) and whose output some slice
    does not hold whole (when every slice computes every column, the weight is needed whole anyway)."""
    if sl.w_slices <= 1:
        return frozenset()
    out = set()
    for name in sl.ops:
        op = net.op(name)
        if column_weights(op):
            width = net.tensor(op.outputs[0]).w
            if any(w.w != (0, width) for w in sl.windows[op.outputs[0]]):
                out.add(name)
    return frozenset(out)


def column_weight_bytes(net: Network, chip: Chip, sl: GroupSlicing, name: str) -> int:
    """Bytes per lane of the weight buffer of column-sliced op ``name``: its widest slice's columns."""
    op = net.op(name)
    return max(group_weight_bytes(chip, net, op, w.w_len) for w in sl.windows[op.outputs[0]])


def holds_weights(net: Network, chip: Chip, sl: GroupSlicing, by_cols: frozenset[str] = frozenset(),
                  sections: int | None = None) -> bool:
    """Whether the group's weights stay resident across its slices: it is sliced and they fit in LMEM
    (TPU-MLIR's rule: holding is cancelled when the held bytes reach LMEM's size).  Weights reloaded by
    columns (``by_cols``) are never held and do not count.  ``sections`` (default: the slices) is what
    "sliced" is judged by: TPU-MLIR's allocator holds the weights of a group whose ``shape_secs`` ask for more
    than one section even where its codegen drops the empty ones and runs one (MNASNet's 56-op tail group at
    ``hsecs = 2`` before a one-row pool: refused on BM1688 INT8, 1 and 2 cores; at ``hsecs = 1`` it compiles)."""
    if (sl.num_slices if sections is None else max(sections, sl.num_slices)) <= 1:
        return False
    return sum(group_weight_bytes(chip, net, net.op(o)) for o in sl.ops if o not in by_cols) < chip.lmem_bytes


def _rows_and_stores(net: Network, ops: tuple[str, ...], loaded: tuple[str, ...], stored: tuple[str, ...],
                     uses: dict[str, list[int]], weighted: list[int], hold: bool
                     ) -> tuple[int, dict[str, tuple[int, int]]]:
    """Row count and store (row, stage) per output: a row is appended until no wrap collides with itself."""
    k = len(ops)
    # rows: one per op, plus a tail row when the next slice's first loads cannot share the last op's row
    extra = int(k == 1 or any(uses[t][0] == 0 and uses[t][-1] == k - 1 for t in loaded))
    if not hold and weighted and weighted[0] == 0 and k == 1:
        extra = 1
    stores = None
    while stores is None:
        num_rows = k + extra
        stores = _place_stores(net, ops, stored, num_rows)
        extra += stores is None
        if extra > 3:
            raise SliceError("timestep table: cannot place the group's stores")
    return num_rows, stores


def _activation_events(net: Network, ops: tuple[str, ...], num_rows: int, kept_in: tuple[str, ...],
                       loaded: tuple[str, ...], stores: dict[str, tuple[int, int]], uses: dict[str, list[int]],
                       loads: dict[int, list[Transfer]], st: dict[int, list[Transfer]]
                       ) -> dict[tuple[str, str], list[Event]]:
    """Place activation loads and stores in ``loads`` / ``st``; return every event that bounds a lifetime."""
    events: dict[tuple[str, str], list[Event]] = {}
    for t in kept_in:  # already in LMEM when the group starts
        events[("activation", t)] = [Event(u, 1, "use") for u in uses[t]]
    for t in loaded:
        j = uses[t][0]
        row, stage = (j - 1, 1) if j >= 1 else (num_rows - 1, 0)
        loads[row].append(Transfer(t, "activation", stage))
        events[("activation", t)] = [Event(row, stage, "load")] + [Event(u, 1, "use") for u in uses[t]]
    for i, name in enumerate(ops):
        for t in net.op(name).outputs:
            events[("activation", t)] = [Event(i, 1, "produce")] + [Event(u, 1, "use") for u in uses.get(t, [])]
    for t, (row, stage) in stores.items():
        st[row].append(Transfer(t, "activation", stage))
        events[("activation", t)].append(Event(row, stage, "store"))
    return events


def _weight_loads(ops: tuple[str, ...], weighted: list[int], hold: bool, prefetch: int, num_rows: int,
                  loads: dict[int, list[Transfer]], events: dict[tuple[str, str], list[Event]],
                  by_cols: frozenset[str] = frozenset()) -> list[str]:
    """Weighted ops preloaded once (held), else each weight's load row added to ``loads`` and ``events``;
    column-sliced weights (``by_cols``) always load in the table, once per slice."""
    preloads: list[str] = []
    if hold:
        preloads = [ops[i] for i in weighted if ops[i] not in by_cols]
        weighted = [i for i in weighted if ops[i] in by_cols]
    last_cols = max((i for i in weighted if ops[i] in by_cols), default=-1)
    for w, i in enumerate(weighted):
        name = ops[i]
        # unsliced: load while the prefetch-th previous weighted op computes (the seed's w4 at T2)
        row = weighted[w - prefetch] if w >= prefetch else weighted[0] - 1
        stage = 1
        if w < prefetch and name in by_cols and last_cols > i:
            # the first column-sliced weight: the next slice's columns load while this slice's last column-sliced
            # MatMul computes, so the MAC array hides every weight run (not in the last row, beside the next
            # slice's activation loads, where little computes)
            row, stage = last_cols, 0
        elif row < 0:
            row, stage = (num_rows - 1, 0) if i <= num_rows - 2 else (0, 1)
        loads[row].append(Transfer(name, "weight", stage))
        events[("weight", name)] = [Event(row, stage, "load"), Event(i, 1, "use")]
    return preloads


def _buffers(net: Network, chip: Chip, sl: GroupSlicing, kept: set[str], num_rows: int,
             events: dict[tuple[str, str], list[Event]], hold: bool, f32_copies: frozenset[str] = frozenset(),
             by_cols: frozenset[str] = frozenset()) -> tuple[Buffer, ...]:
    """Every buffer sized for the largest slice it holds, with its lifetime; ids breadth-first over the DAG."""
    ops = sl.ops

    # a network input the group loads as f32 and converts (f32_in): the f32 slice has a buffer of its own, live
    # in its load row only (TPU-MLIR's Cast is a step of its own before the first use: ResNet's stem conv buffer
    # sits over the freed f32 slice in BM1684X's final.mlir); interior and output copies widen their tensor's
    converted = frozenset(t for t in sl.io.inputs if t in f32_copies and t in net.inputs and t not in kept)

    def slice_size(t: str, dtype: str | None = None) -> int:
        """The largest slice of ``t``, in its dtype or ``dtype``."""
        ten = net.tensor(t) if dtype is None else replace(net.tensor(t), dtype=dtype)
        return max(activation_bytes(chip, ten, *shape) for shape in {w.shape for w in sl.windows[t]})

    def act_size(t: str) -> int:
        ten = net.tensor(t)
        if t in kept:
            return activation_bytes(chip, ten, ten.n, ten.h)
        wide = t in f32_copies and t not in converted  # widened by its f32 copy
        return max(activation_bytes(chip, ten, *shape) + (activation_bytes(chip, replace(ten, dtype="f32"), *shape)
                                                          if wide else 0)
                   for shape in {w.shape for w in sl.windows[t]})

    buffers: list[Buffer] = []
    seen: set[tuple[str, str]] = set()
    position = {name: i for i, name in enumerate(ops)}

    def add(kind: str, name: str, size: int) -> None:
        if size <= 0 or (kind, name) in seen:
            return
        seen.add((kind, name))
        bid = len(buffers)
        if kind == "weight" and hold and name not in by_cols or kind == "activation" and name in kept:
            buffers.append(Buffer(bid, kind, name, size, 0, num_rows - 1, resident=True))
            return
        if kind == "scratch":
            i = position[name]
            buffers.append(Buffer(bid, kind, name, size, i, i))
            return
        start, end = interval(events[(kind, name)], num_rows, f"{kind} {name}")
        buffers.append(Buffer(bid, kind, name, size, start, end))

    for t in sl.io.inputs:
        add("activation", t, act_size(t))
    for t in sorted(converted, key=sl.io.inputs.index):
        row = next(e.row for e in events[("activation", t)] if e.what == "load")
        buffers.append(Buffer(len(buffers), "convert", t, slice_size(t, "f32"), row, row))
    for name in _breadth_first_ops(net, ops):
        op = net.op(name)
        add("weight", name, column_weight_bytes(net, chip, sl, name) if name in by_cols
            else group_weight_bytes(chip, net, op))
        for t in op.outputs:
            add("activation", t, act_size(t))
        i_win = sl.windows[op.inputs[0]] if op.inputs else ()
        o_win = sl.windows[op.outputs[0]]
        shapes = {(a.shape, b.shape) for a, b in zip(i_win, o_win)}  # slices repeat
        scratch = max((scratch_bytes(chip, net, op, a, b) for a, b in shapes), default=0)
        add("scratch", name, scratch)
    return tuple(buffers)
