from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems"
FIXTURES = ROOT.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def problems_dir() -> Path:
    return PROBLEMS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not (FIXTURES / "onnx").is_dir():
        pytest.skip("shared/fixtures not beside the checkout")
    return FIXTURES


# CI replays a fixed set of examples so a red run is reproducible; locally hypothesis explores.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("deep", max_examples=2000, deadline=None)
import os  # noqa: E402

settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "default"))
