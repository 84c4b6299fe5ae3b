"""The servers' verification step between upload and close (issue 34).

Server 0, closing a round, asks server 1 for its digests of the agreed users' uploads and its
verifier messages of their sketch check (``POST /v1/peer/rounds/{r}/verify``,
:meth:`~secemb.server.node.FollowerNode.peer_verify`), compares the digests with its own
(:meth:`~secemb.protocols.base.ServerRole.upload_digests`) and has its role decide the sketch
proofs (:meth:`~secemb.protocols.base.ServerRole.verify_rejected`): a device that fails either
is left out of the round like a dropout (:meth:`~secemb.server.node.LeaderNode._verified`).
What the digests and the sketch cover and why an honest device's tell a server nothing:
docs/security.md, "A malicious device: verified uploads".  This module is the wire form of
server 1's answer and the digests' comparison (the sketch check's key of a deployment is the
protocol's: :meth:`~secemb.protocols.secemb.SecEmbProtocol.make_server`).
"""

from __future__ import annotations

import hmac
from typing import Any

from secemb.errors import InvalidMessage

__all__ = ["ABORT_WINDOW", "DIGEST_HEX", "MAX_ABORTS", "MAX_REJECTIONS", "decode_verification", "encode_verification",
           "rejected"]

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


def encode_verification(digests: dict[int, bytes], answer: bytes) -> dict[str, Any]:
    """Server 1's answer to the verification step, as JSON: ``{"digests": {"user id": "hex"},
    "sketch": "hex"}`` -- its per-user upload digests and its verifier messages of the sketch
    check (:meth:`~secemb.protocols.base.ServerRole.verify_answer`; ``""`` without it)."""
    return {"digests": {str(u): d.hex() for u, d in sorted(digests.items())}, "sketch": answer.hex()}


def decode_verification(doc: Any, include: list[int]) -> tuple[dict[int, bytes], bytes]:
    """Server 1's answer :func:`encode_verification` for the users ``include``, checked:
    ``digests`` has exactly those users, each a 32-byte digest in lowercase hex (or none at
    all: a server without verification); ``sketch`` is lowercase hex of whole bytes (its
    contents are the role's to check: :meth:`~secemb.protocols.base.ServerRole.verify_rejected`).
    Returns ``(digests, sketch answer)``.

    Raises
    ------
    InvalidMessage: anything else (a peer's answer is input like any other).
    """
    got = doc.get("digests") if isinstance(doc, dict) else None
    sketch = doc.get("sketch") if isinstance(doc, dict) else None
    if not (isinstance(sketch, str) and len(sketch) % 2 == 0 and sketch == sketch.lower()):
        raise InvalidMessage("the peer's sketch answer is not a string of lowercase hex bytes")
    try:
        answer = bytes.fromhex(sketch)
    except ValueError:
        raise InvalidMessage("the peer's sketch answer is not hex") from None
    if got == {}:  # the peer does not verify: nothing to compare (every device then differs)
        return {}, answer
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
    return out, answer


def rejected(mine: dict[int, bytes], theirs: dict[int, bytes]) -> list[int]:
    """The sorted users whose two digests differ (a user missing on either side counts as a
    difference), compared in constant time."""
    return sorted(u for u in set(mine) | set(theirs)
                  if not hmac.compare_digest(mine.get(u, b""), theirs.get(u, b"-")))
