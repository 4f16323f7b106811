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
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(obj, indent=1) + "\n")
