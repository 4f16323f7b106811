"""The round trips' archive (lgopt.tpumlir.runs): packed the same way every time, unpacked where it was."""

from __future__ import annotations

import shutil
from pathlib import Path

from lgopt.tpumlir import runs


def _runs(root: Path) -> None:
    for rel, text in (("a/roundtrip.md", "# a\n"), ("a/caches/m_c.layer_group_cache.json", "{}"),
                      ("b/scores/m_c_opt2.json", '{"status": "ok"}')):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "README.md").write_text("the index: tracked, not archived\n")


def test_the_archive_depends_on_the_files_alone_and_unpacks_them_where_they_were(tmp_path: Path):
    one, two = tmp_path / "one", tmp_path / "two"
    _runs(one)
    archive = runs.pack(one).read_bytes()
    _runs(two)
    (two / "a" / "roundtrip.md").touch()  # another time: the same bytes all the same
    assert runs.pack(two).read_bytes() == archive
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(one / runs.ARCHIVE, fresh)
    runs.unpack(fresh)
    assert sorted(p.relative_to(fresh).as_posix() for p in runs.members(fresh)) == [
        "a/caches/m_c.layer_group_cache.json", "a/roundtrip.md", "b/scores/m_c_opt2.json"]
    assert (fresh / "b" / "scores" / "m_c_opt2.json").read_text() == '{"status": "ok"}'
    assert not (fresh / "README.md").exists()


def test_packing_again_keeps_the_archived_runs_and_adds_a_new_one(tmp_path: Path):
    _runs(tmp_path)
    runs.pack(tmp_path)
    shutil.rmtree(tmp_path / "a")  # not on disk: still in the archive
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "roundtrip.csv").write_text("model\n")
    runs.pack(tmp_path)
    shutil.rmtree(tmp_path / "a")
    (tmp_path / runs.MARKER).unlink()
    runs.unpack(tmp_path)
    assert (tmp_path / "a" / "roundtrip.md").exists() and (tmp_path / "new" / "roundtrip.csv").exists()
