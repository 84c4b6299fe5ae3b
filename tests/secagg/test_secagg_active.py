"""Signed secure-aggregation rounds (SecAggConfig.signed) against an active server.

Each attack is played twice: on an unsigned round, where it reads a client's input (the
regression: it works there, so the test can fail), and on a signed round, where a client refuses
and the server learns nothing more.  Expected sums are numpy sums of the inputs, never the code
under test.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from secagg_rounds import Round, move_unmask_share

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.secagg import SecAggClient, SecAggConfig, SecAggServer, keys, messages, run_round, shamir
from secemb.secagg.client import ADVERTISE_DOMAIN, SHARE_CIPHERTEXT_BYTES, advertised
from secemb.secagg.identity import Roster, RosterPin
from secemb.secagg.prg import SEED_BYTES, mask_rows

H = 32  # framing header bytes


def _inputs(ids: list[int], length: int, width: int, seed: int) -> dict[int, np.ndarray]:
    g = np.random.default_rng(seed)  # test inputs, not secrets
    return {u: g.integers(0, 2**32, (length, width), dtype=np.uint64).astype(np.uint32) for u in ids}


@pytest.mark.parametrize("drops", [{}, {1: 1}, {2: 2}, {3: 3}, {4: 4}, {0: 0, 5: 3}])
def test_a_signed_dense_round_sums_the_survivors(drops: dict[int, int]) -> None:
    ids = list(range(6))
    cfg = SecAggConfig(length=5, threshold=4, width=2, round_id=9, signed=True)
    inputs = _inputs(ids, 5, 2, 1)
    tr = run_round(cfg, inputs, drop_after=drops)
    # survivors: those that sent their masked input (drop_after > 2)
    alive = [u for u in ids if drops.get(u, 5) > 2]
    assert tr.survivors == alive
    expected = sum((inputs[u].astype(np.uint64) for u in alive), np.zeros((5, 2), np.uint64)) % 2**32
    assert np.array_equal(tr.total, expected.astype(np.uint32))


@pytest.mark.parametrize("drops", [{}, {1: 2}, {4: 3}, {2: 4}])
def test_a_signed_sparse_round_sums_each_row_over_its_holders(drops: dict[int, int]) -> None:
    rows = {0: [0, 1, 2, 3], 1: [1, 2, 4], 2: [2, 3, 5], 3: [0, 5, 6], 4: [7]}
    cfg = SecAggConfig(length=8, threshold=3, width=3, round_id=4, sparse=True, signed=True)
    g = np.random.default_rng(2)
    inputs = {u: g.integers(0, 2**32, (len(r), 3), dtype=np.uint64).astype(np.uint32) for u, r in rows.items()}
    tr = run_round(cfg, inputs, rows={u: np.array(r) for u, r in rows.items()}, drop_after=drops)
    expected = np.zeros((8, 3), np.uint64)
    for u in tr.survivors:
        expected[rows[u]] += inputs[u]
    assert tr.survivors == [u for u in rows if drops.get(u, 5) > 2]
    assert np.array_equal(tr.total, (expected % 2**32).astype(np.uint32))


def test_identities_are_required_exactly_in_signed_rounds() -> None:
    roster = Roster.generate()
    signed = SecAggConfig(length=2, threshold=2, signed=True)
    with pytest.raises(InvalidParameters, match="identity"):
        SecAggClient(0, signed)
    with pytest.raises(InvalidParameters, match="identity"):
        SecAggClient(0, SecAggConfig(length=2, threshold=2), identity=roster.enroll(0))
    with pytest.raises(InvalidParameters, match="identity of device 1"):
        SecAggClient(0, signed, identity=roster.enroll(1))


# ---------------------------------------------------------------- attack 1: the server swaps keys

def _swap_keys(msg: bytes, victim_view: int, entry_size: int, fake: dict[int, bytes]) -> bytes:
    """The key list ``msg`` with the two keys of each listed peer in ``fake`` replaced."""
    body = bytearray(msg[H:])
    count = struct.unpack_from("<I", body)[0]
    for i in range(count):
        at = 4 + i * (4 + entry_size)
        ident = struct.unpack_from("<I", body, at)[0]
        if ident in fake and ident != victim_view:
            body[at + 4 : at + 4 + 64] = fake[ident]
    return msg[:H] + bytes(body)


def _mitm(signed: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The server gives client 0 its own keys for every peer, plays every peer towards it, opens
    the shares client 0 sends them (its self-mask seed) and reads client 0's input off its masked
    message.  Returns (client 0's input, what the server read; ``None``: client 0 refused)."""
    ids, victim = [0, 1, 2], 0
    cfg = SecAggConfig(length=6, threshold=2, width=2, round_id=3, signed=signed)
    roster = Roster.generate()
    clients = {u: SecAggClient(u, cfg, identity=roster.enroll(u) if signed else None) for u in ids}
    server = SecAggServer(cfg)
    for u, c in clients.items():
        server.receive_advertise(u, c.advertise())
    fake_c = {u: keys.KeyPair.generate() for u in ids}
    fake_s = {u: keys.KeyPair.generate() for u in ids}
    entry = 64 + (216 if signed else 0)  # signed: commitment 32, certificate 120, signature 64
    msgs = server.keys_messages()
    tampered = _swap_keys(msgs[victim], victim, entry, {u: fake_c[u].public + fake_s[u].public for u in ids})
    x = _inputs([victim], 6, 2, 5)[victim]
    try:
        shares = clients[victim].share_keys(tampered)
    except InvalidMessage as exc:
        assert "did not sign" in str(exc) and "the server deviated" in str(exc)
        return x, None
    # the server opens the victim's shares to each peer (it holds the peers' fake c keys)
    body, b_shares = shares[H:], {}
    for i in range(struct.unpack_from("<I", body)[0]):
        rec = body[4 + i * (4 + SHARE_CIPHERTEXT_BYTES) : 4 + (i + 1) * (4 + SHARE_CIPHERTEXT_BYTES)]
        peer = int.from_bytes(rec[:4], "little")
        k = keys.agree(fake_c[peer].private, clients[victim]._c.public, keys.CHANNEL, cfg.round_id, (victim, peer))
        pt = keys.open_sealed(k, cfg.round_id, victim, peer, rec[4:])
        b_shares[peer] = int.from_bytes(pt[8 + shamir.SHARE_BYTES :], "little")
    # ... and forges the peers' shares to the victim (any field elements)
    recs = []
    for peer in (1, 2):
        k = keys.agree(fake_c[peer].private, clients[victim]._c.public, keys.CHANNEL, cfg.round_id, (victim, peer))
        pt = victim.to_bytes(4, "little") + peer.to_bytes(4, "little") + bytes(2 * shamir.SHARE_BYTES)
        recs.append(peer.to_bytes(4, "little") + keys.seal(k, cfg.round_id, peer, victim, pt))
    relayed = messages.frame("relayed", cfg.round_id, messages.SERVER, len(recs).to_bytes(4, "little"), *recs)
    y = np.frombuffer(clients[victim].masked_input(relayed, x)[H:], "<u4").reshape(6, 2)
    b = shamir.combine([2, 3], [b_shares[1], b_shares[2]], cfg.threshold)
    read = y - mask_rows(b.to_bytes(SEED_BYTES, "little"), np.arange(6), 2)
    every = np.arange(6)
    for peer in (1, 2):
        seed = keys.agree(fake_s[peer].private, clients[victim]._s.public, keys.MASK, cfg.round_id, (victim, peer))
        read = read - mask_rows(seed, every, 2)  # victim 0 < peer: it added the pair's mask
    return x, read


def test_attack_key_substitution_reads_an_input_in_an_unsigned_round() -> None:
    x, read = _mitm(signed=False)
    assert read is not None and np.array_equal(read, x)


def test_attack_key_substitution_is_refused_in_a_signed_round() -> None:
    x, read = _mitm(signed=True)
    assert read is None


def test_a_forged_certificate_or_signature_in_the_key_list_is_refused() -> None:
    cfg = SecAggConfig(length=4, threshold=2, round_id=1, signed=True)
    roster, rogue = Roster.generate(), Roster.generate()
    ids = [0, 1, 2]
    clients = {u: SecAggClient(u, cfg, identity=roster.enroll(u)) for u in ids}
    server = SecAggServer(cfg)
    for u, c in clients.items():
        server.receive_advertise(u, c.advertise())
    msg = server.keys_messages()[0]
    entry = 64 + 216
    at = H + 4 + (4 + entry) + 4  # device 1's entry, after its id
    # the server's own identity for device 1 (a certificate of another roster) with its own keys
    ident = type(roster)(roster.deployment, rogue.private).enroll(1)
    c_pk, s_pk = keys.KeyPair.generate().public, keys.KeyPair.generate().public
    commit = bytes(32)
    forged = (c_pk + s_pk + commit + ident.certificate.to_bytes()
              + ident.sign(ADVERTISE_DOMAIN, advertised(cfg, 1, c_pk, s_pk, commit)))
    bad = msg[:at] + forged + msg[at + entry :]
    with pytest.raises(InvalidMessage, match="device 1 did not sign.*not the roster's"):
        clients[0].share_keys(bad)


def test_the_server_refuses_an_advertise_whose_signature_or_certificate_fails() -> None:
    cfg = SecAggConfig(length=4, threshold=2, round_id=1, signed=True)
    roster = Roster.generate()
    msg = SecAggClient(1, cfg, identity=roster.enroll(1)).advertise()
    # a key, the seed commitment, the certificate's signature, the signature
    for i in (H + 3, H + 64 + 5, H + 64 + 32 + 100, len(msg) - 1):
        bad = bytearray(msg)
        bad[i] ^= 1
        server = SecAggServer(cfg, pin=roster.pin)
        with pytest.raises(InvalidMessage):
            server.receive_advertise(1, bytes(bad))
        server.receive_advertise(1, msg)  # nothing was kept of the refused one
    with pytest.raises(InvalidMessage, match="not the roster's"):
        SecAggServer(cfg, pin=RosterPin(roster.deployment, Roster.generate().public)).receive_advertise(1, msg)
    with pytest.raises(InvalidMessage, match="another deployment"):
        SecAggServer(cfg, pin=Roster.generate().pin).receive_advertise(1, msg)


def test_a_signed_round_refuses_a_threshold_of_half_or_less() -> None:
    cfg = SecAggConfig(length=4, threshold=2, round_id=1, signed=True)
    roster = Roster.generate()
    clients = {u: SecAggClient(u, cfg, identity=roster.enroll(u)) for u in range(4)}
    server = SecAggServer(cfg)
    for u, c in clients.items():
        server.receive_advertise(u, c.advertise())
    with pytest.raises(InvalidMessage, match="threshold above half"):
        clients[0].share_keys(server.keys_messages()[0])


# ---------------------------------------------------------------- attack 2: two survivor lists

def _split_views(signed: bool, threshold: int) -> tuple[np.ndarray, np.ndarray | None, list[int]]:
    """Five clients; all send their masked input.  The server tells clients {0, 1, 2} that all
    five survived (they reveal shares of client 0's self-mask seed) and clients {3, 4} that
    client 0 dropped (they would reveal shares of its mask key); with both it reads client 0's
    input.  Returns (client 0's input, what the server read or ``None``, the clients that refused)."""
    ids = list(range(5))
    cfg = SecAggConfig(length=4, threshold=threshold, round_id=8, signed=signed)
    inputs = _inputs(ids, 4, 1, 7)
    rnd = Round(cfg, inputs)
    rnd.play(until="masked")  # every client's masked input, none given to the server
    clients, masked = rnd.clients, rnd.masked
    full = messages.frame("survivors", cfg.round_id, messages.SERVER, messages.ids_bytes(ids))
    less = messages.frame("survivors", cfg.round_id, messages.SERVER, messages.ids_bytes(ids[1:]))
    view = {u: full if u < 3 else less for u in ids}
    refused: list[int] = []
    unmask: dict[int, bytes] = {}
    if signed:
        sigs = {u: clients[u].consistency(view[u])[H:] for u in ids}
        # the server forwards to each client the signatures of the members of the list it saw;
        # the {3, 4} side's list has only two signatures over it: 1 and 2 signed the other list
        for u in ids:
            recs = [v.to_bytes(4, "little") + sigs[v] for v in (ids[:3] if u < 3 else ids[1:])]
            fwd = messages.frame("signatures", cfg.round_id, messages.SERVER, len(recs).to_bytes(4, "little"), *recs)
            try:
                unmask[u] = clients[u].unmask(fwd)
            except InvalidMessage as exc:
                assert "did not sign the survivor list" in str(exc) and "deviated" in str(exc)
                refused.append(u)
    else:
        unmask = {u: clients[u].unmask(view[u]) for u in ids}

    def shares(u: int, part: int) -> dict[int, int]:
        body, pos, out = unmask[u][H:], 0, {}
        for p in range(2):
            count = struct.unpack_from("<I", body, pos)[0]
            pos += 4
            for _ in range(count):
                v = struct.unpack_from("<I", body, pos)[0]
                if p == part:
                    out[v] = int.from_bytes(body[pos + 4 : pos + 4 + shamir.SHARE_BYTES], "little")
                pos += 4 + shamir.SHARE_BYTES
        return out

    sk_from = [u for u in unmask if 0 in shares(u, 0)]
    b_from = [u for u in unmask if 0 in shares(u, 1)]
    if len(sk_from) < threshold or len(b_from) < threshold:
        return inputs[0][:, 0], None, refused
    s_sk = shamir.combine([u + 1 for u in sk_from[:threshold]], [shares(u, 0)[0] for u in sk_from[:threshold]],
                          threshold)
    b = shamir.combine([u + 1 for u in b_from[:threshold]], [shares(u, 1)[0] for u in b_from[:threshold]],
                       threshold)
    y = np.frombuffer(masked[0][H:], "<u4")
    read = y - mask_rows(b.to_bytes(SEED_BYTES, "little"), np.arange(4), 1)[:, 0]
    for v in ids[1:]:
        seed = keys.agree(s_sk.to_bytes(32, "little"), rnd.server._keys[v][1], keys.MASK, cfg.round_id, (0, v))
        read = read - mask_rows(seed, np.arange(4), 1)[:, 0]
    return inputs[0][:, 0], read, refused


def test_attack_two_survivor_lists_read_an_input_in_an_unsigned_round_below_a_majority() -> None:
    x, read, refused = _split_views(signed=False, threshold=2)
    assert read is not None and np.array_equal(read, x) and not refused


def test_attack_two_survivor_lists_are_caught_by_the_consistency_check() -> None:
    x, read, refused = _split_views(signed=True, threshold=3)
    assert read is None
    assert refused == [3, 4]  # they saw the signatures of 0, 1, 2 over another list: the server is caught


def test_the_consistency_check_needs_threshold_signatures_of_the_same_list() -> None:
    cfg = SecAggConfig(length=2, threshold=2, round_id=5, signed=True)
    tr = run_round(cfg, _inputs([0, 1, 2], 2, 1, 3), record=True)
    sig_msgs = [m for stage, src, dst, m in tr.messages if stage == "ConsistencyCheck" and src == -1]
    assert len(sig_msgs) == 3
    # a client given only one signature (its own) refuses
    rnd = Round(cfg, {u: np.zeros(2, np.uint32) for u in range(3)})
    rnd.play(until="consistency")
    own = rnd.consistency[0][H:]
    one = messages.frame("signatures", cfg.round_id, messages.SERVER, (1).to_bytes(4, "little"),
                         (0).to_bytes(4, "little") + own)
    with pytest.raises(InvalidMessage, match="fewer than the threshold"):
        rnd.clients[0].unmask(one)


@pytest.mark.parametrize("sparse", [False, True])
def test_signed_server_messages_fit_the_longest_honest_answer(sparse: bool) -> None:
    from secemb.secagg.limits import longest_server_message

    cfg = SecAggConfig(length=6, threshold=3, width=2, round_id=2, sparse=sparse, signed=True)
    rows = {u: np.arange(6) for u in range(4)} if sparse else None  # every client holds every row
    tr = run_round(cfg, _inputs(list(range(4)), 6, 2, 9), rows=rows, record=True)
    kinds = {"AdvertiseKeys": "keys", "ShareKeys": "relayed", "MaskedInputCollection": "survivors",
             "ConsistencyCheck": "signatures"}
    seen = {kinds[stage]: len(m) for stage, src, _, m in tr.messages if src == -1}
    assert seen == {k: longest_server_message(cfg, 4, k) for k in kinds.values()}  # all rows, all clients: equal
    # by hand: keys 32 + 4 + 4 (4 + 64 + 32 + 120 + 64 [+ 1: a bitmap over the 6 candidate rows]);
    # relayed 32 + 4 + 3 (4 + 90 + 2 x 16: the two share commitments, session 24; no row data in the
    # shares); signatures 32 + 4 + 4 x 68
    assert seen["keys"] == (1176 if sparse else 1172) and seen["signatures"] == 308
    assert seen["relayed"] == 414


def test_public_rows_are_masked_with_every_peer_and_only_private_rows_are_in_the_signed_row_sets() -> None:
    # rows 5, 6, 7 are every client's (a public rule: SFSL's dense rows); the row sets are bitmaps over rows 0-4
    rows = {0: [0, 1, 5, 6, 7], 1: [1, 2, 5, 6, 7], 2: [3, 5, 6, 7]}
    cfg = SecAggConfig(length=8, threshold=2, width=2, round_id=6, sparse=True, signed=True, public_from=5)
    g = np.random.default_rng(4)
    inputs = {u: g.integers(0, 2**32, (len(r), 2), dtype=np.uint64).astype(np.uint32) for u, r in rows.items()}
    tr = run_round(cfg, inputs, rows={u: np.array(r) for u, r in rows.items()}, record=True)
    expected = np.zeros((8, 2), np.uint64)
    for u, r in rows.items():
        expected[r] += inputs[u]
    assert np.array_equal(tr.total, (expected % 2**32).astype(np.uint32))
    # the shares carry no row data: 2 records of id + 90-byte ciphertext + two 16-byte share commitments,
    # then the commitments to the sender's own two shares
    shares0 = next(m for stage, src, _, m in tr.messages if stage == "ShareKeys" and src == 0)
    assert len(shares0) == H + 4 + 2 * (4 + 90 + 32) + 32
    # one key list for everyone, each entry id, keys, commitment, certificate, signature, then 1 byte:
    # the bitmap over rows 0-4
    lists = {m for stage, src, _, m in tr.messages if stage == "AdvertiseKeys" and src == -1}
    assert len(lists) == 1
    body = next(iter(lists))[H:]
    assert len(body) == 4 + 3 * (4 + 64 + 216 + 1)
    assert [body[4 + (u + 1) * 285 - 1] for u in range(3)] == [0b00011, 0b00110, 0b01000]
    with pytest.raises(InvalidParameters, match="every row from 5 on"):
        SecAggClient(0, cfg, identity=Roster.generate().enroll(0)).advertise(np.array([0, 5, 6]))
    with pytest.raises(InvalidParameters, match="public_from"):
        SecAggConfig(length=8, threshold=2, public_from=5)  # not sparse


# ---------------------------------------------------------------- candidate rows and signed row sets

CANDIDATES = (1, 3, 4, 9)  # of the private rows 0-9; rows 10, 11 public


def _cand_round(cfg: SecAggConfig, rows: dict[int, list[int]]
                ) -> tuple[dict[int, SecAggClient], SecAggServer, dict[int, bytes]]:
    """Clients advertise ``rows`` to a server of ``cfg``; its key lists."""
    roster = Roster.generate()
    clients = {u: SecAggClient(u, cfg, identity=roster.enroll(u)) for u in rows}
    server = SecAggServer(cfg, pin=roster.pin)
    for u, c in clients.items():
        server.receive_advertise(u, c.advertise(np.array(rows[u])))
    return clients, server, server.keys_messages()


def _cand_config(candidates: tuple[int, ...] | None = CANDIDATES) -> SecAggConfig:
    return SecAggConfig(length=12, threshold=2, width=1, round_id=8, sparse=True, signed=True, public_from=10,
                        candidates=candidates)


def test_a_round_with_candidate_rows_sums_each_row_over_its_holders() -> None:
    rows = {0: [1, 3, 10, 11], 1: [3, 9, 10, 11], 2: [4, 10, 11]}
    cfg = _cand_config()
    inputs = {u: np.arange(1, len(r) + 1, dtype=np.uint32) * (u + 1) for u, r in rows.items()}
    tr = run_round(cfg, inputs, rows={u: np.array(r) for u, r in rows.items()}, record=True)
    expected = np.zeros(12, np.uint64)
    for u, r in rows.items():
        expected[r] += inputs[u]
    assert np.array_equal(tr.total[:, 0], expected.astype(np.uint32))
    # a key-list entry: id, keys, commitment, certificate, signature, 1 bitmap byte over the 4 candidates
    keys0 = next(m for stage, src, dst, m in tr.messages if stage == "AdvertiseKeys" and dst == 0)
    assert len(keys0) == H + 4 + 3 * (4 + 64 + 216 + 1)


def test_rows_outside_the_candidates_are_refused_by_the_client_and_the_server() -> None:
    cfg = _cand_config()
    roster = Roster.generate()
    with pytest.raises(InvalidParameters, match="candidate rows"):
        SecAggClient(0, cfg, identity=roster.enroll(0)).advertise(np.array([1, 2, 10, 11]))  # 2: no candidate
    # a device built without the candidates sends rows 1, 2: the server refuses before anything is kept
    other = SecAggClient(0, _cand_config(None), identity=roster.enroll(0)).advertise(np.array([1, 2, 10, 11]))
    server = SecAggServer(cfg, pin=roster.pin)
    with pytest.raises(InvalidMessage, match="outside the round's candidate rows"):
        server.receive_advertise(0, other)
    genuine = SecAggClient(0, cfg, identity=roster.enroll(0))
    server.receive_advertise(0, genuine.advertise(np.array([1, 3, 10, 11])))  # taken after the refused one
    with pytest.raises(InvalidParameters, match="strictly increasing rows in"):
        _cand_config((3, 1))
    with pytest.raises(InvalidParameters, match="strictly increasing rows in"):
        _cand_config((1, 10))  # row 10 is public


def _flip(keys_msg: bytes, entry: int, offset: int) -> bytes:
    """``keys_msg`` with bit 0 of byte ``offset`` of key-list entry ``entry`` (after its id) flipped."""
    body = bytearray(keys_msg[H:])
    body[4 + entry * (4 + 64 + 216 + 1) + 4 + offset] ^= 1
    return keys_msg[:H] + bytes(body)


@pytest.mark.parametrize("entry", [0, 2])
def test_an_altered_row_set_in_the_key_list_is_refused(entry: int) -> None:
    rows = {0: [1, 3, 10, 11], 1: [3, 9, 10, 11], 2: [4, 10, 11]}
    clients, _, lists = _cand_round(_cand_config(), rows)
    # the server marks row 1 (bit 0) in the row set of client 2 (entry 2) for client 1, or changes client 0's own
    altered = _flip(lists[entry], entry, 64 + 216)
    match = "another row set under this client's id" if entry == 0 else "device 2 .* did not sign"
    with pytest.raises(InvalidMessage, match=match):
        clients[entry if entry == 0 else 1].share_keys(altered)
    clients[2].share_keys(lists[2])  # the genuine list is taken


def test_devices_given_different_candidate_lists_refuse_each_others_signatures() -> None:
    roster = Roster.generate()
    a = SecAggClient(0, _cand_config(), identity=roster.enroll(0))
    b = SecAggClient(1, _cand_config((1, 3, 4, 8)), identity=roster.enroll(1))  # the same rows, other candidates
    server = SecAggServer(_cand_config(), pin=roster.pin)
    server.receive_advertise(0, a.advertise(np.array([1, 3, 10, 11])))
    with pytest.raises(InvalidMessage, match="advertise of client 1"):
        server.receive_advertise(1, b.advertise(np.array([1, 3, 10, 11])))  # the server's own check
    # a server that relays it anyway, each row set as the device signed it (bitmap 0b0011 under both lists), is
    # caught by both devices: the round's header commits to the candidates
    a2 = SecAggClient(0, _cand_config(), identity=roster.enroll(0))
    b2 = SecAggClient(1, _cand_config((1, 3, 4, 8)), identity=roster.enroll(1))
    ads = {0: a2.advertise(np.array([1, 3, 10, 11])), 1: b2.advertise(np.array([1, 3, 10, 11]))}
    relayed = b"".join(u.to_bytes(4, "little") + ad[H : H + 64 + 216] + bytes([0b0011]) for u, ad in ads.items())
    lst = messages.frame("keys", 8, messages.SERVER, (2).to_bytes(4, "little"), relayed)
    with pytest.raises(InvalidMessage, match="device 1 .* did not sign"):
        a2.share_keys(lst)
    with pytest.raises(InvalidMessage, match="device 0 .* did not sign"):
        b2.share_keys(lst)


def test_the_server_finds_and_leaves_out_one_clients_wrong_unmask_share() -> None:
    """Finding F3 (session 22): five clients (threshold 3, so two spare shares); client 1 sends a
    wrong share of client 4's self-mask seed, in range (+1).  The server opens the exact sum
    (numpy's), names client 1 and leaves its shares out (``shamir.combine_robust``)."""
    cfg = SecAggConfig(length=6, threshold=3, width=2, round_id=9)
    inputs = {u: ((np.arange(12, dtype=np.uint32) * np.uint32(u + 3)) ^ np.uint32((0x9E3779B9 * u) % 2**32))
              .reshape(6, 2) for u in range(5)}
    rnd = Round(cfg, inputs)
    # client 1's share of client 4's seed (its last): + 1, a field element still
    rnd.play(unmask=lambda u, msg: move_unmask_share(msg, 1, 4, 1) if u == 1 else msg)
    server = rnd.server
    total = server.result()
    want = np.zeros((6, 2), np.uint64)
    for x in inputs.values():
        want += x
    assert np.array_equal(total, (want % 2**32).astype(np.uint32))
    assert server.cheaters == [1]
