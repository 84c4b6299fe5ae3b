"""Share commitments of signed rounds (session 24, red-team finding E2).

In a signed round the dealer of every Shamir share sends, next to its ciphertext, two 16-byte
commitments ``SHA-256(len(domain) || domain || round parameters || dealer || holder || which ||
share)[:16]`` (its own shares' at the end of its shares message); the server relays them with the
ciphertexts, a holder keeps only shares that match them, and the server checks every unmask share
against its commitment.  So a holder that lies about a share is named (and all its shares left
out), and a dealer whose dealt shares do not open to its committed secret is named, never the
honest holder it dealt a bad share (session 23 named that holder).  Expected sums are numpy sums
of the inputs and expected commitments hashlib's over the bytes the test lays out, never the code
under test.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from secagg_rounds import Round, drawn, move_unmask_share
from share_records import CT, flip_tag, record_at

from secemb.errors import InvalidMessage
from secemb.secagg import SecAggAborted, SecAggClient, SecAggConfig, keys, messages, shamir

H = messages.HEADER_BYTES
N = shamir.SHARE_BYTES
P = shamir.PRIME
DOMAIN = b"secemb/secagg/v1/share-commitment"
SIGNED_RECORD = 4 + CT + 32  # id, ciphertext, two commitments


def _commit(cfg: SecAggConfig, dealer: int, holder: int, which: int, share: int) -> bytes:
    data = (cfg.header() + dealer.to_bytes(4, "little") + holder.to_bytes(4, "little") + bytes([which])
            + share.to_bytes(N, "little"))
    return hashlib.sha256(bytes([len(DOMAIN)]) + DOMAIN + data).digest()[:16]


def _at(msg: bytes, ident: int) -> int:
    """Offset of ``ident``'s record in a signed shares or relayed message."""
    return record_at(msg, ident, True)


def _redeal(dealer: SecAggClient, msg: bytes, holder: int, shift: int, *, which: int = 1,
            recommit: bool = True) -> bytes:
    """A malicious dealer's shares message with its share of ``b`` (``which`` 1) or ``s^SK`` (0) to
    ``holder`` moved by ``shift`` and sealed again (authentic); with ``recommit`` the commitment is
    to the moved share (the holder takes it), else the old one stays (the holder refuses it)."""
    at = _at(msg, holder) + 4
    key = dealer._channel(holder, keys.CHANNEL)
    rid, me = dealer.config.round_id, dealer.id
    pt = keys.open_sealed(key, rid, me, holder, msg[at : at + CT])
    shares = [int.from_bytes(pt[8:][k * N : (k + 1) * N], "little") for k in (0, 1)]
    shares[which] = (shares[which] + shift) % P
    sealed = keys.seal(key, rid, me, holder, pt[:8] + b"".join(y.to_bytes(N, "little") for y in shares))
    commits = [msg[at + CT :][k * 16 : (k + 1) * 16] for k in (0, 1)]
    if recommit:
        commits[which] = _commit(dealer.config, me, holder, which, shares[which])
    return msg[:at] + sealed + b"".join(commits) + msg[at + CT + 32 :]


def _seed_holders(msg: bytes) -> list[int]:
    rd = messages.Reader(memoryview(msg)[H:], "unmask")
    rd.records(N, "dropped")
    return [v for v, _ in rd.records(N, "survivor")]


def _round(n: int, t: int, *, signed: bool = True) -> Round:
    """``n`` clients, threshold ``t``, six rows of width 2 (round 12), inputs drawn from
    ``default_rng(10 n + t)``."""
    return drawn(SecAggConfig(length=6, threshold=t, width=2, round_id=12, signed=signed), n, n * 10 + t)


# ---------------------------------------------------------------------------------------- layout
def test_the_shares_and_relayed_records_carry_the_commitments_to_the_shares_they_seal() -> None:
    rnd = _round(4, 3)
    rnd.play()
    assert np.array_equal(rnd.server.result(), rnd.want())
    cfg = rnd.cfg
    for d in rnd.ids:
        msg = rnd.shares[d]
        assert len(msg) == H + 4 + 3 * SIGNED_RECORD + 32
        own_s, own_b = rnd.clients[d]._held[d]
        assert msg[-32:] == _commit(cfg, d, d, 0, own_s) + _commit(cfg, d, d, 1, own_b)
        for h in rnd.ids:
            if h == d:
                continue
            sh_s, sh_b = rnd.clients[h]._held[d]  # what holder h decrypted
            at = _at(msg, h)
            assert msg[at + 4 + CT :][:32] == _commit(cfg, d, h, 0, sh_s) + _commit(cfg, d, h, 1, sh_b)
            rel = rnd.relayed[h]
            assert rel[_at(rel, d) + 4 :][: CT + 32] == msg[at + 4 :][: CT + 32]  # relayed as dealt
    # the commitments are domain-separated from the seed commitment and bind dealer, holder and kind
    assert len({_commit(cfg, 0, 1, 1, 5), _commit(cfg, 1, 0, 1, 5), _commit(cfg, 0, 1, 0, 5)}) == 3


def test_an_unsigned_round_carries_no_commitments() -> None:
    rnd = _round(4, 3, signed=False)
    rnd.play()
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert {len(m) for m in rnd.shares.values()} == {H + 4 + 3 * (4 + CT)}
    assert {len(m) for m in rnd.relayed.values()} == {H + 4 + 3 * (4 + CT)}


def test_a_signed_shares_message_without_its_own_commitments_is_refused() -> None:
    rnd = _round(3, 2)
    rnd.play(until="shares")
    msg = rnd.shares[0]
    short = messages.frame("shares", 12, 0, msg[H:-32])
    with pytest.raises(InvalidMessage, match="shares: truncated"):
        rnd.server.receive_shares(0, short)
    rnd.server.receive_shares(0, msg)  # nothing kept of the refused one


# ---------------------------------------------------------------------------------------- lying holders
@pytest.mark.parametrize("liars", [(6,), (2, 6), (1, 3, 5)])
def test_every_holder_lying_about_a_share_is_named_and_the_sum_is_exact(liars: tuple[int, ...]) -> None:
    """Seven holders, threshold 4: one, two or three of them move their share of client 0's seed
    (session 23: two liars raised ``more than one party``, unnamed).  Each fails client 0's share
    commitment: all are named, their shares left out, and the honest rest (at least 4) open every
    secret."""
    rnd = _round(7, 4)
    rnd.play(unmask=lambda u, msg: move_unmask_share(msg, 1, 0, 1 + u) if u in liars else msg)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == list(liars)
    assert all("does not match the dealer's commitment" in rnd.server.cheated[u] for u in liars)
    assert rnd.server.complaints == {}


def test_four_liars_of_seven_leave_too_few_genuine_shares_and_the_round_aborts_naming_them() -> None:
    liars = (0, 2, 4, 6)
    rnd = _round(7, 4)
    rnd.play(unmask=lambda u, msg: move_unmask_share(msg, 1, 1, 1) if u in liars else msg)
    with pytest.raises(SecAggAborted, match=r"3 shares of the self-mask seed of client 0 besides those of clients "
                                            r"\[0, 2, 4, 6\] \(found lying\), threshold 4"):
        rnd.server.result()
    assert rnd.server.cheaters == list(liars)
    with pytest.raises(SecAggAborted):
        rnd.server.result()


def test_a_liar_about_a_dropped_clients_mask_key_is_named_and_left_out_of_every_secret() -> None:
    """Client 5 drops; holder 2 lies about its share of 5's mask key only: all of 2's shares are
    left out (its seed shares too), and the other four holders open everything."""
    rnd = _round(6, 4)
    rnd.play(unmask=lambda u, msg: move_unmask_share(msg, 0, 5, 1) if u == 2 else msg, dropped=(5,))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [2]
    assert "mask key of client 5" in rnd.server.cheated[2]


# ---------------------------------------------------------------------------------------- cheating dealers
@pytest.mark.parametrize("victim", [1, 4])
def test_a_dealer_dealing_one_bad_share_is_named_not_the_holder_and_the_sum_is_exact(victim: int) -> None:
    """Finding E2: client 0 deals holder ``victim`` a share of its seed off its polynomial, with a
    commitment to it (the holder takes it and sends it back).  Five holders, threshold 3: the
    shares are the dealt ones and disagree, so client 0 is named; leaving out one of the first four
    opens the committed seed (holder 1: the first three fail first), the round commits."""
    rnd = _round(5, 3)
    rnd.play(deal=lambda u, msg: _redeal(rnd.clients[0], msg, victim, 7) if u == 0 else msg)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [0]
    assert "do not lie on one polynomial" in rnd.server.cheated[0]
    assert rnd.server.complaints == {}


def test_a_dropped_dealer_that_dealt_a_bad_share_of_its_mask_key_is_named_and_the_sum_is_exact() -> None:
    """Client 5 deals holder 0 a share of its mask key off its polynomial (bits X25519 does not
    clamp), committed to, and drops before its masked input: the five holders' shares of its key
    disagree, client 5 is named (not holder 0), and the key opened without the bad share matches
    its public key."""
    rnd = _round(6, 4)
    rnd.play(deal=lambda u, msg: _redeal(rnd.clients[5], msg, 0, 1 << 100, which=0) if u == 5 else msg, dropped=(5,))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [5] and "mask key" in rnd.server.cheated[5]


def test_a_dealer_dealing_a_bad_share_where_no_spare_share_is_left_aborts_the_round_naming_the_dealer() -> None:
    """The same with clients 3 and 4 sending no unmask message: three holders (the threshold) of
    client 0's seed, one off the polynomial: nothing can mend it, the round aborts and client 0,
    not holder 1, is named."""
    rnd = _round(5, 3)
    rnd.play(deal=lambda u, msg: _redeal(rnd.clients[0], msg, 1, 7) if u == 0 else msg, silent=(3, 4))
    with pytest.raises(SecAggAborted, match=r"the self-mask seed of client 0 opened from 3 shares does not match its "
                                            r"signed commitment, and no other opening passes: client 0 dealt"):
        rnd.server.result()
    assert rnd.server.cheaters == [0]


def test_a_dealer_dealing_two_bad_shares_among_the_first_holders_aborts_the_round_naming_the_dealer() -> None:
    rnd = _round(5, 3)

    def deal(u: int, msg: bytes) -> bytes:
        return _redeal(rnd.clients[0], _redeal(rnd.clients[0], msg, 1, 7), 2, 9) if u == 0 else msg

    rnd.play(deal=deal)
    with pytest.raises(SecAggAborted, match="client 0 dealt shares"):
        rnd.server.result()
    assert rnd.server.cheaters == [0]


def test_a_dealer_whose_own_share_is_off_its_polynomial_is_named_and_the_sum_is_exact() -> None:
    """Client 0 keeps itself a share of its seed off the polynomial and commits to it (the end of
    its shares message): its own unmask share matches, the shares disagree, client 0 is named as
    the dealer and the other holders open its seed."""
    rnd = _round(5, 3)

    def deal(u: int, msg: bytes) -> bytes:
        if u != 0:
            return msg
        c = rnd.clients[0]
        sh_s, sh_b = c._held[0]
        c._held[0] = (sh_s, (sh_b + 5) % P)  # the share it will send at Unmasking
        return msg[:-16] + _commit(rnd.cfg, 0, 0, 1, c._held[0][1])

    rnd.play(deal=deal)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [0] and "dealt shares" in rnd.server.cheated[0]


def test_a_client_sending_another_own_share_than_it_committed_to_is_named_as_a_liar() -> None:
    rnd = _round(5, 3)
    rnd.play(unmask=lambda u, msg: move_unmask_share(msg, 1, 0, 5) if u == 0 else msg)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [0] and "does not match the dealer's commitment" in rnd.server.cheated[0]


# ---------------------------------------------------------------------------------------- spoiled commitments
@pytest.mark.parametrize("by", ["server", "dealer"])
def test_a_commitment_that_does_not_match_its_share_is_refused_by_the_holder_and_nobody_is_named(by: str) -> None:
    """Holder 2's relayed commitment to client 0's seed share is altered (by the server in the
    relayed message, or by client 0 dealing a share against another commitment): holder 2 takes
    no share of client 0 (it omits client 0 at Unmasking: a complaint, nothing revealed), nobody
    is named, and the other four holders open client 0's seed."""
    rnd = _round(5, 3)

    def flip(msg: bytes, ident: int) -> bytes:
        at = _at(msg, ident) + 4 + CT + 16
        return msg[:at] + bytes([msg[at] ^ 1]) + msg[at + 1 :]

    if by == "server":
        rnd.play(relay=lambda u, msg: flip(msg, 0) if u == 2 else msg)
    else:
        rnd.play(deal=lambda u, msg: _redeal(rnd.clients[0], msg, 2, 7, recommit=False) if u == 0 else msg)
    assert 0 not in rnd.clients[2]._held
    assert 0 not in _seed_holders(rnd.unmask[2]) and 1 in _seed_holders(rnd.unmask[2])
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [] and rnd.server.complaints == {2: [0]}


# ---------------------------------------------------------------------------------------- unsigned rounds
def test_an_unsigned_round_still_names_one_wrong_holder_of_a_mask_key_with_one_spare_share() -> None:
    """Unsigned rounds keep session 23's rules: six clients, threshold 3, client 5 drops after
    ShareKeys and its ciphertext to client 4 does not open, so clients 0-3 hold its mask key (one
    spare share; every seed has five holders).  Client 0 moves its share of the key: of the four
    3-subsets only the one without client 0 opens a key matching client 5's public key, so client
    0 is named and the sum is exact."""
    rnd = _round(6, 3, signed=False)
    rnd.play(deal=lambda u, msg: flip_tag(msg, 4, False) if u == 5 else msg,
             unmask=lambda u, msg: move_unmask_share(msg, 0, 5, 1 << 100) if u == 0 else msg, dropped=(5,))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [0] and rnd.server.complaints == {4: [5]}
