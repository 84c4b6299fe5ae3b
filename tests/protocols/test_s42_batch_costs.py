"""What a server pays per batch (session 42, helper P), cut without changing a byte.

- ``ring_matmul``'s kernel sums the rows it has fewer than four of (a batch of one device: one row
  a bucket) four columns at once: the compiled product equals the exact one (Python integers) and
  the numpy reference, bit for bit, for 1 to 7 rows, padding rows (``-1``) anywhere among the
  columns, column limits and both rings.
- A cuckoo batch after the round's first is walked into an array in the walk's own row layout,
  unsigned, and added into the running aggregate at its commit with the party's sign
  (``_Unsigned``): the walk's product equals the one it writes in the layout's form, and a round of
  devices that come one at a time gives every reply and both aggregate shares byte for byte as
  the same round in one batch, with and without relay and verified uploads, serial and threads.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.fused import RETRIEVAL_TAG, fold_buckets, retrieve_and_prepare_buckets
from secemb.fss.linalg import LimbMatrix, ring_matmul
from secemb.fss.tree import padded_leaves
from secemb.protocols.backends import Backend, ThreadBackend
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer
from secemb.protocols.secemb.server import _Unsigned
from secemb.randomness import CtrDrbg

W, P, MP, ITEMS = 5, 2, 12, 300


def _exact(a: np.ndarray, rows: np.ndarray, index: np.ndarray, cols: np.ndarray, ring_bits: int) -> np.ndarray:
    """``a[g, :, :cols[g]] @ rows[index[g, :cols[g]]]`` per group (``-1``: a zero row) in Python integers."""
    out = np.zeros((a.shape[0], a.shape[1], rows.shape[1]), object)
    for g in range(a.shape[0]):
        for i in range(a.shape[1]):
            for j in range(int(cols[g])):
                if index[g, j] >= 0:
                    out[g, i] += int(a[g, i, j]) * rows[index[g, j]].astype(object)
    return (out % (1 << ring_bits)).astype(rows.dtype)


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 7])
def test_the_few_rows_product_is_the_exact_one(ring_bits: int, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows left over after blocks of four (``k % 4``; all of them below four) are summed four
    columns at a time, a padding row among four taking the one-column path: every group's product
    is the exact one and the reference's."""
    assert kernels.compiled()  # the compiled product is the one under test
    dt = np.uint32 if ring_bits == 32 else np.uint64
    gen = np.random.default_rng(ring_bits * 10 + k)
    groups, m, n = 5, 11, 23
    rows = gen.integers(0, np.iinfo(dt).max, (n, 6), dtype=dt, endpoint=True)
    index = gen.integers(0, n, (groups, m))
    index[1, 2] = index[1, 9] = -1  # padding inside a block of four and in the tail
    index[3, 4:8] = -1  # a whole block of four
    cols = np.array([11, 10, 8, 7, 0])  # whole blocks, a tail, nothing
    a = gen.integers(0, np.iinfo(dt).max, (groups, k, m), dtype=dt, endpoint=True)
    gathered = LimbMatrix(rows, ring_bits).gather(index)
    got = ring_matmul(a, gathered, ring_bits, cols=cols)
    want = _exact(a, rows, index, cols, ring_bits)
    assert np.array_equal(got, want)
    # a 0/1 left operand of another dtype, and a strided destination (the answers' transposed view)
    bits = gen.integers(0, 2, (groups, k, m), dtype=np.uint8)
    out = np.empty((k, groups, 6), dt)
    ring_matmul(bits, gathered, ring_bits, a_bits=1, cols=cols, out=out.transpose(1, 0, 2))
    assert np.array_equal(out.transpose(1, 0, 2), _exact(bits, rows, index, cols, ring_bits))
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    assert np.array_equal(ring_matmul(a, gathered, ring_bits, cols=cols), want)


@pytest.mark.parametrize("party", [0, 1])
def test_the_walk_sums_into_its_own_row_layout_as_into_the_layouts(party: int) -> None:
    """``retrieve_and_prepare_buckets`` given a C-contiguous (B, mp, w) folded part sums into it
    directly: the layout's (B, M, w) values at positions below M, zero at the padding, and the same
    answers and bits as with a (B, M, w) view (M = 6 is not mp = 8)."""
    buckets, big_m, users, width = 3, 6, 2, 4
    gen = np.random.default_rng(party)
    tables = gen.integers(0, 2**32, (buckets, big_m, width + 1), dtype=np.uint64).astype(np.uint32)
    sizes = np.array([6, 4, 5])
    tables[1, 4:] = tables[2, 5:] = 0  # zero rows pad short buckets
    alphas = np.array([(u * 2 + i) % s for u in range(users) for i, s in enumerate(sizes)])
    paths = fss.gen_path(alphas, big_m, _rng=CtrDrbg(party + 1))
    cw = fss.convert_gen(paths[2], np.ones((len(alphas), 1), np.uint32), ring_bits=32, tag=RETRIEVAL_TAG)
    keys = paths[party]
    mp = padded_leaves(keys.params)
    assert mp != big_m
    views = (np.empty((users, buckets, width + 1), np.uint32), np.empty((users, buckets, big_m), np.uint8),
             np.empty((buckets, big_m, width), np.uint32))
    padded = (np.empty_like(views[0]), np.empty_like(views[1]), np.full((buckets, mp, width), 7, np.uint32))
    for out in (views, padded):
        retrieve_and_prepare_buckets(keys, party, cw, tables, width, sizes=sizes, out=out)
    assert np.array_equal(padded[0], views[0]) and np.array_equal(padded[1], views[1])
    assert np.array_equal(padded[2][:, :big_m], views[2]) and views[2].any()
    assert not padded[2][:, big_m:].any()
    with pytest.raises(InvalidParameters, match="out must be"):  # padded but not C-contiguous: refused
        retrieve_and_prepare_buckets(keys, party, cw, tables, width, sizes=sizes,
                                     out=(views[0], views[1], np.empty((buckets, mp, 2 * width), np.uint32)[:, :, ::2]))


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("negate", [False, True])
def test_a_fold_adds_each_buckets_rows_below_its_size(ring_bits: int, negate: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``fold_buckets``: each bucket's first ``sizes[i]`` rows of a padded (B, R, w) array added
    (subtracted) into (B, M, w), the rest of both untouched, wrapping in the ring; compiled and
    reference alike, against a Python-integer loop."""
    dt = np.uint32 if ring_bits == 32 else np.uint64
    gen = np.random.default_rng(ring_bits + negate)
    acc = gen.integers(0, np.iinfo(dt).max, (4, 5, 3), dtype=dt, endpoint=True)
    rows = gen.integers(0, np.iinfo(dt).max, (4, 7, 3), dtype=dt, endpoint=True)
    sizes = np.array([5, 0, 3, 1])
    want = acc.astype(object)
    for i, size in enumerate(sizes):
        want[i, :size] = (want[i, :size] + (-1 if negate else 1) * rows[i, :size].astype(object)) % (1 << ring_bits)
    for backend in ("numba", "numpy"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        got = acc.copy()
        fold_buckets(got, rows, sizes, negate=negate)
        assert np.array_equal(got, want.astype(dt)), backend
    for bad in (dict(rows=rows[:, :4]), dict(sizes=np.array([5, 0, 3, 6])), dict(sizes=sizes[:3]),
                dict(rows=rows.astype(np.uint16)), dict(acc=acc[:, :, ::2])):
        args = {"acc": acc.copy(), "rows": rows, "sizes": sizes, **bad}
        before = args["acc"].copy()
        with pytest.raises(InvalidParameters, match="fold_buckets"):
            fold_buckets(args["acc"], args["rows"], args["sizes"])
        assert np.array_equal(args["acc"], before)
    with pytest.raises(InvalidParameters, match="apart from acc"):
        fold_buckets(acc, acc, sizes)


def test_a_buckets_ranges_are_made_once_and_not_pickled() -> None:
    """The published cuckoo table (``Buckets``) makes a range's gathered matrix and sizes once
    (the same objects for every task of it), and pickles without them (a worker makes its own)."""
    import pickle

    from secemb.fss.cuckoo import CuckooLayout
    from secemb.fss.tasks import evaluation_form

    layout = CuckooLayout.for_request_size(40, 6)
    table = np.arange(40 * 3, dtype=np.uint32).reshape(40, 3)
    form = evaluation_form(table, layout, 32)
    first, sizes = form.tables(1, 4), form.sizes(1, 4)
    assert form.tables(1, 4) is first and form.sizes(1, 4) is sizes
    assert np.array_equal(sizes, (layout.gather_index[1:4] >= 0).sum(axis=1)) and not sizes.flags.writeable
    assert np.array_equal(first.index, layout.gather_index[1:4])
    copy = pickle.loads(pickle.dumps(form))
    assert copy._ranges == {} and copy.tables(1, 4) is not first
    assert np.array_equal(copy.tables(1, 4).index, first.index)


def _round(proto: SecEmbProtocol, s0: SecEmbServer, s1: SecEmbServer, cfg, batches: list[list[int]],
           users: list) -> tuple[list, bytes, bytes]:
    """Round ``cfg``: the users retrieve and upload in ``batches`` (lists of user ids), each batch at
    once (``*_many``); the replies (per user, both servers'), and both aggregate shares."""
    table = np.random.default_rng(5).integers(0, 2**32, (cfg.num_items, W), dtype=np.uint64).astype(np.uint32)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    replies: list = [None] * len(users)
    for g in batches:
        reqs = [users[u][1] for u in g]
        if proto.relay:
            assert s1.handle_retrieval_many([(u, r[1]) for u, r in zip(g, reqs, strict=True)]) == [None] * len(g)
            fwds = s0.handle_retrieval_many([(u, r[0]) for u, r in zip(g, reqs, strict=True)])
            masked = s1.relay_retrieval_many(list(zip(g, fwds, strict=True)))
            for u, mk in zip(g, masked, strict=True):
                replies[u] = (s0.complete_retrieval(u, mk), None)
        else:
            a0 = s0.handle_retrieval_many([(u, r[0]) for u, r in zip(g, reqs, strict=True)])
            a1 = s1.handle_retrieval_many([(u, r[1]) for u, r in zip(g, reqs, strict=True)])
            for u, x0, x1 in zip(g, a0, a1, strict=True):
                replies[u] = (x0, x1)
    uploads = []
    for (user, _, grads, dense), reply in zip(users, replies, strict=True):
        user.retrieval_result(*reply)
        uploads.append(user.upload(grads, dense))
    for g in batches:
        if proto.relay:
            fwds = s0.handle_upload_many([(u, uploads[u][0]) for u in g])
            assert s1.relay_upload_many(list(zip(g, fwds, strict=True))) == [None] * len(g)
        else:
            assert s1.handle_upload_many([(u, uploads[u][1]) for u in g]) == [None] * len(g)
            assert s0.handle_upload_many([(u, uploads[u][0]) for u in g]) == [None] * len(g)
    return replies, s0.aggregate_share(), s1.aggregate_share()


def _users(proto: SecEmbProtocol, cfg, n: int) -> list:
    """``n`` users (seeded: two runs make the same messages): per user (user, requests, grads, dense)."""
    rng = np.random.default_rng(11)
    out = []
    for u in range(n):
        user = proto.make_user(cfg, _rng=CtrDrbg(bytes([42, u]) * 8))
        slots, _ = cfg.cuckoo().assign(rng.choice(cfg.num_items, MP, replace=False), rng)
        grads = np.zeros((cfg.slots, W), np.uint32)
        grads[slots >= 0] = rng.integers(0, 2**32, (int((slots >= 0).sum()), W), dtype=np.uint64).astype(np.uint32)
        out.append((user, user.retrieval_request(slots), grads, rng.integers(0, 2**32, P, dtype=np.uint64)
                    .astype(np.uint32)))
    return out


@pytest.mark.parametrize("relay", [True, False], ids=["relay", "no-relay"])
@pytest.mark.parametrize("verify", [True, False], ids=["verified", "unchecked"])
@pytest.mark.parametrize("workers", [None, 2], ids=["serial", "threads"])
def test_devices_one_at_a_time_give_the_one_batchs_bytes(relay: bool, verify: bool, workers: int | None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Six devices in batches of 1, 1, 3 and 1 against the same six in one batch (new server pairs,
    one protocol's, so one sketch key; the same messages): every reply and both aggregate shares
    are the same bytes (and not all zero), and the batches
    after each server's first were committed in the unsigned walk layout (what is under test)."""
    backend: Backend | None = None if workers is None else ThreadBackend(workers)
    forms: list[str] = []
    commit = SecEmbServer._commit_evaluated

    def spy(self: SecEmbServer, users: list[int], keys: list, evaluated: tuple, *args: object) -> object:
        forms.append("unsigned" if isinstance(evaluated[2], _Unsigned) else "signed")
        return commit(self, users, keys, evaluated, *args)

    monkeypatch.setattr(SecEmbServer, "_commit_evaluated", spy)
    try:
        got = []
        proto = SecEmbProtocol(layout="cuckoo", relay=relay, verify=verify, backend=backend)  # one sketch key
        cfg = proto.round_config(1, ITEMS, W, P, MP)
        for batches in ([[0, 1, 2, 3, 4, 5]], [[0], [1], [2, 3, 4], [5]]):
            forms.clear()
            got.append(_round(proto, proto.make_server(0), proto.make_server(1), cfg, batches, _users(proto, cfg, 6)))
        # each server's first batch adopted as its aggregate, its three others added unsigned (with relay
        # server 1 evaluates the forwarded keys: relay_retrieval_many)
        assert forms == ["signed"] * 2 + ["unsigned"] * 6
        assert got[0] == got[1]
        assert any(got[0][1][-64:])  # a share's words are there (not an empty or zero aggregate)
    finally:
        if backend is not None:
            backend.close()


def test_a_small_batch_is_walked_in_one_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cuckoo batch of fewer than ``FOLD_USERS`` users is one task whatever the cache bound; one of
    ``FOLD_USERS`` is cut by it (here into one range a bucket: a bound of one byte)."""
    import secemb.protocols.secemb.server as server

    tasks: list[int] = []
    into = server.evaluate_into_task

    def counting(task: tuple) -> None:
        tasks.append(1)
        into(task)

    monkeypatch.setattr(server, "evaluate_into_task", counting)
    monkeypatch.setattr(server, "FOLD_BYTES", 1)
    monkeypatch.setattr(server, "FOLD_USERS", 3)
    proto = SecEmbProtocol(layout="cuckoo", relay=False, verify=False)
    cfg = proto.round_config(1, ITEMS, W, P, MP)
    s0 = proto.make_server(0)
    s0.begin_round(cfg, np.zeros((ITEMS, W), np.uint32))
    users = _users(proto, cfg, 5)
    for batch, expect in (([0, 1], 1), ([2, 3, 4], cfg.slots)):
        tasks.clear()
        got = s0.handle_retrieval_many([(u, users[u][1][0]) for u in batch])
        assert not any(isinstance(r, Exception) for r in got)
        assert len(tasks) == expect
