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
