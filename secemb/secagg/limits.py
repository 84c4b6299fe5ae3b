"""The longest message an honest secure-aggregation server sends a client, from a round's public
parameters: what a deployed device reads of such a message at most (its answer limit,
:func:`secemb.transport.limits.answer_limit_for`).  The layouts are :mod:`secemb.secagg.messages`'.
"""

from __future__ import annotations

from secemb.errors import InvalidMessage
from secemb.framing import HEADER_BYTES
from secemb.secagg.client import SIGNED_ENTRY_BYTES, share_record_bytes
from secemb.secagg.config import SecAggConfig
from secemb.secagg.identity import SIGNATURE_BYTES
from secemb.secagg.keys import KEY_BYTES

__all__ = ["longest_server_message", "longest_union_message", "within_longest"]

#: a message's count field (uint32)
_COUNT = 4
#: one id (uint32)
_ID = 4


def longest_server_message(config: SecAggConfig, clients: int, kind: str) -> int:
    """The longest ``kind`` message (``keys``, ``relayed``, ``survivors`` or ``signatures``) an
    honest server sends a client of a round of ``config`` with at most ``clients`` clients:

    * keys: ``32 + 4 + clients (4 + 2 x 32)``; in a signed round each entry ``32 + 120 + 64``
      bytes more (seed commitment, certificate, signature) and in a signed sparse round ``ceil(|candidates| / 8)``
      more (the listed client's signed row set); in an unsigned sparse round
      ``clients x ceil(length / 8)`` more (a bitmap over the recipient's rows, at most
      ``length``, per listed client);
    * relayed: ``32 + 4 + (clients - 1)(4 + share ciphertext)``; in a signed round each record
      ``2 x 16`` bytes more (the commitments to its two shares);
    * survivors: ``32 + 4 + 4 clients``;
    * signatures (signed round): ``32 + 4 + clients (4 + 64)``.

    Raises
    ------
    ValueError: another ``kind``, or ``clients`` below 1.
    """
    if clients < 1:
        raise ValueError(f"a round has at least one client, got {clients}")
    if kind == "keys":
        if config.signed:
            bitmap = config.bitmap_bytes if config.sparse else 0
            return HEADER_BYTES + _COUNT + clients * (_ID + 2 * KEY_BYTES + SIGNED_ENTRY_BYTES + bitmap)
        bitmaps = clients * -(-config.length // 8) if config.sparse else 0
        return HEADER_BYTES + _COUNT + clients * (_ID + 2 * KEY_BYTES) + bitmaps
    if kind == "relayed":
        return HEADER_BYTES + _COUNT + (clients - 1) * (_ID + share_record_bytes(config))
    if kind == "survivors":
        return HEADER_BYTES + _COUNT + _ID * clients
    if kind == "signatures" and config.signed:
        return HEADER_BYTES + _COUNT + clients * (_ID + SIGNATURE_BYTES)
    raise ValueError(f"no server message {kind!r} in a secure-aggregation round")


def longest_union_message(domain: int) -> int:
    """The longest union message of a PSU over ``domain`` indices
    (:func:`secemb.secagg.psu.union_message`: every index in the union): ``32 + 4 + 4 domain``."""
    return HEADER_BYTES + _COUNT + _ID * domain


def within_longest(answer: bytes, longest: int, what: str) -> bytes:
    """``answer`` if it has at most ``longest`` bytes, the longest answer an honest server sends
    (a one-server party's ``answer_bytes`` of the stage).  What a party checks before it reads
    an answer: the transport reads up to a margin above ``longest``
    (:func:`secemb.transport.limits.answer_limit_for`), while work that grows with an answer's
    records -- a key list that names more clients than the round has -- must stay bounded by
    the round's public sizes.

    Raises
    ------
    InvalidMessage: ``answer`` is longer (``what`` names it).
    """
    if len(answer) > longest:
        raise InvalidMessage(f"{what}: {len(answer)} bytes, longer than any honest answer ({longest} bytes)")
    return answer
