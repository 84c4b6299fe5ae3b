"""Review of session 17 (batched uploads f41a47a, batched request parsing 7052c38/132f751/
4e02da0, Opener 193c0cf): a SecEmb server fed a batch in which one device's message is
altered -- bytes of its body replaced, or the message cut short -- refuses at most that item,
with a :class:`~secemb.errors.SecembError` (never numpy's ValueError or an IndexError: a
traceback would fail the whole batch, every device of it), and gives the other devices of
the batch exactly what it gives them in a batch without the altered message.  Seeded
mutations (regression coverage: they pass on the code reviewed)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import SecembError
from secemb.protocols.backends import ThreadBackend
from secemb.randomness import CtrDrbg

from round_setup import begin

M, W, P, MP, USERS, TRIALS = 29, 3, 7, 4, 3, 8
VARIANTS = [(True, "cuckoo"), (False, "cuckoo"), (False, "full")]


def _round(relay: bool, layout: str):  # noqa: ANN202 - test helper
    """Both servers of a round and each user's retrieval requests (the same for the same args)."""
    proto, rc, _, _, s0, s1 = begin(layout=layout, relay=relay, round_id=0, num_items=M, width=W, dense_size=P,
                                    m_prime=MP, seed=3, backend=ThreadBackend(2))
    users, reqs = [], []
    for u in range(USERS):
        user = proto.make_user(rc, _rng=CtrDrbg(bytes([u + 1]) * 16))
        rng = np.random.default_rng(u)
        idx = (rng.choice(M, size=rc.slots, replace=False) if layout == "full"
               else rc.cuckoo().assign(rng.choice(M, size=MP, replace=False), rng)[0])
        users.append((user, idx))
        reqs.append(user.retrieval_request(idx))
    return s0, s1, users, reqs


def _mutated(message: bytes, trial: int) -> bytes:
    rng = np.random.default_rng(trial)
    if trial % 4 == 3:
        return message[: int(rng.integers(0, len(message)))]
    out = bytearray(message)
    for _ in range(1 + trial % 3):
        out[int(rng.integers(32, len(out)))] ^= int(rng.integers(1, 256))  # the body, past the header
    return bytes(out)


@pytest.mark.parametrize(("relay", "layout"), VARIANTS)
@pytest.mark.parametrize("party", [0, 1])
def test_an_altered_retrieval_request_refuses_only_itself(relay: bool, layout: str, party: int) -> None:
    _, _, _, ref_reqs = _round(relay, layout)
    for trial in range(TRIALS):
        s0, s1, _, reqs = _round(relay, layout)
        ref0, ref1, _, _ = _round(relay, layout)
        server, ref = (s0, ref0) if party == 0 else (s1, ref1)
        out = server.handle_retrieval_many([(0, _mutated(reqs[0][party], trial)),
                                            *[(u, reqs[u][party]) for u in range(1, USERS)]])
        want = ref.handle_retrieval_many([(u, reqs[u][party]) for u in range(1, USERS)])
        assert out[1:] == want, trial  # the other users' replies, byte for byte
        assert out[0] is None or isinstance(out[0], (bytes, SecembError)), trial
    assert ref_reqs == reqs  # the requests are the same for the same seeds: the comparison is fair


@pytest.mark.parametrize(("relay", "layout"), VARIANTS)
def test_an_altered_upload_refuses_only_itself(relay: bool, layout: str) -> None:
    for trial in range(TRIALS):
        s0, s1, users, reqs = _round(relay, layout)
        a1 = s1.handle_retrieval_many([(u, q[1]) for u, q in enumerate(reqs)])
        a0 = s0.handle_retrieval_many([(u, q[0]) for u, q in enumerate(reqs)])
        if relay:
            a0 = s0.complete_retrieval_many(list(enumerate(s1.relay_retrieval_many(list(enumerate(a0))))))
        ups = []
        for u, (user, idx) in enumerate(users):
            rows = user.retrieval_result(a0[u], a1[u])
            grads = np.zeros_like(rows)
            grads[idx >= 0] = 1 + u
            ups.append(user.upload(grads, np.full(P, 7 + u, np.uint32)))
        bad = _mutated(ups[0][0], trial)
        out = s0.handle_upload_many([(0, bad), *[(u, ups[u][0]) for u in range(1, USERS)]])
        assert all(isinstance(o, bytes) if relay else o is None for o in out[1:]), trial
        assert out[0] is None or isinstance(out[0], (bytes, SecembError)), trial
        if relay:  # server 1 checks the forwards: an altered one (server 0 took it) fails the device's MAC
            fwd = [o if isinstance(o, bytes) else _mutated(ups[0][0], trial) for o in out]
            got = s1.relay_upload_many([(u, fwd[u]) for u in range(USERS)])
            assert got[1:] == [None] * (USERS - 1), trial
            assert got[0] is None or isinstance(got[0], SecembError), trial
