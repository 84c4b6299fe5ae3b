"""Session 19 review (helper J) of bounded payloads (issue 34 (b)): the order of a device's
uploads and its challenge.

The bound's soundness argument (docs/security.md, "Bounded payloads: the check") needs the
projection rows drawn *after* the device fixed both servers' shares of ``x``.  Server 0 draws
the challenge once it absorbed the device's upload to server 0.  Without relay the device
uploads to server 1 separately, and nothing makes that upload come first: a device can upload
to server 0, read its challenge, and only then upload to server 1 a dense share shifted by a
vector ``e`` with ``<r_i, e> = 0 mod 2^32`` for all 40 rows (``e = 2^31 v`` for any ``v`` in the
kernel of the rows mod 2, which exists as soon as the dense part is longer than 40).  Its
honest proof still verifies, the digests still agree (they cover keys, check values and
correction words, not the dense shares), and the round's dense sum is off by ``2^31`` in the
coordinates of ``v`` -- the wrapped-dense attack the bound is meant to stop.

With relay server 1's dense share is ``PRG(seed_2)``, fixed at retrieval, so the attack does
not exist there (the second test pins that a relay device has nothing left to send server 1).
Nor for dense parts of at most 40 coordinates whose rows have full rank mod 2 (matrix
factorization's one bias: no nonzero ``e`` in the ring); it needs an MLP (NCF, DeepFM, ...).
The nodes do not enforce the SDK's order (server 1 first): server 0's challenge route only
asks for an upload to server 0, and server 1 takes uploads while the round is open.  The fix
(lead, session 19): the device commits to its server-1 dense share in its upload to server 0
(``SHA-256(domain || round || sigma || d_1)``, hiding from server 0, which never sees ``sigma``)
and both servers' upload digests cover the commitment (server 1 computes it from its share).

Driven at the protocol roles by hand (``tests/protocols/test_bounded_payloads.py``'s
``Round``); expected values are computed here from the plaintext the honest devices upload.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
import test_bounded_payloads as tbp  # type: ignore[import-not-found]  # noqa: E402

from secemb.fss.projections import ternary_rows  # noqa: E402
from secemb.protocols.secemb.bounds import ROWS, projected  # noqa: E402
from secemb.protocols.secemb.sizes import rows_bytes  # noqa: E402

DENSE = 64  # longer than ROWS: the rows' dense columns have a kernel mod 2


def _kernel_mod2(a: np.ndarray) -> np.ndarray:
    """A nonzero ``v`` (0/1, length ``a.shape[1]``) with ``a @ v = 0 mod 2``, by Gaussian
    elimination over GF(2) (``a``: 0/1, more columns than rows)."""
    m = a.copy() % 2
    rows, cols = m.shape
    pivots: list[int] = []
    r = 0
    for c in range(cols):
        hit = [i for i in range(r, rows) if m[i, c]]
        if not hit:
            continue
        m[[r, hit[0]]] = m[[hit[0], r]]
        for i in range(rows):
            if i != r and m[i, c]:
                m[i] ^= m[r]
        pivots.append(c)
        r += 1
        if r == rows:
            break
    free = next(c for c in range(cols) if c not in pivots)
    v = np.zeros(cols, np.int64)
    v[free] = 1
    for i, c in enumerate(pivots):
        v[c] = m[i, free]
    return v


@pytest.fixture
def bounded_round(monkeypatch: pytest.MonkeyPatch) -> tbp.Round:
    monkeypatch.setattr(tbp, "P", DENSE)
    rnd = tbp.Round("full", False)
    assert rnd.cfg.dense_size == DENSE
    return rnd


def test_an_upload_to_server_1_after_the_challenge_cannot_wrap_the_dense_sum(bounded_round: tbp.Round) -> None:
    """Finding J1, fixed: the device's upload to server 0 commits to its server-1 dense share
    (``bounds.dense_commitment``) and both servers' upload digests cover the commitment, so a
    share changed after the challenge makes the digests differ and the device is left out (the
    engine's close leaves out the union of the bound check's and the digests' rejections)."""
    rnd = bounded_round
    for uid in range(1, 5):
        rnd.retrieve(uid)
        rnd.upload(uid, *rnd.honest_upload(uid))
        rnd.prove(uid)
    attacker = rnd.retrieve(0)
    rows, dense = rnd.honest_upload(0)
    u0, u1 = attacker.upload(rows, dense)
    assert u1 is not None
    assert rnd.s0.handle_upload(0, u0) is None  # server 0 only, for now
    challenge = rnd.s0.challenge(0)
    proof = attacker.bound_proof(challenge)  # of the honest upload

    sparse = rnd.cfg.num_items * rnd.cfg.width  # full layout: x = (each row's contribution) || d (session 31)
    r = ternary_rows(challenge, ROWS, sparse + DENSE)
    e = (_kernel_mod2(np.abs(r[:, sparse:]).astype(np.int64)) << 31).astype(np.uint32)
    assert e.any()
    x = np.zeros((1, sparse + DENSE), np.uint32)
    x[0, sparse:] = e
    assert not projected([challenge], x).any()  # invisible to every row of the challenge

    at = len(u1) - DENSE * 4 - 32  # the dense share, then the 32-byte binding tau (verified uploads)
    assert at - rows_bytes(rnd.cfg) > 0  # the dense share is just before the body's tail
    shifted = np.frombuffer(u1[at : at + DENSE * 4], np.uint32) + e
    rnd.s1.handle_upload(0, u1[:at] + shifted.tobytes() + u1[at + DENSE * 4 :])  # after the challenge
    rnd.s0.handle_proof(0, proof)
    uploaded = sorted(rnd.users)
    by_bound = rnd.s0.bound_rejected(rnd.s1.bound_answer(rnd.s0.bound_request(uploaded)))
    assert by_bound == set()  # the proof of the honest upload verifies: the bound check alone misses it
    d0, d1 = rnd.s0.upload_digests(uploaded), rnd.s1.upload_digests(uploaded)
    assert d0 is not None and d1 is not None
    by_digest = {u for u in uploaded if d0[u] != d1[u]}
    assert by_digest == {0}, "the attacker's changed server-1 dense share was not caught by the digests"
    include = [u for u in uploaded if u not in by_bound | by_digest]
    _, got_dense = rnd.s0.combine(rnd.s1.aggregate_share(include), include)
    np.testing.assert_array_equal(got_dense, rnd.expected_dense)


def test_with_relay_server_1_gets_nothing_from_a_device_after_retrieval(monkeypatch: pytest.MonkeyPatch) -> None:
    """With relay the device's upload is one message to server 0 (server 1's dense share is
    ``PRG(seed_2)`` from the retrieval): nothing it sends after the challenge reaches server 1
    except through server 0's forward, which server 0 made before drawing the challenge."""
    monkeypatch.setattr(tbp, "P", DENSE)
    rnd = tbp.Round("full", True)
    user = rnd.retrieve(0)
    u0, u1 = user.upload(*rnd.honest_upload(0))
    assert u1 is None
