"""Where a device's private state comes from (issue 12 finding 9; issue 33 item 4).

Server 0 initializes the public model from ``init_seed = public_init_seed(seed)``, a SHA-256
derivation of the run's seed.  One-way is not enough: a small seed is found from ``init_seed``
by trying seeds.  So a deployed device draws its private state (initialization, task samples,
padding slots) from its own OS entropy (:func:`secemb.client.device.private_rng`); only a
simulation that names itself ``device_randomness="reproducible"`` draws it from the seed.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.device import Device, DeviceClient
from secemb.data import synthetic_like, train_test_split
from secemb.errors import InvalidParameters
from secemb.models import MatrixFactorization
from secemb.models.optim import AdamConfig
from secemb.protocols import get_protocol
from secemb.sim.driver import RoundAborted, initial_state, run
from secemb.sim.local import InProcessServers
from secemb.sim.settings import DeviceRandomness, cluster_settings, public_init_seed, rating_range_of
from secemb.training import TrainConfig, train

RUN_SEED = 4242  # the red team's seed: found from init_seed in 0.04 s


def _setup(seed: int = RUN_SEED):
    data = train_test_split(synthetic_like(40, 30, 500, seed=5), 0.2, seed=0)
    model = MatrixFactorization(dim=4, reg=0.01)
    cfg = TrainConfig(epochs=1, users_per_round=20, m_prime=6, seed=seed)
    return data, model, get_protocol("secemb", layout="cuckoo", relay=True), cfg


def _deployed(device_randomness: DeviceRandomness):
    """A run whose servers hold only their configuration; its result and that configuration."""
    (tr, te), model, protocol, cfg = _setup()
    settings = cluster_settings(model, protocol, tr, cfg)
    servers = InProcessServers(settings, protocol, model)
    try:
        return run(servers.servers(), model, protocol, tr, te, cfg, device_randomness=device_randomness), settings
    finally:
        servers.stop()


def test_finding9_servers_cannot_replay_the_devices_private_initialization():
    (data, _), model, protocol, cfg = _setup(seed=7)
    settings = cluster_settings(model, protocol, data, cfg)
    m, n, rr = data.num_items, data.num_users, rating_range_of(data, cfg)
    table, dense, store = initial_state(model, cfg, m, n, rr, np.random.default_rng(cfg.seed))
    private = store.state_dict()["params"]

    servers = InProcessServers(settings, protocol, model)
    try:  # server 0's fresh model is the run's public model, from init_seed alone
        leader = servers.nodes[0]
        assert np.array_equal(leader.table, table) and np.array_equal(leader.dense, dense)
    finally:
        servers.stop()

    seed = settings["init_seed"]
    assert seed != cfg.seed
    # what a server holding init_seed could try without guessing the run's seed: the run's
    # derivation, and a fresh stream from it
    replay = np.random.default_rng(seed)
    model.init_public(m, replay, rating_range=rr)
    for guess in (model.new_user_store(n, replay, cfg.adam()),
                  model.new_user_store(n, np.random.default_rng(seed), cfg.adam())):
        assert not np.allclose(guess.state_dict()["params"], private)


def test_seed_brute_force_reveals_no_device_state():
    deployed, settings = _deployed("private")
    assert deployed.config["device_randomness"] == "private"
    # the server brute-forces the run's seed from what it was given: it finds it ...
    found = next(s for s in range(100_000) if public_init_seed(s) == settings["init_seed"])
    assert found == RUN_SEED
    # ... and replays everything the seed drives -- here even with every device's ratings, which
    # it never has: the whole run as a reproducible simulation of that seed
    (tr, te), model, protocol, cfg = _setup(seed=found)
    replay = train(model, protocol, tr, te, cfg)
    assert replay.config["device_randomness"] == "reproducible"
    assert replay.rounds == deployed.rounds  # the same users in the same rounds: the operator's draws
    # no device's private state is reproduced, nor the model it trained
    mine, guess = deployed.user_store.params, replay.user_store.params
    assert not np.any(np.all(np.isclose(mine, guess, rtol=0, atol=1e-6), axis=1))
    assert deployed.model_sha256 != replay.model_sha256
    # the same attack on a simulation that draws the devices' state from the seed reproduces it
    # exactly: what the deployment paths must not do
    simulated, _ = _deployed("reproducible")
    assert np.array_equal(simulated.user_store.params, guess) and simulated.model_sha256 == replay.model_sha256


def test_a_device_of_the_sdk_seeds_its_generator_from_the_os_csprng(monkeypatch):
    (tr, _), model, *_ = _setup()
    client = DeviceClient.over(3, (None, None))  # type: ignore[arg-type]  # no server is called here
    items, ratings = tr.items[tr.users == 3], tr.ratings[tr.users == 3]
    adam = AdamConfig(0.01, 0.9, 0.999, 1e-8)

    def init(device: Device) -> np.ndarray:
        return model.new_user_store(1, device.rng, adam).params[0]

    a, b = init(Device(client, items, ratings)), init(Device(client, items, ratings))
    assert not np.allclose(a, b)  # fresh entropy per device
    guesses = np.stack([model.new_user_store(1, np.random.default_rng(s), adam).params[0] for s in range(2000)])
    assert not np.any(np.all(np.isclose(guesses, a, rtol=0, atol=1e-9), axis=1))
    # the entropy is the OS CSPRNG's (secemb.randomness.system_rng), 32 bytes of it
    asked: list[int] = []

    def fixed(n: int) -> bytes:
        asked.append(n)
        return bytes(range(n))

    monkeypatch.setattr("secemb.client.device.system_rng", fixed)
    got = init(Device(client, items, ratings))
    want = model.new_user_store(1, np.random.default_rng(int.from_bytes(bytes(range(32)), "little")), adam)
    assert asked == [32] and np.array_equal(got, want.params[0])


def test_the_driver_refuses_an_unnamed_device_randomness():
    (tr, te), model, protocol, cfg = _setup()
    servers = InProcessServers(cluster_settings(model, protocol, tr, cfg), protocol, model)
    try:
        with pytest.raises(InvalidParameters, match="device_randomness"):
            run(servers.servers(), model, protocol, tr, te, cfg, device_randomness="seeded")  # type: ignore[arg-type]
    finally:
        servers.stop()


@pytest.mark.parametrize(("flags", "want"), [([], "private"), (["--reproducible"], "reproducible")])
def test_demo_network_devices_draw_private_state_unless_told_reproducible(monkeypatch, flags, want):
    seen: list[str] = []

    def fake(exp, **kw):  # the networked run, stopped before any server starts
        seen.append(kw["device_randomness"])
        raise RoundAborted("stopped by the test")

    monkeypatch.setattr("secemb.training.networked.run_networked_experiment", fake)
    res = CliRunner().invoke(app, ["demo", "--network", *flags, "--quiet", "--epochs", "1"])
    assert res.exit_code == 1 and "stopped by the test" in res.output, res.output
    assert seen == [want]
