"""The test suite: one package, so a test imports its helpers as ``tests.helpers._name``.

Run it from the repository root (``scripts/test``, or ``python -m pytest``);
``tests/helpers/`` holds what several test files share.
"""
