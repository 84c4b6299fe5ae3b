"""Red team of session 34's batched check paths (issue 34; helper R), tests only: where a batch path
stands for the per-item path it replaced -- in its outputs (bytes, digests, tags, verdicts) and in
its refusals (error type, text, the item named, nothing kept from a refused item, nothing lost from
a good one).  The paths: helper W's ``hashing.hmac_sha256_many`` (``_shani._hmac_rows``) under
``checks._hmac_many`` / ``relay_subkeys`` / ``seed_tags`` and ``sketch.expand``'s one compiled call
(``_sketch_device_kernels.expand_core``); helper P's C-level batch checks (``field.batch_nbytes``,
``rangeproof`` / ``sketchproof`` ``parse`` / ``well_formed`` / ``hints_of`` / ``seed_parts``,
``projections._seed_indices``, ``field.expand_many``), server 0's ``_proof_bodies`` fast path and
``SpilledShares.get_many``.

Expected values, none computed by the code under test: :func:`hmac.digest` (RFC 2104) and the
per-item functions that did not change (``seed_tag``, ``relay_subkey``); the arrays a spill was given;
each proof message's body; and :data:`REFERENCE`, digests of the outcomes of commit f266bf6 (before
session 34's batch paths, ``SECEMB_FSS_KERNELS=numpy``) on deterministic inputs (:func:`_outcomes`):
good batches and batches with one or two bad items at the first, middle and last place (short, long,
an element at ``p`` or ``2^64 - 1``, ``str``, ``bytearray``, contiguous and strided ``memoryview``,
``None``), contexts and seeds of other types and lengths, duplicate seeds, empty and one-item batches.
Regenerate with ``cd /tmp && PYTHONPATH=<an f266bf6 worktree> SECEMB_FSS_KERNELS=numpy python
/work/main/tests/review/test_session34_redteam.py`` (it uses only APIs f266bf6 had).

The red team also compared, outside this file, server 0's ``handle_proof_many`` and
``bound_request`` and server 1's ``bound_answer`` between f266bf6 and main on 49 batches (each bad kind
at places 0, 2, 5, two bad, duplicates, a user that did not upload, a second proof, ids of
``np.int64`` / ``bool`` / ``-1`` / ``2^64``, bytes subclasses, bodies swapped between users): the
same verdicts, texts and kept bodies.  :func:`test_proof_batch_with_equal_headers_and_one_bent_body`
keeps the case the fast path is most exposed to (every header equal, one body not), and
:func:`test_bound_answer_names_the_first_fault_in_the_requests_order` server 1's set-based request
check (both pass on f266bf6 too; mutations: the fast path without ``well_formed``, the set check
without the answered users, each fail them).

Findings (tests asserting the behaviour the per-item reference has; strict xfails until the lead's fix,
which made them pass):

* S34-R1 (low, hazmat): ``hashing.hmac_sha256_many`` given ``head`` as a ``memoryview`` returns the
  HMACs on the SHA-NI kernel's path (``np.frombuffer``) and raises ``TypeError`` on the reference path
  (``head + tail.tobytes()``): the outcome depends on the CPU.  Every caller passes ``bytes``; not
  reachable from a message.  Fixed: both paths refuse a head that is not ``bytes`` (InvalidParameters).
* S34-R2 (low): ``SpilledShares.get_many`` on a file that ends early names the first key of the
  run it read in one go (``keys[lo // size]``), not the key whose bytes are missing, which ``get`` of
  each key (the per-item reference, and what ``_dense_shares`` did before) names.  Only the OSError's
  text (an operator reading a log); nothing is kept.  Fixed: it names ``keys[done // size]``, the key
  whose bytes ``readinto`` found missing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import field as F
from secemb.fss import hashing, kernels, sketch
from secemb.fss import projections as PJ
from secemb.fss import rangeproof as R
from secemb.fss import sketchproof as SP
from secemb.protocols.secemb import checks
from secemb.protocols.spill import SpilledShares
from secemb.randomness import CtrDrbg

SHA_PATHS = ["reference", pytest.param("kernel", marks=pytest.mark.skipif(
    not kernels.sha_compiled(), reason="no SHA-NI kernel here"))]


@pytest.fixture(params=SHA_PATHS)
def sha_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``hmac_sha256_many``'s path: hmac.digest row by row, or the SHA-NI kernel's one call."""
    if request.param == "reference":
        monkeypatch.setattr(kernels, "sha_compiled", lambda: False)
    return str(request.param)


def _rows(label: bytes, n: int, width: int) -> np.ndarray:
    """Deterministic uint8 (n, width) rows (public test data)."""
    return np.frombuffer(CtrDrbg(label)(n * width), np.uint8).reshape(n, width)


def _macs(keys: list[bytes], head: bytes, tails: np.ndarray) -> list[bytes]:
    """The reference: :func:`hmac.digest` of each row, ``keys[i]`` (or the one key) for row ``i``."""
    return [hmac.digest(keys[i if len(keys) > 1 else 0], head + tails[i].tobytes(), "sha256")
            for i in range(len(tails))]


# --- hmac_sha256_many: HMAC-SHA256 at SHA-256's padding edges, layouts, long keys ------------------------------


def test_hmac_rows_at_the_padding_edges(sha_path: str) -> None:
    """Keys of 0, 1, 63 and 64 bytes (the padded block's edges), inner messages ``head || tail`` of 0,
    55, 56, 64, 119 and 120 bytes split all head, all tail and half-half (one and two padding blocks;
    the outer hash is 64 + 32 bytes), 65 rows (past a 64-row block), one key or a key a row."""
    for k in (0, 1, 63, 64):
        keys = _rows(b"k%d" % k, 65, k)
        for total in (0, 55, 56, 64, 119, 120):
            for h in sorted({0, total // 2, total}):
                head, tails = CtrDrbg(b"h%d" % h)(h), _rows(b"t%d" % total, 65, total - h)
                got = hashing.hmac_sha256_many(keys, head, tails)
                assert got.dtype == np.uint8 and got.shape == (65, 32)
                assert [bytes(r) for r in got] == _macs([bytes(r) for r in keys], head, tails), (k, total, h)
                one = hashing.hmac_sha256_many(keys[:1], head, tails)
                assert [bytes(r) for r in one] == _macs([keys[0].tobytes()], head, tails), (k, total, h)


@pytest.mark.parametrize("n", [1, 2, 64, 65])
def test_hmac_rows_of_one_key_repeated_equal_the_one_key_form(sha_path: str, n: int) -> None:
    """A "key a row" batch whose rows are one key (server 1's batch with a repeated relay key) gives
    what the one-key form and hmac.digest give; so do reversed, Fortran-ordered, strided and read-only
    arrays of the same rows."""
    key = CtrDrbg(b"one key")(32)
    keys = np.frombuffer(key * n, np.uint8).reshape(n, 32)
    wide = _rows(b"wide", n, 70)
    tails = wide[:, 3:59]  # another stride
    want = _macs([key], b"\x00head", tails)
    assert [bytes(r) for r in hashing.hmac_sha256_many(keys, b"\x00head", tails)] == want
    assert [bytes(r) for r in hashing.hmac_sha256_many(keys[:1], b"\x00head", tails)] == want
    assert [bytes(r) for r in hashing.hmac_sha256_many(keys[::-1], b"\x00head", tails[::-1])] == want[::-1]
    fortran = np.asfortranarray(tails)
    fortran.flags.writeable = False
    assert [bytes(r) for r in hashing.hmac_sha256_many(np.asfortranarray(keys), b"\x00head", fortran)] == want
    spread = np.zeros((n, 64), np.uint8)
    spread[:, ::2] = keys  # the key's bytes every other column: a non-contiguous key array
    assert [bytes(r) for r in hashing.hmac_sha256_many(spread[:, ::2], b"\x00head", tails)] == want


def test_hmac_rows_of_many_keys_each_row_its_own(sha_path: str) -> None:
    """Keys that differ in one byte, and a key a row with duplicate rows among distinct ones: each row
    under its own key (no key bleeds into another row)."""
    base = bytearray(CtrDrbg(b"base")(32))
    keys = []
    for i in range(65):
        k = bytearray(base)
        k[i % 32] ^= 1 << (i % 8) if i % 3 else 0  # every third row the base key itself
        keys.append(bytes(k))
    tails = np.repeat(_rows(b"same tail", 1, 16), 65, axis=0)  # one tail for all: only the keys differ
    got = hashing.hmac_sha256_many(np.frombuffer(b"".join(keys), np.uint8).reshape(65, 32), b"", tails)
    assert [bytes(r) for r in got] == _macs(keys, b"", tails)


@pytest.mark.parametrize("k", [65, 200])
def test_hmac_rows_refuse_keys_past_the_block_on_both_paths(sha_path: str, k: int) -> None:
    """RFC 2104 hashes a key longer than the block first (hmac.digest takes one); the batch refuses it,
    with the same error on both paths, one key or a key a row, empty batch or not."""
    tails = _rows(b"t", 3, 5)
    texts = set()
    for keys, rows in ((_rows(b"k", 3, k), tails), (_rows(b"k", 1, k), tails), (_rows(b"k", 1, k), tails[:0])):
        with pytest.raises(InvalidParameters) as err:
            hashing.hmac_sha256_many(keys, b"", rows)
        texts.add(str(err.value).split(", got")[0])
    assert len(texts) == 1


def test_hmac_rows_of_an_empty_batch(sha_path: str) -> None:
    for keys in (_rows(b"k", 1, 32), _rows(b"k", 0, 32)):
        got = hashing.hmac_sha256_many(keys, b"x", _rows(b"t", 0, 16))
        assert got.dtype == np.uint8 and got.shape == (0, 32)


def test_hmac_rows_take_a_head_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    keys, tails, head = _rows(b"k", 1, 32), _rows(b"t", 2, 16), b"secemb-head"

    def outcome() -> object:
        try:
            return [bytes(r) for r in hashing.hmac_sha256_many(keys, memoryview(head), tails)]
        except Exception as exc:  # noqa: BLE001 - the outcome compared is the exception's type
            return type(exc)

    monkeypatch.setattr(kernels, "sha_compiled", lambda: False)
    reference = outcome()
    monkeypatch.undo()
    assert kernels.sha_compiled(), "the kernel path is what differs"
    assert outcome() == reference


# --- checks: seed_tags / relay_subkeys against the per-item functions ---------------------------------------------


def _keys(n: int, label: bytes = b"relay") -> list[bytes]:
    return [CtrDrbg(label + i.to_bytes(2, "big"))(16) for i in range(n)]


@pytest.mark.parametrize("n", [0, 1, 2, 64, 65])
def test_seed_tags_are_seed_tag_of_each_device(sha_path: str, n: int) -> None:
    """Distinct keys, a key repeated (devices 0, 2, 4, ... share one), a seed repeated, bytearray and
    memoryview items: each tag ``seed_tag`` of its own key and seed, and the spec's two HMACs."""
    keys, seeds = _keys(n), _keys(n, b"seed")
    keys = [keys[0] if i % 2 == 0 else k for i, k in enumerate(keys)]
    if n > 2:
        seeds[1] = seeds[2]
        keys[-1], seeds[-2] = bytearray(keys[-1]), memoryview(seeds[-2])  # type: ignore[call-overload]
    round_id = 2**64 - 2
    got = checks.seed_tags(keys, round_id, seeds)
    assert got == [checks.seed_tag(k, round_id, s) for k, s in zip(keys, seeds, strict=True)]
    for k, s, tag in zip(keys, seeds, got, strict=True):
        sub = hmac.digest(bytes(k), b"secemb-relay-subkey-seed-tag", "sha256")
        head = b"secemb-sketch-seed-tag" + struct.pack("<Q", round_id)
        assert tag == hmac.digest(sub, head + bytes(s), "sha256")[:16]


@pytest.mark.parametrize("place", [0, 2, 4])
@pytest.mark.parametrize("bad", ["key15", "key17", "seed15", "seed17", "seedstr", "keynone", "keystrided"])
def test_seed_tags_refuse_a_bad_device_as_seed_tag_does(place: int, bad: str) -> None:
    """One bad device among good ones: the batch raises the per-item call's exception type (a
    SecembError where seed_tag gives one) and returns nothing."""
    keys, seeds = _keys(5), _keys(5, b"seed")
    item: object = {"key15": keys[place][:15], "key17": keys[place] + b"\0", "seed15": seeds[place][:15],
                    "seed17": seeds[place] + b"\0", "seedstr": "s" * 16, "keynone": None,
                    "keystrided": memoryview(keys[place] * 2)[::2]}[bad]
    (keys if bad.startswith("key") else seeds)[place] = item  # type: ignore[index]
    with pytest.raises(Exception) as alone:  # noqa: PT011 - compared with the batch's below
        checks.seed_tag(keys[place], 9, seeds[place])
    with pytest.raises(Exception) as batch:  # noqa: PT011
        checks.seed_tags(keys, 9, seeds)
    assert isinstance(batch.value, type(alone.value)) or isinstance(alone.value, BufferError) and isinstance(
        batch.value, TypeError)  # a strided key: the join's TypeError where hmac's BufferError (both not SecembError)


def test_seed_tags_refuse_lists_of_other_lengths_and_rounds_as_seed_tag_does() -> None:
    keys, seeds = _keys(3), _keys(3, b"seed")
    with pytest.raises(InvalidParameters):
        checks.seed_tags(keys, 1, seeds[:2])
    with pytest.raises(InvalidParameters):
        checks.seed_tags(keys[:0], 1, seeds[:1])
    for round_id in (-1, 2**64):
        with pytest.raises(Exception) as alone:  # noqa: PT011 - the per-item function's own refusal
            checks.seed_tag(keys[0], round_id, seeds[0])
        with pytest.raises(type(alone.value)):
            checks.seed_tags(keys, round_id, seeds)


@pytest.mark.parametrize("use", ["upload-gmac", "seed-tag"])
@pytest.mark.parametrize("n", [0, 1, 65])
def test_relay_subkeys_are_relay_subkey_of_each_key(sha_path: str, use: str, n: int) -> None:
    keys = _keys(n)
    keys[n // 2 :] = keys[:1] * (n - n // 2)  # repeated keys
    got = checks.relay_subkeys(keys, use)  # type: ignore[arg-type]
    assert got.dtype == np.uint8 and got.shape == (n, {"upload-gmac": 16, "seed-tag": 32}[use])
    assert [bytes(r) for r in got] == [checks.relay_subkey(k, use) for k in keys]  # type: ignore[arg-type]
    assert [bytes(r) for r in got] == [hmac.digest(k, b"secemb-relay-subkey-" + use.encode(), "sha256")[: got.shape[1]]
                                       for k in keys]


def test_relay_subkeys_refuse_as_relay_subkey() -> None:
    keys = _keys(3)
    for place in (0, 2):
        bad = list(keys)
        bad[place] = keys[place][:15]
        with pytest.raises(InvalidParameters):
            checks.relay_subkeys(bad, "seed-tag")
    with pytest.raises(InvalidParameters):
        checks.relay_subkeys(keys, "seed_tag")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters):
        checks.relay_subkeys([], "other")  # type: ignore[arg-type]


# --- the outcomes of f266bf6 on deterministic inputs ------------------------------------------------------------------


def _digest(x: object) -> object:
    """A short, deterministic stand-in of an outcome (arrays by their bytes, dtype and shape)."""
    if isinstance(x, np.ndarray):
        return hashlib.sha256(x.tobytes() + str(x.dtype).encode() + str(x.shape).encode()).hexdigest()[:16]
    if isinstance(x, (list, tuple)):
        return [_digest(y) for y in x]
    if isinstance(x, bytes):
        return x.hex()
    if all(hasattr(x, f) for f in ("keys", "hints", "inputs", "proofs")):
        return [_digest(getattr(x, f)) for f in ("keys", "hints", "inputs", "proofs")]
    return repr(x)


def _outcome(f: Callable[..., object], *args: object) -> list[object]:
    """``f(*args)``'s outcome: ``["ok", digest]`` or ``[error type, text]``."""
    try:
        return ["ok", _digest(f(*args))]
    except Exception as exc:  # noqa: BLE001 - the outcome recorded is the exception's type and text
        return [type(exc).__name__, str(exc)]


def _bytes(n: int, size: int, tag: bytes) -> list[bytes]:
    return [CtrDrbg(tag + bytes([i]))(size) for i in range(n)]


def _outcomes() -> dict[str, dict[str, list[object]]]:
    """Each group's outcomes (name -> ["ok", digest] or [error type, text]) on deterministic inputs,
    with APIs f266bf6 had."""
    params, sk = R.RangeParams(rows=6, bits=8, ring_bits=32), SP.SketchParams(keys=12)
    size0, elem = params.message_bytes(0), R.SEED_BYTES + R.PART_BYTES
    p_word, top = F.P.to_bytes(8, "little"), (2**64 - 1).to_bytes(8, "little")

    def bent(m: bytes, at: int, word: bytes) -> bytes:
        return m[:at] + word + m[at + 8 :]

    m0 = []
    for i, raw in enumerate(_bytes(5, size0, b"m0")):
        words = np.frombuffer(raw[elem:], "<u8") % np.uint64(F.P - i - 1)
        m0.append(raw[:elem] + words.astype("<u8").tobytes())
    m1 = [s + p for s, p in zip(_bytes(5, 16, b"s"), _bytes(5, 32, b"p"), strict=True)]
    sm = [(np.frombuffer(raw, "<u8") % np.uint64(F.P - 1)).astype("<u8").tobytes()
          for raw in _bytes(5, sk.proof_bytes, b"sk")]
    seeds, ctx = _bytes(5, 16, b"s"), [b"c" * 40] * 5
    out: dict[str, dict[str, list[object]]] = {k: {} for k in (
        "rangeproof.parse0", "rangeproof.well_formed", "rangeproof.hints_of", "rangeproof.parse1",
        "rangeproof.contexts", "seeds", "sketchproof", "derivations", "sketch.expand")}
    batches: dict[str, list[object]] = {"empty": [], "one": m0[:1], "dup": [m0[0]] * 4}
    for pos in (0, 2, 4):
        for name, bad in {"short": m0[pos][:-1], "long": m0[pos] + b"\0", "p": bent(m0[pos], elem, p_word),
                          "max": bent(m0[pos], size0 - 8, top), "str": "x" * size0, "ba": bytearray(m0[pos]),
                          "mv": memoryview(m0[pos]), "strided": memoryview(m0[pos] * 2)[::2], "none": None}.items():
            batch: list[object] = list(m0)
            batch[pos] = bad
            batches[f"{name}@{pos}"] = batch
    two: list[object] = list(m0)
    two[1], two[3] = m0[1][:-1], bent(m0[3], elem, p_word)
    batches["two"] = two
    for k, v in batches.items():
        out["rangeproof.parse0"][k] = _outcome(R.parse, params, 0, v)
        out["rangeproof.well_formed"][k] = _outcome(R.well_formed, params, v)
        out["rangeproof.hints_of"][k] = _outcome(R.hints_of, params, [b"c" * 40] * len(v), v)
    for k, v in {"ok": m1, "short@4": m1[:4] + [m1[4][:-1]], "mv@0": [memoryview(m1[0])] + m1[1:],
                 "str@2": m1[:2] + ["x" * 48] + m1[3:]}.items():
        out["rangeproof.parse1"][k] = _outcome(R.parse, params, 1, v)
    for k, c in {"ok": ctx, "ba@0": [bytearray(b"c" * 40)] + ctx[1:], "str@3": ctx[:3] + ["c" * 40] + ctx[4:],
                 "int@0": [5] + ctx[1:], "lengths": [b"c" * (40 + i) for i in range(5)]}.items():
        out["rangeproof.contexts"][f"hints_of {k}"] = _outcome(R.hints_of, params, c, m0)
        out["rangeproof.contexts"][f"seed_parts {k}"] = _outcome(R.seed_parts, c, seeds)
    dup = _bytes(3, 16, b"d")
    for k, s in {"ok": seeds, "15@2": seeds[:2] + [b"x" * 15] + seeds[3:], "ba@0": [bytearray(16)] + seeds[1:],
                 "str": ["x" * 16] * 5, "none@4": seeds[:4] + [None], "dup": [dup[1], dup[0], dup[1], dup[2], dup[0]],
                 "dup bad": [dup[1], b"x" * 15, dup[1], b"y" * 17, dup[0]]}.items():
        out["seeds"][f"seed_parts {k}"] = _outcome(R.seed_parts, ctx, s)
        out["seeds"][f"expand_many {k}"] = _outcome(F.expand_many, s, 9)
        out["seeds"][f"projections {k}"] = _outcome(PJ._seed_indices, s, 5)
        out["seeds"][f"sketchproof {k}"] = _outcome(SP._seeds, "seed", s, 5)
    for pos in (0, 2, 4):
        for name, bad in {"short": sm[pos][:-1], "p": bent(sm[pos], 8, p_word), "ba": bytearray(sm[pos]),
                          "strided": memoryview(sm[pos] * 2)[::2], "str": "x" * sk.proof_bytes}.items():
            batch = list(sm)
            batch[pos] = bad
            out["sketchproof"][f"parse {name}@{pos}"] = _outcome(SP.parse, sk, batch)
            out["sketchproof"][f"well_formed {name}@{pos}"] = _outcome(SP.well_formed, sk, batch)
    out["sketchproof"]["parse empty"] = _outcome(SP.parse, sk, [])
    # the round secret's derivations (HMAC-SHA256 under one key) and server 1's seed tags
    secret = checks.round_secret(b"k" * checks.SKETCH_KEY_BYTES, 7)
    for n in (0, 1, 64, 65):
        users = [(i * 2654435761) % 2**64 for i in range(n)]
        digests = _bytes(n, 32, b"D")
        for name in ("sketch_seeds", "sketch_halves", "bound_challenges"):
            out["derivations"][f"{name} {n}"] = _outcome(getattr(checks, name), secret, 7, users, digests)
        out["derivations"][f"query_seeds {n}"] = _outcome(checks.query_seeds, secret, 7, users)
        out["derivations"][f"seed_tag {n}"] = _outcome(list, map(checks.seed_tag, _bytes(n, 16, b"K"), [7] * n,
                                                                 _bytes(n, 16, b"C")))
    # the sketch's expansion: keys, r, r^2 (mp around the CTR pass of 8 blocks and the servers' 32)
    for n, mp in ((1, 1), (3, 8), (5, 9), (65, 33), (2, 64), (2, 65)):
        seeds_n = _bytes(n, 16, b"E")
        if n > 2:
            seeds_n[2] = seeds_n[0]  # a seed repeated
        out["sketch.expand"][f"{n} {mp}"] = _outcome(_expanded, seeds_n, mp)
    return out


def _expanded(seeds: list[bytes], mp: int) -> list[np.ndarray]:
    e = sketch.expand(seeds, mp)
    return [e.keys, e.r, e.r2]


def _group_digests(outcomes: dict[str, dict[str, list[object]]]) -> dict[str, str]:
    return {g: hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()[:32] for g, v in outcomes.items()}


#: :func:`_group_digests` of :func:`_outcomes` at f266bf6 (``SECEMB_FSS_KERNELS=numpy``; module docstring)
REFERENCE: dict[str, str] = {
    "derivations": "b945ee2b63c85a62f4e288c6336cebdf",
    "rangeproof.contexts": "558f219a12068a390b446f292a8736d0",
    "rangeproof.hints_of": "0f7190fc245a9533b98d81e02e1497be",
    "rangeproof.parse0": "bf162896bda3aa52bbb0f0acaeb10e4e",
    "rangeproof.parse1": "8b4c24a88038742354458769eb0a8ed9",
    "rangeproof.well_formed": "25c782d5ec25433374f9afd828a262cc",
    "seeds": "dbf407e0977f5626366fe6149a3dd9bd",
    "sketch.expand": "f0835bc23b1f81e6024be052bab8ce4c",
    "sketchproof": "eddf3aeaf151553dde0a99f58de1dce0",
}


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not kernels.available(), reason="no compiled kernels here"))])
def test_batch_checks_and_derivations_are_f266bf6s(sha_path: str, backend: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group's outcomes (results, verdicts, error types and texts naming the item) equal those
    of the code before session 34's batch paths, on both backends and both SHA paths."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    outcomes = _outcomes()
    got = _group_digests(outcomes)
    bad = {g: outcomes[g] for g in REFERENCE if got[g] != REFERENCE[g]}
    assert not bad, json.dumps(bad, indent=1, sort_keys=True)[:4000]
    assert got.keys() == REFERENCE.keys()


@pytest.mark.parametrize("party", [0, 1])
@pytest.mark.parametrize("n", [0, 1, 64, 65])
def test_rangeproof_parse_of_rows_in_any_layout_is_parse_of_the_bytes(party: int, n: int) -> None:
    """``parse`` of a batch as uint8 rows -- a column slice of a wider array, Fortran-ordered,
    read-only -- gives the arrays ``parse`` of the same messages as bytes gives, and leaves the rows
    as they were; party 0 with an element at ``p`` in the last row names that row as the bytes do."""
    params = R.RangeParams(rows=6, bits=8, ring_bits=32)
    size = params.message_bytes(party)
    msgs = _bytes(n, size, b"rows%d" % party)
    if party == 0:  # the elements below p
        head = R.SEED_BYTES + R.PART_BYTES
        msgs = [m[:head] + (np.frombuffer(m[head:], "<u8") % np.uint64(F.P)).astype("<u8").tobytes() for m in msgs]
    want = R.parse(params, party, msgs)
    wide = np.zeros((n, size + 24), np.uint8)
    wide[:, 8 : 8 + size] = np.frombuffer(b"".join(msgs), np.uint8).reshape(n, size)
    frozen = np.array(wide[:, 8 : 8 + size])
    frozen.flags.writeable = False
    for rows in (wide[:, 8 : 8 + size], np.asfortranarray(wide[:, 8 : 8 + size]), frozen):
        before = rows.copy()
        got = R.parse(params, party, rows)
        for name in ("keys", "hints", "inputs", "proofs"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), name
        assert np.array_equal(rows, before)
    if party == 0 and n:
        bent = msgs[:-1] + [msgs[-1][:-8] + F.P.to_bytes(8, "little")]
        with pytest.raises(Exception) as alone:  # noqa: PT011 - compared with the rows' refusal
            R.parse(params, 0, bent)
        with pytest.raises(type(alone.value)) as batch:
            R.parse(params, 0, np.frombuffer(b"".join(bent), np.uint8).reshape(n, size))
        assert str(batch.value) == str(alone.value) and f"message {n - 1} " in str(alone.value)


# --- sketch.expand's one compiled call: round keys with the rest ----------------------------------------------------


@pytest.mark.skipif(not kernels.available(), reason="the fused expansion is the compiled kernels' path")
@pytest.mark.parametrize(("n", "mp"), [(64, 8), (65, 9), (3, 65)])
def test_expand_round_keys_are_the_schedules_of_the_keys(n: int, mp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The round keys the fused call sets equal the schedules of the keys computed on their own
    (``sketch_schedules``), at 64 and 65 devices, seeds repeated and given as bytearray."""
    seeds: list[bytes] = _bytes(n, 16, b"R")
    seeds[1] = seeds[0]
    seeds[-1] = bytearray(seeds[-1])  # type: ignore[call-overload]
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    fused = sketch.expand(seeds, mp)
    want = np.empty_like(fused.round_keys)
    sketch._compiled_sketch().sketch_schedules(np.ascontiguousarray(fused.keys), want)
    assert np.array_equal(fused.round_keys, want)
    assert np.array_equal(fused.round_keys[0], fused.round_keys[1])
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    ref = sketch.expand([bytes(s) for s in seeds], mp)
    for a, b in ((fused.keys, ref.keys), (fused.r, ref.r), (fused.r2, ref.r2)):
        assert np.array_equal(a, b)


# --- server 0's proof batch: every header equal, one body not --------------------------------------------------------


def _uploaded_round(n: int, *, prove: bool) -> tuple[Any, list[int]]:
    """A bounded cuckoo round with relay (tests/protocols/test_bounded_payloads.py's ``Round``) whose
    devices ``0..n-1`` retrieved and uploaded honestly (and, with ``prove``, sent their proofs)."""
    sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", d) for d in ("protocols", "")]
    from test_bounded_payloads import Round

    rnd, users = Round("cuckoo", True), list(range(n))
    for u in users:
        rnd.retrieve(u)
        rnd.upload(u, *rnd.honest_upload(u))
        if prove:
            rnd.prove(u)
    return rnd, users


@pytest.mark.parametrize("place", [0, 2, 4])
def test_proof_batch_with_equal_headers_and_one_bent_body(place: int) -> None:
    """Five proofs with one header; one body holds an element at ``p`` (its header still equal to the
    others'): that item alone refused as InvalidMessage, nothing kept of it, the others' bodies kept
    byte for byte; the refused device's honest proof is taken afterwards (nothing of the refusal
    stayed), and a third proof of a kept device is refused without touching what was kept."""
    from secemb.errors import InvalidMessage, ProtocolError
    from secemb.framing import HEADER_BYTES

    rnd, users = _uploaded_round(5, prove=False)
    proofs = [rnd.users[u].bound_proof(rnd.s0.challenge(u)) for u in users]
    at = HEADER_BYTES + R.SEED_BYTES + R.PART_BYTES + 8 * place
    bent = proofs[place][:at] + F.P.to_bytes(8, "little") + proofs[place][at + 8 :]
    assert bent[:HEADER_BYTES] == proofs[0][:HEADER_BYTES]
    got = rnd.s0.handle_proof_many([(u, bent if u == place else proofs[u]) for u in users])
    assert [g is None for g in got] == [u != place for u in users]
    assert isinstance(got[place], InvalidMessage) and "not below p" in str(got[place])
    assert rnd.s0._proofs == {u: proofs[u][HEADER_BYTES:] for u in users if u != place}
    assert rnd.s0.handle_proof_many([(place, proofs[place])]) == [None]
    again = rnd.s0.handle_proof_many([((place + 1) % 5, proofs[place])])
    assert isinstance(again[0], ProtocolError)
    assert rnd.s0._proofs == {u: proofs[u][HEADER_BYTES:] for u in users}
    rnd.close_exact(set())


def test_bound_answer_names_the_first_fault_in_the_requests_order() -> None:
    """Server 1's request check (sets, then the per-user loop only to name the fault): requests whose
    users are not uploaded, answered before or listed twice, in several orders, each refused naming
    the first fault in the request's order as the per-user loop did, nothing answered or marked; the
    same users' honest request is answered after them."""
    from secemb.errors import InvalidMessage, ProtocolError
    from secemb.framing import HEADER_BYTES
    from secemb.protocols.secemb.server import NAME, QUERY_BYTES
    from secemb.protocols.wire import frame

    rnd, users = _uploaded_round(6, prove=True)
    body = rnd.s0.bound_request(users)[HEADER_BYTES:]
    query, table = body[:QUERY_BYTES], body[QUERY_BYTES:]
    entry = len(table) // len(users)

    def request(ids: list[int]) -> bytes:
        """A request of users ``ids``: each listed id's entry, or user 0's entry with the id replaced."""
        rows = [table[entry * u : entry * (u + 1)] if u in users else u.to_bytes(8, "little") + table[8:entry]
                for u in ids]
        return frame(NAME, "bound_request", 1, rnd.cfg.round_id, query, b"".join(rows))

    assert len(rnd.s1.bound_answer(request([0, 1, 2]))) > HEADER_BYTES  # 0, 1, 2 answered
    r = rnd.cfg.round_id
    for ids, error, text in (
            ([3, 77, 4], ProtocolError, f"user 77 did not upload to server 1 in round {r}"),
            ([88, 3, 77], ProtocolError, f"user 88 did not upload to server 1 in round {r}"),
            ([3, 4, 1], ProtocolError, f"user 1's bound proof was already checked in round {r}"),
            ([3, 0, 77], ProtocolError, f"user 0's bound proof was already checked in round {r}"),
            ([5, 77, 0], ProtocolError, f"user 77 did not upload to server 1 in round {r}"),
            ([3, 4, 3], InvalidMessage, "bound_request: a user is listed twice"),
            ([0, 77, 0], InvalidMessage, "bound_request: a user is listed twice")):
        answered = set(rnd.s1._answered)
        with pytest.raises(error) as err:
            rnd.s1.bound_answer(request(ids))
        assert str(err.value) == text, ids
        assert set(rnd.s1._answered) == answered  # nothing marked by a refused request
    assert len(rnd.s1.bound_answer(request([3, 4, 5]))) > HEADER_BYTES


# --- SpilledShares.get_many against the arrays it was given ---------------------------------------------------------


def _spill_layout() -> tuple[SpilledShares, dict[int, np.ndarray]]:
    """A spill holding, end to end and not: small arrays joined by one put_many, large ones written
    without their zero blocks (a last block partial and non-zero, one all zero, one dense), a key put
    again elsewhere, and small ones after a large one in the same put_many."""
    big = 300_001  # uint32 words: over the join size, its last 256 KiB block partial
    arrays: dict[int, np.ndarray] = {k: np.arange(big, dtype=np.uint32) * 0 for k in range(10, 14)}
    arrays[10][7] = 1
    arrays[10][-1] = 9  # the partial last block non-zero
    arrays[12][:] = 5  # dense
    arrays[13][70_000] = 3  # one block in the middle; 11 stays all zero
    small = {k: (np.arange(big, dtype=np.uint32) + k) % 251 for k in range(0, 6)}
    spill = SpilledShares()
    spill.put_many([(k, small[k]) for k in range(3)])  # joined: end to end
    spill.put_many([(10, arrays[10]), (3, small[3]), (4, small[4]), (11, arrays[11])])
    spill.put_many([(12, arrays[12]), (13, arrays[13]), (5, small[5])])
    small[1] = small[1][::-1].copy()
    spill.put(1, small[1])  # key 1 again, at the end of the file
    arrays.update(small)
    return spill, arrays


def test_get_many_rows_are_the_arrays_put() -> None:
    spill, arrays = _spill_layout()
    for keys in ([0, 1, 2], [2, 0, 1, 2], [10, 3, 4, 11, 12, 13, 5], [13, 12, 11, 10], [5, 10, 5], [11], []):
        got = spill.get_many(keys, np.dtype(np.uint32), (300_001,))
        assert got.shape == (len(keys), 300_001) and got.dtype == np.uint32
        for row, k in zip(got, keys, strict=True):
            assert np.array_equal(row, arrays[k]), (keys, k)
    spill.close()


def test_get_many_on_a_short_file_names_the_key_get_names() -> None:
    spill = SpilledShares()
    spill.put_many([(k, np.full(7, k + 1, np.uint32)) for k in range(4)])
    assert spill._file is not None
    spill._file.truncate(3 * 28 + 10)  # key 3's bytes cut short; keys 0-2 whole
    with pytest.raises(OSError, match="device 3") as alone:
        spill.get(3)
    for keys in ([3], [2, 3], [0, 1, 2, 3]):
        with pytest.raises(OSError) as batch:
            spill.get_many(keys, np.dtype(np.uint32), (7,))
        assert str(batch.value) == str(alone.value), keys
    spill.close()


if __name__ == "__main__":  # the reference digests of the running tree (module docstring)
    json.dump(_group_digests(_outcomes()), sys.stdout, indent=4, sort_keys=True)
    print()
