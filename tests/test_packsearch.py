"""The exact search against exhaustive enumeration, its proofs of infeasibility, and the validator."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lgopt.errors import LgoptError
from lgopt.group.pack import pack, peak_live_bytes
from lgopt.group.packsearch import PackItem, PackProblem, validate
from lgopt.group.packsearch.problem import aligned, banks
from lgopt.group.packsearch.solver import minimize_height, solve
from lgopt.group.packsearch.sweep import sweep


def _live_together(a: PackItem, b: PackItem) -> bool:
    return any(s0 < t1 and t0 < s1 for s0, s1 in a.spans for t0, t1 in b.spans)


def _exhaustive(problem: PackProblem) -> bool:
    """Every aligned offset of every buffer, one connected group of interacting buffers at a time (groups
    that share no time and no bank pair are independent): written without any of the search's ideas."""
    items = problem.items
    hard = {frozenset(p) for p in problem.hard_pairs}

    def clash(a: PackItem, oa: int, b: PackItem, ob: int) -> bool:
        if a.size and b.size and _live_together(a, b) and oa < ob + b.size and ob < oa + a.size:
            return True
        return frozenset((a.id, b.id)) in hard and bool(
            set(banks(oa, a.size, problem.bank_bytes)) & set(banks(ob, b.size, problem.bank_bytes)))

    def linked(a: PackItem, b: PackItem) -> bool:
        return _live_together(a, b) or frozenset((a.id, b.id)) in hard

    todo = list(items)
    while todo:  # split into connected groups
        group = [todo.pop(0)]
        grew = True
        while grew:
            grew = False
            for it in list(todo):
                if any(linked(it, g) for g in group):
                    group.append(it)
                    todo.remove(it)
                    grew = True
        choices = [[it.fixed] if it.fixed is not None else
                   list(range(0, problem.capacity - it.size + 1, problem.align)) for it in group]
        if any(not c or c[0] + it.size > problem.capacity for c, it in zip(choices, group)):
            return False
        if not _place_all(group, choices, clash):
            return False
    return True


def _place_all(group: list[PackItem], choices: list[list[int]], clash) -> bool:
    """Depth first over every combination of offsets, pruned only by a clash with one already chosen."""
    def place(k: int, offs: list[int]) -> bool:
        if k == len(group):
            return True
        for o in choices[k]:
            if not any(clash(group[k], o, group[j], offs[j]) for j in range(k)):
                if place(k + 1, offs + [o]):
                    return True
        return False

    return place(0, [])


def _lowest_height(problem: PackProblem) -> int | None:
    for cap in range(0, problem.capacity + 1):
        if _exhaustive(replace(problem, capacity=cap)):
            return cap
    return None


@st.composite
def problems(draw: st.DrawFn, max_n: int = 6, max_cap: int = 16) -> PackProblem:
    n = draw(st.integers(1, max_n))
    T = draw(st.integers(2, 8))
    align = draw(st.sampled_from([1, 1, 1, 2, 4]))
    items = []
    for i in range(n):
        if draw(st.integers(0, 4)) == 0:  # wrap-around: live at the end of the table and again at its start
            e = draw(st.integers(1, T - 1))
            s = draw(st.integers(e, T - 1))
            spans: tuple[tuple[int, int], ...] = ((s, T), (0, e))
        else:
            lo = draw(st.integers(0, T - 1))
            spans = ((lo, draw(st.integers(lo + 1, T))),)
        fixed = None
        if draw(st.integers(0, 6)) == 0:
            fixed = draw(st.integers(0, max_cap // align)) * align
        items.append(PackItem(f"b{i}", draw(st.integers(1, 6)), spans, fixed))
    cap = draw(st.integers(1, max_cap))
    pairs: tuple[tuple[str, str], ...] = ()
    bank = 0
    if n > 1 and draw(st.booleans()):
        bank = draw(st.sampled_from([2, 4, 8]))
        every = list(itertools.combinations([it.id for it in items], 2))
        pairs = tuple(sorted({draw(st.sampled_from(every)) for _ in range(draw(st.integers(1, 3)))}))
    return PackProblem(tuple(items), cap, align, bank, pairs, "hard" if pairs else "off")


@settings(max_examples=250, deadline=None)
@given(problems())
def test_search_matches_exhaustive_enumeration(problem):
    res = solve(problem, work=1_000_000)
    assert res.status in ("found", "infeasible"), res.why  # never "unknown" at these sizes
    assert res.found == _exhaustive(problem)
    if res.found:
        assert validate(problem, res.solution.offsets) is None


@settings(max_examples=60, deadline=None)
@given(problems(max_n=5, max_cap=12))
def test_lowest_height_matches_exhaustive_enumeration(problem):
    res = minimize_height(problem, work=1_000_000)
    lowest = _lowest_height(problem)
    if lowest is None:
        assert res.status == "infeasible"
        return
    assert res.status == "optimal" and res.solution is not None
    assert res.solution.height == res.bound == lowest
    assert validate(replace(problem, capacity=lowest), res.solution.offsets) is None


@settings(max_examples=60, deadline=None)
@given(problems(max_n=5))
def test_pack_with_hard_banks_matches_exhaustive_enumeration(problem):
    """The packer's portfolio (lowest fit, the search, CP-SAT) gives the same verdict as enumeration."""
    res = pack(list(problem.items), problem.capacity, align=problem.align, conflicts=problem.bank_pairs,
               bank_bytes=problem.bank_bytes or None, bank_rule=problem.bank_rule, time_limit=5, workers=1)
    assert res.status in ("feasible", "infeasible")
    assert res.found == _exhaustive(problem)
    if res.found:
        assert validate(problem, res.offsets) is None


@settings(max_examples=150, deadline=None)
@given(problems())
def test_the_sweep_matches_its_definitions(problem):
    """The sweep's arrays (built with array operations for speed) against their definitions written
    plainly: a section is the buffers live just before some span ends; neighbours are buffers live
    together (bit 1) or hard partners (bit 2); a hull runs from a buffer's first section to its last,
    widened to its partners'; a cut counts the hulls that cross it; each buffer knows its bank cliques."""
    swept = sweep(problem)
    inst, items = swept.instance, problem.items
    live = [{t for a, b in it.spans for t in range(a, b)} for it in items]  # the time steps each is live
    ends = sorted({t + 1 for steps in live for t in steps if t + 1 not in steps})  # where a lifetime ends
    sections = [{k for k in range(len(items)) if t - 1 in live[k]} for t in ends]
    assert swept.sections == len(ends)
    for s, members in enumerate(sections):
        assert set(inst.sec_mem[inst.sec_ptr[s]:inst.sec_ptr[s + 1]].tolist()) == members
        assert inst.total0[s] == sum(aligned(items[k].size, problem.align) for k in members)
    hard = {frozenset(p) for p in problem.hard_pairs}
    index = {it.id: k for k, it in enumerate(items)}
    for i, a in enumerate(items):
        want = {j: (1 if _live_together(a, b) else 0) | (2 if frozenset((a.id, b.id)) in hard else 0)
                for j, b in enumerate(items) if j != i}
        got = dict(zip(inst.nb_idx[inst.nb_ptr[i]:inst.nb_ptr[i + 1]].tolist(),
                       inst.nb_kind[inst.nb_ptr[i]:inst.nb_ptr[i + 1]].tolist()))
        assert got == {j: kind for j, kind in want.items() if kind}
    first = [min(s for s, m in enumerate(sections) if k in m) for k in range(len(items))]
    last = [max(s for s, m in enumerate(sections) if k in m) for k in range(len(items))]
    for k, it in enumerate(items):
        group = [k] + [index[x] for pair in problem.hard_pairs if it.id in pair for x in pair]
        assert inst.hull_lo[k] == min(first[j] for j in group)
        assert inst.hull_hi[k] == max(last[j] for j in group) + 1
    for s in range(len(ends) - 1):
        assert inst.cuts0[s] == sum(1 for k in range(len(items)) if inst.hull_lo[k] <= s and s + 1 < inst.hull_hi[k])
    cliques = [set(inst.cl_mem[inst.cl_ptr[c]:inst.cl_ptr[c + 1]].tolist()) for c in range(len(inst.cl_ptr) - 1)]
    for k in range(len(items)):
        mine = {c for c, m in enumerate(cliques) if k in m}
        assert set(inst.bc_idx[inst.bc_ptr[k]:inst.bc_ptr[k + 1]].tolist()) == mine


def test_pack_returns_no_packing_that_fails_the_independent_check(monkeypatch):
    """Whichever engine answers, :func:`pack` checks the packing before returning it: a wrong one (here
    a lowest fit made to overlap two live buffers) comes back unknown, naming the violation."""
    import lgopt.group.pack as packer

    items = [PackItem("a", 4, ((0, 2),)), PackItem("b", 4, ((1, 3),))]
    assert pack(items, 8, time_limit=1, workers=1).found
    monkeypatch.setattr(packer, "first_fit", lambda *args: {"a": 0, "b": 2})
    res = pack(items, 8, time_limit=1, workers=1)
    assert res.status == "unknown" and "failed the independent check" in res.why and "overlap" in res.why


def test_decomposition_changes_no_verdict():
    """Independent time blocks are solved one after the other; with the split off, the same answers."""
    blocks = [PackItem(f"{k}{i}", s, ((10 * k + a, 10 * k + b),))
              for k in range(3) for i, (s, a, b) in enumerate([(4, 0, 3), (2, 1, 5), (3, 2, 4), (5, 4, 8)])]
    for cap in range(6, 12):
        p = PackProblem(tuple(blocks), cap)
        split, whole = solve(p), solve(p, decompose=False)
        assert split.status == whole.status == ("found" if cap >= 9 else "infeasible")
        if split.found:
            assert validate(p, split.solution.offsets) is None


# --- proofs of infeasibility -------------------------------------------------------------------------

def test_the_section_bound_proves_infeasibility_without_search():
    items = (PackItem("a", 5, ((0, 4),)), PackItem("b", 4, ((2, 6),)), PackItem("c", 1, ((3, 5),)))
    res = solve(PackProblem(items, 9))
    assert res.status == "infeasible" and res.nodes == 0
    assert "10 aligned bytes are live at once" in res.why


def test_the_bank_bound_proves_infeasibility_without_search():
    """Three buffers pairwise in separate banks need three banks; a capacity of two banks has room for
    their bytes but not their banks."""
    items = tuple(PackItem(x, 3, ((k, k + 1),)) for k, x in enumerate("abc"))  # never live together
    p = PackProblem(items, 8, bank_bytes=4, bank_pairs=(("a", "b"), ("a", "c"), ("b", "c")), bank_rule="hard")
    res = solve(p)
    assert res.status == "infeasible" and res.nodes == 0 and "separate banks" in res.why
    assert not _exhaustive(p)
    assert solve(replace(p, capacity=12)).found


def test_a_wrap_around_cycle_is_proved_infeasible_by_the_search():
    """Buffers live on consecutive pairs of rows of a circular 5-row table overlap in an odd cycle: two
    bytes are live at any time, but three colours (offsets) are needed."""
    items = tuple(PackItem(f"b{i}", 1, ((i, i + 2),) if i + 2 <= 5 else ((i, 5), (0, i + 2 - 5))) for i in range(5))
    p = PackProblem(items, 2)
    res = solve(p)
    assert res.status == "infeasible" and res.nodes > 0 and "ran to the end" in res.why
    assert solve(replace(p, capacity=3)).found


def test_budgets_end_the_search_as_unknown():
    items = tuple(PackItem(f"b{i}", 1, ((i, i + 2),) if i + 2 <= 9 else ((i, 9), (0, i + 2 - 9))) for i in range(9))
    p = PackProblem(items, 2)
    assert solve(p, work=1).status == "unknown"
    assert "work budget" in solve(p, work=1).why
    late = solve(p, deadline=0.0)
    assert late.status == "unknown" and "time limit" in late.why
    assert solve(p).status == "infeasible"


def test_the_answer_is_deterministic():
    items = tuple(PackItem(f"b{i}", 1 + (7 * i) % 5, ((i % 7, i % 7 + 1 + i % 3),)) for i in range(30))
    p = PackProblem(items, peak_live_bytes(list(items)))  # as tight as it gets: the search has work to do
    a, b = solve(p), solve(p)
    assert a.found and a.nodes > 1 and a.solution == b.solution and a.nodes == b.nodes
    assert pack(list(items), p.capacity, time_limit=5).offsets == pack(list(items), p.capacity, time_limit=5).offsets


# --- what lgopt adds to MiniMalloc's buffers -----------------------------------------------------------

def test_a_capacity_that_is_not_a_multiple_of_the_alignment():
    """The top buffer may end past the last aligned address: sizes 4, 4, 2 at 0, 4, 8 fit in 10 bytes."""
    items = tuple(PackItem(x, s, ((0, 1),)) for x, s in (("a", 4), ("b", 4), ("c", 2)))
    res = solve(PackProblem(items, 10, align=4))
    assert res.found and sorted(res.solution.offsets.values()) == [0, 4, 8]
    assert solve(PackProblem(items, 9, align=4)).status == "infeasible"


def test_pinned_offsets_are_kept():
    items = (PackItem("a", 4, ((0, 3),), fixed=4), PackItem("b", 4, ((1, 2),)), PackItem("c", 4, ((2, 5),)))
    res = solve(PackProblem(items, 12))
    assert res.found and res.solution.offsets["a"] == 4
    assert validate(PackProblem(items, 12), res.solution.offsets) is None
    clash = (PackItem("a", 4, ((0, 3),), fixed=2), PackItem("b", 4, ((1, 2),), fixed=4))
    assert solve(PackProblem(clash, 12)).status == "infeasible"


def test_a_buffer_never_live_still_gets_an_offset_and_its_bank():
    items = (PackItem("a", 4, ((0, 2),)), PackItem("idle", 4, ()))
    p = PackProblem(items, 8, bank_bytes=4, bank_pairs=(("a", "idle"),), bank_rule="hard")
    res = solve(p)
    assert res.found and validate(p, res.solution.offsets) is None


def test_problems_are_checked_when_built():
    a = PackItem("a", 1, ((0, 1),))
    with pytest.raises(LgoptError, match="more than once"):
        PackProblem((a, a), 4)
    with pytest.raises(LgoptError, match="alignment"):
        PackProblem((a,), 4, align=0)
    with pytest.raises(LgoptError, match="empty or reversed"):
        PackProblem((PackItem("b", 1, ((2, 2),)),), 4)
    with pytest.raises(LgoptError, match="bank pair"):
        PackProblem((a,), 4, bank_bytes=2, bank_pairs=(("a", "z"),), bank_rule="hard")


def test_the_validator_names_each_violation():
    a, b = PackItem("a", 4, ((0, 2),)), PackItem("b", 4, ((1, 3),), fixed=4)
    p = PackProblem((a, b), 8, align=2, bank_bytes=8, bank_pairs=(("a", "b"),), bank_rule="hard")
    assert validate(replace(p, bank_rule="off"), {"a": 0, "b": 4}) is None
    assert "share a bank" in validate(p, {"a": 0, "b": 4})
    assert "no offset" in validate(p, {"a": 0})
    assert "not a buffer" in validate(p, {"a": 0, "b": 4, "c": 0})
    assert "misaligned" in validate(p, {"a": 1, "b": 4})
    assert "outside" in validate(p, {"a": 6, "b": 4})
    assert "pinned" in validate(p, {"a": 0, "b": 2})
    assert "overlap" in validate(replace(p, items=(a, replace(b, fixed=None))), {"a": 0, "b": 2})
