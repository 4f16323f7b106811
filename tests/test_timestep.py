"""Seed "Dividing the Mem Cycle" examples and the pipelined table's invariants."""

import pytest
from conftest import PROBLEMS
from dags import _op

from lgopt.group.build import schedule, try_group
from lgopt.group.slicing import SliceError
from lgopt.hw.chip import get_chip
from lgopt.hw.sizing import min_footprint
from lgopt.io.problem import load_problem
from lgopt.model.network import Network, Tensor, Weight, check_network
from lgopt.model.plan import Buffer

CHIP = get_chip("bm1684x")


def _chain(kinds, h=32):
    """x -> op0 -> t0 -> op1 -> ...; 'c' is a weighted 3x3 conv, 'r' a Relu."""
    tensors = {"x": Tensor("x", (1, 16, h, 16), "f16", (1, 16, h, 16))}
    ops, src = [], "x"
    for i, k in enumerate(kinds):
        out = f"t{i}"
        tensors[out] = Tensor(out, (1, 16, h, 16), "f16", (1, 16, h, 16))
        if k == "c":
            ops.append(_op(f"op{i}", "Conv", [src], [out], {"kernel": (3, 3), "strides": (1, 1), "dilations": (1, 1),
                                                            "pads": (1, 1, 1, 1), "group": 1},
                           [Weight(f"w{i}", (16, 16, 3, 3), "f16", "filter")]))
        else:
            ops.append(_op(f"op{i}", "Relu", [src], [out], {}))
        src = out
    return check_network(Network("chain", tensors, tuple(ops), ("x",), (src,)))


def test_lifetime_t2_t7_means_rows_2_to_7():
    """[T2,T7]: requested at the beginning of T2, released at the end of T7."""
    assert Buffer(0, "activation", "a", 64, 2, 7).rows(10) == {2, 3, 4, 5, 6, 7}
    assert Buffer(0, "activation", "a", 64, 8, 1).rows(10) == {8, 9, 0, 1}  # wraps past the last row
    assert Buffer(0, "weight", "w", 64, 0, 0, resident=True).rows(10) == set(range(10))


def test_w4_loaded_while_the_previous_conv_computes():
    """Unsliced: w4 (used at T5) is not loaded at T4 but alongside the conv at T2: lifetime [T2, T5]."""
    net = _chain("rrcrrc")
    g = schedule(net, CHIP, [op.name for op in net.ops], 1, 1)
    w = {b.name: b for b in g.buffers if b.kind == "weight"}
    assert (w["op5"].start, w["op5"].end) == (2, 5)
    assert (w["op2"].start, w["op2"].end) == (1, 2)  # the first weight: one row before its use
    assert not g.preloads
    loads = {t.name: r for r, row in enumerate(g.rows) for t in row.loads}
    assert loads["op5"] == 2 and loads["op2"] == 1


def test_weights_resident_when_sliced():
    """Sliced: weights do not reload per slice; their end is corrected to +infinity (all rows)."""
    net = _chain("rrcrrc")
    g = schedule(net, CHIP, [op.name for op in net.ops], 1, 2)
    ws = [b for b in g.buffers if b.kind == "weight"]
    assert ws and all(b.resident and b.rows(len(g.rows)) == set(range(len(g.rows))) for b in ws)
    assert set(g.preloads) == {"op2", "op5"}
    assert not any(t.kind == "weight" for row in g.rows for t in row.loads)


def test_three_stage_pipeline_shape():
    """Next slice's first loads ride with the last op; the last op's result is stored during the first op."""
    net = _chain("crrc")
    g = schedule(net, CHIP, [op.name for op in net.ops], 1, 2)
    assert [r.ops for r in g.rows] == [("op0",), ("op1",), ("op2",), ("op3",)]
    assert [(t.name, t.stage) for t in g.rows[-1].loads] == [("x", 0)]
    assert [(t.name, t.stage) for t in g.rows[0].stores] == [("t3", 2)]
    buf = {b.name: b for b in g.buffers}
    assert (buf["x"].start, buf["x"].end) == (3, 0)  # wraps: loaded in T3 of the previous iteration
    assert (buf["t3"].start, buf["t3"].end) == (3, 0)  # produced in T3, stored in T0 of the next
    assert (buf["t1"].start, buf["t1"].end) == (1, 2)


def test_a_group_output_read_inside_the_group_is_stored_the_row_after_its_producer():
    """TPU-MLIR's nearest assignment stores a group output one row after it is produced, also when an op of
    that row reads it (reference s4.1): t2 (read by op3 in T3) is stored in T3, not pushed into the next slice's
    first row, so it is not live across the wrap."""
    net = _chain("crrc")
    net = check_network(Network("chain", net.tensors, net.ops, ("x",), ("t2", "t3")))
    g = schedule(net, CHIP, [op.name for op in net.ops], 1, 2)
    stores = {t.name: (r, t.stage) for r, row in enumerate(g.rows) for t in row.stores}
    assert stores == {"t2": (3, 1), "t3": (0, 2)}
    buf = {b.name: b for b in g.buffers}
    assert (buf["t2"].start, buf["t2"].end) == (2, 3)


def test_a_row_appended_for_the_next_slices_loads_holds_loads_only():
    """The last op reads the group's input (a residual Add), so the next slice's load cannot share its row and a
    row is appended; the Add's result is still stored during the next slice's first op, as TPU-MLIR's pipeline
    moves the last row's stores (reference s4.2; MobileNetV2 / BM1688's features.3 group on the timeline: the
    store under the first conv, the appended row the load alone)."""
    net = _chain("cr")
    add = _op("op2", "Add", ["t1", "x"], ["t2"], {})
    tensors = {**net.tensors, "t2": Tensor("t2", (1, 16, 32, 16), "f16", (1, 16, 32, 16))}
    net = check_network(Network("res", tensors, net.ops + (add,), ("x",), ("t2",)))
    g = schedule(net, CHIP, [op.name for op in net.ops], 1, 2)
    assert [r.ops for r in g.rows] == [("op0",), ("op1",), ("op2",), ()]
    assert [(t.name, t.stage) for t in g.rows[3].loads] == [("x", 0)] and g.rows[3].stores == ()
    assert [(t.name, t.stage) for t in g.rows[0].stores] == [("t2", 2)]


def test_single_op_group_gets_a_tail_row():
    net = _chain("c")
    g = schedule(net, CHIP, ["op0"], 1, 2)
    assert len(g.rows) == 2 and g.rows[1].ops == ()
    assert [t.name for t in g.rows[1].loads] == ["x"] and [t.name for t in g.rows[1].stores] == ["t0"]


def test_buffer_ids_breadth_first():
    net = _chain("crrc")
    g = schedule(net, CHIP, [op.name for op in net.ops], 1, 1)
    assert [b.id for b in g.buffers] == list(range(len(g.buffers)))
    order = [b.name for b in g.buffers]
    assert order.index("x") < order.index("t0") < order.index("t1") < order.index("t2") < order.index("t3")


def test_group_places_and_records_peak():
    net = _chain("crrc")
    g, why = try_group(net, CHIP, [op.name for op in net.ops], 1, 1)
    assert g is not None, why
    assert g.cost["lmem_peak"] == max(b.offset + b.size for b in g.buffers)
    assert all(b.offset % CHIP.eu_bytes == 0 for b in g.buffers)


def test_scratch_buffers_live_in_their_row():
    """A table activation (SiLU) needs scratch (reference s6): two EU-aligned input copies plus a table."""
    from lgopt.hw.sizing import scratch_bytes

    tensors = {n: Tensor(n, (1, 64, 8, 8), "f16", (1, 64, 8, 8)) for n in ("x", "y")}
    net = check_network(Network("s", tensors, (_op("act", "SiLU", ["x"], ["y"], {}),), ("x",), ("y",)))
    # one channel per lane, 64 f16 values = 128 B per copy, two copies + align(32 * 2, 64)
    assert scratch_bytes(CHIP, net, net.ops[0], (1, 8), (1, 8)) == 2 * 128 + 64
    g = schedule(net, CHIP, ["act"], 1, 2)
    sc = [b for b in g.buffers if b.kind == "scratch"]
    assert len(sc) == 1 and (sc[0].start, sc[0].end) == (0, 0)
    assert sc[0].size == 2 * 64 + 64  # the largest of two 4-row slices: 4*8*2 = 64 B per copy


def _live_in_row(g, r):
    return sum(b.size for b in g.buffers if r in b.rows(len(g.rows)))


@pytest.mark.parametrize("problem", ["resnet18", "yolov5s", "unet", "mobilenet_v2"])
def test_min_footprint_is_a_floor_of_every_table(problem):
    """The candidate space drops runs by min_footprint without scheduling them: that is exact only if no
    table of any group and slicing holds less in the op's row."""
    net = load_problem(PROBLEMS / f"{problem}.json")
    chip = get_chip("cv181x")
    names = [op.name for op in net.ops]
    checked = 0
    for k, op in enumerate(net.ops):
        if not op.local or k % 3:
            continue
        floor = {False: min_footprint(chip, net, op, False), True: min_footprint(chip, net, op, True)}
        for a, b in ((k, k), (k - 1, k), (k, k + 1), (k - 2, k + 1)):
            ops = names[max(0, a):b + 1]
            if not all(net.op(o).local for o in ops):
                continue
            for n, h in ((1, 1), (1, 2), (1, 3), (1, 8), (1, 64), (2, 1), (2, 4)):
                try:
                    g = schedule(net, chip, ops, n, h)
                except SliceError:
                    continue
                row = g.ops.index(op.name)
                assert _live_in_row(g, row) >= floor[n * h > 1], (op.name, ops, n, h)
                checked += 1
    assert checked > 20


def test_a_sliced_group_whose_weights_fill_lmem_reloads_them_per_slice():
    """TPU-MLIR cancels holding when the held weights reach LMEM's size: the weights are then loaded in the
    table (every slice), not once before it; the plan verifies, costs every reload and simulates exactly."""
    from lgopt.check.simulate import simulate
    from lgopt.check.verify import verify_plan
    from lgopt.group.build import assemble
    from lgopt.group.totals import finish, with_cost
    from lgopt.hw.sizing import weight_bytes

    conv = {"kernel": (3, 3), "strides": (1, 1), "dilations": (1, 1), "pads": (1, 1, 1, 1), "group": 1}
    names = ("x", "t0", "t1", "t2", "t3")
    t = {n: Tensor(n, (2, 64, 8, 4), "f16", (2, 64, 8, 4)) for n in names}  # sliced along N: no halo
    net = check_network(Network("wide", t, tuple(
        _op(f"op{i}", "Conv", [names[i]], [names[i + 1]], conv, [Weight(f"w{i}", (64, 64, 3, 3), "f16", "filter")])
        for i in range(4)), ("x",), ("t3",)))
    ops = ("op0", "op1", "op2", "op3")
    per_lane = sum(weight_bytes(CHIP, op) for op in net.ops)  # weights dwarf the activations

    def chip(lmem):  # one bank, so that any multiple of 64 bytes is a valid LMEM size
        return get_chip("bm1684x", {"lmem_bytes": str(lmem // 64 * 64), "lmem_banks": "1"})

    held = schedule(net, chip(per_lane * 8), ops, 2, 1)
    assert held.preloads == ops and all(b.resident for b in held.buffers if b.kind == "weight")
    reload = schedule(net, chip(per_lane), ops, 2, 1)
    assert reload.preloads == () and not any(b.resident for b in reload.buffers if b.kind == "weight")
    assert sum(tr.kind == "weight" for row in reload.rows for tr in row.loads) == 4
    # each weight lives two rows (loaded beside the previous conv): two at a time fit, four do not
    small = chip(per_lane)
    g, why = try_group(net, small, ops, 2, 1)
    assert g is not None and not g.preloads, why
    g = with_cost(small, net, g)
    once = with_cost(small, net, held)
    assert g.cost["traffic_bytes"] > once.cost["traffic_bytes"]  # the weights travel once per slice
    plan = finish(small, net, assemble(net, small, [g], "test", h_ratio=0.5, bank_rule="soft"))
    assert verify_plan(net, plan) == [] and simulate(net, plan).ok


def test_an_int8_add_of_rows_over_the_lanes_has_its_int16_scratch_laid_out_so():
    """An INT8 Add keeps an int16 intermediate of its output twice (reference s6), laid out as the output is: a
    rank-3 ``[1, 197, 768]`` tensor's rows over the lanes (4 rows a lane), not all 197 rows in one lane (which
    made vit_b_16's first block need 605,184 bytes a lane on BM1684)."""
    from lgopt.hw.sizing import scratch_bytes

    tensors = {n: Tensor(n, (1, 1, 197, 768), "int8", (1, 197, 768)) for n in ("a", "b", "y")}
    net = check_network(Network("s", tensors, (_op("add", "Add", ["a", "b"], ["y"], {}),), ("a", "b"), ("y",)))
    whole = (1, 197, 768, None)
    assert scratch_bytes(CHIP, net, net.ops[0], whole, whole) == 2 * 4 * 768 * 2  # 4 rows a lane, int16, twice
