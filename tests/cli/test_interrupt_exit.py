"""A Ctrl-C in the CLI's clean-up is the usual one line and exit code, never a raw traceback.

The command's own ``except KeyboardInterrupt`` covers the command; a Ctrl-C
landing just after it (restoring logging, printing the error line) or while
the interpreter shuts down used to escape as a ``KeyboardInterrupt``
traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from clanker_rag import KnowledgeBase
from clanker_rag._cli import _main
from clanker_rag._cli._main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def index(tmp_path: Path) -> Path:
    kb = KnowledgeBase()
    kb.add_text("The server listens on port 7341.", "ports.md")
    return kb.save(tmp_path / "idx")


def _guarded(argv: list[str]) -> int:
    try:
        return main(argv)
    except KeyboardInterrupt:  # (would end the whole test session)
        pytest.fail("a KeyboardInterrupt escaped main()")


def test_a_ctrl_c_while_logging_is_restored(
    index: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real: Callable[..., Callable[[], None]] = _main._configure_logging

    def configure(args: object) -> Callable[[], None]:
        restore = real(args)

        def interrupted() -> None:
            restore()
            raise KeyboardInterrupt

        return interrupted

    monkeypatch.setattr(_main, "_configure_logging", configure)
    code = _guarded(["search", "port", "--index", str(index)])
    out, err = capsys.readouterr()
    assert code == 130
    assert "7341" in out  # the command itself ran
    assert err.strip() == "clanker-rag: interrupted"


def test_a_ctrl_c_while_the_error_line_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(message: str, code: int) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_main, "_fail", fail)
    code = _guarded(["search", "port", "--index", str(tmp_path / "missing")])
    assert code == 130
    assert "Traceback" not in capsys.readouterr().err


def test_a_ctrl_c_while_the_interpreter_shuts_down_prints_no_traceback(index: Path) -> None:
    # The program's own entry (no argv); a SIGINT arrives from an atexit handler, after main() returned.
    script = (
        "import atexit, os, signal, sys\n"
        "from clanker_rag._cli._main import main\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
        f"sys.argv = ['clanker-rag', 'search', 'port', '--index', {str(index)!r}]\n"
        "sys.exit(main())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert "7341" in proc.stdout
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    assert proc.returncode in (-2, 130)  # ended by the signal, as a Ctrl-C ends a program
