"""Issue 37: a SecEmb device batch's messages and rows are the known bytes -- the retrieval
requests, the rows read back and the uploads of a fixed round of four devices (fixed randomness
and table) for every layout, relay and verification setting, as the device code made them
before its batching was reworked (session 18: requests written as rows of one array, replies
opened through ``Opener``, words converted over the gradient rows).  Any change of these bytes is
a wire-format change."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest

from secemb.protocols.placement import place
from secemb.protocols.secemb.user import SecEmbUser
from secemb.randomness import CtrDrbg

from round_setup import begin

_USERS = [3, 8, 21, 30]


def _round(layout: str, relay: bool, verify: bool) -> tuple[str, str, str]:
    """SHA-256 of the devices' requests, of their rows and of their uploads, joined in order."""
    # the servers' sketch key is round_setup's fixed one (verified uploads: the replies' sketch seeds come from it)
    proto, cfg, _, _, s0, s1 = begin(layout=layout, relay=relay, verify=verify, round_id=6, num_items=120, width=3,
                                     dense_size=2, m_prime=5, seed=4)
    users = [proto.make_user(cfg, _rng=CtrDrbg(b"device/%d" % uid)) for uid in _USERS]
    slots = [place(cfg, np.array([uid, uid + 40, uid + 80], np.int64), np.random.default_rng(uid)).indices
             for uid in _USERS]
    requests = SecEmbUser.retrieval_requests(users, slots, _rng=CtrDrbg(b"batch"))
    replies: list[tuple[bytes, bytes | None]] = []
    for uid, got in zip(_USERS, requests, strict=True):
        assert not isinstance(got, Exception)
        r0, r1 = got
        if relay:
            assert s1.handle_retrieval(uid, r1) is None
            masked = s1.relay_retrieval(uid, s0.handle_retrieval(uid, r0))  # type: ignore[attr-defined]
            replies.append((s0.complete_retrieval(uid, masked), None))  # type: ignore[attr-defined]
        else:
            replies.append((s0.handle_retrieval(uid, r0), s1.handle_retrieval(uid, r1)))  # type: ignore[arg-type]
    rows = SecEmbUser.retrieval_results(users, replies)
    grads: list[tuple[np.ndarray, np.ndarray]] = []
    for uid, row, s in zip(_USERS, rows, slots, strict=True):
        assert isinstance(row, np.ndarray)
        g = (row ^ np.uint32(uid)) * (s >= 0)[:, None].astype(cfg.dtype)  # an empty slot's row is zero
        grads.append((g.astype(cfg.dtype), np.arange(cfg.dense_size, dtype=cfg.dtype) + np.uint32(uid)))
    uploads = SecEmbUser.uploads(users, grads)

    def digest(parts: list[bytes | None]) -> str:
        return hashlib.sha256(b"".join(p or b"" for p in parts)).hexdigest()

    return (digest([m for r in requests for m in r]),  # type: ignore[union-attr]
            digest([r.tobytes() for r in rows]),  # type: ignore[union-attr]
            digest([m for u in uploads for m in u]))  # type: ignore[union-attr]


_SETTINGS = list(itertools.product(["full", "cuckoo"], [False, True], [False, True]))


#: _round of each setting as the device code of 10f829d (before the rework) computed it; the uploads with
#: relay re-pinned in session 22 for the GMAC upload tag (31c7597): byte for byte the 10f829d-era uploads
#: (as 51ad76d made them) but for each upload's last 16 bytes, the tag (tests/protocols/test_s22_relay_mac.py
#: checks the tag itself against AES-GCM called directly); the verified settings' requests and uploads re-pinned
#: in session 29 for the sketch check (issue 34): the requests without check words and, to server 1, with the
#: 16-byte sigma; the uploads with the sketch proof share (to server 0) and the binding tau (to server 1, or in
#: the relay's MAC'd words); the unverified settings' bytes and every setting's rows unchanged; the verified
#: uploads re-pinned again (session 29, helper B) when the sketch's coefficients r_x became blocks of an AES-CTR
#: stream (secemb.fss.sketch, random access): byte for byte the uploads before but for the proof share's last
#: elements (the gadget polynomial's, 6-8 a device here; the wire seeds' part, tau and the relay words unchanged);
#: the uploads with relay re-pinned in session 31 (helper M) when the upload's GMAC took its own sub-key of the
#: device's one-time relay key, HMAC-SHA256(k, b"secemb-relay-subkey-upload-gmac")[:16]: byte for byte the uploads
#: before but for each upload's 16-byte tag, each new tag checked against AES-GCM under that sub-key written out
#: (tests/review/test_session31_relay_subkeys.py checks the tag and the sub-keys themselves)
_KNOWN: dict[tuple[str, bool, bool], tuple[str, str, str]] = {
    ("full", False, False): ("3928dea158ec58c0bbbaf19b20e594258193ace42f7efcf7ad92f031cb1190c1",
                              "54568566ce6876856d50365cda9e04c3439ed213becb57ce4778593ea6292286",
                              "30a0d22aecddadb73481b8ba5fc2d41db00106b26696de2536e4a9b3245bd124"),
    ("full", False, True): ("c34e47369d2c2b2bc02ec8329c84e4b80e89d79b0a93a59f867a99f04da9b59a",
                             "54568566ce6876856d50365cda9e04c3439ed213becb57ce4778593ea6292286",
                             "4e080489ae29b0fdb2fbd6b19982e069d0a9c7ca359d540e2f2820fc0c0e0f97"),
    ("full", True, False): ("b10ddf30d4d1260f823683cd1ee61907984ef3c87ab02f98a3c1a6be28b36f2b",
                             "54568566ce6876856d50365cda9e04c3439ed213becb57ce4778593ea6292286",
                             "85a23115e22059eeccc417b427573ca5cdd45e91c8e93dc27caa01ce9fc6c77c"),
    ("full", True, True): ("ef2ae3100ca9e1b3b7d56ce5233dc0eb37e73ad755f87c523220e9ff5348bcc9",
                            "54568566ce6876856d50365cda9e04c3439ed213becb57ce4778593ea6292286",
                            "40123435c6514a29e250dcf70b0d5c8ed503334a46d4049d5abd508e0c06e424"),
    ("cuckoo", False, False): ("d359f9db455fb49e459a808ae884ca0e5dcdb9faa76500549040eda982803ac9",
                                "152de992de2e422185f2a984183b26003585ee77790d8feb7b689b1de891a140",
                                "a012ba3986517c29193f67f644c840de8917c6efba545e9018c53088f3111fe4"),
    ("cuckoo", False, True): ("e6b1721adf96593bbc476b18bbb22b962c54cb38b485277dd182661e94b59c08",
                               "152de992de2e422185f2a984183b26003585ee77790d8feb7b689b1de891a140",
                               "d0c428f05eb0de326fef3c2af90ff286ae599ebb7284ea527564f6f820845fd3"),
    ("cuckoo", True, False): ("3bfafcac1b8ea519ea4a2d9bffd9f3b4f8b4719031410698572c10dae81949da",
                               "152de992de2e422185f2a984183b26003585ee77790d8feb7b689b1de891a140",
                               "8a7c10eb875a3d775d59751bf94293fc4eaedb9f92ff961a8230eda700dadb30"),
    ("cuckoo", True, True): ("46bebd9a4b389eb409aa5fb8d6e56ab913dc9135eb10cd8afd133ccbd10c2687",
                              "152de992de2e422185f2a984183b26003585ee77790d8feb7b689b1de891a140",
                              "f10cb993c07d715540aae32a9c04d743faaa5b4961c21a8b18d7397e9163cf7a"),
}


@pytest.mark.parametrize(("layout", "relay", "verify"), _SETTINGS)
def test_device_messages_and_rows_are_the_known_bytes(layout: str, relay: bool, verify: bool) -> None:
    assert _round(layout, relay, verify) == _KNOWN[(layout, relay, verify)]


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_verified_requests_are_the_unverified_ones_with_sigma_to_server_1(layout: str) -> None:
    """Without relay the sketch check adds nothing to the keys (no check words): server 0 gets the
    unverified request's bytes, server 1 those followed by the device's 16-byte proof seed sigma
    (drawn after the keys from the same randomness)."""
    got = {}
    for verify in (False, True):
        proto, cfg, _, _, _, _ = begin(layout=layout, relay=False, verify=verify, round_id=6, num_items=120, width=3,
                                       dense_size=2, m_prime=5, seed=4)
        users = [proto.make_user(cfg, _rng=CtrDrbg(b"device/%d" % uid)) for uid in _USERS]
        slots = [place(cfg, np.array([uid, uid + 40, uid + 80], np.int64), np.random.default_rng(uid)).indices
                 for uid in _USERS]
        got[verify] = SecEmbUser.retrieval_requests(users, slots, _rng=CtrDrbg(b"batch"))
    hdr = 32  # the frame header (it names the body's length)
    for (a0, a1), (b0, b1) in zip(got[False], got[True], strict=True):  # type: ignore[misc]
        assert b0 == a0 and b1[hdr:-16] == a1[hdr:] and len(b1) == len(a1) + 16
    assert len({b1[-16:] for _, b1 in got[True]}) == len(_USERS)  # type: ignore[misc]  # each device's own sigma
