"""Issue 12, finding 9: the servers' configuration does not determine the devices' private
state.  Server 0 initializes the public model from ``init_seed`` = a one-way function of the
run's seed; the devices' private initialization comes from the run's seed itself."""

from __future__ import annotations

import numpy as np

from secemb.data import synthetic_like
from secemb.engine.driver import initial_state
from secemb.engine.local import InProcessServers
from secemb.engine.settings import cluster_settings, rating_range_of
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.training import TrainConfig


def test_finding9_servers_cannot_replay_the_devices_private_initialization():
    data = synthetic_like(40, 30, 500, seed=5)
    model, cfg = MatrixFactorization(dim=4, reg=0.01), TrainConfig(epochs=1, users_per_round=20, seed=7)
    protocol = get_protocol("secemb", layout="cuckoo", relay=True)
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
    # what a server holding init_seed could try: the run's derivation, and a fresh stream from it
    replay = np.random.default_rng(seed)
    model.init_public(m, replay, rating_range=rr)
    for guess in (model.new_user_store(n, replay, cfg.adam()),
                  model.new_user_store(n, np.random.default_rng(seed), cfg.adam())):
        assert not np.allclose(guess.state_dict()["params"], private)
    # and the private state is the run's own: the same seed gives it again, another seed does not
    again = initial_state(model, cfg, m, n, rr, np.random.default_rng(cfg.seed))[2]
    other = initial_state(model, cfg, m, n, rr, np.random.default_rng(cfg.seed + 1))[2]
    assert np.array_equal(again.state_dict()["params"], private)
    assert not np.allclose(other.state_dict()["params"], private)
