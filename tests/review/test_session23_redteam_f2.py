"""Session 23 (helper E, red team): finding F2's fix (bd16658, 3ab425e, 4a219de, 90e2a90).

A secure-aggregation client whose encrypted shares from a sender do not open now stays in the
round (it masks with the sender and leaves it out of its unmask message); the server takes unmask
messages that omit clients (``SecAggServer.complaints``) and opens each secret from whoever sent a
share of it, :func:`~secemb.secagg.shamir.combine_robust` once per set of holders, aborting below
the threshold.  The attacks below play a deviating server (the session-22 :class:`Adversary`, which
builds every server message itself) and malicious devices against the real clients and, where the
server is honest, the real :class:`~secemb.secagg.SecAggServer`.  Expected sums are numpy's sums of
the inputs, never the code under test.

Held (the attack is refused, opens nothing, or gets no more than before the fix):

* a server that spoils ciphertexts, splits survivor lists, drops messages and forwards chosen
  signatures (40 signed rounds of 5-7 devices) never opens both secrets of a device nor reads an
  input; a survivor it fabricates (garbage ciphertexts from a device that sent none, accepted
  since the fix) opens nothing; a client unmasks once;
* one malicious device that lies on shares and omits others, where it holds only secrets with
  ``threshold + 2`` holders or more, is named and the sum is exact; spoiling its own shares down
  to the threshold and lying on its own seed moves only its own rows in an unsigned round (what
  its masked input can do) and aborts a signed one (its seed does not open to its commitment);
* the unmask intake: shares of clients outside U2 / U3, of the wrong kind, duplicates, a missing
  own seed share, counts past the body, shares outside the field, trailing bytes, a sender that is
  not a survivor or did not sign, a second message, a message after the close: each a clean
  ``InvalidMessage`` / ``ProtocolError``, nothing kept;
* natural dropouts at every stage (Figure 6's 10 % and 20 %, signed, 40 clients, dense and
  sparse): exact sums, no complaints, nobody named.

Findings (what the attacker gets; docs/secagg.md, "Session 23 red team"):

* E1 (since session 22's F3 fix, not F2's) -- two colluding devices among the holders of an honest
  device's seed, where at most ``threshold`` honest clients hold it, open that seed as they choose
  (``b + 1`` here): with ``threshold + 2`` holders the leave-one-out search named an HONEST holder
  in ``cheaters`` and the round committed; with ``threshold + 1`` the shares agree and nobody was
  named.  The sum was wrong on the victim's rows, in a sparse round rows neither colluder holds.
  Fixed in signed rounds (session 23, helper H): each client commits to its seed in its signed
  advertise and the server checks every opened seed against the commitment; a wrong opening
  aborted the round and named nobody.  Since session 24 (share commitments, E2) each colluder's
  moved share fails its dealer's commitment: both are named and left out (``test_held_e1_*``).  Unsigned rounds (an honest-but-curious
  setting, no commitments) still open it wrong (``test_finding_e1_unsigned_*``).
* E2 (since F3) -- one device that deals one honest peer a share off its polynomial (an authentic
  ciphertext: the peer takes it) gets that honest peer named in ``cheaters`` (SFSL's
  ``bad_shares``); the sum is exact.  A holder's wrong share and a dealer's look alike.  Fixed in
  signed rounds (session 24, helper A): the dealer commits to every share it deals, the holder
  takes only matching shares and the server checks every unmask share against its commitment, so
  the dealer is named (``test_e2_fixed_*``); unsigned rounds still name the holder
  (``test_finding_e2_unsigned_*``).  Colluding holders (E1) are now named too.
* E3 (F2) -- colluding devices that omit an honest device's seed are recorded as complaints against
  it, and with enough of them the round aborts naming that device's seed.  Nothing acts on either
  (docs/deployment.md).  The abort reason used to state that the device's shares did not open; it
  now says that the omitting clients say so (fixed here).
* E4 (F2: several holder sets) -- a client found wrong in one holder set still had its shares used
  in the others: in an unchecked set of exactly ``threshold`` holders its wrong share opened a
  secret wrong and the round committed; and each holder set ran its own leave-one-out search (one
  liar and six omitting colluders among 100 clients: ``result()`` 19.5 s against 0.6 s, under
  load).  Fixed here: the largest holder sets go first and a client found wrong is left out of
  every later set.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from share_records import CT, H, N, flip_tag, record_at
from test_session22_redteam_secagg import Adversary

from secemb.errors import InvalidMessage, ProtocolError
from secemb.secagg import SecAggAborted, SecAggClient, SecAggConfig, SecAggServer, keys, mask_rows, messages, shamir
from secemb.secagg.identity import Roster
from secemb.secagg.prg import SEED_BYTES

P = shamir.PRIME
SHARE_DOMAIN = b"secemb/secagg/v1/share-commitment"
ROUND = 5  # the round id of every round :func:`_play` plays
Parts = tuple[dict[int, int], dict[int, int]]  # an unmask message: (s^SK shares of dropped, b shares of survivors)


def _u32(i: int) -> bytes:
    return i.to_bytes(4, "little")


def _parts(msg: bytes) -> Parts:
    """The two parts of an unmask message, owner -> share."""
    rd = messages.Reader(memoryview(msg)[H:], "unmask")
    keyed = {v: int.from_bytes(s, "little") for v, s in rd.records(N, "dropped")}
    seeded = {v: int.from_bytes(s, "little") for v, s in rd.records(N, "survivor")}
    rd.end()
    return keyed, seeded


def _unmask_msg(sender: int, parts: Parts) -> bytes:
    body = [_u32(len(p)) + b"".join(_u32(v) + y.to_bytes(N, "little") for v, y in sorted(p.items())) for p in parts]
    return messages.frame("unmask", ROUND, sender, *body)


def _edit(sender: int, msg: bytes, which: int, owner: int, shift: int | None) -> bytes:
    """``sender``'s unmask message with its share of ``owner``'s ``s^SK`` (``which`` 0) or ``b``
    (1) shifted by ``shift`` in the field, or left out (``shift`` None)."""
    parts = _parts(msg)
    if shift is None:
        del parts[which][owner]
    else:
        parts[which][owner] = (parts[which][owner] + shift) % P
    return _unmask_msg(sender, parts)


def _redeal(client: SecAggClient, msg: bytes, recipient: int, shift: int) -> bytes:
    """A malicious sender's shares message with its share of ``b`` to ``recipient`` shifted by
    ``shift`` and sealed again under the pair's channel key: authentic, the recipient takes it (in a
    signed round the dealer commits to the shifted share: SHA-256 over the layout, truncated)."""
    cfg, signed = client.config, client.config.signed
    at = record_at(msg, recipient, signed) + 4
    key = client._channel(recipient, keys.CHANNEL)  # the sender's own channel key
    rid, me = cfg.round_id, client.id
    pt = keys.open_sealed(key, rid, me, recipient, msg[at : at + CT])
    b = (int.from_bytes(pt[8 + N :], "little") + shift) % P
    out = msg[:at] + keys.seal(key, rid, me, recipient, pt[: 8 + N] + b.to_bytes(N, "little"))
    if signed:
        data = bytes([len(SHARE_DOMAIN)]) + SHARE_DOMAIN + cfg.header() + _u32(me) + _u32(recipient) + b"\x01"
        out += msg[at + CT : at + CT + 16] + hashlib.sha256(data + b.to_bytes(N, "little")).digest()[:16]
        return out + msg[at + CT + 32 :]
    return out + msg[at + CT :]


@dataclass
class Round:
    """One round played message by message against the real server (honest): ``unmask`` is what
    the server got from each client at Unmasking."""

    cfg: SecAggConfig
    server: SecAggServer
    clients: dict[int, SecAggClient]
    rows: dict[int, np.ndarray]
    inputs: dict[int, np.ndarray]
    unmask: dict[int, bytes] = field(default_factory=dict)

    def want(self, ids: list[int] | None = None) -> np.ndarray:
        """numpy's sum of the inputs of ``ids`` (default: the survivors), over their rows."""
        total = np.zeros((self.cfg.length, self.cfg.width), np.uint64)
        for u in self.server.survivors if ids is None else ids:
            total[self.rows[u]] += self.inputs[u]
        return (total % 2**32).astype(np.uint32)

    def self_mask(self, u: int, seed: int) -> np.ndarray:
        """Client ``u``'s self mask from seed ``seed``, over all rows (0 on rows it does not hold)."""
        out = np.zeros((self.cfg.length, self.cfg.width), np.uint32)
        out[self.rows[u]] = mask_rows(seed.to_bytes(SEED_BYTES, "little"), self.rows[u], self.cfg.width)
        return out


def _play(n: int, t: int, *, signed: bool = False, rows: dict[int, list[int]] | None = None, length: int = 6,
          width: int = 2, drop_after: dict[int, int] | None = None,
          deal: Callable[[int, SecAggClient, bytes], bytes] | None = None,
          relay: Callable[[int, bytes], bytes] | None = None,
          unmask: Callable[[int, bytes], bytes] | None = None, send_unmask: bool = True) -> Round:
    """``n`` clients, threshold ``t`` (sparse with ``rows``: client -> its rows), to the end of
    Unmasking (the server's ``result`` is the test's).  ``drop_after[u] = k``: client ``u`` sends
    nothing from stage ``k`` on (0 advertise, 1 shares, 2 masked, 3 consistency or in an unsigned
    round unmask, 4 unmask).  ``deal(u, client, msg)``, ``relay(u, msg)`` and ``unmask(u, msg)``
    replace client ``u``'s shares message, the relayed message it gets and its unmask message;
    with ``send_unmask`` false the unmask messages are kept, not sent."""
    ids = list(range(n))
    cfg = SecAggConfig(length=length, threshold=t, width=width, round_id=ROUND, sparse=rows is not None, signed=signed)
    held = {u: np.arange(length) if rows is None else np.array(rows[u], np.int64) for u in ids}
    g = np.random.default_rng(n * 100 + t)  # test inputs, not secrets
    roster = Roster.generate()
    rnd = Round(cfg, SecAggServer(cfg), {u: SecAggClient(u, cfg, identity=roster.enroll(u) if signed else None)
                                         for u in ids}, held,
                {u: g.integers(0, 2**32, (held[u].size, width), dtype=np.uint64).astype(np.uint32) for u in ids})
    drops = drop_after or {}
    server, clients = rnd.server, rnd.clients

    def live(stage: int, among: Collection[int]) -> list[int]:
        return [u for u in ids if drops.get(u, 5) > stage and u in among]

    for u in live(0, ids):
        server.receive_advertise(u, clients[u].advertise(None if rows is None else held[u]))
    listed = server.keys_messages()
    for u in live(1, listed):
        msg = clients[u].share_keys(listed[u])
        server.receive_shares(u, msg if deal is None else deal(u, clients[u], msg))
    relayed = server.relayed_messages()
    for u in live(2, relayed):
        msg = relayed[u] if relay is None else relay(u, relayed[u])
        server.receive_masked(u, clients[u].masked_input(msg, rnd.inputs[u]))
    answers = server.survivors_messages()
    if signed:
        for u in live(3, answers):
            server.receive_consistency(u, clients[u].consistency(answers[u]))
        answers = server.signatures_messages()
    for u in live(4 if signed else 3, answers):
        msg = clients[u].unmask(answers[u])
        rnd.unmask[u] = msg if unmask is None else unmask(u, msg)
        if send_unmask:
            server.receive_unmask(u, rnd.unmask[u])
    return rnd


# ------------------------------------------------------------------ a deviating server: privacy (held)

def _never_both(adv: Adversary) -> None:
    for v, (sk, b) in adv.opened().items():
        assert not (sk and b), f"the adversary opened both secrets of device {v}"
        assert adv.read(v) is None, f"the adversary read device {v}'s input"


def _deviating_round(seed: int) -> tuple[int, int]:
    """One signed round of 5-7 devices (threshold n // 2 + 1) under a random plan of the server's
    (the plan's randomness is the test's, not a secret): it flips the tag of a quarter of the
    pairs' ciphertexts (the recipients now stay), in some rounds withholds a tenth, in half of them
    tells each device either that device 0 survived or that it dropped (or nothing), and forwards
    each signer either the signatures of its own list or every signature.  Checks that no device's
    ``b`` and ``s^SK`` both open; returns (devices that unmasked, spoiled pairs whose recipient
    unmasked)."""
    plan = random.Random(seed)
    n = plan.choice([5, 6, 7])
    ids = list(range(n))
    roster = Roster.generate()
    cfg = SecAggConfig(length=4, threshold=n // 2 + 1, round_id=seed + 1, signed=True)
    g = np.random.default_rng(seed)  # test inputs, not secrets
    adv = Adversary(cfg, ids, {u: g.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32) for u in ids},
                    {u: roster.enroll(u) for u in ids})
    adv.send_keys({})
    spoiled = {pair for pair in adv.shares if plan.random() < 0.25}
    for pair in spoiled:  # the last byte of the ciphertext (in its tag), before the share commitments
        adv.shares[pair] = adv.shares[pair][: CT - 1] + bytes([adv.shares[pair][CT - 1] ^ 1]) + adv.shares[pair][CT:]
    withheld = {pair for pair in adv.shares if plan.random() < 0.1} if plan.random() < 0.3 else set()
    adv.relay(lambda u, v: (u, v) not in withheld)
    live = [u for u in ids if u not in adv.refused]
    split = plan.random() < 0.5  # else every device is told the same list
    views = {}
    for u in live:
        told = plan.choice(["survived", "dropped", "nothing"]) if split and u != 0 else "survived"
        if told != "nothing":
            views[u] = live if told == "survived" else [v for v in live if v != 0]
    adv.survivors(views)
    adv.forward(None if plan.random() < 0.5 else lambda u: sorted(adv.sigs))
    _never_both(adv)
    return len(adv.revealed), sum(1 for (s, r) in spoiled if r in adv.revealed and s in adv.delivered[r])


def test_held_a_server_that_spoils_splits_drops_and_forwards_at_will_never_opens_both_secrets() -> None:
    """40 rounds of :func:`_deviating_round`: no device's secrets both open, no input is read, and
    the plans exercised the fix (devices unmasked holding no share of a sender they kept)."""
    runs = [_deviating_round(seed) for seed in range(40)]
    assert sum(r[0] for r in runs) > 40 and sum(r[1] for r in runs) > 10


def test_held_a_fabricated_survivor_that_sent_no_shares_opens_nothing() -> None:
    """New since the fix: a client takes a sender whose ciphertext does not open, so the server can
    relay garbage in the name of device 4, which sent no shares at all, and list it as a survivor
    (before the fix a device refused the garbage, and without it refused the list: 4 was not in
    its U2).  Devices 0-3 sign and unmask: they
    reveal exactly what a round in which 4 dropped before ShareKeys reveals (shares of the four
    seeds), nothing of device 4, and no input is read."""
    ids = list(range(5))
    roster = Roster.generate()
    cfg = SecAggConfig(length=4, threshold=3, round_id=9, signed=True)
    g = np.random.default_rng(9)  # test inputs, not secrets
    adv = Adversary(cfg, ids, {u: g.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32) for u in ids},
                    {u: roster.enroll(u) for u in ids})
    adv.send_keys({})
    for v in range(4):
        adv.shares[(4, v)] = os.urandom(CT + 32)  # device 4's real shares never relayed (ciphertext, commitments)
    adv.relay(lambda u, v: v != 4)  # device 4 gets nothing: it refuses (below the threshold), as if silent
    adv.survivors({u: ids for u in range(4)})
    adv.forward()
    assert sorted(adv.refused) == [4] and sorted(adv.revealed) == [0, 1, 2, 3]
    assert all(adv.revealed[u] == ({}, adv.revealed[u][1]) and sorted(adv.revealed[u][1]) == [0, 1, 2, 3]
               for u in range(4))
    assert adv.opened() == {0: (False, True), 1: (False, True), 2: (False, True), 3: (False, True), 4: (False, False)}
    _never_both(adv)


@pytest.mark.parametrize("signed", [False, True])
def test_held_sparse_spoiled_relays_with_dropouts_reveal_one_kind_per_client_and_the_exact_sum(signed: bool) -> None:
    """A sparse round of eight clients (threshold 5; SFSL's kind of round), the server flipping
    tags on the way: client 0's shares to 5, client 3's to 1, client 7's to 2; client 7 drops
    before its masked input (its mask key is rebuilt from five holders) and client 4 before
    unmasking (client 0's seed has five holders: exactly the threshold).  Every
    unmask message carries, per client, shares of one kind only (the seed of a survivor, the key
    of client 7), the sum is numpy's over the rows each survivor holds, and the complaints are the
    spoiled pairs whose recipient unmasked."""
    spoil = {5: 0, 1: 3, 2: 7}  # recipient -> the sender whose ciphertext to it the server spoils
    g = np.random.default_rng(8)  # test rows, not secrets
    rows = {u: sorted(g.choice(12, 6, replace=False).tolist()) for u in range(8)}
    rnd = _play(8, 5, signed=signed, rows=rows, length=12, drop_after={7: 2, 4: 4 if signed else 3},
                relay=lambda u, m: flip_tag(m, spoil[u], signed) if u in spoil else m)
    total = rnd.server.result()
    assert rnd.server.survivors == [0, 1, 2, 3, 4, 5, 6] and sorted(rnd.unmask) == [0, 1, 2, 3, 5, 6]
    assert np.array_equal(total, rnd.want())
    assert rnd.server.complaints == {5: [0], 1: [3], 2: [7]} and rnd.server.cheaters == []
    keyed: set[int] = set()
    seeded: set[int] = set()
    for m in rnd.unmask.values():
        k, b = _parts(m)
        keyed |= set(k)
        seeded |= set(b)
    assert keyed == {7} and seeded == {0, 1, 2, 3, 4, 5, 6}


def test_held_a_client_unmasks_once() -> None:
    """A second survivor list (one in which device 0 dropped) after a client unmasked: the client
    refuses to answer again, so no client can be asked for both kinds of share of a peer."""
    rnd = _play(4, 3)
    u3 = messages.frame("survivors", rnd.cfg.round_id, messages.SERVER, messages.ids_bytes([1, 2, 3]))
    with pytest.raises(ProtocolError, match="client 1: unmask called at stage 4"):
        rnd.clients[1].unmask(u3)


# ------------------------------------------------------------------ malicious devices: integrity

@pytest.mark.parametrize("seed", range(12))
def test_held_one_device_lying_and_omitting_is_named_and_the_sum_is_exact(seed: int) -> None:
    """Seven clients, threshold 4, signed or not, client 6 dropping before its masked input on
    half the plans (its mask key is rebuilt): malicious client 3 leaves random secrets out of its
    unmask message and shifts its share of one or two others (its own seed among the choices).
    Every secret client 3 sends a share of has six or seven holders (threshold + 2 or more): the
    round commits with numpy's sum and client 3 named, never a wrong sum, never an honest client
    named."""
    plan = random.Random(seed)
    drops = {6: 2} if plan.random() < 0.5 else {}
    owners = [(v, 1) for v in range(7) if v not in drops] + [(v, 0) for v in drops]
    lies = plan.sample(owners, plan.choice([1, 2]))
    omits = [o for o in owners if o not in lies and o != (3, 1) and plan.random() < 0.4]

    def attack(u: int, msg: bytes) -> bytes:
        if u != 3:
            return msg
        for v, which in lies:
            msg = _edit(3, msg, which, v, 1 + plan.randrange(P - 1))
        for v, which in omits:
            msg = _edit(3, msg, which, v, None)
        return msg

    rnd = _play(7, 4, signed=seed % 2 == 1, drop_after=drops, unmask=attack)
    total = rnd.server.result()  # client 3 holds only secrets with at least threshold + 2 holders
    assert rnd.server.cheaters == [3]
    assert np.array_equal(total, rnd.want())


@pytest.mark.parametrize("signed", [False, True])
def test_held_a_device_spoiling_its_own_shares_down_to_the_threshold_moves_only_its_own_rows(signed: bool) -> None:
    """Sparse, five clients, threshold 3: client 0 spoils its shares to clients 3 and 4, so only
    0, 1 and 2 hold its seed (exactly the threshold: no spare share), and shifts its own share of
    it.  Unsigned: the round commits, nobody is named, and the sum is numpy's on every row client 0
    does not hold: what it moved it could have moved with its masked input.  (No colluding holder
    is needed: the device's own unmask message carries a share of its seed.)  Signed: the seed
    opened to another value than client 0 committed to, and the round aborted naming nobody; since
    session 24 client 0's own share fails its own share commitment: client 0 is named and left
    out, its seed has two genuine shares, and the round aborts (a device can abort a signed round,
    now named)."""
    rows = {0: [0, 1, 2], 1: [0, 3], 2: [1, 4, 5], 3: [2, 3, 4], 4: [0, 5]}
    rnd = _play(5, 3, signed=signed, rows=rows,
                deal=lambda u, c, m: m if u else flip_tag(flip_tag(m, 3, signed), 4, signed),
                unmask=lambda u, m: m if u else _edit(0, m, 1, 0, 5))
    if signed:
        with pytest.raises(SecAggAborted, match=r"2 shares of the self-mask seed of client 0 besides those of "
                                                r"clients \[0\] \(found lying\), threshold 3"):
            rnd.server.result()
        assert rnd.server.cheaters == [0] and rnd.server.complaints == {3: [0], 4: [0]}
        return
    total = rnd.server.result()
    assert rnd.server.cheaters == [] and rnd.server.complaints == {3: [0], 4: [0]}
    own = np.zeros(6, bool)
    own[rows[0]] = True
    assert np.array_equal(total[~own], rnd.want()[~own])
    assert not np.array_equal(total[own], rnd.want()[own])


def _colluders_shift(owner: int, honest: list[int], colluders: tuple[int, ...]) -> Callable[[int, bytes], bytes]:
    """The colluders' unmask messages with their shares of ``owner``'s seed moved onto ``f + q``:
    ``q(x) = c * prod over honest (x - x_j)`` (degree ``len(honest)``, below the threshold), zero at
    every honest point in ``honest``, with ``c`` chosen so ``q(0) = 1``.  They need only public
    points and their own shares: shares of ``f + q`` at ``honest`` and at the colluders agree, and
    the seed opens as ``b + 1``."""
    zero = 1
    for j in honest:
        zero = zero * (-(j + 1)) % P
    c = pow(zero, -1, P)

    def q(x: int) -> int:
        out = c
        for j in honest:
            out = out * (x - (j + 1)) % P
        return out

    return lambda u, msg: _edit(u, msg, 1, owner, q(u + 1)) if u in colluders else msg


def test_held_e1_fixed_two_colluding_holders_moving_an_honest_seed_are_named_and_the_sum_is_exact() -> None:
    """E1's attack in a signed round: five clients, threshold 3; clients 3 and 4 collude and move
    their shares of honest client 0's seed onto a polynomial through the shares of clients 0 and
    1.  Leaving out honest client 2 would mend the shares (it used to name client 2 and commit a
    wrong sum; session 23: the seed so opened failed client 0's seed commitment, the round aborted,
    nobody named).  Since session 24 both moved shares fail client 0's share commitments: clients 3
    and 4 are named and left out, honest 0, 1 and 2 open the seed, the sum is exact."""
    rnd = _play(5, 3, signed=True, unmask=_colluders_shift(0, [0, 1], (3, 4)))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [3, 4]


def test_held_e1_fixed_with_too_few_honest_holders_left_the_round_aborts_naming_the_colluders() -> None:
    """The same with client 2 silent at Unmasking: the two honest holders left are below the
    threshold, the round aborts (no sum is ever returned), clients 3 and 4 named (before session
    24 the four shares agreed on ``b_0 + 1``, failed the seed commitment, nobody named)."""
    rnd = _play(5, 3, signed=True, drop_after={2: 4}, unmask=_colluders_shift(0, [0, 1], (3, 4)))
    reason = r"2 shares of the self-mask seed of client 0 besides those of clients \[3, 4\] \(found lying\)"
    with pytest.raises(SecAggAborted, match=reason):
        rnd.server.result()
    assert rnd.server.cheaters == [3, 4]
    with pytest.raises(SecAggAborted):  # and stays aborted: no sum is ever returned
        rnd.server.result()


def test_held_e1_fixed_sparse_the_colluders_are_named_instead_of_moving_rows_they_do_not_hold() -> None:
    """E1 in a signed sparse round (SFSL's): client 0 holds rows 0-2, colluders 3 and 4 hold rows
    3-5 only.  Their shift of client 0's seed used to make rows 0-2 of the committed sum wrong and
    name honest client 2 (session 23: the round aborted); now they are named and the sum is exact."""
    rows = {0: [0, 1, 2], 1: [0, 1, 3], 2: [2, 4], 3: [3, 4], 4: [4, 5]}
    rnd = _play(5, 3, signed=True, rows=rows, unmask=_colluders_shift(0, [0, 1], (3, 4)))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.cheaters == [3, 4]


@pytest.mark.parametrize(("silent", "named"), [((), [2]), ((2,), [])])
def test_finding_e1_unsigned_rounds_have_no_commitment_and_still_open_a_seed_wrong(
        silent: tuple[int, ...], named: list[int]) -> None:
    """E1 where it remains: an unsigned round (the honest-but-curious setting; SFSL and SecEA's
    set-up run signed rounds) has no seed commitments.  As before, with five holders honest
    client 2 is named, with four nobody; the round commits with client 0's seed opened as
    ``b_0 + 1``: the sum is numpy's plus client 0's true self mask minus the one of ``b_0 + 1``
    (client 0's seed read from the test's client)."""
    rnd = _play(5, 3, drop_after={u: 3 for u in silent}, unmask=_colluders_shift(0, [0, 1], (3, 4)))
    total = rnd.server.result()
    assert rnd.server.cheaters == named
    b0 = int.from_bytes(rnd.clients[0]._b, "little")
    assert np.array_equal(total, rnd.want() + rnd.self_mask(0, b0) - rnd.self_mask(0, b0 + 1))
    assert not np.array_equal(total, rnd.want())


def test_finding_e2_unsigned_one_device_dealing_a_bad_share_gets_an_honest_holder_named() -> None:
    """E2 where it remains: an unsigned round (honest-but-curious devices, no share commitments).
    Five clients, threshold 3.  Client 0 deals client 4 a share of its seed off its polynomial, in
    an authentic ciphertext: client 4 takes it and reveals it at Unmasking.  The server finds
    client 4's share the one that disagrees and names honest client 4; the sum is exact (the other
    four shares open client 0's seed)."""
    rnd = _play(5, 3, deal=lambda u, c, m: _redeal(c, m, 4, 1) if u == 0 else m)
    assert np.array_equal(rnd.server.result(), rnd.want(list(range(5))))
    assert rnd.server.cheaters == [4] and rnd.server.complaints == {}


@pytest.mark.parametrize("victim", [1, 4])
def test_e2_fixed_a_signed_dealer_dealing_a_bad_share_is_named_not_the_holder(victim: int) -> None:
    """E2 fixed in signed rounds (session 24): the same dealing, client 0 committing to the bad
    share (else client ``victim`` would refuse it, F2's path).  Client ``victim``'s unmask share
    matches its commitment -- it sent what it was dealt -- so it is not named; the shares as dealt
    disagree, so client 0 is named, and the shares without the bad one open client 0's committed
    seed: the sum is exact (victim 1 is among the first three shares, whose opening fails first)."""
    rnd = _play(5, 3, signed=True, deal=lambda u, c, m: _redeal(c, m, victim, 1) if u == 0 else m)
    assert np.array_equal(rnd.server.result(), rnd.want(list(range(5))))
    assert rnd.server.cheaters == [0] and rnd.server.complaints == {}
    assert "dealt shares of its self-mask seed" in rnd.server.cheated[0]


def test_e2_fixed_a_signed_dealer_dealing_a_bad_share_with_no_spare_aborts_the_round_naming_it() -> None:
    """The same with clients 3 and 4 silent at Unmasking: three shares of client 0's seed (the
    threshold), client 1's the bad one; no other opening exists, the round aborts naming client 0."""
    rnd = _play(5, 3, signed=True, drop_after={3: 4, 4: 4},
                deal=lambda u, c, m: _redeal(c, m, 1, 1) if u == 0 else m)
    with pytest.raises(SecAggAborted, match="client 0 dealt shares"):
        rnd.server.result()
    assert rnd.server.cheaters == [0]


def test_finding_e3_colluders_omitting_an_honest_seed_are_complaints_against_it_and_can_abort() -> None:
    """E3: five clients, threshold 3; clients 3 and 4 leave honest client 0's seed out of their
    unmask messages (its shares opened for them).  Recorded as complaints against client 0, which
    act on nothing while its seed still opens (SFSL's outcome and ``secemb admin status`` show them
    to the operator: docs/deployment.md); then with client 2 silent too, 2 holders are left and the
    round aborts naming client 0's seed.  Before the fix the colluders could abort the round by
    staying silent (a reason naming nobody); now the record points at an honest client.  And since
    session 27 (red team G's S27-G2, helper H) that abort names client 0 in ``aborting_dropouts``,
    which the one-server door counts: the complaints alone left its seed short (4 clients of U4
    unmasked, threshold 3).  This is the framing docs/security.md bounds (the S27-G2 paragraph):
    more than ``|U4| - threshold`` = 1 false complaint, i.e. fewer than the threshold of honest
    unmaskers, here 2 of 4, one count a round against the framed client; the reason says only what
    the omitting clients claim."""
    omit = lambda u, m: _edit(u, m, 1, 0, None) if u in (3, 4) else m  # noqa: E731
    rnd = _play(5, 3, unmask=omit)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.complaints == {3: [0], 4: [0]}
    rnd = _play(5, 3, drop_after={2: 3}, unmask=omit)
    with pytest.raises(SecAggAborted, match=r"2 shares of the self-mask seed of client 0, threshold 3 \(the other 2 "
                                            r"unmask messages leave it out: those clients say its encrypted shares "
                                            r"to them did not open\)") as aborted:
        rnd.server.result()
    assert rnd.server.complaints == {3: [0], 4: [0]} and aborted.value.aborting_dropouts == (0,)


# ------------------------------------------------------------------ the unmask intake (held)

@pytest.mark.parametrize("signed", [False, True])
def test_held_the_unmask_intake_refuses_everything_but_omissions_and_keeps_nothing(signed: bool) -> None:
    """Seven clients, threshold 4: client 6 sends no shares (outside U2), client 5 no masked input
    (dropped: in U2, not U3), in a signed round client 4 does not sign.  Each message below is an
    ``InvalidMessage`` (never another error) and leaves no trace: every genuine message is taken
    afterwards, the sum is numpy's, no complaint is recorded; a second message and one after the
    close are refused too."""
    rnd = _play(7, 4, signed=signed, drop_after={6: 1, 5: 2} | ({4: 3} if signed else {}), send_unmask=False)
    server, rid = rnd.server, rnd.cfg.round_id
    u3 = [0, 1, 2, 3, 4]

    def msg(keyed: list[int], seeded: list[int], *, tail: bytes = b"", value: int = 7) -> bytes:
        parts = [_u32(len(ids)) + b"".join(_u32(v) + value.to_bytes(N, "little") for v in ids)
                 for ids in (keyed, seeded)]
        return messages.frame("unmask", rid, 1, *parts, tail)

    bad = {
        "key share of a client outside U2": (1, msg([5, 6], u3)),
        "key share of an unknown client": (1, msg([5, 9], u3)),
        "key share of a survivor": (1, msg([2, 5], u3)),
        "seed share of a dropped client": (1, msg([5], [*u3, 5])),
        "seed share of a client outside U2": (1, msg([5], [*u3, 6])),
        "no own seed share": (1, msg([5], [0, 2, 3, 4])),
        "duplicate record": (1, msg([5], [0, 1, 1, 2, 3, 4])),
        "records out of order": (1, msg([5], [1, 0, 2, 3, 4])),
        "share equal to the prime": (1, msg([5], u3, value=P)),
        "share of 2^264 - 1": (1, msg([5], u3, value=2**264 - 1)),
        "trailing bytes": (1, msg([5], u3, tail=b"\0")),
        "count past the body": (1, messages.frame("unmask", rid, 1, _u32(2**32 - 1), _u32(0))),
        "second count past the body": (1, messages.frame("unmask", rid, 1, _u32(0), _u32(5), _u32(1), bytes(N))),
        "empty body": (1, messages.frame("unmask", rid, 1)),
        "another sender in the frame": (2, msg([5], u3)),
        "from a dropped client": (5, messages.frame("unmask", rid, 5, _u32(0), _u32(1), _u32(5), bytes(N))),
        "from a client outside U2": (6, messages.frame("unmask", rid, 6, _u32(0), _u32(1), _u32(6), bytes(N))),
        "from an unknown client": (9, messages.frame("unmask", rid, 9, _u32(0), _u32(1), _u32(9), bytes(N))),
    }
    if signed:
        bad["from a survivor that did not sign"] = (4, messages.frame("unmask", rid, 4, _u32(1), _u32(5), bytes(N),
                                                                      _u32(1), _u32(4), bytes(N)))
    for what, (sender, body) in bad.items():
        with pytest.raises(InvalidMessage):
            server.receive_unmask(sender, body)
        assert server.complaints == {}, what
    for u, m in rnd.unmask.items():
        server.receive_unmask(u, m)
    with pytest.raises(InvalidMessage, match="duplicate unmask message from client 1"):
        server.receive_unmask(1, msg([], [1]))
    assert np.array_equal(server.result(), rnd.want(u3))
    assert server.complaints == {} and server.cheaters == []
    with pytest.raises(ProtocolError, match="receive_unmask called during stage done"):
        server.receive_unmask(1, rnd.unmask[1])


# ------------------------------------------------------------------ natural dropouts (no regression)

@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("rate", [0.1, 0.2])
def test_held_natural_dropouts_at_every_stage_open_the_exact_sum(rate: float, sparse: bool) -> None:
    """Figure 6's dropout rates on a signed round of 40 clients (threshold 21), the dropouts spread
    over every stage (before advertising, sharing, masking, signing, unmasking), dense or sparse
    (each client holds a random half of 40 rows): the sum is numpy's over the survivors, nobody
    complains and nobody is named.  Every unmask message carries every share (no omission)."""
    n = 40
    g = np.random.default_rng(int(rate * 100) + sparse)  # test rows, not secrets
    rows = {u: sorted(g.choice(40, 20, replace=False).tolist()) for u in range(n)} if sparse else None
    gone = g.choice(n, int(rate * n), replace=False).tolist()
    drops = {int(u): k % 5 for k, u in enumerate(gone)}
    rnd = _play(n, 21, signed=True, rows=rows, length=40, width=3, drop_after=drops)
    assert rnd.server.survivors == [u for u in range(n) if drops.get(u, 5) > 2]
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.complaints == {} and rnd.server.cheaters == []
    assert all(len(_parts(m)[1]) == len(rnd.server.survivors) for m in rnd.unmask.values())


def test_held_e4_fixed_a_client_found_wrong_is_left_out_of_every_holder_set() -> None:
    """E4 (F2: several holder sets; fixed in this session): seven clients, threshold 4.  Client 0
    spoils its shares to clients 4, 5 and 6, so only 0-3 hold its seed (exactly the threshold:
    unchecked).  Client 3 shifts its share of client 1's seed (seven holders: found) and of client
    0's.  The server used to name client 3, leave it out of client 1's reconstruction only, and
    open client 0's seed with client 3's share: a committed sum wrong on client 0's rows.  Now the
    largest holder sets go first and client 3 is left out of every later one: client 0's seed has
    three holders without it, and the round aborts naming client 3; nothing is opened."""
    rnd = _play(7, 4, deal=lambda u, c, m: m if u else flip_tag(flip_tag(flip_tag(m, 4, False), 5, False), 6, False),
                unmask=lambda u, m: _edit(3, _edit(3, m, 1, 1, 1), 1, 0, 1) if u == 3 else m)
    reason = "3 shares of the self-mask seed of client 0 without client 3's \\(found wrong\\), threshold 4"
    with pytest.raises(SecAggAborted, match=reason):
        rnd.server.result()
    with pytest.raises(SecAggAborted, match=reason):
        rnd.server.result()
    assert rnd.server.cheaters == [3] and rnd.server.complaints == {4: [0], 5: [0], 6: [0]}


def test_held_e4_fixed_one_liar_across_many_holder_sets_costs_one_search() -> None:
    """Twelve clients, threshold 7: clients 8, 9 and 10 leave seeds out of their unmask messages in
    every pattern (eight holder sets), client 11 shifts its share of every seed.  Each holder set's
    leave-one-out search builds a share check per left-out client (client 11 is tried last); the
    server used to search every set (about 8 x 10 checks, more with more colluders: at 100
    clients one search is about 0.5 s), now it searches once and leaves client 11 out of the
    rest: at most one check per set plus one search.  The sum is numpy's, client 11 named."""
    def attack(u: int, msg: bytes) -> bytes:
        for v in range(12):
            if u == 11:
                msg = _edit(11, msg, 1, v, 1)
            elif u in (8, 9, 10) and v != u and (v >> (u - 8)) & 1:
                msg = _edit(u, msg, 1, v, None)
        return msg

    rnd = _play(12, 7, unmask=attack)
    built = []
    real = shamir.ShareCheck

    def counted(*args: Any, **kwargs: Any) -> shamir.ShareCheck:
        built.append(args)
        return real(*args, **kwargs)

    sets = {tuple(sorted(u for u, m in rnd.unmask.items() if v in _parts(m)[1])) for v in range(12)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shamir, "ShareCheck", counted)
        total = rnd.server.result()
    assert len(sets) == 8
    assert len(built) <= len(sets) + 12
    assert rnd.server.cheaters == [11] and np.array_equal(total, rnd.want())
