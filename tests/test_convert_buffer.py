"""The f32 slice of a network input a group converts itself (``f32_in``) has a ``convert`` buffer of its own,
live in its load row only (docs/plan-format.md §12.7): TPU-MLIR converts it in a step of its own before the
first use, and places the stem conv's work buffer over the freed f32 slice (yolov5s_like's INT8 opt1 on
BM1684X: 158,720 bytes of f32 input under a 55,872-byte conv buffer; with the copy held as long as the input,
lgopt needed 266,880 bytes of 262,144)."""

from dataclasses import replace

import onnx
from onnx_graphs import G

from lgopt.check.verify import verify_plan
from lgopt.group.build import assemble, try_group
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import get_chip
from lgopt.io.onnx_import import import_onnx


def _group(tmp_path):
    g = G((1, 3, 64, 64), opset=17)
    g.out(g.n("Relu", [g.conv(g.n("Relu", [g.conv("x", 3, 16, k=7, s=2)]), 16, 16)]))
    path = tmp_path / "stem.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="int8")
    chip = get_chip("bm1684x")
    ops = [op.name for op in net.ops]
    gp, why = try_group(net, chip, ops, 1, 2, None, f32_copies=(net.inputs[0],))
    assert gp is not None, why
    plan = finish(chip, net, assemble(net, chip, [with_cost(chip, net, gp)], "manual", h_ratio=None,
                                      bank_rule="soft"))
    return net, plan


def test_the_f32_copy_lives_in_its_load_row_only(tmp_path):
    net, plan = _group(tmp_path)
    g = plan.groups[0]
    x = net.inputs[0]
    conv = next(b for b in g.buffers if b.kind == "convert")
    act = next(b for b in g.buffers if b.kind == "activation" and b.name == x)
    load_row = next(r for r, row in enumerate(g.rows) for tr in row.loads if tr.name == x)
    assert g.f32_in == (x,) and conv.name == x and conv.start == conv.end == load_row
    assert conv.size == 4 * act.size  # the f32 slice; the tensor's own buffer holds the int8 one alone
    assert verify_plan(net, plan) == []


def test_the_verifier_holds_a_convert_buffer_to_its_rules(tmp_path):
    net, plan = _group(tmp_path)
    g = plan.groups[0]
    conv = next(b for b in g.buffers if b.kind == "convert")

    def with_buffer(**kw):
        bufs = tuple(replace(b, **kw) if b.id == conv.id else b for b in g.buffers)
        return replace(plan, groups=(replace(g, buffers=bufs),))

    off = (conv.start + 1) % len(g.rows)
    assert any("is not live in row" in str(v) for v in verify_plan(net, with_buffer(start=off, end=off)))
    assert any("f32 copy" in str(v) and "needs" in str(v) for v in verify_plan(net, with_buffer(size=conv.size // 2)))
    assert any("does not convert" in str(v) for v in verify_plan(net, replace(plan, groups=(replace(g, f32_in=()),))))
    # without its convert buffer, the tensor's own buffer must hold both slices again
    bufs = tuple(b for b in g.buffers if b.id != conv.id)
    bare = replace(plan, groups=(replace(g, buffers=bufs),))
    assert any("largest slice needs" in str(v) for v in verify_plan(net, bare))


def test_the_group_that_converts_the_input_runs_its_cast_on_the_tiu(tmp_path):
    """TPU-MLIR runs a converted input's Cast as the group's first op: three passes over each slice's f32
    elements into INT8 at the EU's f32 rate (BM1688: 0.75 cycles an element a lane on core 0's timeline), an
    F16 one pass.  lgopt charges it in the row of the first op reading the input, slice by slice, besides the
    f32 bytes the load moves; a group that does not convert the input pays neither."""
    from lgopt.cost.cycles import io_cast_cycles
    from lgopt.cost.pipeline import _table_cells

    g = G((1, 3, 64, 64), opset=17)
    g.out(g.n("Relu", [g.conv(g.n("Relu", [g.conv("x", 3, 16, k=7, s=2)]), 16, 16)]))
    path = tmp_path / "stem.onnx"
    onnx.save(g.model(), str(path))
    for dtype, model, passes in (("int8", "tpu-mlir-1.30-int8", 3), ("f16", "tpu-mlir-1.30", 1)):
        net = import_onnx(path, dtype=dtype)
        chip = get_chip("bm1688", {"cost_model": model})
        x = net.inputs[0]
        gp, why = try_group(net, chip, [op.name for op in net.ops], 1, 2, None, f32_copies=(x,))
        assert gp is not None and gp.f32_in == (x,), why
        tiu = sum(t for t, _ in _table_cells(chip, net, gp, (0, 2)).cells.values())
        plain = sum(t for t, _ in _table_cells(chip, net, replace(gp, f32_in=()), (0, 2)).cells.values())
        rows = [gp.windows[x][s][3] - gp.windows[x][s][2] for s in range(2)]
        assert tiu - plain == sum(io_cast_cycles(chip, net, x, 1, h, 64, True) for h in rows)
        assert io_cast_cycles(chip, net, x, 1, rows[0], 64, True) == passes * rows[0] * 64 // 4  # 16-byte EU
    assert io_cast_cycles(get_chip("bm1684"), net, x, 1, 32, 64, True) == 0  # not measured there: not charged
