"""A one-server state directory belongs to one configuration from its first start, not only from
its first checkpoint (session 24, helper L; helper F's red team of the door,
tests/review/test_session24_redteam_door.py, left it unattacked).

The attack: before this change ``ExchangeState`` compared the configuration's fingerprint with
the checkpoint's only, so a state directory with a journal and no checkpoint yet (no round
committed: e.g. SFSL's first rounds aborted, or a SecEA set-up that failed) was taken by any
deployment.  Another configuration's rounds then carried over: their ids (the new deployment's
``admin open-round`` had to go on after them) and, since session 24, the strikes counted from their
``proven_bad_shares`` (a device of the new deployment refused at the door for what the old one's
device of that id did).  Now the directory holds ``binding.json`` (the state format and the
fingerprint), written durably at the first start before any round opens; a binding of another
configuration, or one that is damaged, is CorruptState: the server does not start and nothing is
written.  A directory from before this change (a journal, no binding) starts as it did and is
bound at that start.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import stat
from pathlib import Path
from typing import Any

import pytest
from _server_template import run  # type: ignore[import-not-found]
from typer.testing import CliRunner

from secemb.cli import app
from secemb.errors import ProtocolError
from secemb.protocols.exchange import ExchangeServer
from secemb.server.exchange_state import JOURNAL, ExchangeState, fingerprint
from secemb.server.persist import LOCK, CorruptState, Journal, StorageError

#: two deployments' documents that differ in one field each from ``_DOC``
_DOC = {"protocol": "sfsl", "run": {"dataset": "taobao-mini", "users_per_round": 3, "seed": 0},
        "options": {"sfsl_preset": "CPP1", "batch": 8}}
_OTHERS = {
    "another protocol": {**_DOC, "protocol": "secea"},
    "another users_per_round": {**_DOC, "run": {**_DOC["run"], "users_per_round": 4}},
}
FP = fingerprint(_DOC)


def _server() -> ExchangeServer:
    """A server whose node keeps no state: its rounds here never commit (no checkpoint is written)."""
    return ExchangeServer(object(), 1, lambda: b"", 3)  # type: ignore[arg-type]


def _aborted(round_id: int, bad: list[int]) -> dict[str, Any]:
    return {"round_id": round_id, "users": [0, 1, 2], "stages": [], "stage": None, "state": "aborted",
            "reason": "test", "bad_shares": bad, "proven_bad_shares": bad}


def _played(state_dir: Path) -> None:
    """Deployment ``_DOC``'s server plays rounds 1-3 in ``state_dir``, none committed, each
    proving device 0 cheating: three strikes, and no checkpoint."""
    state = ExchangeState(state_dir, FP, _server())
    for rid in (1, 2, 3):
        state.opening(rid, [0, 1, 2])
        state.ended(_aborted(rid, [0]))
    assert state.refuses(0) and not (state_dir / "checkpoint.npz").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _files(state_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(state_dir.iterdir())}


@pytest.mark.parametrize("other", sorted(_OTHERS))
def test_a_journal_of_another_configuration_is_refused_at_start_nothing_written(tmp_path: Path, other: str) -> None:
    _played(tmp_path)
    before = _files(tmp_path)
    with pytest.raises(CorruptState, match="belongs to another configuration"):
        ExchangeState(tmp_path, fingerprint(_OTHERS[other]), _server())
    assert _files(tmp_path) == before


def test_the_same_configuration_restarts_with_its_rounds_and_strikes(tmp_path: Path) -> None:
    _played(tmp_path)
    state = ExchangeState(tmp_path, FP, _server())
    assert state.last is not None and state.last["round_id"] == 3 and state.strikes == {0: 3}
    with pytest.raises(ProtocolError, match="does not follow round 3"):
        state.opening(3, [0, 1, 2])
    state.opening(4, [1, 2])
    assert ExchangeState(tmp_path, FP, _server()).last == {  # round 4, open at the restart, aborted
        "round_id": 4, "users": [1, 2], "stages": [], "stage": None, "state": "aborted",
        "reason": "open when the server stopped: aborted at the restart"}


def test_the_binding_is_written_at_the_first_start_before_any_round(tmp_path: Path) -> None:
    ExchangeState(tmp_path, FP, _server())
    binding = tmp_path / "binding.json"
    assert json.loads(binding.read_bytes()) == {"format": "secemb-exchange-state/1", "fingerprint": FP}
    assert stat.S_IMODE(binding.stat().st_mode) == 0o600
    assert Journal(tmp_path / JOURNAL).records() == []


def test_a_disk_that_refuses_the_binding_stops_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import secemb.server.exchange_state as es

    def full(*args: Any, **kwargs: Any) -> None:
        raise StorageError("could not write file binding.json: ENOSPC")

    monkeypatch.setattr(es, "atomic_write", full)
    with pytest.raises(StorageError, match="ENOSPC"):
        ExchangeState(tmp_path, FP, _server())
    assert not (tmp_path / "binding.json").exists() and Journal(tmp_path / JOURNAL).records() == []


def _legacy(state_dir: Path) -> None:
    """A journal as a server before this change left it: rounds 1-2 aborted, device 0 proven
    cheating in each, no binding, no checkpoint."""
    journal = Journal(state_dir / JOURNAL)
    for rid in (1, 2):
        journal.append({"event": "open", "round_id": rid, "users": [0, 1, 2]})
        journal.append({"event": "end", "round_id": rid, "round": _aborted(rid, [0])})


def test_a_legacy_journal_still_starts(tmp_path: Path) -> None:
    _legacy(tmp_path)
    state = ExchangeState(tmp_path, FP, _server())
    assert state.last == _aborted(2, [0]) and state.strikes == {0: 2}


def test_a_legacy_journal_is_bound_at_its_first_start(tmp_path: Path) -> None:
    _legacy(tmp_path)
    ExchangeState(tmp_path, FP, _server())
    assert json.loads((tmp_path / "binding.json").read_bytes())["fingerprint"] == FP
    before = _files(tmp_path)
    with pytest.raises(CorruptState, match="belongs to another configuration"):
        ExchangeState(tmp_path, fingerprint(_OTHERS["another users_per_round"]), _server())
    assert _files(tmp_path) == before


@pytest.mark.parametrize("content", [
    b"", b"not json", b"[]", b'{"fingerprint": "%s"}' % FP.encode(),
    b'{"format": "secemb-exchange-state/2", "fingerprint": "%s"}' % FP.encode(),
    b'{"format": "secemb-exchange-state/1"}', b'{"format": "secemb-exchange-state/1", "fingerprint": 7}',
    b"\xff\xfe",
], ids=["empty", "not JSON", "a list", "no format", "format 2", "no fingerprint", "a number", "not UTF-8"])
def test_a_damaged_binding_is_refused_nothing_written(tmp_path: Path, content: bytes) -> None:
    _played(tmp_path)
    (tmp_path / "binding.json").write_bytes(content)
    before = _files(tmp_path)
    with pytest.raises(CorruptState, match=r"binding\.json"):
        ExchangeState(tmp_path, FP, _server())
    assert _files(tmp_path) == before


def test_serve_over_another_deployments_state_exits_2_with_one_line(tmp_path: Path) -> None:
    """``secemb serve`` of a deployment (SFSL, 3 devices a round) whose ``state/`` holds the
    journal of another one's (4 a round) rounds: one line, exit 2, the state left as it was (the
    server's hold made its lock file, ``server.lock``, empty)."""
    roots = {}
    for upr in ("3", "4"):
        roots[upr] = root = tmp_path / f"dep{upr}"
        res = CliRunner().invoke(app, ["admin", "init", "--out", str(root), "--host0", "127.0.0.1",
                                       "--port0", str(_free_port()), "--protocol", "sfsl", "--dataset", "taobao-mini",
                                       "--users-per-round", upr,
                                       "--option", "sfsl_preset=CPP1", "--option", "batch=8"])
        assert res.exit_code == 0, res.output
    other = json.loads((roots["4"] / "exchange.json").read_text())
    state_dir = roots["3"] / "state"
    state = ExchangeState(state_dir, fingerprint(other), _server())
    state.opening(1, [0, 1, 2])
    state.ended(_aborted(1, [0]))
    before = _files(state_dir)
    try:  # a process: a server that does start would listen until stopped
        res = run([sys.executable, "-m", "secemb", "serve", "--config", str(roots["3"] / "exchange.json")],
                  timeout=120)  # forked from the suite's warm template where it can be
    except subprocess.TimeoutExpired:
        pytest.fail("secemb serve started over another deployment's state")
    assert res.returncode == 2, res
    lines = res.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "another configuration" in lines[0], res
    assert res.stdout == b""
    assert _files(state_dir) == {**before, LOCK: b""}  # the hold's empty lock file (session 25), nothing else
