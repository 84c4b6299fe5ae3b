"""Session 44: server 1's upload receipts (no relay; S43-R2 without relay).

Where devices upload to both servers, server 1 answers each upload it takes with an ``upload_receipt``
(:mod:`secemb.round.messages`: ``u64 user || HMAC-SHA256(K, label || u64 round || u64 user)``, ``K`` derived
from the servers' peer secret), the device appends it to its upload to server 0, and server 0 takes no upload
without a valid one and holds server 1 to it at the close (``uploads_misreported``:
``tests/server/test_s43_uploads_misreported.py``).  Here: the receipt's bytes against an HMAC computed in the
test with :mod:`hmac`; server 0's refusals of forged, replayed, truncated or missing receipts (400, nothing
kept: the same device's genuine upload is taken afterwards); the device's refusal of a server 1 that answers
without a receipt (nothing sent to server 0); the bytes a receipt adds, as ``len()`` of what crossed the
in-process transport; and over HTTP, server 1's answer and server 0's 400.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from sdk_round import trained  # type: ignore[import-not-found]  # noqa: E402
from test_s42_quorum_agreed import _RATINGS, _USERS, _cluster, _Cluster, make  # type: ignore[import-not-found]  # noqa: E402, F401

from secemb.errors import InvalidMessage  # noqa: E402
from secemb.protocols.stages import UPLOAD  # noqa: E402
from secemb.round import messages  # noqa: E402
from secemb.sim.local import LocalServerLink  # noqa: E402

LABEL = b"secemb/upload-receipt/v1"


def _expected_receipt(peer_secret: bytes, round_id: int, user: int) -> bytes:
    """The RECEIPT as docs/wire-format.md specifies it, computed here with :mod:`hmac` and :mod:`struct`
    (the header's 24 bytes taken from the code's own framing, checked apart in tests/protocols)."""
    key = hmac.new(peer_secret, LABEL + b" key", hashlib.sha256).digest()
    mac = hmac.new(key, LABEL + struct.pack("<QQ", round_id, user), hashlib.sha256).digest()
    return struct.pack("<Q", user) + mac


def test_the_receipt_is_the_documented_hmac_and_names_one_user_round_and_deployment() -> None:
    peer = bytes(range(32))
    key = messages.receipt_key(peer)
    got = messages.encode_receipt(key, 7, 12)
    assert len(got) == messages.RECEIPT_BYTES == 72
    assert got[-40:] == _expected_receipt(peer, 7, 12)
    messages.check_receipt(key, got, round_id=7, user=12)
    for kwargs in ({"round_id": 8, "user": 12}, {"round_id": 7, "user": 13}):
        with pytest.raises(InvalidMessage):
            messages.check_receipt(key, got, **kwargs)
    with pytest.raises(InvalidMessage):  # another deployment's peer secret
        messages.check_receipt(messages.receipt_key(b"\1" * 32), got, round_id=7, user=12)
    flipped = bytearray(got)
    flipped[-1] ^= 1
    for bad in (bytes(flipped), got[:-1], got + b"\0", b"", bytes(72)):
        with pytest.raises(InvalidMessage):
            messages.check_receipt(key, bad, round_id=7, user=12)
    # a receipt naming user 12 with user 13's MAC, and the reverse: each refused
    other = messages.encode_receipt(key, 7, 13)
    with pytest.raises(InvalidMessage):
        messages.check_receipt(key, got[:-32] + other[-32:], round_id=7, user=12)
    with pytest.raises(InvalidMessage):
        messages.check_receipt(key, other[:-32] + got[-32:], round_id=7, user=13)


def _trained(c: _Cluster, u: int):  # noqa: ANN202 - a RoundSession
    client = c.servers.servers().device(u)
    return trained(client, client.round_info(), *_RATINGS.of(u))


@pytest.mark.parametrize("forgery", ["none", "random", "another user's", "another round's", "another deployment's",
                                     "truncated", "server 0's own format"])
def test_server_0_refuses_an_upload_without_server_1s_receipt_and_keeps_nothing(make: list[_Cluster],  # noqa: F811
                                                                                forgery: str) -> None:
    """A device (malicious) sends server 0 its upload with a missing or forged receipt: 400-class
    ``InvalidMessage`` naming server 1's receipt, nothing absorbed, nothing counted or acknowledged; then the
    same device's genuine upload (with the receipt server 1 gave it) is taken.  (On session 43's code the
    bare upload was taken: a device could reach server 0 alone.)"""
    c = _cluster(make, relay=False, bound=False, quorum=8)
    u, v = _USERS[0], _USERS[1]
    session = _trained(c, u)
    msg0, msg1 = session._uploads[0], session._uploads[1]  # noqa: SLF001 - the device's own messages
    receipt = session.client.links[1].upload(c.r, msg1)
    assert isinstance(receipt, bytes) and receipt[-40:] == _expected_receipt(c.leader.cfg.peer_secret, c.r, u)
    key = messages.receipt_key(c.leader.cfg.peer_secret)
    bad = {"none": b"", "random": os.urandom(72), "another user's": messages.encode_receipt(key, c.r, v),
           "another round's": messages.encode_receipt(key, c.r + 1, u),
           "another deployment's": messages.encode_receipt(messages.receipt_key(b"x" * 32), c.r, u),
           "truncated": receipt[:-1], "server 0's own format": receipt[:-40] + bytes(40)}[forgery]
    with pytest.raises(InvalidMessage, match="server 1's receipt"):
        session.client.links[0].upload(c.r, msg0 + bad)
    rnd = c.leader.round
    assert u not in rnd.uploaded and u not in rnd.acknowledged and u not in rnd.counted()
    assert session.client.links[0].upload(c.r, msg0 + receipt) is None
    assert u in rnd.uploaded and rnd.acknowledged == {u}


class _Withholding(LocalServerLink):
    """Server 1's link answering an upload with ``answer`` instead of its receipt (a deviating server 1)."""

    answer: bytes | None = None

    def upload(self, round_id: int, body: bytes) -> bytes | None:
        super().upload(round_id, body)
        return self.answer


@pytest.mark.parametrize("answer", [None, b"", b"\0" * 72, b"\0" * 73], ids=["no answer", "empty", "zeros", "long"])
def test_a_device_sends_server_0_nothing_when_server_1_gives_no_receipt(make: list[_Cluster],  # noqa: F811
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        answer: bytes | None) -> None:
    """Server 1 takes the upload but answers without a well-formed receipt: the device's upload fails with
    ``InvalidMessage`` naming server 1, and it sends server 0 nothing (a visible dropout, not a silent one)."""
    c = _cluster(make, relay=False, bound=False, quorum=8)
    u = _USERS[0]
    session = _trained(c, u)
    link = session.client.links[1]
    assert isinstance(link, LocalServerLink)
    monkeypatch.setattr(_Withholding, "answer", answer)
    link.__class__ = _Withholding
    with pytest.raises(InvalidMessage, match="server 1 answered the upload"):
        session.upload()
    assert u in c.servers.nodes[1].round.uploaded and u not in c.leader.round.uploaded


def test_the_receipt_adds_72_bytes_each_way_on_the_transport(make: list[_Cluster]) -> None:  # noqa: F811
    """``len()`` of what crossed the in-process transport for one device's upload stage: its two uploads, the
    second 72 bytes longer than the protocol's message (the receipt it carries), and server 1's 72-byte answer."""
    c = _cluster(make, relay=False, bound=False, quorum=8)
    u = _USERS[0]
    session = _trained(c, u)
    msg0, msg1 = session._uploads[0], session._uploads[1]  # noqa: SLF001
    tp = c.servers.tp

    def crossed(src: str, dst: str) -> tuple[int, int]:
        return (tp.total_messages(stage=UPLOAD, src=src, dst=dst, user=u),
                tp.total_bytes(stage=UPLOAD, src=src, dst=dst, user=u))

    me = f"user:{u}"
    assert [crossed(me, "server0"), crossed(me, "server1"), crossed("server1", me)] == [(0, 0)] * 3
    up0, down0 = session.upload_bytes, session.download_bytes
    session.upload()
    assert crossed(me, "server1") == (1, len(msg1))
    assert crossed("server1", me) == (1, 72)
    assert crossed(me, "server0") == (1, len(msg0) + 72)
    assert crossed("server0", me) == (0, 0)
    assert session.upload_bytes - up0 == len(msg0) + len(msg1) + 72
    assert session.download_bytes - down0 == 72


def test_with_relay_there_is_no_receipt(make: list[_Cluster]) -> None:  # noqa: F811
    """With relay the device uploads to server 0 alone (server 0 forwards): no receipt, the upload unchanged."""
    c = _cluster(make, relay=True, bound=False, quorum=8)
    assert c.leader.receipts is None and c.servers.nodes[1].receipts is None
    session = _trained(c, _USERS[0])
    assert session.plan.device_sends(UPLOAD) == (0,)
    up, down, msg0 = session.upload_bytes, session.download_bytes, session._uploads[0]  # noqa: SLF001
    session.upload()
    assert (session.upload_bytes - up, session.download_bytes - down) == (len(msg0), 0)
    assert _USERS[0] in c.leader.round.acknowledged  # the forward server 1 took


def test_over_http_server_1_answers_with_its_receipt_and_server_0_refuses_an_upload_without_one() -> None:
    """Two ``secemb serve`` processes on 127.0.0.1, no relay: server 1's upload route answers 200 with the
    72-byte receipt (the documented HMAC of the round and user under the deployment's peer secret); server 0
    answers an upload without one 400 and takes the same upload with it (204)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pytest.importorskip("httpx")
    from net_helpers import cluster_for, setup, small_data

    from secemb.client.device import DeviceClient, RoundInfo
    from secemb.data import by_user
    from secemb.protocols.secemb import SecEmbProtocol
    from secemb.transport.errors import RemoteError

    tr, _ = small_data()
    ratings = by_user(tr)
    model, _, config = setup("secemb", "cuckoo", False, m_prime=8, epochs=1, users_per_round=8)
    proto = SecEmbProtocol(layout="cuckoo", relay=False, users_per_round=8)
    users = [u for u in range(tr.num_users) if ratings.of(u)[0].size][:4]
    with cluster_for(model, proto, tr, config, min_users=2) as cluster:
        admin = cluster.admin(0, timeout=30.0)
        info = RoundInfo.from_doc(admin.post_json("/v1/admin/rounds", {"participants": users, "deadline_s": 120}))
        u = users[0]
        client = DeviceClient(u, cluster.url(0), cluster.url(1), *cluster.device_keys(u), timeout=30.0,
                              tls=cluster.tls, min_users=cluster.min_users)
        session = trained(client, info, *ratings.of(u))
        msg0, msg1 = session._uploads[0], session._uploads[1]  # noqa: SLF001
        receipt = client.links[1].upload(info.round_id, msg1)
        assert isinstance(receipt, bytes) and len(receipt) == 72
        assert receipt[-40:] == _expected_receipt(cluster.peer_secret, info.round_id, u)
        with pytest.raises(RemoteError) as refused:
            client.links[0].upload(info.round_id, msg0)
        assert refused.value.status == 400 and "receipt" in refused.value.detail
        assert client.links[0].upload(info.round_id, msg0 + receipt) is None
        client.close()
