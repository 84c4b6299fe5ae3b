"""secemb bench seq with the lossy baselines: each protocol asked for is trained on the
sequential task (its own layout, no relay) and tabulated under its name; bad options exit 2."""

import pytest
from typer.testing import CliRunner

from secemb.bench.seq import run, table_rows
from secemb.cli import app
from secemb.errors import InvalidParameters


@pytest.mark.slow  # two trainings: ~20 s on a loaded machine
def test_lossy_rows_beside_secemb():
    result = run(models=("caser",), protocols=("secemb", "colr"), epochs=1, traffic_part=False, quick=True)
    assert result["traffic"] == []
    secemb, colr = result["accuracy"]
    assert (secemb["protocol"], secemb["layout"], secemb["relay"], secemb["rank"]) == ("secemb", "cuckoo", True, None)
    assert (colr["protocol"], colr["relay"], colr["rank"], colr["epochs"]) == ("colr", False, 8, 1)
    assert colr["model_sha256"] != secemb["model_sha256"]
    assert colr["popularity"] == secemb["popularity"]  # the same protocol, the same data
    rows = table_rows(result)
    assert [r[0] for r in rows] == ["caser"] * 4 + ["caser + colr"] * 4
    assert rows[0][5] == "0.475 (ML-1M)" and rows[4][5] == "-"  # the paper's cells are SecEmb's


def test_bad_options():
    with pytest.raises(InvalidParameters, match="plaintext or a lossy baseline"):
        run(protocols=("secfedrec",), quick=True)
    with pytest.raises(InvalidParameters, match="sequential model"):
        run(models=("mf",), quick=True)
    r = CliRunner().invoke(app, ["bench", "seq", "--protocols", "nope", "--out", "/tmp/h-seqdp-unused.json"])
    assert r.exit_code == 2 and "lossy baseline" in r.output
