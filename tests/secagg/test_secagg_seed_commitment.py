"""Seed commitments of signed rounds (session 23, red-team finding E1).

In a signed round each client commits to its self-mask seed ``b`` in its signed advertise
(``SHA-256(len(domain) || domain || round parameters || id || b)``), the key list carries the
commitment under the same signature, and :meth:`SecAggServer.result` checks every opened seed
against it (and every opened mask key against its advertised public key, in any round).  Since
session 24 (finding E2) a signed round's holders' unmask shares are also checked against their
dealers' share commitments (tests/secagg/test_secagg_share_commitments.py): a holder that moves its
share is named and left out, and an opening of dealt shares that fails names the dealer.
Expected sums are numpy sums of the inputs and expected commitments are hashlib's over the bytes
the test lays out, never the code under test.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from secagg_rounds import Hook, Round, drawn, move_unmask_share

from secemb.errors import InvalidMessage
from secemb.randomness import CtrDrbg
from secemb.secagg import SecAggAborted, SecAggClient, SecAggConfig, SecAggServer, messages, shamir
from secemb.secagg.prg import SEED_BYTES

H = messages.HEADER_BYTES
N = shamir.SHARE_BYTES
P = shamir.PRIME
DOMAIN = b"secemb/secagg/v1/seed-commitment"
PAIR = 64  # two X25519 public keys


def _commitment(cfg: SecAggConfig, ident: int, seed: bytes) -> bytes:
    return hashlib.sha256(bytes([len(DOMAIN)]) + DOMAIN + cfg.header() + ident.to_bytes(4, "little") + seed).digest()


def _round(n: int, t: int, *, signed: bool = True, sparse: bool = False) -> Round:
    """``n`` clients, threshold ``t``, six rows of width 2 (round 11), row sets and inputs drawn
    from ``default_rng(10 n + t)``."""
    return drawn(SecAggConfig(length=6, threshold=t, width=2, round_id=11, sparse=sparse, signed=signed), n, n * 10 + t)


@pytest.mark.parametrize("sparse", [False, True])
def test_a_signed_advertise_and_its_key_list_entry_carry_the_seed_commitment_and_the_sum_is_exact(sparse: bool) -> None:
    rnd = _round(5, 3, sparse=sparse)
    for u, msg in rnd.advertised.items():
        seed = rnd.clients[u]._b
        assert len(seed) == SEED_BYTES
        assert msg[H + PAIR : H + PAIR + 32] == _commitment(rnd.cfg, u, seed)
    assert _commitment(rnd.cfg, 0, bytes(16)) != _commitment(rnd.cfg, 1, bytes(16))  # the id is bound
    rnd.play(dropped=(4,))  # client 4 drops: its mask key is opened and checked
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [] and rnd.server.complaints == {}


def test_the_key_list_entries_carry_each_clients_advertised_commitment() -> None:
    rnd = _round(3, 2)
    body = rnd.key_lists()[0][H:]
    entry = PAIR + 32 + 120 + 64
    assert len(body) == 4 + 3 * (4 + entry)
    for u in rnd.ids:
        at = 4 + u * (4 + entry) + 4
        assert body[at + PAIR : at + PAIR + 32] == _commitment(rnd.cfg, u, rnd.clients[u]._b)


def test_a_dealer_sharing_another_seed_than_it_committed_to_aborts_a_signed_round() -> None:
    """Client 0 shares and masks with another seed than the one it committed to (its shares are
    consistent: every holder is honest).  The opened seed fails the commitment: the round aborts,
    client 0 is named as the dealer (since session 24: its dealt shares, as it committed to them,
    open to another seed), and every later call raises again."""
    rnd = _round(5, 3)
    rnd.clients[0]._b = bytes(a ^ 1 for a in rnd.clients[0]._b)
    rnd.play()
    with pytest.raises(SecAggAborted, match=r"the self-mask seed of client 0 opened from 5 shares does not match "
                                            r"its signed commitment, and no other opening passes: client 0 dealt"):
        rnd.server.result()
    assert rnd.server.cheaters == [0]
    assert "open to one that does not match its signed commitment" in rnd.server.cheated[0]
    with pytest.raises(SecAggAborted):
        rnd.server.result()


def test_an_unsigned_round_has_no_commitment_and_takes_the_shared_seed() -> None:
    """The same dealer in an unsigned round: nothing to check, and the sum is exact (the device
    masked with the seed it shared)."""
    rnd = _round(5, 3, signed=False)
    assert {len(m) for m in rnd.advertised.values()} == {H + PAIR}
    rnd.clients[0]._b = bytes(a ^ 1 for a in rnd.clients[0]._b)
    rnd.play()
    assert np.array_equal(rnd.server.result(), rnd.want())


def _colluders(owner: int, which: int, honest: list[int], colluders: tuple[int, ...], delta: int = 1) -> Hook:
    """The colluders move their shares of ``owner``'s secret onto ``f + q``, ``q`` zero at every
    point of ``honest`` (``len(honest)`` below the threshold) with ``q(0) = delta``: with the
    shares of ``honest`` they agree on a polynomial whose secret is ``delta`` more than the true one."""
    c = 1
    for j in honest:
        c = c * (-(j + 1)) % P
    c = delta * pow(c, -1, P) % P

    def q(x: int) -> int:
        out = c
        for j in honest:
            out = out * (x - (j + 1)) % P
        return out

    return lambda u, msg: move_unmask_share(msg, which, owner, q(u + 1)) if u in colluders else msg


def test_two_colluding_holders_moving_an_honest_seed_are_both_named_and_the_sum_is_exact() -> None:
    """Five holders (threshold 3 + 2): leaving out honest client 2 would mend the colluders' shares
    of client 0's seed (session 23: the seed so opened failed its commitment and the round aborted,
    nobody named).  Since session 24 each colluder's moved share fails its dealer's share
    commitment: both are named, and honest 0, 1, 2 open the seed."""
    rnd = _round(5, 3)
    rnd.play(unmask=_colluders(0, 1, [0, 1], (3, 4)))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [3, 4]


def test_two_colluding_holders_moving_a_dropped_clients_mask_key_abort_an_unsigned_round_and_name_nobody() -> None:
    """Seven clients, threshold 4, client 6 drops: six holders of its mask key.  Colluders 4 and 5
    move their shares onto a polynomial through honest 0, 1, 2: leaving out honest client 3 mends
    them, and the key so opened (moved in bits X25519 does not clamp) does not match client 6's
    advertised public key: an unsigned round aborts, nobody named."""
    rnd = _round(7, 4, signed=False)
    rnd.play(unmask=_colluders(6, 0, [0, 1, 2], (4, 5), 1 << 100), dropped=(6,))
    with pytest.raises(SecAggAborted, match=r"the mask key of client 6 opened from 6 shares \(after leaving out "
                                            r"client 3's shares\) does not match its public key"):
        rnd.server.result()
    assert rnd.server.cheaters == []


def test_two_colluding_holders_moving_a_dropped_clients_mask_key_are_named_in_a_signed_round() -> None:
    """The same in a signed round (session 24): the colluders' moved shares fail client 6's share
    commitments, both are named and left out, and honest 0-3 (the threshold) open the key."""
    rnd = _round(7, 4)
    rnd.play(unmask=_colluders(6, 0, [0, 1, 2], (4, 5), 1 << 100), dropped=(6,))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [4, 5]


def test_one_wrong_holder_is_named_where_the_opening_matches_the_commitment() -> None:
    rnd = _round(5, 3)
    rnd.play(unmask=lambda u, msg: move_unmask_share(msg, 1, 0, 7) if u == 4 else msg)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [4]


def test_with_one_spare_share_the_commitment_names_the_wrong_holder_and_the_sum_is_exact() -> None:
    """Four holders, threshold 3: holder 3's share of client 0's seed is off the polynomial (F3's
    one-spare case; session 23 found it by trying the 3-subsets against the seed commitment); since
    session 24 the share fails client 0's share commitment: holder 3 is named and the round commits."""
    rnd = _round(4, 3)
    rnd.play(unmask=lambda u, msg: move_unmask_share(msg, 1, 0, 7) if u == 3 else msg)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [3]


def test_with_one_spare_share_an_unsigned_round_still_cannot_tell_whose_it_is() -> None:
    """The same in an unsigned round: a seed has no commitment to try the subsets against, so the
    disagreement is refused without a name, as before."""
    rnd = _round(4, 3, signed=False)
    rnd.play(unmask=lambda u, msg: move_unmask_share(msg, 1, 0, 7) if u == 3 else msg)
    with pytest.raises(InvalidMessage, match="too few to tell whose are wrong"):
        rnd.server.result()
    assert rnd.server.cheaters == []


def test_a_tampered_commitment_in_the_key_list_is_refused_by_the_peers() -> None:
    rnd = _round(3, 2)
    lists = rnd.key_lists()
    at = H + 4 + (4 + PAIR + 32 + 120 + 64) + 4 + PAIR  # client 1's commitment
    forged = {u: lists[u][:at] + bytes([lists[u][at] ^ 1]) + lists[u][at + 1 :] for u in rnd.ids}
    with pytest.raises(InvalidMessage, match=r"device 1 did not sign.*does not verify"):
        rnd.clients[0].share_keys(forged[0])
    with pytest.raises(InvalidMessage, match="other keys or another row set under this client's id"):
        rnd.clients[1].share_keys(forged[1])
    rnd.clients[2].share_keys(lists[2])  # the genuine list is taken


def test_the_server_refuses_an_advertise_whose_commitment_was_altered() -> None:
    rnd = _round(3, 2)
    bad = bytearray(rnd.advertised[1])
    bad[H + PAIR + 7] ^= 1
    with pytest.raises(InvalidMessage, match="advertise of client 1: the signature does not verify"):
        rnd.server.receive_advertise(1, bytes(bad))
    rnd.server.receive_advertise(1, rnd.advertised[1])  # nothing was kept of the refused one


#: SHA-256 of every message of the unsigned rounds of :func:`_unsigned_transcript`, computed with
#: the code before the seed commitments (commit 92e73fe): unsigned rounds keep their bytes.
UNSIGNED_TRANSCRIPTS = {
    False: "3836edbd53ddaed720e6e31bef961b3c561468172d20695e4ed7ecf3a5040661",
    True: "be2ce6a858855fc570de5bc532c3ca6cf9952e873b8ea5bc34c87b7295ec127c",
}


def _unsigned_transcript(sparse: bool) -> str:
    """An unsigned round of 4 clients (threshold 3, client 3 drops after its shares), each client
    with its own deterministic random stream: the SHA-256 of every message in order."""
    cfg = SecAggConfig(length=6, threshold=3, width=2, round_id=4, sparse=sparse)
    ids = [0, 1, 2, 3]
    rows = {u: np.array([r for r in range(6) if (r + u) % 3], np.int64) if sparse else np.arange(6) for u in ids}
    clients = {u: SecAggClient(u, cfg, _rng=CtrDrbg(100 + u)) for u in ids}
    server = SecAggServer(cfg)
    h = hashlib.sha256()

    def log(msg: bytes) -> bytes:
        h.update(len(msg).to_bytes(4, "little") + msg)
        return msg

    for u in ids:
        server.receive_advertise(u, log(clients[u].advertise(rows[u] if sparse else None)))
    listed = {u: log(m) for u, m in server.keys_messages().items()}
    for u in ids:
        server.receive_shares(u, log(clients[u].share_keys(listed[u])))
    relayed = {u: log(m) for u, m in server.relayed_messages().items()}
    for u in ids[:3]:
        x = (np.arange(rows[u].size * 2, dtype=np.uint32) * (u + 3)).reshape(-1, 2)
        server.receive_masked(u, log(clients[u].masked_input(relayed[u], x)))
    survivors = {u: log(m) for u, m in server.survivors_messages().items()}
    for u in ids[:3]:
        server.receive_unmask(u, log(clients[u].unmask(survivors[u])))
    h.update(server.result().astype("<u4").tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("sparse", [False, True])
def test_unsigned_rounds_keep_their_bytes(sparse: bool) -> None:
    assert _unsigned_transcript(sparse) == UNSIGNED_TRANSCRIPTS[sparse]
