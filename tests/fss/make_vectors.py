#!/usr/bin/env python
"""Generate the fixed DPF test vectors in ``tests/fss/vectors.json``.

Usage (from the repository root)::

    python tests/fss/make_vectors.py           # (re)write tests/fss/vectors.json
    python tests/fss/make_vectors.py --check   # exit 1 if the file is not what this makes

Every random byte comes from :class:`secemb.randomness.CtrDrbg` with the seeds recorded in
the JSON (``SEED_PREFIX + case name + "/inputs"`` for alphas and betas, ``.../keys`` for the
key generator's ``_rng``), so the vectors are a deterministic function of this script and of
the library.  ``tests/fss/test_fss_vectors.py`` regenerates them and compares: any change of
the key format, the PRG, the conversion, the fixed AES keys or the way ``gen`` consumes
randomness changes the file and fails the test.  Only regenerate after such a change was
intended, and say so in the commit message.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from secemb import fss
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG
from secemb.fss.prg import aes_for, fixed_key
from secemb.randomness import CtrDrbg, random_words

OUT = Path(__file__).with_name("vectors.json")
SEED_PREFIX = "secemb/tests/fss/vectors/v1/"
FORMAT_VERSION = 2

#: (name, domain_size, ring_bits, payload_width, keys)
KEY_CASES = [
    ("m1-k32-d1", 1, 32, 1, 2),
    ("m2-k64-d2", 2, 64, 2, 2),
    ("m10-k32-d3", 10, 32, 3, 3),
    ("m257-k64-d1", 257, 64, 1, 3),
    ("m1682-k32-d65", 1682, 32, 65, 2),
    ("m3883-k64-d5", 3883, 64, 5, 2),
    ("m131073-k32-d1", (1 << 17) + 1, 32, 1, 2),
]
#: (name, domain_size, ring_bits, row width, keys)
PATH_CASES = [("path-m1000-k32-w4", 1000, 32, 4, 3), ("path-m97-k64-w2", 97, 64, 2, 2)]
PRG_NAMES = [
    "tree/left",
    "tree/right",
    "convert/point",
    "convert/" + RETRIEVAL_TAG,
    "convert/" + AGGREGATION_TAG,
]
HEX_LIMIT = 4096  # store whole keys (hex) when a batch is at most this many bytes


def _dtype(ring_bits: int) -> np.dtype:
    return np.dtype(np.uint32 if ring_bits == 32 else np.uint64)


def _inputs(
    name: str, m: int, ring_bits: int, width: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = CtrDrbg((SEED_PREFIX + name + "/inputs").encode())
    alphas = (random_words(rng, (k,), np.uint64) % np.uint64(m)).astype(np.int64)
    alphas[0] = 0
    if k > 1:
        alphas[-1] = m - 1
    betas = random_words(rng, (k, width), _dtype(ring_bits))
    return alphas, betas


def _points(m: int, alphas: np.ndarray) -> list[int]:
    pts = {0, m - 1, m // 2, *(int(a) for a in alphas)}
    pts |= {int(a) + 1 for a in alphas if a + 1 < m}
    return sorted(pts)


def _ints(a: np.ndarray) -> Any:
    return a.astype(object).tolist()


def _key_case(name: str, m: int, ring_bits: int, width: int, k: int) -> dict[str, Any]:
    alphas, betas = _inputs(name, m, ring_bits, width, k)
    seed = SEED_PREFIX + name + "/keys"
    k0, k1 = fss.gen(alphas, betas, m, ring_bits=ring_bits, _rng=CtrDrbg(seed.encode()))
    pts = np.array(_points(m, alphas), np.int64)
    b0, b1 = k0.to_bytes(), k1.to_bytes()
    case: dict[str, Any] = {
        "name": name,
        "key_seed": seed,
        "inputs_seed": SEED_PREFIX + name + "/inputs",
        "domain_size": m,
        "ring_bits": ring_bits,
        "payload_width": width,
        "alphas": _ints(alphas),
        "betas": _ints(betas),
        "key_bytes": len(b0),
        "key0_sha256": hashlib.sha256(b0).hexdigest(),
        "key1_sha256": hashlib.sha256(b1).hexdigest(),
        "points": _ints(pts),
        "share0": _ints(fss.eval_points(k0, 0, pts)),
        "share1": _ints(fss.eval_points(k1, 1, pts)),
    }
    if len(b0) <= HEX_LIMIT:
        case["key0_hex"] = b0.hex()
        case["key1_hex"] = b1.hex()
    return case


def _path_case(name: str, m: int, ring_bits: int, width: int, k: int) -> dict[str, Any]:
    alphas, grads = _inputs(name, m, ring_bits, width, k)
    seed = SEED_PREFIX + name + "/keys"
    p0, p1, state = fss.gen_path(alphas, m, _rng=CtrDrbg(seed.encode()))
    ones = np.ones((k, 1), _dtype(ring_bits))
    return {
        "name": name,
        "key_seed": seed,
        "inputs_seed": SEED_PREFIX + name + "/inputs",
        "domain_size": m,
        "ring_bits": ring_bits,
        "alphas": _ints(alphas),
        "rows": _ints(grads),
        "path0_hex": p0.to_bytes().hex(),
        "path1_hex": p1.to_bytes().hex(),
        "retrieval_tag": RETRIEVAL_TAG,
        "retrieval_cw": _ints(
            fss.convert_gen(state, ones, ring_bits=ring_bits, tag=RETRIEVAL_TAG)
        ),
        "aggregation_tag": AGGREGATION_TAG,
        "aggregation_cw": _ints(
            fss.convert_gen(state, grads, ring_bits=ring_bits, tag=AGGREGATION_TAG)
        ),
    }


def _prg_case(name: str) -> dict[str, Any]:
    block = bytes(range(16))
    words = np.frombuffer(block, "<u8").astype(np.uint64).reshape(1, 2)
    return {
        "name": name,
        "fixed_key": fixed_key(name).hex(),
        "input": block.hex(),
        "mmo": aes_for(name).mmo(words).astype("<u8").tobytes().hex(),
    }


def build() -> dict[str, Any]:
    """The whole vector file as a JSON-ready dict."""
    return {
        "source": {
            "script": "tests/fss/make_vectors.py",
            "command": "python tests/fss/make_vectors.py",
            "rng": "secemb.randomness.CtrDrbg: AES-256-CTR keyed by SHA-256(b'secemb.CtrDrbg' + seed)",
            "seed_prefix": SEED_PREFIX,
            "key_format": "docs/wire-format.md, DPF key batch in the message framing version 2",
            "note": "integers are decimal; keys and blocks are lowercase hex",
        },
        "format_version": FORMAT_VERSION,
        "prg": [_prg_case(n) for n in PRG_NAMES],
        "keys": [_key_case(*c) for c in KEY_CASES],
        "paths": [_path_case(*c) for c in PATH_CASES],
    }


def render(vectors: dict[str, Any]) -> str:
    return json.dumps(vectors, indent=1, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    text = render(build())
    if "--check" in argv:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'DIFFERS'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
