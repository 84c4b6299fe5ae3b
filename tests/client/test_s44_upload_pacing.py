"""Session 44: a deployed device's upload is paced, so that its timing does not tell the servers its count.

Measured on this machine (docs/results.md, "A device's local step and its count of ratings"): the SDK's local
step of MF on ML-100K took 1.04-1.10 ms at the lowest quartile of rating counts against 1.20-1.25 ms at the
highest, and a threshold on one median-of-3 timing told the two halves apart 62-66 % of the time.  A server sees
that step as the gap between the device's last download of a round and its upload.  Since session 44
:meth:`~secemb.client.device.Device.participate` uploads at the next multiple of the device's upload quantum after
its last download (``secemb client --upload-quantum``, 0.25 s by default): the gap is a whole number of quanta.
Tested on a virtual clock (no timed test): two devices whose steps take different times upload at the same offset.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "server")]
from test_s42_quorum_agreed import _RATINGS, _USERS, _cluster, _Cluster, make  # type: ignore[import-not-found]  # noqa: E402, F401

import secemb.client.device as device_module  # noqa: E402
from secemb.client.device import MAX_UPLOAD_QUANTUM_S, Device, RoundSession, paced_wait  # noqa: E402
from secemb.errors import InvalidParameters  # noqa: E402


@pytest.mark.parametrize(("elapsed", "quantum", "wait"), [
    (0.001, 0.25, 0.249), (0.0, 0.25, 0.25), (0.3, 0.25, 0.2), (0.5, 0.25, 0.0), (0.2, 0.0, 0.0), (59.0, 60.0, 1.0)])
def test_the_wait_reaches_the_next_multiple_of_the_quantum_and_at_least_one(elapsed: float, quantum: float,
                                                                            wait: float) -> None:
    assert paced_wait(elapsed, quantum) == pytest.approx(wait)


class _Clock:
    """A virtual monotonic clock: ``sleep`` advances it; the device module's ``time`` during a test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("quantum", [0.25, 1.0])
def test_devices_whose_steps_take_different_times_upload_at_the_same_offset(make: list[_Cluster],  # noqa: F811
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            quantum: float) -> None:
    """Two devices of a round, their local steps taking 3 ms and 180 ms of (virtual) time -- as a device's
    count makes it -- upload exactly ``quantum`` after their last download.  The control, a round before it
    with ``upload_quantum_s=0`` (what every device did before session 44): each uploads when its step ends,
    3 ms and 180 ms after its last download."""
    clock = _Clock()
    monkeypatch.setattr(device_module, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep,
                                                               perf_counter=time.perf_counter))
    seen: dict[str, float] = {}
    fetch, upload = RoundSession.fetch_dense, RoundSession.upload

    def fetched(session: RoundSession) -> None:
        fetch(session)
        seen["downloaded"] = clock.now

    def uploading(session: RoundSession, **kwargs: object) -> None:
        seen["uploaded"] = clock.now
        upload(session, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(RoundSession, "fetch_dense", fetched)
    monkeypatch.setattr(RoundSession, "upload", uploading)
    c = _cluster(make, relay=True, bound=False, quorum=8)
    steps = {_USERS[0]: 0.003, _USERS[1]: 0.180}

    def offsets(q: float) -> list[float]:
        got = []
        for u, step_s in steps.items():
            client = c.servers.servers().device(u)
            info = client.round_info()
            model = info.make_model()
            dev = Device(client, *_RATINGS.of(u), upload_quantum_s=q, rng=np.random.default_rng(u))

            def hook(rows: np.ndarray, dense: np.ndarray, batch: object, step_s: float = step_s, dev: Device = dev,
                     info: object = info, model: object = model) -> object:
                clock.sleep(step_s)  # the step's time, on the virtual clock
                return model.local_step(rows, dense, dev._state(info, model), batch)  # type: ignore[attr-defined,arg-type]  # noqa: SLF001

            seen.clear()
            dev.participate(info, model=model, hook=hook)  # type: ignore[arg-type]
            got.append(seen["uploaded"] - seen["downloaded"])
        return got

    assert offsets(0.0) == [pytest.approx(s) for s in steps.values()]
    c.leader.close_round(c.r)
    c.leader.open_round(participants=_USERS, deadline_s=60.0, quorum=8)
    assert offsets(quantum) == [pytest.approx(quantum)] * 2


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, MAX_UPLOAD_QUANTUM_S + 1, True, "0.25"])
def test_a_nonsense_quantum_is_refused(make: list[_Cluster], bad: object) -> None:  # noqa: F811
    c = _cluster(make, relay=True, bound=False, quorum=8)
    client = c.servers.servers().device(_USERS[0])
    with pytest.raises(InvalidParameters, match="upload_quantum_s"):
        Device(client, *_RATINGS.of(_USERS[0]), upload_quantum_s=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "61"])
def test_secemb_client_refuses_a_nonsense_quantum_before_anything_is_sent(bad: str) -> None:
    from typer.testing import CliRunner

    from secemb.cli import app

    res = CliRunner().invoke(app, ["client", "--user", "0", "--server0", "https://127.0.0.1:9",
                                   "--server1", "https://127.0.0.1:9", "--upload-quantum", bad],
                             env={"SECEMB_DEVICE_KEY0": "00" * 32, "SECEMB_DEVICE_KEY1": "00" * 32})
    assert res.exit_code == 2, res.output
    assert "--upload-quantum" in res.output
