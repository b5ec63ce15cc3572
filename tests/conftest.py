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


@pytest.fixture(scope="session")
def llama_server():
    """One real llama.cpp server (Gemma-3-270M) for every ``llama`` test of the run.

    Fails, not skips, when the binary or the model is missing: set
    CLANKER_SKIP_LLAMA=1 to opt out on a machine without them.
    """
    from _llama_server import LlamaServer, LlamaUnavailable

    if os.environ.get("CLANKER_SKIP_LLAMA") == "1":
        pytest.skip("CLANKER_SKIP_LLAMA=1")
    try:
        with LlamaServer() as srv:
            yield srv
    except LlamaUnavailable as exc:
        pytest.fail(f"{exc} (set CLANKER_SKIP_LLAMA=1 to skip the llama.cpp tests)")
