"""A results document written by sections: each script that measures rewrites only its own section (between
``<!-- NAME: begin -->`` and ``<!-- NAME: end -->``), so the notes around it stay (``benchmarks/results/``)."""

from __future__ import annotations

from pathlib import Path


def write_section(doc: Path, name: str, text: str) -> None:
    """Replace section ``name`` of the markdown file ``doc`` with ``text`` (appended when ``doc`` has none).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "r.md"
    >>> write_section(d, "a", "one"); write_section(d, "a", "two")
    >>> d.read_text()
    '<!-- a: begin -->\\ntwo\\n<!-- a: end -->\\n'
    """
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    old = doc.read_text() if doc.exists() else ""
    block = f"{begin}\n{text.strip()}\n{end}"
    if begin in old and end in old:
        new = old[:old.index(begin)] + block + old[old.index(end) + len(end):]
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(new)
