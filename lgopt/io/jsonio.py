"""Reading and writing lgopt's JSON files with input errors as one-line LgoptErrors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lgopt.errors import LgoptError


def read_json(path: str | Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise LgoptError(f"cannot read {what} file {path}: {e.strerror}") from None
    except ValueError as e:
        raise LgoptError(f"{path} is not valid JSON ({e})") from None


def write_json(path: str | Path, obj: Any) -> None:
    """Write atomically: a temporary file beside ``path``, then :func:`os.replace`, so a reader (or a run
    interrupted while writing) sees the old file or the new one, never half of one.  A path that cannot
    be written is one input error."""
    import os
    import tempfile

    p = Path(path)
    text = json.dumps(obj, indent=1) + "\n"
    tmp = None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # what a plain open() would give, not mkstemp's 0600
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise LgoptError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
