"""``secemb admin`` reads the servers' JSON answers (the servers are the other party): a 2xx
answer that is not a JSON object, or lacks a field its reader uses or holds one of another type,
exits 1 with a message naming the server and its URL -- never a traceback, nor exit 0 with the
malformed document printed as if it were the server's status, m' or round (it was, for
``status``, ``count`` and ``open-round``; ``save-denoiser`` refused a status that is not an
object already).  Well-formed answers still print."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.errors import InvalidMessage
from secemb.transport.http import HttpAdminLink
from secemb.transport.network import ApiClient

#: well-formed answers of server 0, by path (what the commands below ask)
GOOD: dict[str, Any] = {
    "/v1/admin/status": {"party": 0, "model_version": 3, "model_sha256": None, "round": None},
    "/v1/admin/count/open": {"open": True},
    "/v1/admin/count": {"state": "open", "expected": 30, "server0": 0, "server1": 0, "both": 0},
    "/v1/admin/count/close": {"m_prime": 5, "mean_count": 4.5, "users": 10},
    "/v1/admin/rounds": {"round_id": 4, "state": "open", "n_p": 10},
}
#: each command and the path whose answer is made malformed
COMMANDS = {
    "status": (["status"], "/v1/admin/status"),
    "count": (["count", "--wait", "0"], "/v1/admin/count/close"),
    "open-round": (["open-round", "--participants", "0-9"], "/v1/admin/rounds"),
}
#: answers no command accepts, and per command ones whose fields make them malformed
ANY_BAD: list[Any] = [{}, [], "ok", None, 3]
FIELD_BAD = {
    "status": [{"party": 0}, {"party": 0, "model_version": "3"}, {"party": 0, "model_version": True}],
    "count": [{"m_prime": "5", "mean_count": 4.5, "users": 10}, {"m_prime": 5, "users": 10},
              {"m_prime": 5, "mean_count": 4.5, "users": [1, 2]}],
    "open-round": [{"state": "open"}, {"round_id": 4.0, "state": "open"}, {"round_id": 4, "state": 1}],
}
CASES = [(cmd, bad) for cmd in COMMANDS for bad in [*ANY_BAD, *FIELD_BAD[cmd]]]


def init_deployment(tmp_path_factory) -> str:
    """A two-server deployment folder from ``secemb admin init`` (40 items, 30 users, loopback)."""
    out = tmp_path_factory.mktemp("dep") / "dep"
    res = CliRunner().invoke(app, ["admin", "init", "--out", str(out), "--host0", "127.0.0.1", "--host1",
                                   "127.0.0.1", "--num-items", "40", "--num-users", "30"])
    assert res.exit_code == 0, res.output
    return str(out)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> str:
    return init_deployment(tmp_path_factory)


def _admin(monkeypatch, deployment: str, command: str, bad_path: str | None, bad: Any = None) -> Any:
    """``secemb admin COMMAND`` with every server answering ``GOOD`` but ``bad`` at ``bad_path``."""
    def answer(self: ApiClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        doc = bad if path == bad_path else GOOD[path]
        return httpx.Response(200, content=json.dumps(doc).encode(), headers={"content-type": "application/json"})

    monkeypatch.setattr(ApiClient, "request", answer)
    args, _ = COMMANDS[command]
    return CliRunner().invoke(app, ["admin", *args, "--deployment", deployment])


@pytest.mark.parametrize("command, bad", CASES)
def test_a_malformed_answer_exits_1_naming_the_server(monkeypatch, deployment, command, bad) -> None:
    res = _admin(monkeypatch, deployment, command, COMMANDS[command][1], bad)
    assert res.exit_code == 1, (command, bad, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), (command, bad, repr(res.exception))
    assert "server 0 (https://127.0.0.1:8700" in res.output, res.output


@pytest.mark.parametrize("command", COMMANDS)
def test_well_formed_answers_print(monkeypatch, deployment, command) -> None:
    res = _admin(monkeypatch, deployment, command, None)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    expect = {"status": {"server0": GOOD["/v1/admin/status"], "server1": GOOD["/v1/admin/status"]},
              "count": GOOD["/v1/admin/count/close"], "open-round": GOOD["/v1/admin/rounds"]}[command]
    assert doc == expect


@pytest.mark.parametrize("call, path, doc", [
    (lambda link: link.close_round(4), "/v1/admin/rounds/4/close", {"round_id": 4}),
    (lambda link: link.round_status(4), "/v1/rounds/4/status", {"state": None}),
    (lambda link: link.round_status(4), "/v1/rounds/4/status", []),
])
def test_the_admin_link_refuses_a_malformed_round_outcome(call, path, doc) -> None:
    """What the round engine's driver reads of server 0 (``state``): a missing or mistyped one
    is an InvalidMessage, not a KeyError."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(doc).encode(), headers={"content-type": "application/json"})

    link = HttpAdminLink(0, ApiClient("https://127.0.0.1:9", "admin", b"k" * 32,
                                      http=httpx.Client(transport=httpx.MockTransport(answer))))
    with pytest.raises(InvalidMessage, match=f"server 0 \\(https://127.0.0.1:9{path}\\)"):
        call(link)


def test_count_says_what_it_waits_for(monkeypatch, deployment) -> None:
    # session 39, helper U: `admin count --wait 600` sat silent for ten minutes; now one stderr line
    # says what it collects and for how long, and stdout stays the one JSON document
    def answer(self: ApiClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(GOOD[path]).encode(),
                              headers={"content-type": "application/json"})

    monkeypatch.setattr(ApiClient, "request", answer)
    res = CliRunner().invoke(app, ["admin", "count", "--wait", "0.01", "--deployment", deployment])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == GOOD["/v1/admin/count/close"]
    assert res.stderr.startswith("count phase open: collecting the devices' count shares for 0.01 s"), res.stderr


def _count_with_progress(monkeypatch, deployment: str, progress: Any, wait: str) -> Any:
    """``secemb admin count --wait WAIT`` with server 0 answering ``progress`` to ``GET /v1/admin/count``."""
    def answer(self: ApiClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        doc = progress if path == "/v1/admin/count" else GOOD[path]
        return httpx.Response(200, content=json.dumps(doc).encode(), headers={"content-type": "application/json"})

    monkeypatch.setattr(ApiClient, "request", answer)
    return CliRunner().invoke(app, ["admin", "count", "--wait", wait, "--deployment", deployment])


def test_count_closes_at_once_when_server_0_reports_every_user_at_both(monkeypatch, deployment) -> None:
    # session 40, helper U: with all 30 users at both servers the command closes at its first look, not
    # after its --wait of 20 s (which it used to sit out whatever the devices did)
    start = time.monotonic()
    res = _count_with_progress(monkeypatch, deployment, {"state": "open", "expected": 30, "server0": 30,
                                                         "server1": 30, "both": 30}, "20")
    assert res.exit_code == 0, res.output
    assert time.monotonic() - start < 10
    assert json.loads(res.stdout) == GOOD["/v1/admin/count/close"]
    assert res.stderr.splitlines()[1:] == ["count shares: 30 of 30 users at server 0, 30 of 30 at server 1, 30 at "
                                           "both"], res.stderr


@pytest.mark.parametrize("progress", [{"server0": 30, "server1": 30}, {"server0": 30, "server1": 30, "both": "30"},
                                      [], None])
def test_a_malformed_progress_is_said_and_the_count_waits_its_wait(monkeypatch, deployment, progress) -> None:
    # a progress answer the command cannot read ends nothing early: one stderr line names server 0, the
    # phase closes at --wait as before, and stdout is the close's document
    start = time.monotonic()
    res = _count_with_progress(monkeypatch, deployment, progress, "1.5")
    assert res.exit_code == 0, res.output
    assert time.monotonic() - start >= 1.5
    assert json.loads(res.stdout) == GOOD["/v1/admin/count/close"]
    lines = res.stderr.splitlines()
    assert len(lines) == 2 and lines[1].startswith("count progress unknown: server 0 (https://127.0.0.1:8700"), lines
