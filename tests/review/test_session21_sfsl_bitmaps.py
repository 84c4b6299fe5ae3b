"""Session 21 (helper G, red team): SFSL's sparse secure sum against an active server -- the row
bitmaps of the key lists (a limit in session 21; signed rounds fix it, session 22).

SFSL aggregates row ``j`` over the devices that hold it, so each device must learn which of its
rows each peer holds (the spec's "gap: per-index participant sets": "the server knows every S''
and can send it"); :mod:`secemb.secagg` sends it as a bitmap per peer in the key list, and a
device applies the pair's mask only on the rows the bitmap marks.  The paper's server is
honest-but-curious (docs/security.md, "One-server protocols"), so these bitmaps are trusted.

**Finding G5 (session 21: documented; session 22: fixed for SFSL by signed rounds).**
A server that clears every bitmap of one device's key
list -- and the device's bits in the other devices' lists, so that nobody masks with it -- strips
every pairwise mask off that device's input while every key stays the device's own: the round
commits with the exact sum (nothing detects it), and the server, which reconstructs each
survivor's self-mask seed as the protocol has it, reads the device's input ``(v z, v)`` row by row.
This is the known "key lists travel unsigned" limit (docs/security.md), with one consequence to
record: Bonawitz et al.'s active-adversary variant signs the *keys*; an implementation of it for
SFSL must also authenticate each device's declared rows and the bitmaps derived from them, or
this attack survives it.

**Session 22.**  SFSL's secure sums are signed rounds (``SecAggConfig.signed``, docs/secagg.md,
"Active server"): a key list is the same for every device and carries, with each device's signed
keys, the device's row set as a bitmap over the round's public candidate rows, under the same
signature; each device masks with a peer exactly on the rows both sets hold (and every public
row).  The tests below keep the attack on an unsigned round (the regression: it still reads the
victim there) and show that in a signed round the server's clearing is refused: no device signed
the cleared row sets.
"""

from __future__ import annotations

import struct

import numpy as np

import pytest

from secemb.errors import InvalidMessage
from secemb.secagg import SecAggClient, SecAggConfig, SecAggServer
from secemb.secagg.identity import Roster
from secemb.secagg.prg import SEED_BYTES, mask_rows
from secemb.secagg.shamir import SHARE_BYTES, combine

CONFIG = SecAggConfig(length=8, threshold=2, width=3, round_id=7, sparse=True)
SIGNED = SecAggConfig(length=8, threshold=2, width=3, round_id=7, sparse=True, signed=True)
ROWS = {0: [0, 1, 2, 3], 1: [1, 2, 4], 2: [2, 3, 5]}
#: each device's input (v z, v) per row, chosen by hand
VALUES = {u: np.array([[10 * u + r, 100 + r, 1] for r in rows], np.uint32) for u, rows in ROWS.items()}
VICTIM = 0


def _cleared(msg: bytes, victim: int, recipient: int) -> bytes:
    """A sparse key list (docs/secagg.md: count, records of id and two 32-byte keys, then one
    bitmap over the recipient's rows per record) with every bitmap cleared for the victim, and
    the victim's bitmap cleared for anyone else."""
    body = bytearray(msg[32:])
    count = struct.unpack_from("<I", body)[0]
    ids = [struct.unpack_from("<I", body, 4 + 68 * i)[0] for i in range(count)]
    start = 4 + 68 * count
    size = (len(body) - start) // count
    for i, ident in enumerate(ids):
        if recipient == victim or ident == victim:
            body[start + i * size:start + (i + 1) * size] = bytes(size)
    return msg[:32] + bytes(body)


def _b_shares(msg: bytes) -> dict[int, int]:
    """The shares of the survivors' self-mask seeds in an unmask message (docs/secagg.md:
    count, (id, share) of the dropped devices' keys, then count, (id, share) of the survivors' seeds)."""
    body, pos = msg[32:], 0
    out: dict[int, int] = {}
    for part in range(2):
        count = struct.unpack_from("<I", body, pos)[0]
        pos += 4
        for _ in range(count):
            ident = struct.unpack_from("<I", body, pos)[0]
            share = int.from_bytes(body[pos + 4:pos + 4 + SHARE_BYTES], "little")
            if part == 1:
                out[ident] = share
            pos += 4 + SHARE_BYTES
    assert pos == len(body)
    return out


#: a signed sparse key-list entry: id, two keys, 32-byte seed commitment, 120-byte certificate,
#: 64-byte signature, the 1-byte bitmap of the device's rows over the 8 candidate rows (every row:
#: no public_from)
_SIGNED_ENTRY = 4 + 64 + 32 + 120 + 64 + 1


def _cleared_signed(msg: bytes, victim: int, recipient: int) -> bytes:
    """G5 on a signed key list: the victim's row set cleared in a peer's list, every peer's row
    set cleared in the victim's (each entry's last byte is its bitmap)."""
    body = bytearray(msg[32:])
    for i in range(struct.unpack_from("<I", body)[0]):
        ident = struct.unpack_from("<I", body, 4 + i * _SIGNED_ENTRY)[0]
        if (recipient == victim) != (ident == victim):
            body[4 + (i + 1) * _SIGNED_ENTRY - 1] = 0
    return msg[:32] + bytes(body)


def _round(tamper: bool, signed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One sparse secure sum of the three devices; ``(the sum, what the server reads as the
    victim's input: its masked message minus the expansion of its reconstructed seed)``.  The
    tampering: an unsigned round's bitmaps cleared (:func:`_cleared`), a signed round's signed
    row sets (:func:`_cleared_signed`)."""
    config = SIGNED if signed else CONFIG
    roster = Roster.generate()
    clients = {u: SecAggClient(u, config, identity=roster.enroll(u) if signed else None) for u in ROWS}
    server = SecAggServer(config)
    for u, c in clients.items():
        server.receive_advertise(u, c.advertise(np.array(ROWS[u])))
    clear = _cleared_signed if signed else _cleared
    keys = {u: clear(m, VICTIM, u) if tamper else m for u, m in server.keys_messages().items()}
    for u, c in clients.items():
        server.receive_shares(u, c.share_keys(keys[u]))
    relayed = server.relayed_messages()
    masked = {u: c.masked_input(relayed[u], VALUES[u]) for u, c in clients.items()}
    for u, m in masked.items():
        server.receive_masked(u, m)
    survivors = server.survivors_messages()
    if signed:
        for u, c in clients.items():
            server.receive_consistency(u, c.consistency(survivors[u]))
        survivors = server.signatures_messages()
    unmask = {u: c.unmask(survivors[u]) for u, c in clients.items()}
    for u, m in unmask.items():
        server.receive_unmask(u, m)
    total = server.result()
    helpers = [1, 2]  # any threshold of survivors
    b = combine([h + 1 for h in helpers], [_b_shares(unmask[h])[VICTIM] for h in helpers], CONFIG.threshold)
    y = np.frombuffer(masked[VICTIM][32:], "<u4").reshape(len(ROWS[VICTIM]), CONFIG.width)
    read = y - mask_rows(b.to_bytes(SEED_BYTES, "little"), np.array(ROWS[VICTIM]), CONFIG.width)
    return total, read


def _true_sum() -> np.ndarray:
    total = np.zeros((CONFIG.length, CONFIG.width), np.uint32)
    for u, rows in ROWS.items():
        total[rows] += VALUES[u]
    return total


def test_limit_an_honest_key_list_masks_each_device_pairwise() -> None:
    total, read = _round(tamper=False)
    assert np.array_equal(total, _true_sum())
    assert not np.array_equal(read, VALUES[VICTIM])  # the pairwise masks still cover it


def test_unsigned_round_cleared_bitmaps_strip_a_devices_pairwise_masks_and_the_sum_stays_exact() -> None:
    """The regression: the attack of finding G5 still works on an *unsigned* round (SecEA's
    set-up PSU is one; SFSL's sums are signed since session 22)."""
    total, read = _round(tamper=True)
    assert np.array_equal(total, _true_sum())  # the round commits as an honest one would
    assert np.array_equal(read, VALUES[VICTIM])  # the victim's (v z, v) rows in the clear


def test_g5_fixed_a_signed_round_masks_each_device_pairwise_without_bitmaps() -> None:
    total, read = _round(tamper=False, signed=True)
    assert np.array_equal(total, _true_sum())
    assert not np.array_equal(read, VALUES[VICTIM])
    # the victim's rows it shares with a peer (1, 2, 3) are masked: none reads as its value;
    # row 0 is the victim's alone, so the per-row sum is its value (the sparse sum's leakage)
    assert not (read[1:4] == VALUES[VICTIM][1:4]).all(axis=1).any()
    assert np.array_equal(read[0], VALUES[VICTIM][0])


def test_g5_fixed_a_signed_key_list_carries_each_devices_signed_row_set_the_same_for_everyone() -> None:
    roster = Roster.generate()
    clients = {u: SecAggClient(u, SIGNED, identity=roster.enroll(u)) for u in ROWS}
    server = SecAggServer(SIGNED)
    for u, c in clients.items():
        server.receive_advertise(u, c.advertise(np.array(ROWS[u])))
    lists = set(server.keys_messages().values())
    assert len(lists) == 1  # no per-recipient bitmaps
    msg = lists.pop()
    # header, count, 3 x (id, two keys, commitment, certificate, signature, 1-byte bitmap): nothing more
    assert len(msg) == 32 + 4 + 3 * _SIGNED_ENTRY
    # rows {0,1,2,3}, {1,2,4}, {2,3,5} as bits of the candidate rows 0-7 (bit i = row i)
    assert [msg[32 + 4 + (i + 1) * _SIGNED_ENTRY - 1] for i in range(3)] == [0b1111, 0b10110, 0b101100]


def test_g5_fixed_row_sets_cleared_by_the_server_are_refused() -> None:
    # the victim (device 0) checks its peers' entries first: device 1's row set was cleared in its list
    with pytest.raises(InvalidMessage, match="keys for device 1 that device 1 did not sign"):
        _round(tamper=True, signed=True)
