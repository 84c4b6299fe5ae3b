"""``secemb bench secea`` and ``secemb bench compare``: small runs on real ML-100K (RecBole's
copy), their invariants, and the CLI's refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.bench import compare, secea
from secemb.cli import app
from secemb.data import load_movielens
from secemb.errors import InvalidParameters


@pytest.fixture(scope="module")
def ml100k():
    return load_movielens("ml-100k")


@pytest.mark.slow
def test_cost_round_is_exact_and_bytes_cover_the_counted_elements(ml100k):
    c = secea.cost(ml100k, 3, cost_items=8, key_bits=1024)
    assert c["exact"] and c["entities_union"] == 8
    for cl in c["clients"]:
        # 4 bytes per relayed field element, ciphertext_bytes per ciphertext, plus headers
        assert cl["up_bytes"] >= 4 * cl["field_elements_up"] + c["ciphertext_bytes"] * cl["ciphertexts_up"]
        assert cl["up_bytes"] < 4 * cl["field_elements_up"] + c["ciphertext_bytes"] * cl["ciphertexts_up"] + 400


def test_secea_rounds_equal_the_fixed_point_average_and_track_fedavg(ml100k):
    acc = secea.accuracy(ml100k, 3, rounds=1, local_epochs=1, kinds=("fedavg", "secea"))
    assert acc["secea_equals_fixed_point_average"]
    assert abs(acc["rmse"]["secea"][0] - acc["rmse"]["fedavg"][0]) < 1e-3


def test_the_complete_protocol_trains_what_the_arithmetic_trains_bit_for_bit(ml100k):
    """The accuracy run through SecEAProtocol and the engine (pads, Paillier) and the arithmetic
    only, on the same 5 most-rated items: the same RMSE in every round, to the last bit."""
    p = secea.protocol_accuracy(ml100k, 3, rounds=2, local_epochs=1, items=5, key_bits=1024)
    assert p["equal"]
    assert len(p["rmse"]["protocol"]) == 2 and p["rmse"]["protocol"] == p["rmse"]["arithmetic"]
    assert all(0 < e <= 5 for e in p["entities_per_silo"])
    assert p["seconds"]["protocol"] > 0 and p["upload_bytes_per_silo_round"] > 0
    # averaging 5 items is not averaging none: the local-only run differs
    local = secea.accuracy(ml100k, 3, rounds=2, local_epochs=1, kinds=("local",))
    assert local["rmse"]["local"] != p["rmse"]["arithmetic"]
    row = secea.protocol_rows({"protocol": [p]})[0]
    assert row[:4] == ("3", "5", "/".join(map(str, p["entities_per_silo"])), "2")
    assert row[6] == "yes, all 2 rounds"


@pytest.mark.slow
def test_the_protocol_run_is_secemb_train_protocol_secea(ml100k, tmp_path):
    """The bench's full-protocol run is ``secemb train --protocol secea`` (its defaults: 20 items,
    2048-bit keys): the same model_sha256 (the averages are exact whatever the key size)."""
    p = secea.protocol_accuracy(ml100k, 3, rounds=1, local_epochs=1, items=20, dim=8, key_bits=1024, seed=3)
    out = tmp_path / "t.json"
    res = CliRunner().invoke(app, ["train", "--protocol", "secea", "--dataset", "ml-100k", "--epochs", "1",
                                   "--seed", "3", "--dim", "8", "--json-out", str(out), "--quiet"], terminal_width=120)
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["model_sha256"] == p["model_sha256"]


def test_compare_merge_orders_rows_and_formats_accuracy():
    a = {"rows": [{"protocol": "SFSL", "clients": "c", "budget": "2 rounds", "rmse": None, "metric": ("AUC", 0.7),
                   "up_bytes": 10.0, "down_bytes": 20.0, "client_s": 0.1, "server_s": 0.2, "learns": "x"}]}
    b = {"rows": [{"protocol": "GREC", "clients": "c", "budget": "1 epoch(s)", "rmse": 0.95, "up_bytes": 1e3,
                   "down_bytes": 2e3, "client_s": 0.01, "server_s": 0.5, "learns": "y"}]}
    rows = compare.table_rows(compare.merge([a, b]))
    assert [r[0] for r in rows] == ["GREC", "SFSL"]
    assert rows[0][3] == "RMSE 0.9500" and rows[1][3] == "AUC 0.7000" and rows[0][4] == "1.0"


@pytest.mark.parametrize(
    "args",
    [["bench", "secea", "--silos", "2,x"], ["bench", "secea", "--silos", "2", "--threshold", "1"],
     ["bench", "secea", "--rounds", "0"], ["bench", "secea", "--protocol-silos", "3,y"],
     ["bench", "secea", "--protocol-silos", "2"], ["bench", "secea", "--protocol-items", "-1"],
     ["bench", "secea", "--key-bits", "512"], ["bench", "secea", "--parts", "accuracy,nope"],
     ["bench", "compare", "--epochs", "0"],
     ["bench", "compare", "--secea-silos", "1"], ["bench", "compare", "--only", "nope"]],
)
def test_cli_refuses_bad_options_with_exit_2(args, tmp_path):
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "r.json")], terminal_width=120)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(("option", "says"), [
    ({"rounds": 0}, "rounds must be an int >= 1, got 0"),
    ({"local_epochs": 1.0}, "local_epochs must be an int >= 1, got 1.0"),
    ({"cost_items": True}, "cost_items must be an int >= 0, got True"),  # a bool was taken
    ({"protocol_items": -1}, "protocol_items must be an int >= 0, got -1"),
    ({"key_bits": 512}, "key_bits must be an int >= 1024, got 512"),
])
def test_run_refuses_a_bad_count_naming_it(option, says):
    """Each refused count is named with its value (the message lumped five options together)."""
    with pytest.raises(InvalidParameters, match=f"^{says}$"):
        secea.run(**option)


def test_fixed_point_average_is_eq2_on_the_encoding():
    params = secea.SecEAParams(3, 1, dim=2)
    sets = [np.array([0, 1]), np.array([1]), np.array([1, 2])]
    rows = [np.array([[1.0, 2.0], [0.5, 0.5]]), np.array([[1.5, -0.5]]), np.array([[0.25, 0.0], [3.0, 3.0]])]
    out = secea.fixed_point_average(params, sets, rows, 3)
    assert out[0].tolist() == [[1.0, 2.0], [0.75, 0.0]]
    assert out[2].tolist() == [[0.75, 0.0], [3.0, 3.0]]
