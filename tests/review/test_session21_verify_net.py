"""Session 21 review (helper D) of the verified uploads (issue 34) against two real ``secemb
serve`` processes on 127.0.0.1 with bounded payloads on: the rounds of the in-process findings
over HTTP.

* A round in which every device is rejected (five ``oversized-payload`` devices) ends aborted
  with every device listed under ``rejected``; no request of the round gets a 5xx (the devices'
  proofs are taken, the close answers), and the model stays at version 0 on both servers.
* Finding D1 for real: server 0 is killed (``SIGKILL``, the ``commit`` fault point) right after
  it wrote the checkpoint of a round in which it rejected a device, before its outcome record.
  Restarted, it reports the round committed with the device under ``rejected`` (before the fix:
  ``rejected`` was empty and the rejection no longer counted towards the door), and the
  ``device_rejected`` alarm.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from net_helpers import WAIT_S, cluster_for, dump_logs, setup, small_data  # type: ignore[import-not-found]  # noqa: E402

from secemb.client.device import Device, DeviceClient, RoundInfo  # noqa: E402
from secemb.data import by_user  # noqa: E402
from secemb.protocols.adversary import with_attack  # noqa: E402
from secemb.protocols.secemb import SecEmbProtocol  # noqa: E402
from secemb.transport.errors import RemoteError  # noqa: E402

USERS = 8


def test_all_rejected_then_a_crash_at_the_commit_point_over_http() -> None:
    model, _, config = setup("secemb", "cuckoo", True, m_prime=8, epochs=1, users_per_round=USERS)
    proto = SecEmbProtocol(layout="cuckoo", relay=True, bound=True, users_per_round=USERS)
    tr, _ = small_data()
    ratings = by_user(tr)
    users = [u for u in range(tr.num_users) if ratings.of(u)[0].size][:5]
    attacker = users[4]
    with cluster_for(model, proto, tr, config, min_users=2, faults={0: "commit"}) as cluster:
        try:
            def client(u: int) -> DeviceClient:
                return DeviceClient(u, cluster.url(0), cluster.url(1), *cluster.device_keys(u), timeout=WAIT_S,
                                    tls=cluster.tls, min_users=cluster.min_users)

            def play(attackers: list[int]) -> int:
                doc = cluster.admin(0, timeout=WAIT_S).post_json("/v1/admin/rounds",
                                                                 {"participants": users, "deadline_s": 120})
                r = RoundInfo.from_doc(doc).round_id
                for u in users:
                    dev = client(u)
                    info = dev.round_info()
                    attack = with_attack(info.make_protocol(), "oversized-payload") if u in attackers else None
                    Device(dev, *ratings.of(u)).participate(info, protocol=attack)  # a 4xx/5xx would raise
                return r

            r1 = play(users)
            out = cluster.admin(0, timeout=WAIT_S).post_json(f"/v1/admin/rounds/{r1}/close")
            assert out["state"] == "aborted" and "fewer than min_users" in out["reason"], out
            assert out["rejected"] == sorted(users) and not out["included"], out
            for p in (0, 1):
                assert cluster.admin(p, timeout=WAIT_S).get_json("/v1/admin/status")["model_version"] == 0

            r2 = play([attacker])
            with pytest.raises(Exception) as died:  # server 0 is killed in the middle of its answer
                cluster.admin(0, timeout=WAIT_S).post_json(f"/v1/admin/rounds/{r2}/close")
            assert not isinstance(died.value, RemoteError) or died.value.status < 500, died.value
            cluster.restart(0)
            admin = cluster.admin(0, timeout=WAIT_S)
            status = admin.get_json(f"/v1/rounds/{r2}/status")
            assert status["state"] == "committed" and status["included"] == sorted(users[:4]), status
            assert status["rejected"] == [attacker], status
            assert admin.get_json("/v1/admin/status")["model_version"] == 1
            assert {a["round"] for a in admin.get_json("/v1/admin/status")["alarms"]} == {r1, r2}
        except Exception:
            print(dump_logs(cluster))
            raise
