"""Encrypted shares that do not open (finding F2, session 22; fixed in session 23).

A client whose share ciphertext from a sender does not authenticate, names other parties or
carries a share outside the field stays in the round: it masks with the sender as with any
peer, holds none of the sender's shares, and leaves the sender out of its unmask message.  The
server rebuilds every secret from the clients that sent a share of it: the sum is exact while at
least ``threshold`` hold each secret, and the round aborts (naming the secret) otherwise.  The
spoiling is played by the sender (in its shares message) and by the server (in the relayed
message): the outcome is the same.  Expected sums are numpy sums of the inputs, never the code
under test.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from secemb.errors import InvalidMessage
from secemb.secagg import SecAggAborted, SecAggClient, SecAggConfig, SecAggServer, keys, messages, shamir
from secemb.secagg.client import SHARE_CIPHERTEXT_BYTES
from secemb.secagg.identity import Roster

H = messages.HEADER_BYTES
CT = SHARE_CIPHERTEXT_BYTES


def _record(signed: bool) -> int:
    """Bytes of a shares or relayed record: id, ciphertext and, signed, two 16-byte share commitments."""
    return 4 + CT + (32 if signed else 0)


def _inputs(ids: list[int], length: int, width: int, seed: int) -> dict[int, np.ndarray]:
    g = np.random.default_rng(seed)  # test inputs, not secrets
    return {u: g.integers(0, 2**32, (length, width), dtype=np.uint64).astype(np.uint32) for u in ids}


def _sum(inputs: dict[int, np.ndarray], ids: list[int]) -> np.ndarray:
    total = sum((inputs[u].astype(np.uint64) for u in ids), np.zeros_like(inputs[ids[0]], np.uint64))
    return (total % 2**32).astype(np.uint32)


def _flip_record(msg: bytes, ident: int, signed: bool) -> bytes:
    """A shares or relayed message with the last byte of the ciphertext (in the GCM tag) of
    ``ident``'s record flipped."""
    out = bytearray(msg)
    count = struct.unpack_from("<I", out, H)[0]
    for i in range(count):
        at = H + 4 + i * _record(signed)
        if struct.unpack_from("<I", out, at)[0] == ident:
            out[at + 4 + CT - 1] ^= 1
            return bytes(out)
    raise AssertionError(f"no record for {ident}")


def _reseal(msg: bytes, sender: SecAggClient, recipient: int, plaintext: bytes) -> bytes:
    """Sender's shares message with its record to ``recipient`` replaced by ``plaintext``
    encrypted under the pair's channel key: it authenticates, but says something else."""
    out = bytearray(msg)
    count = struct.unpack_from("<I", out, H)[0]
    for i in range(count):
        at = H + 4 + i * _record(sender.config.signed)
        if struct.unpack_from("<I", out, at)[0] == recipient:
            key = sender._channel(recipient, keys.CHANNEL)
            out[at + 4 : at + 4 + CT] = keys.seal(key, sender.config.round_id, sender.id, recipient, plaintext)
            return bytes(out)
    raise AssertionError(f"no record for {recipient}")


def _spoil(kind: str, msg: bytes, sender: SecAggClient, recipient: int) -> bytes:
    """The sender's own spoiling of its shares to ``recipient``: a ciphertext that does not
    authenticate, or an authentic one that names other parties or carries a share outside the field."""
    n = shamir.SHARE_BYTES
    ids = recipient.to_bytes(4, "little") + sender.id.to_bytes(4, "little")
    if kind == "tag":
        return _flip_record(msg, recipient, sender.config.signed)
    if kind == "names-others":
        other = ((recipient + 1) % 2**32).to_bytes(4, "little") + sender.id.to_bytes(4, "little")
        return _reseal(msg, sender, recipient, other + bytes(2 * n))
    assert kind == "outside-field"
    return _reseal(msg, sender, recipient, ids + b"\xff" * n + bytes(n))


@dataclass
class Round:
    """One round played message by message; ``unmask`` keeps every unmask message the server got."""

    cfg: SecAggConfig
    server: SecAggServer
    clients: dict[int, SecAggClient]
    inputs: dict[int, np.ndarray]
    unmask: dict[int, bytes] = field(default_factory=dict)

    def revealed(self, which: int) -> dict[int, list[int]]:
        """Per client v: the senders of unmask messages that carry a share of v's ``s^SK``
        (``which`` 0) or ``b`` (1)."""
        out: dict[int, list[int]] = {}
        for u, msg in sorted(self.unmask.items()):
            rd = messages.Reader(memoryview(msg)[H:], "unmask")
            parts = (rd.records(shamir.SHARE_BYTES, "dropped"), rd.records(shamir.SHARE_BYTES, "survivor"))
            for v, _ in parts[which]:
                out.setdefault(v, []).append(u)
        return out


def _play(n: int, threshold: int, *, signed: bool, sender_spoils: tuple[int, ...] = (), by_server: bool = False,
          kind: str = "tag", spoiler: int = 0, spoiler_drops: bool = False,
          alter_unmask: Callable[[int, bytes], bytes] | None = None) -> Round:
    """``n`` clients, ``spoiler``'s shares to each of ``sender_spoils`` spoiled (by itself in its
    shares message, or with ``by_server`` by the server in the relayed messages; ``kind`` as in
    :func:`_spoil`, the server only flips a tag); with ``spoiler_drops`` it sends no masked input.
    ``alter_unmask(u, msg)``: what client ``u`` sends instead of its unmask message ``msg``."""
    ids = list(range(n))
    cfg = SecAggConfig(length=5, threshold=threshold, width=2, round_id=6, signed=signed)
    roster = Roster.generate()
    clients = {u: SecAggClient(u, cfg, identity=roster.enroll(u) if signed else None) for u in ids}
    server = SecAggServer(cfg)
    rnd = Round(cfg, server, clients, _inputs(ids, 5, 2, n + threshold))
    for u, c in clients.items():
        server.receive_advertise(u, c.advertise())
    listed = server.keys_messages()
    for u, c in clients.items():
        msg = c.share_keys(listed[u])
        if u == spoiler and not by_server:
            for v in sender_spoils:
                msg = _spoil(kind, msg, c, v)
        server.receive_shares(u, msg)
    relayed = server.relayed_messages()
    for u, c in clients.items():
        if u == spoiler and spoiler_drops:
            continue
        msg = _flip_record(relayed[u], spoiler, cfg.signed) if by_server and u in sender_spoils else relayed[u]
        server.receive_masked(u, c.masked_input(msg, rnd.inputs[u]))
    answers = server.survivors_messages()
    if signed:
        for u in answers:
            server.receive_consistency(u, clients[u].consistency(answers[u]))
        answers = server.signatures_messages()
    for u in answers:
        msg = clients[u].unmask(answers[u])
        rnd.unmask[u] = msg if alter_unmask is None else alter_unmask(u, msg)
        server.receive_unmask(u, rnd.unmask[u])
    return rnd


def _shift_seed_share(msg: bytes, owner: int) -> bytes:
    """An unmask message with its share of ``owner``'s seed + 1 (a field element still)."""
    size = 4 + shamir.SHARE_BYTES
    seeds = H + 4 + struct.unpack_from("<I", msg, H)[0] * size
    holders = [v for v, _ in messages.Reader(memoryview(msg)[seeds:], "seeds").records(shamir.SHARE_BYTES, "v")]
    at = seeds + 4 + holders.index(owner) * size + 4
    share = (int.from_bytes(msg[at : at + shamir.SHARE_BYTES], "little") + 1) % shamir.PRIME
    return msg[:at] + share.to_bytes(shamir.SHARE_BYTES, "little") + msg[at + shamir.SHARE_BYTES :]


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("kind", ["tag", "names-others", "outside-field"])
@pytest.mark.parametrize("spoiler_drops", [False, True])
def test_a_sender_spoiling_its_shares_to_one_peer_leaves_the_sum_exact(signed: bool, kind: str,
                                                                      spoiler_drops: bool) -> None:
    """Five clients, threshold 3; client 0's shares to client 4 do not open.  Client 4 stays, masks
    with 0, and sends no share of 0's secret (its seed if 0 survives, its mask key if 0 dropped):
    the server rebuilds it from the other holders, the sum over the survivors is exact, and
    client 4's complaint names client 0."""
    rnd = _play(5, 3, signed=signed, sender_spoils=(4,), kind=kind, spoiler_drops=spoiler_drops)
    alive = [1, 2, 3, 4] if spoiler_drops else [0, 1, 2, 3, 4]
    total = rnd.server.result()
    assert rnd.server.survivors == alive
    assert np.array_equal(total, _sum(rnd.inputs, alive))
    assert rnd.server.complaints == {4: [0]} and rnd.server.cheaters == []
    which = 0 if spoiler_drops else 1
    assert rnd.revealed(which)[0] == [u for u in alive if u != 4]
    assert 0 not in rnd.revealed(1 - which)  # never both kinds of share of client 0


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("by_server", [False, True])
def test_a_secret_with_fewer_than_threshold_holders_aborts_the_round_cleanly(signed: bool, by_server: bool) -> None:
    """Client 0's shares to clients 2, 3 and 4 do not open (spoiled by client 0, or altered by the
    server on the way): only clients 0 and 1 hold its seed, fewer than the threshold 3.  The round
    aborts at Unmasking naming client 0's seed; no sum comes out (every later call raises the same),
    and the unmask messages carry two shares of client 0's seed, none of its mask key: the server
    opens nothing of client 0."""
    rnd = _play(5, 3, signed=signed, sender_spoils=(2, 3, 4), by_server=by_server)
    reason = "2 shares of the self-mask seed of client 0, threshold 3"
    with pytest.raises(SecAggAborted, match=reason):
        rnd.server.result()
    with pytest.raises(SecAggAborted, match=reason):
        rnd.server.result()
    assert rnd.server.complaints == {2: [0], 3: [0], 4: [0]}
    assert rnd.revealed(1)[0] == [0, 1] and 0 not in rnd.revealed(0)


@pytest.mark.parametrize("signed", [False, True])
def test_the_server_altering_a_ciphertext_gets_the_same_outcome_and_nothing_more(signed: bool) -> None:
    """The server flips a tag of client 0's shares to client 4 in the relayed message: client 4
    stays, the sum over all five is exact, and every client of U4 reveals what the unaltered round
    reveals, less client 4's share of client 0's seed (no share of any mask key: nobody dropped)."""
    rnd = _play(5, 3, signed=signed, sender_spoils=(4,), by_server=True)
    honest = _play(5, 3, signed=signed)
    assert np.array_equal(rnd.server.result(), _sum(rnd.inputs, list(range(5))))
    assert rnd.server.complaints == {4: [0]}
    assert rnd.revealed(0) == honest.revealed(0) == {}
    want = honest.revealed(1)
    want[0] = [0, 1, 2, 3]
    assert rnd.revealed(1) == want


def test_the_server_takes_only_omissions_in_an_unmask_message() -> None:
    """An unmask message may leave peers out, nothing else: a seed share of a dropped client, a
    key share of a survivor, a message without the sender's own seed share or with a duplicate
    record are refused (nothing kept: the genuine message is taken after)."""
    cfg = SecAggConfig(length=3, threshold=2, round_id=2)
    clients = {u: SecAggClient(u, cfg) for u in range(4)}
    server = SecAggServer(cfg)
    for u, c in clients.items():
        server.receive_advertise(u, c.advertise())
    listed = server.keys_messages()
    for u, c in clients.items():
        server.receive_shares(u, c.share_keys(listed[u]))
    relayed = server.relayed_messages()
    for u in (0, 1, 2):  # 3 drops
        server.receive_masked(u, clients[u].masked_input(relayed[u], np.zeros(3, np.uint32)))
    answers = server.survivors_messages()
    genuine = {u: clients[u].unmask(answers[u]) for u in answers}

    def unmask(sk: list[int], bs: list[int]) -> bytes:
        share = bytes(shamir.SHARE_BYTES)
        part = [len(ids).to_bytes(4, "little") + b"".join(v.to_bytes(4, "little") + share for v in ids)
                for ids in (sk, bs)]
        return messages.frame("unmask", cfg.round_id, 1, *part)

    for sk, bs in (([3], [0, 1, 2, 3]), ([1, 3], [0, 1, 2]), ([3], [0, 2]), ([3, 3], [0, 1, 2]), ([3], [1, 1])):
        with pytest.raises(InvalidMessage):
            server.receive_unmask(1, unmask(sk, bs))
    for u, msg in genuine.items():
        server.receive_unmask(u, msg)
    assert np.array_equal(server.result(), np.zeros((3, 1), np.uint32))
    assert server.complaints == {}


@pytest.mark.parametrize(("wrong", "named"), [({1: 2, 5: 0}, None), ({5: 0}, [5]), ({1: 2}, [1])])
def test_wrong_shares_are_found_in_each_holder_set_and_two_senders_abort(wrong: dict[int, int],
                                                                        named: list[int] | None) -> None:
    """Seven clients, threshold 3, unsigned; client 0's shares to client 6 do not open, so client
    0's seed has six holders and every other secret seven (two reconstructions).  A client whose
    share of one seed is wrong (+1) is found and named in either set, and the sum is exact;
    client 1 wrong on client 2's seed and client 5 on client 0's: each set alone names its
    sender, but two clients sent wrong shares, and the round aborts naming both."""
    rnd = _play(7, 3, signed=False, sender_spoils=(6,),
                alter_unmask=lambda u, msg: _shift_seed_share(msg, wrong[u]) if u in wrong else msg)
    if named is None:
        with pytest.raises(InvalidMessage, match=r"clients \[1, 5\] do not agree"):
            rnd.server.result()
    else:
        assert np.array_equal(rnd.server.result(), _sum(rnd.inputs, list(range(7))))
        assert rnd.server.cheaters == named and rnd.server.complaints == {6: [0]}
