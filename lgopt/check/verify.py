"""An independent checker for plans: trust nothing the planner computed.

It re-derives from the network and the chip everything a plan must satisfy
and compares: op coverage and execution order, group convexity, slice legality
and windows (by enumerating each op's receptive rows, and columns when W is
sliced, not by the closed-form backward formulas the planner uses), exact
coverage of group outputs by stores,
column slicing (a MatMul loading, per slice, exactly the weight columns of the output it computes),
the h/2 rule, the timestep table's causality and what each transfer and buffer names (a tensor the group
touches, or a weighted op of the group), buffer sizes and lifetimes,
(timestep x address) non-overlap with wrap-around lifetimes, capacity,
alignment and bank rules.  It shares with the planner only the problem model
(network, chip) and the seed-tested sizing formulas.

Like MiniMalloc's validator it is deliberately small and slow-but-obvious.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, cast, get_args

import networkx as nx
import numpy as np

from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip, chip_from_dict
from lgopt.hw.layout import activation_lane_bytes
from lgopt.hw.sizing import group_weight_bytes, weight_bytes
from lgopt.model.network import Network, Op, lane_shape_of
from lgopt.model.ops import RESHAPE_TYPES, resize_source
from lgopt.model.plan import BANK_RULES, BUFFER_KINDS, Buffer, GroupCost, GroupPlan, Plan, TransferKind


@dataclass(frozen=True)
class Violation:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


class _Fail(Exception):
    pass


@dataclass(frozen=True)
class CostFunctions:
    """The cost model a plan's recorded figures are recomputed with.

    Cost is part of the problem's definition, not of any plan, but it lives with the planner
    (:mod:`lgopt.cost`, which this package may not import), so the caller hands it in: the CLI and the
    reports pass :func:`lgopt.report.verdict.planner_costs`.  The verifier then recomputes every group's and
    global layer's figures from the plan's own decisions and the totals from those, and trusts none of the
    numbers the plan records.
    """

    group: Callable[[Chip, Network, GroupPlan], GroupCost]
    global_layer: Callable[[Chip, Network, Op], GroupCost]
    lower_bound: Callable[[Chip, Network], Mapping[str, int]] | None = None
    # what a plan costs besides its steps (the global Cast of a network input no group converts), if anything
    besides: Callable[[Chip, Network, Plan], GroupCost] | None = None


GROUP_COST_FIELDS = ("cycles", "tiu_cycles", "gdma_cycles", "traffic_bytes")
TRANSFER_KINDS: tuple[str, ...] = get_args(TransferKind)  # activation | weight


ROW_NORMALISERS = ("Softmax", "LayerNormalization")  # every output column reads every column of its row
VIEW_TYPES = RESHAPE_TYPES + ("Transpose",)  # a local Transpose moves no axis longer than 1, or swaps H and W
CHANNEL_MIXERS = ("Conv", "ConvTranspose")  # every output channel reads every input channel (or its group's)


def _mixes_channels(net: Network, op: Op) -> str:
    """Why ``op`` is not computed channel by channel (a channel-sliced group may not hold it), or ``""``: the
    verifier's own rule.  Each output channel must read only the same channel of each input (or an input's
    single channel) and the op's constants must not differ per channel (a MatMul's weight is one ``[K, N]``
    matrix for every channel); a channel Concat or Slice moves channels, and rows held on the lanes have none."""
    out = net.tensor(op.outputs[0])
    ins = [net.tensor(t) for t in op.inputs]
    if op.type in CHANNEL_MIXERS:
        return "a convolution reads every input channel"
    if op.type in ("Concat", "Slice") and op.attrs.get("axis") == 1:
        return "moves channels between lanes"
    if op.type == "GroupNormalization":
        return "normalises each group of channels together"
    if out.rows_on_lanes or any(t.rows_on_lanes for t in ins):
        return "its rows lie over the lanes"
    for t in ins:
        if t.c != out.c and not (t.c == 1 and op.type in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "MatMul")):
            return f"reads {t.c} channels of {t.name} for {out.c} output channels"
    if op.type != "MatMul":
        for w in op.weights:
            if w.shape and lane_shape_of(w.shape)[1] > 1:  # the constant as LMEM holds it: channels over lanes
                return f"its constant {w.name} differs per channel"
    return ""


def _moves_lanes(net: Network, op: Op) -> bool:
    """Whether ``op`` moves data between lanes or batches: a Transpose changing the order of its axes longer
    than 1 (other than swapping the last two of a rank-4 tensor, which each lane does on its own planes), or a
    reshape whose (batches, lanes, elements per lane) in LMEM differ.  A slice of such an op's output reads a
    scattered part of its input, so a group holds it only whole: the verifier's own rule."""
    batch_pick = op.type == "Slice" and op.attrs.get("axis") == 0
    if op.type in ("Slice", "Concat") and op.attrs.get("axis") not in (0, 1, -1):  # only a rank-3 tensor's rows
        return op.attrs.get("axis") != -2 or len(net.tensor(op.inputs[0]).orig_shape) != 3
    if (op.type not in VIEW_TYPES and not batch_pick) or len(op.inputs) != 1 or len(op.outputs) != 1:
        return False
    if op.type == "Transpose":
        perm, dims = tuple(op.attrs.get("perm", ())), tuple(op.attrs.get("in_dims", ()))
        if perm == (0, 1, 3, 2) and len(dims) == 4:
            return False  # each lane transposes its own planes
        moved = [p for p in perm if p < len(dims) and dims[p] != 1]
        if moved != sorted(moved):
            return True

    def form(name: str) -> tuple[int, int, int]:
        t = net.tensor(name)
        n, c, h, w = t.lane_shape(t.n, t.h)
        return n, c, h * w
    (n_in, *lanes_in), (n_out, *lanes_out) = form(op.inputs[0]), form(op.outputs[0])
    if batch_pick:  # the batches picked keep their lanes, or they move
        return lanes_in != lanes_out
    return (n_in, *lanes_in) != (n_out, *lanes_out)


def _keeps_batches(net: Network, op: Op) -> bool:
    """Whether a move keeps each batch's data to itself: one input with the output's leading dimension, moved
    by a reshape or by a Transpose that leaves axis 0 first (the verifier's own rule)."""
    if len(op.inputs) != 1 or len(op.outputs) != 1:
        return False
    a, b = net.tensor(op.inputs[0]).orig_shape, net.tensor(op.outputs[0]).orig_shape
    if not a or not b or a[0] != b[0]:
        return False
    return op.type in RESHAPE_TYPES or (op.type == "Transpose" and tuple(op.attrs.get("perm", (1,)))[:1] == (0,))


def _receptive_rows(op: Op, k: int, rows: range, in_h: int, out_h: int, axis: int = 0) -> set[int]:
    """Input rows of operand ``k`` that output ``rows`` read, by enumeration; with ``axis=1`` the same for
    columns (kernel, stride, dilation and leading pad of W: pads are (top, left, bottom, right); a Resize's
    ``coord`` is W's, ``coord_h`` overrides it for H)."""
    a = op.attrs
    t = op.type
    need: set[int] = set()
    if t in ("Conv", "MaxPool", "AveragePool"):
        kh, s, p = a["kernel"][axis], a["strides"][axis], a["pads"][axis]
        d = a.get("dilations", (1, 1))[axis]
        for o in rows:
            need.update(r for r in (o * s - p + i * d for i in range(kh)) if 0 <= r < in_h)
    elif t == "ConvTranspose":
        kh, s, p = a["kernel"][axis], a["strides"][axis], a["pads"][axis]
        d = a.get("dilations", (1, 1))[axis]
        outs = set(rows)
        need.update(i for i in range(in_h) if any(i * s - p + j * d in outs for j in range(kh)))
    elif t in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean") and in_h == out_h:  # reduces each row's W
        need.update(rows)
    elif t in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "GroupNormalization") \
            or (t in VIEW_TYPES and in_h != out_h) \
            or (t == "Transpose" and tuple(a.get("perm", ()))[-2:] == (3, 2)) \
            or (t in ROW_NORMALISERS and axis == 1) \
            or (t == "MatMul" and (k == 1 or axis == 1)):  # B's rows and A's columns are the contracted K
        need.update(range(in_h)) if len(rows) else None
    elif t == "Resize":
        attrs = {**a, "coord": a.get("coord_h", a.get("coord")) if axis == 0 else a.get("coord")}
        for o in rows:
            lo, hi = resize_source(o, in_h, out_h, attrs)
            need.update(range(lo, hi + 1))
    elif in_h == 1:
        need.update({0} if len(rows) else set())
    elif in_h != out_h:  # joined or cut along this axis (a last-axis Concat or Slice): read whole
        need.update(range(in_h)) if len(rows) else None
    else:
        need.update(rows)
    return need


def _contains(win: tuple[int, int], rows: set[int]) -> bool:
    return not rows or (win[0] <= min(rows) and max(rows) < win[1])


class Verifier:
    def __init__(self, net: Network, plan: Plan, costs: CostFunctions | None = None) -> None:
        self.net = net
        self.plan = plan
        self.costs = costs
        self.violations: list[Violation] = []
        self.next_ops: dict[int, set[str]] = {}  # a group handing over -> the ops of the group receiving
        self.next_group: dict[int, int] = {}  # a group handing over -> the group receiving

    def fail(self, where: str, what: str) -> None:
        self.violations.append(Violation(where, what))

    # --- whole plan ----------------------------------------------------------------------------
    def run(self, stop_at_first: bool = False) -> list[Violation]:
        try:
            self.chip = chip_from_dict(self.plan.chip)
        except LgoptError as e:
            self.fail("chip", str(e))
            return self.violations
        if self.plan.bank_rule not in BANK_RULES:
            self.fail("settings", f"unknown bank rule {self.plan.bank_rule!r}")
        if self.plan.h_ratio is not None and not 0 <= self.plan.h_ratio:
            self.fail("settings", f"h_ratio {self.plan.h_ratio} is negative")
        self.check_cover_and_order()
        self.check_handovers()
        sound = not self.violations  # the plan's costs can be recomputed only from sound decisions
        for gi, g in enumerate(self.plan.groups):
            if stop_at_first and self.violations:
                break
            before = len(self.violations)
            try:
                self.check_group(gi, g)
            except _Fail:
                pass
            except (KeyError, IndexError, TypeError, ValueError, LgoptError) as e:
                if len(self.violations) == before:
                    self.fail(f"group {gi}", f"malformed group ({type(e).__name__}: {e})")
            sound &= len(self.violations) == before
        if self.costs is not None and sound and not (stop_at_first and self.violations):
            try:
                self.check_costs(self.costs)
            except (KeyError, IndexError, TypeError, ValueError, LgoptError) as e:
                self.fail("plan", f"costs cannot be recomputed ({type(e).__name__}: {e})")
        return self.violations

    # --- recorded costs ----------------------------------------------------------------------------
    def check_costs(self, costs: CostFunctions) -> None:
        """Every figure the plan records, recomputed: each group's cycles, TIU and GDMA cycles, traffic and
        LMEM peak, and the plan's totals (cycles and traffic over its steps, peak LMEM, bank conflicts and
        the network's lower bound)."""
        net, chip, plan = self.net, self.chip, self.plan
        cycles = traffic = 0
        if costs.besides is not None:
            extra = costs.besides(chip, net, plan)
            cycles, traffic = int(extra["cycles"]), int(extra["traffic_bytes"])
        for kind, v in plan.steps:
            if kind == "group":
                g = plan.groups[v]
                got: Mapping[str, Any] = cast(Mapping[str, Any], costs.group(chip, net, g))
                for f in GROUP_COST_FIELDS:
                    recorded = cast(Mapping[str, Any], g.cost).get(f)
                    if f in got and recorded != got[f]:
                        self.fail(f"group {v}", f"records {f} {recorded}, its decisions cost {got[f]}")
                peak = max((b.offset + b.size for b in g.buffers), default=0)
                if g.cost.get("lmem_peak", peak) != peak:
                    self.fail(f"group {v}", f"records lmem_peak {g.cost.get('lmem_peak')}, its buffers reach {peak}")
            else:
                got = cast(Mapping[str, Any], costs.global_layer(chip, net, net.op(v)))
            cycles += int(got["cycles"])
            traffic += int(got["traffic_bytes"])
        totals: dict[str, int] = {
            "cycles": cycles, "traffic_bytes": traffic,
            "lmem_peak": max((int(g.cost.get("lmem_peak", 0)) for g in plan.groups), default=0),
            "bank_conflicts": sum(int(g.cost.get("bank_conflicts", 0)) for g in plan.groups)}
        if costs.lower_bound is not None:
            lb = costs.lower_bound(chip, net)
            totals["lower_bound_cycles"] = int(lb["cycles"])
            totals["lower_bound_traffic_bytes"] = int(lb["traffic_bytes"])
        for f, want in totals.items():
            if f in ("cycles", "traffic_bytes") or f in plan.cost:
                if plan.cost.get(f) != want:
                    self.fail("plan", f"records total {f} {plan.cost.get(f)}, its steps add up to {want}")

    def check_cover_and_order(self) -> None:
        net = self.net
        seen: dict[str, str] = {}
        step_ops: list[tuple[str, list[str]]] = []
        group_idx_seen: set[int] = set()
        for kind, v in self.plan.steps:
            if kind == "group":
                if not isinstance(v, int) or not 0 <= v < len(self.plan.groups):
                    self.fail("steps", f"step names group {v}, which does not exist")
                    continue
                if v in group_idx_seen:
                    self.fail("steps", f"group {v} is executed twice")
                group_idx_seen.add(v)
                step_ops.append((f"group {v}", list(self.plan.groups[v].ops)))
            else:
                step_ops.append((f"global layer {v}", [v]))
        for gi in range(len(self.plan.groups)):
            if gi not in group_idx_seen:
                self.fail("steps", f"group {gi} is never executed")
        for where, names in step_ops:
            for n in names:
                if n not in net.op_by_name:
                    self.fail(where, f"op {n!r} is not in the model")
                elif n in seen:
                    self.fail(where, f"op {n} appears twice (also in {seen[n]})")
                else:
                    seen[n] = where
        missing = [op.name for op in net.ops if op.name not in seen]
        if missing:
            self.fail("plan", f"op {missing[0]} is missing ({len(missing)} ops not in any group or global layer)")
        available = set(net.inputs)
        for where, names in step_ops:
            members = set(names)
            for n in names:
                if n not in net.op_by_name:
                    continue
                for t in net.op(n).inputs:
                    if t not in available and not any(t in net.op(m).outputs for m in members if m in net.op_by_name):
                        self.fail(where, f"op {n} reads {t} before any earlier step produced it")
            for n in names:
                if n in net.op_by_name:
                    available.update(net.op(n).outputs)
            if where.startswith("group") and all(n in net.op_by_name for n in names):
                self.check_convex(where, members)

    def check_handovers(self) -> None:
        """A tensor kept in LMEM passes from a group to the very next step, which must be a group that
        expects it, in a resident whole-tensor buffer at the same offset in both."""
        plan = self.plan
        steps = list(plan.steps)
        for k, (kind, v) in enumerate(steps):
            if kind != "group" or not isinstance(v, int) or not 0 <= v < len(plan.groups):
                continue
            g = plan.groups[v]
            nxt = steps[k + 1] if k + 1 < len(steps) else None
            prv = steps[k - 1] if k > 0 else None
            if g.kept_out and nxt is not None and nxt[0] == "group" and isinstance(nxt[1], int) \
                    and 0 <= nxt[1] < len(plan.groups):
                self.next_ops[v] = set(plan.groups[nxt[1]].ops)
                self.next_group[v] = nxt[1]
            if g.kept_out:
                if nxt is None or nxt[0] != "group" or not 0 <= nxt[1] < len(plan.groups):
                    self.fail(f"group {v}", f"keeps {g.kept_out[0]} in LMEM but the next step is not a group")
                    continue
                h = plan.groups[nxt[1]]
                if set(h.kept_in) != set(g.kept_out):
                    self.fail(f"group {v}", f"hands over {sorted(g.kept_out)} in LMEM, but group {nxt[1]} "
                                            f"expects {sorted(h.kept_in)}")
                    continue
                mine = {b.name: b for b in g.buffers if b.kind == "activation"}
                theirs = {b.name: b for b in h.buffers if b.kind == "activation"}
                for t in g.kept_out:
                    a, b = mine.get(t), theirs.get(t)
                    if a is None or b is None:
                        continue  # the per-group checks report the missing buffer
                    if (a.offset, a.size) != (b.offset, b.size):
                        self.fail(f"group {v}", f"hands over {t} at [{a.offset}, {a.offset + a.size}) but group "
                                                f"{nxt[1]} reads it at [{b.offset}, {b.offset + b.size})")
                    self.check_handover_rows(v, g, nxt[1], h, t)
            if g.kept_in and (prv is None or prv[0] != "group" or not 0 <= prv[1] < len(plan.groups)
                              or set(plan.groups[prv[1]].kept_out) != set(g.kept_in)):
                self.fail(f"group {v}", f"expects {sorted(g.kept_in)} in LMEM, which the previous step does not "
                                        "hand over")

    def check_handover_rows(self, gi: int, g: GroupPlan, hi: int, h: GroupPlan, t: str) -> None:
        """The giving group computes every batch and row of ``t`` the receiving group reads: nothing else
        writes the handed-over buffer, so a row the giver never produces is read back as garbage."""
        ten = self.net.tensors.get(t)
        if ten is None or t not in g.windows or t not in h.windows:
            return  # the per-group checks report it
        made = np.zeros((ten.n, ten.h, ten.w), dtype=bool)
        for s, (n0, n1, h0, h1) in enumerate(g.windows[t]):
            w0, w1 = g.cols(t, s, ten.w)
            made[max(0, n0):max(0, n1), max(0, h0):max(0, h1), max(0, w0):max(0, w1)] = True
        for s, (n0, n1, h0, h1) in enumerate(h.windows[t]):
            w0, w1 = h.cols(t, s, ten.w)
            need = ~made[max(0, n0):max(0, n1), max(0, h0):max(0, h1), max(0, w0):max(0, w1)]
            if need.any():
                n, r, c = map(int, np.argwhere(need)[0])
                self.fail(f"group {gi}", f"hands {t} over to group {hi}, whose slice {s} reads (n={n0 + n}, "
                                         f"h={h0 + r}, w={w0 + c}), an element group {gi} never produces")
                return

    def check_convex(self, where: str, members: set[str]) -> None:
        g = self.net.graph
        down: set[str] = set()
        for n in members:
            down |= nx.descendants(g, n)
        up: set[str] = set()
        for n in members:
            up |= nx.ancestors(g, n)
        between = (down & up) - members
        if between:
            self.fail(where, f"not convex: a path leaves the group through {sorted(between)[0]} and comes back")

    # --- one group -----------------------------------------------------------------------------
    def check_group(self, gi: int, g: GroupPlan) -> None:
        where = f"group {gi}"
        net = self.net
        if any(n not in net.op_by_name for n in g.ops):
            raise _Fail
        ops = [net.op(n) for n in g.ops]
        if g.n_slices < 1 or g.h_slices < 1 or g.w_slices < 1 or g.c_slices < 1:
            self.fail(where, f"slice counts must be positive (n={g.n_slices}, c={g.c_slices}, h={g.h_slices}, "
                             f"w={g.w_slices})")
            raise _Fail
        if g.c_slices > 1 and (g.kept_in or g.kept_out):
            self.fail(where, f"hands a tensor over in LMEM, but c_slices={g.c_slices} (no slice holds it whole)")
        self.check_cores(where, g)
        for op in ops:
            if not op.local:
                self.fail(where, f"op {op.name} ({op.type}) cannot run in a group: {op.reason}")
            elif self.chip.group_rule(op.type):
                self.fail(where, f"op {op.name} ({op.type}) cannot run in a group: {self.chip.group_rule(op.type)}")
            if g.h_slices > 1 and not op.h_split:
                self.fail(where, f"op {op.name} ({op.type}) does not allow slicing H, but h_slices={g.h_slices}")
            if g.w_slices > 1 and not op.h_split:  # columns are sliceable exactly where rows are
                self.fail(where, f"op {op.name} ({op.type}) does not allow slicing W, but w_slices={g.w_slices}")
            if g.w_slices > 1 and op.type in ROW_NORMALISERS:
                self.fail(where, f"op {op.name} ({op.type}) normalises whole rows, but w_slices={g.w_slices}")
            if g.n_slices > 1 and not op.n_split:
                self.fail(where, f"op {op.name} ({op.type}) does not allow slicing N, but n_slices={g.n_slices}")
            if g.c_slices > 1 and op.outputs and (why := _mixes_channels(net, op)):
                self.fail(where, f"op {op.name} ({op.type}) {why}, but c_slices={g.c_slices}")
            cut = max(g.h_slices, g.w_slices, g.c_slices) > 1 or (g.n_slices > 1 and not _keeps_batches(net, op))
            if cut and _moves_lanes(net, op):
                self.fail(where, f"op {op.name} ({op.type}) moves data between lanes, so its group must hold it "
                                 f"whole (batch slices only where it keeps each batch to itself), but slices are "
                                 f"n={g.n_slices}, c={g.c_slices}, h={g.h_slices}, w={g.w_slices}")
        members = set(g.ops)
        produced = {t for op in ops for t in op.outputs}
        inputs = list(dict.fromkeys(t for op in ops for t in op.inputs if t not in produced))
        outputs = [t for op in ops for t in op.outputs
                   if t in net.outputs or any(c.name not in members for c in net.consumers.get(t, ()))]
        tensors = inputs + [t for op in ops for t in op.outputs]
        for t in g.kept_in:
            if t not in inputs:
                self.fail(where, f"expects {t} in LMEM, but it is not an input of the group")
                raise _Fail
        nxt = self.next_ops.get(gi, set())
        optional = set()  # handed over, and every other reader is in the receiving group
        for t in g.kept_out:
            if t not in outputs:
                self.fail(where, f"hands over {t}, which is not an output of the group")
                raise _Fail
            if t not in net.outputs and all(c.name in members or c.name in nxt for c in net.consumers.get(t, ())):
                optional.add(t)
        for t in sorted(optional & set(g.stores)):
            self.fail(where, f"stores {t}, which only group {self.next_group.get(gi, '?')} reads, and it receives "
                             "it in LMEM: the store is GMEM traffic for nothing")
        for name in g.preloads:
            if name not in members:
                self.fail(where, f"preloads the weights of {name}, which is not in the group")
                raise _Fail
            if not weight_bytes(self.chip, net.op(name)):
                self.fail(where, f"preloads the weights of {name}, which has none")
        for t in g.f32_in:
            if t not in net.inputs or t not in inputs or t in g.kept_in:
                self.fail(where, f"converts {t} from f32 itself (f32_in), which is not a network input it loads")
        for t in g.f32_out:
            if t not in net.outputs or t not in outputs:
                self.fail(where, f"converts {t} to f32 itself (f32_out), which is not a network output it stores")
        S = g.n_slices * g.c_slices * g.h_slices * g.w_slices
        for t in tensors:
            ws = g.windows.get(t)
            if ws is None or len(ws) != S:
                self.fail(where, f"tensor {t} needs {S} slice windows, plan has {0 if ws is None else len(ws)}")
                raise _Fail
        for t in g.windows:
            if t not in tensors:
                self.fail(where, f"window given for {t}, which the group does not touch")
        self.check_axis_given(where, g, tensors, S, "W")
        self.check_axis_given(where, g, tensors, S, "channel")
        self.check_stores(where, g, outputs, S, optional)
        self.check_windows(where, g, ops, S)
        self.check_weight_cols(where, g, S)
        self.check_h_rule(where, g, tensors)
        stored = [t for t in outputs if t not in optional]
        self.check_table_and_buffers(where, g, ops, inputs, stored, tensors)

    def check_cores(self, where: str, g: GroupPlan) -> None:
        """Several cores (the chip's ``used_cores``): the slices each core runs are TPU-MLIR's shares, contiguous
        runs in loop order, ``S // cores`` each and one more for the first ``S % cores`` cores, idle cores left
        out; each core has its own LMEM, so nothing is handed over in it.  Every other rule of the group holds
        for each core alone: each runs the same table at the same offsets over its own slices."""
        used, S = self.chip.used_cores, g.num_slices
        want: list[tuple[int, int]] = []
        start = 0
        for k in range(used):
            n = S // used + (k < S % used)
            if n:
                want.append((start, start + n))
            start += n
        got = [tuple(c) for c in g.core_slices] or [(0, S)]
        if got != want:
            self.fail(where, f"slices per core {got}: {used} core(s) run {S} slices as {want} (TPU-MLIR's shares)")
        if used > 1 and (g.kept_in or g.kept_out):
            self.fail(where, f"hands a tensor over in LMEM on {used} cores (each core has its own LMEM)")

    def check_axis_given(self, where: str, g: GroupPlan, tensors: list[str], S: int, axis: str) -> None:
        """The ranges of a sliced axis (``"W"``: columns, ``"channel"``: channels) are given exactly when it is
        sliced: for every tensor (one range per slice) and every stored part; without such slices every window
        holds the whole axis and none may be given."""
        count, windows, stores = ((g.w_slices, g.w_windows, g.w_stores) if axis == "W"
                                  else (g.c_slices, g.c_windows, g.c_stores))
        key = "w" if axis == "W" else "c"
        if count == 1:
            if windows or stores:
                self.fail(where, f"gives {axis} windows but {key}_slices is 1")
                raise _Fail
            return
        for t in tensors:
            ws = windows.get(t)
            if ws is None or len(ws) != S:
                self.fail(where, f"tensor {t} needs {S} {axis} windows ({key}_slices={count}), plan has "
                                 f"{0 if ws is None else len(ws)}")
                raise _Fail
        for t in windows:
            if t not in tensors:
                self.fail(where, f"{axis} window given for {t}, which the group does not touch")
        if set(stores) != set(g.stores) or any(len(stores[t]) != len(g.stores[t]) for t in g.stores):
            self.fail(where, f"{axis}-sliced stores need the range of every stored part ({key}_stores beside stores)")
            raise _Fail

    def check_stores(self, where: str, g: GroupPlan, outputs: list[str], S: int, optional: set[str]) -> None:
        for t in g.stores:
            if t not in outputs:
                self.fail(where, f"stores {t}, which is not a group output")
        for t in outputs:
            if t in optional and t not in g.stores:
                continue
            parts = g.stores.get(t)
            ten = self.net.tensor(t)
            if parts is None or len(parts) != S:
                self.fail(where, f"group output {t} needs {S} stored parts")
                continue
            chans = ten.c if g.c_slices > 1 else 1  # channels are tracked only where they are sliced
            cover = np.zeros((ten.n, chans, ten.h, ten.w), dtype=np.int32)
            for s, (n0, n1, h0, h1) in enumerate(parts):
                c0, c1 = g.stored_cols(t, s, ten.w)
                k0, k1 = g.stored_chans(t, s, chans)
                if not (0 <= n0 <= n1 <= ten.n and 0 <= h0 <= h1 <= ten.h and 0 <= c0 <= c1 <= ten.w
                        and 0 <= k0 <= k1 <= chans):
                    self.fail(where, f"slice {s} stores {t}[n {n0}:{n1}, c {k0}:{k1}, h {h0}:{h1}, w {c0}:{c1}] "
                                     "outside its shape")
                    return
                w = g.windows[t][s]
                x0, x1 = g.cols(t, s, ten.w)
                y0, y1 = g.chans(t, s, chans)
                if not (w[0] <= n0 and n1 <= w[1] and w[2] <= h0 and h1 <= w[3] and x0 <= c0 and c1 <= x1
                        and y0 <= k0 and k1 <= y1):
                    self.fail(where, f"slice {s} stores rows, columns or channels of {t} it does not hold")
                cover[n0:n1, k0:k1, h0:h1, c0:c1] += 1
            if (cover != 1).any():
                n, k, h, c = map(int, np.argwhere(cover != 1)[0])
                self.fail(where, f"stores of {t} cover element (n={n}, c={k}, h={h}, w={c}) {int(cover[n, k, h, c])} "
                                 "times, not once")

    def check_windows(self, where: str, g: GroupPlan, ops: list[Op], S: int) -> None:
        net = self.net
        for t, ws in g.windows.items():
            ten = net.tensors.get(t)
            if ten is None:
                continue
            for s, (n0, n1, h0, h1) in enumerate(ws):
                c0, c1 = g.cols(t, s, ten.w)
                k0, k1 = g.chans(t, s, ten.c)
                if not (0 <= n0 < n1 <= ten.n and 0 <= h0 < h1 <= ten.h and 0 <= c0 < c1 <= ten.w
                        and 0 <= k0 < k1 <= ten.c):
                    self.fail(where, f"slice {s} of {t} is empty or outside the tensor (n {n0}:{n1}, c {k0}:{k1}, "
                                     f"h {h0}:{h1}, w {c0}:{c1})")
                    raise _Fail
        for op in ops:
            out = op.outputs[0]
            ot = net.tensor(out)
            for s in range(S):
                n0, n1, h0, h1 = g.windows[out][s]
                c0, c1 = g.cols(out, s, ot.w)
                for k, t in enumerate(op.inputs):
                    it = net.tensor(t)
                    rows = _receptive_rows(op, k, range(h0, h1), it.h, ot.h)
                    cols = _receptive_rows(op, k, range(c0, c1), it.w, ot.w, axis=1)
                    batches = {0} if it.n == 1 else set(range(n0, n1))
                    if op.type == "Slice" and op.attrs.get("axis") == 0:  # the batches it takes, shifted
                        start, end = op.attrs["start"], op.attrs["end"]
                        batches = set(range(start + n0, start + n1)) if ot.n == end - start \
                            else set(range(start, end))  # re-laid: every batch it takes, whatever it computes
                    elif _moves_lanes(net, op) and not (g.n_slices > 1 and _keeps_batches(net, op)):
                        batches = set(range(it.n))  # a move held whole reads every batch
                    w = g.windows[t][s]
                    x0, x1 = g.cols(t, s, it.w)
                    if not _contains((w[2], w[3]), rows):
                        self.fail(where, f"slice {s}: {op.name} computes {out} rows {h0}:{h1}, which read rows "
                                         f"{min(rows)}:{max(rows) + 1} of {t}, but the window holds {w[2]}:{w[3]}")
                        return
                    if not _contains((x0, x1), cols):
                        self.fail(where, f"slice {s}: {op.name} computes {out} columns {c0}:{c1}, which read columns "
                                         f"{min(cols)}:{max(cols) + 1} of {t}, but the window holds {x0}:{x1}")
                        return
                    if not _contains((w[0], w[1]), batches):
                        self.fail(where, f"slice {s}: {op.name} needs batches {min(batches)}:{max(batches) + 1} "
                                         f"of {t}, window holds {w[0]}:{w[1]}")
                        return
                    if g.c_slices == 1:
                        continue
                    k0, k1 = g.chans(out, s, ot.c)
                    need_c = (0, 1) if it.c == 1 else (k0, k1)  # channel by channel (check_group), or broadcast
                    y0, y1 = g.chans(t, s, it.c)
                    if not (y0 <= need_c[0] and need_c[1] <= y1):
                        self.fail(where, f"slice {s}: {op.name} computes channels {k0}:{k1} of {out}, which read "
                                         f"channels {need_c[0]}:{need_c[1]} of {t}, but the window holds {y0}:{y1}")
                        return

    def check_weight_cols(self, where: str, g: GroupPlan, S: int) -> None:
        """Column slicing (C/OC): an op loading its weights a run of columns per slice is a MatMul whose every
        constant has the output width as its last axis (output column j reads column j of each, nothing else),
        in a W-sliced group; it loads its weights in the table (each slice its own columns), never before the
        loop; and each slice loads exactly the columns of the output it computes."""
        if not g.weight_cols:
            return
        net = self.net
        if g.w_slices <= 1:
            self.fail(where, "loads weights by columns but does not slice W")
            raise _Fail
        for name, ws in g.weight_cols.items():
            if name not in g.ops:
                self.fail(where, f"loads weight columns of {name}, which is not in the group")
                raise _Fail
            op = net.op(name)
            out = net.tensor(op.outputs[0])
            filt = [w for w in op.weights if w.role == "filter"]
            if op.type != "MatMul" or len(filt) != 1 or len(filt[0].shape) != 2 \
                    or any(not w.shape or w.shape[-1] != out.w for w in op.weights):
                self.fail(where, f"loads the weights of {name} ({op.type}) by columns, but they are not a [K, N] "
                                 "matrix (and vectors) whose columns are its output columns")
                raise _Fail
            if name in g.preloads:
                self.fail(where, f"weights of {name} are loaded by columns per slice, yet preloaded once")
            if len(ws) != S:
                self.fail(where, f"{name} needs {S} weight column ranges, plan has {len(ws)}")
                raise _Fail
            for s, (c0, c1) in enumerate(ws):
                want = g.cols(op.outputs[0], s, out.w)
                if not 0 <= c0 < c1 <= out.w or (c0, c1) != tuple(want):
                    self.fail(where, f"slice {s}: {name} computes columns {want[0]}:{want[1]} of {op.outputs[0]} "
                                     f"but loads weight columns {c0}:{c1}")
                    return

    def check_h_rule(self, where: str, g: GroupPlan, tensors: list[str]) -> None:
        """The h/2 rule on every tensor's rows, and its analogue on W, the other halo axis; with no ratio
        (TPU-MLIR's rule) neither (empty windows fail elsewhere)."""
        ratio = self.plan.h_ratio
        if ratio is None:
            return
        for t in tensors:
            ten = self.net.tensor(t)
            if g.h_slices > 1 and ten.h > 1:
                ws = g.windows[t][::g.w_slices]  # rows do not depend on the W slice: each H slice's first
                for ni in range(g.n_slices * g.c_slices):  # each N (and channel) slice's run of H slices
                    run = [(w[2], w[3]) for w in ws[ni * g.h_slices:(ni + 1) * g.h_slices]]
                    if not self._check_run(where, t, run, ten.h, "H", ratio):
                        return
            if g.w_slices > 1 and ten.w > 1:
                for start in range(0, len(g.windows[t]), g.w_slices):
                    run = [g.cols(t, s, ten.w) for s in range(start, start + g.w_slices)]
                    # a run whose every slice holds every column is a whole read (a column-sliced MatMul's A)
                    if any(c != (0, ten.w) for c in run) and not self._check_run(where, t, run, ten.w, "W", ratio):
                        return

    def _check_run(self, where: str, t: str, run: list[tuple[int, int]], size: int, axis: str, ratio: float
                   ) -> bool:
        """One run of slices along a halo axis: windows advance, and at most ``ratio * size`` elements repeat."""
        for i in range(1, len(run)):
            if run[i][0] < run[i - 1][0] or run[i][1] <= run[i - 1][1]:
                self.fail(where, f"{axis} slices of {t} do not advance (slice {i}: {run[i][0]}:{run[i][1]} "
                                 f"after {run[i - 1][0]}:{run[i - 1][1]})")
                return False
        dup = sum(b - a for a, b in run) - size
        if dup > ratio * size:
            self.fail(where, f"{axis.lower()}/2 rule: {t} repeats {dup} of its {size} "
                             f"{'rows' if axis == 'H' else 'columns'} (limit {ratio:g} x {axis})")
            return False
        return True

    def check_table_and_buffers(self, where: str, g: GroupPlan, ops: list[Op], inputs: list[str],
                                outputs: list[str], tensors: list[str]) -> None:
        """The timestep table, the buffers and their placement, one rule family at a time."""
        T = len(g.rows)
        if T == 0:
            self.fail(where, "empty timestep table")
            raise _Fail
        ev, op_time = self._table_events(where, g, ops)
        self._check_transfers(where, g, ops, inputs, outputs, tensors, ev)
        self._check_causality(where, g, ev)
        bufs = self._check_buffer_sizes(where, g, ops, tensors)
        self._check_lifetimes(where, g, bufs, ev, op_time)
        inplace = self._inplace(g, op_time)
        self._check_placement(where, g, inplace)
        self.check_banks(where, g, ops, bufs, op_time, inplace)

    def _table_events(self, where: str, g: GroupPlan, ops: list[Op]
                      ) -> tuple[dict[tuple[str, str], list[tuple[int, str]]], dict[str, int]]:
        """Every load, store, use and production on the unrolled timeline of one slice (a stage-0 transfer
        serves the next slice: time ``r - T``; stage 2 the previous: ``r + T``), and the row of each op;
        checks that every op runs once, in an order that respects its producers."""
        net, chip = self.net, self.chip
        T = len(g.rows)
        off = {0: -T, 1: 0, 2: T}
        # events on the unrolled timeline of one slice: (time, what)
        ev: dict[tuple[str, str], list[tuple[int, str]]] = {}
        op_time: dict[str, int] = {}
        for r, row in enumerate(g.rows):
            for _pos, name in enumerate(row.ops):
                if name not in {o.name for o in ops}:
                    self.fail(where, f"row {r} runs {name}, which is not in the group")
                    raise _Fail
                if name in op_time:
                    self.fail(where, f"op {name} runs twice in the table")
                    raise _Fail
                op_time[name] = r
            for tr in row.loads + row.stores:
                if tr.stage not in off:
                    self.fail(where, f"row {r}: transfer of {tr.name} has stage {tr.stage}")
                    raise _Fail
                if tr.kind not in TRANSFER_KINDS:
                    self.fail(where, f"row {r}: transfer of {tr.name} has unknown kind {tr.kind!r} "
                                     f"(not {' or '.join(TRANSFER_KINDS)})")
                    raise _Fail
            for tr in row.loads:
                ev.setdefault((tr.kind, tr.name), []).append((off[tr.stage] + r, "load"))
            for tr in row.stores:
                ev.setdefault((tr.kind, tr.name), []).append((off[tr.stage] + r, "store"))
        for op in ops:
            if op.name not in op_time:
                self.fail(where, f"op {op.name} is in no timestep row")
                raise _Fail
        for r, row in enumerate(g.rows):  # several ops in one row run in the listed order
            for pos, name in enumerate(row.ops):
                for t in net.op(name).inputs:
                    p = net.producer.get(t)
                    if p is not None and p.name in op_time:
                        pr = op_time[p.name]
                        if pr > r or (pr == r and g.rows[r].ops.index(p.name) > pos):
                            self.fail(where, f"op {name} (row {r}) runs before {p.name} (row {pr}) produces {t}")
                            raise _Fail
        for op in ops:
            r = op_time[op.name]
            for t in op.inputs:
                ev.setdefault(("activation", t), []).append((r, "use"))
            for t in op.outputs:
                ev.setdefault(("activation", t), []).append((r, "produce"))
            if weight_bytes(chip, op):
                ev.setdefault(("weight", op.name), []).append((r, "use"))
        return ev, op_time

    def _check_transfers(self, where: str, g: GroupPlan, ops: list[Op], inputs: list[str], outputs: list[str],
                         tensors: list[str], ev: dict[tuple[str, str], list[tuple[int, str]]]) -> None:
        """Each group input loaded once per slice (or handed over), each output stored once, nothing else
        moved, each op's weights loaded exactly once (in the table or before the loop); a weight load names a
        weighted op of the group, and only activations are stored."""
        chip = self.chip
        members = {op.name for op in ops}
        weighted = {op.name for op in ops if weight_bytes(chip, op)}
        # what must be loaded, stored and held
        for t in inputs:
            loads = [x for x in ev.get(("activation", t), []) if x[1] == "load"]
            if t in g.kept_in:
                if loads:
                    self.fail(where, f"{t} is handed over in LMEM but also loaded")
                continue
            if len(loads) != 1:
                self.fail(where, f"group input {t} is loaded {len(loads)} times per slice, not once")
                raise _Fail
        for t in tensors:
            if t in inputs:
                continue
            if any(x[1] == "load" for x in ev.get(("activation", t), [])):
                self.fail(where, f"{t} is produced in the group but also loaded")
        for t in outputs:
            stores = [x for x in ev.get(("activation", t), []) if x[1] == "store"]
            if len(stores) != 1:
                self.fail(where, f"group output {t} is stored {len(stores)} times per slice, not once")
                raise _Fail
        for (kind, name), es in ev.items():
            if kind == "activation" and name not in tensors:
                self.fail(where, f"the table moves {name}, which the group does not touch")
            if kind == "activation" and name not in outputs and any(x[1] == "store" for x in es):
                self.fail(where, f"the table stores {name}, which is not a group output to store")
            if kind == "weight" and any(x[1] == "store" for x in es):
                self.fail(where, f"the table stores the weights of {name}: a store moves an activation the group "
                                 "produces")
            if kind == "weight" and name not in weighted and any(x[1] == "load" for x in es):
                self.fail(where, f"the table loads the weights of {name}, which "
                                 + ("has none" if name in members else "is not an op of the group"))
        preloaded = set(g.preloads)
        for op in ops:
            if not weight_bytes(chip, op):
                continue
            n_loads = sum(1 for x in ev.get(("weight", op.name), []) if x[1] == "load")
            if n_loads + (op.name in preloaded) != 1:
                self.fail(where, f"weights of {op.name} are loaded {n_loads + (op.name in preloaded)} times, not once")
                raise _Fail

    def _check_causality(self, where: str, g: GroupPlan, ev: dict[tuple[str, str], list[tuple[int, str]]]) -> None:
        """Nothing is used or stored before it is loaded or produced, nor in the row it arrives in."""
        preloaded = set(g.preloads)
        for key, es in ev.items():
            if key[0] == "weight" and key[1] in preloaded or key[0] == "activation" and key[1] in g.kept_in:
                continue
            first = min(es)
            if first[1] not in ("load", "produce"):
                self.fail(where, f"{key[0]} {key[1]} is {first[1]}d at time {first[0]} before it is loaded or produced")
                raise _Fail
            for t_, what in es:
                if what in ("use", "store") and t_ == first[0]:
                    self.fail(where, f"{key[0]} {key[1]} is {what}d in the row it is {first[1]}ed")
                    raise _Fail

    def _largest_slice(self, g: GroupPlan, t: str, dtypes: tuple[str, ...]) -> int:
        """Bytes a lane of the largest slice of ``t`` (plan-format §12.1), summed over ``dtypes``."""
        chip, ten = self.chip, self.net.tensor(t)
        return max(sum(activation_lane_bytes(ten.lane_shape(w[1] - w[0], w[3] - w[2], c1 - c0, k1 - k0), dt,
                                             chip.npu_num, chip.eu_bytes, chip.align_4n) for dt in dtypes)
                   for s, w in enumerate(g.windows[t]) for c0, c1 in [g.cols(t, s, ten.w)]
                   for k0, k1 in [g.chans(t, s, ten.c)])

    def _check_buffer_sizes(self, where: str, g: GroupPlan, ops: list[Op], tensors: list[str]
                            ) -> dict[tuple[str, str], Buffer]:
        """One buffer per tensor and weight, each large enough for its largest slice (whole, when handed
        over); preloaded weights stay resident; an activation buffer holds a tensor the group touches, a weight
        buffer a weighted op of the group (a scratch buffer's op: :meth:`_check_lifetimes`)."""
        net, chip = self.net, self.chip
        T = len(g.rows)
        preloaded = set(g.preloads)
        members = {op.name for op in ops}
        weighted = {op.name for op in ops if weight_bytes(chip, op)}
        bufs: dict[tuple[str, str], Buffer] = {}
        ids: set[int] = set()
        for b in g.buffers:
            if b.id in ids:
                self.fail(where, f"buffer id {b.id} is used twice")
            ids.add(b.id)
            if b.kind not in BUFFER_KINDS:
                self.fail(where, f"buffer {b.id} has unknown kind {b.kind!r}")
            if (b.kind, b.name) in bufs:
                self.fail(where, f"two buffers hold {b.kind} {b.name}")
            bufs[(b.kind, b.name)] = b
            if b.kind == "activation" and b.name not in tensors:
                self.fail(where, f"buffer {b.id} holds {b.name}, which the group does not touch")
            if b.kind == "weight" and b.name not in weighted:
                self.fail(where, f"buffer {b.id} holds the weights of {b.name}, which "
                                 + ("has none" if b.name in members else "is not an op of the group"))
            if b.kind == "convert" and b.name not in g.f32_in:
                self.fail(where, f"buffer {b.id} holds an f32 copy of {b.name}, which the group does not convert "
                                 "(f32_in)")
            if not (0 <= b.start < T and 0 <= b.end < T):
                self.fail(where, f"buffer {b.id} ({b.name}) lifetime {b.start}..{b.end} is outside rows 0..{T - 1}")
                raise _Fail
        for t in tensors:
            ten = net.tensor(t)
            ab = bufs.get(("activation", t))
            if ab is None:
                self.fail(where, f"no buffer holds {t}")
                raise _Fail
            # an input converted here: both slices, in its buffer or (plan-format "Convert") the f32 one apart
            dtypes = (ten.dtype, "f32") if t in g.f32_in and ("convert", t) not in bufs else (ten.dtype,)
            need = self._largest_slice(g, t, dtypes)
            if t in g.kept_in or t in g.kept_out:  # held whole across the hand-over
                need = activation_lane_bytes(ten.lane_shape(ten.n, ten.h), ten.dtype, chip.npu_num, chip.eu_bytes,
                                             chip.align_4n)
                if not ab.resident:
                    self.fail(where, f"buffer {ab.id} holds {t}, handed over in LMEM, but is not resident")
            if ab.size < need:
                self.fail(where, f"buffer {ab.id} for {t} has {ab.size} bytes, its largest slice needs {need}")
        for t in g.f32_in:
            cb = bufs.get(("convert", t))
            if cb is not None and t in g.windows and cb.size < (need := self._largest_slice(g, t, ("f32",))):
                self.fail(where, f"buffer {cb.id} for the f32 copy of {t} has {cb.size} bytes, its largest slice "
                                 f"needs {need}")
        for op in ops:
            wb = group_weight_bytes(chip, net, op)
            if op.name in g.weight_cols:  # reloaded by columns: the widest slice's columns
                wb = max(group_weight_bytes(chip, net, op, c1 - c0) for c0, c1 in g.weight_cols[op.name])
            if wb:
                wbuf = bufs.get(("weight", op.name))
                if wbuf is None:
                    self.fail(where, f"no buffer holds the weights of {op.name}")
                    raise _Fail
                if wbuf.size < wb:
                    self.fail(where, f"weight buffer of {op.name} has {wbuf.size} bytes, needs {wb}")
                if op.name in preloaded and not wbuf.resident:  # loaded before row 0: live in every row until used
                    self.fail(where, f"weights of {op.name} are preloaded (loaded once, before the loop) but their "
                                     f"buffer {wbuf.id} is not resident")
        return bufs

    def _check_lifetimes(self, where: str, g: GroupPlan, bufs: dict[tuple[str, str], Buffer],
                         ev: dict[tuple[str, str], list[tuple[int, str]]], op_time: dict[str, int]) -> None:
        """Every buffer live over every row between its first and last event, within one iteration."""
        T = len(g.rows)
        for (kind, name), b in bufs.items():
            if kind == "scratch":
                if name not in op_time:
                    self.fail(where, f"scratch buffer {b.id} belongs to {name}, which is not in the group")
                elif op_time[name] not in b.rows(T):
                    self.fail(where, f"scratch buffer {b.id} of {name} is not live in row {op_time[name]}")
                continue
            if kind == "convert":  # the f32 slice is landed by the load, converted before the first use
                rows = {x[0] % T for x in ev.get(("activation", name), []) if x[1] == "load"}
                if not rows <= b.rows(T):
                    self.fail(where, f"buffer {b.id} (the f32 copy of {name}) is not live in row "
                                     f"{min(rows - b.rows(T))}, where {name} is loaded")
                continue
            bes = ev.get((kind, name))
            if not bes or b.resident:
                continue
            lo, hi = min(x[0] for x in bes), max(x[0] for x in bes)
            if hi - lo + 1 > T:
                self.fail(where, f"{kind} {name} must live {hi - lo + 1} rows, more than one iteration ({T}); "
                                 "the next slice would overwrite it")
                continue
            need_rows = {x % T for x in range(lo, hi + 1)}
            have = b.rows(T)
            if not need_rows <= have:
                r = min(need_rows - have)
                self.fail(where, f"buffer {b.id} ({kind} {name}) is freed before row {r} where it is still needed "
                                 f"(lifetime {b.start}..{b.end})")

    def _inplace(self, g: GroupPlan, op_time: dict[str, int]) -> set[frozenset[int]]:
        """Buffer pairs that may share bytes (plan-format "In-place"): the output of an Add, Sub, Mul, Div, Min
        or Max and an operand of it that only this op reads, the group does not store, of the output's dtype
        and window in every slice and at least its size, neither resident, at one offset, whose lifetimes meet
        in the op's row alone (the operand's last, the output's first)."""
        T = len(g.rows)
        acts = {b.name: b for b in g.buffers if b.kind == "activation" and not b.resident}
        out: set[frozenset[int]] = set()
        for name, r in op_time.items():
            op = self.net.op(name)
            if op.type not in ("Add", "Sub", "Mul", "Div", "Min", "Max") or len(op.outputs) != 1:
                continue
            y = acts.get(op.outputs[0])
            for t in set(op.inputs):
                x = acts.get(t)
                if (y is None or x is None or x.offset != y.offset or x.size < y.size or t in g.stores
                        or len(self.net.consumers.get(t, ())) != 1
                        or self.net.tensor(t).dtype != self.net.tensor(y.name).dtype
                        or g.windows.get(t) != g.windows.get(y.name)):
                    continue
                if x.end == r and y.start == r and x.rows(T) & y.rows(T) == {r}:
                    out.add(frozenset((x.id, y.id)))
        return out

    def _check_placement(self, where: str, g: GroupPlan, inplace: set[frozenset[int]]) -> None:
        """Offsets aligned, inside LMEM, and no two buffers live in one row share a byte (but an in-place pair)."""
        chip = self.chip
        T = len(g.rows)
        align = chip.align_bytes
        for b in g.buffers:
            if b.offset < 0:
                self.fail(where, f"buffer {b.id} ({b.name}) has no LMEM offset")
                raise _Fail
            if b.offset % align:
                self.fail(where, f"buffer {b.id} ({b.name}) offset {b.offset} is not {align}-byte aligned")
            if b.offset + b.size > chip.lmem_bytes:
                self.fail(where, f"buffer {b.id} ({b.name}) ends at {b.offset + b.size}, past LMEM "
                                 f"({chip.lmem_bytes} bytes per lane)")
        blist = list(g.buffers)
        rows = {b.id: b.rows(T) for b in blist}
        for i, a in enumerate(blist):  # every overlapping pair is reported (verify --all lists them)
            for b in blist[i + 1:]:
                if (rows[a.id] & rows[b.id] and a.offset < b.offset + b.size and b.offset < a.offset + a.size
                        and frozenset((a.id, b.id)) not in inplace):
                    r = min(rows[a.id] & rows[b.id])
                    self.fail(where, f"buffers {a.id} ({a.name}) and {b.id} ({b.name}) overlap in LMEM at row {r} "
                                     f"([{a.offset}, {a.offset + a.size}) vs [{b.offset}, {b.offset + b.size}))")

    def check_banks(self, where: str, g: GroupPlan, ops: list[Op], bufs: dict[tuple[str, str], Buffer],
                    op_time: dict[str, int], inplace: set[frozenset[int]]) -> None:
        rule = self.plan.bank_rule
        if rule == "off":
            return
        bank = self.chip.bank_bytes

        def banks(b: Buffer) -> set[int]:
            return set(range(b.offset // bank, (b.offset + max(1, b.size) - 1) // bank + 1))

        pairs: set[frozenset[int]] = set()
        for _r, row in enumerate(g.rows):
            npu: set[int] = set()
            for name in row.ops:
                op = self.net.op(name)
                for t in op.inputs + op.outputs:
                    if ("activation", t) in bufs:
                        npu.add(bufs[("activation", t)].id)
                for kind in ("weight", "scratch"):
                    if (kind, name) in bufs:
                        npu.add(bufs[(kind, name)].id)
            dma = {bufs[(t.kind, t.name)].id for t in row.loads + row.stores if (t.kind, t.name) in bufs}
            dma |= {bufs[("convert", t.name)].id for t in row.loads if ("convert", t.name) in bufs}
            pairs |= {frozenset((a, b)) for a in npu for b in npu | dma if a != b}
        by_id = {b.id: b for b in g.buffers}
        conflicts = [p for p in pairs - inplace if banks(by_id[min(p)]) & banks(by_id[max(p)])]
        if rule == "hard" and conflicts:
            a, b = sorted(min(conflicts, key=sorted))
            self.fail(where, f"bank conflict: buffers {a} ({by_id[a].name}) and {b} ({by_id[b].name}) share a bank "
                             "while one op or DMA uses both")
        claimed = g.cost.get("bank_conflicts")
        if rule == "soft" and claimed is not None and int(claimed) != len(conflicts):
            self.fail(where, f"plan reports {claimed} bank conflicts, the verifier counts {len(conflicts)}")


def verify_plan(net: Network, plan: Plan, stop_at_first: bool = False, costs: CostFunctions | None = None
                ) -> list[Violation]:
    """All violations found (empty when the plan holds); with ``costs``, the figures the plan records are
    recomputed too (:class:`CostFunctions`)."""
    from lgopt.model.network import network_digest

    v = Verifier(net, plan, costs)
    if plan.model_digest and plan.model_digest != network_digest(net):
        return [Violation("plan", f"was made for another model (digest {plan.model_digest}, "
                                  f"this model is {network_digest(net)})")]
    return v.run(stop_at_first)
