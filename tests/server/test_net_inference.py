"""``secemb infer --credentials`` against a running deployment (two server processes on
127.0.0.1, TLS with the deployment's CA): the device's scores are the public model's on the
release it recorded, a second call sends the same release, a changed representation makes a
new one and the ledger composes them; bad usage exits 2, a refusal exits 1."""

from __future__ import annotations

import json

import numpy as np
from net_helpers import cluster_for, setup, small_data
from typer.testing import CliRunner

from secemb.cli import app
from secemb.inference.releases import ReleaseLedger
from secemb.round import messages


def _state(path, params: np.ndarray) -> None:
    np.savez(path, params=params, m=np.zeros_like(params), v=np.zeros_like(params), t=np.int64(0))


def test_infer_asks_the_deployment_and_keeps_one_release_per_representation(tmp_path) -> None:
    train, _ = small_data()
    model, proto, config = setup(dim=4)
    runner = CliRunner()
    with cluster_for(model, proto, train, config) as cluster:
        creds = cluster.deployment.devices([3])[0].save(tmp_path / "dev3.json")
        state = tmp_path / "dev3.npz"
        params = np.array([0.3, -0.2, 0.5, 0.1, 0.07])  # p_u (d = 4), b_u
        _state(state, params)
        base = ["infer", "--credentials", str(creds), "--state-file", str(state), "--json"]
        first = runner.invoke(app, [*base, "--items", "0,5,7"])
        assert first.exit_code == 0, first.output
        doc = json.loads(first.output)
        assert doc["user"] == 3 and doc["items"] == [0, 5, 7] and doc["server"] == cluster.url(0)
        assert doc["model_version"] == 0 and doc["releases"] == 1 and not doc["release_reused"]
        assert doc["upload_bytes"] == 12 + 8 * 4 and doc["download_bytes"] == 8 + 8 * train.num_items
        # the scores are the public model's on the recorded release, plus the device's own b_u
        table, dense = messages.decode_model(cluster.admin(0).get_bytes("/v1/admin/model"), version=0,
                                             num_items=train.num_items, width=5, dense_size=1)
        ledger = ReleaseLedger.load(f"{state}.grec-releases.npz")
        assert ledger.current is not None
        h_tilde = ledger.current[2][0]
        items = [0, 5, 7]
        expect = dense[0] + table[items, 4] + table[items, :4] @ h_tilde + params[4]
        np.testing.assert_allclose(doc["scores"], expect, rtol=0, atol=1e-12)

        again = json.loads(runner.invoke(app, [*base, "--items", "0,5,7"]).output)
        assert again["release_reused"] and again["releases"] == 1 and again["scores"] == doc["scores"]
        top = runner.invoke(app, [*base, "-k", "4"])
        assert top.exit_code == 0 and len(json.loads(top.output)["items"]) == 4

        _state(state, params + 0.05)  # the device trained: a new representation version
        moved = json.loads(runner.invoke(app, [*base, "--items", "0"]).output)
        assert not moved["release_reused"] and moved["releases"] == 2
        assert moved["spent_delta"] == 1e-4 and 1.0 < moved["spent_epsilon"] < 2.0  # at the largest release delta (S43-G6)

        for args in (["infer", "--credentials", str(creds)],  # no state file
                     [*base, "--denoiser", str(tmp_path / "den.npz")],  # in-process only
                     [*base, "--user", "4"],  # not this file's device
                     [*base, "--items", str(train.num_items)],
                     [*base, "--epsilon", "0"]):
            bad = runner.invoke(app, args)
            assert bad.exit_code == 2 and "Traceback" not in bad.output, (args, bad.output)
        _state(state, np.zeros(9))  # parameters of another model
        assert runner.invoke(app, base).exit_code == 2
        other = cluster.deployment.devices([4])[0]
        forged = type(other)(3, other.urls, other.keys, other.cas, other.model, other.ring_bits)  # user 4's keys
        _state(state, params)
        refused = runner.invoke(app, ["infer", "--credentials", str(forged.save(tmp_path / "forged.json")),
                                      "--state-file", str(state)])
        assert refused.exit_code == 1 and "401" in refused.output, refused.output


def test_infer_leaves_out_the_device_ratings_among_the_configured_candidates(tmp_path) -> None:
    """A deployment with ``[inference] candidates``: ``-k`` ranks those items less the ones the
    device rated (its part of the training split, read as ``secemb client`` reads it), left out
    on the device; an item outside the set exits 2."""
    from secemb.data import by_user, load_dataset
    from secemb.models.task import RATING

    train = RATING.split(load_dataset("synthetic-mini", seed=0), 0.2, 0)[0]
    user = 5
    rated = by_user(train).of(user)[0]
    candidates = sorted({*rated[:6].tolist(), *range(0, train.num_items, 13)})
    model, proto, config = setup(dim=4)
    runner = CliRunner()
    with cluster_for(model, proto, train, config, inference_candidates=candidates) as cluster:
        creds = cluster.deployment.devices([user])[0].save(tmp_path / "dev.json")
        state = tmp_path / "dev.npz"
        _state(state, np.array([0.3, -0.2, 0.5, 0.1, 0.07]))
        base = ["infer", "--credentials", str(creds), "--state-file", str(state), "--json", "-k", "500"]
        every = json.loads(runner.invoke(app, base).output)
        assert sorted(every["items"]) == candidates and every["rated_left_out"] is None
        assert every["download_bytes"] == 8 + 8 * len(candidates)
        out = runner.invoke(app, [*base, "--dataset", "synthetic-mini", "--seed", "0"])
        assert out.exit_code == 0, out.output
        mine = json.loads(out.output)
        unrated = sorted(set(candidates) - set(rated.tolist()))
        assert sorted(mine["items"]) == unrated and mine["rated_left_out"] == len(candidates) - len(unrated) >= 6
        assert mine["release_reused"] and mine["upload_bytes"] == every["upload_bytes"]
        score = dict(zip(every["items"], every["scores"], strict=True))
        assert mine["scores"] == [score[i] for i in mine["items"]]  # the same release's scores, less the rated
        outside = next(i for i in range(train.num_items) if i not in candidates)
        bad = runner.invoke(app, [*base, "--items", str(outside)])
        assert bad.exit_code == 2 and "candidate set" in bad.output and "Traceback" not in bad.output
        for args in ([*base, "--dataset", "no-such-set"], [*base, "--dataset", "synthetic-mini", "--test-fraction", "1"]):
            bad = runner.invoke(app, args)
            assert bad.exit_code == 2 and "Traceback" not in bad.output, bad.output
