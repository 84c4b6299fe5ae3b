"""Red team of session 35's batch and kernel paths (task R), tests only: each new path against a
reference written here, never the code under test.

* ``hashing.sha256_many`` and ``hashing.hmac_sha256_many`` (written against helper K's wide SHA-256,
  ``_shani._compress_wide``, since reverted for its compile time; they hold for the SHA-NI rows too): :mod:`hashlib` / :func:`hmac.digest` at
  every count around a wide group (0, 1, 8, 9, 15, 16, 17, 24, 25, 31, 32, 33), message lengths at the
  padding edges, prefixes of 0..2 blocks, keys of 0..64 bytes (one key and a key a row), rows strided,
  reversed, read-only, broadcast (stride 0), Fortran-ordered; prefixes as ``bytes`` /
  ``memoryview``; the HMAC rows against guard pages (a child process).
* helper B's row stream (``_projection_kernels.ctr_streams``, ``_aesni.aes_ctr``) against
  ``cryptography``'s AES-128-CTR (its refusals of shapes and layouts; keys and rows against guard
  pages), ``projections._streams`` at every length around a pass; ``project_affine`` (``Products.
  project_parts``, ``affine_vectors`` / ``affine_tile_products``, ``_affine_uniform``) against the
  module docstring's specification computed here in Python integers modulo ``2^k`` (n = 1..9 devices,
  uint32 / uint64, negated or not, rows 0 / 1 / 40, tails of 0, parts of mixed layouts, counts of
  other integer dtypes and negative, one seed for all and a seed a device), and its refusals: every
  malformed part at the first, a middle and the last place refused with :class:`InvalidParameters`
  as c6d12e8's per-part check refused it (the list of cases below was run on c6d12e8 -- see
  :data:`REFUSED_ON_C6D12E8`), nothing returned.
* Protocol level (``Experiment``, bounded cuckoo, no relay, honest and four attacks of
  ``secemb.protocols.adversary.ATTACKS`` by 2 devices): the model digests and rejected devices of
  commit c6d12e8 (:data:`C6D12E8_RUNS`, recorded by running ``/tmp/r35/proto.py`` with
  ``PYTHONPATH=/tmp/base34``, a worktree of c6d12e8; main gave the same file).

The refusal and specification tests of ``project_affine`` pass on c6d12e8 too (``PYTHONPATH=/tmp/base34``).
Mutations (each in a scratch worktree of main, reverted; a test here failed for each; M1, M2 and M8 were
of helper K's reverted kernel): M1 one lane of a
wide group's output taken from lane 0; M2 one round constant of ``_compress_wide`` (round 63) off by one
bit; M3 ``ctr_streams``' counter of each pass ``j ^ 1``; M4 ``ctr_streams`` without its width check;
M5 ``_affine_uniform`` without its count-dtype check; M6 ``affine_vectors`` negating only a pass's first
device; M7 ``_streams`` returning the padded rows' end, not their start; M8 ``_sha_rows_wide``'s short
group reading past its last row instead of repeating it (the guard page); M9 ``upload_macs`` pairing
the sub-keys reversed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sys

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from guard_pages import run_guarded

from secemb.errors import InvalidParameters
from secemb.fss import kernels

SHA = pytest.mark.skipif(not kernels.sha_compiled(), reason="the SHA kernels need numba and SHA-NI")
COMPILED = pytest.mark.skipif(not kernels.compiled(), reason="the compiled kernels need numba and AES-NI")

#: batch sizes around a wide group (WIDE = 16, WIDE_LEAST = 9 on AVX-512)
COUNTS = (0, 1, 8, 9, 15, 16, 17, 24, 25, 31, 32, 33)


def _bytes(n: int) -> bytes:
    return os.urandom(n)


def _rows(n: int, length: int) -> np.ndarray:
    return np.frombuffer(_bytes(n * length), np.uint8).reshape(n, length).copy()


# --- SHA-256 and HMAC batches -------------------------------------------------------------------------------


def _views(n: int, length: int) -> list[np.ndarray]:
    """Rows (n, length) in the layouts a careless caller may pass."""
    wide = _rows(n, 2 * length + 3)
    ro = wide[:, 1 : 1 + length]
    ro.flags.writeable = False
    one = _rows(1, length)
    return [wide[:, :length], wide[::-1, 3 : 3 + length], ro, np.asfortranarray(wide[:, :length]),
            np.broadcast_to(one, (n, length)), wide[:, : 2 * length : 2]]


@SHA
@pytest.mark.parametrize("prefix_bytes", [0, 55, 65, 128])
def test_sha256_many_is_hashlib_around_wide_groups(prefix_bytes: int) -> None:
    from secemb.fss.hashing import sha256_many

    prefix = _bytes(prefix_bytes)
    for length in (0, 1, 31, 55, 56, 63, 64, 119, 120, 130):
        for n in COUNTS:
            for rows in _views(n, length):
                want = [hashlib.sha256(prefix + r.tobytes()).digest() for r in rows]
                got = sha256_many(prefix, rows)
                assert got.shape == (n, 32) and got.dtype == np.uint8
                assert [bytes(g) for g in got] == want, (prefix_bytes, length, n, rows.strides)


@SHA
def test_sha256_many_takes_a_memoryview_prefix_as_its_bytes() -> None:
    from secemb.fss.hashing import sha256_many

    prefix, rows = _bytes(70), _rows(17, 40)
    want = [hashlib.sha256(prefix + r.tobytes()).digest() for r in rows]
    for p in (memoryview(prefix), memoryview(b"x" + prefix)[1:]):
        assert [bytes(g) for g in sha256_many(p, rows)] == want


@SHA
@pytest.mark.parametrize("key_bytes", [0, 16, 33, 64])
def test_hmac_rows_are_hmac_digest_around_wide_groups(key_bytes: int) -> None:
    from secemb.fss.hashing import hmac_sha256_many

    for head in (b"", b"h" * 7, _bytes(64)):
        for length in (0, 32, 55, 56, 120):
            for n in COUNTS:
                keys, tails = _rows(n, key_bytes), _rows(n, length)
                for k in (keys, keys[:1]) if n else (keys,):
                    got = hmac_sha256_many(k, head, tails)
                    want = [hmac.digest(k[i % len(k)].tobytes(), head + tails[i].tobytes(), "sha256")
                            for i in range(n)]
                    assert [bytes(g) for g in got] == want, (key_bytes, len(head), length, n, len(k))


@SHA
def test_hmac_rows_of_strided_keys_and_tails() -> None:
    from secemb.fss.hashing import hmac_sha256_many

    for n in (9, 16, 17, 33):
        keys, tails = _rows(n, 80)[::-1, 3:35], _rows(n, 99)[:, ::2]
        got = hmac_sha256_many(keys, b"head", tails)
        assert [bytes(g) for g in got] == [hmac.digest(keys[i].tobytes(), b"head" + tails[i].tobytes(), "sha256")
                                           for i in range(n)]


@SHA
@pytest.mark.parametrize("bad", ["long key", "keys count", "keys dtype", "tails 1-D", "head str", "head view"])
def test_hmac_rows_refuse_as_before(bad: str) -> None:
    from secemb.fss.hashing import hmac_sha256_many

    keys, tails, head = _rows(17, 32), _rows(17, 40), b"h"
    if bad == "long key":
        keys = _rows(17, 65)
    elif bad == "keys count":
        keys = _rows(16, 32)
    elif bad == "keys dtype":
        keys = keys.view(np.uint32)
    elif bad == "tails 1-D":
        tails = tails.ravel()
    elif bad == "head str":
        head = "h"  # type: ignore[assignment]
    else:
        head = memoryview(b"h")  # type: ignore[assignment]
    with pytest.raises(InvalidParameters):
        hmac_sha256_many(keys, head, tails)



_GUARDED_HMAC = """
import hmac, os
from secemb.fss.hashing import hmac_sha256_many
count = 0
for n in (9, 16, 17, 25):
    for kb in (16, 64):
        for length in (0, 55, 56, 64, 120):
            for at in ("end", "start"):
                keys = place(np.frombuffer(os.urandom(n * kb), np.uint8).reshape(n, kb), at)
                tails = place(np.frombuffer(os.urandom(n * length), np.uint8).reshape(n, length), at)
                for k in (keys, keys[-1:]):
                    got = hmac_sha256_many(k, b"hd", tails)
                    assert [bytes(g) for g in got] == [hmac.digest(bytes(k[i % len(k)]), b"hd" + bytes(tails[i]),
                                                                   "sha256") for i in range(n)]
                    count += 1
print("HMACS", count)
"""


@SHA
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's mprotect")
def test_hmac_rows_read_nothing_outside_keys_and_tails() -> None:
    assert run_guarded(_GUARDED_HMAC) == ["HMACS", str(4 * 2 * 5 * 2 * 2)]


# --- the row stream: AES-128-CTR -----------------------------------------------------------------------------


def _ctr(key: bytes, nbytes: int) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    return enc.update(bytes(nbytes)) + enc.finalize()


@COMPILED
@pytest.mark.parametrize("k", [0, 1, 3, 9])
def test_ctr_streams_are_cryptographys_ctr(k: int) -> None:
    from secemb.fss._projection_kernels import CTR_BYTES, ctr_streams

    for passes in (0, 1, 2, 5):
        for keys in (_rows(k, 16), _rows(k, 40)[::-1, 7:23]):  # contiguous, and rows reversed and strided
            out = np.full((k, passes * CTR_BYTES), 0xA5, np.uint8)
            ctr_streams(keys, out)
            assert [bytes(r) for r in out] == [_ctr(bytes(key), passes * CTR_BYTES) for key in keys]
            wide = np.full((k, passes * CTR_BYTES + 48), 0x5A, np.uint8)  # rows of a wider array: its rest kept
            ctr_streams(keys, wide[:, 16 : 16 + passes * CTR_BYTES])
            assert [bytes(r[16 : 16 + passes * CTR_BYTES]) for r in wide] == [
                _ctr(bytes(key), passes * CTR_BYTES) for key in keys]
            assert not (wide[:, :16] != 0x5A).any() and not (wide[:, 16 + passes * CTR_BYTES :] != 0x5A).any()


@COMPILED
@pytest.mark.parametrize("bad", ["key 15", "key 17", "counts", "width", "key stride", "out stride", "key 32-bit"])
def test_ctr_streams_refuse_shapes_and_layouts(bad: str) -> None:
    from secemb.fss._projection_kernels import CTR_BYTES, ctr_streams

    keys, out = _rows(3, 16), np.zeros((3, 2 * CTR_BYTES), np.uint8)
    if bad == "key 15":
        keys = keys[:, :15]
    elif bad == "key 17":
        keys = _rows(3, 17)
    elif bad == "counts":
        keys = _rows(4, 16)
    elif bad == "width":
        out = out[:, :-16]
    elif bad == "key stride":
        keys = _rows(3, 32)[:, ::2]
    elif bad == "out stride":
        out = np.zeros((3, 4 * CTR_BYTES), np.uint8)[:, ::2]
    else:
        keys = _rows(3, 64).view(np.uint32)
    before = out.copy()
    with pytest.raises(ValueError, match="ctr_streams"):
        ctr_streams(keys, out)
    assert (out == before).all()


_GUARDED_CTR = """
import os
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from secemb.fss._projection_kernels import CTR_BYTES, ctr_streams
count = 0
for k in (1, 2, 5):
    for passes in (1, 3):
        for at in ("end", "start"):
            keys = place(np.frombuffer(os.urandom(16 * k), np.uint8).reshape(k, 16), at)
            out = place(np.zeros((k, passes * CTR_BYTES), np.uint8), at)
            for ks, o in ((keys, out), (keys[::-1], out[::-1])):
                ctr_streams(ks, o)
                for key, row in zip(ks, o):
                    enc = Cipher(algorithms.AES(bytes(key)), modes.CTR(bytes(16))).encryptor()
                    assert bytes(row) == enc.update(bytes(row.size))
                count += 1
print("STREAMS", count)
"""


@COMPILED
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's mprotect")
def test_ctr_streams_touch_nothing_outside_keys_and_rows() -> None:
    assert run_guarded(_GUARDED_CTR) == ["STREAMS", str(3 * 2 * 2 * 2)]


@COMPILED
def test_streams_are_cryptographys_ctr_at_every_length_around_a_pass() -> None:
    from secemb.fss import projections
    from secemb.fss._projection_kernels import CTR_BYTES

    keys = [_bytes(16) for _ in range(3)]
    for nbytes in (1, 15, 16, 17, CTR_BYTES - 1, CTR_BYTES, CTR_BYTES + 1, 3 * CTR_BYTES + 5):
        got = projections._streams(keys, nbytes)
        assert got.shape == (3, nbytes)
        assert [bytes(r) for r in got] == [_ctr(k, nbytes) for k in keys], nbytes


# --- project_affine against the specification in Python integers ---------------------------------------------


def _spec_rows(seed: bytes, rows: int, length: int) -> list[list[int]]:
    """The module docstring of :mod:`secemb.fss.projections`: key, AES-CTR stream, entries ``a - b``."""
    key = hashlib.sha256(b"secemb/fss/projections" + seed).digest()[:16]
    per = -(-length // 4)
    stream = _ctr(key, rows * per)
    out = []
    for i in range(rows):
        row = []
        for j in range(length):
            v = stream[i * per + j // 4]
            row.append(((v >> (2 * (j % 4))) & 1) - ((v >> (2 * (j % 4) + 1)) & 1))
        out.append(row)
    return out


def _spec_affine(seeds: list[bytes], negate: bool, parts: list, rows: int, bits: int) -> list[list[int]]:
    mod = 1 << bits
    out = []
    for seed, (base, count, words, tail) in zip(seeds, parts, strict=True):
        x = []
        for a in range(base.shape[0]):
            for e in range(base.shape[1]):
                v = int(base[a, e]) + int(count[a]) * int(words[a, e])
                x.append(-v if negate else v)
        x += [int(t) for t in tail]
        out.append([sum(r * v for r, v in zip(row, x, strict=True)) % mod
                    for row in _spec_rows(seed, rows, len(x))])
    return out


def _part(dtype: type, slots: int, width: int, tail: int, layout: int) -> tuple:
    """A device's affine part in one of several layouts (a server's parts need not be contiguous)."""
    info = np.iinfo(dtype)
    big = np.frombuffer(_bytes(8 * (2 * slots * width + tail) + 64), dtype)
    base = big[: slots * width].reshape(slots, width).copy()
    words = big[slots * width : 2 * slots * width].reshape(slots, width).copy()
    t = big[2 * slots * width : 2 * slots * width + tail].copy()
    count = np.frombuffer(_bytes(8 * slots), np.int64) % 7 - 3  # negative counts wrap modulo 2^k
    base[:1] = info.max  # the top of the ring
    if layout == 1:
        base, words = np.asfortranarray(base), np.asfortranarray(words)
    elif layout == 2:
        base = np.ascontiguousarray(base[::-1])[::-1]
        words.flags.writeable = False
        count = count.astype(np.int8)
    elif layout == 3:
        t = np.repeat(t, 2)[::2]
        count = np.abs(count).astype(np.uint16)
    elif layout == 4:
        count = count.astype(np.uint64)  # -3 as 2^64 - 3: the same residue modulo 2^k
    return base, count, words, t


@COMPILED
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("layout", [0, 1, 2, 3, 4])
def test_project_affine_is_the_spec_for_each_layout(dtype: type, layout: int) -> None:
    """n = 1..9 devices whose parts share a layout (one compiled specialization a layout; a batch's
    passes of mixed layouts compile one each -- see the report), negated and not, one seed and a
    seed a device, with and without slots or a tail, rows 1 and 7."""
    from secemb.fss.projections import project_affine

    bits = 8 * np.dtype(dtype).itemsize
    for n in range(1, 10):
        for slots, width, tail, rows in ((3, 5, 4, 7), (2, 3, 0, 1), (0, 4, 9, 3)):
            parts = [_part(dtype, slots, width, tail, layout) for _ in range(n)]
            for seeds in ([_bytes(16)] * n, [_bytes(16) for _ in range(n)]):
                for negate in (False, True):
                    got = project_affine(seeds, negate, parts, rows=rows)
                    assert got.dtype == dtype and got.shape == (n, rows)
                    assert got.tolist() == _spec_affine(seeds, negate, parts, rows, bits), (n, slots, tail, rows)


@COMPILED
@pytest.mark.parametrize("dtype", [np.uint32])
def test_project_affine_of_a_pass_of_mixed_layouts(dtype: type) -> None:
    """One batch whose passes hold parts of different layouts (``literal_unroll`` over the pass)."""
    from secemb.fss.projections import project_affine

    bits = 8 * np.dtype(dtype).itemsize
    parts = [_part(dtype, 3, 5, 4, d) for d in (0, 1, 2, 3, 4)]
    seeds = [_bytes(16)] * 5
    assert project_affine(seeds, True, parts, rows=5).tolist() == _spec_affine(seeds, True, parts, 5, bits)


@COMPILED
def test_project_affine_at_forty_rows_and_of_uniform_parts() -> None:
    from secemb.fss.projections import project_affine

    for dtype, bits in ((np.uint32, 32), (np.uint64, 64)):
        parts = [_part(dtype, 4, 6, 5, 0) for _ in range(5)]  # the fast check's batch: every part alike
        seeds = [_bytes(16), _bytes(16)] * 2 + [_bytes(16)]
        assert project_affine(seeds, True, parts, rows=40).tolist() == _spec_affine(seeds, True, parts, 40, bits)
        empty = project_affine(seeds, False, parts, rows=0)
        assert empty.shape == (5, 0) and empty.dtype == dtype


@COMPILED
def test_project_affine_of_parts_with_a_seed_array() -> None:
    from secemb.fss.projections import project_affine

    parts = [_part(np.uint32, 2, 3, 2, 0) for _ in range(3)]
    seeds = _rows(3, 16)
    want = _spec_affine([bytes(s) for s in seeds], False, parts, 5, 32)
    assert project_affine(seeds, False, parts, rows=5).tolist() == want
    assert project_affine(seeds[::-1].copy()[::-1], False, parts, rows=5).tolist() == want


def _bad_parts(kind: str, at: int, n: int = 5) -> list:
    parts: list = [_part(np.uint32, 3, 4, 2, 0) for _ in range(n)]
    base, count, words, tail = parts[at]
    bad = {
        "list": [base, count, words, tail],
        "three": (base, count, words),
        "five": (base, count, words, tail, tail),
        "base dtype": (base.astype(np.uint64), count, words, tail),
        "words dtype": (base, count, words.astype(np.int32), tail),
        "tail dtype": (base, count, words, tail.astype(np.uint16)),
        "count float": (base, count.astype(np.float64), words, tail),
        "count bool": (base, count.astype(bool), words, tail),
        "count object": (base, count.astype(object), words, tail),
        "base shape": (base[:, :3], count, words, tail),
        "words shape": (base, count, words[:2], tail),
        "count shape": (base, count[:2], words, tail),
        "count 2-D": (base, count[:, None], words, tail),
        "tail shape": (base, count, words, tail[:1]),
        "tail 2-D": (base, count, words, tail[None]),
        "base big-endian": (base.astype(">u4"), count, words, tail),
        "a list for words": (base, count, words.tolist(), tail),
        "None": None,
        "bytes": b"\x00" * 16,
    }[kind]
    parts[at] = bad
    return parts


#: c6d12e8's ``project_affine`` (its per-part ``_affine_checked``) on ``_bad_parts(kind, at)`` for
#: every kind and at 0, 2, 4: each raised ``InvalidParameters`` (run by the red team with
#: ``PYTHONPATH=/tmp/base34``); the first part's dtype and shape are the batch's, so a bad first part
#: is refused for its own fault or for the others'.
REFUSED_ON_C6D12E8 = ("list", "three", "five", "base dtype", "words dtype", "tail dtype", "count float",
                      "count bool", "count object", "base shape", "words shape", "count shape", "count 2-D",
                      "tail shape", "tail 2-D", "base big-endian", "a list for words", "None", "bytes")


@pytest.mark.parametrize("kind", REFUSED_ON_C6D12E8)
@pytest.mark.parametrize("at", [0, 2, 4])
def test_project_affine_refuses_every_part_c6d12e8_refused(kind: str, at: int) -> None:
    from secemb.fss.projections import project_affine

    parts = _bad_parts(kind, at)
    with pytest.raises(InvalidParameters):
        project_affine([_bytes(16)] * 5, False, parts, rows=3)


# --- protocol level: c6d12e8's outcomes -------------------------------------------------------------------


#: ``/tmp/r35/proto.py`` on c6d12e8: cuckoo, bound, no relay, 20 users a round, 6 rounds, seed 3, dim 4;
#: per attack by devices 0 and 1 (``None``: honest, the record only labels them): the model's SHA-256,
#: each round's rejected devices and the
#: malicious devices included (none).
C6D12E8_RUNS: dict[str, list] = {
    "None": ["a3fc0972df2351dd5148d0bc275d1bf62dd52921436299881f91cf718d3e93b4",
        [[], [], [], [], [], []],
        [[], [], [], [], [], [1]]],
    "oversized-payload": ["f540ad5a5f6daeb4f5b94d3f4b2ed51d5293e024fa222bc27fc92c00f1088c8c",
        [[], [], [], [], [], [1]],
        [[], [], [], [], [], []]],
    "wrapped-dense": ["f540ad5a5f6daeb4f5b94d3f4b2ed51d5293e024fa222bc27fc92c00f1088c8c",
        [[], [], [], [], [], [1]],
        [[], [], [], [], [], []]],
    "two-points": ["f540ad5a5f6daeb4f5b94d3f4b2ed51d5293e024fa222bc27fc92c00f1088c8c",
        [[], [], [], [], [], [1]],
        [[], [], [], [], [], []]],
    "random-bytes": ["f540ad5a5f6daeb4f5b94d3f4b2ed51d5293e024fa222bc27fc92c00f1088c8c",
        [[], [], [], [], [], []],
        [[], [], [], [], [], []]],
}


def _run(attack: str | None) -> list:
    from secemb.protocols.adversary import AdversaryRecord, attack_behavior
    from secemb.training import Experiment

    exp = Experiment(dataset="synthetic", protocol="secemb", layout="cuckoo", relay=False, epochs=1,
                     users_per_round=20, rounds_per_epoch=6, m_prime=8, seed=3, dim=4, bound=True)
    rec = AdversaryRecord(attack or "oversized-payload", 2)
    run = exp.run(behavior=None if attack is None else attack_behavior(attack, 2), after_round=rec.after_round)
    return [run.train_result.model_sha256, [r["rejected_devices"] for r in rec.rounds],
            [r["malicious_included"] for r in rec.rounds]]


@pytest.mark.parametrize("attack", list(C6D12E8_RUNS))
def test_a_bounded_cuckoo_round_with_attackers_is_c6d12e8s(attack: str) -> None:
    """The same model bit for bit and the same devices rejected (device 1 takes part in round 5)."""
    assert _run(None if attack == "None" else attack) == C6D12E8_RUNS[attack]


# --- helper G: relay.upload_macs (landed 16:40) ---------------------------------------------------------------


def _upload_tag(key: bytes | bytearray | memoryview, round_id: int, words: bytes) -> bytes:
    """``upload_mac``'s docstring by hand: HMAC sub-key, then AES-128-GCM's tag of the associated data."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    subkey = hmac.digest(bytes(key), b"secemb-relay-subkey-upload-gmac", "sha256")[:16]
    return AESGCM(subkey).encrypt(bytes(12), b"", b"secemb-relay-upload-gmac" + round_id.to_bytes(8, "little")
                                  + words)


@pytest.mark.parametrize("n", [0, 1, 8, 9, 16, 17, 33])
def test_upload_macs_are_the_tags_by_hand(n: int) -> None:
    from secemb.protocols.secemb.relay import MAC_KEY_BYTES, upload_macs

    keys: list = [_bytes(MAC_KEY_BYTES) for _ in range(n)]
    keys[1::3] = map(bytearray, keys[1::3])  # a careless caller's key types
    keys[2::3] = map(memoryview, keys[2::3])
    words = [_bytes(d * 7) for d in range(n)]
    shapes = [w if d % 3 == 0 else memoryview(b"?" + w)[1:] if d % 3 == 1 else (w[:3], memoryview(w[3:]))
              for d, w in enumerate(words)]
    for round_id in (0, 2**64 - 1):
        want = [_upload_tag(k, round_id, w) for k, w in zip(keys, words, strict=True)]
        assert upload_macs(keys, round_id, shapes) == want


@pytest.mark.parametrize("bad", ["short", "long", "str", "count"])
@pytest.mark.parametrize("at", [0, 8, 16])
def test_upload_macs_refuse_what_upload_mac_refuses(bad: str, at: int) -> None:
    from secemb.protocols.secemb.relay import MAC_KEY_BYTES, upload_mac, upload_macs

    keys: list = [_bytes(MAC_KEY_BYTES) for _ in range(17)]
    words = [b"w"] * 17
    if bad == "count":
        words = words[:-1]
    else:
        keys[at] = {"short": keys[at][:-1], "long": keys[at] + b"x", "str": "k" * MAC_KEY_BYTES}[bad]
    # upload_mac (the per-key path, unchanged since c6d12e8) raises TypeError for a str key, as c6d12e8 did
    error = TypeError if bad == "str" else InvalidParameters
    if bad != "count":
        with pytest.raises(error):
            upload_mac(keys[at], 1, b"w")
    with pytest.raises(error):
        upload_macs(keys, 1, words)
