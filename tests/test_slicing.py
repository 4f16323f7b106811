import pytest
from dags import _op, dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lgopt.check.verify import _receptive_rows
from lgopt.group.slicing import SliceError, even_split, group_io, h_overlap, slice_group
from lgopt.model.network import Network, Tensor, check_network


# --- seed "LayerGroup": the h = 100 examples of the h/2 rule -----------------------------------------
def test_h_rule_seed_examples():
    assert h_overlap(100, [(0, 80), (20, 100)]) == 60  # "considered as failed"
    assert h_overlap(100, [(0, 60), (20, 100)]) == 40  # "considered as success"
    assert h_overlap(100, [(0, 80), (20, 100)]) > 0.5 * 100
    assert h_overlap(100, [(0, 60), (20, 100)]) <= 0.5 * 100


def _conv_net(h: int, k: int, pad: int) -> Network:
    """x (h rows) -> conv k x 1, stride 1 -> y (h + 2*pad - k + 1 rows)."""
    oh = h + 2 * pad - k + 1
    t = {"x": Tensor("x", (1, 4, h, 4), "f16", (1, 4, h, 4)), "y": Tensor("y", (1, 4, oh, 4), "f16", (1, 4, oh, 4))}
    from lgopt.model.network import Weight

    op = _op("conv", "Conv", ["x"], ["y"], {"kernel": (k, 1), "strides": (1, 1), "dilations": (1, 1),
                                           "pads": (pad, 0, pad, 0), "group": 1},
             [Weight("w", (4, 4, k, 1), "f16", "filter")])
    return check_network(Network("c", t, (op,), ("x",), ("y",)))


def test_h_rule_seed_example_through_slicing():
    """A conv whose two H slices read x[0,80) and x[20,100) fails; [0,60) and [20,100) passes."""
    net = _conv_net(100, 41, 0)  # y has 60 rows; slices y[0,30), y[30,60) read x[0,70), x[30,100)
    sl = slice_group(net, ["conv"], 1, 2)
    assert [w.h for w in sl.windows["x"]] == [(0, 70), (30, 100)]
    net = _conv_net(100, 61, 0)  # y has 40 rows: x[0,80) and x[20,100): 60 duplicated rows
    with pytest.raises(SliceError, match="h/2 rule"):
        slice_group(net, ["conv"], 1, 2)
    net = _conv_net(100, 41, 0)
    # y[0,20) reads x[0,60); y[20,60) reads x[20,100): 40 duplicated rows, allowed
    assert h_overlap(100, [(0, 60), (20, 100)]) == 40
    # a stricter ratio turns the same slicing down
    with pytest.raises(SliceError, match="h/2 rule"):
        slice_group(net, ["conv"], 1, 2, h_ratio=0.3)


def test_even_split():
    assert even_split(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert even_split(7, 7) == [(i, i + 1) for i in range(7)]
    assert even_split(6, 2, unit=4) == [(0, 4), (4, 6)]
    with pytest.raises(SliceError):
        even_split(3, 4)


@given(st.integers(1, 500), st.integers(1, 50), st.sampled_from([1, 2, 4]))
def test_even_split_properties(length, parts, unit):
    units = -(-length // unit)
    if parts > units:
        with pytest.raises(SliceError):
            even_split(length, parts, unit)
        return
    ws = even_split(length, parts, unit)
    assert ws[0][0] == 0 and ws[-1][1] == length
    assert all(a[1] == b[0] for a, b in zip(ws, ws[1:]))
    sizes = [-(-(b - a) // unit) for a, b in ws]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_empty_and_non_advancing_rejected():
    net = _conv_net(8, 3, 1)
    with pytest.raises(SliceError, match="exceeds the height"):
        slice_group(net, ["conv"], 1, 9)
    with pytest.raises(SliceError, match="empty"):
        slice_group(net, [], 1, 1)


def _hull(rows):
    return (min(rows), max(rows) + 1) if rows else None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.integers(1, 3), st.integers(1, 6), st.sampled_from([0.5, 1.0, 10.0]))
def test_windows_match_enumerated_receptive_fields(net, n_slices, h_slices, ratio):
    """Closed-form backward windows equal the hull of rows found by enumerating every op's taps,
    contain every row really read, stores partition the outputs, and the h/2 rule holds."""
    names = [op.name for op in net.ops]
    try:
        sl = slice_group(net, names, n_slices, h_slices, h_ratio=ratio)
    except SliceError as e:
        msg = str(e)
        assert any(k in msg for k in ("h/2 rule", "empty", "exceeds", "advance", "non-empty", "allow"))
        return
    io = group_io(net, names)
    S = n_slices * h_slices
    for s in range(S):
        need: dict[str, tuple[int, int]] = {}
        exact: dict[str, set[int]] = {}
        for t in io.outputs:
            w = sl.stores[t][s]
            need[t] = w.h
            exact[t] = set(range(*w.h))
        for op in reversed(net.ops):
            out = op.outputs[0]
            win = sl.windows[out][s].h
            assert need[out] == win, (out, s)
            for k, t in enumerate(op.inputs):
                rows = _receptive_rows(op, k, range(*win), net.tensor(t).h, net.tensor(out).h)
                hull = _hull(rows)
                if hull:
                    need[t] = hull if t not in need else (min(need[t][0], hull[0]), max(need[t][1], hull[1]))
                exact.setdefault(t, set()).update(_receptive_rows(op, k, sorted(exact[out]), net.tensor(t).h,
                                                                  net.tensor(out).h) if exact[out] else set())
        for t, rows in exact.items():
            a, b = sl.windows[t][s].h
            assert all(a <= r < b for r in rows), (t, s)
        assert need["x"] == sl.windows["x"][s].h
    for t in io.outputs:
        cover = [0] * net.tensor(t).h
        for ni in range(n_slices):
            for hi in range(h_slices):
                a, b = sl.stores[t][ni * h_slices + hi].h
                for r in range(a, b):
                    cover[r] += 1
        assert cover == [n_slices] * net.tensor(t).h
    for t, ws in sl.windows.items():
        H = net.tensor(t).h
        if H > 1 and h_slices > 1:
            assert h_overlap(H, [w.h for w in ws[:h_slices]]) <= ratio * H


def test_fork_tensor_takes_union_window():
    """x feeds a 3-tap conv and a 5-tap conv: x's window is the union of what both read."""
    from lgopt.model.network import Weight

    t = {n: Tensor(n, (1, 4, 32, 4), "f16", (1, 4, 32, 4)) for n in ("x", "a", "b", "y")}
    w = lambda n, k: [Weight(n, (4, 4, k, 1), "f16", "filter")]  # noqa: E731
    conv = lambda n, i, o, k: _op(n, "Conv", i, o, {"kernel": (k, 1), "strides": (1, 1), "dilations": (1, 1),  # noqa
                                                    "pads": (k // 2, 0, k // 2, 0), "group": 1}, w(n, k))
    ops = (conv("c3", ["x"], ["a"], 3), conv("c5", ["x"], ["b"], 5), _op("add", "Add", ["a", "b"], ["y"], {}))
    net = check_network(Network("fork", t, ops, ("x",), ("y",)))
    sl = slice_group(net, ["c3", "c5", "add"], 1, 2)
    assert [w.h for w in sl.windows["x"]] == [(0, 18), (14, 32)]
    assert [w.h for w in sl.windows["a"]] == [(0, 16), (16, 32)]


def test_global_pool_only_unsliced_and_broadcast():
    t = {"x": Tensor("x", (2, 8, 16, 16), "f16", (2, 8, 16, 16)), "g": Tensor("g", (2, 8, 1, 1), "f16", (2, 8, 1, 1)),
         "y": Tensor("y", (2, 8, 16, 16), "f16", (2, 8, 16, 16))}
    ops = (_op("gap", "GlobalAveragePool", ["x"], ["g"], {}), _op("mul", "Mul", ["x", "g"], ["y"], {}))
    net = check_network(Network("se", t, ops, ("x",), ("y",)))
    with pytest.raises(SliceError, match="does not allow slicing H"):
        slice_group(net, ["gap", "mul"], 1, 2)
    sl = slice_group(net, ["gap", "mul"], 2, 1)
    assert [w.n for w in sl.windows["g"]] == [(0, 1), (1, 2)]
    assert [w.h for w in sl.windows["g"]] == [(0, 1), (0, 1)]
    sl = slice_group(net, ["mul"], 1, 4)  # g enters from outside, broadcast over H: one row each slice
    assert [w.h for w in sl.windows["g"]] == [(0, 1)] * 4


def test_n_unit_on_4n_chips():
    t = {"x": Tensor("x", (6, 8, 4, 4), "int8", (6, 8, 4, 4)), "y": Tensor("y", (6, 8, 4, 4), "int8", (6, 8, 4, 4))}
    net = check_network(Network("n", t, (_op("r", "Relu", ["x"], ["y"], {}),), ("x",), ("y",)))
    sl = slice_group(net, ["r"], 2, 1, n_unit=4)
    assert [w.n for w in sl.windows["x"]] == [(0, 4), (4, 6)]
    with pytest.raises(SliceError):
        slice_group(net, ["r"], 3, 1, n_unit=4)


def test_tpu_mlirs_rule_aligns_upsample_slices_to_the_factor():
    """TPU-MLIR's Upsample (a nearest Resize by a whole factor) needs every output slice to start and end on
    a multiple of the factor; lgopt's own rule does not need it (its windows are exact either way)."""
    t = {"x": Tensor("x", (1, 8, 5, 4), "f16", (1, 8, 5, 4)), "y": Tensor("y", (1, 8, 10, 8), "f16", (1, 8, 10, 8))}
    up = _op("up", "Resize", ["x"], ["y"], {"mode": "nearest", "coord": "asymmetric", "nearest_mode": "floor"})
    net = check_network(Network("up", t, (up,), ("x",), ("y",)))
    slice_group(net, ["up"], 1, 3, h_ratio=0.5)  # rows 0:4, 4:7, 7:10
    with pytest.raises(SliceError, match="multiples of its factor 2"):
        slice_group(net, ["up"], 1, 3, h_ratio=None)
    assert slice_group(net, ["up"], 1, 5, h_ratio=None).windows["x"][1].h == (1, 2)  # rows 2:4 of y
