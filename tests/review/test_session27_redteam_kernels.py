"""Session 27 red team (helper P): today's compiled kernels and the inputs that reach them.

Attacked: helper E's ``ring_matmul`` (``out=`` of any strides; the table's rows read through the
cuckoo gather index unchecked, that index checked in ``[-1, N)`` when :meth:`LimbMatrix.gather
<secemb.fss.linalg.LimbMatrix.gather>` makes the operand), ``convert_add`` and
``relay_masks_into``; helper F's ``sign_products`` and ``affine_vector``; helper K's
``scatter_rows`` behind :meth:`CuckooLayout.scatter <secemb.fss.cuckoo.CuckooLayout.scatter>`
(``out=``); helper B's kept buffers (a SecEmb server role keeps its close buffer and its last
round's running aggregate, the next round's first fold target).

Traced: every argument of those kernels that a device, the peer server or a relay can influence
reaches them through parsers that fix its shape (a request's key header against the round, the
relay's forwards digest-checked, seeds of 16 bytes, uploads, relay answers and replies of fixed
size); the indices the kernels read unchecked (the gather index, ``cols``, the layout's
occurrences, the bucket sizes) are made by the server from the round's public layout.  No wire input
was found that moves a kernel outside its arrays.  Regressions (they pass; a memory error is a
fresh interpreter's death, not pytest's): key bytes changed or random at the exact length, forwards
server 0 altered, roots changed, in process (the round then a new pair's, byte for byte) and over
HTTP (never a 5xx, the round commits); relay answers and replies of other lengths.  Neither was a
way found for a round's values to reach another through the kept buffers: a kept role's shares,
running aggregate and close buffer are a new role's, word for word, after a round aborted with
evaluations never committed, an evaluation or a close that fails midway, closes over other users in
turn, a round opened while the last one's evaluation runs, a change of shape and back on three
threads.  The compiled and reference paths agree with Python ints at the largest words (carries),
one row, one column, width 1, empty, reversed and strided ranges.

Found (hazmat layer: a caller's own arguments, not reachable from bytes; each was an
``xfail(strict)`` with its id, all four fixed the same session; the rule of docs/security.md
"Compiled kernels and untrusted input" since session 24 is that an argument aliasing an output, or
changed after its check, cannot move a kernel outside its arrays):

* S27-P1 (low): ``ring_matmul``'s ``out`` may share memory with the gather index (only ``a`` and
  the rows are checked): the kernel writes products over the index it reads next, then reads the
  rows at those products -- a segmentation fault.
* S27-P2 (low): the same with ``cols``.
* S27-P3 (low): :class:`LimbMatrix` keeps the caller's index array (``astype(copy=False)``): changed
  after the check, the compiled product reads rows through the changed index -- a segmentation
  fault (the reference raises ``IndexError``).  P1-P3 fixed (the lead): ``ring_matmul`` refuses an
  ``out`` sharing memory with a gathered operand's index and copies ``cols``; ``LimbMatrix`` keeps
  its own copy of the index it checked.
* S27-P4 (low): :meth:`CuckooLayout.scatter` takes an ``out`` over the layout's own (writeable,
  cached) ``occurrences``: the first scatter writes sums over the indices, the next one reads the
  bucket form through them -- a segmentation fault (the reference: ``IndexError`` on both, the
  layout corrupted for the process).  Fixed (the lead): ``scatter`` refuses an ``out`` that overlaps
  the layout's ``occurrences``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from secemb.errors import ProtocolError
from secemb.fss import kernels
from secemb.fss.convert import convert_add
from secemb.fss.cuckoo import CuckooLayout
from secemb.fss.linalg import LimbMatrix, ring_matmul
from secemb.fss.projections import project_affine, project_each
from secemb.protocols.backends import Backend, ThreadBackend
from secemb.protocols.secemb import SecEmbProtocol
from secemb.protocols.secemb import server as server_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
from test_s27_close_buffers import MP, W, _pair, _retrieve, _round, _upload, _users  # noqa: E402
from child_verdicts import assert_all_refused  # noqa: E402
from test_session20_kernel_inputs import HTTP_REQUESTS, _run  # noqa: E402

COMPILED = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels need numba and AES-NI")
BACKENDS = ["numpy", pytest.param("numba", marks=COMPILED)]


def _verdict(lines: list[str]) -> str:
    """The one verdict line of a child (``REFUSED ...`` or ``ACCEPTED ...``)."""
    verdicts = [ln for ln in lines if ln.startswith(("REFUSED", "ACCEPTED"))]
    assert len(verdicts) == 1, lines
    return verdicts[0]


# -- S27-P1..P4: aliasing and indices changed after their check ------------------------------------

#: a product whose every row reads ``rows[0]`` (each entry ``2^40``) through a gather index of
#: zeros, ``a`` all ones: each word of the product is ``M 2^40``; ``buf`` holds what the attacks alias
PRODUCT = """
from secemb.fss.linalg import LimbMatrix, ring_matmul
G, K, M, D = 2, 8, 4, 4
rows = np.full((16, D), 1 << 40, np.uint64)
a = np.ones((G, K, M), np.uint64)
buf = np.zeros(G * K * D, np.int64)

def right(got):
    print("RIGHT" if np.array_equal(got, np.full((G, K, D), M << 40, np.uint64)) else "WRONG")
"""


def _refused_or_right(lines: list[str]) -> None:
    """A fixed call either refuses the aliasing arguments or computes the product the index
    named when it was checked."""
    verdict = _verdict(lines)
    assert verdict.endswith("InvalidParameters") or (verdict.startswith("ACCEPTED") and "RIGHT" in lines), lines


def _p1_p2(backend: str, finding: str) -> pytest.param:
    return pytest.param(backend, marks=[] if backend == "numpy" else [COMPILED], id=backend)  # fixed: `finding`


@pytest.mark.parametrize("backend", [_p1_p2("numpy", ""), _p1_p2(
    "numba", "S27-P1 (low): ring_matmul's out may share memory with the gather index; the kernel writes products "
    "over the index, then reads rows at them: SIGSEGV. Fix: refuse out sharing memory with the index and cols, or "
    "copy both before the kernel")])
def test_s27_p1_product_into_its_own_gather_index(backend: str) -> None:
    lines = _run(PRODUCT + """
index = buf[: G * M].reshape(G, M)
op = LimbMatrix(rows, 64).gather(index)
out = buf.view(np.uint64).reshape(G, K, D)  # the product's destination: the index's memory
refused("out over the gather index", lambda: right(ring_matmul(a, op, 64, out=out)), InvalidParameters)
""", backend)
    _refused_or_right(lines)


@pytest.mark.parametrize("backend", [_p1_p2("numpy", ""), _p1_p2(
    "numba", "S27-P2 (low): ring_matmul's out may share memory with cols; the kernel reads cols[g] after writing "
    "the previous group's rows over it, then index[g, j] for j past M: SIGSEGV. Fix: as S27-P1")])
def test_s27_p2_product_into_its_own_cols(backend: str) -> None:
    lines = _run(PRODUCT + """
cols = buf[:G]
cols[:] = M
op = LimbMatrix(rows, 64).gather(np.zeros((G, M), np.int64))
out = buf.view(np.uint64).reshape(G, K, D)  # the product's destination: cols' memory
refused("out over cols", lambda: right(ring_matmul(a, op, 64, cols=cols, out=out)), InvalidParameters)
""", backend)
    _refused_or_right(lines)


@COMPILED  # S27-P3, fixed (lead): LimbMatrix keeps its own copy of the index it checked
def test_s27_p3_gather_index_changed_after_its_check() -> None:
    lines = _run(PRODUCT + """
index = np.zeros((G, M), np.int64)
op = LimbMatrix(rows, 64).gather(index)  # checked here: in [-1, 16)
index[:] = 1 << 40  # the caller's array, changed afterwards
refused("an index changed after its check", lambda: right(ring_matmul(a, op, 64)), InvalidParameters)
""")
    _refused_or_right(lines)


@pytest.mark.parametrize("backend", BACKENDS)
# S27-P4, fixed (lead): CuckooLayout.scatter refuses an out that overlaps the layout's occurrences
def test_s27_p4_scatter_into_the_layouts_own_occurrences(backend: str) -> None:
    lines = _run("""
from secemb.fss.cuckoo import CuckooLayout
lay = CuckooLayout(20, 8)
bf = np.full((lay.num_buckets, lay.bucket_size, 3), 1 << 40, np.uint64)
refused("out over the layout's occurrences", lambda: lay.scatter(bf, out=lay.occurrences.view(np.uint64)),
        InvalidParameters)
got = lay.scatter(bf)
kernels.BACKEND = "numpy"
print("INTACT", bool(np.array_equal(got, CuckooLayout(20, 8).scatter(bf))))
""", backend)
    assert _verdict(lines).endswith("InvalidParameters") and "INTACT True" in lines, lines


# -- the kept buffers: nothing of one round or one close reaches another (regressions) -------------


def _same_arrays(kept: tuple, new: tuple) -> None:
    """The kept pair's running aggregates and close buffers are the new pair's, word for word
    (bucket padding included: nothing of an earlier round is left in them)."""
    for a, b in zip(kept, new, strict=True):
        assert np.array_equal(a._sparse, b._sparse) and np.array_equal(a._close_work, b._close_work)


def _fresh_round(proto: SecEmbProtocol, kept: tuple, seed: int, num_items: int = 300, **kw: object) -> None:
    """Round ``seed`` at ``kept`` and at a new pair with the same messages: their shares, running
    aggregates and close buffers equal."""
    new = _pair(proto)
    shares, expected, _ = _round(proto, [kept, new], proto.round_config(seed, num_items, W, 2, MP), seed=seed, **kw)
    assert shares[0] == shares[1] and expected.any()
    _same_arrays(kept, new)


def _table(cfg, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 100).integers(0, 2**32, (cfg.num_items, W), dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize("relay", [True, False], ids=["relay", "no-relay"])
def test_an_aborted_round_with_evaluations_never_committed_leaves_nothing(relay: bool) -> None:
    """Round 2 aborts midway: two users' retrievals are evaluated at both servers (the first takes
    the kept fold target, last round's running aggregate) and never committed; a third retrieves
    and uploads; no close.  Round 3 at the kept pair gives a new pair's shares, and the stale
    commits are refused (round ended) without changing them."""
    proto = SecEmbProtocol(layout="cuckoo", relay=relay)
    kept = _pair(proto)
    _round(proto, [kept], proto.round_config(1, 300, W, 2, MP), seed=21, n=3, uploaders=3, include=None)
    cfg = proto.round_config(2, 300, W, 2, MP)
    for s in kept:
        s.begin_round(cfg, _table(cfg, 22))
    users = _users(proto, cfg, 22, 3, 3)
    s0, s1 = kept
    first = [(u, users[u][2]) for u in (0, 1)]
    if relay:
        for u, (_, r1) in first:
            assert s1.handle_retrieval(u, r1) is None
        forwards = s0.relay_forwards([(u, r0) for u, (r0, _) in first])
        stale = [s0.evaluate_retrieval_many([(u, r0) for u, (r0, _) in first]),
                 s1.evaluate_relay_many([(u, f) for (u, _), f in zip(first, forwards, strict=True)])]
    else:
        stale = [s.evaluate_retrieval_many([(u, r[p]) for u, r in first]) for p, s in enumerate(kept)]
    assert all(s._spare is None for s in kept)  # the kept fold targets went to the stale evaluations
    user, slots, requests, grads, dense = users[2]
    user.retrieval_result(*_retrieve(proto, s0, s1, 2, requests))
    _upload(proto, s0, s1, 2, user.upload(grads, dense))
    new = _pair(proto)
    shares, _, _ = _round(proto, [kept, new], proto.round_config(3, 300, W, 2, MP), seed=23, n=4, uploaders=3,
                          include=None)
    assert shares[0] == shares[1]
    _same_arrays(kept, new)
    for commit in stale:
        with pytest.raises(ProtocolError, match="ended while its"):
            commit()
    assert (s1.aggregate_share(), s0.aggregate_share()) == shares[0][::-1]


def test_closes_over_other_users_in_turn_each_give_a_new_roles_shares() -> None:
    """A close over users A, then B, then A again, then everyone, at a kept pair (its close
    buffer rewritten by each) and at a new pair: every close's shares equal, A's twice."""
    proto = SecEmbProtocol(layout="cuckoo", relay=True)
    kept = _pair(proto)
    _round(proto, [kept], proto.round_config(1, 300, W, 2, MP), seed=31, n=3, uploaders=3, include=None)
    pairs = [kept, _pair(proto)]
    a, b = [0, 2, 3], [1, 3, 4]
    shares, _, _ = _round(proto, pairs, proto.round_config(2, 300, W, 2, MP), seed=32, n=6, uploaders=5, include=a)
    got = [[(s0.aggregate_share(inc), s1.aggregate_share(inc)) for inc in (b, a, None)] for s0, s1 in pairs]
    assert got[0] == got[1]
    assert got[0][1] == shares[0] != got[0][0]


def test_an_evaluation_that_fails_midway_leaves_nothing_in_the_next() -> None:
    """The first evaluation of round 2 (which takes the kept fold target) writes all-ones words into
    its folded part and fails; so does the silent users' evaluation of the first close.  The retries,
    and the round's shares, are a new pair's."""
    proto = SecEmbProtocol(layout="cuckoo", relay=False)
    kept, new = _pair(proto), _pair(proto)
    _round(proto, [kept], proto.round_config(1, 300, W, 2, MP), seed=41, n=3, uploaders=3, include=None)
    cfg = proto.round_config(2, 300, W, 2, MP)
    for s in (*kept, *new):
        s.begin_round(cfg, _table(cfg, 42))
    real = server_module.evaluate_into_task
    armed = [True]

    def failing(task: tuple) -> None:
        if armed[0]:
            armed[0] = False
            task[3][...] = np.iinfo(task[3].dtype).max  # the folded view, garbage
            raise RuntimeError("evaluation failed midway")
        real(task)

    users = _users(proto, cfg, 42, 4, 3)  # user 3 retrieves and stays silent
    answers = {}
    for pair in (kept, new):
        for party, s in enumerate(pair):
            armed[0] = pair is kept
            server_module.evaluate_into_task = failing
            try:
                if pair is kept:
                    with pytest.raises(RuntimeError, match="midway"):
                        s.handle_retrieval(0, users[0][2][party])
                replies = s.handle_retrieval_many([(u, users[u][2][party]) for u in range(4)])
            finally:
                server_module.evaluate_into_task = real
            assert not any(isinstance(r, Exception) for r in replies)
            answers[party] = replies
    for u, (user, slots, _, grads, dense) in enumerate(users[:3]):
        rows = user.retrieval_result(answers[0][u], answers[1][u])
        assert np.array_equal(rows[slots >= 0], _table(cfg, 42)[slots[slots >= 0]])
        uploads = user.upload(grads, dense)
        for s0, s1 in (kept, new):
            _upload(proto, s0, s1, u, uploads)
    got = []
    for s0, s1 in (kept, new):
        if s0 is kept[0]:
            for s in (s0, s1):  # the close's evaluation of silent user 3 fails once at each
                armed[0] = True
                server_module.evaluate_into_task = failing
                try:
                    with pytest.raises(RuntimeError, match="midway"):
                        s.aggregate_share()
                finally:
                    server_module.evaluate_into_task = real
        got.append((s0.aggregate_share(), s1.aggregate_share()))
    assert got[0] == got[1]
    _same_arrays(kept, new)


@pytest.mark.parametrize("relay", [True, False], ids=["relay", "no-relay"])
def test_a_shape_change_and_back_on_three_threads(relay: bool) -> None:
    """300 items, then 200 (the kept arrays made again), then 300 again, on a thread backend of 3
    workers: each round's shares are a new pair's."""
    backend: Backend = ThreadBackend(3)
    try:
        proto = SecEmbProtocol(layout="cuckoo", relay=relay, backend=backend)
        kept = _pair(proto)
        for seed, items in ((51, 300), (52, 200), (53, 300)):
            _fresh_round(proto, kept, seed, items, n=5, uploaders=4, include=None)
    finally:
        backend.close()


# -- hostile requests through the wire parsers, on the compiled kernels (regressions) --------------

#: round 1 at a kept pair; in round 2 hostile users (ids 100 and up) send the kept pair retrieval
#: requests (and, with the relay, forwards) with bytes of the key batch changed, or its whole body
#: random, at the exact length: each refused (a SecembError) or served, never a crash; then honest
#: users 0-3 (3 silent) at the kept pair and at a new one: the same replies, the right rows, the same
#: shares.  ``sys.argv[2]``: "relay" or "direct".
HOSTILE_REQUESTS = """
sys.path.insert(0, PROTOCOL_TESTS)
from test_s27_close_buffers import MP, W, _pair, _retrieve, _round, _upload, _users
from secemb.errors import SecembError
from secemb.framing import HEADER_BYTES as FRAME
from secemb.protocols.secemb import SecEmbProtocol

relay = sys.argv[2] == "relay"
proto = SecEmbProtocol(layout="cuckoo", relay=relay)
kept, new = _pair(proto), _pair(proto)
_round(proto, [kept], proto.round_config(1, 300, W, 2, MP), seed=61, n=3, uploaders=3, include=None)
cfg = proto.round_config(2, 300, W, 2, MP)
table = np.random.default_rng(62).integers(0, 2**32, (300, W), dtype=np.uint64).astype(np.uint32)
for s in (*kept, *new):
    s.begin_round(cfg, table)
s0, s1 = kept
gen = np.random.default_rng(63)  # public test data
template = _users(proto, cfg, 64, 1, 0)[0][2]
start = 2 * FRAME + 17  # past the message's frame, the batch's frame and its parameters

def changed(message, whole):
    body = bytearray(message)
    if whole:
        body[start:] = gen.integers(0, 256, len(body) - start, dtype=np.uint8).tobytes()
    else:
        at = int(gen.integers(start, len(body)))
        body[at] ^= int(gen.integers(1, 256))
    return bytes(body)

def attempt(what, fn):
    try:
        fn()
        print("SERVED", what)
    except SecembError as exc:
        print("REFUSED", what, type(exc).__name__)

user = 100
for k in range(60):
    whole = k % 6 == 0
    r0, r1 = changed(template[0], whole), changed(template[1], whole)
    if relay:
        honest = s1.handle_retrieval(user, template[1])  # server 1 keeps the device's roots
        attempt(f"{k} at server 0 then forwarded", lambda: s1.relay_retrieval(user, s0.handle_retrieval(user, r0)))
        fwd = s0.handle_retrieval(user + 1, template[0]) if s1.handle_retrieval(user + 1, template[1]) is None else None
        attempt(f"{k} forward changed", lambda: s1.relay_retrieval(user + 1, changed(fwd, whole)))
        attempt(f"{k} roots changed", lambda: s1.handle_retrieval(user + 2, r1))
        user += 3
    else:
        attempt(f"{k} at server 0", lambda: s0.handle_retrieval(user, r0))
        attempt(f"{k} at server 1", lambda: s1.handle_retrieval(user, r1))
        user += 1
users = _users(proto, cfg, 65, 4, 3)
for u, (dev, slots, requests, grads, dense) in enumerate(users):
    replies = [_retrieve(proto, a, b, u, requests) for a, b in (kept, new)]
    assert replies[0] == replies[1], "the kept pair's replies differ"
    rows = dev.retrieval_result(*replies[0])
    assert np.array_equal(rows[slots >= 0], table[slots[slots >= 0]]), "wrong rows"
    if grads is not None:
        uploads = dev.upload(grads, dense)
        for a, b in (kept, new):
            _upload(proto, a, b, u, uploads)
shares = [(b.aggregate_share(), a.aggregate_share()) for a, b in (kept, new)]
print("SAME SHARES", shares[0] == shares[1])
"""


@COMPILED
@pytest.mark.parametrize("relay", ["relay", "direct"])
def test_hostile_key_bytes_are_refused_or_served_and_the_round_is_a_new_pairs(relay: str) -> None:
    code = HOSTILE_REQUESTS.replace("PROTOCOL_TESTS", repr(str(Path(__file__).resolve().parents[1] / "protocols")))
    lines = _run(code.replace("sys.argv[2]", repr(relay)))
    verdicts = [ln for ln in lines if ln.startswith(("SERVED", "REFUSED"))]
    assert len(verdicts) == 180 if relay == "relay" else 120, lines
    assert {v.split()[0] for v in verdicts} == {"SERVED", "REFUSED"} and "SAME SHARES True" in lines, lines
    if relay == "relay":  # a forward server 0 altered is never evaluated
        assert all(v.startswith("REFUSED") and v.endswith("RelayTampered") for v in verdicts if "forward changed" in v)


# -- compiled and reference paths on extreme values (regressions) ----------------------------------


def _ring(bits: int) -> type[np.unsignedinteger]:
    return np.uint32 if bits == 32 else np.uint64


def _exact_product(a: np.ndarray, rows: np.ndarray, index: np.ndarray, cols: np.ndarray, bits: int) -> np.ndarray:
    """``a[g, :, :cols[g]] @ rows[index[g, :cols[g]]]`` (``-1`` a zero row) in Python ints, mod ``2^bits``."""
    g_n, k_n, _ = a.shape
    out = np.empty((g_n, k_n, rows.shape[1]), _ring(bits))
    for g in range(g_n):
        for k in range(k_n):
            for e in range(rows.shape[1]):
                total = sum(int(a[g, k, j]) * int(rows[index[g, j], e])
                            for j in range(int(cols[g])) if index[g, j] >= 0)
                out[g, k, e] = total % (1 << bits)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize(("k", "m", "d"), [(1, 1, 1), (5, 6, 3), (4, 7, 1)])
@pytest.mark.parametrize("index_kind", ["mixed", "all padding"])
def test_product_through_an_index_at_the_largest_words(backend: str, bits: int, k: int, m: int, d: int,
                                                       index_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every word ``2^k - 1`` (carries everywhere), K not a multiple of the kernel's four rows, one
    column, width 1, an index of -1 in places or everywhere, cols 0, 1 and M, into a transposed view:
    both paths give the Python-int product."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    top = np.iinfo(_ring(bits)).max
    groups, n_rows = 3, 9
    rows = np.full((n_rows, d), top, _ring(bits))
    rows[1] = 1
    a = np.full((groups, k, m), top, _ring(bits))
    index = (np.arange(groups * m).reshape(groups, m) % (n_rows + 1)) - 1
    if index_kind == "all padding":
        index[:] = -1
    cols = np.array([0, 1, m])
    want = _exact_product(a, rows, index, cols, bits)
    op = LimbMatrix(rows, bits).gather(index)
    assert np.array_equal(ring_matmul(a, op, bits, cols=cols), want)
    into = np.full((k, groups, d), 7, _ring(bits))  # user-major, written through its transposed view
    assert ring_matmul(a, op, bits, cols=cols, out=into.transpose(1, 0, 2)) is not None
    assert np.array_equal(into.transpose(1, 0, 2), want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a_dtype", [np.uint8, np.uint16, np.uint64])
def test_product_of_a_left_operand_of_another_width(backend: str, a_dtype: type[np.unsignedinteger],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A left operand of bits (uint8), 16-bit words or 64-bit words (past the 32-bit ring: only
    their low words count) times a uint32 table through an index: the Python-int product mod 2^32."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(101)  # public test data
    rows = gen.integers(0, 2**32, (9, 3), dtype=np.uint64).astype(np.uint32)
    index = gen.integers(-1, 9, (2, 5))
    a = gen.integers(0, np.iinfo(a_dtype).max, (2, 6, 5), dtype=np.uint64, endpoint=True).astype(a_dtype)
    want = _exact_product(a, rows, index, np.array([5, 5]), 32)
    assert np.array_equal(ring_matmul(a, LimbMatrix(rows, 32).gather(index), 32), want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize(("items", "width"), [(1, 1), (7, 1), (40, 3)])
@pytest.mark.parametrize("span", [slice(None), slice(0, 0), slice(None, None, -1), slice(1, None, 3)])
def test_scatter_at_the_largest_words(backend: str, bits: int, items: int, width: int, span: slice,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """One item, width 1, every word ``2^k - 1`` (an item of three rows carries twice), empty,
    reversed and strided ranges: both paths give the Python-int sums of the item's rows."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    lay = CuckooLayout(items, 3)
    top = np.iinfo(_ring(bits)).max
    bf = np.full((lay.num_buckets, lay.bucket_size, width), top, _ring(bits))
    flat = bf.reshape(-1, width)
    chosen = np.arange(items)[span]
    want = np.array([[sum(int(flat[r, e]) for r in lay.occurrences[i] if r >= 0) % (1 << bits) for e in range(width)]
                     for i in chosen], _ring(bits)).reshape(len(chosen), width)
    assert {int((lay.occurrences[i] >= 0).sum()) for i in range(items)} <= {1, 2, 3}
    assert np.array_equal(lay.scatter(bf, span), want)
    out = np.full((len(chosen), width), 5, _ring(bits))
    assert lay.scatter(bf, span, out=out) is out and np.array_equal(out, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("width", [1, 3, 5, 33])
@pytest.mark.parametrize("negate", [False, True])
def test_conversion_added_at_the_largest_words(backend: str, bits: int, width: int, negate: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Widths 1 and not a whole number of AES blocks, sources of words ``2^k - 1`` in any layout
    (a transposed one), in place and apart: ``dst = src +- Convert(word)`` with the conversions
    computed alone by :func:`~secemb.fss.convert.convert`."""
    from secemb.fss.convert import convert

    monkeypatch.setattr(kernels, "BACKEND", backend)
    words = np.frombuffer(bytes(range(48)), np.uint64).reshape(3, 2).copy()
    words[0] = np.iinfo(np.uint64).max
    top = np.iinfo(_ring(bits)).max
    conv = convert(words, width, bits, "relay")
    with np.errstate(over="ignore"):
        want = [np.full(width, top, _ring(bits)) - c if negate else np.full(width, top, _ring(bits)) + c for c in conv]
    src = [np.full((width, 1), top, _ring(bits)).T for _ in range(3)]  # (1, width) views of a column
    dst = [np.zeros((1, width), _ring(bits)) for _ in range(3)]
    convert_add(words, "relay", dst, src, negate=negate)
    assert all(np.array_equal(x.ravel(), w) for x, w in zip(dst, want, strict=True))
    same = [np.full(width, top, _ring(bits)) for _ in range(3)]
    convert_add(words, "relay", same, negate=negate)
    assert all(np.array_equal(x, w) for x, w in zip(same, want, strict=True))
    convert_add(np.empty((0, 2), np.uint64), "relay", [])  # no words: nothing to do


@COMPILED
@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("length", [1, 31, 32, 33, 65])
@pytest.mark.parametrize(("devices", "rows"), [(1, 1), (5, 3)])
def test_projections_compiled_are_the_references_at_the_largest_words(bits: int, length: int, devices: int,
                                                                      rows: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``sign_products`` / ``ternary_products`` around the 32-entry pass, one row (paired with
    itself), one device and a last pass of one, every word ``2^k - 1``: the compiled
    projections (and the affine ones, counts up to ``2^62``) are the numpy reference's words."""
    top = np.iinfo(_ring(bits)).max
    x = np.full((devices, length), top, _ring(bits))
    x[:, ::3] = 1
    seeds = [bytes([d % 2]) * 16 for d in range(devices)]  # two devices a seed
    slots, width = (length - 1) // 2 or 1, 1 if length < 3 else 2
    tail_n = length - slots * width
    parts = [(np.full((slots, width), top, _ring(bits)), np.array([1 << 62] + [3] * (slots - 1), np.int64),
              np.full((slots, width), top - d, _ring(bits)), np.full(tail_n, top, _ring(bits)))
             for d in range(devices)]
    got = {}
    for backend in ("numba", "numpy"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        got[backend] = (project_each(seeds, x, rows), project_affine(seeds, True, parts, rows))
    assert np.array_equal(got["numba"][0], got["numpy"][0]) and np.array_equal(got["numba"][1], got["numpy"][1])
    assert got["numba"][0].any()


#: over server 0's HTTP app (both servers in process, relay, the cuckoo layout): each honest
#: device's request is first sent 6 times by participants that send nothing else, each its own: the
#: device's roots to server 1 (in process), then over HTTP to server 0 the device's request with
#: bytes of its key batch changed at random places (the first: the whole body random) at the exact
#: length, signed as that participant.  Server 0 parses (and, where the keys parse, evaluates) each:
#: a 4xx (a key refused, or server 1 refusing the forward: the device's digest) or served, never a
#: 5xx; then the round commits with the honest devices.  The prelude (imports, the app, the servers)
#: is session 20's (:data:`HTTP_REQUESTS`, up to its ``class Hostile``).
HTTP_BODIES = HTTP_REQUESTS[: HTTP_REQUESTS.index("class Hostile")] + """
spare = [u for u in range(30) if u not in USERS]
gen = np.random.default_rng(71)  # public test data
roots = {}

class Roots(LocalServerLink):
    # server 1's link of an honest device: its roots kept for the hostile participants to send
    def retrieval(self, round_id, body):
        roots[self.user] = body
        return super().retrieval(round_id, body)

class Hostile(LocalServerLink):
    def retrieval(self, round_id, body):
        path = f"/v1/rounds/{round_id}/retrieval"
        for k in range(6):
            bad = bytearray(body)
            if k == 0:
                bad[at + 17 :] = gen.integers(0, 256, len(bad) - at - 17, dtype=np.uint8).tobytes()
            else:
                bad[int(gen.integers(at + 17, len(bad)))] ^= int(gen.integers(1, 256))
            sender = spare.pop(0)
            assert LocalServerLink(follower, sender, servers.tp).retrieval(round_id, roots[self.user]) is None
            headers = sign_headers(f"user:{sender}", user_key(leader.cfg.user_secret, sender), "POST", path, "",
                                   bytes(bad))
            got = http.post(path, content=bytes(bad), headers=headers | {"Content-Type": "application/octet-stream"})
            statuses.append(got.status_code)
            print("DETAIL", got.status_code, got.json().get("detail", "")[:60] if got.status_code >= 400 else "")
        return super().retrieval(round_id, body)

r = int(leader.open_round(participants=USERS + spare, deadline_s=WAIT_S)["round_id"])
for u in USERS:
    links = (Hostile(leader, u, servers.tp), Roots(follower, u, servers.tp))
    client = DeviceClient.over(u, links, min_users=FLOOR)
    Device(client, *RATINGS.of(u)).participate(client.round_info())
print("STATUSES", sorted(set(statuses)), len(statuses))
doc = leader.close_round(r)
print("CLOSED", doc["state"], doc["included"] == sorted(USERS))
"""


@COMPILED
def test_changed_key_bytes_over_http_are_never_a_5xx_and_the_round_commits() -> None:
    pytest.importorskip("fastapi")
    lines = _run(HTTP_BODIES.replace("SERVER_TESTS", repr(str(Path(__file__).resolve().parents[1] / "server"))))
    statuses = next(ln for ln in lines if ln.startswith("STATUSES"))
    assert statuses.endswith(" 24") and all(int(c) < 500 for c in statuses[10:statuses.index("]")].split(", ")), lines
    assert "CLOSED committed True" in lines, lines


@pytest.mark.parametrize("when", ["before its fold target", "during its walk"])
def test_a_round_opened_while_the_last_ones_evaluation_runs(when: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rounds' evaluations overlap: while round 2's first evaluation runs at each server (another
    thread's work in a deployment), round 3 opens there -- before the evaluation takes its fold
    target (it then takes round 3's kept array) or during its walk (its target is round 1's).  The
    stale commit is refused and round 3 at the kept pair gives a new pair's shares."""
    proto = SecEmbProtocol(layout="cuckoo", relay=False)
    kept = _pair(proto)
    _round(proto, [kept], proto.round_config(1, 300, W, 2, MP), seed=81, n=3, uploaders=3, include=None)
    cfg2, cfg3 = proto.round_config(2, 300, W, 2, MP), proto.round_config(3, 300, W, 2, MP)
    for s in kept:
        s.begin_round(cfg2, _table(cfg2, 82))
    users = _users(proto, cfg2, 82, 2, 2)
    stale = []
    for party, s in enumerate(kept):
        opened = []

        def open_next(s=s, opened=opened) -> None:
            if not opened:
                opened.append(True)
                s.begin_round(cfg3, _table(cfg3, 83))

        if when == "before its fold target":
            real = s._fold_target
            monkeypatch.setattr(s, "_fold_target",
                                lambda shape, dtype, real=real, hook=open_next: (hook(), real(shape, dtype))[1])
        else:
            real_task = server_module.evaluate_into_task
            monkeypatch.setattr(server_module, "evaluate_into_task",
                                lambda task, real=real_task, hook=open_next: (hook(), real(task))[1])
        stale.append(s.evaluate_retrieval_many([(u, users[u][2][party]) for u in range(2)]))
        monkeypatch.undo()
        assert opened and s.config is cfg3
    for commit in stale:
        with pytest.raises(ProtocolError, match="ended while its"):
            commit()
    new = _pair(proto)
    for s in new:
        s.begin_round(cfg3, _table(cfg3, 83))
    # round 3 as _round plays it, without opening it again at the kept pair (that would drop its
    # kept array): the same users and messages at both pairs
    users3 = _users(proto, cfg3, 84, 4, 3)
    for u, (dev, slots, requests, grads, dense) in enumerate(users3):
        replies = [_retrieve(proto, a, b, u, requests) for a, b in (kept, new)]
        assert replies[0] == replies[1]
        rows = dev.retrieval_result(*replies[0])
        assert np.array_equal(rows[slots >= 0], _table(cfg3, 83)[slots[slots >= 0]])
        if grads is not None:
            uploads = dev.upload(grads, dense)
            for a, b in (kept, new):
                _upload(proto, a, b, u, uploads)
    assert (kept[1].aggregate_share(), kept[0].aggregate_share()) == (new[1].aggregate_share(),
                                                                      new[0].aggregate_share())
    _same_arrays(kept, new)


#: the boundaries where today's relay masks reach a kernel from another party's bytes: server 1's
#: relay answer at server 0 and server 0's reply at the device, each one word short, one word
#: long, and empty: refused with InvalidMessage, nothing changed (the honest ones then served).
REPLY_LENGTHS = """
sys.path.insert(0, PROTOCOL_TESTS)
from test_s27_close_buffers import MP, W, _pair, _users
from secemb.protocols.secemb import SecEmbProtocol

proto = SecEmbProtocol(layout="cuckoo", relay=True)
s0, s1 = _pair(proto)
cfg = proto.round_config(1, 300, W, 2, MP)
table = np.random.default_rng(91).integers(0, 2**32, (300, W), dtype=np.uint64).astype(np.uint32)
for s in (s0, s1):
    s.begin_round(cfg, table)
dev, slots, (r0, r1), _, _ = _users(proto, cfg, 92, 1, 0)[0]
assert s1.handle_retrieval(0, r1) is None
answer = s1.relay_retrieval(0, s0.handle_retrieval(0, r0))
for name, bad in (("short", answer[:-4]), ("long", answer + bytes(4)), ("empty", b"")):
    refused(f"relay answer {name}", lambda: s0.complete_retrieval(0, bad), InvalidMessage)
reply = s0.complete_retrieval(0, answer)
for name, bad in (("short", reply[:-4]), ("long", reply + bytes(4)), ("empty", b"")):
    refused(f"reply {name}", lambda: dev.retrieval_result(bad, None), InvalidMessage)
rows = dev.retrieval_result(reply, None)
print("ROWS", bool(np.array_equal(rows[slots >= 0], table[slots[slots >= 0]])))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_relay_answers_and_replies_of_other_lengths_are_refused_before_the_masks(backend: str) -> None:
    code = REPLY_LENGTHS.replace("PROTOCOL_TESTS", repr(str(Path(__file__).resolve().parents[1] / "protocols")))
    lines = _run(code, backend)
    assert_all_refused(lines, 6, "InvalidMessage")
    assert "ROWS True" in lines, lines
