"""Session 20 review (helper C) of bounded payloads (issue 34 (b)): what a deviating server gains
from the check's server-to-server step.

Finding C1 (fixed): server 0 names each device's challenge ``c`` to server 1 in its check request,
and server 1 used whatever it was given.  A deviating server 0 that sends a ``c'`` other than the
device's gets server 1's verifier message for the projections ``b' = <R(c'), x_1>``, while the
device's witness is for ``b = <R(c), x_1>``.  With the coefficients of server 1's joint randomness
(the last words of its message), server 0's share and server 1's add up to ``z = f sum_i rho'_i
((a'_i + b'_i) - (a_i + b_i)) mod p``, where only ``b`` and ``b'`` are unknown to server 0, and they
are a function of the plaintext upload ``x``: for a guess of ``x`` server 0 predicts ``z`` exactly,
so it tests guesses (61 bits of the upload a round), beyond the pass/fail the check may reveal.
The fix: server 0 forwards the device's ``part_1`` (in its proof: ``SHA-256`` of the context and
server 1's seed ``sigma``, which server 0 never sees), and server 1 answers a user whose part does
not match the one ``sigma`` gives under the named challenge with zero field elements (its ``jr``
then differs from server 0's, so the device fails the check).

Regressions (pass): a forwarded ``part_1`` altered by server 0, or a device whose proof carries
another ``part_1``, fails only that device; the others of the request pass.

Driven at the protocol roles by hand (``tests/protocols/test_bounded_payloads.py``'s ``Round``);
the prediction of ``z`` is computed here from the plaintext the device uploaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
import test_bounded_payloads as tbp  # type: ignore[import-not-found]  # noqa: E402

from secemb.framing import HEADER_BYTES  # noqa: E402
from secemb.fss import field as F  # noqa: E402
from secemb.fss import rangeproof as R  # noqa: E402
from secemb.protocols.secemb.bounds import projected, upload_vector  # noqa: E402
from secemb.protocols.secemb.sizes import NAME  # noqa: E402
from secemb.protocols.wire import frame  # noqa: E402

#: a check request's entry: u64 user || c || part_0 || part_1
ENTRY = 8 + 16 + 32 + 32
VICTIM = 1


def _tampered(rnd: tbp.Round, request: bytes, at: int, value: bytes) -> bytes:
    """``request`` with ``value`` written at body offset ``16 + ENTRY * VICTIM + at``."""
    body = bytearray(request[HEADER_BYTES:])
    lo = 16 + ENTRY * VICTIM + at
    body[lo : lo + len(value)] = value
    return frame(NAME, "bound_request", 1, rnd.cfg.round_id, bytes(body))


def _opened_z(rnd: tbp.Round, answer: bytes, swapped: bytes, query: bytes, monkeypatch: pytest.MonkeyPatch) -> int:
    """The ``z`` server 0 can open for the victim from server 1's ``answer``: its own share under
    the swapped challenge and the joint randomness server 1 used (read from the answer)."""
    params = rnd.s0._bound
    v1 = R.parse_verifier_messages(params, answer[HEADER_BYTES:], 3)
    jr1 = v1[VICTIM, -4:].tobytes()
    shares0 = R.parse(params, 0, [rnd.s0._proofs[VICTIM]])
    with monkeypatch.context() as m:
        # server 0 takes server 1's coefficients (its joint randomness: one batch a block of devices since session 33)
        m.setattr(R, "_joints", lambda contexts, *_: np.frombuffer(jr1 * len(contexts), np.uint8).reshape(-1, 32))
        v0 = R.verifier_messages(params, 0, shares0, rnd.s0._bound_projections([VICTIM], [swapped]),
                                 rnd.s0._bound_contexts([VICTIM], [swapped]), query)
    return int(F.add(v0[0, 0], v1[VICTIM, 0]))


def _predicted_z(rnd: tbp.Round, rows: np.ndarray, dense: np.ndarray, c: bytes, swapped: bytes, query: bytes) -> int:
    """``f sum_i rho'_i ((a'_i + b'_i) - (a_i + b_i)) mod p`` for a guessed plaintext upload
    ``(rows, dense)``: ``a``, ``a'`` server 0's own projections, ``b = <R(c), x> - a mod 2^32``."""
    x = upload_vector(rows[None], dense[None])
    total = 0
    weights = R._query(rnd.s0._bound, query).ring_column[:, 0]  # f rho'_i
    sides = []
    for seed in (c, swapped):
        a = rnd.s0._bound_projections([VICTIM], [seed])[0].astype(np.int64)
        b = (projected([seed], x)[0].astype(np.int64) - a) % (1 << 32)
        sides.append(a + b)
    for w, new, old in zip(weights.tolist(), sides[1].tolist(), sides[0].tolist(), strict=True):
        total += w * (new - old)
    return total % F.P


def test_a_challenge_swapped_by_server_0_gets_no_answer_that_depends_on_the_upload(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding C1.  Without the fix the opened ``z`` equals the prediction for the true upload and
    not for an upload one unit away (server 0 tells them apart); with it the victim's field
    elements are zero, the prediction fails, and only the victim is rejected."""
    rnd = tbp.Round("full", False)
    rnd.honest(range(3))
    request = rnd.s0.bound_request([0, 1, 2])
    query = request[HEADER_BYTES : HEADER_BYTES + 16]
    c = rnd.s0.challenge(VICTIM)
    swapped = bytes(x ^ 0x5A for x in c)
    answer = rnd.s1.bound_answer(_tampered(rnd, request, 8, swapped))
    rows, dense = rnd.honest_upload(VICTIM)
    near = rows.copy()
    near[int(np.flatnonzero(rnd.slots[VICTIM] >= 0)[0]), 0] += np.uint32(1)
    z = _opened_z(rnd, answer, swapped, query, monkeypatch)
    assert _predicted_z(rnd, near, dense, c, swapped, query) != _predicted_z(rnd, rows, dense, c, swapped, query)
    assert z != _predicted_z(rnd, rows, dense, c, swapped, query), "server 0 confirmed a guess of the upload"
    v1 = R.parse_verifier_messages(rnd.s0._bound, answer[HEADER_BYTES:], 3)
    assert not v1[VICTIM, : 2 * rnd.s0._bound.wires + 3].any()
    assert rnd.s0.bound_rejected(answer) == {VICTIM}  # the others pass


def test_a_part_0_altered_by_server_0_opens_z_0_whatever_the_upload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Server 0's other lever: its joint-randomness part.  Another ``part_0`` only changes the
    coefficients server 1 draws (the statement is the device's), so ``z`` under server 1's
    coefficients is zero for an honest device, whatever it uploaded: nothing to test a guess
    against.  The device fails (the two ``jr`` differ)."""
    rnd = tbp.Round("cuckoo", False)
    rnd.honest(range(3))
    request = rnd.s0.bound_request([0, 1, 2])
    query = request[HEADER_BYTES : HEADER_BYTES + 16]
    answer = rnd.s1.bound_answer(_tampered(rnd, request, 8 + 16, bytes(range(32))))
    assert _opened_z(rnd, answer, rnd.s0.challenge(VICTIM), query, monkeypatch) == 0
    assert rnd.s0.bound_rejected(answer) == {VICTIM}


def test_a_part_1_altered_by_server_0_fails_only_that_device() -> None:
    rnd = tbp.Round("cuckoo", True)
    rnd.honest(range(3))
    request = rnd.s0.bound_request([0, 1, 2])
    answer = rnd.s1.bound_answer(_tampered(rnd, request, 8 + 16 + 32, bytes(32)))
    assert rnd.s0.bound_rejected(answer) == {VICTIM}


def test_a_proof_with_another_part_1_is_rejected_and_the_round_goes_on() -> None:
    """A device whose proof carries a part_1 its sigma does not give (garbage, or one for another
    challenge): server 1 answers it with zeros, server 0 rejects it, the aggregate of the others
    is exact."""
    rnd = tbp.Round("full", True)
    rnd.honest([0, 2])
    rnd.retrieve(VICTIM)
    rnd.upload(VICTIM, *rnd.honest_upload(VICTIM), honest=False)
    proof = rnd.users[VICTIM].bound_proof(rnd.s0.challenge(VICTIM))
    at = HEADER_BYTES + 16
    rnd.s0.handle_proof(VICTIM, proof[:at] + bytes(32) + proof[at + 32 :])
    rnd.close_exact({VICTIM})
