"""``secemb infer`` on a saved model: without and with a saved denoiser; bad usage is exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
from secemb.inference.saved import load_denoiser, save_denoiser
from secemb.inference.trained import TrainedModel
from secemb.training import Experiment


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("infer")
    result = Experiment(dataset="synthetic-mini", model="mf", protocol="plaintext", epochs=1, dim=4, lr=0.05,
                        reg=0.01).run()
    result.model.save(folder / "rec")
    trained = TrainedModel.load(folder / "rec")
    ctx = DenoiserContext.from_trained(trained.model, trained.table, trained.dense, trained.user_store,
                                       GaussianLDP(2.0, 1e-5, 0.5))
    den = Denoiser.for_context(ctx, hat_d=3, hidden=4)
    table, dense = den.init_public(trained.num_items, np.random.default_rng(0))
    save_denoiser(folder / "den.npz", den, table, dense, recommender_sha256=trained.model_sha256)
    return folder, trained, table, dense


def test_top_k_naive_and_post_processed(saved) -> None:
    folder, trained, table, dense = saved
    runner = CliRunner()
    naive = runner.invoke(app, ["infer", "--model-dir", str(folder / "rec"), "--user", "2", "-k", "5", "--json"])
    assert naive.exit_code == 0, naive.output
    doc = json.loads(naive.output)
    assert doc["mode"] == "ldp-no-denoiser" and len(doc["items"]) == 5 and doc["epsilon"] == 1.0
    assert not set(doc["items"]) & set(trained.rated(2).tolist())  # unrated items only
    assert doc["scores"] == sorted(doc["scores"], reverse=True)
    rows, dim = 1, 4
    assert doc["upload_bytes"] == 12 + 8 * rows * dim and doc["download_bytes"] == 8 + 8 * trained.num_items
    post = runner.invoke(app, ["infer", "--model-dir", str(folder / "rec"), "--user", "2", "--items", "0,3",
                               "--denoiser", str(folder / "den.npz"), "--json"])
    assert post.exit_code == 0, post.output
    doc = json.loads(post.output)
    assert doc["mode"] == "post-processing-ldp" and doc["items"] == [0, 3] and doc["epsilon"] == 2.0
    den, t2, d2 = load_denoiser(folder / "den.npz", trained, recommender=folder / "rec")
    np.testing.assert_array_equal(t2, table)
    np.testing.assert_array_equal(d2, dense)


@pytest.mark.parametrize("args", [["--user", "100000"], ["--user", "1", "--items", "x"],
                                  ["--user", "1", "--epsilon", "0"], ["--user", "1", "--items", "99999"]])
def test_bad_usage_is_exit_2(saved, args) -> None:
    folder = saved[0]
    res = CliRunner().invoke(app, ["infer", "--model-dir", str(folder / "rec"), *args])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


def test_privacy_parameters_must_match_the_denoiser(saved) -> None:
    folder = saved[0]
    res = CliRunner().invoke(app, ["infer", "--model-dir", str(folder / "rec"), "--user", "1", "--denoiser",
                                   str(folder / "den.npz"), "--epsilon", "1"])
    assert res.exit_code == 2 and "differs" in res.output


def test_a_release_file_keeps_one_release_per_representation(saved, tmp_path) -> None:
    folder = saved[0]
    runner = CliRunner()
    args = ["infer", "--model-dir", str(folder / "rec"), "--user", "2", "--items", "0,1,2", "--json",
            "--release-file", str(tmp_path / "rel.npz")]
    first, again = (json.loads(runner.invoke(app, args).output) for _ in range(2))
    assert not first["release_reused"] and again["release_reused"] and again["releases"] == 1
    assert again["scores"] == first["scores"]  # the same release: OS noise would differ otherwise
    assert first["spent_delta"] == 1e-4 and abs(first["spent_epsilon"] - 1.0) < 1e-3
    other = json.loads(runner.invoke(app, [*args, "--epsilon", "2"]).output)  # another mechanism: a new release
    assert not other["release_reused"] and other["releases"] == 2 and 2.0 < other["spent_epsilon"] < 3.0
    plain = json.loads(runner.invoke(app, args[:-2]).output)  # no ledger: one fresh release, nothing reported
    assert "releases" not in plain
    assert CliRunner().invoke(app, ["infer", "--user", "2"]).exit_code == 2  # neither mode


def _other_recommender(saved, folder) -> TrainedModel:
    """The saved recommender with its dense vector moved: same sizes, another model_sha256."""
    trained = saved[1]
    other = TrainedModel(trained.model, trained.table, trained.dense + 0.01, trained.user_store,
                         trained.rated_indptr, trained.rated_items, trained.info)
    other.save(folder)
    assert other.model_sha256 != trained.model_sha256
    return other


def test_a_denoiser_is_refused_with_another_recommender(saved, tmp_path) -> None:
    """The saved denoiser records its recommender's model_sha256; loading it against another
    recommender (here: the same sizes, another dense vector) is refused, in process, on a
    standalone device and by ``secemb infer``, whose exit 2 names both files and writes no
    release."""
    from secemb.errors import InvalidParameters
    from secemb.inference.saved import load_denoiser_on_device, load_public_recommender

    folder, trained = saved[0], saved[1]
    with np.load(folder / "den.npz") as f:
        assert f["recommender_sha256"].tobytes().decode() == trained.model_sha256
    other = _other_recommender(saved, tmp_path / "other")
    with pytest.raises(InvalidParameters, match=f"den.npz was trained against the recommender with model_sha256 "
                                                f"{trained.model_sha256}, not .*other"):
        load_denoiser(folder / "den.npz", other, recommender=tmp_path / "other")
    model, dense, sha, num_items = load_public_recommender(tmp_path / "other")[:4]
    with pytest.raises(InvalidParameters, match=sha):
        load_denoiser_on_device(folder / "den.npz", model, dense, trained.user_store.state(1), num_items,
                                recommender_sha256=sha, recommender=tmp_path / "other")
    release = tmp_path / "rel.npz"
    res = CliRunner().invoke(app, ["infer", "--model-dir", str(tmp_path / "other"), "--user", "1", "--denoiser",
                                   str(folder / "den.npz"), "--release-file", str(release)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    text = " ".join(res.output.split())
    assert str(folder / "den.npz") in text and str(tmp_path / "other") in text and not release.exists(), text


def test_a_denoiser_saved_without_its_recommender_hash_is_refused(saved, tmp_path) -> None:
    """A file of the layout before the recommender's SHA-256 was recorded cannot be paired
    safely: refused with the reason, exit 2 on the command line."""
    from secemb.errors import InvalidMessage

    folder, trained = saved[0], saved[1]
    with np.load(folder / "den.npz") as f:
        old = {k: f[k] for k in f.files if k != "recommender_sha256"}
    np.savez(tmp_path / "old.npz", **old)
    with pytest.raises(InvalidMessage, match="records no recommender SHA-256"):
        load_denoiser(tmp_path / "old.npz", trained, recommender=folder / "rec")
    res = CliRunner().invoke(app, ["infer", "--model-dir", str(folder / "rec"), "--user", "1", "--denoiser",
                                   str(tmp_path / "old.npz")])
    assert res.exit_code == 2 and "records no recommender SHA-256" in res.output, res.output


def test_rank_saved_refuses_a_denoiser_of_another_recommender(saved, tmp_path) -> None:
    """``secemb bench grec --rank-saved`` on a folder whose denoiser was trained against
    another recommender exits 2 naming both files, before any ranking; nothing is written."""
    import shutil

    folder = saved[0]
    run = tmp_path / "mf-seed0"
    _other_recommender(saved, run / "recommender")
    shutil.copy(folder / "den.npz", run / "denoiser.npz")
    out = tmp_path / "rank.json"
    res = CliRunner().invoke(app, ["bench", "grec", "--rank-saved", str(run), "--out", str(out)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    text = " ".join(res.output.split())
    assert "trained against" in text and str(run / "denoiser.npz") in text and str(run / "recommender") in text
    assert not out.exists()
