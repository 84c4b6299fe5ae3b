"""``secemb client`` at the round document's model: a model the device cannot build from what
the servers announce (no name, no hyperparameters, an unknown name, hyperparameters the model
does not take or refuses) is the servers' fault: exit 1 with the round's id, never a
traceback, and the device sends nothing; a ``--state-file`` that is not the device's state is
bad usage (exit 2).  No server runs: :meth:`DeviceClient.round_info` returns the announced
round, and any request to a server fails the test."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _client_cli import ADAM, SERVERS, run_client

from secemb.client.device import RoundInfo
from secemb.errors import InvalidMessage
from secemb.protocols.base import RoundConfig


def _info(model: Any, training: dict[str, Any] = ADAM, protocol: Any = None) -> RoundInfo:
    """Round 3 announcing ``model``, ``training`` and ``protocol`` (default an empty block)."""
    return RoundInfo(3, "open", 0, 2, 2, 0.0, RoundConfig(3, 20, 5, 1, 4), {} if protocol is None else protocol, model,
                     dict(training), "f" * 64, True)


#: announced models no device can build
UNBUILDABLE = [
    {"hparams": {"dim": 4}},  # no name
    {"name": "mf"},  # no hyperparameters
    {"name": "no-such-model", "hparams": {}},
    {"name": "mf", "hparams": {"dim": 4, "bogus": 1}},  # one the model does not take
    {"name": "mf", "hparams": [4]},  # not an object
    {"name": "mf", "hparams": {"dim": -4}},  # one the model refuses
    {"name": ["mf"], "hparams": {"dim": 4}},
]


@pytest.mark.parametrize("model", UNBUILDABLE)
def test_a_model_the_device_cannot_build_is_the_servers_fault(monkeypatch, model) -> None:
    doc = run_client(monkeypatch, _info(model), SERVERS, 1, model)
    assert doc["user"] == 1 and "round 3" in doc["error"], doc


@pytest.mark.parametrize("model", UNBUILDABLE)
def test_the_sdk_reports_an_unbuildable_model_as_an_invalid_message(model) -> None:
    """The SDK's :meth:`RoundInfo.make_model` and :meth:`RoundInfo.make_task` (what a
    :class:`Device` calls without a model of its own) raise :class:`InvalidMessage`, the
    servers' fault, never a ``KeyError`` or ``TypeError``."""
    info = _info(model)
    with pytest.raises(InvalidMessage, match="cannot build"):
        info.make_model()
    with pytest.raises(InvalidMessage, match="cannot build"):
        info.make_task()


def test_the_sdk_builds_the_announced_model() -> None:
    info = _info({"name": "mf", "hparams": {"dim": 4}})
    model = info.make_model()
    assert model.name == "mf" and info.fits(model)  # the round's table width 5 (4 + a bias) and dense size 1


@pytest.mark.parametrize("content", [b"not an npz", "no params", "wrong shape"])
def test_a_corrupt_state_file_is_bad_usage(monkeypatch, tmp_path, content) -> None:
    """``--state-file`` that is not the device's state (not an ``.npz``, an array missing, the
    wrong sizes for the announced model): exit 2 with the file named, before any request."""
    import numpy as np

    state = tmp_path / "state.npz"
    if content == "no params":
        np.savez(state, m=np.zeros(5), v=np.zeros(5), t=np.int64(1))
    elif content == "wrong shape":
        np.savez(state, params=np.zeros(3), m=np.zeros(3), v=np.zeros(3), t=np.int64(1))
    else:
        state.write_bytes(content)
    doc = run_client(monkeypatch, _info({"name": "mf", "hparams": {"dim": 4}}), [*SERVERS, "--state-file", str(state)],
                     2, content)
    assert "state.npz" in doc["error"], doc


@pytest.mark.parametrize("training", [{}, {**ADAM, "lr": "fast"}, {**ADAM, "lr": -1.0}, {**ADAM, "beta1": None}])
def test_malformed_adam_settings_are_the_servers_fault(monkeypatch, tmp_path, training) -> None:
    """The round's optimizer settings (``training``: lr, beta1, beta2, eps) missing or not
    Adam's: exit 1 naming the round, before any request (the device restores its state file
    into an optimizer of these settings first)."""
    import numpy as np

    state = tmp_path / "state.npz"
    np.savez(state, params=np.zeros(5), m=np.zeros(5), v=np.zeros(5), t=np.int64(1))
    doc = run_client(monkeypatch, _info({"name": "mf", "hparams": {"dim": 4}}, training),
                     [*SERVERS, "--state-file", str(state)], 1, training)
    assert "round 3" in doc["error"], doc


@pytest.mark.parametrize("model", [{"name": "mf", "hparams": {"bogus": 1}}, {"name": "mf", "hparams": [4]},
                                   {"name": "mf", "hparams": {"dim": 0}}])
def test_a_credentials_model_it_cannot_build_is_bad_usage(monkeypatch, tmp_path, model) -> None:
    """The credentials file's model (what ``--count`` builds its task from) that the device
    cannot build: exit 2 naming the file's model, before any request."""
    from secemb.transport.credentials import _FORMAT

    creds = tmp_path / "dev.json"
    creds.write_text(json.dumps({"format": _FORMAT, "user": 1, "server0": "https://127.0.0.1:9",
                                 "server1": "https://127.0.0.1:9", "key0": "00" * 32, "key1": "11" * 32,
                                 "model": model}))
    error = run_client(monkeypatch, None, ["--credentials", str(creds), "--count"], 2, model,
                       env_keys=False)["error"]
    assert "bad usage" in error, error


#: a protocol block a device accepts
PROTOCOL = {"name": "plaintext", "layout": "full", "relay": False, "expansion": 1.25, "layout_seed": 0}
#: a model a device builds
MF = {"name": "mf", "hparams": {"dim": 4}}


@pytest.mark.parametrize("protocol", [
    {},
    {k: v for k, v in PROTOCOL.items() if k != "layout"},
    {**PROTOCOL, "name": "no-such-protocol"},
    {**PROTOCOL, "name": ["plaintext"]},
    {**PROTOCOL, "layout": "sideways"},
    {**PROTOCOL, "options": {"bogus": 1}},
    {**PROTOCOL, "options": [1]},
])
def test_a_protocol_the_device_cannot_run_is_the_servers_fault(monkeypatch, protocol) -> None:
    """A malformed ``protocol`` block: :meth:`RoundInfo.make_protocol` raises
    :class:`InvalidMessage`, and ``secemb client`` exits 1 naming the round before any
    request (it was a ``KeyError`` traceback)."""
    info = _info(MF, protocol=protocol)
    with pytest.raises(InvalidMessage, match="cannot run"):
        info.make_protocol()
    doc = run_client(monkeypatch, info, SERVERS, 1, protocol)
    assert "round 3" in doc["error"], doc


@pytest.mark.parametrize("training", [
    ADAM, {**ADAM, "ring_bits": 64}, {**ADAM, "ring_bits": "x", "frac_bits": 16},
    {**ADAM, "ring_bits": 7, "frac_bits": 16},
])
def test_malformed_fixed_point_settings_are_an_invalid_message(training) -> None:
    with pytest.raises(InvalidMessage, match="fixed-point"):
        _info(MF, training, PROTOCOL).fixed_point()


def test_a_well_formed_announcement_builds() -> None:
    info = _info(MF, {**ADAM, "ring_bits": 64, "frac_bits": 16}, PROTOCOL)
    assert info.make_protocol().name == "plaintext"
    assert (info.fixed_point().ring_bits, info.fixed_point().frac_bits) == (64, 16)


#: a grec-denoiser's hyperparameters a device builds
DENOISER = {"rows": 1, "dim": 4, "frozen": 5, "hat_d": 8, "hidden": 32, "reg": 0.001, "init_std": 0.1,
            "rating_range": [1.0, 5.0], "epsilon": 1.0, "delta": 1e-4, "bound": 1.0}


@pytest.mark.parametrize("bad", [{"rating_range": "x"}, {"rating_range": [1]}, {"rating_range": {}},
                                 {"rows": 2**70}, {"hidden": 2**70}])
def test_a_denoiser_the_device_cannot_build_is_the_servers_fault(bad) -> None:
    """Denoiser hyperparameters whose values its constructor meets with a ``ValueError`` (a
    rating range that is no pair of numbers) or numpy with an ``OverflowError`` (sizes beyond
    int64): :meth:`RoundInfo.make_model` raises :class:`InvalidMessage` and
    :meth:`Denoiser.for_device` (``secemb client``'s denoiser round) :class:`InvalidParameters`
    -- both escaped as they were."""
    import numpy as np

    from secemb.errors import InvalidParameters
    from secemb.inference.denoiser import Denoiser
    from secemb.models import get_model

    assert _info({"name": "grec-denoiser", "hparams": DENOISER}).make_model().name == "grec-denoiser"
    with pytest.raises(InvalidMessage, match="cannot build"):
        _info({"name": "grec-denoiser", "hparams": {**DENOISER, **bad}}).make_model()
    mf = get_model("mf", dim=4)
    with pytest.raises(InvalidParameters, match="not a denoiser spec"):
        Denoiser.for_device({**DENOISER, **bad}, mf, np.zeros(mf.dense_size), np.zeros(mf.private_size))
