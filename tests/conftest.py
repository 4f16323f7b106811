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
