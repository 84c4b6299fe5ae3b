"""secemb bench grec end to end on a tiny stand-in (its numbers are not checked for accuracy
here; docs/results.md has the ML-100K run)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.bench import grec


@pytest.mark.slow
def test_run_one_reports_every_cell() -> None:
    rows = grec.run_one("mf", dataset="synthetic-mini", epsilons=(1.0, 10.0), rec_epochs=1, den_epochs=1,
                        users_per_round=20, m_prime=20)
    assert [r["epsilon"] for r in rows] == [1.0, 10.0] and rows[0]["rec_model_sha256"] == rows[1]["rec_model_sha256"]
    assert rows[0]["sigma"] > rows[1]["sigma"]
    row = rows[0]
    assert row["protocol"] == "plaintext" and row["sigma"] > 0 and row["rows"] == 1
    for key in ("non_private", "naive_ldp", "reclipped_no_denoiser", "post_processing_ldp"):
        assert 0.0 < row[key] < 4.0
        assert 0.0 <= row[f"hr@10_{key}"] <= 1.0 and 0.0 <= row[f"ndcg@10_{key}"] <= row[f"hr@10_{key}"]
    assert row["positives"] > 0
    cell = grec.table([row, {**row, "seed": 1, "naive_ldp": row["naive_ldp"] + 0.1}])[0]
    assert cell["seeds"] == 2 and np.isclose(cell["naive_ldp"], row["naive_ldp"] + 0.05)


def test_a_stand_in_is_compared_with_the_paper_dataset_it_stands_for() -> None:
    row = {"model": "mf", "dim": 64, "epsilon": 1.0, "non_private": 0.9, "naive_ldp": 2.0,
           "reclipped_no_denoiser": 1.0, "post_processing_ldp": 0.95}
    cells = {ds: grec.table([{**row, "dataset": ds}])[0] for ds in ("synthetic-ml-1m", "synthetic-yelp", "ml-100k")}
    assert cells["synthetic-ml-1m"]["paper"] == {"non_private": 0.903, "naive_ldp": 1.637, "post_processing_ldp": 0.919}
    assert cells["synthetic-yelp"]["paper"] == {"non_private": 1.050, "naive_ldp": 1.580, "post_processing_ldp": 1.097}
    assert cells["ml-100k"]["paper"]["naive_ldp"] == 1.693
    assert "paper" not in grec.table([{**row, "dataset": "my-ratings.csv"}])[0]  # no paper cell to compare with


def test_rank_saved_ranks_a_saved_run_apart_from_its_training(tmp_path) -> None:
    """Table 14 from ``--save-dir``'s models: the non-private cells (no noise) are the training
    run's own to the last bit, the split is rebuilt from the recorded one; a folder without the
    denoiser, or whose recorded split is not the one the model was trained on, is refused."""
    import json

    from secemb.errors import InvalidParameters

    row = grec.run_one("mf", dataset="synthetic-mini", rec_epochs=1, den_epochs=1, users_per_round=20, m_prime=20,
                       save_dir=tmp_path)[0]
    got = grec.rank_saved(tmp_path / "mf-seed0")
    assert (got["model"], got["dataset"], got["seed"]) == ("mf", "synthetic-mini", 0)
    assert got["rec_model_sha256"] == row["rec_model_sha256"] and got["positives"] == row["positives"] > 0
    for metric in ("hr@10", "ndcg@10"):
        assert got[f"{metric}_non_private"] == row[f"{metric}_non_private"]
        for name in grec.PREDICTIONS:
            assert 0.0 <= got[f"{metric}_{name}"] <= 1.0
    with pytest.raises(InvalidParameters, match="denoiser.npz"):
        grec.rank_saved(tmp_path / "mf-seed0" / "recommender")
    manifest = tmp_path / "mf-seed0" / "recommender" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["config"]["split_seed"] = 1
    manifest.write_text(json.dumps(doc))
    with pytest.raises(InvalidParameters, match="not the one the recommender"):
        grec.rank_saved(tmp_path / "mf-seed0")


def test_rank_saved_on_the_command_line(tmp_path) -> None:
    """``secemb bench grec --rank-saved``: the cells of :func:`grec.rank_saved` in ``--out``;
    a folder that is none, or whose recorded split is malformed (a negative seed, a fraction
    out of range, no dataset), exits 2 with the reason, never a traceback."""
    import json
    import shutil

    from typer.testing import CliRunner

    from secemb.cli import app

    grec.run_one("mf", dataset="synthetic-mini", rec_epochs=1, den_epochs=1, users_per_round=20, m_prime=20,
                 save_dir=tmp_path, with_ranking=False)
    runner = CliRunner()
    saved, out = tmp_path / "mf-seed0", tmp_path / "rank.json"
    res = runner.invoke(app, ["bench", "grec", "--rank-saved", str(saved), "--out", str(out)])
    assert res.exit_code == 0, res.output
    cells = json.loads(out.read_text())["ranking"]
    again = grec.rank_saved(saved)  # fresh releases: the noisy cells differ, the non-private ones do not
    assert cells["positives"] > 0 and set(cells) == set(again)
    assert cells["rec_model_sha256"] == again["rec_model_sha256"]
    assert (cells["hr@10_non_private"], cells["ndcg@10_non_private"]) == \
        (again["hr@10_non_private"], again["ndcg@10_non_private"])
    for name, change in (("seed", {"split_seed": -1}), ("fraction", {"test_fraction": 1.5}),
                         ("dataset", {"dataset": None})):
        bad = tmp_path / name
        shutil.copytree(saved, bad)
        manifest = bad / "recommender" / "manifest.json"
        doc = json.loads(manifest.read_text())
        doc["config"].update(change)
        manifest.write_text(json.dumps(doc))
        res = runner.invoke(app, ["bench", "grec", "--rank-saved", str(bad), "--out", str(tmp_path / "x.json")])
        assert res.exit_code == 2 and res.output.startswith("error:"), (name, res.output, repr(res.exception))
    res = runner.invoke(app, ["bench", "grec", "--rank-saved", str(tmp_path / "nowhere"), "--out", str(out),
                              "--force"])  # out holds the first result: replacing it needs --force
    assert res.exit_code == 2 and "--save-dir" in res.output, res.output
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(("mode", "patched", "key", "default"), [
    (["--rank-saved", "saved"], "rank_saved", "ranking", "results/grec/table14.json"),
    (["--figure4"], "device_cost", "figure4", "results/grec/figure4.json"),
])
def test_a_mode_without_out_leaves_table3_alone(tmp_path, monkeypatch, mode, patched, key, default) -> None:
    """``--rank-saved`` and ``--figure4`` without ``--out`` write their own default file, never
    Table 3's (``results/grec/table3.json``: the bench's default, which they once shared and
    silently overwrote).  The heavy part is replaced by fixed cells; the CLI's choice of file is
    what is tested."""
    import json

    from typer.testing import CliRunner

    from secemb.cli import app

    cells: dict = {"model": "mf", "dataset": "synthetic-mini", "positives": 3.0,
                   **{f"{m}_{p}": 0.5 for m in ("hr@10", "ndcg@10") for p in grec.PREDICTIONS}}
    fake = {"rank_saved": lambda folder: cells, "device_cost": lambda names, dataset, repeats: [{"model": "mf"}]}
    monkeypatch.setattr(grec, patched, fake[patched])
    monkeypatch.chdir(tmp_path)
    table3 = tmp_path / "results" / "grec" / "table3.json"
    table3.parent.mkdir(parents=True)
    table3.write_text('{"runs": [], "table": []}')
    res = CliRunner().invoke(app, ["bench", "grec", *mode, "--json"])
    assert res.exit_code == 0, res.output
    assert table3.read_text() == '{"runs": [], "table": []}'
    assert json.loads((tmp_path / default).read_text()) == {key: cells if key == "ranking" else [{"model": "mf"}]}
