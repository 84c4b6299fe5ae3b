"""Red team of session 33's batched verifiers (helper R), tests only: the sketch proof's server paths
(helper Q: ``sketchproof.verify`` / ``verifier_messages`` as one compiled call each, ``parse`` joining
a batch once, ``parse_verifier_messages`` in one pass, ``sketch.server_inputs_many`` and the
one-pass ``shares_core``, ``sketch.expand`` keyed from the SHAKE rows), the range proof's verifier
(helper F: ``verifier_batch``, the coefficients and the query in one call a block, ``_joints`` as one
batch, ``decide_core``'s below-p checks) and ``projections.project_affine`` (helper V).

Two kinds of expected values, neither computed by the code under test:

* :data:`REFERENCE`: the outcomes of session 32's code (commit 27f20c0, the per-device numpy
  reference, ``SECEMB_FSS_KERNELS=numpy``) on deterministic inputs -- honest and cheating devices
  (the cheaters first, last, in the middle, every one), batches of 1 to 7 devices and 1 to 100 keys,
  server 1's messages with one element bent, a refused device, malformed proof shares and
  verifier answers (elements at ``p - 1``, ``p``, ``2^61``, ``2^63``, ``2^64 - 1``, a marker row
  with one word off, truncated and overlong bodies, non-bytes).  Regenerate them with
  ``PYTHONPATH=<a 27f20c0 worktree> SECEMB_FSS_KERNELS=numpy python tests/review/test_session33_redteam.py``;
  every path of this tree, on both backends, must give the same words, verdicts and errors.
* The statement: a device whose sketch is a point function on every key (``A^2 = B C``) passes, a
  device with one key off fails, whatever the batch around it.

Findings (each was a strict xfail asserting the safe behaviour; all three fixed by the lead in session 33,
the tests now pass):

* S33-R1 (low, hazmat): ``sketch.server_inputs_many`` given an ndarray ``(n, K, 3)`` (a sequence of
  ``(K, 3)`` arrays) raises numpy's bare ``ValueError`` ("truth value of an array ... is ambiguous")
  from ``if not values``, not InvalidParameters.  Not reachable from a message (the server passes a
  list).  Fix: ``if len(values) == 0 or any(...)``.
* S33-R2 (low, hazmat, older than this session): ``sketchproof.parse`` given a bytes-like but not
  C-contiguous message (``memoryview(b)[::2]`` of the right ``nbytes``) raises ``TypeError`` from
  ``b"".join`` (27f20c0: the same from ``well_formed``), and ``parse_verifier_messages`` a
  ``BufferError`` from ``np.frombuffer``; not InvalidMessage.  The same in ``rangeproof.parse`` and
  ``rangeproof.parse_verifier_messages`` (``bound_rejected`` now hands it the opened body as a
  memoryview: a contiguous one, so no path from the peer).  Not reachable over HTTP (bodies are
  ``bytes``).  Fix: ``_nbytes`` returns None for a memoryview that is not ``c_contiguous`` (then
  "got memoryview" names it).
* S33-R3 (low, hazmat): ``sketch.server_inputs_many`` checks the dtype of the stacked array, not of each
  device's: a uint32, uint8 or bool ``(K, 3)`` array among uint64 ones is promoted and taken, alone it is
  refused (the contract: uint64 arrays, any byte order).  Harmless values (below ``p``), and the server
  passes its own uint64 values; the 27f20c0 server stacked the same way before ``server_inputs``.  Fix:
  refuse ``v.dtype.kind != "u" or v.dtype.itemsize != 8`` per array before ``np.stack``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
import sys
from collections.abc import Callable

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import rangeproof as R
from secemb.fss import sketch as K
from secemb.fss import sketchproof as S

P = F.P
BACKENDS = ["numpy", "numba"] if kernels.available() else ["numpy"]

# --- deterministic inputs (the same under 27f20c0 and this tree) -------------------------------------------------


def _stream(label: str, n: int) -> bytes:
    return hashlib.shake_256(label.encode()).digest(n)


def _ints(label: str, count: int) -> list[int]:
    raw = _stream(label, 16 * count)
    return [int.from_bytes(raw[16 * i : 16 * i + 16], "little") % P for i in range(count)]


def _honest(label: str, keys: int) -> list[tuple[int, int, int]]:
    """``keys`` point-function sketch values ``(A, B, C) = (r z, r^2 z, z)``: ``A^2 = B C``."""
    rz = _ints(label, 2 * keys)
    return [(r * z % P, r * r % P * z % P, z) for r, z in zip(rz[::2], rz[1::2], strict=True)]


def _rng(label: str) -> Callable[[int], bytes]:
    state = [0]

    def rng(n: int) -> bytes:
        state[0] += 1
        return _stream(f"{label}/{state[0]}", n)

    return rng


def _digest(a: object) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(f"{a.dtype} {a.shape}".encode() + a.tobytes()).hexdigest()[:16]


def _outcome(f: Callable[[], object]) -> str:
    """What ``f`` gives, as text: the digest of its arrays, or its error's type and message."""
    try:
        got = f()
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return f"{type(exc).__name__}: {exc}"
    if isinstance(got, tuple):
        return " ".join(_digest(a) for a in got)
    return _digest(got)


#: (keys, devices, cheaters): every cheater has one key with B off by one (its first or its last key)
CASES = [(1, 1, ()), (1, 1, (0,)), (1, 3, (0,)), (2, 2, (1,)), (3, 5, (0, 4)), (5, 4, (2,)), (5, 3, (0, 1, 2)),
         (17, 7, (0, 3, 6)), (64, 3, (2,)), (100, 2, (0,))]


def _round(keys: int, n: int, cheats: tuple[int, ...]) -> tuple:
    """A batch of ``n`` devices (``cheats`` cheating): params, x0, x1, seeds, sigmas, queries, proof messages."""
    params = S.SketchParams(keys)
    tag = f"k{keys}n{n}c{''.join(map(str, cheats))}"
    xs = np.array([_honest(f"{tag}/x{d}", keys) for d in range(n)], np.uint64).reshape(n, keys, 3)
    for j, d in enumerate(cheats):
        at = (keys - 1) * (j % 2)
        xs[d, at, 1] = (int(xs[d, at, 1]) + 1) % P
    seeds, sigmas, queries = ([_stream(f"{tag}/{w}{d}", 16) for d in range(n)] for w in "csq")
    msgs = [S._share(params, S._prove_inputs(params, x, c, s, _rng(f"{tag}/r{d}")), s)
            for d, (x, c, s) in enumerate(zip(xs, seeds, sigmas, strict=True))]
    x0 = np.array(_ints(f"{tag}/x0", n * keys * 3), np.uint64).reshape(n, keys, 3)
    x0.reshape(-1)[::7] = P - 1  # the sums' extremes
    x0.reshape(-1)[3::11] = 0
    return params, x0, F.sub(xs, x0), seeds, sigmas, queries, msgs


def _round_outcomes(keys: int, n: int, cheats: tuple[int, ...]) -> dict[str, object]:
    params, x0, x1, seeds, sigmas, queries, msgs = _round(keys, n, cheats)
    honest = [d for d in range(n) if d not in cheats]
    p0, p1 = S.parse(params, msgs), S.server1_shares(params, sigmas)
    v1 = S.verifier_messages(params, x1, p1, seeds, queries)
    v0 = S.verifier_messages(params, x0, p0, seeds, queries)
    bent = v1.copy()
    if honest:  # server 1's message of an honest device, its last element (a gadget value) one more
        bent[honest[len(honest) // 2], -1] = (int(bent[honest[len(honest) // 2], -1]) + 1) % P
    refused = np.zeros(n, bool)
    refused[n - 1] = True
    wire = S.encode_verifier_messages(params, v1, refused)
    return {
        "arrays": " ".join(_digest(a) for a in (p0, p1, v0, v1)) + " " + hashlib.sha256(wire).hexdigest()[:16],
        "verify": S.verify(params, x0, p0, seeds, queries, v1).tolist(),
        "decide": S.decide(params, v0, v1, seeds).tolist(),
        "bent": S.verify(params, x0, p0, seeds, queries, bent).tolist(),
        "parsed": _outcome(lambda: S.parse_verifier_messages(params, wire, n)),
        "inputs": _outcome(lambda: (K.server_inputs(x1.reshape(-1, 3), 0), K.server_inputs(x1.reshape(-1, 3), 1))),
    }


def _put(msg: bytes, at: int, word: int) -> bytes:
    b = bytearray(msg)
    b[8 * at : 8 * at + 8] = word.to_bytes(8, "little")
    return bytes(b)


def _bad_messages(params: S.SketchParams) -> dict[str, Callable[[bytes], object]]:
    last = params.proof_length - 1
    return {
        "p-first": lambda m: _put(m, 0, P), "p-last": lambda m: _put(m, last, P),
        "p-1": lambda m: _put(m, 3, P - 1), "2^61": lambda m: _put(m, 3, 1 << 61),
        "2^63": lambda m: _put(m, 2, 1 << 63), "2^64-1": lambda m: _put(m, last, (1 << 64) - 1),
        "short1": lambda m: m[:-1], "short8": lambda m: m[:-8], "long1": lambda m: m + b"\0",
        "long8": lambda m: m + bytes(8), "empty": lambda m: b"", "none": lambda m: None,
        "str": lambda m: "x" * len(m), "int": lambda m: 7, "bytearray": bytearray, "memoryview": memoryview,
        "memoryview-Q": lambda m: memoryview(m).cast("Q"),
    }


def _parse_outcomes() -> dict[str, str]:
    """``parse`` of a batch of 5 honest proof shares (keys 5) with one replaced at 0, 2 or 4, or at 1
    and another with ``p`` at 3: the words' digest or the error."""
    params, *_, msgs = _round(5, 4, (2,))
    good = [*msgs, msgs[0]]
    out = {}
    bad = _bad_messages(params)
    for name, f in bad.items():
        for at in ("0", "2", "4", "1+3"):
            batch: list = list(good)
            batch[int(at[0])] = f(batch[int(at[0])])
            if at == "1+3":
                batch[3] = bad["p-first"](batch[3])
            out[f"{name}@{at}"] = _outcome(lambda batch=batch: S.parse(params, batch))
    out["no messages"] = _outcome(lambda: S.parse(params, []))
    return out


_ROWS = ["ok", "marker", "marker-last-0", "p-first", "p-last", "2^64-1-one", "2^63"]


def _verifier_row(kind: str, width: int) -> list[int]:
    row = [(i * 0x9E3779B97F4A7C15) % P for i in range(width)]
    if kind == "marker":
        row = [(1 << 64) - 1] * width
    elif kind == "marker-last-0":
        row = [(1 << 64) - 1] * (width - 1) + [0]
    elif kind == "p-first":
        row[0] = P
    elif kind == "p-last":
        row[-1] = P
    elif kind == "2^64-1-one":
        row[width // 2] = (1 << 64) - 1
    elif kind == "2^63":
        row[1] = 1 << 63
    return row


def _answer_outcomes() -> dict[str, str]:
    """``parse_verifier_messages`` of two devices' rows of every pair of kinds (keys 5), as bytes,
    bytearray and memoryview, for 1, 2 and 3 devices, one byte short and one over."""
    params = S.SketchParams(5)
    out = {}
    for kinds in itertools.product(_ROWS, repeat=2):
        body = b"".join(w.to_bytes(8, "little") for k in kinds for w in _verifier_row(k, params.verifier_length))
        for name, n, data in (("bytes", 2, body), ("bytearray", 2, bytearray(body)),
                              ("memoryview", 2, memoryview(body)), ("n=1", 1, body), ("n=3", 3, body),
                              ("short", 2, body[:-1]), ("long", 2, body + b"\0")):
            read = _outcome(lambda n=n, data=data: S.parse_verifier_messages(params, data, n))
            out["+".join(kinds) + "/" + name] = read
    return out


def _expand_outcomes() -> dict[str, str]:
    out = {}
    for n, mp in ((0, 1), (1, 1), (1, 2), (3, 5), (5, 17), (9, 33)):
        e = K.expand([_stream(f"e{n}/{i}", 16) for i in range(n)], mp)
        out[f"{n}/{mp}"] = " ".join(_digest(a) for a in (e.keys, e.r, e.r2))
    return out


# --- the range proof (helper F's batched verifier) ----------------------------------------------------------------

#: (rows, bits, ring bits, devices, cheaters, context lengths mixed); above 64 devices, two blocks
RANGE_CASES = [(1, 2, 32, 1, (), False), (3, 5, 32, 3, (0,), True), (3, 5, 32, 4, (3,), False),
               (7, 30, 32, 5, (0, 2, 4), True), (2, 3, 16, 2, (0, 1), False), (40, 26, 32, 3, (1,), True),
               (4, 8, 58, 7, (6,), True), (1, 2, 32, 70, (0, 63, 64, 69), True), (2, 3, 32, 66, (64,), False)]


def _range_round(rows: int, bits: int, ring_bits: int, n: int, cheats: tuple[int, ...], mixed: bool) -> tuple:
    """Deterministic devices' messages: params, contexts, ring shares a (server 0) and b (server 1),
    msgs0, msgs1; a cheater proves its honest witness with one element one more."""
    params = R.RangeParams(rows, bits, ring_bits)
    tag = f"r{rows}b{bits}k{ring_bits}n{n}"
    half, mask = 1 << (bits - 1), (1 << ring_bits) - 1
    contexts, a_rows, b_rows, msgs0, msgs1 = [], [], [], [], []
    for d in range(n):
        values = [v % (2 * half) - half for v in _ints(f"{tag}/v{d}", rows)]
        values[d % rows] = (-half, half - 1, 0)[d % 3]  # the range's ends
        a = [v & mask for v in _ints(f"{tag}/a{d}", rows)]
        b = [(v - x) & mask for v, x in zip(values, a, strict=True)]
        context = f"{tag}/device {d}".encode() + (b"+" * d if mixed else b"")
        aa, bb = np.array(a, np.uint64), np.array(b, np.uint64)
        if d in cheats:
            x = R._witness(params, aa, bb)
            x[(7 * d) % len(x)] = (int(x[(7 * d) % len(x)]) + 1) % P
            m0, m1 = R._prove_witness(params, x, R._context(context), _rng(f"{tag}/p{d}"))
        else:
            m0, m1 = R.prove(params, aa, bb, context, _rng=_rng(f"{tag}/p{d}"))
        contexts.append(context)
        a_rows.append(aa)
        b_rows.append(bb)
        msgs0.append(m0)
        msgs1.append(m1)
    return params, contexts, np.array(a_rows), np.array(b_rows), msgs0, msgs1


def _range_outcomes(rows: int, bits: int, ring_bits: int, n: int, cheats: tuple[int, ...], mixed: bool) -> dict:
    params, contexts, a, b, msgs0, msgs1 = _range_round(rows, bits, ring_bits, n, cheats, mixed)
    s0, s1 = R.parse(params, 0, msgs0), R.parse(params, 1, msgs1)
    out: dict[str, object] = {}
    for seed in (_stream(f"q{rows}/{n}", 16), _stream(f"q{rows}/{n}", 40)):
        v0 = R.verifier_messages(params, 0, s0, a, contexts, seed)
        v1 = R.verifier_messages(params, 1, s1, b.astype(np.uint32) if ring_bits <= 32 else b, contexts, seed)
        hinted = R.verifier_messages(params, 0, s0, a, contexts, seed, parts=R.hints_of(params, contexts, msgs0))
        seeded = R.verifier_messages(params, 1, s1, b, contexts, seed,
                                     parts=R.seed_parts(contexts, [m[:16] for m in msgs1]))
        assert np.array_equal(hinted, v0) and np.array_equal(seeded, v1)  # the parts given: the same messages
        as_bytearrays = R.verifier_messages(params, 0, s0, a, [bytearray(c) for c in contexts], seed)
        assert np.array_equal(as_bytearrays, v0)
        got = R.parse_verifier_messages(params, F.to_bytes(v1), n)
        jr = v1.copy()
        jr[n // 2, -1] ^= np.uint64(1 << 63)  # server 1's jr word of one device off
        bent = v1.copy()
        bent[n - 1, 1] = (int(bent[n - 1, 1]) + 1) % P  # server 1's wire share of the last device off
        key = len(seed)
        out[f"arrays/{key}"] = f"{_digest(v0)} {_digest(v1)} {_digest(got)}"
        out[f"decide/{key}"] = R.decide(params, v0, got).tolist()
        out[f"jr/{key}"] = R.decide(params, v0, jr).tolist()
        out[f"bent/{key}"] = R.decide(params, v0, bent).tolist()
    return out


def _put_word(data: bytes, at: int, word: int) -> bytes:
    return _put(data, at, word)


def _range_answer_outcomes() -> dict[str, str]:
    """``parse_verifier_messages`` and ``decide`` on server 1's answer (3 devices) with one word
    replaced -- in the opened field elements or the ``jr`` words, of the first, middle or last
    device, by ``p - 1``, ``p``, ``2^61``, ``2^63``, ``2^64 - 1`` -- as bytes and memoryview, cut
    and extended; ``decide`` with ``v0`` and ``v1`` swapped, of another batch size, other dtypes."""
    params, contexts, a, b, msgs0, msgs1 = _range_round(3, 5, 32, 3, (1,), True)
    seed = _stream("answer", 16)
    v0 = R.verifier_messages(params, 0, R.parse(params, 0, msgs0), a, contexts, seed)
    v1 = R.verifier_messages(params, 1, R.parse(params, 1, msgs1), b, contexts, seed)
    body = F.to_bytes(v1)
    width = params.verifier_length
    out = {}
    for d, at, word in itertools.product((0, 1, 2), (0, params.opened_length - 1, params.opened_length, width - 1),
                                         (P - 1, P, 1 << 61, 1 << 63, (1 << 64) - 1)):
        data = _put_word(body, d * width + at, word)
        for name, n, blob in (("bytes", 3, data), ("memoryview", 3, memoryview(data)), ("n=2", 2, data),
                              ("short", 3, data[:-1]), ("long", 3, data + bytes(8))):
            def decided(n: int = n, blob: bytes = blob) -> np.ndarray:
                return R.decide(params, v0[:n], R.parse_verifier_messages(params, blob, n))
            out[f"{d}/{at}/{word}/{name}"] = _outcome(decided)
        bad = np.frombuffer(data, "<u8").astype(np.uint64).reshape(3, width)
        out[f"{d}/{at}/{word}/decide v1"] = _outcome(lambda bad=bad: R.decide(params, v0, bad))
        out[f"{d}/{at}/{word}/decide v0"] = _outcome(lambda bad=bad: R.decide(params, bad, v1))
        out[f"{d}/{at}/{word}/decide both"] = _outcome(lambda bad=bad: R.decide(params, bad, bad))
    out["other n"] = _outcome(lambda: R.decide(params, v0, v1[:2]))
    out["int64"] = _outcome(lambda: R.decide(params, v0, v1.astype(np.int64)))
    out["1-d"] = _outcome(lambda: R.decide(params, v0, v1[0]))
    out["str"] = _outcome(lambda: R.parse_verifier_messages(params, "x" * len(body), 3))
    out["none"] = _outcome(lambda: R.parse_verifier_messages(params, None, 3))  # type: ignore[arg-type]
    return out


def _range_refusal_outcomes() -> dict[str, str]:
    """``verifier_messages``' argument checks (their errors, or the messages where taken): ring
    shares negative, at ``2^k``, of other integer dtypes, bool, float, of another shape; contexts
    and parts of the wrong count or type; short and bytearray query seeds; the other server's shares;
    no devices."""
    params, contexts, a, b, msgs0, msgs1 = _range_round(3, 5, 32, 3, (), False)
    s0, s1 = R.parse(params, 0, msgs0), R.parse(params, 1, msgs1)
    seed = _stream("refusals", 16)
    parts = R.hints_of(params, contexts, msgs0)
    out = {}
    rings: dict[str, np.ndarray] = {"uint32": a.astype(np.uint32), "int64": a.astype(np.int64),
                                    "uint16 wraps": a.astype(np.uint16), "bool": a.astype(bool),
                                    "float": a.astype(float), "1-d": a[0], "transposed": np.ascontiguousarray(a.T)}
    for d in (0, 2):
        neg = a.astype(np.int64)
        neg[d, -1] = -1
        big = a.copy()
        big[d, 0] = 1 << 32
        int8 = a.astype(np.int8)
        int8[d, 1] = -128
        rings |= {f"negative@{d}": neg, f"2^k@{d}": big, f"int8@{d}": int8}
    for name, ring in rings.items():
        out[f"ring {name}"] = _outcome(lambda ring=ring: R.verifier_messages(params, 0, s0, ring, contexts, seed))
    for name, kw in {"parts short": {"parts": [*parts[:2], parts[2][:31]]}, "parts n-1": {"parts": parts[:2]},
                     "parts bytearray": {"parts": [bytearray(x) for x in parts]}, "parts given": {"parts": parts},
                     "contexts str": {"contexts": [*contexts[:2], "x"]}, "contexts n+1": {"contexts": [*contexts, b""]},
                     "seed 15": {"query_seed": seed[:15]}, "seed bytearray": {"query_seed": bytearray(seed)},
                     "seed str": {"query_seed": "x" * 16}, "server 1's shares": {"shares": s1},
                     "party 2": {"party": 2}}.items():
        args = {"party": 0, "shares": s0, "ring_shares": a, "contexts": contexts, "query_seed": seed} | kw
        out[name] = _outcome(lambda args=args: R.verifier_messages(params, **args))
    none = R.parse(params, 0, [])
    out["no devices"] = _outcome(lambda: R.verifier_messages(params, 0, none, a[:0], [], seed))
    out["no devices decide"] = _outcome(lambda: R.decide(params, np.zeros((0, params.verifier_length), np.uint64),
                                                         np.zeros((0, params.verifier_length), np.uint64)))
    return out


def _group(outcomes: dict[str, str]) -> str:
    """One digest of a group of outcomes (the keys and the outcomes)."""
    return hashlib.sha256(json.dumps(outcomes, sort_keys=True).encode()).hexdigest()[:16]


def outcomes() -> dict[str, object]:
    """Every outcome :data:`REFERENCE` holds, under the importable ``secemb`` and its backend."""
    got: dict[str, object] = {f"round {c}": _round_outcomes(*c) for c in CASES}
    got["parse"] = _group(_parse_outcomes())
    got["answers"] = _group(_answer_outcomes())
    got["expand"] = _expand_outcomes()
    for case in RANGE_CASES:
        got[f"range {case}"] = _range_outcomes(*case)
    got["range answers"] = _group(_range_answer_outcomes())
    got["range refusals"] = _range_refusal_outcomes()
    return got


#: the outcomes of 27f20c0 (session 32's numpy reference) on :func:`outcomes`' inputs (module docstring)
REFERENCE: dict[str, object] = {
    "answers": "bc297a9b46653e3b",
    "expand": {
        "0/1": "f76fce0014cd7766 3f1c9cf785329e83 3f1c9cf785329e83",
        "1/1": "6c6eee4cf1b4acdb 7183a58aac736355 90388bd0069fc37e",
        "1/2": "6c6eee4cf1b4acdb 114b63e04b535a6c 43e552e69796a51f",
        "3/5": "f93cdd18acf8f7f1 7067746971667587 2084ea2097476bdd",
        "5/17": "24bd74ef4aeb2d76 21fa765a5cc66711 9e6e24a6be2d9f57",
        "9/33": "3338fe8886603c93 05ecfa2ac8d70f48 2fdac30d73a6df3e",
    },
    "parse": "7aa7fb79e79d4f04",
    "range (1, 2, 32, 1, (), False)": {
        "arrays/16": "6172e28eaef9d0e0 03209ed414f25775 03209ed414f25775",
        "arrays/40": "aff7c30a95252adb 4bb2675115b7c471 4bb2675115b7c471",
        "bent/16": [False],
        "bent/40": [False],
        "decide/16": [True],
        "decide/40": [True],
        "jr/16": [False],
        "jr/40": [False],
    },
    "range (1, 2, 32, 70, (0, 63, 64, 69), True)": {
        "arrays/16": "6b28da6ad145a97e cf57e47fdf29261d cf57e47fdf29261d",
        "arrays/40": "d066c5deb503a378 0b0a2124a4bf426e 0b0a2124a4bf426e",
        "bent/16": [
            False, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, False, False, True, True, True,
            True, False,
        ],
        "bent/40": [
            False, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, False, False, True, True, True,
            True, False,
        ],
        "decide/16": [
            False, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, False, False, True, True, True,
            True, False,
        ],
        "decide/40": [
            False, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, False, False, True, True, True,
            True, False,
        ],
        "jr/16": [
            False, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, False, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, False, False, True, True, True,
            True, False,
        ],
        "jr/40": [
            False, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, False, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, False, False, True, True, True,
            True, False,
        ],
    },
    "range (2, 3, 16, 2, (0, 1), False)": {
        "arrays/16": "f059add1a0b556bb 7e723b2bba36d905 7e723b2bba36d905",
        "arrays/40": "ae2e0c251b7219cf 97f7814b9e8a6b5a 97f7814b9e8a6b5a",
        "bent/16": [False, False],
        "bent/40": [False, False],
        "decide/16": [False, False],
        "decide/40": [False, False],
        "jr/16": [False, False],
        "jr/40": [False, False],
    },
    "range (2, 3, 32, 66, (64,), False)": {
        "arrays/16": "cc964e58a985078e f6f54060e3b7a509 f6f54060e3b7a509",
        "arrays/40": "b7b75edc5069acc2 07499ab54da63d9b 07499ab54da63d9b",
        "bent/16": [
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, False, False,
        ],
        "bent/40": [
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, False, False,
        ],
        "decide/16": [
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, False, True,
        ],
        "decide/40": [
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, False, True,
        ],
        "jr/16": [
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, False,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, False, True,
        ],
        "jr/40": [
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, False,
            True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True,
            True, True, True, True, True, True, True, True, True, True, True, True, True, False, True,
        ],
    },
    "range (3, 5, 32, 3, (0,), True)": {
        "arrays/16": "44ea82a147acb3cd 66fc2f9c0d1eb48e 66fc2f9c0d1eb48e",
        "arrays/40": "599a1f36f4be6cc7 5b3282e4ae15920c 5b3282e4ae15920c",
        "bent/16": [False, True, False],
        "bent/40": [False, True, False],
        "decide/16": [False, True, True],
        "decide/40": [False, True, True],
        "jr/16": [False, False, True],
        "jr/40": [False, False, True],
    },
    "range (3, 5, 32, 4, (3,), False)": {
        "arrays/16": "09b8fa81b3244305 8feefad256bb850d 8feefad256bb850d",
        "arrays/40": "970c113e3c3f320f b46650c9a3d9d693 b46650c9a3d9d693",
        "bent/16": [True, True, True, False],
        "bent/40": [True, True, True, False],
        "decide/16": [True, True, True, False],
        "decide/40": [True, True, True, False],
        "jr/16": [True, True, False, False],
        "jr/40": [True, True, False, False],
    },
    "range (4, 8, 58, 7, (6,), True)": {
        "arrays/16": "6fcc1840a7e5f05a 7728d3f7fa43f127 7728d3f7fa43f127",
        "arrays/40": "80a512b901c4db1c e4d37d7194a9d95e e4d37d7194a9d95e",
        "bent/16": [True, True, True, True, True, True, False],
        "bent/40": [True, True, True, True, True, True, False],
        "decide/16": [True, True, True, True, True, True, False],
        "decide/40": [True, True, True, True, True, True, False],
        "jr/16": [True, True, True, False, True, True, False],
        "jr/40": [True, True, True, False, True, True, False],
    },
    "range (40, 26, 32, 3, (1,), True)": {
        "arrays/16": "38bd27ad183f54eb ccac6734919e6cb4 ccac6734919e6cb4",
        "arrays/40": "a61312a4f0ab756d 9499309f4b6249e4 9499309f4b6249e4",
        "bent/16": [True, False, False],
        "bent/40": [True, False, False],
        "decide/16": [True, False, True],
        "decide/40": [True, False, True],
        "jr/16": [True, False, True],
        "jr/40": [True, False, True],
    },
    "range (7, 30, 32, 5, (0, 2, 4), True)": {
        "arrays/16": "5239998f2bcc5bd8 3fc381dd21ab64cf 3fc381dd21ab64cf",
        "arrays/40": "2f74288361586668 4309a6e185190dfb 4309a6e185190dfb",
        "bent/16": [False, True, False, True, False],
        "bent/40": [False, True, False, True, False],
        "decide/16": [False, True, False, True, False],
        "decide/40": [False, True, False, True, False],
        "jr/16": [False, True, False, True, False],
        "jr/40": [False, True, False, True, False],
    },
    "range answers": "fbb5f6976bee28f2",
    "range refusals": {
        "contexts n+1": "InvalidParameters: contexts must be 3 bytes objects",
        "contexts str": "InvalidParameters: contexts must be 3 bytes objects",
        "no devices": "ab33e07683193d80",
        "no devices decide": "de6fe40a18e48c19",
        "parts bytearray": "InvalidParameters: parts must be 3 bytes objects of 32 bytes",
        "parts given": "a52ffce069f1d7ca",
        "parts n-1": "InvalidParameters: parts must be 3 bytes objects of 32 bytes",
        "parts short": "InvalidParameters: parts must be 3 bytes objects of 32 bytes",
        "party 2": "InvalidParameters: shares are server 0's, not server 2's",
        "ring 1-d": "InvalidParameters: ring_shares must be an integer array (3, 3), got uint64 (3,)",
        "ring 2^k@0": "InvalidParameters: ring_shares must hold ring elements in [0, 2^32)",
        "ring 2^k@2": "InvalidParameters: ring_shares must hold ring elements in [0, 2^32)",
        "ring bool": "InvalidParameters: ring_shares must be an integer array (3, 3), got bool (3, 3)",
        "ring float": "InvalidParameters: ring_shares must be an integer array (3, 3), got float64 (3, 3)",
        "ring int64": "a52ffce069f1d7ca",
        "ring int8@0": "InvalidParameters: ring_shares must hold ring elements in [0, 2^32)",
        "ring int8@2": "InvalidParameters: ring_shares must hold ring elements in [0, 2^32)",
        "ring negative@0": "InvalidParameters: ring_shares must hold ring elements in [0, 2^32)",
        "ring negative@2": "InvalidParameters: ring_shares must hold ring elements in [0, 2^32)",
        "ring transposed": "3df40a37bae06f66",
        "ring uint16 wraps": "b59fd4e1b2263b31",
        "ring uint32": "a52ffce069f1d7ca",
        "seed 15": "InvalidParameters: query_seed must be at least 16 bytes",
        "seed bytearray": "a52ffce069f1d7ca",
        "seed str": "InvalidParameters: query_seed must be at least 16 bytes",
        "server 1's shares": "InvalidParameters: shares are server 1's, not server 0's",
    },
    "round (1, 1, ())": {
        "arrays": "ffc5ad047e135223 a01c8c0de717edbd f28969da0d91bf63 54eac922a039d782 51cfa32fece0135f",
        "bent": [False],
        "decide": [True],
        "inputs": "8b983babb627fea7 3aa15a054748c901",
        "parsed": "e02f4f1c2547eecc da5be5a0410ee1ed",
        "verify": [True],
    },
    "round (1, 1, (0,))": {
        "arrays": "bb909d727f4f6850 55e635694e3bface 464e92106c86170b f9eb6a091dc876d7 51cfa32fece0135f",
        "bent": [False],
        "decide": [False],
        "inputs": "1f1db1417930f11b 24c92316861f587e",
        "parsed": "e02f4f1c2547eecc da5be5a0410ee1ed",
        "verify": [False],
    },
    "round (1, 3, (0,))": {
        "arrays": "3870f29143cf2511 da384849cf94bf88 7f7a278e96dc7dd2 fde85ce18dd7e50c 3346ecedee27db8a",
        "bent": [False, True, False],
        "decide": [False, True, True],
        "inputs": "6b7148c1095d63d1 26468e1972c8c167",
        "parsed": "78a87ba5a72766dd f29da2a27b1a663b",
        "verify": [False, True, True],
    },
    "round (100, 2, (0,))": {
        "arrays": "b6c1ef35052f50c5 3e42dee3d2be29a2 85767aa3640e1c2c 64b625e79cbf6dd4 336337b9e23ad577",
        "bent": [False, False],
        "decide": [False, True],
        "inputs": "0b94231e06242c10 990dfc787d5f4e4d",
        "parsed": "b62bcf47693546b2 656471c6168b0a95",
        "verify": [False, True],
    },
    "round (17, 7, (0, 3, 6))": {
        "arrays": "17e39e27af973da7 4c8c0255c6ea694a 4880cb18f6713fbd a1f4e778724853a2 caf989aa0e7d945b",
        "bent": [False, True, True, False, False, True, False],
        "decide": [False, True, True, False, True, True, False],
        "inputs": "32030e63eb386b0a d64a110a26f6a3cb",
        "parsed": "2b49f2afd0e1b071 053da4325d38456a",
        "verify": [False, True, True, False, True, True, False],
    },
    "round (2, 2, (1,))": {
        "arrays": "a9e2715b5e0b6ef9 0e8bd1f7815ad044 2ae8f7bd539723cc f4d482ac4386b0bc 429f00076905389e",
        "bent": [False, False],
        "decide": [True, False],
        "inputs": "532d46759060f1a9 c4cb568a019d4cd8",
        "parsed": "08f36480b51a7d73 656471c6168b0a95",
        "verify": [True, False],
    },
    "round (3, 5, (0, 4))": {
        "arrays": "459c8d62ba8c693a b884aca957d4c50f a2692611bc7a5951 2f222a23bc72d481 ff0cf1798ae37097",
        "bent": [False, True, False, True, False],
        "decide": [False, True, True, True, False],
        "inputs": "915ee233879aba38 68e2e43e586b2cdb",
        "parsed": "58d67a8c52913e2d 28b44770f58a36a4",
        "verify": [False, True, True, True, False],
    },
    "round (5, 3, (0, 1, 2))": {
        "arrays": "edd9104704cb376c 77a73168c05e739a 8f42fce8755fbc86 0b5d8ee8dddd22fa 00fe777626bbf9a2",
        "bent": [False, False, False],
        "decide": [False, False, False],
        "inputs": "ca3005226f448751 80ef71c1c3fce638",
        "parsed": "0aff889792a75a6f f29da2a27b1a663b",
        "verify": [False, False, False],
    },
    "round (5, 4, (2,))": {
        "arrays": "a312906c0a74be36 f7f8db964d1556d7 31a282ded18c3dd0 0eb2422099c1848b 685a2caccf9bcd2b",
        "bent": [True, False, False, True],
        "decide": [True, True, False, True],
        "inputs": "e748bb6c386c5fb2 fcb41898f0b5fdbb",
        "parsed": "96d069f6ded9c4c7 7e5e4b95d5fa6fe8",
        "verify": [True, True, False, True],
    },
    "round (64, 3, (2,))": {
        "arrays": "1aa1168ad3e379ee d36f74fbbfc876dd bd962d8a6ba7f424 4b01063ec96f80c3 93d43806b1dccea9",
        "bent": [True, False, False],
        "decide": [True, True, False],
        "inputs": "d8c93a6a78a951b8 7cafb2188d341cfd",
        "parsed": "d4b1f341cc35d69f f29da2a27b1a663b",
        "verify": [True, True, False],
    },
}

# --- tests -------------------------------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(kernels, "BACKEND", request.param)
    return request.param


def test_every_sketch_path_gives_session_32s_outcomes(backend: str) -> None:
    """parse, server1_shares, verifier_messages (both servers), verify, decide, encode and
    parse_verifier_messages, server_inputs and expand: 27f20c0's words, verdicts and errors
    (:data:`REFERENCE`) on each backend.  The verdicts are also the statement's: the cheaters fail,
    an honest device fails only where server 1's message of it was bent."""
    for case in CASES:
        keys, n, cheats = case
        mine = _round_outcomes(*case)
        assert mine["verify"] == mine["decide"] == [d not in cheats for d in range(n)], case
        assert mine == REFERENCE[f"round {case}"], case
    if _group(_parse_outcomes()) != REFERENCE["parse"]:
        pytest.fail(f"parse differs from 27f20c0's: {_parse_outcomes()}")
    if _group(_answer_outcomes()) != REFERENCE["answers"]:
        pytest.fail(f"parse_verifier_messages differs from 27f20c0's: {_answer_outcomes()}")
    assert _expand_outcomes() == REFERENCE["expand"]


def test_every_range_path_gives_session_32s_outcomes(backend: str) -> None:
    """The range proof's verifier_messages at both servers (parts hashed or given; contexts of one
    length and mixed; query seeds of 16 and 40 bytes), parse_verifier_messages and decide: 27f20c0's
    words and verdicts on each backend, the cheaters (first, last, middle, all) failing and an honest
    device failing only where server 1's ``jr`` or a wire share of it was bent; server 1's answers with
    a word replaced (field elements and ``jr``, every device, ``p - 1`` to ``2^64 - 1``), cut,
    extended or of other shapes: 27f20c0's errors and verdicts."""
    for case in RANGE_CASES:
        mine = _range_outcomes(*case)
        n, cheats = case[3], case[4]
        for key in ("decide/16", "decide/40"):
            assert mine[key] == [d not in cheats for d in range(n)], case
        assert mine == REFERENCE[f"range {case}"], case
    if _group(_range_answer_outcomes()) != REFERENCE["range answers"]:
        pytest.fail(f"the range answers' outcomes differ from 27f20c0's: {_range_answer_outcomes()}")
    assert _range_refusal_outcomes() == REFERENCE["range refusals"]


def _shares_of(params: S.SketchParams, xs: np.ndarray, msgs_of: Callable[[int], bytes] | None = None) -> tuple:
    """Random shares of the sketches ``xs`` (n, K, 3) and the devices' proof shares: x0, x1, seeds,
    sigmas, queries, messages (``msgs_of(d)`` replaces device ``d``'s where it returns bytes)."""
    n = len(xs)
    seeds, sigmas, queries = ([secrets.token_bytes(16) for _ in range(n)] for _ in range(3))
    msgs = [S._share(params, S._prove_inputs(params, x, c, s, secrets.token_bytes), s)
            for x, c, s in zip(xs, seeds, sigmas, strict=True)]
    x0 = np.array([secrets.randbelow(P) for _ in range(xs.size)], np.uint64).reshape(xs.shape)
    x0.reshape(-1)[:: 1 + secrets.randbelow(9)] = P - 1
    return x0, F.sub(xs, x0), seeds, sigmas, queries, msgs


@pytest.mark.parametrize("trial", range(6))
def test_mixed_batches_name_exactly_the_cheaters(trial: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random batches (1 to 9 devices, 1 to 40 keys) of honest devices and cheaters (one key's A, B
    or C off by a random amount; a valid proof share bumped by one at a random element; server 1's
    message bumped; server 1 refusing it), the cheaters anywhere: on each backend ``verify`` and
    ``decide`` of both servers' messages fail exactly the cheaters, and both backends give the same
    messages."""
    n, keys = 1 + secrets.randbelow(9), 1 + secrets.randbelow(40)
    params = S.SketchParams(keys)
    xs = np.array([_honest(secrets.token_hex(8), keys) for _ in range(n)], np.uint64).reshape(n, keys, 3)
    how = [secrets.choice(["honest", "honest", "key", "proof", "message", "refused"]) for _ in range(n)]
    how[secrets.choice([0, n - 1])] = secrets.choice(["key", "proof", "message", "refused"])  # one at an end
    for d in np.flatnonzero(np.array(how) == "key").tolist():
        at, w = secrets.randbelow(keys), secrets.randbelow(3)
        xs[d, at, w] = (int(xs[d, at, w]) + 1 + secrets.randbelow(P - 1)) % P
    x0, x1, seeds, sigmas, queries, msgs = _shares_of(params, xs)
    for d in np.flatnonzero(np.array(how) == "proof").tolist():
        at = secrets.randbelow(params.proof_length)
        msgs[d] = _put(msgs[d], at, (int.from_bytes(msgs[d][8 * at : 8 * at + 8], "little") + 1) % P)
    refused = np.array(how) == "refused"
    bumps = [(d, secrets.randbelow(params.verifier_length), 1 + secrets.randbelow(P - 1))
             for d in np.flatnonzero(np.array(how) == "message").tolist()]
    messages = {}
    for name in BACKENDS:
        monkeypatch.setattr(kernels, "BACKEND", name)
        v1 = S.verifier_messages(params, x1, S.server1_shares(params, sigmas), seeds, queries)
        for d, at, by in bumps:
            v1[d, at] = (int(v1[d, at]) + by) % P
        got_v1, got_refused = S.parse_verifier_messages(params, S.encode_verifier_messages(params, v1, refused), n)
        assert got_refused.tolist() == refused.tolist()
        p0 = S.parse(params, msgs)
        verdicts = S.verify(params, x0, p0, seeds, queries, got_v1) & ~got_refused
        v0 = S.verifier_messages(params, x0, p0, seeds, queries)
        assert verdicts.tolist() == [h == "honest" for h in how], (name, how)
        assert (S.decide(params, v0, got_v1, seeds) & ~got_refused).tolist() == verdicts.tolist()
        messages[name] = (v0, got_v1)
    for a, b in zip(messages["numpy"], messages[BACKENDS[-1]], strict=True):
        assert np.array_equal(a, b)


def test_odd_layouts_give_the_same_verdicts(backend: str) -> None:
    """The verifier's array arguments as Fortran-order, reversed-and-reversed-back, strided and
    read-only views: the verdicts and messages of the C-contiguous arrays (the compiled call reads by
    address after ``ascontiguousarray``)."""
    params, x0, x1, seeds, sigmas, queries, msgs = _round(7, 5, (1, 4))
    p0, p1 = S.parse(params, msgs), S.server1_shares(params, sigmas)
    v1 = S.verifier_messages(params, x1, p1, seeds, queries)
    want = S.verify(params, x0, p0, seeds, queries, v1).tolist()
    assert want == [True, False, True, True, False]
    wide = np.zeros((5, 2 * params.verifier_length), np.uint64)
    wide[:, ::2] = v1
    ro = v1.copy()
    ro.setflags(write=False)
    for view in (np.asfortranarray, lambda a: a[::-1][::-1], lambda a: a.copy(order="F")):
        assert S.verify(params, view(x0), view(p0), seeds, queries, view(v1)).tolist() == want
        assert np.array_equal(S.verifier_messages(params, view(x1), view(p1), seeds, queries), v1)
    assert S.verify(params, x0, p0, seeds, queries, wide[:, ::2]).tolist() == want
    assert S.verify(params, x0, p0, seeds, queries, ro).tolist() == want
    assert S.verify(params, x0[::-1], p0[::-1], seeds[::-1], queries[::-1], v1[::-1]).tolist() == want[::-1]


@pytest.mark.parametrize("word", [P, P + 1, 1 << 61, 1 << 63, (1 << 64) - 1])
def test_non_canonical_elements_are_refused_in_process(backend: str, word: int) -> None:
    """An element at ``p`` or above in either server's input shares, the proof shares or server 1's
    messages, at the first device or the last: refused (InvalidParameters / InvalidMessage) on each
    backend, nothing computed on it."""
    params, x0, _, seeds, _, queries, msgs = _round(3, 3, (1,))
    p0 = S.parse(params, msgs)
    v1 = np.zeros((3, params.verifier_length), np.uint64)
    for d in (0, 2):
        for name, arr, err in (("x", x0, InvalidParameters), ("proofs", p0, InvalidParameters),
                               ("v1", v1, InvalidMessage)):
            bad = arr.copy()
            bad.reshape(len(bad), -1)[d, -1] = word
            args = {"x": x0, "proofs": p0, "v1": v1, name: bad}
            with pytest.raises(err):
                S.verify(params, args["x"], args["proofs"], seeds, queries, args["v1"])
            if name != "v1":
                with pytest.raises(err):
                    S.verifier_messages(params, args["x"], args["proofs"], seeds, queries)
        with pytest.raises(InvalidParameters):
            K.server_inputs_many([x0[0], x0[1], np.full((3, 3), word, np.uint64)][:: 1 if d else -1], 1)


@pytest.mark.parametrize("party", [0, 1])
def test_server_inputs_many_leaves_the_callers_arrays_alone(backend: str, party: int) -> None:
    """The batch's shares are ``server_inputs`` of each device's values (server 1: ``p - v``, 0 for
    0, in Python integers here), the devices' own arrays unchanged (also when a later device is
    refused mid-pass), any byte order read by value."""
    rows = [[0, 1, P - 1], [P - 2, 2, 0], [1 << 60, (1 << 61) - 2, 5]]
    a = np.array(rows, np.uint64)
    b = np.array(rows[::-1], ">u8")
    c = np.array(rows[1:] + rows[:1], np.uint64)
    kept = [a.copy(), b.copy(), c.copy()]
    got = K.server_inputs_many([a, b, c], party)
    want = [[[(-v) % P if party else v for v in r] for r in m] for m in (rows, rows[::-1], rows[1:] + rows[:1])]
    assert got.dtype == np.uint64 and got.tolist() == want
    bad = c.copy()
    bad[2, 2] = P
    with pytest.raises(InvalidParameters):
        K.server_inputs_many([a, b, bad], party)
    for x, k in zip((a, b, c), kept, strict=True):
        assert x.dtype == k.dtype and np.array_equal(x, k)
    assert K.server_inputs(a, party).tolist() == want[0] and np.array_equal(a, kept[0])
    for odd in (np.zeros((3, 4), np.uint64), np.zeros((3, 2), np.uint64), np.zeros((3, 3), np.int64),
                np.zeros((3, 3), float)):  # another width or a dtype that does not stack to uint64: refused
        for batch in ([odd, a], [a, odd], [odd]):
            with pytest.raises(InvalidParameters):
                K.server_inputs_many(batch, party)
        with pytest.raises(InvalidParameters):
            K.server_inputs(odd, party)


# --- the affine projections (helper V: byte planes straight from the parts) -------------------------------------


def _affine_case(dtype: type, n: int, slots: int, width: int, dense: int, layout: str) -> list[tuple]:
    """``n`` devices' affine parts: words at the ring's extremes, counts of several integer dtypes
    with their extremes (negative ones wrap as ``astype`` does), in the ``layout`` asked (device 0, 1
    or the last one's arrays made Fortran-order, reversed, strided or read-only views)."""
    bits = np.dtype(dtype).itemsize * 8
    out = []
    for d in range(n):
        base = np.frombuffer(secrets.token_bytes(slots * width * bits // 8), dtype).reshape(slots, width).copy()
        words = np.frombuffer(secrets.token_bytes(slots * width * bits // 8), dtype).reshape(slots, width).copy()
        base.reshape(-1)[:: 3] = np.iinfo(dtype).max
        words.reshape(-1)[1::4] = np.iinfo(dtype).max
        count = np.array([secrets.randbelow(1 << 20) - (1 << 19) for _ in range(slots)], np.int64)
        if slots:
            count[0] = np.iinfo(np.int64).min if slots > 1 else -1
        count = count.astype((np.int64, np.int8, np.uint16, np.uint64)[d % 4])
        tail = np.frombuffer(secrets.token_bytes(dense * bits // 8), dtype).copy()
        if layout != "contiguous" and d in {0, 1, n - 1} - ({0} if layout.endswith("later") else set()):
            if layout.startswith("fortran"):
                base, words = np.asfortranarray(base), np.asfortranarray(words)
            elif layout.startswith("reversed"):
                base, words = base[::-1].copy()[::-1], words[:, ::-1].copy()[:, ::-1]
                count = count[::-1].copy()[::-1]
            elif layout.startswith("strided"):
                wide = np.zeros((slots, 2 * width), dtype)
                wide[:, ::2] = words
                words = wide[:, ::2]
                long = np.zeros(2 * dense, dtype)
                long[::2] = tail
                tail = long[::2]
            elif layout.startswith("read-only"):
                for a in (base, words, tail):
                    a.setflags(write=False)
        out.append((base, count, words, tail))
    return out


def _affine_spec(parts: list[tuple], negate: bool, dtype: type) -> np.ndarray:
    """The vectors of the parts in Python integers: ``((-1)^negate (base + count words)).ravel() || tail mod 2^k``."""
    modulus = 1 << (np.dtype(dtype).itemsize * 8)
    rows = []
    for base, count, words, tail in parts:
        sign = -1 if negate else 1
        affine = [sign * (int(b) + int(c) * int(w)) % modulus
                  for brow, c, wrow in zip(base.tolist(), count.tolist(), words.tolist(), strict=True)
                  for b, w in zip(brow, wrow, strict=True)]
        rows.append(affine + [int(t) for t in tail.tolist()])
    return np.array(rows, dtype)


@pytest.mark.parametrize(("dtype", "n", "slots", "width", "dense"), [
    (np.uint32, 1, 1, 1, 0), (np.uint32, 5, 4, 64, 1), (np.uint64, 3, 2, 127, 3), (np.uint32, 9, 3, 85, 2),
    (np.uint64, 2, 33, 7, 261), (np.uint64, 3, 0, 5, 3), (np.uint32, 4, 4, 0, 3)])
def test_project_affine_is_project_each_of_the_vectors(dtype: type, n: int, slots: int, width: int,
                                                       dense: int) -> None:
    """``project_affine`` on the compiled backend (byte planes straight from C-contiguous parts on
    AMX, the vectors' path for any other layout, also when a later device of a pass is the odd one)
    equals the numpy backend's ``project_each`` of the vectors formed here in Python integers --
    lengths around the planes' 256-word chunk and 4-word rows, 1 to 9 devices (passes of 2 and 4, a
    short last one), seeds shared and not, both signs, every layout."""
    from secemb.fss import projections

    seeds = [secrets.token_bytes(16) for _ in range(n)]
    if n > 2:
        seeds[1] = seeds[n - 1]  # one challenge for two devices
    for layout, negate in itertools.product(("contiguous", "fortran", "reversed", "strided", "read-only",
                                             "fortran-later", "strided-later"), (False, True)):
        parts = _affine_case(dtype, n, slots, width, dense, layout)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(kernels, "BACKEND", "numpy")
            want = projections.project_each(seeds, _affine_spec(parts, negate, dtype), 40)
        got = projections.project_affine(seeds, negate, parts, 40)
        assert got.dtype == want.dtype and np.array_equal(got, want), (negate, layout)


# --- findings ----------------------------------------------------------------------------------------------------


def test_server_inputs_many_of_an_array_is_its_rows() -> None:
    """S33-R1: an ndarray ``(n, K, 3)`` is a sequence of ``(K, 3)`` arrays: its rows' shares (or an
    InvalidParameters), never a bare ValueError."""
    values = np.array([[[1, 2, 3]], [[4, 5, 6]]], np.uint64)
    try:
        got = K.server_inputs_many(values, 0)
    except InvalidParameters:
        return
    assert got.tolist() == values.tolist()


@pytest.mark.parametrize("dtype", [np.uint32, np.uint8, bool])
def test_server_inputs_many_refuses_a_narrower_array_among_uint64_ones(dtype: type) -> None:
    """S33-R3: the contract is uint64 ``(K, 3)`` arrays (any byte order); a uint32, uint8 or bool array
    is refused alone (InvalidParameters) and must be among uint64 ones too, whichever its place."""
    a = np.zeros((3, 3), np.uint64)
    odd = np.zeros((3, 3), dtype)
    with pytest.raises(InvalidParameters):
        K.server_inputs_many([odd], 0)
    with pytest.raises(InvalidParameters):
        K.server_inputs_many([a, odd], 0)


def test_non_contiguous_memoryviews_are_refused_as_messages() -> None:
    """S33-R2: a bytes-like message that is not one C-contiguous buffer (``memoryview(b)[::2]`` of
    the right size) is refused with InvalidMessage by ``parse`` and ``parse_verifier_messages``."""
    params = S.SketchParams(5)
    with pytest.raises(InvalidMessage):
        S.parse(params, [memoryview(bytes(2 * params.proof_bytes))[::2]])
    with pytest.raises(InvalidMessage):
        S.parse_verifier_messages(params, memoryview(bytes(2 * params.verifier_bytes))[::2], 1)
    ranges = R.RangeParams(3, 5, 32)
    with pytest.raises(InvalidMessage):
        R.parse_verifier_messages(ranges, memoryview(bytes(2 * ranges.verifier_bytes))[::2], 1)
    with pytest.raises(InvalidMessage):
        R.parse(ranges, 0, [memoryview(bytes(2 * ranges.message_bytes(0)))[::2]])


if __name__ == "__main__":  # print the outcomes of the importable secemb: REFERENCE's source
    if len(sys.argv) > 1:
        kernels.BACKEND = sys.argv[1]
    json.dump(outcomes(), sys.stdout, indent=1, sort_keys=True)
    print()
