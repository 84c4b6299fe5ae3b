"""SecEmb devices batched per round (issue 37): :meth:`SecEmbUser.retrieval_results` and
:meth:`SecEmbUser.uploads` give every user exactly what its own :meth:`~SecEmbUser.retrieval_result`
and :meth:`~SecEmbUser.upload` give -- the same rows, the same message bytes, the same refusals --
and the batched uploads aggregate to the direct sums."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, RetrievalTampered
from secemb.protocols.adversary import MaliciousUser
from secemb.protocols.base import UserRole
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.randomness import CtrDrbg

USERS = 6
TAMPERED, MALFORMED, BAD_GRADS, ATTACKER = 1, 2, 3, 4


def _ring(gen: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return gen.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)


def _users(proto: SecEmbProtocol, cfg: object) -> list[SecEmbUser]:
    """One round's users, each with its own seeded randomness; user ATTACKER a malicious device
    whose class overrides ``upload`` (it wraps its dense gradient)."""
    users: list[SecEmbUser] = [proto.make_user(cfg, _rng=CtrDrbg(b"user/%d" % u)) for u in range(USERS)]  # type: ignore[arg-type]
    users[ATTACKER] = MaliciousUser(cfg, "wrapped-dense", relay=proto.relay, verify=proto.verify,  # type: ignore[arg-type]
                                    _rng=CtrDrbg(b"user/%d" % ATTACKER))
    return users


def _each(fn, args: list) -> list:  # noqa: ANN001 - the per-device reference path
    out = []
    for arg in args:
        try:
            out.append(fn(*arg))
        except Exception as exc:  # noqa: BLE001 - compared with the batch's exception
            out.append(exc)
    return out


def _same(single: list, batched: list) -> None:
    """Each entry equal: the same exception type and message, the same arrays or bytes."""
    assert len(single) == len(batched)
    for i, (a, b) in enumerate(zip(single, batched, strict=True)):
        if isinstance(a, Exception):
            assert type(a) is type(b) and str(a) == str(b), i
        elif isinstance(a, np.ndarray):
            assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), i
        else:
            assert a == b, i


@pytest.mark.parametrize("layout, relay, ring_bits", [("full", False, 32), ("cuckoo", True, 32),
                                                      ("cuckoo", False, 64), ("cuckoo", True, 64)])
def test_batched_results_and_uploads_equal_the_per_device_path_byte_for_byte(layout: str, relay: bool,
                                                                             ring_bits: int) -> None:
    proto = SecEmbProtocol(layout=layout, relay=relay)
    cfg = proto.round_config(4, 300, 5, 7, 12, ring_bits)
    gen = np.random.default_rng(11)
    table = _ring(gen, (cfg.num_items, cfg.width), cfg.dtype)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    indices = []
    for _ in range(USERS):
        items = gen.choice(cfg.num_items, 12, replace=False)
        indices.append(items if layout == "full" else cfg.cuckoo().assign(items, gen)[0])

    # two copies of the round's users with the same keys: one runs user by user, one as a batch
    single, batch = _users(proto, cfg), _users(proto, cfg)
    requests = SecEmbUser.retrieval_requests(single, indices, _rng=CtrDrbg(b"keys"))
    assert SecEmbUser.retrieval_requests(batch, indices, _rng=CtrDrbg(b"keys")) == requests
    replies: list[tuple[bytes, bytes | None]] = []
    for uid, req in enumerate(requests):
        assert isinstance(req, tuple)
        r0, r1 = req
        if relay:
            assert s1.handle_retrieval(uid, r1) is None
            replies.append((s0.complete_retrieval(uid, s1.relay_retrieval(uid, s0.handle_retrieval(uid, r0))), None))
        else:
            replies.append((s0.handle_retrieval(uid, r0), s1.handle_retrieval(uid, r1)))
    reply0 = bytearray(replies[TAMPERED][0])
    reply0[-1 - 16] ^= 1  # a server altered one word of this user's answer share (before the sketch seed's 16 bytes)
    replies[TAMPERED] = (bytes(reply0), replies[TAMPERED][1])
    replies[MALFORMED] = (replies[MALFORMED][0][:-1], replies[MALFORMED][1])  # one byte short

    rows_single = _each(lambda u, r: u.retrieval_result(*r), list(zip(single, replies, strict=True)))
    rows_batch = SecEmbUser.retrieval_results(batch, replies)
    _same(rows_single, rows_batch)
    assert isinstance(rows_batch[TAMPERED], RetrievalTampered) and isinstance(rows_batch[MALFORMED], InvalidMessage)
    ok = [u for u in range(USERS) if u not in (TAMPERED, MALFORMED)]
    for u in ok:  # the other users' rows are the table's
        real = indices[u] >= 0
        assert np.array_equal(rows_batch[u][real], table[indices[u][real]]) and not rows_batch[u][~real].any()
    # each user's rows are an array of its own, not a view of the batch's (which holds the others' rows)
    assert all(isinstance(r, np.ndarray) and r.flags.owndata for r in (rows_batch[u] for u in ok))

    gradients = []
    for u in range(USERS):
        rows = _ring(gen, (cfg.slots, cfg.width), cfg.dtype)
        rows[indices[u] < 0] = 0
        gradients.append((rows, _ring(gen, (cfg.dense_size,), cfg.dtype)))
    gradients[BAD_GRADS] = (gradients[BAD_GRADS][0][:-1], gradients[BAD_GRADS][1])  # a row short
    up_single = _each(lambda u, g: u.upload(*g), list(zip(single, gradients, strict=True)))
    up_batch = SecEmbUser.uploads(batch, gradients)
    _same(up_single, up_batch)
    assert isinstance(up_batch[TAMPERED], ProtocolError)  # no upload after a tampered retrieval
    assert isinstance(up_batch[BAD_GRADS], InvalidParameters)

    # the batch's uploads aggregate to the direct sums (the attacker's dense wrapped by 2^(k-1))
    uploaded = [u for u in range(USERS) if isinstance(up_batch[u], tuple)]
    # a malformed reply gave the user no sketch seed (verified uploads): it cannot upload either
    assert isinstance(up_batch[MALFORMED], ProtocolError) and "reply" in str(up_batch[MALFORMED])
    assert uploaded == [0, ATTACKER, 5]
    sparse, dense = np.zeros_like(table), np.zeros(cfg.dense_size, cfg.dtype)
    for u in uploaded:
        m0, m1 = up_batch[u]  # type: ignore[misc]
        fwd = s0.handle_upload(u, m0)
        if relay:
            s1.relay_upload(u, fwd)
        else:
            s1.handle_upload(u, m1)
        real = indices[u] >= 0
        np.add.at(sparse, indices[u][real], gradients[u][0][real])
        dense += gradients[u][1] + (cfg.dtype.type(1 << (ring_bits - 1)) if u == ATTACKER else cfg.dtype.type(0))
    got_sparse, got_dense = s0.combine(s1.aggregate_share(uploaded), uploaded)
    assert np.array_equal(got_sparse, sparse) and np.array_equal(got_dense, dense)


def test_a_batch_of_users_of_two_rounds_is_refused() -> None:
    proto = SecEmbProtocol()
    users = [proto.make_user(proto.round_config(r, 300, 5, 7, 12, 32)) for r in (1, 2)]
    with pytest.raises(InvalidParameters, match="one round"):
        SecEmbUser.uploads(users, [(np.zeros(0), np.zeros(0))] * 2)


def test_a_batch_that_lists_a_user_twice_is_refused() -> None:
    """One round's state would make two uploads (the user's own second call is refused)."""
    proto = SecEmbProtocol()
    cfg = proto.round_config(1, 300, 5, 7, 12, 32)
    user = proto.make_user(cfg)
    (request,) = SecEmbUser.retrieval_requests([user], [np.arange(cfg.slots)])
    assert isinstance(request, tuple)
    user._sketch_seed = bytes(16)  # the sketch seed a retrieval reply would carry (verified uploads)
    grads = (np.zeros((cfg.slots, cfg.width), cfg.dtype), np.zeros(cfg.dense_size, cfg.dtype))
    with pytest.raises(InvalidParameters, match="twice"):
        SecEmbUser.uploads([user, user], [grads, grads])
    with pytest.raises(InvalidParameters, match="twice"):
        SecEmbUser.retrieval_requests([user, user], [np.arange(cfg.slots)] * 2)
    assert isinstance(user.upload(*grads)[0], bytes)  # the refused batches changed nothing
    with pytest.raises(ProtocolError):
        user.upload(*grads)


def test_the_default_batch_methods_call_each_users_own_method() -> None:
    """A protocol without batched overrides: :meth:`UserRole.retrieval_results` and
    :meth:`UserRole.uploads` return each user's own result, an exception in its place."""

    class Echo(UserRole):
        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
            raise NotImplementedError

        def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
            if self.fail:
                raise InvalidMessage("bad reply")
            return np.frombuffer(reply0, np.uint8)

        def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes | None]:
            if self.fail:
                raise ProtocolError("no upload")
            return rows.tobytes(), dense.tobytes()

    users = [Echo(False), Echo(True), Echo(False)]
    rows = UserRole.retrieval_results(users, [(b"\1\2", None), (b"", None), (b"\3", b"x")])
    assert [r.tolist() if isinstance(r, np.ndarray) else type(r) for r in rows] == [[1, 2], InvalidMessage, [3]]
    ups = UserRole.uploads(users, [(np.array([1], np.uint8), np.array([2], np.uint8))] * 3)
    assert ups[0] == (b"\1", b"\2") and isinstance(ups[1], ProtocolError) and ups[2] == (b"\1", b"\2")


@pytest.mark.parametrize("layout, relay", [("full", False), ("cuckoo", True)])
def test_a_round_of_batched_devices_trains_the_model_of_devices_one_by_one(layout: str, relay: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's ``"staged"`` schedule (a round's devices through each step as one batch, or
    in groups) and ``"interleaved"`` (each device through every step alone, batches of one)
    give the same model, the same per-round traffic and the same losses, with a device that
    drops after its retrieval, one that uploads to server 0 only (without relay: whose upload to server 1
    was lost, so it sends none) and a malicious one in the
    rounds; in groups of two, no more than one other device that goes on holds its round
    buffers (its dense vector) when a device fetches its own."""
    from secemb.client.device import RoundSession
    from secemb.data import synthetic_like, train_test_split
    from secemb.models import MatrixFactorization
    from secemb.sim import devices
    from secemb.training import TrainConfig, train

    tr, te = train_test_split(synthetic_like(40, 30, 500, seed=4), 0.2, seed=0)
    faults = {3: "drop", 5: "only0", 8: "attack:wrapped-dense"}

    def run(schedule: str) -> tuple[str, list[tuple[int, int, float]]]:
        rounds: list[tuple[int, int, float]] = []
        cfg = TrainConfig(epochs=1, users_per_round=12, m_prime=6, schedule=schedule)  # type: ignore[arg-type]
        got = train(MatrixFactorization(dim=4, reg=0.01), SecEmbProtocol(layout=layout, relay=relay), tr, te, cfg,
                    behavior=lambda r, u: faults.get(u), on_round=lambda s: rounds.append(
                        (s.upload_bytes, s.download_bytes, s.train_loss)))
        return got.model_sha256, rounds

    staged, interleaved = run("staged"), run("interleaved")
    assert staged[0] == interleaved[0] and staged[1] == interleaved[1]
    assert len(staged[1]) >= 3  # rounds of 12 of the (up to) 40 users

    holding: list[int] = []  # per dense download: how many other sessions then hold a dense vector
    seen: list[RoundSession] = []
    fetch = RoundSession.fetch_dense

    # a device that drops after its retrieval never uploads: it keeps its buffers to the end; so does, where
    # devices upload to both servers (no relay), one whose upload to server 1 was lost ("only0": without server
    # 1's receipt it sends server 0 nothing either, session 44)
    silent = {"drop"} if relay else {"drop", "only0"}

    def counted(self: RoundSession) -> None:
        holding.append(sum(s.dense_ring is not None and faults.get(s.client.user_id) not in silent for s in seen))
        seen.append(self)
        fetch(self)

    monkeypatch.setattr(RoundSession, "fetch_dense", counted)
    monkeypatch.setattr(devices, "group_size", lambda rc, itemsize: 2)
    assert run("staged") == staged
    assert len(holding) > 24 and max(holding) == 1


def test_group_size_keeps_a_group_s_buffers_within_the_bound() -> None:
    """Four ring copies of the dense vector and of the rows per device, within 64 MiB."""
    from secemb.protocols.base import RoundConfig
    from secemb.sim.devices import GROUP_BYTES, group_size

    assert GROUP_BYTES == 64 * 2**20
    small = RoundConfig(0, 1682, 17, 0, 213, layout="cuckoo", num_buckets=266)  # ml-100k MF: 266 x 17 rows
    assert group_size(small, 4) == 64 * 2**20 // (16 * 266 * 17) == 927
    deepfm = RoundConfig(0, 1682, 129, 7_000_000, 213)  # 7 M dense values: one device at a time
    assert group_size(deepfm, 4) == 1 and group_size(deepfm, 8) == 1
    assert group_size(RoundConfig(0, 100, 1, 1_000_000, 10), 4) == 64 * 2**20 // (16 * 1_000_010) == 4
