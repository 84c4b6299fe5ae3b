"""Fixed test vectors (``tests/fss/vectors.json``, written by ``tests/fss/make_vectors.py``).

1. Regenerating the vectors with the current library gives the committed file, byte for
   byte: the key format, the PRG and the way ``gen`` uses randomness have not changed.
2. The committed keys, evaluated by the spec-only reference (``fss_reference.py``, no secemb
   code), give the committed shares, and the shares reconstruct the point functions: the
   file itself is right, not merely stable.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fss_reference import (
    ref_eval,
    ref_fixed_key,
    ref_leaf,
    ref_mmo,
    ref_parse,
    ref_share,
)

from secemb import fss

HERE = Path(__file__).parent
VECTORS = json.loads((HERE / "vectors.json").read_text())


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "secemb_tests_fss_make_vectors", HERE / "make_vectors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vectors_record_their_source() -> None:
    src = VECTORS["source"]
    assert src["script"] == "tests/fss/make_vectors.py"
    assert "CtrDrbg" in src["rng"] and src["seed_prefix"]
    for case in VECTORS["keys"] + VECTORS["paths"]:
        assert case["key_seed"].startswith(src["seed_prefix"])


def test_regenerated_vectors_equal_committed_file() -> None:
    gen = _load_generator()
    text = gen.render(gen.build())
    committed = (HERE / "vectors.json").read_text()
    if text != committed:
        fresh = json.loads(text)
        changed = [
            c["name"]
            for section in ("prg", "keys", "paths")
            for c, old in zip(fresh[section], VECTORS[section])
            if c != old
        ]
        pytest.fail(
            "tests/fss/vectors.json no longer matches the library (changed: "
            f"{changed or 'layout'}). If the change is intended, run "
            "`python tests/fss/make_vectors.py` and say so in the commit."
        )


@pytest.mark.parametrize("case", VECTORS["prg"], ids=lambda c: c["name"])
def test_prg_vectors_against_reference(case: dict[str, Any]) -> None:
    assert ref_fixed_key(case["name"]).hex() == case["fixed_key"]
    x = int.from_bytes(bytes.fromhex(case["input"]), "little")
    assert ref_mmo(case["name"], x).to_bytes(16, "little").hex() == case["mmo"]


@pytest.mark.parametrize("case", VECTORS["keys"], ids=lambda c: c["name"])
def test_key_vectors_are_consistent(case: dict[str, Any]) -> None:
    m, rb, d = case["domain_size"], case["ring_bits"], case["payload_width"]
    k = len(case["alphas"])
    n = (m - 1).bit_length()
    assert case["key_bytes"] == 49 + k * (16 + 16 * n + (n + 7) // 8 + d * rb // 8)
    mod = 1 << rb
    for i, alpha in enumerate(case["alphas"]):
        for j, x in enumerate(case["points"]):
            total = [
                (a + b) % mod
                for a, b in zip(case["share0"][i][j], case["share1"][i][j])
            ]
            assert total == (case["betas"][i] if x == alpha else [0] * d)


@pytest.mark.parametrize(
    "case", [c for c in VECTORS["keys"] if "key0_hex" in c], ids=lambda c: c["name"]
)
def test_committed_keys_evaluate_to_committed_shares_in_reference(
    case: dict[str, Any],
) -> None:
    for b in (0, 1):
        data = bytes.fromhex(case[f"key{b}_hex"])
        assert hashlib.sha256(data).hexdigest() == case[f"key{b}_sha256"]
        assert len(data) == case["key_bytes"]
        batch = ref_parse(data)
        assert batch.party == b and batch.domain_size == case["domain_size"]
        for i in range(len(case["alphas"])):
            for j, x in enumerate(case["points"]):
                assert ref_eval(batch, i, x) == case[f"share{b}"][i][j]
        # and the library parses and evaluates the committed bytes identically
        keys = fss.DPFKeys.from_bytes(data, party=b)
        got = fss.eval_points(keys, b, np.array(case["points"], np.int64))
        assert got.astype(object).tolist() == case[f"share{b}"]


@pytest.mark.parametrize("case", VECTORS["paths"], ids=lambda c: c["name"])
def test_path_vectors_reconstruct_in_reference(case: dict[str, Any]) -> None:
    """Committed path keys + committed retrieval / aggregation CWs, evaluated by the
    reference at alpha and a neighbour, give 1 and the row at alpha, 0 at the neighbour."""
    m, rb = case["domain_size"], case["ring_bits"]
    mod = 1 << rb
    batches = [ref_parse(bytes.fromhex(case[f"path{b}_hex"])) for b in (0, 1)]
    for i, alpha in enumerate(case["alphas"]):
        for x in {alpha, (alpha + 1) % m}:
            leaves = [ref_leaf(batches[b].keys[i], batches[b].depth, x) for b in (0, 1)]
            for tag, cw, want in (
                (case["retrieval_tag"], case["retrieval_cw"][i], [1]),
                (case["aggregation_tag"], case["aggregation_cw"][i], case["rows"][i]),
            ):
                s = [ref_share(leaves[b], cw, b, rb, tag) for b in (0, 1)]
                total = [(u + v) % mod for u, v in zip(*s)]
                assert total == (want if x == alpha else [0] * len(want))
    assert case["retrieval_cw"] != case["aggregation_cw"]
