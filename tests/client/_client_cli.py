"""``secemb client`` against an announced round with no server running, for the tests of what
a device refuses before it sends anything (:func:`run_client`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.device import DeviceClient, RoundInfo
from secemb.transport.network import ApiClient

#: announced Adam settings a device accepts
ADAM = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

#: the servers as the device is pointed at them (nothing listens: no request may be sent)
SERVERS = ["--server0", "https://127.0.0.1:9", "--server1", "https://127.0.0.1:9", "--min-users", "2", "--wait", "1"]


def run_client(monkeypatch: pytest.MonkeyPatch, info: RoundInfo | None, args: list[str], exit_code: int,
               case: Any, *, env_keys: bool = True, request: Any = None) -> dict[str, Any]:
    """``secemb client --user 1 ARGS --dataset synthetic-mini`` with the round ``info``
    announced (``None``: none is asked for), any request to a server failing the test, the
    device keys in the environment (``env_keys``); checks the exit code and that no traceback
    escaped (``case`` names the case in the assertion messages), and returns the last JSON
    line's document.  ``request``: what :meth:`ApiClient.request` does instead of failing the
    test (the servers' answers)."""
    if info is not None:
        monkeypatch.setattr(DeviceClient, "round_info", lambda self: info)

    def no_request(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the device sent a request")

    monkeypatch.setattr(ApiClient, "request", no_request if request is None else request)
    if env_keys:
        monkeypatch.setenv("SECEMB_DEVICE_KEY0", "00" * 32)
        monkeypatch.setenv("SECEMB_DEVICE_KEY1", "11" * 32)
    res = CliRunner().invoke(app, ["client", "--user", "1", *args, "--dataset", "synthetic-mini"])
    assert res.exit_code == exit_code, (case, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), (case, repr(res.exception))
    doc: dict[str, Any] = json.loads(res.output.strip().splitlines()[-1])
    return doc
