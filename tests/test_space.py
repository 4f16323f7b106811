"""The CP-SAT optimiser's candidate space: which intervals it lists, what ``fits`` rules out, when two
candidates share a signature, and which slicings it offers (and with which keys)."""

import itertools
import random
from collections import defaultdict
from dataclasses import replace
from functools import cache

import pytest
from conftest import PROBLEMS
from test_cpsat import SMALL, _tiny

from lgopt.cost.pipeline import group_cost
from lgopt.group.alloc import pack_items
from lgopt.group.build import c_slice_options, n_unit, schedule, try_group
from lgopt.group.handover import handover, pin_kept, pin_offset, whole_bytes, without_kept
from lgopt.group.pack import peak_live_bytes
from lgopt.group.slicing import SliceError, group_io
from lgopt.hw.chip import get_chip
from lgopt.hw.layout import cdiv
from lgopt.io.problem import load_problem
from lgopt.strategies.cpsat.loadtable import chosen_weights, load_options, with_loads
from lgopt.strategies.cpsat.space import CandidateSpace
from lgopt.strategies.settings import SearchSettings

CV181X = get_chip("cv181x")


@cache
def _net(name):
    return load_problem(PROBLEMS / f"{name}.json")


def _tightest(g):
    """The table with every in-table weight loaded as late as it may: the fewest bytes live in every row."""
    use = chosen_weights(g)
    return with_loads(g, {o: (u - 1, 1) for o, u in use.items() if u >= 1}) if use else g


def _batch_units(net, chip, ops):
    io = group_io(net, ops)
    return cdiv(max(net.tensor(t).n for t in io.outputs), n_unit(net, chip, ops))


def _max_h(space, ops):
    io = group_io(space.net, ops)
    return min(space.settings.max_h_slices, min(space.net.tensor(t).h for t in io.outputs))


# --- intervals ------------------------------------------------------------------------------------------

INTERVAL_CASES = [(p, c, m) for p in ("resnet18", "yolov5s", "mobilenet_v2", "unet")
                  for c in ("cv181x", "small", "bm1684x") for m in (3, 256)]


@pytest.mark.parametrize("problem,chip_name,max_ops", INTERVAL_CASES)
def test_intervals_are_the_runs_that_fit(problem, chip_name, max_ops):
    """Plain candidates are exactly the runs of consecutive local ops, at most ``max_group_ops`` long, that
    pass ``fits`` in some mode (the early ``break`` loses none); no candidate is listed twice."""
    chip = SMALL if chip_name == "small" else get_chip(chip_name)
    space = CandidateSpace(_net(problem), chip, SearchSettings(max_group_ops=max_ops))
    listed = space.intervals()
    assert len(listed) == len(set(listed))
    plain = [(i, j) for i, j, v in listed if v == ""]
    local = [k for k, op in enumerate(space.net.ops) if op.local]
    expected = {(i, j) for i in local for j in range(i, min(len(space.net.ops), i + max_ops))
                if all(space.net.ops[k].local for k in range(i, j + 1)) and any(space.fits(i, j))}
    assert set(plain) == expected
    for s, e in space.runs:  # runs are maximal stretches of local ops
        assert all(space.net.ops[k].local for k in range(s, e + 1))
        assert s == 0 or not space.net.ops[s - 1].local
        assert e == len(space.net.ops) - 1 or not space.net.ops[e + 1].local


def test_intervals_split_at_global_ops():
    """A global op between local ones splits the runs: no candidate spans it."""
    net = _net("resnet18")
    ops = list(net.ops)
    mid = next(k for k in range(len(ops) // 2, len(ops)) if ops[k].local)
    net2 = replace(net, ops=tuple(replace(op, local=False) if k == mid else op for k, op in enumerate(ops)))
    space = CandidateSpace(net2, get_chip("bm1684x"))
    assert space.runs[0][1] == mid - 1 and space.runs[1][0] == mid + 1
    listed = space.intervals()
    assert not any(i <= mid <= j for i, j, _ in listed)
    assert any(j == mid - 1 for _, j, _ in listed) and any(i == mid + 1 for i, _, _ in listed)


@pytest.mark.parametrize("problem", ["resnet18", "yolov5s", "mobilenet_v2", "unet"])
def test_handover_variants(problem):
    """Every "in" / "out" variant has its plain twin, and appears exactly where the boundary hands over
    tensors that fit in whole banks -- "in" not on a group holding every reader of a handed-over tensor read
    by more than the boundary's op (its giver stores it: that store would serve nobody); with
    ``handover=False`` there are none."""
    net = _net(problem)
    space = CandidateSpace(net, CV181X)
    listed = space.intervals()
    plain = {(i, j) for i, j, v in listed if v == ""}

    def keepable(b):
        ts = handover(net, b)
        return bool(ts) and pin_offset(CV181X, whole_bytes(CV181X, net, ts)) > 0

    def holds_all_readers(i, j):
        readers = [[net.op_index[c.name] for c in net.consumers[t]] for t in handover(net, i)]
        return any(len(r) > 1 and all(i <= k <= j for k in r) for r in readers)

    assert {(i, j) for i, j, v in listed if v == "in"} == {(i, j) for i, j in plain
                                                          if keepable(i) and not holds_all_readers(i, j)}
    assert {(i, j) for i, j, v in listed if v == "out"} == {(i, j) for i, j in plain if keepable(j + 1)}
    assert any(v for *_, v in listed)
    for i, j, v in listed:
        kin, kout = space.kept(i, j, v)
        assert (bool(kin), bool(kout)) == (v == "in", v == "out")  # one or the other, never both
    no_handover = CandidateSpace(net, CV181X, handover=False).intervals()
    assert no_handover == [(i, j, "") for i, j in ((i, j) for i, j, v in listed if v == "")]


# --- fits -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("problem,chip_name", [("resnet18", "cv181x"), ("yolov5s", "small"),
                                               ("mobilenet_v2", "cv181x"), ("unet", "bm1684x")])
def test_fits_is_monotone(problem, chip_name):
    """A mode that fails for [i, j] fails for [i, j+1] and [i-1, j], at any capacity, except that a longer run
    may be sliced where its weights reach LMEM's size and every slice reloads them (``reloads_weights``)."""
    chip = SMALL if chip_name == "small" else get_chip(chip_name)
    space = CandidateSpace(_net(problem), chip)
    n = len(space.net.ops)
    rng = random.Random(0)
    for cap in (None, chip.lmem_bytes // 2, chip.lmem_bytes // 8):
        for _ in range(300):
            i = rng.randrange(1, n - 1)
            j = rng.randrange(i, n - 1)
            f = space.fits(i, j, cap)
            for mode in (0, 1):
                if not f[mode]:
                    for a, b in ((i, j + 1), (i - 1, j)):
                        assert not space.fits(a, b, cap)[mode] or mode == 1 and space.reloads_weights(a, b) \
                            and not space.reloads_weights(i, j)


@pytest.mark.parametrize("problem", ["yolov5s", "resnet18"])
def test_fits_is_necessary_for_placed_groups(problem):
    """Every group ``try_group`` places passes ``fits`` in its mode (unsliced when n*h == 1, else sliced)."""
    net = _net(problem)
    space = CandidateSpace(net, CV181X)
    s, e = space.runs[0]
    rng = random.Random(0)
    spans = [(i, j) for i in range(s, e + 1) for j in range(i, min(e, i + 4) + 1)]
    placed = 0
    for i, j in rng.sample(spans, 80):
        ops = space.names[i:j + 1]
        for n in range(1, _batch_units(net, CV181X, ops) + 1):
            for h in (1, 2, 4, 8):
                g, _ = try_group(net, CV181X, ops, n, h)
                if g is not None:
                    placed += 1
                    assert space.fits(i, j)[0 if n * h == 1 else 1], (i, j, n, h)
    assert placed >= 10  # the sample exercised the claim


# --- signature ------------------------------------------------------------------------------------------

def test_signature_identifies_repeated_blocks():
    """ResNet-50's repeated bottlenecks: structurally identical candidates share a signature (and their
    slicings the same keys); a candidate whose ops differ in a shape does not."""
    net = _net("resnet50")
    space = CandidateSpace(net, CV181X)
    by_sig = defaultdict(list)
    for key in space.intervals():
        by_sig[space.signature(*key)].append(key)
    shared = [ks for ks in by_sig.values() if len(ks) > 1]
    assert any(j - i >= 4 for ks in shared for i, j, _ in ks)  # whole blocks repeat, not only single ops

    def describe(i, j):
        return [(net.ops[k].type, tuple(net.tensor(t).shape for t in net.ops[k].outputs)) for k in range(i, j + 1)]

    for ks in shared:
        descs = {tuple(describe(i, j)) for i, j, _ in ks}
        assert len(descs) == 1  # same types, same shapes
        keys = {tuple((c.n, c.h, c.key, c.free_loads)
                      for c in space.slicings(space.names[i:j + 1], *space.kept(i, j, v))) for i, j, v in ks}
        assert len(keys) == 1, ks
    # the same op types with a different shape: a different signature
    types = defaultdict(list)
    for i, j, v in space.intervals():
        if v == "":
            types[tuple(net.ops[k].type for k in range(i, j + 1))].append((i, j))
    differing = 0
    for spans in types.values():
        for (a, b), (c, d) in zip(spans, spans[1:]):
            if describe(a, b) != describe(c, d):
                differing += 1
                assert space.signature(a, b) != space.signature(c, d)
    assert differing > 0


def test_signature_sees_a_changed_shape():
    """Two otherwise identical networks whose one tensor differs in width: different signatures."""
    net = _tiny("chain")
    wide = replace(net, tensors={**net.tensors, "b": replace(net.tensors["b"], shape=(2, 16, 32, 17))})
    a, b = CandidateSpace(net, SMALL), CandidateSpace(wide, SMALL)
    assert a.signature(0, 1) != b.signature(0, 1)  # b is op 1's output
    assert a.signature(1, 2) != b.signature(1, 2)  # and op 2's input
    assert a.signature(3, 3) == b.signature(3, 3)  # op 3 does not see it


# --- slicings -------------------------------------------------------------------------------------------

def _check_slicings(space, i, j, v, all_loads=False):
    """The listed slicings of one candidate against the rules they are documented to follow."""
    net, chip = space.net, space.chip
    ops = space.names[i:j + 1]
    kin, kout = space.kept(i, j, v)
    pchip = space.inner_chip(kin + kout)
    listed = space.slicings(ops, kin, kout)
    keys = [(c.n, c.c, c.h, c.w) for c in listed]
    assert len(keys) == len(set(keys))
    got = [(c.n, c.h) for c in listed if c.c == c.w == 1]  # the N x H grid, then column and channel slicings
    assert got == sorted(got)
    for c in listed:
        g = schedule(net, chip, ops, c.n, c.h, space.settings.h_ratio, kept_in=kin, kept_out=kout, w_slices=c.w,
                     c_slices=c.c)  # legal
        assert c.table == pin_kept(chip, g)[0]
        assert peak_live_bytes(pack_items(without_kept(_tightest(c.table))), chip.align_bytes) <= pchip.lmem_bytes
        value = space.value(group_cost(chip, net, c.table))
        if c.c > 1:  # a channel slicing: only of channel-local ops, never with a hand-over
            assert c.c in c_slice_options(net, chip, ops) and not (kin or kout)
        if c.free_loads:
            assert c.n * c.h == 1 and chosen_weights(c.table)
            assert c.key <= value
            if all_loads:  # a bound over every load choice, not only the scheduled one
                use = chosen_weights(c.table)
                names = sorted(use)
                for choice in itertools.product(*(load_options(use[o], len(c.table.rows)) for o in names)):
                    assert c.key <= space.value(group_cost(chip, net, with_loads(c.table, dict(zip(names, choice)))))
        else:
            assert c.key == value
            assert peak_live_bytes(pack_items(without_kept(c.table)), chip.align_bytes) <= pchip.lmem_bytes
    # completeness: n from 1, h from 1 up to the first count a slicing rule refuses; only what overflows LMEM
    # row by row is left out
    expected = []
    for n in range(1, _batch_units(net, chip, ops) + 1):
        for h in range(1, _max_h(space, ops) + 1):
            try:
                g = schedule(net, chip, ops, n, h, space.settings.h_ratio, kept_in=kin, kept_out=kout)
            except SliceError:
                break
            inner = without_kept(pin_kept(chip, g)[0])
            if peak_live_bytes(pack_items(_tightest(inner)), chip.align_bytes) <= pchip.lmem_bytes:
                expected.append((n, h))
    assert got == expected, (net.name, i, j, v, set(got) ^ set(expected))
    return listed


@pytest.mark.parametrize("kind", ["chain", "res", "head_tail"])
def test_slicings_tiny(kind):
    """Every plain candidate of the tiny networks on a 16 KiB chip: legal tables, exact keys (or bounds over
    every load choice), nothing that overflows, nothing missing."""
    space = CandidateSpace(_tiny(kind), SMALL)
    listed = [_check_slicings(space, i, j, v, all_loads=True) for i, j, v in space.intervals() if v == ""]
    assert any(c.h > 1 for cs in listed for c in cs)  # slicing matters here
    assert any(c.free_loads for cs in listed for c in cs)


def test_slicings_resnet18():
    space = CandidateSpace(_net("resnet18"), CV181X)
    listed = [_check_slicings(space, i, j, v) for i, j, v in space.intervals() if v == ""]
    assert sum(map(len, listed)) > 100


@pytest.mark.parametrize("problem", ["mobilenet_v2", "yolov5s"])
def test_slicings_of_handover_candidates(problem):
    """Hand-over variants follow the same rules: every slicing whose unpinned buffers fit below the pinned
    tensor is listed."""
    chip = CV181X if problem == "mobilenet_v2" else get_chip("cv181x", {"lmem_bytes": "64K"})
    space = CandidateSpace(_net(problem), chip)
    for i, j, v in space.intervals():
        if v and j - i <= 1:
            _check_slicings(space, i, j, v)


def test_trusted_groups_are_candidates_of_their_own_and_pack_into_all_of_lmem():
    """The reference's own groups (``SearchSettings.trusted``) are evaluated first by the decomposed search
    (contiguous runs only), and a structurally identical run that is not trusted is a different candidate:
    it packs below the reserved banks."""
    from lgopt.strategies.settings import group_shape

    net = load_problem(PROBLEMS / "resnet18.json")
    names = [op.name for op in net.ops]
    trusted = frozenset({group_shape(names[2:5], 1, 1, 1, 1), group_shape([names[6], names[8]], 1, 1, 1, 1)})
    space = CandidateSpace(net, get_chip("bm1684x"), SearchSettings(reserve_banks=2, trusted=trusted))
    assert space.trusted_intervals() == [(2, 4, "")]  # names 6 and 8 are not a run
    plain = CandidateSpace(net, get_chip("bm1684x"), SearchSettings(reserve_banks=2))
    assert space.signature(2, 4) != plain.signature(2, 4) and space.signature(5, 7) == plain.signature(5, 7)


def test_an_f32_input_load_shares_the_last_ops_row():
    """TPU-MLIR converts an f32 network input in a Cast row of its own, so the next slice's f32 load overlaps
    the group's last op; in lgopt's one-op table it sits in a row after the op, and is charged to the op's."""
    from lgopt.cost.pipeline import pipeline_cells

    net = load_problem(PROBLEMS / "resnet18.json")
    chip = get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"})
    first = [net.ops[0].name]
    f16 = schedule(net, chip, first, 1, 4, None)
    f32 = schedule(net, chip, first, 1, 4, None, f32_copies=(net.inputs[0],))
    assert f32.f32_in == (net.inputs[0],) and not f16.f32_in and len(f32.rows) == 2 and not f32.rows[1].ops
    c16, c32 = pipeline_cells(chip, net, f16).cells, pipeline_cells(chip, net, f32).cells
    for i in range(3):  # steady iterations: the next slice's load moved from the tail row to the op's row
        assert c32.get((i, 1), (0, 0))[1] < c16[(i, 1)][1] and c32[(i, 0)][1] > c16.get((i, 0), (0, 0))[1]
