"""Issue 37 (session 27, helper N): a request batch's seed and control-bit correction words parsed in one compiled pass.

``DPFKeys._fill`` (``from_rows``, ``from_bytes_many``, ``from_shared_many``) writes the seed words (bit 0
cleared), ``tCW_L`` and ``tCW_R`` with the ``parse_path_fields`` kernel where the compiled kernels run, else with
the numpy reference.  Both are checked against the fields of the keys the test generated (not against the
parser): every depth class (no level, fewer than 8, 8, more than 8 levels), rows of a wider array as a server's
(check words after them), one row and several, blocks of a batch out of order, both parties (party 1's from shared
parts and roots); refusals (root bit, padding bits) keep their messages and leave the other rows parsed; what the
kernel would index unchecked is refused before it runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidKey, InvalidParameters
from secemb.fss import kernels
from secemb.fss.keys import HEADER_BYTES, DPFKeys
from secemb.randomness import CtrDrbg

FIELDS = ("roots", "cw_seed", "cw_tl", "cw_tr")


def _batches(users: int, count: int, m: int, ring_bits: int, seed: bytes) -> tuple[DPFKeys, DPFKeys]:
    dt = np.uint32 if ring_bits == 32 else np.uint64
    gen = np.random.default_rng(len(seed) + m)
    betas = gen.integers(0, 2**ring_bits, (users * count, 2), dtype=dt)
    return fss.gen(gen.integers(0, m, users * count), betas, m, ring_bits=ring_bits, _rng=CtrDrbg(seed))


def _same_keys(got: DPFKeys, want: DPFKeys) -> None:
    for f in FIELDS:
        assert np.array_equal(getattr(got.path, f), getattr(want.path, f)), f
    assert np.array_equal(got.cw_out, want.cw_out)


@pytest.mark.parametrize("m", [1, 2, 32, 256, 300, 1 << 17])
@pytest.mark.parametrize("users", [1, 4])
@pytest.mark.parametrize("ring_bits", [32, 64])
def test_rows_of_a_wider_array_parse_to_the_generated_keys(backend: str, m: int, users: int, ring_bits: int) -> None:
    """Each party's rows (party 1: shared parts and roots), in the columns of a wider array, parsed into the
    blocks of a batch in reverse order: every block holds the keys generated for its row."""
    count = 3
    k0, k1 = _batches(users, count, m, ring_bits, b"s27-fill")
    blocks = list(range(users))[::-1]
    for party, keys in enumerate((k0, k1)):
        rows = keys.to_rows(users)
        expect = {"domain_size": m, "party": party, "count": count, "payload_width": 2, "ring_bits": ring_bits}
        dest = DPFKeys.empty(keys.params, party, users * count)
        if party == 0:
            wide = np.zeros((users, rows.shape[1] + 13), np.uint8)
            wide[:, 5 : 5 + rows.shape[1]] = rows
            got = DPFKeys.from_rows(wide[:, 5 : 5 + rows.shape[1]], into=dest, blocks=blocks, **expect)
        else:  # the shared parts (everything after the roots) and the roots apart, as server 1 with relay
            head = np.frombuffer(DPFKeys.shared_header(m, count, 2, ring_bits), np.uint8)
            shared = np.concatenate([np.broadcast_to(head, (users, HEADER_BYTES)),
                                     rows[:, HEADER_BYTES + 16 * count :]], axis=1)
            wide = np.zeros((users, shared.shape[1] + 7), np.uint8)
            wide[:, 3 : 3 + shared.shape[1]] = shared
            roots = rows[:, HEADER_BYTES : HEADER_BYTES + 16 * count]
            got = DPFKeys.from_rows(wide[:, 3 : 3 + shared.shape[1]], roots=roots, into=dest, blocks=blocks, **expect)
        for j, g in enumerate(got):
            assert isinstance(g, DPFKeys)
            _same_keys(g, keys[j * count : (j + 1) * count])
            _same_keys(dest[blocks[j] * count : (blocks[j] + 1) * count], keys[j * count : (j + 1) * count])
        assert set(np.unique(dest.path.cw_tl)) <= {0, 1} and set(np.unique(dest.path.cw_tr)) <= {0, 1}


@pytest.mark.parametrize("m", [32, 300])
def test_refused_rows_keep_their_messages_and_the_others_parse(backend: str, m: int) -> None:
    """A row whose root bit is not its party's and one with a padding bit set are refused with the parser's
    messages (padding: only where the depth leaves padding bits); the other rows parse to their keys."""
    users, count = 4, 2
    k0, _ = _batches(users, count, m, 32, b"s27-refused")
    rows = k0.to_rows(users)
    n = k0.params.depth
    rows[1, HEADER_BYTES] ^= 1  # key 0's root control bit
    tr = HEADER_BYTES + count * (16 + 16 * n)
    rows[2, tr + (n - 1) // 8] |= np.uint8(0x80)  # the last cw_tr byte's top bit: padding unless n % 8 == 0
    got = DPFKeys.from_rows(rows, domain_size=m, party=0, count=count, payload_width=2, ring_bits=32)
    assert isinstance(got[1], InvalidKey) and str(got[1]) == "root control bit does not match the key's party"
    if n % 8:
        assert isinstance(got[2], InvalidKey)
        assert str(got[2]) == "non-zero padding bits in the control-bit correction words"
    for j in (0, 3):
        assert isinstance(got[j], DPFKeys)
        _same_keys(got[j], k0[j * count : (j + 1) * count])


def test_the_kernels_unchecked_indices_are_checked_first() -> None:
    """``_fill_path_compiled`` refuses, before the kernel runs and writing nothing: a destination whose
    fields are short, a block outside it, and fields of another shape than its keys'."""
    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    users, count, m = 2, 3, 300
    k0, _ = _batches(users, count, m, 32, b"s27-unchecked")
    rows = k0.to_rows(users)
    n = k0.params.depth
    rest = rows[:, HEADER_BYTES + 16 * count :]
    seeds, trb = rest[:, : 16 * count * n].view("<u8"), rest[:, 16 * count * n : count * (16 * n + 2)]
    dest = DPFKeys.empty(k0.params, 0, users * count)
    for f in ("cw_seed", "cw_tl", "cw_tr"):
        getattr(dest.path, f)[...] = 0
    short = DPFKeys(fss.PathKeys(dest.params, 0, dest.path.roots, dest.path.cw_seed, dest.path.cw_tl,
                                 dest.path.cw_tr[:-1]), dest.cw_out, dest.params)
    cases = [(short, [0, 1], seeds, trb), (dest, [0, 2], seeds, trb), (dest, [-1, 0], seeds, trb),
             (dest, [0, 1], seeds[:, :-1], trb), (dest, [0, 1], seeds, trb[:, :-1]), (dest, [0], seeds, trb)]
    for into, at, s, t in cases:
        with pytest.raises(InvalidParameters, match="cannot parse"):
            DPFKeys._fill_path_compiled(into, count, at, s, t)
    for f in ("cw_seed", "cw_tl", "cw_tr"):
        assert not getattr(dest.path, f).any(), f
    DPFKeys._fill_path_compiled(dest, count, [1, 0], seeds, trb)  # row 0's keys to block 1, row 1's to block 0
    for f in ("cw_seed", "cw_tl", "cw_tr"):
        field = getattr(k0.path, f)
        assert np.array_equal(getattr(dest.path, f), np.concatenate([field[count:], field[:count]])), f
