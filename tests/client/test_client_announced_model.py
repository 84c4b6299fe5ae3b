"""``secemb client`` at the round document's model: a model the device cannot build from what
the servers announce (no name, no hyperparameters, an unknown name, hyperparameters the model
does not take or refuses) is the servers' fault: exit 1 with the round's id, never a
traceback, and the device sends nothing.  No server runs: :meth:`DeviceClient.round_info`
returns the announced round, and any request to a server fails the test."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.device import DeviceClient, RoundInfo
from secemb.protocols.base import RoundConfig
from secemb.transport.network import ApiClient

runner = CliRunner()


def _info(model: Any) -> RoundInfo:
    return RoundInfo(3, "open", 0, 2, 2, 0.0, RoundConfig(3, 20, 5, 0, 4), {}, model, {}, "f" * 64, True)


@pytest.mark.parametrize("model", [
    {"hparams": {"dim": 4}},  # no name
    {"name": "mf"},  # no hyperparameters
    {"name": "no-such-model", "hparams": {}},
    {"name": "mf", "hparams": {"dim": 4, "bogus": 1}},  # one the model does not take
    {"name": "mf", "hparams": [4]},  # not an object
    {"name": "mf", "hparams": {"dim": -4}},  # one the model refuses
    {"name": ["mf"], "hparams": {"dim": 4}},
])
def test_a_model_the_device_cannot_build_is_the_servers_fault(monkeypatch, model) -> None:
    monkeypatch.setattr(DeviceClient, "round_info", lambda self: _info(model))

    def no_request(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the device sent a request")

    monkeypatch.setattr(ApiClient, "request", no_request)
    monkeypatch.setenv("SECEMB_DEVICE_KEY0", "00" * 32)
    monkeypatch.setenv("SECEMB_DEVICE_KEY1", "11" * 32)
    res = runner.invoke(app, ["client", "--user", "1", "--server0", "https://127.0.0.1:9", "--server1",
                              "https://127.0.0.1:9", "--dataset", "synthetic-mini", "--min-users", "2", "--wait", "1"])
    assert res.exit_code == 1, (model, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), (model, repr(res.exception))
    doc = json.loads(res.output.strip().splitlines()[-1])
    assert doc["user"] == 1 and "round 3" in doc["error"], doc
