"""Fault injection for the crash tests: a server kills itself with SIGKILL at a named point.

Off unless the environment sets ``SECEMB_FAULTS`` (comma-separated points, e.g.
``"commit"`` or ``"upload:3"`` = at the third upload of a round) and ``SECEMB_FAULT_DIR`` (a
directory).  Each point fires once: before dying, the server creates a marker file for it in
that directory, and a restarted process that finds the marker carries on.  Points:

``open``       a round was opened (journal written), before it is announced
``retrieval:N`` / ``upload:N``   after the N-th retrieval / upload of a round was handled
``close``      server 0 marked the round closing; server 1 answered the close
``share``      server 1 computed its aggregate share, before answering
``agree``      server 1 staged the model it computed from server 0's share, before answering
``commit``     server 0 wrote the new checkpoint, before syncing server 1
``sync``       server 1 wrote the synced checkpoint, before answering
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = ["hit"]

ENV_POINTS = "SECEMB_FAULTS"
ENV_DIR = "SECEMB_FAULT_DIR"


#: the last ``SECEMB_FAULTS`` value parsed, and its points
_parsed: tuple[str, frozenset[str]] = ("", frozenset())


def _armed(spec: str) -> frozenset[str]:
    """The points a ``SECEMB_FAULTS`` value ``spec`` arms (parsed once per value)."""
    global _parsed
    if spec != _parsed[0]:
        _parsed = (spec, frozenset(p.strip() for p in spec.split(",") if p.strip()))
    return _parsed[1]


def hit(point: str, count: int | None = None) -> None:
    """Die here (SIGKILL, no cleanup) if ``point`` (or ``point:count``) is armed and has not
    fired yet.  The environment is read on every call; unset or empty (the usual case), that
    one look-up is all a call costs."""
    spec = os.environ.get(ENV_POINTS)
    if not spec:
        return
    armed = _armed(spec)
    name = point if count is None else f"{point}:{count}"
    if name not in armed:
        return
    directory = os.environ.get(ENV_DIR)
    if not directory:
        return
    marker = Path(directory) / f"fired-{name.replace(':', '_')}"
    if marker.exists():
        return
    marker.touch()
    os.kill(os.getpid(), signal.SIGKILL)
