"""SFSL through the round engine: the engine round (the protocol's stage list over the
one-server phase, messages on counted links) gives the in-process reference's model bit for bit
(same seed, same CSPRNG), with and without dropouts; traffic is what crossed the transport."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.sim.local import LocalStageServer
from secemb.sim.player import connect_local
from secemb.protocols.exchange import ExchangeServer
from secemb.protocols.sfsl import SFSLRun, TrainingSettings, train_sfsl
from secemb.protocols.sfsl.protocol import ExchangePlayer, model_bytes
from secemb.protocols.sfsl.staged import SFSLNode
from secemb.randomness import CtrDrbg
from secemb.secagg import SecAggAborted

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def clicks():
    world = TaobaoShaped("taobao-mini", seed=3)
    return split_clicks(world.clients(np.arange(40)))


def local_player(server, settings, host=None):
    """The engine's round player against ``server`` in process (``host`` receives the LocalStageServer)."""
    node = SFSLNode(server, settings)
    hosted = ExchangeServer(node, 1 << 30, lambda: model_bytes(server), 1 << 20)
    return ExchangePlayer(connect_local(hosted, hosts=host), server.space, node.bloom, server.table.shape)


RUN = SFSLRun(preset="CPP2", clients_per_round=5, rounds=2, settings=TrainingSettings(batch=8), seed=4, eval_every=2)


def _pair(clicks, run, dropouts=None):
    train, test = clicks
    ref = train_sfsl(train, test, run, dropouts=dropouts, _rng=CtrDrbg(11))
    hosts: list[LocalStageServer] = []
    eng = train_sfsl(train, test, run, dropouts=dropouts, _rng=CtrDrbg(11),
                     player=lambda s, t: local_player(s, t, host=hosts))
    return ref, eng, hosts[0]


def test_engine_round_is_the_reference_round_bit_for_bit(clicks):
    ref, eng, host = _pair(clicks, RUN)
    assert np.array_equal(ref.table, eng.table) and np.array_equal(ref.dense, eng.dense)
    assert np.array_equal(ref.user_embeddings, eng.user_embeddings)
    assert ref.auc == eng.auc
    # the model moved: not a twin of two runs that did nothing
    fresh = train_sfsl(*clicks, SFSLRun(preset="CPP2", clients_per_round=5, rounds=1, seed=4,
                                        settings=TrainingSettings(lr=0.0, batch=8)), _rng=CtrDrbg(11))
    assert not np.array_equal(fresh.table, eng.table)
    for a, b in zip(ref.reports, eng.reports, strict=True):
        assert a.survivors == b.survivors and a.union_size == b.union_size and a.perturbed_sizes == b.perturbed_sizes
        # the reference's byte counts are the secagg transcripts'; the engine's are what crossed its links
        assert a.upload_bytes == b.upload_bytes and a.download_bytes == b.download_bytes
    # every byte the engine reports crossed the in-process transport
    up = sum(sum(v.values()) for rep in eng.reports for v in rep.upload_bytes.values())
    down = sum(sum(v.values()) for rep in eng.reports for v in rep.download_bytes.values())
    assert up == host.tp.total_bytes(direction="upload") and down == host.tp.total_bytes(direction="download")
    assert host.tp.total_bytes(direction="upload", stage="sum-masked") > 0


def test_engine_round_with_dropouts_is_the_reference_round(clicks):
    def dropouts(r, chosen):
        # round 1: one device leaves the PSU after ShareKeys, one leaves the secure sum after signing
        # the survivors (before unmasking); round 2: one leaves the secure sum after advertising (it
        # is in the key list, not in U2: its rows count for nobody). A device that leaves between
        # ShareKeys and signing aborts the round (min_row_holders: tests/secagg/test_s26_row_holders.py)
        if r == 1:
            return {int(chosen[0]): 2}, {int(chosen[1]): 4}
        return {}, {int(chosen[2]): 1}

    ref, eng, _ = _pair(clicks, RUN, dropouts)
    assert np.array_equal(ref.table, eng.table) and np.array_equal(ref.dense, eng.dense)
    assert [len(r.survivors) for r in eng.reports] == [4, 4]
    assert [r.survivors for r in ref.reports] == [r.survivors for r in eng.reports]


def test_engine_round_aborts_below_the_threshold(clicks):
    train, test = clicks
    servers = []

    def player(server, settings):
        servers.append((server, server.table.copy(), server.dense.copy()))
        return local_player(server, settings)

    def dropouts(r, chosen):
        return {}, {int(u): 2 for u in chosen[:3]}  # 2 of 5 left, threshold 3

    with pytest.raises(SecAggAborted, match="threshold 3"):
        train_sfsl(train, test, SFSLRun(preset="CPP2", clients_per_round=5, rounds=1, seed=4,
                                        settings=TrainingSettings(batch=8)), dropouts=dropouts, player=player)
    server, table0, dense0 = servers[0]
    assert np.array_equal(server.table, table0) and np.array_equal(server.dense, dense0)


# ---- secemb train --protocol sfsl: what it refuses (exit 2, before any work)

def _train(*args: str):
    from typer.testing import CliRunner

    from secemb.cli import app

    return CliRunner().invoke(app, ["train", *args])


@pytest.mark.parametrize("args, message", [
    (["--protocol", "secemb", "--sfsl-preset", "CPP2"], "--sfsl-preset is an option of --protocol sfsl"),
    (["--protocol", "sfsl", "--sfsl-preset", "CPP9"], "CPP9"),
    (["--protocol", "sfsl", "--model", "mf"], "--model must be din"),
    (["--protocol", "sfsl", "--verify"], "does not take --verify"),
    (["--protocol", "sfsl", "--m-prime", "5"], "does not take --m-prime"),
    (["--protocol", "sfsl", "--dp-epsilon", "1"], "does not take --dp-epsilon"),
    (["--protocol", "sfsl", "--dense-adam"], "does not take --dense-adam"),
    (["--protocol", "sfsl", "--metrics", "rmse"], "AUC only"),
    (["--protocol", "sfsl", "--dataset", "synthetic"], "click samples"),
    (["--protocol", "sfsl", "--users-per-round", "1"], "at least 2"),
])
def test_train_refuses_what_sfsl_cannot_honour(args, message):
    res = _train(*args, "--dataset" if "--dataset" not in args else "--seed", "taobao-mini" if "--dataset" not in
                 args else "0")
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("args, message", [
    (["--protocol", "plaintext", "--sfsl-preset", "CPP1"], "--sfsl-preset is an option of --protocol sfsl"),
    (["--protocol", "sfsl", "--workdir", "x"], "does not take --workdir"),
    (["--protocol", "sfsl", "--dp-epsilon", "2"], "does not take --dp-epsilon"),
    (["--protocol", "sfsl", "--model", "ncf"], "--model must be din"),
])
def test_demo_refuses_what_sfsl_cannot_honour(args, message):
    from typer.testing import CliRunner

    from secemb.cli import app

    res = CliRunner().invoke(app, ["demo", "--network", "--dataset", "taobao-mini", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


@pytest.mark.slow
def test_train_sfsl_json(tmp_path):
    # a small run end to end: the JSON document of `secemb train`, AUC as the metric
    import json

    out = tmp_path / "r.json"
    res = _train("--protocol", "sfsl", "--sfsl-preset", "CPP5", "--dataset", "taobao-mini", "--users-per-round",
                 "100", "--epochs", "1", "--lr", "0.5", "--quiet", "--json-out", str(out))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["config"]["protocol"] == "sfsl" and doc["config"]["sfsl_preset"] == "CPP5"
    assert doc["rounds"] == 2 and 0.0 < doc["epochs"][-1]["test_metrics"]["auc"] < 1.0
    assert doc["comm"]["upload_bytes_per_user_round"] > 0
