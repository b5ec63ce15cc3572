"""``python -m clanker_rag``: the same as the ``clanker-rag`` command."""

import sys

from ._cli._main import main

sys.exit(main())
