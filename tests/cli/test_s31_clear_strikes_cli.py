"""Session 31, helper D (issue 34, S31-R2): ``secemb admin clear-strikes --deployment D [--device U]``,
server 0's operator's forgiving of the devices' strikes (a clear of the alarms keeps them).

Exit codes (docs/deployment.md, "Alarms"): 0 and the server's answer printed; 1 when server 0
refuses or answers a malformed document; 2, before any request, for a device id that is not one of
the deployment's (negative, not a number, or not below ``num_users``), for server 1's half (the
strikes are counted at server 0's door) and for ``--device`` on a one-server deployment (which
clears every device's strikes at once, as its ``clear-alarms`` does).  Server 0 is replaced by a stub that records the requests; what the server
does with them: tests/review/test_session31_clear_strikes.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_helpers import assert_usage_error, init_one_server, run_cli
from typer.testing import CliRunner

from secemb.cli import app
from secemb.transport.network import ApiClient

#: the test setup's devices (ids 0-29)
NUM_USERS = 30
PATH = "/v1/admin/strikes/clear"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("dep") / "dep"
    res = CliRunner().invoke(app, ["admin", "init", "--out", str(out), "--host0", "127.0.0.1", "--host1",
                                   "127.0.0.1", "--num-items", "40", "--num-users", str(NUM_USERS)])
    assert res.exit_code == 0, res.output
    return str(out)


def _stub(monkeypatch: pytest.MonkeyPatch, status: int, doc: Any) -> list[tuple[str, str, Any]]:
    """Every request answered ``status`` with JSON ``doc``; the requests ``(method, url, json body)``."""
    sent: list[tuple[str, str, Any]] = []

    def answer(self: ApiClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        sent.append((method, f"{self.base_url}{path}", kwargs.get("json_body")))
        if status >= 400:
            from secemb.transport.errors import RemoteError

            raise RemoteError(status, doc["error"], doc["detail"])
        return httpx.Response(status, content=json.dumps(doc).encode(), headers={"content-type": "application/json"})

    monkeypatch.setattr(ApiClient, "request", answer)
    return sent


@pytest.mark.parametrize(("args", "body"), [([], {}), (["--device", "7"], {"device": 7}),
                                            (["--device", str(NUM_USERS - 1)], {"device": NUM_USERS - 1})])
def test_it_asks_server_0_only_and_prints_its_answer(monkeypatch: pytest.MonkeyPatch, deployment: str,
                                                     args: list[str], body: dict[str, int]) -> None:
    sent = _stub(monkeypatch, 200, {"cleared": {"7": 2}})
    res = run_cli("admin", "clear-strikes", "--deployment", deployment, *args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"server0": {"cleared": {"7": 2}}}
    assert sent == [("POST", f"https://127.0.0.1:8700{PATH}", body)]


@pytest.mark.parametrize("device", ["-1", str(NUM_USERS), "x", "1.5", ""])
def test_a_bad_device_id_is_a_usage_error_before_any_request(monkeypatch: pytest.MonkeyPatch, deployment: str,
                                                             device: str) -> None:
    sent = _stub(monkeypatch, 200, {"cleared": {}})
    res = run_cli("admin", "clear-strikes", "--deployment", deployment, "--device", device)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    if device == str(NUM_USERS):
        assert_usage_error(res, f"--device {NUM_USERS}: the deployment's devices are 0-{NUM_USERS - 1}")
    assert sent == []


@pytest.mark.parametrize(("status", "doc"), [
    (403, {"error": "forbidden", "detail": "not the operator"}),
    (422, {"error": "invalid_parameters", "detail": "device must be an int in [0, 29], got 30"}),
    (200, {"cleared": 2}), (200, []), (200, {})])
def test_a_refusal_or_a_malformed_answer_exits_1(monkeypatch: pytest.MonkeyPatch, deployment: str, status: int,
                                                 doc: Any) -> None:
    _stub(monkeypatch, status, doc)
    res = run_cli("admin", "clear-strikes", "--deployment", deployment, "--device", "3")
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    named = f"HTTP {status} {doc['error']}" if status >= 400 else f"server 0 (https://127.0.0.1:8700{PATH})"
    assert res.stderr.startswith("error: ") and named in res.stderr, res.stderr


def test_server_1s_half_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    half = tmp_path / "half1"
    res = run_cli("admin", "init", "--party", "1", "--out", str(half), "--host1", "127.0.0.1", "--num-items", "40",
                  "--num-users", str(NUM_USERS))
    assert res.exit_code == 0, res.output
    sent = _stub(monkeypatch, 200, {"cleared": {}})
    res = run_cli("admin", "clear-strikes", "--deployment", str(half))
    assert_usage_error(res, "server 0's operator")
    assert sent == []


def test_a_one_server_deployment_clears_every_device_and_refuses_a_device(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    """One server: the exchange node's clear of every device's strikes (the path its ``clear-alarms``
    takes); ``--device`` is refused before any request (its node forgives all devices at once)."""
    root = tmp_path / "one"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3")
    sent = _stub(monkeypatch, 200, {"cleared": {"1": 3}})
    res = run_cli("admin", "clear-strikes", "--deployment", str(root))
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"server": {"cleared": {"1": 3}}}
    assert [(m, u.rsplit("/v1/", 1)[1]) for m, u, _ in sent] == [("POST", "admin/exchange/strikes/clear")]
    sent.clear()
    res = run_cli("admin", "clear-strikes", "--deployment", str(root), "--device", "1")
    assert_usage_error(res, "one-server deployment clears every device")
    assert sent == []
