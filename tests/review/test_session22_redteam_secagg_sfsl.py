"""Session 22 (helper D, red team): what a deployed SFSL device takes from the server's round
document, against a deviating server (the secure-aggregation attacks themselves are in
``test_session22_redteam_secagg.py``).

A deployed device (the ``party`` of :class:`secemb.protocols.sfsl.protocol.SFSLProtocol`'s
device) sizes both secure aggregations from the document's ``users``: ``n = len(users)``,
threshold ``n // 2 + 1``, and the longest answer it reads of each stage.  It checks ``n >= 2``
and the deployment's training settings, whose ``max_weight`` must fit ``n`` devices
(``n * max_weight * (levels - 1) < 2^32``); it does not check ``n`` against the deployment's
``users_per_round``.

* Finding R2 at the deployment level: a document of 2 users gives a threshold of 2, so the server
  may run a round's devices as pairs (each pair's sum is over 2 devices; the secagg test file reads
  one device's real goods from three PSU rounds of pairs).
* Finding R5 (bounded work): the only upper bound on ``n`` is the settings' fit -- with this
  deployment's ``max_weight`` 1310 and 32,768 levels, 100 users (33 times its round of 3).  The
  secure sum's ShareKeys answer grows as ``(n - 1) x (4 + 90 + 4 + 8 x (goods + categories))``
  bytes (every peer's tags of at most every goods and category row), and a device reads up to 4
  times that plus 64 MiB (:func:`secemb.transport.limits.answer_limit_for`).  At taobao's sizes
  (143,534 goods, 4,815 categories: 1.19 MB a peer) a round announced with 100 users lets a
  deviating server make each device read about 470 MB, against 90 MB at 20 users; before the
  row tags the largest answer grew as ``n x length / 8`` (the bitmaps).
"""

from __future__ import annotations

import pytest

from secemb.errors import InvalidMessage
from secemb.secagg.client import SHARE_CIPHERTEXT_BYTES

#: taobao-mini's goods and categories (the row space's tagged rows)
GOODS, CATEGORIES = 2000, 60
H = 32  # framing header bytes


def test_finding_r2_an_sfsl_device_takes_a_pair_for_a_round(sfsl) -> None:
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    assert len(doc["users"]) == 3  # the deployment's users_per_round
    device = sfsl.make_device(0)
    pair = device.party(doc | {"users": [0, 1]})
    assert pair.psu_config.threshold == pair.sum_config.threshold == 2  # sums over 2 devices


def test_finding_r5_an_sfsl_device_reads_answers_sized_for_the_users_the_server_names(sfsl) -> None:
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    device = sfsl.make_device(0)
    per_peer = 4 + SHARE_CIPHERTEXT_BYTES + 4 + 8 * (GOODS + CATEGORIES)  # id, ciphertext, tag count, tags
    assert device.party(doc).answer_bytes("sum-shares") == H + 4 + 2 * per_peer
    crowd = device.party(doc | {"users": list(range(100))})
    assert crowd.answer_bytes("sum-shares") == H + 4 + 99 * per_peer == 1_641_258
    with pytest.raises(InvalidMessage, match="max_weight"):  # the settings' fit: 1310 x 101 x 32767 >= 2^32
        device.party(doc | {"users": list(range(101))})


@pytest.mark.xfail(strict=True, reason="finding R5, to fix in secemb/protocols/sfsl/protocol.py (the device's round "
                   "document check): refuse more users than the deployment's users_per_round, which the device knows")
def test_r5_fixed_an_sfsl_device_refuses_more_users_than_its_deployments_round(sfsl) -> None:
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    with pytest.raises(InvalidMessage, match="not an SFSL round document"):
        sfsl.make_device(0).party(doc | {"users": [0, 1, 2, 3]})
