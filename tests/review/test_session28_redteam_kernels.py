"""Session 28 red team (helper E, second task): the kernels and parsers changed in session 28.

Attacked: helper C's point-function check (:func:`check_leaves` / :func:`check_accumulate`, which read
``leaves``, ``cs`` and ``r`` by address, behind ``secemb.fss.verify.LeafCheck`` (gone in session 29), and its glue,
f56f445); helper A's ``convert_accumulate`` in class order with its prefetch (904fa78; the prefetch
and the both-sums class order were dropped in 3305df6) and its rows-only groups of four keys
(9978d0c, 591c355); helper B's ``field.expand_many`` streaming into one buffer, the range proof's
one-reduction element checks and compiled query (ebc1ef7), its AES-NI ``ctr_streams`` (dd4f8dc) and
the verifier reading parsed shares in place (c5d4717); helper D's framing and key rows (60634d6,
ff79763) -- over the kernels' callers, the protocol roles and both servers' apps.

Traced: what reaches the check kernel from wire bytes is a device's check words (``S`` rows of 32
bytes at the end of a request, or of the relay's forwarded part, which server 1 takes only under the
digest the device sent it directly) and its challenge seed; every shape (keys, width, padded domain)
is fixed by the round's configuration before a ``LeafCheck`` is made, and ``leaves`` always come
from the servers' own walk (uint64).  The words are data, never indices.  No wire input was found that
moves the kernel outside its arrays.  ``convert_accumulate``'s rows and keys are computed from
``start``, ``period`` and the shapes the wrapper checks (a group's keys are whole keys inside the
words); the prefetch touches only keys up to the last word's (and is a hint: no fault at any address).
``ctr_streams``' one caller passes a buffer it sized itself.

Regressions (they pass): the check kernel on unaligned, read-only, strided, reversed and Fortran-order
inputs, a padded domain that is not a multiple of the row width, no keys and empty row ranges, equal to
the formula in Python integers; devices with honest keys and check words all zero or all ones off the
wire, both layouts, both backends: rejected at the digests (no relay) or refused at the relay (the
forwarded part no longer matches the digest server 1 got directly), the aggregate over the others
exact; ``convert_accumulate`` with ``acc`` and ``key_acc`` in the same memory, ``key_t`` over
``key_acc``'s memory, a strided ``acc`` and reversed ``key_acc``, and rows only (groups of four keys)
into a strided and a reversed ``acc``, equal to per-word Python sums; ``expand_many`` (both backends) of
seeds given as ``bytearray``/``memoryview``, ``count`` 0, 1 and 833 and no seeds, equal to
:func:`~secemb.fss.field.expand` (the specification, which uses neither new stream); a bound proof with
``p`` or ``2^64 - 1`` at its first or last element, a check request that is truncated, lists a user
twice or names one that did not upload, and a check answer with ``p`` or ``2^64 - 1`` at its first or
last opened element, or truncated, each refused with ``InvalidMessage`` or ``ProtocolError`` and no
state changed (the round then closes exactly, every honest device accepted); an empty check request is
answered with an empty answer; over HTTP (server 0's app in process), proofs with ``p`` or ``2^64 - 1``
at their first or last element are each a 400, the round's proved and finished devices unchanged, and
the round then commits with every device; over server 1's app (signed as server 0) while the round
closes, check requests truncated, listing a user twice or naming one that did not upload are
400/400/409 and the query seed alone an empty 200, and the round then commits with every device;
challenge seeds viewed in place equal hashlib's; key rows written into a reused, strided buffer are each
batch's ``to_bytes`` (no stale control bits), and relay uploads of another length are refused with
``InvalidMessage`` before server 0 frames their forward.

Session 29 (issue 34, helper I): the sketch check replaced the check words and ``LeafCheck``; the
check's regressions here are ported to :class:`~secemb.fss.sketch.SketchCheck` (leaves of any layout
against the sketch's formula in Python integers with OpenSSL's AES; no keys and empty ranges; leaf
words of another dtype refused, S28-E1), the check words off the wire became sketch proof shares off
the wire (all zero: rejected at the sketch check; all ones: not field elements, refused at intake),
and the challenge seeds' test went with the seeds.

Found (hazmat layer: a caller's own arguments, not reachable from bytes), each filed as an
``xfail(strict)`` with its id and now fixed, its test passing: S28-E1 by helper C (c33111a), S28-E4
by helper B (c0e16bb), S28-E2 and S28-E3 by the lead (``convert_accumulate`` refuses them):

* S28-E1 (low): ``LeafCheck.add`` checks the shape of
  ``leaves`` but not its dtype.  The compiled kernel reads 16 bytes a leaf by address: uint8 leaves
  of a 2^22-leaf row are read 8 times past their end -- a segmentation fault; uint32 leaves give check
  values computed from other memory; big-endian uint64 leaves raise numba's ``TypingError``.  The
  numpy reference takes uint8/uint32/big-endian leaves as their values and raises ``TypeError`` on
  int64, which the kernel takes as their bits.  Fix: refuse in ``add`` any ``leaves`` whose dtype is
  not native ``uint64`` (``InvalidParameters``, as ``cs`` and ``r`` are refused at construction).
* S28-E2 (low): ``convert_accumulate``'s ``live`` (documented bool) is not checked: an int ``live``
  of 2 doubles a row's words in the numpy reference (it multiplies by ``live``), while the compiled
  wrapper casts it to uint8, so 256 makes a live row dead there.  Fix: refuse a ``live`` that is not
  bool, or take ``live != 0`` in both paths.
* S28-E3 (low): ``convert_accumulate`` does not check that ``acc`` / ``key_acc`` are a ring
  (uint32 or uint64): the compiled kernel adds the ring's words into float64, int8 or int64 arrays,
  where the reference raises numpy's ``UFuncTypeError`` / ``ValueError`` (int64, int8) or adds
  converted floats (float64); and with ``M = 0`` rows (an empty ``live`` or ``acc``) both raise
  ``ZeroDivisionError`` / ``IndexError``.  Fix: refuse an ``out`` dtype other than uint32/uint64 and
  ``M = 0`` with ``InvalidParameters``.
* S28-E4 (low): helper B's ``ctr_streams`` (``secemb/fss/_rangeproof_kernels.py``, dd4f8dc, which
  stores whole AES-256-CTR passes by address) checks that ``out`` holds ``(n - 1) stride + passes
  128`` bytes in int64 arithmetic: for a huge ``stride`` the product wraps negative (three rows at
  ``2^62``: ``2^63 + 128``) and the check passes -- the kernel then stores at ``out + 2^62``, a
  segmentation fault.  Its one caller (``field.stream_words``) passes ``stride = nbytes = 8 count``
  with a buffer it allocated, so no wire input gets there.  Fix: refuse ``stride > out.shape[0]``
  first (or compare ``n - 1 <= (out.shape[0] - passes 128) // stride``).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _server_template import run_script

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.framing import HEADER_BYTES
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import rangeproof as R
from secemb.fss.convert import convert, convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG
from secemb.fss.sketch import SketchCheck, expand
from secemb.protocols.secemb.sizes import NAME
from secemb.protocols.wire import frame

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
import test_bounded_payloads as tbp  # type: ignore[import-not-found]  # noqa: E402
import test_malicious_device as tmd  # type: ignore[import-not-found]  # noqa: E402
from child_verdicts import REFUSED  # noqa: E402

COMPILED = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels need numba and AES-NI")
BACKENDS = ["numpy", pytest.param("numba", marks=COMPILED)]
MASK = 2**64 - 1


def _child(body: str, backend: str, timeout: float = 300) -> tuple[int, list[str]]:
    """Run ``body`` in a child interpreter on ``backend`` (a memory error is the child's death, not
    pytest's; forked from the suite's warm template where it can be: :func:`_server_template.run_script`): its
    return code and output lines."""
    code = "import sys\nimport numpy as np\nfrom secemb.errors import InvalidParameters\n" \
           "from secemb.fss import kernels\nkernels.BACKEND = sys.argv[1]\n" + REFUSED + textwrap.dedent(body)
    got = run_script(code, backend, timeout=timeout)
    return got.returncode, got.stdout.splitlines() + got.stderr.splitlines()[-5:]


# -- the point-function check ----------------------------------------------------------------------


def _formula(leaves: np.ndarray, seeds: list[bytes], mp: int, per_user: int) -> list[list[int]]:
    """Sketch values of rows ``0 ..`` (``leaves`` (g, width, 2)) of keys over ``mp`` positions, in
    Python integers: per key ``(sum r_x z, sum r_x^2 z, sum z)`` mod ``p`` with ``z = (AES_k(w) XOR
    w) mod p`` (OpenSSL's AES through ``cryptography``, not the kernel), row ``key F + f`` at
    positions ``f width ..``; the device's AES key and ``r_x`` from :func:`~secemb.fss.sketch.expand`."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    p = 2**61 - 1
    ex = expand(seeds, mp)
    width = leaves.shape[1]
    frontier = mp // width
    out = [[0, 0, 0] for _ in range(len(seeds) * per_user)]
    for i in range(len(leaves)):
        key, x0 = i // frontier, (i % frontier) * width
        u = key // per_user
        aes = Cipher(algorithms.AES(ex.keys[u].tobytes()), modes.ECB()).encryptor()
        for e in range(width):
            w = int(leaves[i, e, 0]).to_bytes(8, "little") + int(leaves[i, e, 1]).to_bytes(8, "little")
            z = int.from_bytes(bytes(a ^ b for a, b in zip(aes.update(w), w, strict=True)), "little") % p
            rx = int(ex.r[u, x0 + e])
            for c, v in enumerate((rx * z, rx * rx * z, z)):
                out[key][c] = (out[key][c] + v) % p
    return out


def _words(gen: np.random.Generator, *shape: int) -> np.ndarray:
    return gen.integers(0, MASK, shape, np.uint64, endpoint=True)


def _unaligned(a: np.ndarray) -> np.ndarray:
    """``a``'s words in read-only memory one byte past an 8-byte boundary."""
    raw = b"\0" + a.tobytes()
    out = np.frombuffer(raw, np.uint64, a.size, 1).reshape(a.shape)
    assert not out.flags.aligned and not out.flags.writeable
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["unaligned read-only", "strided", "reversed", "fortran"])
def test_check_inputs_of_any_layout_give_the_formula(backend: str, form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``leaves`` unaligned and read-only, strided, reversed or in Fortran order: the sketch values of
    the formula (rows of 20 leaves: one call in place and a staged remainder; a padded domain of 50,
    not a multiple of 20; two keys a user, two users)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng([28, len(form)])
    keys, per_user, mp, width = 4, 2, 50, 20
    frontier = mp // width
    leaves = _words(gen, keys * frontier, width, 2)
    seeds = [bytes([7, u]) * 8 for u in range(keys // per_user)]
    want = _formula(leaves, seeds, mp, per_user)
    if form == "unaligned read-only":
        bent = _unaligned(leaves)
    elif form == "strided":
        bent = np.repeat(leaves, 2, 1)[:, ::2]
    elif form == "reversed":
        bent = np.flip(np.flip(leaves, 0).copy(), 0)  # its values, axis 0 reversed
        assert bent.strides[0] < 0
    else:
        bent = np.asfortranarray(leaves)
    check = SketchCheck(expand(seeds, mp), per_user)
    for r0 in range(0, keys * frontier, 3):  # groups that cut keys
        r1 = min(r0 + 3, keys * frontier)
        check.add(r0, r1, bent[r0:r1])
    assert check.values.tolist() == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_keys_and_empty_row_ranges_change_nothing(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sketch of no keys folds an empty group; empty ranges at the first and the last row add
    nothing; a row past the walk is refused (the kernel indexes the devices' keys and ``r`` by it)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    none = SketchCheck(expand([], 32), 1)
    none.add(0, 0, np.zeros((0, 16, 2), np.uint64))
    assert none.values.shape == (0, 3)
    gen = np.random.default_rng(2801)
    check = SketchCheck(expand([b"s" * 16, b"t" * 16], 32), 1)
    check.add(0, 0, np.zeros((0, 16, 2), np.uint64))
    check.add(4, 4, np.zeros((0, 16, 2), np.uint64))
    assert check.values.tolist() == [[0] * 3] * 2
    with pytest.raises(InvalidParameters):
        check.add(4, 5, _words(gen, 1, 16, 2))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("layout", "relay"), tmd.LAYOUTS)
def test_proof_shares_off_the_wire_at_their_extremes_reject_only_that_device(
        backend: str, layout: str, relay: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Devices with honest keys whose sketch proof share (the upload's last ``8 (6c + 2M + 3)``
    bytes to server 0) is all zero bytes or all ``0xff``: the zeros are field elements, taken in and
    rejected at the sketch check; the ones are not (``2^64 - 1 >= p``), refused at intake
    (``InvalidMessage``), never another error, and the aggregate over the honest devices is exact."""
    from secemb.protocols.secemb import SecEmbUser

    monkeypatch.setattr(kernels, "BACKEND", backend)
    rnd = tmd.Round(layout, relay)
    proof = 8 * min(6 * c + 2 * -(-rnd.cfg.slots // c) + 3 for c in range(1, rnd.cfg.slots + 1))

    class Bent(SecEmbUser):
        """An honest device but for the proof share it sends: ``fill`` bytes."""

        def __init__(self, cfg: object, attack: str, **kw: object) -> None:
            super().__init__(cfg, **kw)  # type: ignore[arg-type]
            self.fill = b"\0" if attack == "zeros" else b"\xff"

        def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes | None]:
            u0, u1 = super().upload(rows, dense)
            return u0[:-proof] + self.fill * proof, u1

    monkeypatch.setattr(tmd, "MaliciousUser", Bent)  # what Round.device makes for an attack
    bent = {3: "zeros", 5: "ones"}
    for uid in range(8):
        rnd.device(uid, attack=bent.get(uid))
    assert rnd.refused == {5}
    uploaded = [u for u in range(8) if u not in rnd.refused]
    rejected, sparse, dense = rnd.close(uploaded)
    assert rejected == [3]
    np.testing.assert_array_equal(sparse, rnd.expected)
    np.testing.assert_array_equal(dense, rnd.expected_dense)


#: SketchCheck.add (LeafCheck.add's, S28-E1, ported in session 29) of leaf words of another dtype at
#: the right shape (each attempt refused or not); the numba case that would read 8 times past a 4 MiB
#: row comes last (it would kill the child)
LEAF_DTYPES = """
from secemb.fss.sketch import SketchCheck, expand
for dtype in ("uint32", "int64", ">u8", "uint8"):
    width = 1 << (22 if dtype == "uint8" else 6)
    leaves = np.ones((1, width, 2), dtype)  # allocated first: what follows it is unmapped
    check = SketchCheck(expand([bytes(16)], width), 1)
    try:
        refused(dtype, lambda: check.add(0, 1, leaves), InvalidParameters)
    except Exception as exc:  # another error: printed, and the next dtype tried
        print("ERROR", dtype, type(exc).__name__)
    sys.stdout.flush()
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_s28_e1_leaf_words_of_another_dtype_are_refused(backend: str) -> None:
    rc, lines = _child(LEAF_DTYPES, backend)
    assert rc == 0, lines
    verdicts = [ln for ln in lines if ln.startswith(("REFUSED", "ACCEPTED", "ERROR"))]
    assert len(verdicts) == 4, lines
    assert all(v.startswith("REFUSED") and v.endswith("InvalidParameters") for v in verdicts), lines


# -- convert_accumulate ----------------------------------------------------------------------------

M, W, PERIOD, START, N = 64, 5, 16, 7, 300


def _sums(words: np.ndarray, live: np.ndarray, ring_bits: int = 32) -> tuple[list[list[int]], list[list[int]],
                                                                               list[int]]:
    """Per-word Python sums of the numpy reference's conversions: by row ``(START + i) % M``, by key
    ``(START + i) // PERIOD``, and each key's count of control bits, over the words of live rows."""
    saved, kernels.BACKEND = kernels.BACKEND, "numpy"
    try:
        vals = convert(words, W, ring_bits, AGGREGATION_TAG)
    finally:
        kernels.BACKEND = saved
    mod, keys = 1 << ring_bits, (START + len(words) - 1) // PERIOD + 1
    rows, by_key, ones = [[0] * W for _ in range(M)], [[0] * W for _ in range(keys)], [0] * keys
    for i in range(len(words)):
        pos = START + i
        if live[pos % M]:
            for e in range(W):
                rows[pos % M][e] = (rows[pos % M][e] + int(vals[i, e])) % mod
                by_key[pos // PERIOD][e] = (by_key[pos // PERIOD][e] + int(vals[i, e])) % mod
            ones[pos // PERIOD] += int(words[i, 0]) & 1
    return rows, by_key, ones


def _words_and_live(seed: int) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.default_rng(seed)
    live = gen.random(M) < 0.7
    live[16:32] = False  # a dead class
    return _words(gen, N, 2), live


@pytest.mark.parametrize("backend", BACKENDS)
def test_sums_into_aliased_and_strided_outputs_equal_python_sums(backend: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Ring sums are increments: ``acc`` and ``key_acc`` over the same memory, ``key_t`` over
    ``key_acc``'s, a strided ``acc`` and a reversed ``key_acc`` each end as the per-word sums say."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    words, live = _words_and_live(2802)
    rows, by_key, ones = _sums(words, live)
    keys, mod = len(by_key), 1 << 32
    # acc and key_acc the same words: each word gets its row's and its key's sums
    buf = np.zeros(M * W, np.uint32)
    convert_accumulate(words, AGGREGATION_TAG, buf.reshape(M, W), START, live, key_acc=buf[: keys * W].reshape(keys, W),
                       period=PERIOD)
    flat_rows, flat_keys = sum(rows, []), sum(by_key, [])
    want = [(a + (flat_keys[i] if i < len(flat_keys) else 0)) % mod for i, a in enumerate(flat_rows)]
    assert buf.tolist() == want
    # key_t over key_acc's first words (uint64 ring: int64 counts in the same 8-byte words)
    wide = _sums(words, live, 64)[1]
    buf64 = np.zeros(keys * W, np.uint64)
    convert_accumulate(words, AGGREGATION_TAG, None, START, live, key_acc=buf64.reshape(keys, W), period=PERIOD,
                       key_t=buf64[:keys].view(np.int64))
    want64 = [a % 2**64 for a in sum(wide, [])]
    for k in range(keys):
        want64[k] = (want64[k] + ones[k]) % 2**64
    assert buf64.tolist() == want64
    # a strided acc, a reversed key_acc and key_t
    big = np.zeros((M, 2 * W), np.uint32)
    key_acc = np.zeros((keys, W), np.uint32)[::-1]
    key_t = np.zeros(keys, np.int64)[::-1]
    convert_accumulate(words, AGGREGATION_TAG, big[:, ::2], START, live, key_acc=key_acc, period=PERIOD, key_t=key_t)
    assert big[:, ::2].tolist() == rows and not big[:, 1::2].any()
    assert key_acc.tolist() == by_key and key_t.tolist() == ones


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_only_sums_into_a_strided_acc_equal_python_sums(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows only, in class order (``M = 4 period``: 20 keys in 4 classes of 5, the first and last key
    cut by ``START`` and ``N``): into every other column of a wider array holding 7s, the per-word
    sums added, the columns between untouched; into a reversed ``acc`` (``live`` reversed too), the
    per-word sums of that ``live``."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    words, live = _words_and_live(2805)
    rows = _sums(words, live)[0]
    big = np.full((M, 2 * W), 7, np.uint32)
    convert_accumulate(words, AGGREGATION_TAG, big[:, ::2], START, live)
    assert (big[:, ::2] - np.uint32(7)).tolist() == rows and (big[:, 1::2] == 7).all()
    back, live_back = np.zeros((M, W), np.uint32), live[::-1]
    convert_accumulate(words, AGGREGATION_TAG, back[::-1], START, live_back)
    assert back[::-1].tolist() == _sums(words, live_back)[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_s28_e2_an_int_live_is_refused_or_taken_as_nonzero(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    words, live = _words_and_live(2803)
    as_int = live.astype(np.int64)
    as_int[[3, 40]] = 2, 256  # both live
    live[[3, 40]] = True
    rows = _sums(words, live)[0]
    acc = np.zeros((M, W), np.uint32)
    try:
        convert_accumulate(words, AGGREGATION_TAG, acc, START, as_int)
    except InvalidParameters:
        return
    assert acc.tolist() == rows


@pytest.mark.parametrize("backend", BACKENDS)
def test_s28_e3_sums_into_a_non_ring_or_no_rows_are_refused(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    words, live = _words_and_live(2804)
    wrong = []
    for dtype in ("float64", "int8", "int64"):
        try:
            convert_accumulate(words, AGGREGATION_TAG, np.zeros((M, W), dtype), START, live)
            wrong.append(f"{dtype}: accepted")
        except InvalidParameters:
            pass
        except Exception as exc:  # noqa: BLE001 - what the finding is about: any other error
            wrong.append(f"{dtype}: {type(exc).__name__}")
    for name, call in (
        ("no live rows", lambda: convert_accumulate(words, AGGREGATION_TAG, None, START, np.zeros(0, bool),
                                                    key_acc=np.zeros((N, W), np.uint32), period=PERIOD)),
        ("acc of no rows", lambda: convert_accumulate(words, AGGREGATION_TAG, np.zeros((0, W), np.uint32), START)),
    ):
        try:
            call()
            wrong.append(f"{name}: accepted")
        except InvalidParameters:
            pass
        except Exception as exc:  # noqa: BLE001 - as above
            wrong.append(f"{name}: {type(exc).__name__}")
    assert not wrong, wrong


# -- the bound check's intake ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_many_of_any_seed_buffer_and_count_is_expand(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeds as bytes, bytearray and memoryview, ``count`` 0, 1 and 833 (the proof's: a row's last
    pass of ``ctr_streams`` runs into the next row's head), and no seeds: each row is
    :func:`~secemb.fss.field.expand` of its seed (the specification, whose stream is ``expand_seed``'s,
    neither the per-seed cipher nor the compiled streams)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [bytes(range(16)), bytearray(b"\xff" * 16), memoryview(bytes(16))]
    for count in (0, 1, 833):
        got = F.expand_many(seeds, count)
        assert got.shape == (3, count) and got.dtype == np.uint64
        for row, seed in zip(got, seeds, strict=True):
            assert row.tolist() == F.expand(bytes(seed), count).tolist()
    assert F.expand_many([], 5).shape == (0, 5)
    with pytest.raises(InvalidParameters):
        F.expand_many([bytes(16), bytes(15)], 3)


#: ctr_streams (dd4f8dc) with a row stride whose bound overflows int64: ``(n - 1) stride + passes 128``
#: is ``2^63 + 128`` for three rows at ``2^62``, negative in the kernel's int64, so ``out`` "holds" it
CTR_STRIDE = """
from secemb.fss._rangeproof_kernels import ctr_streams
out = np.zeros(4096, np.uint8)
refused("stride 2^62", lambda: ctr_streams(np.zeros((3, 32), np.uint8), out, 1 << 62, 16), ValueError)
refused("stride 2^61 + 1", lambda: ctr_streams(np.zeros((5, 32), np.uint8), out, (1 << 61) + 1, 16), ValueError)
"""


@COMPILED
def test_s28_e4_a_stride_whose_bound_overflows_is_refused() -> None:
    rc, lines = _child(CTR_STRIDE, "numba")
    assert rc == 0, lines
    assert [ln for ln in lines if ln.startswith(("REFUSED", "ACCEPTED"))] == [
        "REFUSED stride 2^62 ValueError", "REFUSED stride 2^61 + 1 ValueError"], lines


def _with_word(message: bytes, at: int, value: int) -> bytes:
    return message[:at] + value.to_bytes(8, "little") + message[at + 8 :]


@pytest.mark.parametrize("relay", [False, True], ids=["no-relay", "relay"])
def test_hostile_proofs_requests_and_answers_change_nothing(relay: bool) -> None:
    """Over the protocol roles (cuckoo layout): a proof with ``p`` or ``2^64 - 1`` at its first or
    last element is refused (``InvalidMessage``) and the same device's honest proof is kept after
    it; server 1 refuses a check request truncated, listing a user twice or naming a user that did
    not upload, and answers an empty one with nothing; server 0 refuses a check answer with ``p``
    or ``2^64 - 1`` at its first or last opened element, or truncated, and its request stays
    pending: server 1's honest answer then accepts every device and the aggregate is exact."""
    rnd = tbp.Round("cuckoo", relay)
    users = list(range(4))
    for uid in users:
        rnd.retrieve(uid)
        rnd.upload(uid, *rnd.honest_upload(uid))
    s0, s1, params = rnd.s0, rnd.s1, rnd.s0._bound
    proof = rnd.users[0].bound_proof(s0.challenge(0))
    first = HEADER_BYTES + 16 + R.PART_BYTES  # the first field element, after sigma_0 and part_1
    for at in (first, len(proof) - 8):
        for value in (F.P, MASK):
            with pytest.raises(InvalidMessage):
                s0.handle_proof(0, _with_word(proof, at, value))
    assert s0.unproved(users) == set(users)
    s0.handle_proof(0, proof)
    for uid in users[1:]:
        rnd.prove(uid)

    request = s0.bound_request(users)
    cfg = rnd.cfg
    body = request[HEADER_BYTES:]
    entry = (len(body) - 16) // len(users)
    twice = body[:16] + body[16 : 16 + entry] * 2
    stranger = body[:16] + (99).to_bytes(8, "little") + body[16 + 8 : 16 + entry]
    with pytest.raises(InvalidMessage):
        s1.bound_answer(request[:-1])
    with pytest.raises(InvalidMessage):
        s1.bound_answer(frame(NAME, "bound_request", 1, cfg.round_id, twice))
    with pytest.raises(ProtocolError):
        s1.bound_answer(frame(NAME, "bound_request", 1, cfg.round_id, stranger))
    empty = s1.bound_answer(frame(NAME, "bound_request", 1, cfg.round_id, body[:16]))
    assert len(empty) == HEADER_BYTES

    answer = s1.bound_answer(request)
    opened = HEADER_BYTES + 8 * (params.opened_length - 1)  # the first device's last opened element
    for at in (HEADER_BYTES, opened, len(answer) - 8 * (params.verifier_length - params.opened_length + 1)):
        for value in (F.P, MASK):
            with pytest.raises(InvalidMessage):
                s0.bound_rejected(_with_word(answer, at, value))
    with pytest.raises(InvalidMessage):
        s0.bound_rejected(answer[:-8])
    assert s0.bound_rejected(answer) == set()
    d0, d1 = s0.upload_digests(users), s1.upload_digests(users)
    assert d0 is not None and d1 is not None and all(d0[u] == d1[u] for u in users)
    sparse, dense = s0.combine(s1.aggregate_share(users), users)
    np.testing.assert_array_equal(sparse, rnd.expected)
    np.testing.assert_array_equal(dense, rnd.expected_dense)


def test_proofs_with_elements_not_below_p_over_http_are_4xx_and_the_round_commits() -> None:
    """Server 0's app (in process, ``TestClient``): each device first posts its bound proof with ``p``
    or ``2^64 - 1`` at the first or the last element, signed as itself -- every one a 400 that leaves
    the round's proved devices as they were -- then its honest proof through its link; the round
    closes committed with every device."""
    pytest.importorskip("fastapi")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
    import test_bounded_nodes as tbn  # type: ignore[import-not-found]
    from fastapi.testclient import TestClient

    from secemb.client.device import Device, DeviceClient
    from secemb.server.app import create_app
    from secemb.sim.local import LocalServerLink
    from secemb.transport.signing import sign_headers, user_key

    servers = tbn._servers(bound=True, relay=False)
    leader, follower = tbn._nodes(servers)
    http = TestClient(create_app(leader), raise_server_exceptions=False)
    statuses: list[int] = []
    unchanged: list[bool] = []

    class Hostile(LocalServerLink):
        def proof(self, round_id: int, body: bytes) -> None:
            path = f"/v1/rounds/{round_id}/proof"
            first = HEADER_BYTES + 16 + R.PART_BYTES
            before = (set(leader.round.proved), set(leader.round.finished))
            for at in (first, len(body) - 8):
                for value in (F.P, MASK):
                    bad = _with_word(body, at, value)
                    headers = sign_headers(f"user:{self.user}", user_key(leader.cfg.user_secret, self.user), "POST",
                                           path, "", bad)
                    statuses.append(http.post(path, content=bad, headers=headers | {
                        "Content-Type": "application/octet-stream"}).status_code)
            unchanged.append((set(leader.round.proved), set(leader.round.finished)) == before)
            super().proof(round_id, body)

    r = tbn._open(servers)
    for u in tbn.USERS:
        links = (Hostile(leader, u, servers.tp), LocalServerLink(follower, u, servers.tp))
        client = DeviceClient.over(u, links, min_users=tbn.FLOOR)
        Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
    assert statuses == [400] * 4 * len(tbn.USERS) and unchanged == [True] * len(tbn.USERS)
    doc = leader.close_round(r)
    assert doc["state"] == "committed" and doc["included"] == sorted(tbn.USERS), doc


# -- key rows and relay framing (helper D's glue) ---------------------------------------------------


@pytest.mark.parametrize(("m", "parts", "c"), [(2, 1, 1), (1000, 2, 3), (1 << 9, 3, 2), (300, 1, 5)])
def test_key_rows_into_a_stale_strided_out_are_each_batchs_bytes(m: int, parts: int, c: int) -> None:
    """:meth:`DPFKeys.to_rows <secemb.fss.keys.DPFKeys.to_rows>` into the middle columns of a buffer
    full of ``0xA5`` (a reused one: nothing of it may stay in the control-bit bytes): each row is
    ``to_bytes`` of its batch, and the columns around it are untouched."""
    from secemb import fss

    gen = np.random.default_rng([m, parts, c])
    keys, _ = fss.gen(gen.integers(0, m, parts * c), gen.integers(0, 2**32, (parts * c, 2), dtype=np.uint32), m)
    want = [keys[i * c : (i + 1) * c].to_bytes() for i in range(parts)]
    size = len(want[0])
    buf = np.full((parts, size + 13), 0xA5, np.uint8)
    got = keys.to_rows(parts, out=buf[:, 5 : 5 + size])
    assert [row.tobytes() for row in got] == want
    assert (buf[:, :5] == 0xA5).all() and (buf[:, 5 + size :] == 0xA5).all()


def test_relay_uploads_of_another_length_are_refused_before_they_are_framed() -> None:
    """Server 0 with relay frames a forward of a fixed size from an upload's bytes: uploads one byte
    short or long, or cut at the header's end or at the tag, are ``InvalidMessage`` (not the framer's
    ``InvalidParameters``), and the same device's honest upload is forwarded after them."""
    rnd = tbp.Round("cuckoo", True)
    rnd.retrieve(0)
    u0, _ = rnd.users[0].upload(*rnd.honest_upload(0))
    for bad in (u0[:-1], u0 + b"\0", u0[:HEADER_BYTES], u0[:-16]):
        with pytest.raises(InvalidMessage):
            rnd.s0.handle_upload(0, bad)
    assert rnd.s0.handle_upload(0, u0) is not None


def test_hostile_check_requests_over_http_are_4xx_and_the_round_commits() -> None:
    """Server 1's app (in process, ``TestClient``, signed as server 0 with the peer secret), while the
    round closes: before server 0's honest check request, the same request truncated by a byte (400),
    with its first user listed twice (400), with a user that did not upload (409), and with the
    query seed alone (200, an empty answer); then the honest request is answered, every device
    passes and the round commits with all of them."""
    pytest.importorskip("fastapi")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
    import test_bounded_nodes as tbn  # type: ignore[import-not-found]
    from fastapi.testclient import TestClient

    from secemb.client.device import Device
    from secemb.server.app import create_app
    from secemb.transport.signing import sign_headers

    servers = tbn._servers(bound=True, relay=False)
    leader, follower = tbn._nodes(servers)
    cfg = follower.cfg  # the app made as over plain HTTP (no TLS here to carry the peer's certificate)
    follower.cfg = cfg.model_copy(update={"insecure_http": True})
    try:
        http = TestClient(create_app(follower), raise_server_exceptions=False)
    finally:
        follower.cfg = cfg
    got: list[tuple[int, int]] = []
    honest = leader.peer.bound

    def bound(round_id: int, request: bytes) -> bytes:
        path = f"/v1/peer/rounds/{round_id}/bound"
        body = request[HEADER_BYTES:]
        entry = 8 + 16 + 2 * R.PART_BYTES
        framed = [request[:-1]] + [frame(NAME, "bound_request", 1, round_id, b) for b in (
            body[:16] + body[16 : 16 + entry] * 2, body[:16] + (1 << 40).to_bytes(8, "little") + body[24 : 16 + entry],
            body[:16])]
        for bad in framed:
            headers = sign_headers("server0", follower.cfg.peer_secret, "POST", path, "", bad)
            resp = http.post(path, content=bad, headers=headers | {"Content-Type": "application/octet-stream"})
            got.append((resp.status_code, len(resp.content)))
        return honest(round_id, request)

    leader.peer.bound = bound
    r = tbn._open(servers)
    for u in tbn.USERS:
        client = servers.servers().device(u)
        Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
    doc = leader.close_round(r)
    assert [s for s, _ in got] == [400, 400, 409, 200] and got[3][1] == HEADER_BYTES, got
    assert doc["state"] == "committed" and doc["included"] == sorted(tbn.USERS), doc
