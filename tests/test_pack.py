"""The exact packer against exhaustive search, the benchmark CSV format, and the pack command."""

import itertools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lgopt.cli import main
from lgopt.group.pack import PackItem, check_packing, overlaps, pack, peak_live_bytes, shared_banks
from lgopt.group.pack_csv import read_csv, write_csv


def _first_fit_exact(items, capacity):
    """Exhaustive: some order's lowest-fit placement matches any feasible packing (it never places higher)."""
    for order in itertools.permutations(items):
        placed = {}
        for it in order:
            busy = sorted((placed[o.id], placed[o.id] + o.size) for o in order if o.id in placed and overlaps(o, it))
            off = 0
            for s, e in busy:
                if off + it.size <= s:
                    break
                off = max(off, e)
            if off + it.size > capacity:
                break
            placed[it.id] = off
        else:
            return True
    return False


@st.composite
def instances(draw):
    n = draw(st.integers(1, 6))
    items = []
    for i in range(n):
        lo = draw(st.integers(0, 8))
        items.append(PackItem(str(i), draw(st.integers(1, 6)), ((lo, lo + draw(st.integers(1, 5))),)))
    return items, draw(st.integers(1, 20))


@settings(max_examples=120, deadline=None)
@given(instances())
def test_pack_matches_exhaustive_search(inst):
    items, cap = inst
    res = pack(items, cap, time_limit=10, workers=1)
    assert res.status in ("optimal", "feasible", "infeasible")  # never "unknown" on these sizes
    assert res.found == _first_fit_exact(items, cap)
    if res.found:
        assert check_packing(items, res.offsets, cap) is None


def test_min_peak_reaches_the_live_bound_on_an_interval_graph():
    items = [PackItem(str(i), s, ((a, b),)) for i, (s, a, b) in enumerate([(4, 0, 3), (2, 1, 5), (3, 2, 4), (5, 4, 8)])]
    res = pack(items, 100, minimize="peak", time_limit=10)
    assert res.status == "optimal" and res.peak == peak_live_bytes(items) == 9


def test_wrap_around_and_alignment():
    a = PackItem("a", 100, ((3, 4), (0, 2)))  # wraps past the last row of a 4-row table
    b = PackItem("b", 100, ((1, 3),))
    c = PackItem("c", 64, ((2, 4),))
    # a, b, c overlap pairwise (rows 1, 2 and 3) though at most two live at once: the wrap makes a cycle,
    # so 256 bytes (the peak live, aligned) are not enough and 320 are
    assert peak_live_bytes([a, b, c], 64) == 256
    assert pack([a, b, c], 256, align=64, time_limit=10).status == "infeasible"
    res = pack([a, b, c], 320, align=64, time_limit=10)
    assert res.found and all(o % 64 == 0 for o in res.offsets.values())
    assert check_packing([a, b, c], res.offsets, 320, 64) is None


def test_bank_rules():
    a, b = PackItem("a", 10, ((0, 2),)), PackItem("b", 10, ((5, 7),))  # never live together
    hard = pack([a, b], 40, conflicts=[("a", "b")], bank_bytes=20, bank_rule="hard", time_limit=10)
    assert hard.found and hard.offsets["a"] // 20 != hard.offsets["b"] // 20
    soft = pack([a, b], 20, conflicts=[("a", "b")], bank_bytes=20, bank_rule="soft", time_limit=10)
    assert soft.found and soft.conflicts == 1
    assert not pack([a, b], 20, conflicts=[("a", "b")], bank_bytes=20, bank_rule="hard", time_limit=10).found


def test_soft_banks_settle_feasibility_first():
    """Soft pairs never make a packable instance unknown, and the reported conflicts are the real ones."""
    items = [PackItem(str(i), 8, ((i % 3, i % 3 + 3),)) for i in range(9)]
    pairs = [(str(i), str(j)) for i in range(9) for j in range(i + 1, 9) if (i + j) % 2]
    for conflict_time in (0.0, None):
        res = pack(items, 24 * 4, conflicts=pairs, bank_bytes=16, bank_rule="soft", time_limit=5,
                   conflict_time=conflict_time)
        assert res.found and check_packing(items, res.offsets, 96) is None
        assert res.conflicts == shared_banks(items, res.offsets, pairs, 16)


def test_csv_round_trip_and_command(tmp_path, capsys):
    items = [PackItem(str(i), 8 * (i + 1), ((i, i + 3),)) for i in range(6)]
    src = tmp_path / "b.csv"
    src.write_text("id,lower,upper,size\n" + "".join(f"{it.id},{it.spans[0][0]},{it.spans[0][1]},{it.size}\n"
                                                     for it in items))
    assert [(it.id, it.size, it.spans) for it in read_csv(src)] == [(it.id, it.size, it.spans) for it in items]
    out = tmp_path / "o.csv"
    assert main(["pack", str(src), "--capacity", "200", "-o", str(out)]) == 0
    text = out.read_text().splitlines()
    assert text[0] == "id,lower,upper,size,offset" and len(text) == 7
    offsets = {r.split(",")[0]: int(r.split(",")[4]) for r in text[1:]}
    assert check_packing(items, offsets, 200) is None
    assert main(["pack", str(src), "--capacity", "40"]) == 1  # infeasible: more live bytes than capacity
    bad = tmp_path / "bad.csv"
    bad.write_text("id,lower,upper\n1,2,3\n")
    assert main(["pack", str(bad), "--capacity", "10"]) == 2
    capsys.readouterr()
    write_csv(tmp_path / "w.csv", items, {it.id: 0 for it in items})
    assert (tmp_path / "w.csv").read_text().startswith("id,lower,upper,size,offset")


# --- the pack command's input errors: one line on stderr, exit status 2, found before any solving ---------

def _csv(tmp_path, text: str, name: str = "b.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


OK_CSV = "id,lower,upper,size\na,0,2,4\nb,1,3,4\n"


def _one_line_error(capsys, *words: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lgopt: error:") and "Traceback" not in err, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("align", ["0", "-4"])
def test_pack_refuses_an_alignment_below_one(tmp_path, capsys, align):
    assert main(["pack", str(_csv(tmp_path, OK_CSV)), "--capacity", "16", "--align", align]) == 2
    _one_line_error(capsys, "--align", align)


def test_pack_refuses_duplicate_buffer_ids(tmp_path, capsys):
    src = _csv(tmp_path, "id,lower,upper,size\na,0,2,4\nb,1,3,4\na,2,4,4\n")
    assert main(["pack", str(src), "--capacity", "16"]) == 2
    _one_line_error(capsys, "'a'", "twice", "rows 2 and 4")


def test_pack_refuses_a_binary_file(tmp_path, capsys):
    src = tmp_path / "b.csv"
    src.write_bytes(b"\xff\xfe\x00\x01id,lower\x80\x81\n\x00\x00")
    assert main(["pack", str(src), "--capacity", "16"]) == 2
    _one_line_error(capsys, "not a text CSV")


def test_pack_writes_into_a_folder_it_creates(tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "o.csv"
    assert main(["pack", str(_csv(tmp_path, OK_CSV)), "--capacity", "16", "-o", str(out)]) == 0
    assert out.read_text().startswith("id,lower,upper,size,offset")
    capsys.readouterr()


def _never_solve(monkeypatch) -> None:
    import lgopt.group.pack as packer

    def boom(*args, **kwargs):
        raise AssertionError("the packer ran before the output was found unwritable")

    monkeypatch.setattr(packer, "pack", boom)


@pytest.mark.parametrize("where", ["folder", "under a file", "proc"])
def test_pack_finds_an_unwritable_output_before_solving(tmp_path, capsys, monkeypatch, where):
    src = _csv(tmp_path, OK_CSV)
    out = {"folder": str(tmp_path), "under a file": str(src / "o.csv"), "proc": "/proc/lgopt-pack-test/o.csv"}[where]
    _never_solve(monkeypatch)
    assert main(["pack", str(src), "--capacity", "16", "-o", out]) == 2
    _one_line_error(capsys, "cannot write")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_pack_finds_a_read_only_output_before_solving(tmp_path, capsys, monkeypatch):
    out = tmp_path / "o.csv"
    out.write_text("keep me\n")
    out.chmod(0o444)
    _never_solve(monkeypatch)
    assert main(["pack", str(_csv(tmp_path, OK_CSV)), "--capacity", "16", "-o", str(out)]) == 2
    _one_line_error(capsys, "cannot write")
    assert out.read_text() == "keep me\n"


def test_pack_min_peak_and_a_proof_of_infeasibility(tmp_path, capsys):
    src = _csv(tmp_path, "id,lower,upper,size\na,0,3,4\nb,1,5,2\nc,2,4,3\nd,4,8,5\n")
    out = tmp_path / "o.csv"
    assert main(["pack", str(src), "--capacity", "100", "--min-peak", "-o", str(out)]) == 0
    assert "packed into 9 of 100 bytes (optimal)" in capsys.readouterr().out
    offsets = {r.split(",")[0]: int(r.split(",")[4]) for r in out.read_text().splitlines()[1:]}
    assert max(offsets[k] + s for k, s in zip("abcd", (4, 2, 3, 5))) == 9
    assert main(["pack", str(src), "--capacity", "8", "-o", str(out)]) == 1
    assert "infeasible" in capsys.readouterr().out
