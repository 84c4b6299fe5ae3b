"""Issue 37 (session 25): server 1's relay answers add each user's mask as it is expanded
instead of expanding the batch's masks into one array first (session 27: block by block inside the
conversion kernel, :func:`~secemb.protocols.secemb.relay.relay_masks_into`; session 25's form took
them chunk by chunk from the conversion's scratch).  The masks are
:func:`~secemb.protocols.secemb.relay.relay_prg`'s, also across the conversion's chunk boundaries;
server 1's relay answer is its answer share plus the mask -- the share taken from the same keys'
evaluation without relay, where no mask is involved -- whether the evaluation's answers are
writable (added into in place) or read-only (left as they are)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import _numba_kernels, convert, kernels
from secemb.framing import HEADER_BYTES
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbRelayServer
from secemb.protocols.secemb.relay import relay_masks_into, relay_prg
from secemb.protocols.secemb.sizes import tag_words
from secemb.protocols.secemb.user import SecEmbUser
from secemb.randomness import CtrDrbg

from round_setup import begin

_USERS = [2, 5, 11, 17, 23, 28, 29]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Conversion chunks of 8 AES blocks (the reference's) and steps of 32 (the compiled kernel's), so
    that a few seeds' masks span several chunks and a chunk ends inside a batch (the default chunk holds
    every mask of these tests at once)."""
    monkeypatch.setattr(convert, "CHUNK_BLOCKS", 8)
    monkeypatch.setattr(_numba_kernels, "STEP_BLOCKS", 32)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("shape", [(3, 5), (1,), (7,), (2, 2, 3), (267, 69)])
def test_relay_masks_into_add_relay_prg_of_each_seed(small_chunks: None, monkeypatch: pytest.MonkeyPatch,
                                                     backend: str, shape: tuple[int, ...],
                                                     dtype: type[np.unsignedinteger]) -> None:
    """Session 27: the masks added (subtracted) as they are expanded (:func:`relay_masks_into`), on both
    paths, equal the sum (difference) with :func:`relay_prg`'s arrays."""
    if backend == "numba" and not kernels.available():
        pytest.skip("numba or AES-NI missing")
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [bytes([i]) * 16 for i in range(9)]
    gen = np.random.default_rng(len(shape))
    src = [gen.integers(0, 2**32, shape).astype(dtype) for _ in seeds]
    masks = [relay_prg(seed, shape, np.dtype(dtype)) for seed in seeds]
    dst = [np.full(shape, 7, dtype) for _ in seeds]
    relay_masks_into(seeds, dst, src)
    assert all(np.array_equal(d, s + m) for d, s, m in zip(dst, src, masks, strict=True))
    relay_masks_into(seeds, dst, negate=True)  # in place, subtracted
    assert all(np.array_equal(d, s) for d, s in zip(dst, src, strict=True))
    assert len({m.tobytes() for m in masks}) == len(seeds)  # each seed its own mask


def test_relay_masks_into_refuse_bad_seeds_and_arrays() -> None:
    good = [np.zeros(4, np.uint32), np.zeros(4, np.uint32)]
    with pytest.raises(InvalidParameters, match="16 bytes"):
        relay_masks_into([bytes(16), b"short"], good)
    ro = np.zeros(4, np.uint32)
    ro.flags.writeable = False
    for dst in ([good[0], ro], [good[0], np.zeros(5, np.uint32)], [good[0], np.zeros(4, np.uint64)],
                [good[0], np.zeros((4, 2), np.uint32)[:, 0]]):
        with pytest.raises(InvalidParameters, match="convert_add"):
            relay_masks_into([bytes(16), b"\1" * 16], dst)
    assert all((g == 0).all() for g in good)  # refused before anything is written
    relay_masks_into([], [])


def _server1_answers(relay: bool, read_only: bool, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Server 1's answer messages for _USERS in a cuckoo round with fixed randomness: its relay
    answers (relay) or its retrieval replies (no relay), the same keys either way."""
    proto, cfg, _, _, s0, s1 = begin(layout="cuckoo", relay=relay, verify=True, round_id=3, num_items=90, width=4,
                                     dense_size=2, m_prime=4, seed=9)
    if read_only:  # as a backend whose results are read-only (Ray's) hands them over
        real = SecEmbRelayServer._commit_evaluated

        def frozen(self: SecEmbRelayServer, *args: object, **kwargs: object) -> list[np.ndarray]:
            answers = real(self, *args, **kwargs)  # type: ignore[arg-type]
            if isinstance(answers, np.ndarray):  # the cuckoo batch's rows (session 36): the array itself read-only
                answers.flags.writeable = False
            for a in answers:
                a.flags.writeable = False
            frozen.seen = [a.copy() for a in answers]  # type: ignore[attr-defined]
            frozen.kept = answers  # type: ignore[attr-defined]
            return answers

        monkeypatch.setattr(SecEmbRelayServer, "_commit_evaluated", frozen)
    users = [proto.make_user(cfg, _rng=CtrDrbg(b"device/%d" % uid)) for uid in _USERS]
    slots = [place(cfg, np.array([uid, uid + 30, uid + 60], np.int64), np.random.default_rng(uid)).indices
             for uid in _USERS]
    requests = SecEmbUser.retrieval_requests(users, slots, _rng=CtrDrbg(b"batch"))
    if not relay:
        got = s1.handle_retrieval_many([(uid, r[1]) for uid, r in zip(_USERS, requests, strict=True)])  # type: ignore[index]
        # the answers (the server's half of the sketch seed follows them)
        size = cfg.slots * (cfg.width + tag_words(cfg)) * cfg.dtype.itemsize
        return [bytes(m[HEADER_BYTES : HEADER_BYTES + size]) for m in got]  # type: ignore[index]
    assert all(g is None for g in s1.handle_retrieval_many(
        [(uid, r[1]) for uid, r in zip(_USERS, requests, strict=True)]))  # type: ignore[index]
    forwards = s0.handle_retrieval_many([(uid, r[0]) for uid, r in zip(_USERS, requests, strict=True)])  # type: ignore[index]
    answers = s1.relay_retrieval_many(list(zip(_USERS, forwards, strict=True)))  # type: ignore[attr-defined, arg-type]
    if read_only:
        assert all(np.array_equal(a, b) for a, b in zip(frozen.kept, frozen.seen, strict=True))  # left as they were
    shape = (cfg.slots, cfg.width + tag_words(cfg))
    seeds = [u._seeds[0] for u in users]  # type: ignore[index]
    # (server 1's 16-byte tag of the sketch seed follows the masked answer)
    return [(np.frombuffer(a, "<u4", np.prod(shape), HEADER_BYTES).reshape(shape)
             - relay_prg(seed, shape, cfg.dtype)).tobytes()
            for a, seed in zip(answers, seeds, strict=True)]


@pytest.mark.parametrize("read_only", [False, True])
def test_server_1_relay_answer_is_its_share_plus_the_mask(small_chunks: None, read_only: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    shares = _server1_answers(relay=False, read_only=False, monkeypatch=monkeypatch)
    assert _server1_answers(relay=True, read_only=read_only, monkeypatch=monkeypatch) == shares
