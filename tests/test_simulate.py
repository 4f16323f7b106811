"""Plans compute the right thing: simulated execution equals the unsliced network, and broken plans do not."""

from dataclasses import replace

import numpy as np
import pytest
from conftest import PROBLEMS
from dags import dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lgopt.check.simulate import reference, simulate
from lgopt.group.build import assemble, try_group
from lgopt.hw.chip import get_chip
from lgopt.io.onnx_import import import_onnx
from lgopt.strategies.cpsat.optimise import CpsatSettings, optimise
from lgopt.strategies.greedy import greedy
from lgopt.strategies.settings import SearchSettings


def _small(name: str):
    return import_onnx(PROBLEMS / "onnx" / f"{name}.onnx", dtype="f16", input_shapes={"input": (1, 3, 64, 64)},
                       name=name)


@pytest.fixture(scope="module")
def nets():
    return {n: _small(n) for n in ("resnet18", "unet", "yolov5s")}


@pytest.mark.parametrize("chip", ["bm1684x", "cv181x"])
@pytest.mark.parametrize("name", ["resnet18", "unet", "yolov5s"])
def test_greedy_and_cpsat_plans_simulate_exactly(nets, name, chip):
    net, c = nets[name], get_chip(chip)
    plans = [greedy(net, c), optimise(net, c, st=CpsatSettings(time_limit=8))]
    for plan in plans:
        res = simulate(net, plan)
        assert res.ok, (plan.strategy, res.summary())
        assert res.compared >= len(plan.groups)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(max_ops=5), st.integers(1, 2), st.integers(1, 4), st.sampled_from(["bm1684x", "cv181x"]))
def test_random_dag_plans_simulate_exactly(net, n, h, chip):
    c = get_chip(chip)
    g, _ = try_group(net, c, [op.name for op in net.ops], n, h)
    if g is None:
        return
    plan = assemble(net, c, [g], "manual", h_ratio=0.5, bank_rule="soft")
    res = simulate(net, plan)
    assert res.ok, res.summary()


# --- mutations: each must be caught as a mismatch, not a crash ------------------------------------------

@pytest.fixture(scope="module")
def sliced(nets):
    net = nets["resnet18"]
    plan = greedy(net, get_chip("cv181x"))
    gi = next(i for i, g in enumerate(plan.groups) if g.h_slices > 1 and len(g.ops) > 1
              and sum(b.kind == "weight" for b in g.buffers) >= 2)
    assert simulate(net, plan).ok
    return net, plan, gi


def _with(plan, gi, g):
    groups = list(plan.groups)
    groups[gi] = g
    return replace(plan, groups=tuple(groups))


def _fails(net, plan):
    res = simulate(net, plan)
    assert not res.ok and res.mismatch is not None and not res.error, res.summary()
    return res


def test_buffer_moved_onto_a_live_one(sliced):
    net, plan, gi = sliced
    g = plan.groups[gi]
    T = len(g.rows)
    a, b = next((a, b) for a in g.buffers for b in g.buffers if a.id < b.id and a.rows(T) & b.rows(T)
                and a.kind == b.kind == "activation")
    _fails(net, _with(plan, gi, replace(g, buffers=tuple(replace(x, offset=a.offset) if x.id == b.id else x
                                                          for x in g.buffers))))


def test_lifetime_shortened_by_one_row(sliced):
    net, plan, gi = sliced
    g = plan.groups[gi]
    T = len(g.rows)
    v = next(x for x in g.buffers if x.kind == "activation" and not x.resident and x.start != x.end)
    res = _fails(net, _with(plan, gi, replace(g, buffers=tuple(replace(x, end=(x.end - 1) % T) if x.id == v.id else x
                                                               for x in g.buffers))))
    assert np.isnan(res.mismatch.got)  # the freed rows were read


def test_halo_shrunk_by_one_row(sliced):
    net, plan, gi = sliced
    g = plan.groups[gi]
    t = net.op(g.ops[0]).inputs[0]
    ws = list(g.windows[t])
    n0, n1, h0, h1 = ws[1]
    ws[1] = (n0, n1, h0 + 1, h1)
    res = _fails(net, _with(plan, gi, replace(g, windows={**g.windows, t: tuple(ws)})))
    assert res.mismatch.slice == 1


def test_weight_offsets_swapped(sliced):
    """A consistent swap of two equal-size resident weights is a valid plan; swapping weights of different
    sizes lands the larger one on a live buffer and is caught."""
    net, plan, gi = sliced
    g = plan.groups[gi]
    w = [b for b in g.buffers if b.kind == "weight"]
    big = max(w, key=lambda b: b.size)
    others = sorted((b for b in g.buffers if b.id != big.id and b.size < big.size and b.offset != big.offset),
                    key=lambda b: b.offset)
    small = next(b for b in others if b.kind in ("weight", "activation"))
    swapped = replace(g, buffers=tuple(replace(x, offset=small.offset) if x.id == big.id else
                                       replace(x, offset=big.offset) if x.id == small.id else x for x in g.buffers))
    _fails(net, _with(plan, gi, swapped))


def test_wrong_model_and_unrunnable_plan(sliced):
    net, plan, gi = sliced
    g = plan.groups[gi]
    lmem = plan.chip["lmem_bytes"]
    res = simulate(net, _with(plan, gi, replace(g, buffers=tuple(replace(b, offset=lmem) for b in g.buffers))))
    assert not res.ok and "outside LMEM" in res.error


# --- kernels against onnxruntime ----------------------------------------------------------------------

def test_reference_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from onnx import numpy_helper

    from lgopt.check.simulate import make_inputs, make_weights

    model = onnx.load(str(PROBLEMS / "onnx" / "unet.onnx"), load_external_data=False)
    net = import_onnx(PROBLEMS / "onnx" / "unet.onnx", fuse=False, input_shapes={"input": (1, 3, 32, 32)})
    weights = make_weights(net, 0)
    inits = []
    for init in model.graph.initializer:
        if init.name in weights:
            inits.append(numpy_helper.from_array(weights[init.name].reshape(tuple(init.dims)).astype(np.float32),
                                                 init.name))
        else:
            inits.append(init)
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 32
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 32
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = make_inputs(net, 0)["input"]
    got = sess.run(None, {"input": x.astype(np.float32)})[0]
    ref, _ = reference(net, 0)
    want = ref[net.outputs[0]]
    assert np.allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


def test_a_constant_read_at_two_ranks_and_an_opaque_divisor_simulate(tmp_path):
    """One scalar constant read by an op on rank-4 tensors and by one on rank-3 tensors (the importer gives it
    each op's rank: ``(1, 1, 1, 1)`` and ``(1, 1, 1)``), and a Div whose divisor a global layer computes
    (EdgeNeXt's ``q / clip(norm(q))``): the simulator loads each op's constant in that op's shape, and an
    opaque output is never 0, so the reference has no NaN (which marks rows a slice never loaded).  Both made
    the zoo's greedy plans of TinyViT and EdgeNeXt fail to simulate."""
    import onnx
    from onnx_graphs import G

    g = G((1, 8, 4, 16), opset=17)
    s = g.w(None, np.array(0.5, dtype=np.float32))
    a = g.n("Mul", ["x", s])
    norm = g.n("ReduceL2", [a, g.w(None, np.array([-1], dtype=np.int64))], keepdims=1)  # a global layer
    g.out(g.n("Div", [a, g.n("Expand", [norm, g.w(None, np.array([1, 8, 4, 16], dtype=np.int64))])]))
    r = g.n("Reshape", [a, g.w(None, np.array([1, 32, 16], dtype=np.int64))])
    g.out(g.n("Mul", [g.n("Relu", [r]), s]))
    path = tmp_path / "m.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="f16")
    shapes = {w.shape for op in net.ops for w in op.weights if w.name == s}
    assert shapes == {(1, 1, 1, 1), (1, 1, 1)}
    assert not np.isnan(reference(net)[0][net.outputs[0]]).any()
    plan = greedy(net, get_chip("bm1684x", {"lmem_bytes": "2K"}), SearchSettings())
    assert simulate(net, plan).ok


def test_a_batchnorm_whose_scale_is_its_variance_simulates(tmp_path):
    """An exporter shares equal initializers: a BatchNormalization of ones and zeros reads one tensor as its scale
    and its variance, another as its bias and its mean (MaxViT's ``pre_norm``).  Its statistics are folded into
    scale and bias when it loads; in the group it runs as that scale and bias alone, so the plan simulates (the
    simulator read the folded scale back as the variance: MaxViT's and XCiT's greedy plans failed)."""
    import onnx
    from onnx_graphs import G

    g = G((1, 8, 16, 16), opset=17)
    ones, zeros = g.w(None, np.ones(8, np.float32)), g.w(None, np.zeros(8, np.float32))
    y = g.n("Relu", [g.n("BatchNormalization", ["x", ones, zeros, zeros, ones], epsilon=1e-3)])
    y = g.n("Relu", [g.conv(y, 8, 8)])  # a second BN reads the ones as its scale only: not 1 in the simulation
    y = g.n("BatchNormalization", [y, ones, zeros, zeros, g.w(None, np.ones(8, np.float32))], epsilon=1e-3)
    g.out(g.conv(g.n("Relu", [y]), 8, 8))
    path = tmp_path / "m.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="f16")
    bn = next(op for op in net.ops if op.type == "BatchNormalization")
    assert bn.local and {w.role: w.name for w in bn.weights} == {"scale": ones, "var": ones, "bias": zeros,
                                                                 "mean": zeros}
    plan = greedy(net, get_chip("bm1684x", {"lmem_bytes": "4K"}), SearchSettings())
    assert any(bn.name in grp.ops and len(grp.ops) > 1 for grp in plan.groups)
    assert simulate(net, plan).ok
