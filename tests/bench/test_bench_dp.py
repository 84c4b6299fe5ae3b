"""secemb bench dp: Figure 6's runs carry the accountant's privacy block (spent <= target, none
without DP), Figure 7 sets DP-FedRec's full-size uploads beside SecEmb + DP at the same epsilon,
and the table's losses are computed from the runs' own RMSEs; bad options exit 2."""

import math

import pytest
from typer.testing import CliRunner

from secemb.bench.dp import run, table_rows
from secemb.cli import app
from secemb.errors import InvalidParameters


@pytest.mark.slow  # four trainings, DP-FedRec's full-size noise: ~30 s on a loaded machine
def test_quick_run_figures_and_rows():
    result = run(quick=True)
    inf, noisy = sorted(result["fig6"], key=lambda r: -(r["epsilon_target"] or math.inf))
    assert inf["epsilon_target"] is None and inf["privacy"] is None  # no DP: null, JSON has no infinity
    assert noisy["privacy"]["epsilon"] <= noisy["epsilon_target"] == 2.0 and noisy["privacy"]["sampling_rate"] < 1
    ours, fedrec = result["fig7"]
    assert (ours["protocol"], fedrec["protocol"]) == ("plaintext", "dp-fedrec")
    assert fedrec["privacy"]["sampling_rate"] == 1.0 and fedrec["privacy"]["epsilon"] <= 2.0
    assert fedrec["upload_bytes_per_user_round"] > 5 * ours["upload_bytes_per_user_round"]  # full-size uploads
    rows = table_rows(result)
    assert rows[1][-1] == "-" and rows[0][-1] == f"{100 * (noisy['rmse'] / inf['rmse'] - 1):+.1f} %"
    assert rows[-1][-1] == f"{100 * (fedrec['rmse'] / ours['rmse'] - 1):+.1f} %"


@pytest.mark.slow  # two trainings of one round each, one of them DP-FedRec's
def test_rounds_per_epoch_bounds_both_methods_alike():
    result = run(dataset="synthetic-mini", epsilons=(), fedrec_epsilons=(2.0,), fedrec_epochs=1,
                 fedrec_users_per_round=(40,), rounds_per_epoch=1)
    assert result["rounds_per_epoch"] == 1
    assert [(r["protocol"], r["rounds"], r["rounds_per_epoch"]) for r in result["fig7"]] == [
        ("plaintext", 1, 1), ("dp-fedrec", 1, 1)]
    assert result["fig7"][0]["privacy"]["steps"] == 1 and result["fig7"][1]["privacy"]["steps"] == 1
    assert table_rows(result)[0][3] == "1 (1 rounds)"


def test_bad_options():
    with pytest.raises(InvalidParameters, match="epsilons"):
        run(epsilons=(0.0,), fedrec_epsilons=())
    with pytest.raises(InvalidParameters, match="clip"):
        run(epsilons=(1.0,), clip=-1.0)
    with pytest.raises(InvalidParameters, match="rounds per epoch"):
        run(epsilons=(1.0,), rounds_per_epoch=0)
    r = CliRunner().invoke(app, ["bench", "dp", "--epsilons", "x", "--out", "/tmp/h-seqdp-unused.json"])
    assert r.exit_code == 2 and "must be numbers" in r.output
    r = CliRunner().invoke(app, ["bench", "dp", "--rounds-per-epoch", "-1", "--out", "/tmp/h-seqdp-unused.json"])
    assert r.exit_code == 2 and "--rounds-per-epoch" in r.output


def test_fig7_runs_both_methods_at_each_round_size_with_the_seed(monkeypatch):
    """Figure 7 runs SecEmb + DP, then DP-FedRec, at every round size, every run with the
    given seed; each DP-FedRec loss is against the SecEmb + DP run of its own round size
    (stand-in trainings: RMSEs chosen here, so the losses are known: 1.2/1.0 and 1.21/1.1)."""
    rmse = {("plaintext", 100): 1.0, ("dp-fedrec", 100): 1.2, ("plaintext", 500): 1.1, ("dp-fedrec", 500): 1.21}
    calls = []

    def fake_one(protocol, epsilon, *, users_per_round, epochs, seed, **_):
        calls.append((protocol, epsilon, users_per_round, epochs, seed))
        return {"protocol": protocol, "epsilon_target": epsilon, "users_per_round": users_per_round, "epochs": epochs,
                "rmse": rmse[protocol, users_per_round], "privacy": {"epsilon": epsilon, "noise_multiplier": 1.0}}

    monkeypatch.setattr("secemb.bench.dp.one", fake_one)
    result = run(epsilons=(), fedrec_epsilons=(2.0,), fedrec_epochs=3, fedrec_users_per_round=(100, 500), seed=3)
    assert calls == [("plaintext", 2.0, 100, 3, 3), ("dp-fedrec", 2.0, 100, 3, 3),
                     ("plaintext", 2.0, 500, 3, 3), ("dp-fedrec", 2.0, 500, 3, 3)]
    assert result["seed"] == 3 and result["fig6"] == []
    assert [(row[1], row[2], row[-1]) for row in table_rows(result)] == [
        ("SecEmb+DP", "100", "-"), ("DP-FedRec", "100", "+20.0 %"),
        ("SecEmb+DP", "500", "-"), ("DP-FedRec", "500", "+10.0 %")]


def test_bad_seed_and_round_sizes():
    with pytest.raises(InvalidParameters, match="seed"):
        run(epsilons=(1.0,), fedrec_epsilons=(), seed=-1)
    with pytest.raises(InvalidParameters, match="users per round"):
        run(epsilons=(), fedrec_epsilons=(1.0,), fedrec_users_per_round=(1,))
    r = CliRunner().invoke(app, ["bench", "dp", "--seed", "-1", "--out", "/tmp/h-seqdp-unused.json"])
    assert r.exit_code == 2 and "seed" in r.output
    r = CliRunner().invoke(app, ["bench", "dp", "--fedrec-users-per-round", "x", "--out", "/tmp/h-seqdp-unused.json"])
    assert r.exit_code == 2 and "--fedrec-users-per-round" in r.output
