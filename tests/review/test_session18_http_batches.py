"""Review of session 18's batched uploads over HTTP (the node's upload batcher behind
``POST /v1/rounds/{r}/upload``): devices' requests that reach server 0 together go to the
role as one batch; the hostile ones among them -- a truncated upload, the same device's upload
twice at once, an upload to a round that is not open, a device that is not a participant --
are each answered with their own 4xx (never a 5xx: a traceback would fail the whole batch),
the honest ones with 204, and the refused devices' later uploads are taken (nothing of them
was kept).  Server 0 as the FastAPI app (``TestClient``, no socket) over the in-process pair;
its batcher is held until every request has queued, so they are one batch (regression
coverage: passes on the code reviewed).

A disk that refuses a batch's dense shares (server 0 spills them: full, read-only, I/O error)
is answered 503 ``storage_unavailable``, as the app's docstring says, with nothing of the
batch kept, and the uploads are taken once the disk accepts them (a defect: the role's
``OSError`` reached the app -- 500 Internal Server Error, a traceback in the log).  Fixed in
server/retrieval.py."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from secemb.server.app import create_app  # noqa: E402
from secemb.transport.signing import sign_headers, user_key  # noqa: E402

sys.path[:0] = [str(Path(__file__).parents[1] / "server")]  # the helpers below
from deviation_helpers import USERS, in_one_batch, in_process  # noqa: E402
from test_upload_many import _held_round  # noqa: E402


def _post(client: TestClient, secret: bytes, user: int, r: int, body: bytes) -> int:
    """Device ``user``'s signed upload ``body`` to round ``r``; the status."""
    path = f"/v1/rounds/{r}/upload"
    headers = sign_headers(f"user:{user}", user_key(secret, user), "POST", path, "", body)
    return client.post(path, content=body, headers=headers | {"Content-Type": "application/octet-stream"}).status_code


def test_hostile_uploads_in_one_http_batch_get_their_own_4xx(monkeypatch: pytest.MonkeyPatch) -> None:
    _, servers = in_process()
    leader, follower = servers.nodes
    r, held = _held_round(servers, USERS)
    (a, up_a), (b, up_b), (c, up_c), (d, up_d) = held
    outsider = next(u for u in range(leader.cfg.num_users) if u not in USERS)
    client = TestClient(create_app(leader), raise_server_exceptions=False)
    secret = leader.cfg.user_secret
    sends = {"a": (a, r, up_a), "b-cut": (b, r, up_b[:-1]), "c": (c, r, up_c), "c-again": (c, r, up_c),
             "d-next-round": (d, r + 1, up_d), "outsider": (outsider, r, up_d)}
    status: dict[str, int] = {}

    def send(name: str) -> None:
        status[name] = _post(client, secret, *sends[name])

    sizes = in_one_batch(monkeypatch, leader, lambda: send("a"),
                         [lambda name=name: send(name) for name in sends if name != "a"])
    # one batch of the five: the outsider is refused before the role, the round r+1 upload by its round
    assert sizes == [1, 3]
    assert status["a"] == 204 and status["b-cut"] == 400 and status["d-next-round"] == 409
    assert status["outsider"] == 403
    assert sorted([status["c"], status["c-again"]]) == [204, 409]  # one of the two, whichever came first
    assert _post(client, secret, b, r, up_b) == 204 and _post(client, secret, d, r, up_d) == 204
    assert follower.peer_close(r)["uploaded"] == sorted(USERS)
    assert leader.close_round(r)["included"] == sorted(USERS)


def test_a_disk_that_refuses_the_batch_s_shares_is_a_503_and_keeps_nothing() -> None:
    _, servers = in_process()
    leader, follower = servers.nodes
    r, held = _held_round(servers, USERS)
    spilled = leader.role._spilled
    real = spilled.put_many

    def full(items: list) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    spilled.put_many = full  # type: ignore[method-assign]
    client = TestClient(create_app(leader), raise_server_exceptions=False)
    secret = leader.cfg.user_secret
    (a, up_a), *rest = held
    path = f"/v1/rounds/{r}/upload"
    headers = sign_headers(f"user:{a}", user_key(secret, a), "POST", path, "", up_a)
    resp = client.post(path, content=up_a, headers=headers | {"Content-Type": "application/octet-stream"})
    assert resp.status_code == 503 and resp.json()["error"] == "storage_unavailable", resp.text
    assert "ENOSPC" in resp.json()["detail"]
    assert leader.status()["round"]["uploaded"] == 0 and leader.role.included_users() == []
    spilled.put_many = real  # type: ignore[method-assign]
    assert [_post(client, secret, u, r, up) for u, up in held] == [204] * len(held)
    assert follower.peer_close(r)["uploaded"] == sorted(USERS)
