"""H8 (issue 37): the per-device checks at the servers' doors made cheap keep their answers --
:func:`secemb.server.faults.hit` (parsed once per ``SECEMB_FAULTS`` value, still read on every
call) and :func:`secemb.server.admission.admit` (a round without participants counts the users
retrieved or being admitted without building their union)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from secemb.protocols.base import RoundConfig
from secemb.server import admission, faults
from secemb.server.errors import Conflict
from secemb.server.rounds import Round


def _kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    return killed


def test_fault_points_follow_the_environment_and_fire_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    killed = _kills(monkeypatch)
    monkeypatch.delenv(faults.ENV_POINTS, raising=False)
    monkeypatch.setenv(faults.ENV_DIR, str(tmp_path))
    faults.hit("commit")  # disarmed
    monkeypatch.setenv(faults.ENV_POINTS, " , ")
    faults.hit("commit")  # only separators: nothing armed
    monkeypatch.setenv(faults.ENV_POINTS, "upload:3, close")
    faults.hit("upload", 2)
    faults.hit("commit")
    faults.hit("upload")  # "upload" alone is not "upload:3"
    assert killed == [] and list(tmp_path.iterdir()) == []
    faults.hit("upload", 3)
    assert killed == [(os.getpid(), signal.SIGKILL)] and (tmp_path / "fired-upload_3").exists()
    faults.hit("upload", 3)  # fired once: a restarted process carries on
    assert len(killed) == 1
    monkeypatch.setenv(faults.ENV_POINTS, "commit")  # a new value is parsed again, not the cached one
    faults.hit("close")
    faults.hit("commit")
    assert len(killed) == 2 and (tmp_path / "fired-commit").exists()
    monkeypatch.setenv(faults.ENV_POINTS, "")
    faults.hit("commit")
    assert len(killed) == 2


def _round(n_p: int, retrieved: set[int], admitting: set[int]) -> Round:
    rc = RoundConfig(round_id=1, num_items=10, width=3, dense_size=0, m_prime=2)
    return Round(1, rc, 0, None, n_p, 0.0, n_p, 1, retrieved=set(retrieved), admitting=set(admitting))


@pytest.mark.parametrize("retrieved,admitting,admitted", [
    ({1}, {1}, True),  # user 1 retrieved, still being committed: one user, room for another
    ({1}, {1, 2}, False),  # two distinct users fill n_p = 2
    (set(), {1, 2}, False),
    ({1, 2}, set(), False),
    (set(), {1}, True),
])
def test_a_round_without_participants_counts_each_user_once(retrieved: set[int], admitting: set[int],
                                                           admitted: bool) -> None:
    rnd = _round(2, retrieved, admitting)
    before: dict[str, Any] = {"retrieved": set(rnd.retrieved), "admitting": set(rnd.admitting)}
    if admitted:
        admission.admit(rnd, 7, {})
        assert rnd.admitting == before["admitting"] | {7}
    else:
        with pytest.raises(Conflict, match="is full"):
            admission.admit(rnd, 7, {})
        assert rnd.admitting == before["admitting"]  # a refusal changes nothing
    assert rnd.retrieved == before["retrieved"]


def test_a_user_already_retrieved_is_admitted_again_in_a_full_round() -> None:
    rnd = _round(2, {1, 2}, set())
    admission.admit(rnd, 1, {})
    assert rnd.admitting == {1}
