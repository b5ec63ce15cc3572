"""How hard Hypothesis tries: a fast default profile, or the full one (``HYPOTHESIS_PROFILE=ci``).

``conftest.py`` registers both profiles and loads the chosen one.  A property
test that wants many examples asks for them with :func:`examples`: all of
them under the full profile, a tenth (at least 100) under the fast one, so an
everyday run stays quick and CI still runs every example.
"""

from __future__ import annotations

import os

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fast")
FULL = PROFILE == "ci"


def examples(full: int) -> int:
    """``max_examples`` for a test that runs ``full`` examples under the full profile."""
    return full if FULL else max(100, full // 10)
