"""Session 39 red team (helper R) of helper P's cut of the bound check's per-round Python (issue 34 (b);
docs/security.md, "Bounded payloads: the check").

1. :func:`secemb.fss.projections.project_own_affine` skips the parts' check in Python; the compiled
   :func:`~secemb.fss._projection_kernels.affine_vector` refuses a part whose shapes do not make the
   first part's length.  Attacked with a bad part first, in the middle, first of a short pass and last (the
   device a short pass repeats), parts of another layout, count dtype or ring dtype, and a first part of
   no length; compared with :func:`~secemb.fss.projections.project_affine` and with projections computed
   here (the vectors formed by numpy and multiplied by :func:`~secemb.fss.projections.ternary_rows` as
   Python integers).  Every caller's parts are the server's own (traced: payload sums of its walk, the
   correction words read at upload intake at the round's ``(S, w)`` from a body of the round's exact
   length, dense shares read back at ``(P,)``): no device or peer controls a shape.
2. :func:`secemb.fss.rangeproof.parse_taken` reads the proofs server 0 kept without checking them again:
   every way in (the batch fast path, the per-item path, replays, a second proof, wrong lengths, an element
   not below ``p`` in the first, a middle or the last word, a buffer changed after intake) keeps only
   ``bytes`` of the round's length whose elements are below ``p``.
3. Server 1 compares the forwarded ``part_1`` and (full layout) the named challenge as rows: a deviating
   server 0 that alters them for some devices of a batch (first, middle, last; one bit, every byte; the
   challenge alone; every device) gets zero opened elements for exactly those devices, which fail, and the
   others pass.

Expected values are computed here, not by the code under test.  Mutations tried (in a scratch worktree)
are listed in the session's report.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import rangeproof as R
from secemb.fss.projections import project_affine, project_own_affine, ternary_rows
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol
from secemb.protocols.secemb.sizes import NAME
from secemb.protocols.wire import HEADER_BYTES as FRAME_BYTES
from secemb.protocols.wire import frame

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_session31_bound_derived import M, Run, W, _honest, _items  # noqa: E402

pytestmark = pytest.mark.skipif(not kernels.compiled(), reason="the unchecked path is the compiled kernels'")

ROWS = 40
N = 6  # two passes of 4 devices (uint32): the second is short and repeats device 5


def _parts(n: int, seed: int, slots: int = 7, width: int = 5, dense: int = 3) -> list[tuple[np.ndarray, ...]]:
    gen = np.random.default_rng(seed)  # public test data
    return [(gen.integers(0, 1 << 32, (slots, width), dtype=np.uint32), gen.integers(-9, 9, slots),
             gen.integers(0, 1 << 32, (slots, width), dtype=np.uint32),
             gen.integers(0, 1 << 32, dense, dtype=np.uint32)) for _ in range(n)]


def _seeds(n: int) -> list[bytes]:
    return [bytes([d % 3]) * 16 for d in range(n)]


def _expected(seed: bytes, part: tuple[np.ndarray, ...], negate: bool) -> list[int]:
    """Device ``part``'s projections under ``seed`` modulo ``2^32``, as Python integers: the vector
    ``((-1)^negate (base + count words)).ravel() || tail`` formed element by element, each row of
    :func:`ternary_rows` times it."""
    base, count, words, tail = (a.tolist() for a in part)
    sparse = [int(b) + int(c) * int(w) for row_b, c, row_w in zip(base, count, words, strict=True)
              for b, w in zip(row_b, row_w, strict=True)]
    x = [-v if negate else v for v in sparse] + [int(t) for t in tail]
    rows = ternary_rows(seed, ROWS, len(x)).tolist()
    return [sum(r * v for r, v in zip(row, x, strict=True)) % (1 << 32) for row in rows]


# --- 1. project_own_affine ----------------------------------------------------------------------------------

@pytest.mark.parametrize("at", [0, 3, 4, N - 1])
@pytest.mark.parametrize("bad", ["fewer word rows", "shorter count", "longer tail", "shorter tail", "wider base"])
def test_own_affine_refuses_a_part_of_another_length_wherever_it_is(at: int, bad: str) -> None:
    """A part whose shapes do not make the batch's vector length, as the first device, the last of the
    first pass, the first or the last (repeated) of the short pass: ``ValueError`` before any read past
    it, as :func:`project_affine` refuses it (``InvalidParameters``).  Mutations caught: the kernel's
    ``words.shape[0]``, ``count.shape[0]`` or tail-length comparison removed (a read past the arrays:
    garbage or a crash, not the error)."""
    parts = _parts(N, 39)
    base, count, words, tail = parts[at]
    parts[at] = {"fewer word rows": (base, count, words[:-1].copy(), tail),
                 "shorter count": (base, count[:-1].copy(), words, tail),
                 "longer tail": (base, count, words, np.concatenate([tail, tail])),
                 "shorter tail": (base, count, words, tail[:1].copy()),
                 "wider base": (np.concatenate([base, base], axis=1), count, words, tail)}[bad]
    for negate in (False, True):
        with pytest.raises(ValueError, match="affine_vector"):
            project_own_affine(_seeds(N), negate, parts, ROWS)
        with pytest.raises(InvalidParameters, match="part"):
            project_affine(_seeds(N), negate, parts, ROWS)


def test_own_affine_of_parts_in_other_layouts_and_count_dtypes_is_the_projection_of_their_vectors() -> None:
    """Parts that :func:`project_affine` takes but a server never makes -- strided and Fortran-ordered
    words, an int32 count with negative entries (copied to one layout:
    :func:`~secemb.fss._projection_kernels.canonical_part`: no new compiled signature; read-only parts,
    which compile one, were tried by hand: the same elements) -- and parts of the first one's vector length
    but another ``(S, w)`` and tail (which :func:`project_affine` refuses): the projections of the vectors
    they stand for, computed here, device by device; never another device's or a stale scratch's words.  Mutation
    caught: ``project_own_affine`` taking the length from the first base and the last tail (a refusal)."""
    parts = _parts(N, 3939)
    base, count, words, tail = parts[1]
    wide = np.zeros((7, 10), np.uint32)
    wide[:, ::2] = words
    parts[1] = (base, count.astype(np.int32), wide[:, ::2], tail)
    base, count, words, tail = parts[4]
    parts[4] = (base, count, np.asfortranarray(words), tail)
    base, count, words, tail = parts[2]  # (7, 5) + 3 = 38 words, as (5, 7) + 3
    parts[2] = (np.ascontiguousarray(base.T), np.arange(-2, 3), np.ascontiguousarray(words.T), tail)
    base, count, words, tail = parts[N - 1]  # and as (6, 5) + 8
    parts[N - 1] = (base[:6].copy(), count[:6].copy(), words[:6].copy(), np.concatenate([tail, base[6]]))
    taken = [0, 1, 3, 4]  # the devices project_affine takes
    for negate in (False, True):
        got = project_own_affine(_seeds(N), negate, parts, ROWS)
        assert got.dtype == np.uint32 and got.shape == (N, ROWS)
        for d in range(N):
            assert got[d].tolist() == _expected(_seeds(N)[d], parts[d], negate), d
        seeds = [_seeds(N)[d] for d in taken]
        assert np.array_equal(project_affine(seeds, negate, [parts[d] for d in taken], ROWS), got[taken])


def test_own_affine_of_a_later_part_on_a_wider_ring_gives_its_low_words() -> None:
    """A uint64 part in a uint32 batch (one new compiled signature: the one such attack here): the
    kernel stores each word modulo ``2^32`` into the batch's scratch -- the projection of the part's
    vector read on the batch's ring, computed here -- and reads nothing past its arrays; nothing of the
    other devices changes.  :func:`project_affine` refuses it."""
    parts = _parts(N, 7)
    base, count, words, tail = parts[2]
    high = np.uint64(0xDEADBEEF) << np.uint64(32)
    parts[2] = (base.astype(np.uint64) | high, count, words.astype(np.uint64) | high, tail.astype(np.uint64) | high)
    got = project_own_affine(_seeds(N), True, parts, ROWS)
    for d in range(N):
        low = tuple(a.astype(np.uint32) if a.dtype == np.uint64 else a for a in parts[d])
        assert got[d].tolist() == _expected(_seeds(N)[d], low, True), d
    with pytest.raises(InvalidParameters, match="part"):
        project_affine(_seeds(N), True, parts, ROWS)


@pytest.mark.xfail(strict=True, reason="S39-R1: a first part of no length makes L = 0, and project_own_affine "
                                       "answers zeros for every device, later parts of 38 words unread and "
                                       "unrefused (project_affine refuses them)")
def test_own_affine_refuses_later_parts_after_a_first_part_of_no_length() -> None:
    """The docstring's promise -- a part whose shapes do not make the first part's length is refused -- where
    the first part is empty: ``_project_affine`` returns zeros before any kernel runs, so the later
    devices get zero projections, not a refusal (not reachable from a round: its ``S`` and ``w`` are at
    least 1).  Fix: refuse, or check, where the first part's length is 0 (``project_affine`` then)."""
    parts = _parts(N, 11)
    parts[0] = (np.zeros((0, 5), np.uint32), np.zeros(0, np.int64), np.zeros((0, 5), np.uint32),
                np.zeros(0, np.uint32))
    with pytest.raises(InvalidParameters, match="part"):
        project_affine(_seeds(N), False, parts, ROWS)
    with pytest.raises((ValueError, InvalidParameters)):
        project_own_affine(_seeds(N), False, parts, ROWS)


# --- a bounded round at the roles -----------------------------------------------------------------------------

def _round(layout: str, users: list[int]) -> Run:
    """A bounded round (verified uploads, no relay) of ``users``, retrieved and uploaded as one batch each,
    not proved yet."""
    run = Run(SecEmbProtocol(layout=layout, relay=False, verify=True, bound=True, users_per_round=20))
    if layout == "full":
        run.retrieve(users, _items)
        run.upload({u: _honest(u) for u in users})
        return run
    gen = np.random.default_rng(len(users))  # public test data
    slots = {u: place(run.cfg, gen.choice(M, 4, replace=False), gen).indices for u in users}
    run.retrieve(users, slots.__getitem__)
    uploads = {}
    for u in users:
        rows = np.zeros((run.cfg.slots, W), np.int64)
        real = slots[u] >= 0
        rows[real] = np.arange(real.sum() * W).reshape(-1, W) - 3 * u
        uploads[u] = (rows.astype(np.uint32), (np.arange(run.cfg.dense_size) - u).astype(np.uint32))
    run.upload(uploads)
    return run


def _proof(run: Run, u: int) -> bytes:
    """Device ``u``'s honest bound proof (a framed ``bound_proof``; a device proves once)."""
    return run.devices[u].bound_proof(run.s0.challenge(u))


def _with_word(msg: bytes, word: int, value: int) -> bytes:
    """``msg`` (framed) with body word ``word`` (little-endian u64) set to ``value``."""
    at = FRAME_BYTES + 8 * word
    return msg[:at] + value.to_bytes(8, "little") + msg[at + 8 :]


# --- 2. what parse_taken reads ----------------------------------------------------------------------------------

def test_only_checked_proofs_of_the_rounds_length_reach_parse_taken() -> None:
    """Server 0 takes proofs through every path -- a batch with elements not below ``p`` in the first, a
    middle and the last word, one 8 bytes long and one short, one of another round, a ``bytearray`` changed
    after intake, a user twice in a batch, a second proof later, a whole well-formed batch (the fast path) --
    and keeps exactly the honest ones, as ``bytes`` of ``message_bytes(0)`` whose elements are below ``p``
    (checked here word by word) equal to what the devices sent; :func:`parse_taken` of them is
    :func:`~secemb.fss.rangeproof.parse`'s; every device then passes the check.  Mutations caught:
    ``_proof_bodies`` without the ``well_formed`` call (a batch of the fast path's form keeps its element
    ``p``); ``well_formed`` not reading the first element word, or the last word; ``take`` keeping the
    opened view of the caller's ``bytearray`` (changed after intake)."""
    users = list(range(8))
    run = _round("cuckoo", users)
    s0 = run.s0
    params = s0._bounded(0)
    size = params.message_bytes(0)
    last = size // 8 - 1
    proofs = {u: _proof(run, u) for u in users}
    changing = bytearray(proofs[5])
    other_round = frame(NAME, "bound_proof", 0, run.cfg.round_id + 1, proofs[4][FRAME_BYTES:])
    first = [(0, _with_word(proofs[0], 6, F.P)), (1, _with_word(proofs[1], last, (1 << 64) - 1)),
             (2, _with_word(proofs[2], 6 + (last - 6) // 2, F.P + 1)), (3, proofs[3] + bytes(8)),
             (4, other_round), (5, changing), (5, proofs[5]), (6, proofs[6][:-8])]
    out = s0.handle_proof_many(first)
    assert [type(e) for e in out] == [InvalidMessage, InvalidMessage, InvalidMessage, InvalidMessage,
                                      InvalidMessage, type(None), ProtocolError, InvalidMessage], out
    changing[FRAME_BYTES + 48 : FRAME_BYTES + 56] = F.P.to_bytes(8, "little")  # after intake
    assert s0.handle_proof_many([(5, proofs[5])]) != [None]  # a second proof
    # of the fast path's form (distinct users, bytes of one length, one header), one element p in the middle:
    # taken one by one, the bad one refused
    out = s0.handle_proof_many([(0, proofs[0]), (1, _with_word(proofs[1], last // 2, F.P)), (2, proofs[2])])
    assert out[0] is None and out[2] is None and type(out[1]) is InvalidMessage, out
    assert s0.handle_proof_many([(u, proofs[u]) for u in (1, 3, 4, 6, 7)]) == [None] * 5  # the fast path
    assert s0.handle_proof_many([(7, proofs[7]), (0, proofs[0])]) != [None, None]  # replays of the fast path
    assert sorted(s0._proofs) == users
    for u in users:
        kept = s0._proofs[u]
        assert type(kept) is bytes and kept == proofs[u][FRAME_BYTES:] and len(kept) == size
        words = np.frombuffer(kept, "<u8")[6:].tolist()
        assert max(words) < F.P
    taken = [s0._proofs[u] for u in users]
    want, got = R.parse(params, 0, taken), R.parse_taken(params, taken)
    for name in ("keys", "hints", "inputs", "proofs"):
        assert np.array_equal(getattr(want, name), getattr(got, name)), name
    assert run.check(users) == set()


# --- 3. server 1's comparison of the forwarded part_1 and the named challenge --------------------------------------

#: where a check request's entry (``u64 user || c || part_0 || part_1``) holds the challenge and part_1
CHALLENGE, PART_1 = slice(8, 24), slice(56, 88)


def _altered(request: bytes, changes: dict[int, tuple[slice, int, int]]) -> bytes:
    """``request`` with entry ``j``'s byte ``at`` of field ``changes[j] = (field, at, mask)`` XORed with
    ``mask`` (``at = -1``: every byte of the field; ``mask = -1``: the field swapped with the next changed
    entry's, in pairs)."""
    body = bytearray(request)
    spans = {j: slice(FRAME_BYTES + 16 + 88 * j + f.start, FRAME_BYTES + 16 + 88 * j + f.stop)
             for j, (f, _, _) in changes.items()}
    swaps = [j for j, (_, _, mask) in changes.items() if mask < 0]
    for x, y in zip(swaps[::2], swaps[1::2], strict=True):
        body[spans[x]], body[spans[y]] = body[spans[y]], body[spans[x]]
    for j, (_, at, mask) in changes.items():
        if mask >= 0:
            for i in range(spans[j].start, spans[j].stop) if at < 0 else [spans[j].start + at]:
                body[i] ^= mask
    return bytes(body)


CASES = {
    # first: one bit of part_1; middle: every byte of part_1; next to it: the challenge alone, one bit
    # of its last byte; last: the top bit of part_1's last byte
    "some": {0: (PART_1, 0, 0x01), 2: (PART_1, -1, 0xFF), 3: (CHALLENGE, 15, 0x01), 5: (PART_1, 31, 0x80)},
    "every device": {j: (PART_1 if j % 2 else CHALLENGE, j, 0x10) for j in range(N)},
    "first and last part_1 swapped": {0: (PART_1, -1, -1), N - 1: (PART_1, -1, -1)},
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("layout", ["cuckoo", "full"])
def test_a_deviating_server_0s_altered_part_1_or_challenge_fails_exactly_those_devices(layout: str,
                                                                                     case: str) -> None:
    """Server 0 alters its check request's ``part_1`` or named challenge for some devices of one batch:
    server 1 answers zero opened elements for exactly those, which fail at server 0; the others get
    non-zero ones and pass.  The challenge alone altered in the request unbinds the device's ``part_1``
    (its context changes).  A challenge server 0 chose (one bit of the derived ``c_u``'s last byte), given
    to the device, proved under and named consistently, fails in the full layout (not server 1's ``c_u``)
    and passes in the cuckoo layout (server 0's to choose).  Mutations caught: comparing only part_1's first
    31 bytes; the full layout's challenge comparison dropped, or made on the first byte only; a whole-batch
    reduce in place of the row-wise one (every device zeroed); no device zeroed."""
    users = list(range(N))
    run = _round(layout, users)
    chosen = set()
    if case == "some":  # device 4 proves under a challenge of server 0's choosing, named as it is
        named = bytearray(run.s0.challenge(4))
        named[15] ^= 0x40
        run.s0._challenges[4] = bytes(named)
        chosen = {4} if layout == "full" else set()  # the cuckoo layout's challenge is server 0's to choose
    for u in users:
        assert run.s0.handle_proof_many([(u, _proof(run, u))]) == [None]
    request = run.s0.bound_request(users)
    changes = CASES[case]
    answer = run.s1.bound_answer(_altered(request, changes))
    params = run.s0._bounded(0)
    v1 = R.parse_verifier_messages(params, answer[FRAME_BYTES:], N)
    opened = v1[:, : params.opened_length]
    assert [not row.any() for row in opened] == [j in changes or j in chosen for j in range(N)]
    assert run.s0.bound_rejected(answer) == {users[j] for j in changes} | chosen
