"""This process's child processes, read from ``/proc``: what the leak guard (``tests/conftest.py``) counts."""

from __future__ import annotations

import os


def child_pids() -> set[int]:
    pids: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{os.getpid()}/task")
    except OSError:  # not Linux: no /proc to read
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children", encoding="ascii") as fh:
                pids.update(int(p) for p in fh.read().split())
        except OSError:
            continue
    return pids


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its exit status is left to collect
