"""Session 22 (helper D, red team): what a deployed SFSL device takes from the server's round
document, against a deviating server (the secure-aggregation attacks themselves are in
``test_session22_redteam_secagg.py``).

A deployed device (the ``party`` of :class:`secemb.protocols.sfsl.protocol.SFSLProtocol`'s
device) sizes both secure aggregations from the document's ``users``: ``n = len(users)``,
threshold ``n // 2 + 1``, and the longest answer it reads of each stage.  It checks ``n >= 2``
and the deployment's training settings, whose ``max_weight`` must fit ``n`` devices
(``n * max_weight * (levels - 1) < 2^32``); it does not check ``n`` against the deployment's
``users_per_round``.

(Session 22, helper A: R2 and R5 are fixed -- a device takes part only in rounds of exactly its
deployment's ``users_per_round`` devices; the tests below show the refusals.)

* Finding R2 at the deployment level: a document of 2 users gave a threshold of 2, so the server
  could run a round's devices as pairs (each pair's sum is over 2 devices; the secagg test file reads
  one device's real goods from three PSU rounds of pairs).
* Finding R5 (bounded work): the only upper bound on ``n`` is the settings' fit -- with this
  deployment's ``max_weight`` 1310 and 32,768 levels, 100 users (33 times its round of 3).  The
  secure sum's ShareKeys answer grows as ``(n - 1) x (4 + 90 + 4 + 8 x (goods + categories))``
  bytes (every peer's tags of at most every goods and category row), and a device reads up to 4
  times that plus 64 MiB (:func:`secemb.transport.limits.answer_limit_for`).  At taobao's sizes
  (143,534 goods, 4,815 categories: 1.19 MB a peer) a round announced with 100 users lets a
  deviating server make each device read about 470 MB, against 90 MB at 20 users; before the
  row tags the largest answer grew as ``n x length / 8`` (the bitmaps).  (Session 22, helper G:
  the row tags are gone; the largest secure-sum answer is the key list, ``n x (284 +
  ceil(|candidates| / 8))`` bytes -- 252 before session 23's seed commitments -- with the
  candidates at most every goods and category row, and
  ShareKeys' is ``(n - 1) x 94``.)
"""

from __future__ import annotations

import pytest

from secemb.errors import InvalidMessage, ProtocolError
from secemb.protocols.sfsl.staged import sum_config
from secemb.secagg.client import SHARE_CIPHERTEXT_BYTES
from secemb.secagg.limits import longest_server_message

#: taobao-mini's goods and categories (the rows that may be candidates of the secure sum)
GOODS, CATEGORIES = 2000, 60
H = 32  # framing header bytes


def test_r2_fixed_an_sfsl_device_refuses_a_pair_for_a_round(sfsl) -> None:
    """Finding R2's fix (session 22, helper A): a device takes part only in rounds of its
    deployment's ``users_per_round`` devices, so the threshold (2 of 3 here) is not the server's
    choice; before it, a document of users [0, 1] gave a round of a pair, threshold 2."""
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    assert len(doc["users"]) == 3  # the deployment's users_per_round
    device = sfsl.make_device(0)
    assert device.party(doc).psu_config.threshold == 2
    with pytest.raises(InvalidMessage, match="a round of 2 users, not the deployment's 3"):
        device.party(doc | {"users": [0, 1]})


def test_r5_fixed_an_sfsl_device_reads_answers_sized_for_its_deployments_round(sfsl) -> None:
    """Finding R5's fix (session 22, helper A): the answers a device reads are sized for its
    deployment's round (3 devices); a document naming 100 users (whose secure-sum ShareKeys answer
    bound was 1,641,258 bytes) is refused before any answer is read."""
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    device = sfsl.make_device(0)
    party = device.party(doc)
    # id, ciphertext, two 16-byte share commitments (session 24) per peer
    assert party.answer_bytes("psu-shares") == H + 4 + 2 * (4 + SHARE_CIPHERTEXT_BYTES + 32)
    with pytest.raises(ProtocolError, match="before the union"):  # the sum's candidate rows are the union's
        party.answer_bytes("sum-advertise")
    # the secure sum's answers at 3 devices with every goods and category row a candidate (the most there are)
    cfg = sum_config(sfsl.make_server().node.server.space, 2, 1, tuple(range(GOODS + CATEGORIES)))
    assert longest_server_message(cfg, 3, "relayed") == H + 4 + 2 * (4 + SHARE_CIPHERTEXT_BYTES + 32)
    assert longest_server_message(cfg, 3, "keys") == H + 4 + 3 * (4 + 64 + 32 + 120 + 64 + 258)  # 2060 bits: 258 bytes
    for n in (100, 101):
        with pytest.raises(InvalidMessage, match=f"a round of {n} users, not the deployment's 3"):
            device.party(doc | {"users": list(range(n))})


def test_r5_fixed_an_sfsl_device_refuses_more_users_than_its_deployments_round(sfsl) -> None:
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    with pytest.raises(InvalidMessage, match="not an SFSL round document"):
        sfsl.make_device(0).party(doc | {"users": [0, 1, 2, 3]})
