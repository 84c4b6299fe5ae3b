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

import numpy as np
import pytest
from secagg_rounds import Hook, Round, drawn, move_unmask_share
from share_records import CT, H, flip_tag, record_at

from secemb.errors import InvalidMessage
from secemb.secagg import SecAggAborted, SecAggClient, SecAggConfig, keys, messages, shamir

def _reseal(msg: bytes, sender: SecAggClient, recipient: int, plaintext: bytes) -> bytes:
    """Sender's shares message with its record to ``recipient`` replaced by ``plaintext``
    encrypted under the pair's channel key: it authenticates, but says something else."""
    at = record_at(msg, recipient, sender.config.signed) + 4
    key = sender._channel(recipient, keys.CHANNEL)
    return msg[:at] + keys.seal(key, sender.config.round_id, sender.id, recipient, plaintext) + msg[at + CT :]


def _spoil(kind: str, msg: bytes, sender: SecAggClient, recipient: int) -> bytes:
    """The sender's own spoiling of its shares to ``recipient``: a ciphertext that does not
    authenticate, or an authentic one that names other parties or carries a share outside the field."""
    n = shamir.SHARE_BYTES
    ids = recipient.to_bytes(4, "little") + sender.id.to_bytes(4, "little")
    if kind == "tag":
        return flip_tag(msg, recipient, sender.config.signed)
    if kind == "names-others":
        other = ((recipient + 1) % 2**32).to_bytes(4, "little") + sender.id.to_bytes(4, "little")
        return _reseal(msg, sender, recipient, other + bytes(2 * n))
    assert kind == "outside-field"
    return _reseal(msg, sender, recipient, ids + b"\xff" * n + bytes(n))


def _revealed(rnd: Round, which: int) -> dict[int, list[int]]:
    """Per client v: the senders of the unmask messages of ``rnd`` that carry a share of v's
    ``s^SK`` (``which`` 0) or ``b`` (1)."""
    out: dict[int, list[int]] = {}
    for u, msg in sorted(rnd.unmask.items()):
        rd = messages.Reader(memoryview(msg)[H:], "unmask")
        parts = (rd.records(shamir.SHARE_BYTES, "dropped"), rd.records(shamir.SHARE_BYTES, "survivor"))
        for v, _ in parts[which]:
            out.setdefault(v, []).append(u)
    return out


def _play(n: int, threshold: int, *, signed: bool, sender_spoils: tuple[int, ...] = (), by_server: bool = False,
          kind: str = "tag", spoiler: int = 0, spoiler_drops: bool = False, alter_unmask: Hook | None = None) -> Round:
    """``n`` clients, ``spoiler``'s shares to each of ``sender_spoils`` spoiled (by itself in its
    shares message, or with ``by_server`` by the server in the relayed messages; ``kind`` as in
    :func:`_spoil`, the server only flips a tag); with ``spoiler_drops`` it sends no masked input.
    ``alter_unmask(u, msg)``: what client ``u`` sends instead of its unmask message ``msg``."""
    rnd = drawn(SecAggConfig(length=5, threshold=threshold, width=2, round_id=6, signed=signed), n, n + threshold)

    def deal(u: int, msg: bytes) -> bytes:
        for v in sender_spoils if u == spoiler and not by_server else ():
            msg = _spoil(kind, msg, rnd.clients[u], v)
        return msg

    def relay(u: int, msg: bytes) -> bytes:
        return flip_tag(msg, spoiler, signed) if by_server and u in sender_spoils else msg

    rnd.play(deal=deal, relay=relay, unmask=alter_unmask, dropped=(spoiler,) if spoiler_drops else ())
    return rnd


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
    assert np.array_equal(total, rnd.want())
    assert rnd.server.complaints == {4: [0]} and rnd.server.cheaters == []
    which = 0 if spoiler_drops else 1
    assert _revealed(rnd, which)[0] == [u for u in alive if u != 4]
    assert 0 not in _revealed(rnd, 1 - which)  # never both kinds of share of client 0


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
    assert _revealed(rnd, 1)[0] == [0, 1] and 0 not in _revealed(rnd, 0)


@pytest.mark.parametrize("signed", [False, True])
def test_the_server_altering_a_ciphertext_gets_the_same_outcome_and_nothing_more(signed: bool) -> None:
    """The server flips a tag of client 0's shares to client 4 in the relayed message: client 4
    stays, the sum over all five is exact, and every client of U4 reveals what the unaltered round
    reveals, less client 4's share of client 0's seed (no share of any mask key: nobody dropped)."""
    rnd = _play(5, 3, signed=signed, sender_spoils=(4,), by_server=True)
    honest = _play(5, 3, signed=signed)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.complaints == {4: [0]}
    assert _revealed(rnd, 0) == _revealed(honest, 0) == {}
    want = _revealed(honest, 1)
    want[0] = [0, 1, 2, 3]
    assert _revealed(rnd, 1) == want


def test_the_server_takes_only_omissions_in_an_unmask_message() -> None:
    """An unmask message may leave peers out, nothing else: a seed share of a dropped client, a
    key share of a survivor, a message without the sender's own seed share or with a duplicate
    record are refused (nothing kept: the genuine message is taken after)."""
    cfg = SecAggConfig(length=3, threshold=2, round_id=2)
    rnd = Round(cfg, {u: np.zeros(3, np.uint32) for u in range(4)})
    rnd.play(dropped=(3,), until="unmask")
    server = rnd.server

    def unmask(sk: list[int], bs: list[int]) -> bytes:
        share = bytes(shamir.SHARE_BYTES)
        part = [len(ids).to_bytes(4, "little") + b"".join(v.to_bytes(4, "little") + share for v in ids)
                for ids in (sk, bs)]
        return messages.frame("unmask", cfg.round_id, 1, *part)

    for sk, bs in (([3], [0, 1, 2, 3]), ([1, 3], [0, 1, 2]), ([3], [0, 2]), ([3, 3], [0, 1, 2]), ([3], [1, 1])):
        with pytest.raises(InvalidMessage):
            server.receive_unmask(1, unmask(sk, bs))
    for u, msg in rnd.unmask.items():  # the genuine ones
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
                alter_unmask=lambda u, msg: move_unmask_share(msg, 1, wrong[u], 1) if u in wrong else msg)
    if named is None:
        with pytest.raises(InvalidMessage, match=r"clients \[1, 5\] do not agree"):
            rnd.server.result()
    else:
        assert np.array_equal(rnd.server.result(), rnd.want())
        assert rnd.server.cheaters == named and rnd.server.complaints == {6: [0]}
