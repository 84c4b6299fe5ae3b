"""Review of session 19's range proof (secemb/fss/rangeproof.py), issue 34 (b).

Found: the parsers measured a ``memoryview`` by ``len``, which counts items, not bytes, so a view
of ``uint64`` words (the form ``field.to_bytes``' callers hold before ``tobytes``) failed with
numpy's ``ValueError`` instead of ``InvalidMessage`` -- :func:`~secemb.fss.rangeproof.parse`,
:func:`~secemb.fss.rangeproof.parse_verifier_messages` and :func:`~secemb.fss.rangeproof.hint_of`;
:func:`~secemb.fss.rangeproof.verifier_messages` took shares parsed under other parameters
and failed inside numpy, where its contract is ``InvalidParameters``; and ``prove``/``hint_of``
took an ``int`` context as that many zero bytes (``bytes(5)``), and a ``str`` with ``TypeError``.

Pinned: an empty batch goes through every step, and the opened wire and gadget values (what
each server learns of the other's verifier message) are fresh uniform values that do not
depend on the witness -- two witnesses that differ in one bit, proven many times under one
context and one query seed, give values with no repeat and the same distribution (a prover
without its random wire seeds fails this: its opened values of the ``x - 1`` wires repeat).
The masking itself is checked through the public API: every wire's two seeds map onto its two
opened values invertibly (singular if the two points coincide: a mutant run by hand fails it).
And why a proof is verified once: under several query seeds the other server's messages
reveal the witness (the last test solves for it)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import rangeproof as R
from secemb.randomness import CtrDrbg

P = 2**61 - 1
SMALL = R.RangeParams(rows=1, bits=2, ring_bits=4)
QSEED = b"review query seed 19"


def _proof(params: R.RangeParams, a: list[int], b: list[int], ctx: bytes, seed: int) -> tuple[bytes, bytes]:
    return R.prove(params, np.array(a, np.uint64), np.array(b, np.uint64), ctx, _rng=CtrDrbg(seed))


def _opened(params: R.RangeParams, proofs: list[tuple[bytes, bytes]], a: list[int], b: list[int],
            ctx: bytes) -> np.ndarray:
    """The opened field elements (z, then per point the wires and the gadget) of each proof: the
    sum of the two servers' verifier messages, ``uint64 (n, 2L + 3)``."""
    n, nf = len(proofs), 2 * params.wires + 3
    s0 = R.parse(params, 0, [m0 for m0, _ in proofs])
    s1 = R.parse(params, 1, [m1 for _, m1 in proofs])
    v0 = R.verifier_messages(params, 0, s0, np.array([a] * n, np.uint64), [ctx] * n, QSEED)
    v1 = R.verifier_messages(params, 1, s1, np.array([b] * n, np.uint64), [ctx] * n, QSEED)
    assert R.decide(params, v0, v1).all()
    return F.add(v0[:, :nf], v1[:, :nf])


def test_parse_measures_a_memoryview_of_words_in_bytes() -> None:
    m0, m1 = _proof(SMALL, [3], [14], b"ctx", 1)
    for party, msg in ((0, m0), (1, m1)):
        size = SMALL.message_bytes(party)
        assert size % 8 == 0
        words = np.frombuffer(msg, np.uint64).copy()
        parsed, want = R.parse(SMALL, party, [words.data]), R.parse(SMALL, party, [msg])  # type: ignore[list-item]
        assert np.array_equal(parsed.inputs, want.inputs) and np.array_equal(parsed.proofs, want.proofs)
        assert np.array_equal(parsed.keys, want.keys) and np.array_equal(parsed.hints, want.hints)
        wide = np.frombuffer(msg, np.uint8).astype(np.uint64)  # as many items as bytes: 8x the bytes
        with pytest.raises(InvalidMessage, match=f"message 0 for server {party}"):
            R.parse(SMALL, party, [wide.data])  # type: ignore[list-item]


def test_hint_of_measures_a_memoryview_of_words_in_bytes() -> None:
    m0, _ = _proof(SMALL, [3], [14], b"ctx", 2)
    assert R.hint_of(SMALL, b"ctx", np.frombuffer(m0, np.uint64).copy().data) == R.hint_of(SMALL, b"ctx", m0)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage):
        R.hint_of(SMALL, b"ctx", np.frombuffer(m0, np.uint8).astype(np.uint64).data)  # type: ignore[arg-type]


def test_parse_verifier_messages_measures_a_memoryview_of_words_in_bytes() -> None:
    m0, m1 = _proof(SMALL, [3], [14], b"ctx", 3)
    v1 = R.verifier_messages(SMALL, 1, R.parse(SMALL, 1, [m1]), np.array([[14]], np.uint64), [b"ctx"], QSEED)
    assert np.array_equal(R.parse_verifier_messages(SMALL, v1.data, 1), v1)  # type: ignore[arg-type]
    wide = np.frombuffer(F.to_bytes(v1), np.uint8).astype(np.uint64)
    with pytest.raises(InvalidMessage, match="verifier messages: expected"):
        R.parse_verifier_messages(SMALL, wide.data, 1)  # type: ignore[arg-type]


def test_verifier_messages_refuse_shares_parsed_under_other_parameters() -> None:
    m0, _ = _proof(SMALL, [3], [14], b"ctx", 4)
    shares = R.parse(SMALL, 0, [m0])
    other = R.RangeParams(rows=1, bits=3, ring_bits=5)
    with pytest.raises(InvalidParameters):
        R.verifier_messages(other, 0, shares, np.array([[3]], np.uint64), [b"ctx"], QSEED)


@pytest.mark.parametrize("context", [5, "ctx", None])
def test_a_context_that_is_not_bytes_is_refused(context: object) -> None:
    # bytes(5) is five zero bytes: an int context was silently a different context
    m0, _ = _proof(SMALL, [3], [14], b"ctx", 6)
    with pytest.raises(InvalidParameters, match="context"):
        R.prove(SMALL, np.array([3], np.uint64), np.array([14], np.uint64), context)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters, match="context"):
        R.hint_of(SMALL, context, m0)  # type: ignore[arg-type]

def test_an_empty_batch_goes_through_every_step() -> None:
    s0, s1 = R.parse(SMALL, 0, []), R.parse(SMALL, 1, [])
    empty = np.zeros((0, SMALL.rows), np.uint64)
    v0 = R.verifier_messages(SMALL, 0, s0, empty, [], QSEED)
    v1 = R.parse_verifier_messages(SMALL, F.to_bytes(R.verifier_messages(SMALL, 1, s1, empty, [], QSEED)), 0)
    assert v0.shape == v1.shape == (0, SMALL.verifier_length)
    ok = R.decide(SMALL, v0, v1)
    assert ok.dtype == np.bool_ and ok.shape == (0,)


def test_opened_values_are_fresh_and_do_not_depend_on_a_witness_bit() -> None:
    # value 0 (u = 2: digit 2) and value 1 (u = 3: digit 3), no wrap: one witness entry apart
    n, ctx = 300, b"one context for every proof"
    opened = []
    for value, seed0 in ((0, 10_000), (1, 20_000)):
        proofs = [_proof(SMALL, [0], [value], ctx, seed0 + i) for i in range(n)]
        got = _opened(SMALL, proofs, [0], [value], ctx)
        assert not got[:, 0].any()  # z opens to 0
        values = got[:, 1:]
        for col in values.T:  # fresh: 300 uniform draws from 2^61 values repeat with probability < 2^-44
            assert np.unique(col).size == n
        opened.append(values.astype(np.float64) / P)
    # uniform on [0, 1) for both witnesses: means 1/2 with standard deviation sqrt(1 / (12 n)) = 0.017;
    # a difference of the two means beyond 6 standard deviations of it (0.14) would tell them apart
    sd = (2 / (12 * n)) ** 0.5
    for col in range(opened[0].shape[1]):
        a, b = opened[0][:, col], opened[1][:, col]
        assert abs(a.mean() - b.mean()) < 6 * sd, col
        assert abs(a.mean() - 0.5) < 6 * sd / 2**0.5 and abs(b.mean() - 0.5) < 6 * sd / 2**0.5, col


def _wires(params: R.RangeParams, party: int, shares: R.ProofShares, ring: list[int], ctx: bytes,
           qseed: bytes) -> np.ndarray:
    """One device's opened wire shares at both points, uint64 (2, L), from ``verifier_messages``."""
    big_l = params.wires
    v = R.verifier_messages(params, party, shares, np.array([ring], np.uint64), [ctx], qseed)[0]
    return np.stack([v[1 + q * (big_l + 1) : 1 + q * (big_l + 1) + big_l] for q in range(2)])


def _unit(params: R.RangeParams, like: R.ProofShares, inputs: int | None, proof: int | None) -> R.ProofShares:
    """Server 1's shares (keys and hints of ``like``) with one 1: at witness entry ``inputs`` or at
    proof element ``proof`` (a probe of ``verifier_messages``' linear maps)."""
    x, pi = np.zeros((1, params.witness_length), np.uint64), np.zeros((1, params.proof_length), np.uint64)
    if inputs is not None:
        x[0, inputs] = 1
    if proof is not None:
        pi[0, proof] = 1
    return R.ProofShares(1, like.keys, like.hints, x, pi)


@pytest.mark.parametrize("params", [SMALL, R.RangeParams(rows=3, bits=8, ring_bits=32)])
def test_each_wires_two_seeds_mask_its_two_opened_values(params: R.RangeParams) -> None:
    """The zero-knowledge argument's condition, through the public API: for every wire, the map
    from its two seeds (the proof's elements ``j`` and ``L + j``: its values at the nodes 0 and
    ``M + 1``) to its two opened values is invertible mod p, so uniform seeds make the openings
    uniform in ``F_p^2`` (it is singular if the points coincide or hit a call node)."""
    _, m1 = _proof(params, [0] * params.rows, [1] * params.rows, b"ctx", 7)
    like = R.parse(params, 1, [m1])
    for i in range(4):
        qseed = b"mask query seed %d" % i
        for j in range(params.wires):
            first = _wires(params, 1, _unit(params, like, None, j), [0] * params.rows, b"ctx", qseed)[:, j]
            second = _wires(params, 1, _unit(params, like, None, params.wires + j), [0] * params.rows, b"ctx",
                            qseed)[:, j]
            assert (int(first[0]) * int(second[1]) - int(first[1]) * int(second[0])) % P != 0, (i, j)


def _solve_mod_p(rows: list[list[int]], rhs: list[int]) -> list[int]:
    """The solution of a square, invertible linear system mod p (Gauss-Jordan with Python ints)."""
    m = [[v % P for v in row] + [r % P] for row, r in zip(rows, rhs, strict=True)]
    size = len(m)
    for col in range(size):
        pivot = next(r for r in range(col, size) if m[r][col])
        m[col], m[pivot] = m[pivot], m[col]
        inv = pow(m[col][col], P - 2, P)
        m[col] = [v * inv % P for v in m[col]]
        for r in range(size):
            if r != col and m[r][col]:
                f = m[r][col]
                m[r] = [(v - f * w) % P for v, w in zip(m[r], m[col], strict=True)]
    return [row[-1] for row in m]


def test_a_proof_verified_under_several_query_seeds_reveals_its_witness() -> None:
    """Why a proof may be verified once only (one query seed; server 1 of the bound protocol
    answers each user once): the zero-knowledge argument rests on each wire polynomial's two
    random seeds masking its two opened values.  A server that gets the other's verifier
    messages for one proof under more query seeds has more values of each ``x - 1`` wire, a
    polynomial whose unknowns are its two seeds and the witness entries of its slot, and solves
    for them.  The linear maps it needs come from ``verifier_messages`` itself, on unit shares."""
    params, ctx = SMALL, b"ctx"
    big_n, big_l, c, half = params.witness_length, params.wires, params.chunk, params.half_calls
    unknowns = 2 + half  # per x - 1 wire: its two seeds and the entries of its slot (padding: zero)
    qseeds = [b"query seed number %d" % i for i in range(-(-unknowns // 2))]
    a, b = [0], [1]  # value 1: u = 3, one base-4 digit 3, wrap 0
    m0, m1 = _proof(params, a, b, ctx, 5)
    s0, s1 = R.parse(params, 0, [m0]), R.parse(params, 1, [m1])

    def wires(party: int, shares: R.ProofShares, ring: list[int], qseed: bytes) -> np.ndarray:
        return _wires(params, party, shares, ring, ctx, qseed)

    def unit(inputs: int | None, proof: int | None) -> R.ProofShares:
        return _unit(params, s1, inputs, proof)

    recovered: dict[int, int] = {}
    for slot in range(c):
        j = 2 * slot + 1  # the wire of x - 1 in this slot
        entries = [k * c + slot for k in range(half) if k * c + slot < big_n]
        equations, values = [], []
        for qseed in qseeds:
            # server 1's view: the opened values (its share plus the honest server 0's message)
            opened = F.add(wires(0, s0, a, qseed), wires(1, s1, b, qseed))[:, j]
            # the linear maps from the unknowns (seed at node 0, seed at node M + 1, the entries) to them
            cols = [wires(1, unit(None, j), [0], qseed)[:, j], wires(1, unit(None, big_l + j), [0], qseed)[:, j]]
            cols += [wires(1, unit(e, None), [0], qseed)[:, j] for e in entries]
            for q in range(2):
                equations.append([int(col[q]) for col in cols])
                # the wire holds x - 1 at the call nodes: move the -1 terms to the right-hand side
                values.append(int(opened[q]) + sum(int(col[q]) for col in cols[2:]))
        size = 2 + len(entries)
        solution = _solve_mod_p(equations[:size], values[:size])
        recovered.update(zip(entries, solution[2:], strict=True))
    assert [recovered[e] for e in range(big_n)] == [3, 0]  # u = 3 in one base-4 digit, no wrap
