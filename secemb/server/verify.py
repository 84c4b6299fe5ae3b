"""The servers' verification step between upload and close (issue 34).

Server 0, closing a round, asks server 1 for its digests of the agreed users' uploads
(``POST /v1/peer/rounds/{r}/verify``, :meth:`~secemb.server.node.FollowerNode.peer_verify`)
and compares them with its own (:meth:`~secemb.protocols.base.ServerRole.upload_digests`):
a device whose digests differ is left out of the round like a dropout
(:meth:`~secemb.server.node.LeaderNode._verified`).  What the digests cover and why an honest
device's digests tell a server nothing: docs/security.md, "A malicious device: verified
uploads".  This module is the wire form of the digests and the comparison.
"""

from __future__ import annotations

import hmac
from typing import Any

from secemb.errors import InvalidMessage

__all__ = ["ABORT_WINDOW", "DIGEST_HEX", "MAX_ABORTS", "MAX_REJECTIONS", "decode_digests", "encode_digests", "rejected"]

#: hex characters of one digest (SHA-256)
DIGEST_HEX = 64
#: a device whose uploads failed verification in this many rounds is refused at the door (403 at
#: server 0's retrieval) until the operator clears the alarms
MAX_REJECTIONS = 3
#: (one server, issue 34, red team F's S26-F1; session 27: a rate) a device named for the abort of
#: this many of the last :data:`ABORT_WINDOW` rounds (``aborting_dropouts``: its dropout breached
#: ``min_row_holders``, or, red team G's S27-G2, the complaints against it alone left its secret short
#: at Unmasking; a suspicion, an honest dropout does the same) is refused at the door until enough of
#: them leave the window, or the operator clears it.  One device then aborts at most this
#: many of any ``ABORT_WINDOW + 1`` consecutive rounds (10/51, 19.6 %); an honest device at 5 %
#: random dropouts (aborting rounds at 2.5 % a round) is refused within 1,000 rounds with
#: probability below 1e-4 (docs/deployment.md, "Aborting dropouts", the numbers and the choice)
MAX_ABORTS = 10
#: the rounds :data:`MAX_ABORTS` counts over: the last this many the one-server server ran (committed
#: or aborted; an opening the node refused is no round)
ABORT_WINDOW = 50


def encode_digests(digests: dict[int, bytes]) -> dict[str, str]:
    """The JSON form of per-user digests: ``{"user id": "hex"}``."""
    return {str(u): d.hex() for u, d in sorted(digests.items())}


def decode_digests(doc: Any, include: list[int]) -> dict[int, bytes]:
    """Server 1's answer ``{"digests": {"user id": "hex"}}`` for the users ``include``,
    checked: exactly those users, each a 32-byte digest in lowercase hex (or none at all: a
    server without verification).

    Raises
    ------
    InvalidMessage: anything else (a peer's answer is input like any other).
    """
    got = doc.get("digests") if isinstance(doc, dict) else None
    if got == {}:  # the peer does not verify: nothing to compare (every device then differs)
        return {}
    if not isinstance(got, dict) or set(got) != {str(u) for u in include}:
        raise InvalidMessage("the peer's upload digests are not an object with exactly the agreed users")
    out: dict[int, bytes] = {}
    for key, value in got.items():
        if not (isinstance(value, str) and len(value) == DIGEST_HEX and value == value.lower()):
            raise InvalidMessage(f"the peer's upload digest of user {key[:20]} is not {DIGEST_HEX} lowercase hex")
        try:
            out[int(key)] = bytes.fromhex(value)
        except ValueError:
            raise InvalidMessage(f"the peer's upload digest of user {key[:20]} is not hex") from None
    return out


def rejected(mine: dict[int, bytes], theirs: dict[int, bytes]) -> list[int]:
    """The sorted users whose two digests differ (a user missing on either side counts as a
    difference), compared in constant time."""
    return sorted(u for u in set(mine) | set(theirs)
                  if not hmac.compare_digest(mine.get(u, b""), theirs.get(u, b"-")))
