"""The servers of a ``grec-denoiser`` deployment announce the SHA-256 of the recommender's
table they froze (``model.recommender_table_sha256``, :func:`table_sha256`); a device that
builds its denoiser over its own recommender checks it before it sends anything: the SDK
(:meth:`RoundInfo.check_model`, :meth:`Device.participate`) and ``secemb client`` (exit 2
naming ``--recommender``).  A denoiser's round without the hash is the servers' fault; a
malformed one is an :class:`InvalidMessage` of the round document
(``test_round_item_features.py``, with the item features' hash)."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _client_cli import ADAM, SERVERS, run_client

from secemb.client.device import Device, DeviceClient, RoundInfo
from secemb.digest import table_sha256
from secemb.sim.local import InProcessServers, LocalServerLink, server_configs
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference import Denoiser, GaussianLDP
from secemb.inference.saved import load_public_recommender
from secemb.inference.trained import TrainedModel
from secemb.models import MatrixFactorization, UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols.base import RoundConfig

NUM_USERS, NUM_ITEMS = 12, 20
MF = MatrixFactorization(dim=2)
MECH = GaussianLDP(1.0, 1e-4, 1.0)
SPEC = Denoiser(1, 2, MF.sparse_width, hat_d=2, hidden=4, epsilon=MECH.epsilon, delta=MECH.delta,
                bound=MECH.bound).spec()


def _recommender(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(table, dense, every user's params)`` of an MF recommender (random: only its table matters)."""
    rng = np.random.default_rng(seed)
    return (rng.normal(0.0, 0.3, (NUM_ITEMS, MF.sparse_width)), rng.normal(0.0, 0.1, MF.dense_size),
            rng.normal(0.0, 0.3, (NUM_USERS, MF.private_size)))


def test_table_sha256_is_the_shape_then_the_float64_entries() -> None:
    t = np.arange(6, dtype=np.float64).reshape(2, 3) / 7.0
    want = hashlib.sha256(struct.pack("<2q", 2, 3) + struct.pack("<6d", *t.ravel())).hexdigest()
    assert table_sha256(t) == want
    assert table_sha256(np.asfortranarray(t)) == want  # row-major whatever the memory order
    assert table_sha256(t.reshape(3, 2)) != want  # the same entries in another shape
    with pytest.raises(InvalidParameters, match="2-D"):
        table_sha256(t.ravel())


def test_servers_announce_and_the_sdk_device_checks_its_recommender() -> None:
    """In process, the servers (built as a server process builds them, from the frozen table)
    announce the table's hash; a device over that recommender takes part, one over a
    recommender whose table differs in one entry, or whose denoiser records no table hash, is
    refused by :meth:`Device.participate` before it sends a byte."""
    table, dense, params = _recommender(0)
    settings = {"num_items": NUM_ITEMS, "num_users": NUM_USERS, "model": "grec-denoiser", "model_hparams": SPEC,
                "m_prime": 4, "protocol": "secemb", "layout": "full", "relay": False, "min_users": 2}
    servers = InProcessServers(settings, server_configs(settings)[0].make_protocol(),  # the protocol it announces
                               Denoiser(**SPEC, frozen_table=table))
    leader, follower = servers.nodes
    leader.open_round(participants=[1, 2])
    client = DeviceClient.over(1, (LocalServerLink(leader, 1, servers.tp), LocalServerLink(follower, 1, servers.tp)),
                               min_users=2)
    info = client.round_info()  # both servers' documents, compared
    assert info.model["recommender_table_sha256"] == table_sha256(table)
    other = table.copy()
    other[3, 1] += 1e-9
    refused = (Denoiser.for_device(info.model["hparams"], MF, dense, params[1], table_sha256=table_sha256(other)),
               Denoiser.for_device(info.model["hparams"], MF, dense, params[1]))
    assert all(info.fits(den) for den in refused)  # the sizes cannot tell
    sent = servers.tp.total_bytes()
    device = Device(client, np.array([0, 1]), np.array([4.0, 3.0]), rng=np.random.default_rng(1))
    for den, says in zip(refused, ("this device's recommender differs from the one the servers' denoiser is "
                                   "trained against", "records no SHA-256 of its recommender's table")):
        with pytest.raises(InvalidParameters, match=says):
            device.participate(info, model=den)
    assert servers.tp.total_bytes() == sent
    mine = Denoiser.for_device(info.model["hparams"], MF, dense, params[1], table_sha256=table_sha256(table))
    session = device.participate(info, model=mine)
    assert session.upload_bytes > 0 and servers.tp.total_bytes() > sent


def _info(model: dict[str, Any]) -> RoundInfo:
    den = Denoiser(**SPEC)
    return RoundInfo(3, "open", 0, 2, 2, 0.0, RoundConfig(3, NUM_ITEMS, den.sparse_width, den.dense_size, 4), {},
                     model, ADAM, "f" * 64, True)


def test_a_denoiser_round_without_the_table_hash_is_the_servers_fault() -> None:
    table, dense, params = _recommender(0)
    mine = Denoiser.for_device(SPEC, MF, dense, params[1], table_sha256=table_sha256(table))
    with pytest.raises(InvalidMessage, match="announces no SHA-256 of the recommender's table"):
        _info({"name": "grec-denoiser", "hparams": SPEC}).check_model(mine)
    _info({"name": "grec-denoiser", "hparams": SPEC, "recommender_table_sha256": table_sha256(table)}
          ).check_model(mine)
    with pytest.raises(InvalidParameters, match="64 lowercase hex"):
        Denoiser.for_device(SPEC, MF, dense, params[1], table_sha256="F" * 64)


def _saved(tmp_path: Path, table: np.ndarray, dense: np.ndarray, params: np.ndarray) -> Path:
    """The recommender's saved folder (``secemb client --recommender``) under ``tmp_path``."""
    return TrainedModel(MF, table, dense, UserStore(params, AdamConfig()), np.zeros(NUM_USERS + 1, np.int64),
                        np.zeros(0, np.int64), {"protocol": "secemb", "dataset": "synthetic-mini", "seed": 0,
                                                "config": {}}).save(tmp_path / "rec")


@pytest.mark.parametrize("announced", [True, False])
def test_secemb_client_with_another_recommender_exits_before_any_request(announced, monkeypatch, tmp_path) -> None:
    """``secemb client --recommender DIR`` on a denoiser's round: DIR's table is not the one
    the servers froze -- exit 2 naming ``--recommender``; a round announcing no hash -- exit
    1 (the servers'); the device sends nothing either way."""
    table, dense, params = _recommender(1)
    folder = _saved(tmp_path, table, dense, params)
    assert load_public_recommender(folder)[4] == table_sha256(table)  # what the device hashes: its table
    np.savez(tmp_path / "state.npz", params=params[1])
    model = {"name": "grec-denoiser", "hparams": SPEC}
    if announced:  # the servers froze the table of another recommender (the same sizes)
        model["recommender_table_sha256"] = table_sha256(_recommender(0)[0])
    args = [*SERVERS, "--recommender", str(folder), "--recommender-state", str(tmp_path / "state.npz")]
    error = run_client(monkeypatch, _info(model), args, 2 if announced else 1, model)["error"]
    if announced:
        assert f"--recommender {folder}" in error, error
        assert "this device's recommender differs from the one the servers' denoiser is trained against" in error
    else:
        assert "announces no SHA-256 of the recommender's table" in error, error


@pytest.mark.parametrize("hparams", [[1], {**SPEC, "bogus": 1}, {**SPEC, "rating_range": "x"}, {**SPEC, "hidden": 0}])
def test_secemb_client_on_a_malformed_denoiser_spec_exits_1(hparams, monkeypatch, tmp_path) -> None:
    """``secemb client --recommender DIR`` on a denoiser's round whose announced spec no
    denoiser takes (not an object, a field it does not have, a rating range that is no pair, a
    size it refuses): the servers' fault, exit 1 naming the round, nothing sent (was exit 2
    "bad usage", or a ``ValueError`` traceback for the rating range)."""
    table, dense, params = _recommender(1)
    folder = _saved(tmp_path, table, dense, params)
    np.savez(tmp_path / "state.npz", params=params[1])
    model = {"name": "grec-denoiser", "hparams": hparams, "recommender_table_sha256": table_sha256(table)}
    args = [*SERVERS, "--recommender", str(folder), "--recommender-state", str(tmp_path / "state.npz")]
    error = run_client(monkeypatch, _info(model), args, 1, model)["error"]
    assert "round 3" in error and "cannot build" in error, error
