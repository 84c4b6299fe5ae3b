"""``--protocol secea`` as a registered one-server protocol: its training through the engine
equals a run whose averages are computed in plaintext here (the fixed-point average, by hand),
the in-process and the HTTP runs give the same model, and its options are checked."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data import load_dataset, train_test_split
from secemb.digest import model_sha256
from secemb.sim.player import connect_local, train_exchange
from secemb.errors import InvalidParameters
from secemb.protocols import exchange_class, protocol_servers
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.secea.protocol import SecEAProtocol
from secemb.protocols.secea.silos import local_epoch, make_silos, one_thread, popular_items, silo_entities
from secemb.protocols.stages import SECEA_SETUP_STAGES
from secemb.randomness import CtrDrbg
from secemb.secagg.identity import Roster

FAST = {"secea_key_bits": 1024, "secea_items": 6}


@pytest.fixture(scope="module")
def split():
    return train_test_split(load_dataset("synthetic", seed=3), 0.2, 3)


def protocol(split, epochs=2, **kw):
    return SecEAProtocol(ExchangeRun("synthetic", epochs=epochs, seed=3), data=split, **{**FAST, **kw})


def plaintext_run(train, n, dim, lr, reg, seed, items, rounds):
    """The same silos and local training, the item rows averaged here: sum of round(h * 2^16)
    over the silos holding the item, divided by (count * 2^16)."""
    silos = make_silos(train, n, dim, lr, seed)
    chosen = popular_items(train, items)
    own = [silo_entities(s, chosen) for s in silos]
    gen = np.random.default_rng(seed + 1)
    for _ in range(rounds):
        with one_thread():
            for s in silos:
                local_epoch(s, reg, 1024, gen)
        rows = [s.item_rows for s in silos]
        total: dict[int, np.ndarray] = {}
        count: dict[int, int] = {}
        for s, o, rw in zip(silos, own, rows, strict=True):
            for pos in o:
                item = int(s.items[pos])
                total[item] = total.get(item, 0) + np.rint(rw[pos] * 2.0**16).astype(np.int64)
                count[item] = count.get(item, 0) + 1
        for s, o, rw in zip(silos, own, rows, strict=True):
            for pos in o:
                item = int(s.items[pos])
                rw[pos] = total[item] / (count[item] * 2.0**16)
            s.set_item_rows(rw)
    return np.vstack([s.item_rows for s in silos]), np.concatenate([s.user_rows.ravel() for s in silos])


def test_registered_as_a_one_server_protocol():
    assert protocol_servers("secea") == 1
    assert exchange_class("secea") is SecEAProtocol


def test_training_equals_the_plaintext_average_run_and_reports_traffic(split):
    hosts: list = []
    res = train_exchange(protocol(split, _rng=CtrDrbg(1)), lambda server: connect_local(server, hosts=hosts))
    table, dense = plaintext_run(split[0], 3, 8, 0.01, 0.1, 3, FAST["secea_items"], 2)
    assert np.array_equal(res.table, table) and np.array_equal(res.dense, dense)
    assert res.model_sha256 == model_sha256(table, dense)
    assert [e.epoch for e in res.epochs] == [1, 2] and all(0 < e.test_metrics["rmse"] < 5 for e in res.epochs)
    tp = hosts[0].tp
    rounds_bytes = sum(tp.total_bytes(round_id=r) for r in (1, 2))
    assert res.upload_bytes_per_user_round + res.download_bytes_per_user_round == pytest.approx(rounds_bytes / 6)
    assert res.config["secea_setup_bytes_per_silo"] == pytest.approx(tp.total_bytes(round_id=0) / 3)


def test_in_process_and_http_give_the_same_model(split):
    from secemb.sim.exchange import train_networked

    local = train_exchange(protocol(split, epochs=1))
    remote = train_networked(protocol(split, epochs=1), concurrency=3)
    assert local.model_sha256 == remote.model_sha256
    assert local.upload_bytes_per_user_round == remote.upload_bytes_per_user_round


@pytest.mark.parametrize("kw", [{"secea_silos": 1}, {"secea_silos": 4, "secea_threshold": 2},
                                {"secea_key_bits": 512}, {"secea_items": -1}, {"model": "ncf"},
                                {"metrics": "auc"}, {"dim": 0}, {"lr": 0.0}, {"lr": float("inf")}, {"reg": -1.0},
                                {"lr": "x"}, {"secea_silos": 30}, {"secea_items": True}])
def test_bad_options_are_refused(split, kw):
    with pytest.raises(InvalidParameters):
        SecEAProtocol(ExchangeRun("synthetic"), data=split, **kw)


def test_a_silo_device_takes_part_from_the_round_documents(split):
    p = protocol(split)
    roster = Roster.generate()  # the deployment's operator: each silo signs its keys (secemb client sets it)
    devices = {u: p.make_device(u) for u in range(3)}
    for u, d in devices.items():
        d.identity = roster.enroll(u)
    server = p.make_server()
    rounds = connect_local(server)
    rec = rounds.play(0, {u: d.party({"round_id": 0, "users": [0, 1, 2], "stages": list(SECEA_SETUP_STAGES)})
                          for u, d in devices.items()})
    assert rec.finished == [0, 1, 2]
    doc = {"round_id": 1, "users": [0, 1, 2], "stages": ["secea-share", "secea-answer"]}
    rec = rounds.play(1, {u: d.party(doc) for u, d in devices.items()})
    assert rec.finished == [0, 1, 2]
    rows = [d.silo.item_rows[d.own] for d in devices.values()]
    items = [d.silo.items[d.own] for d in devices.values()]
    for item in set(np.concatenate(items).tolist()):  # every holder has the same average now
        held = [r[list(i).index(item)] for r, i in zip(rows, items, strict=True) if item in i]
        assert all(np.array_equal(h, held[0]) for h in held)
    with pytest.raises(Exception, match="not a SecEA round document|not SecEA's"):
        devices[0].party({"round_id": 2, "users": [0, 1, 2], "stages": ["psu-advertise"]})
    with pytest.raises(InvalidParameters):
        p.make_device(3)
