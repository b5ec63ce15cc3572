"""Where the tests find the repository and the shared data sets."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The shared data sets sit beside the repository (CI lays them there); override with CLANKER_RAG_SHARED.
SHARED = Path(os.environ.get("CLANKER_RAG_SHARED", ROOT.parent / "shared"))
