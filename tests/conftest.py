import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The shared data sets sit beside the repository (CI lays them there); override with CLANKER_RAG_SHARED.
SHARED = Path(os.environ.get("CLANKER_RAG_SHARED", ROOT.parent / "shared"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def cranfield() -> Path:
    path = SHARED / "datasets" / "cranfield"
    assert (path / "corpus.jsonl").is_file(), f"the Cranfield data set is missing at {path}"
    return path
