"""Networked training (two server processes, >= 20 devices over HTTP on 127.0.0.1) produces
exactly the model of the in-process simulation with the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from net_helpers import WAIT_S, cluster_for, dump_logs, setup, small_data
from secemb.sim.coordinator import train_networked
from secemb.training import train


@pytest.mark.parametrize(
    "protocol,layout,relay,m_prime",
    [
        ("secemb", "cuckoo", True, None),  # the default deployment; m' by Eq. 11 count shares
        ("secemb", "full", False, 8),  # the paper's layout, both servers get uploads
        ("plaintext", "cuckoo", False, 8),
    ],
)
def test_networked_run_equals_in_process_run(protocol, layout, relay, m_prime):
    tr, te = small_data()
    model, proto, config = setup(protocol, layout, relay, m_prime=m_prime, verify=True)
    assert np.unique(tr.users).size >= 20
    ref = train(model, proto, tr, te, config)
    with cluster_for(model, proto, tr, config) as cluster:
        try:
            got = train_networked(cluster, model, proto, tr, te, config, workers=6, wait_s=WAIT_S,
                                  device_randomness="reproducible")
        except Exception:
            print(dump_logs(cluster))
            raise
    assert got.model_sha256 == ref.model_sha256
    assert got.to_dict() | {"time": None} == ref.to_dict() | {"time": None}
    assert got.verified_rounds == got.rounds == ref.rounds
    assert got.upload_bytes_per_user_round == ref.upload_bytes_per_user_round
    assert got.download_bytes_per_user_round == ref.download_bytes_per_user_round
    assert np.array_equal(got.user_store.params, ref.user_store.params)
