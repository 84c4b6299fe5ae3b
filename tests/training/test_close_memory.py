"""Issue 37, goal 5 (GREC's DeepFM at d = 512: 112 M dense values, 900 MB a float64 copy): the
round close holds as few model-sized arrays as it can, with the same bits as the plain formulas.
Both servers close a round at once (in one process in the simulation), so every model-sized
temporary of the close counts twice.  The reference values are the formulas written out here,
not the code under test; the memory bounds are tracemalloc peaks (numpy reports its buffers)."""

from __future__ import annotations

import gc
import hashlib
import struct
import sys
import threading
import weakref
from typing import Any
from pathlib import Path

import numpy as np
import pytest

from secemb.digest import model_sha256
from secemb.models.optim import AdamConfig, adam_update
from secemb.protocols.wire import HEADER_BYTES
from secemb.ring import FixedPoint
from secemb.round import messages
from secemb.round.optimizer import ServerAdam
from secemb.round.update import apply_aggregate
from secemb.server.store import CHECKPOINT, STAGED, Checkpoint, MemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from deviation_helpers import in_process, play_round  # type: ignore[import-not-found]  # noqa: E402
from test_big_model_buffers import _adam_formula, _peak_bytes  # type: ignore[import-not-found]  # noqa: E402


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))  # -0.0 included


@pytest.mark.parametrize(
    ("shape", "t"),
    [((200_003,), 4), ((3001, 70), 2), ((5, 40_000), 7), ((65_536,), 1), ((0,), 1), ((4, 0), 2), ((1, 1), 1)],
)
def test_adam_update_in_blocks_is_the_formula(shape: tuple[int, ...], t: int) -> None:
    """Blocks of rows, the last one short, rows wider than a block, empty arrays (a model
    without dense parameters, e.g. SASRec's empty dense vector): the bits of one pass."""
    cfg = AdamConfig(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-7)
    rng = np.random.default_rng(5)
    want = [rng.normal(size=shape), rng.normal(size=shape), rng.normal(size=shape), rng.random(size=shape)]
    want[1].reshape(-1)[::4] = 0.0
    want[1].reshape(-1)[1::9] = -0.0
    got = [a.copy() for a in want]
    for step in range(t, t + 3):
        _adam_formula(want[0], want[1], want[2], want[3], step, cfg)
        adam_update(got[0], got[1], got[2], got[3], step, cfg)
    assert all(_same_bits(a, b) for a, b in zip(got, want, strict=True))


def test_adam_update_scratch_is_block_sized() -> None:
    """The dense vector's step: two 512 KiB scratch arrays (was two of the vector's size)."""
    p, g, m, v = (np.full(4_000_000, x) for x in (1.0, 0.5, 0.1, 0.2))  # 32 MB each
    assert _peak_bytes(lambda: adam_update(p, g, m, v, 3, AdamConfig())) < 0.1 * p.nbytes


def _aggregate_case(fp: FixedPoint, n: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(11)
    signed = np.dtype(f"int{fp.ring_bits}")
    sparse = rng.integers(-(2**20), 2**20, (300, 16)).astype(signed).view(fp.dtype)
    sparse[::3] = 0  # rows no user touched: the lazy step leaves them
    dense = rng.integers(-(2**28), 2**28, 1_500_001).astype(signed).view(fp.dtype)
    dense[::5] = 0
    return sparse, dense


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_apply_aggregate_is_the_mean_and_adam(ring_bits: int) -> None:
    fp, n, cfg = FixedPoint(ring_bits, 16), 7, AdamConfig()
    sparse, dense = _aggregate_case(fp, n)
    rng = np.random.default_rng(2)
    table0, dense0 = rng.normal(size=sparse.shape), rng.normal(size=dense.shape)
    opt = ServerAdam(sparse.shape[0], sparse.shape[1], dense.size, cfg)
    table, dvec = table0.copy(), dense0.copy()
    sums = sparse.copy(), dense.copy()
    signed = np.dtype(f"int{ring_bits}")
    g_table = sparse.view(signed).astype(np.float64) * 2.0**-16 / n
    g_dense = dense.view(signed).astype(np.float64) * 2.0**-16 / n
    rows = np.flatnonzero(np.any(g_table != 0, axis=1))
    want_t, m, v = table0[rows], np.zeros((rows.size, 16)), np.zeros((rows.size, 16))
    want_d, dm, dv = dense0.copy(), np.zeros(dense.size), np.zeros(dense.size)
    for t in (1, 2):
        _adam_formula(want_t, g_table[rows], m, v, t, cfg)
        _adam_formula(want_d, g_dense, dm, dv, t, cfg)
        apply_aggregate(fp, opt, table, dvec, sparse, dense, n)
    want_table = table0.copy()
    want_table[rows] = want_t
    assert _same_bits(table, want_table) and _same_bits(dvec, want_d)
    assert _same_bits(opt.state_dict()["dm"], dm) and _same_bits(opt.state_dict()["dv"], dv)
    assert np.array_equal(sparse, sums[0]) and np.array_equal(dense, sums[1])  # the sums are left as they were


def test_apply_aggregate_holds_one_decoded_copy() -> None:
    """The decoded dense mean (12 MB here) is the close's one model-sized temporary: its division
    is in place and the step's scratch is block-sized (was: decode, quotient and two scratch
    arrays, four copies)."""
    fp, n = FixedPoint(32, 16), 3
    sparse, dense = _aggregate_case(fp, n)
    opt = ServerAdam(sparse.shape[0], sparse.shape[1], dense.size, AdamConfig())
    table, dvec = np.zeros(sparse.shape), np.zeros(dense.size)
    peak = _peak_bytes(lambda: apply_aggregate(fp, opt, table, dvec, sparse, dense, n))
    assert peak < 1.35 * dvec.nbytes


# ---------------------------------------------------------------- the model sync to server 1


def _model(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    table, dense = rng.normal(size=(40, 7)), rng.normal(size=2_000_003)  # 16 MB dense
    dense[::3] = -0.0
    return table, dense


def test_encode_model_copies_once_into_the_message() -> None:
    table, dense = _model(np.random.default_rng(4))
    want_body = struct.pack("<II", 40, 7) + table.tobytes() + dense.tobytes()
    msg = messages.encode_model(3, table, dense)
    assert msg[HEADER_BYTES:] == want_body and messages.model_version(msg) == 3
    assert msg == messages.encode_model(3, np.asfortranarray(table), dense[::-1][::-1])  # any layout, same bytes
    assert _peak_bytes(lambda: messages.encode_model(3, table, dense)) < 1.3 * dense.nbytes  # was ~2x


def test_decode_model_without_copy_views_the_message() -> None:
    table, dense = _model(np.random.default_rng(6))
    msg = messages.encode_model(2, table, dense)

    def decode(data: bytes, copy: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return messages.decode_model(data, version=2, num_items=40, width=7, dense_size=dense.size, copy=copy)

    views, copies = decode(msg, copy=False), decode(msg)
    for got in (views, copies):
        assert _same_bits(got[0], table) and _same_bits(got[1], dense)
    assert not any(a.flags.writeable for a in views) and all(a.flags.writeable for a in copies)
    raw = np.frombuffer(msg, np.uint8)
    assert all(np.shares_memory(a, raw) for a in views) and not any(np.shares_memory(a, raw) for a in copies)
    assert _peak_bytes(lambda: decode(msg, copy=False)) < 0.2 * dense.nbytes
    assert not any(a.flags.writeable for a in decode(bytearray(msg), copy=False))  # type: ignore[arg-type]


def test_model_sha256_hashes_in_place() -> None:
    table, dense = _model(np.random.default_rng(8))
    want = hashlib.sha256(table.astype("<f8").tobytes() + dense.astype("<f8").tobytes()).hexdigest()
    assert model_sha256(table, dense) == want == model_sha256(np.asfortranarray(table), dense.astype(">f8"))
    assert _peak_bytes(lambda: model_sha256(table, dense)) < 0.1 * dense.nbytes  # was one copy of the model


def test_load_state_dict_without_copy_takes_the_arrays() -> None:
    opt = ServerAdam(3, 2, 5, AdamConfig())
    state: dict[str, Any] = {"steps": 4, "m": np.ones((3, 2)), "v": np.full((3, 2), 2.0), "row_t": np.arange(3),
                             "dm": np.full(5, 3.0), "dv": np.full(5, 4.0)}
    state["dv"].flags.writeable = False  # as a MemoryStore keeps it
    opt.load_state_dict(state, copy=False)
    got = opt.state_dict()
    assert all(got[k] is state[k] for k in ("m", "v", "row_t", "dm", "dv")) and got["steps"] == 4
    with pytest.raises(ValueError, match="read-only"):  # a read-only state is stepped on a copy only
        opt.step(np.zeros((3, 2)), np.zeros(5), np.ones((3, 2)), np.ones(5))
    opt.load_state_dict(state)
    assert not any(np.shares_memory(opt.state_dict()[k], state[k]) for k in ("m", "v", "row_t", "dm", "dv"))
    assert opt.state_dict()["dv"].flags.writeable


def test_memory_store_keeps_arrays_read_only_and_hands_out_copies() -> None:
    store = MemoryStore(1, "fp")
    table, dense, dm = np.ones((2, 3)), np.arange(5.0), np.full(5, 2.0)
    whole = np.zeros((2, 5))
    view = whole[1]  # a view: copied, so that writes through its base cannot reach the store
    opt = {"steps": 1, "m": np.zeros((2, 3)), "v": np.zeros((2, 3)), "row_t": np.ones(2, np.int64), "dm": dm,
           "dv": view}
    ck = Checkpoint(1, 0, [3, 4], 7, 2.0, table, dense, "s" * 64, opt)
    store.save(ck, staged=True)
    store.save(ck)  # the commit: the same arrays, no second copy
    held = store._cks[CHECKPOINT][1]
    assert held["table"] is table and held["dense"] is dense and held["opt_dm"] is dm
    assert held["opt_dv"] is not view and store._cks[STAGED][1]["table"] is table
    assert not any(a.flags.writeable for a in (table, dense, dm, held["opt_dv"]))
    whole[1] = 9.0
    with pytest.raises(ValueError, match="read-only"):
        dense[0] = 1.0
    got = store.load()
    assert got is not None and got.optimizer is not None and got.dense.flags.writeable
    assert np.array_equal(got.dense, np.arange(5.0)) and np.array_equal(got.optimizer["dv"], np.zeros(5))
    assert not np.shares_memory(got.dense, dense)


def test_server_1_keeps_agreeing_with_its_own_optimizer_state() -> None:
    """Server 1 installs the optimizer state it computed without a copy (its store keeps the
    same arrays, read-only): over two rounds both servers' models and optimizer states stay
    equal, each step on a copy."""
    pair, servers = in_process()
    leader, follower = servers.nodes
    for version in (1, 2):
        _, outcome, errors = play_round(pair)
        assert outcome["state"] == "committed" and not errors and follower.version == version
        assert follower.model_sha() == leader.model_sha() == model_sha256(follower.table, follower.dense)
        mine, theirs = follower.opt.state_dict(), leader.opt.state_dict()
        assert mine["steps"] == theirs["steps"] == version
        for k in ("m", "v", "row_t", "dm", "dv"):
            assert np.array_equal(mine[k], theirs[k]) and not mine[k].flags.writeable
        stored = follower.store.load()
        assert stored is not None and stored.optimizer is not None
        assert np.array_equal(stored.optimizer["dm"], mine["dm"]) and stored.dense.flags.writeable
    assert follower.staged is None and not follower.status()["alarms"]


def test_the_ring_sums_are_gone_before_the_optimizer_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both servers drop the reconstructed ring sums before they copy the optimizer and step;
    the round still commits the same model on both."""
    pair, servers = in_process()
    role_cls = type(servers.nodes[0].role)
    combine, step = role_cls.combine, ServerAdam.step
    sums: dict[int, list[weakref.ref[np.ndarray]]] = {}  # by thread: the two servers close at once
    alive_at_step: list[int] = []

    def recording_combine(self: object, *args: object, **kw: object) -> tuple[np.ndarray, np.ndarray]:
        out = combine(self, *args, **kw)
        sums.setdefault(threading.get_ident(), []).extend(weakref.ref(a) for a in out)
        return out

    def checking_step(self: ServerAdam, table: np.ndarray, dense: np.ndarray, table_grad: np.ndarray,
                      dense_grad: np.ndarray) -> int:
        gc.collect()
        alive_at_step.append(sum(r() is not None for r in sums.get(threading.get_ident(), [])))
        return step(self, table, dense, table_grad, dense_grad)

    monkeypatch.setattr(role_cls, "combine", recording_combine)
    monkeypatch.setattr(ServerAdam, "step", checking_step)
    _, outcome, errors = play_round(pair)
    assert outcome["state"] == "committed" and not errors
    assert sorted(len(refs) for refs in sums.values()) == [2, 2]  # each server's sparse and dense sums
    assert alive_at_step == [0, 0]  # none alive at its server's step
    assert servers.nodes[1].model_sha() == servers.nodes[0].model_sha()
