"""Smoke tests of the paper-table benchmarks with tiny sizes (timings live in `secemb bench`)."""

import dataclasses
import json

import numpy as np
import pytest

from secemb.bench import comm, compute
from secemb.data import synthetic_like
from secemb.data.features import synthetic_features
from secemb.errors import InvalidParameters
from secemb.round.messages import RECEIPT_BYTES


@pytest.fixture()
def tiny(monkeypatch):
    data = synthetic_like(30, 60, 600, seed=0, name="tiny")
    monkeypatch.setitem(comm.DATASETS, "tiny", (60, 8, 20))
    monkeypatch.setitem(comm._CACHE, "tiny", (data, synthetic_features("ml-100k", 30, 60)))
    return data


def test_comm_rows_measure_the_wire(tiny, tmp_path):
    rows = comm.run(models=("mf", "fm"), datasets=("tiny",),
                    protocols=("secemb", "secemb-cuckoo-relay", "secfedrec", "secemb-rowenc", "quant8", "secaggmask",
                               "topksecagg", "kvsagg"),
                    out=tmp_path)
    keys = {"protocol", "model", "dataset", "m", "m_prime", "d", "upload_mb", "download_mb", "layout", "relay"}
    assert all(keys <= set(r) for r in rows)
    by = {(r["model"], r["protocol"], r["layout"]): r for r in rows}
    mf = by[("mf", "secfedrec", "full")]
    # SecFedRec: requests (2 x 32-byte frames) + shares of (m w + P) ring words to each server
    assert mf["upload_bytes"] == 2 * 32 + 2 * (32 + (60 * 65 + 1) * 4) + RECEIPT_BYTES  # server 1's receipt
    se = by[("mf", "secemb", "full")]
    assert se["upload_bytes"] < mf["upload_bytes"] and se["rr"] > 1
    assert by[("mf", "secemb", "cuckoo")]["relay"] is True
    kv = by[("mf", "kvsagg", "full")]
    # Kvsagg: requests + shares of a sketch of C = 3 ceil(1.3 U / 3) cells (U: items of 100
    # drawn users, here all 30 users' union) -- three uint64 fields and 65 ring words a cell
    union = len(np.unique(tiny.items))
    cells = 3 * -(-int(np.ceil(1.3 * union)) // 3)
    assert kv["capacity"] == union and kv["cells"] == cells
    assert kv["upload_bytes"] == 2 * 32 + 2 * (32 + cells * 3 * 8 + (cells * 65 + 1) * 4) + RECEIPT_BYTES
    assert by[("fm", "secemb", "full")]["dense_size"] == 6696
    assert (tmp_path / "comm.md").read_text().startswith("# Communication")
    assert (tmp_path / "comm.csv").is_file()
    json.dumps(rows)


def test_compute_user_ms_runs_every_protocol():
    for p in compute.PROTOCOLS:
        assert compute.user_ms(p, 50, 5, 9, 3, repeats=1) > 0
    assert compute.user_ms("secemb", 50, 5, 9, 3, repeats=1, layout="cuckoo", relay=True) > 0


def test_accuracy_harness_tiny(monkeypatch, tmp_path):
    from secemb.bench import accuracy

    real = accuracy._experiment

    def tiny(model_name, protocol, dataset, seed, data_dir=None):  # the harness's experiment, small
        return dataclasses.replace(real(model_name, protocol, "synthetic-mini", seed, data_dir), dim=12)

    monkeypatch.setattr(accuracy, "_experiment", tiny)
    s = accuracy.run(models=("mf", "fm"), protocols=("secemb", "colr"), seeds=(0, 1), epochs=2, out=tmp_path)
    assert {(r["model"], r["protocol"]) for r in s["rows"]} == {("mf", "secemb"), ("mf", "colr"), ("fm", "secemb"),
                                                                ("fm", "colr")}
    assert all(c["identical"] for c in s["equivalence"])
    assert (tmp_path / "table3.md").is_file() and len(list((tmp_path / "runs").glob("*.json"))) == 8 + 2
    again = accuracy.run(models=("mf",), protocols=("secemb",), seeds=(0, 1), epochs=2, out=tmp_path, check=False)
    assert np.isclose(again["rows"][0]["final_mean"], s["rows"][0]["final_mean"])  # resumed from the cache
    with pytest.raises(InvalidParameters, match="mf-secemb-seed0.json holds a 2-epoch run, not 3"):
        accuracy.run(models=("mf",), protocols=("secemb",), seeds=(0, 1), epochs=3, out=tmp_path, check=False)
    assert len(list((tmp_path / "runs").glob("*.json"))) == 8 + 2  # refused before training anything
    tab = accuracy.run(models=("mf",), protocols=("secemb",), seeds=(0, 1), epochs=3, out=tmp_path, cached_only=True)
    assert tab["rows"][0]["epochs"] == 2
    doc = json.loads((tmp_path / "runs" / "mf-secemb-seed1.json").read_text())
    val = doc["val_half_per_epoch"]
    assert doc["selected_epoch"] == int(np.argmin(val)) + 1  # chosen on validation, never on test
    assert doc["selected_rmse"] == doc["test_half_per_epoch"][doc["selected_epoch"] - 1]
    for whole, a, b in zip(doc["rmse_per_epoch"], doc["test_half_per_epoch"], val, strict=True):
        assert min(a, b) <= whole <= max(a, b)


def test_held_out_split_is_a_seeded_partition():
    from secemb.bench.accuracy import split_held_out

    te = synthetic_like(40, 30, 500, seed=2)
    test, val = split_held_out(te, 3)
    assert len(test) + len(val) == len(te) and 0.35 < len(val) / len(te) < 0.65
    key = lambda d: set(zip(d.users.tolist(), d.items.tolist(), strict=True))  # noqa: E731
    assert key(test) | key(val) == key(te) and not key(test) & key(val)
    again, _ = split_held_out(te, 3)
    other, _ = split_held_out(te, 4)
    assert key(again) == key(test) and key(other) != key(test)


def test_bench_accuracy_cli_reports_a_bad_option_without_a_traceback(tmp_path, monkeypatch):
    """Issue 13 item 1: without ML-100K on the machine this said 'ml-100k not found' instead."""
    from typer.testing import CliRunner

    from secemb.cli import app
    from secemb.data import movielens

    monkeypatch.setattr(movielens, "_recbole_ml100k", lambda: None)  # as on a machine without RecBole
    monkeypatch.setenv("SECEMB_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("HOME", str(tmp_path))

    res = CliRunner().invoke(app, ["bench", "accuracy", "--models", "nope", "--protocols", "secemb", "--seeds", "0",
                                   "--epochs", "1", "--out", str(tmp_path), "-q"])
    assert res.exit_code == 2
    assert "error: no preset for model 'nope'" in res.output
    assert "Traceback" not in res.output


def test_comm_cache_is_keyed_by_the_full_configuration(tiny, tmp_path, monkeypatch):
    """Issue 13 item 4: asked for one model and dataset, `bench comm` reused stale rows silently
    and tabulated every row ever measured."""
    from typer.testing import CliRunner

    from secemb.cli import app

    first = comm.run(models=("mf", "fm"), datasets=("tiny",), protocols=("secemb",), out=tmp_path)
    assert [r["from_cache"] for r in first] == [False, False]
    again = comm.run(models=("mf",), datasets=("tiny",), protocols=("secemb",), out=tmp_path)
    assert [r["from_cache"] for r in again] == [True] and again[0]["upload_bytes"] == first[0]["upload_bytes"]
    assert "| fm |" not in (tmp_path / "comm.md").read_text()  # only the configurations asked for
    assert len((tmp_path / "comm.csv").read_text().splitlines()) == 1 + 1
    monkeypatch.setitem(comm.DATASETS, "tiny", (60, 10, 20))  # another m': another configuration
    changed = comm.run(models=("mf",), datasets=("tiny",), protocols=("secemb",), out=tmp_path)
    assert [r["from_cache"] for r in changed] == [False] and changed[0]["m_prime"] == 10
    assert [r["from_cache"] for r in comm.run(models=("mf",), datasets=("tiny",), protocols=("secemb",), out=tmp_path,
                                              fresh=True)] == [False]
    args = ["bench", "comm", "--models", "mf,fm", "--datasets", "tiny", "--protocols", "secemb", "--out", str(tmp_path),
            "-q"]
    before = (tmp_path / "comm.md").read_bytes()
    res = CliRunner().invoke(app, args)  # the tables of the runs above exist: refused before any work
    assert res.exit_code == 2 and "comm.md" in res.output and "pass --force to replace it" in res.output
    assert (tmp_path / "comm.md").read_bytes() == before
    res = CliRunner().invoke(app, [*args, "--force"])
    assert res.exit_code == 0, res.output
    assert res.stdout.endswith("2 configurations, 1 measured, 1 from cache\n")
