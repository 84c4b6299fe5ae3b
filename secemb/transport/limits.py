"""How much of another party's answer a device or the operator reads (finding C2's class): the
floor, and the limits a round's public sizes raise it to.  Arithmetic only (no httpx), so that
in-process code and the protocols' device sides can compute a limit; the HTTP client that
enforces it is :class:`secemb.transport.network.ApiClient` (``max_answer_bytes``).

Every limit is the floor plus four times the longest answer an honest server sends at the
announced sizes (the margin covers headers and any slack in a bound, never an honest answer):

* SecEmb's two-server rounds: :func:`answer_limit` of the table and the dense vector;
* one-server rounds: :func:`answer_limit_for` of the longest honest answer of the stage, which
  the protocol's party computes from the round's public parameters
  (:meth:`secemb.protocols.sfsl.staged.SFSLParty.answer_bytes`,
  :meth:`secemb.protocols.secea.staged.SecEAParty.answer_bytes`, its set-up's
  :meth:`~secemb.protocols.secea.staged.SecEASetupParty.answer_bytes`; the secure aggregation's
  messages: :func:`secemb.secagg.limits.longest_server_message`).
"""

from __future__ import annotations

__all__ = ["ANSWER_FLOOR_BYTES", "MAX_ITEMS", "ROUND_DOCUMENT_BYTES", "answer_limit", "answer_limit_for"]

#: the answer limit of a device and of the operator before they know the model's sizes (``secemb
#: client``, ``secemb infer``, ``secemb admin``, :class:`~secemb.transport.network.ApiClient`'s
#: default): every JSON document they read, and the floor of :func:`answer_limit_for` (a
#: deviating server's endless or decompression-bomb answer is refused here)
ANSWER_FLOOR_BYTES = 64 << 20
#: the longest round document a device reads (``GET /v1/round``, ``GET /v1/exchange/round``), polled every
#: fraction of a second: an honest two-server one is ~0.76 kB whatever the round's size (measured at 10 and 1,000
#: devices, session 41), a one-server one ~0.4 kB for 3 devices plus its users' ids (at most 8 B each below 10^7),
#: so 1 MiB holds rounds of over 100,000 devices; at the floor above a deviating server could make each poll
#: decode 64 MiB of JSON (~1.7 GB of a phone's memory) or drip it for half an hour at the paced minimum (S41-R2)
ROUND_DOCUMENT_BYTES = 1 << 20
#: the most items a device accepts in a round document or an inference description: every catalogue the
#: benchmarks use is far smaller (Yelp 93,386; ML-25M 62,423); beyond it an announcement is malformed rather
#: than an order to build a layout (48 B an item) or score that many (findings S41-R3, S41-R4)
MAX_ITEMS = 1 << 26


def answer_limit_for(longest: int) -> int:
    """The longest answer read when an honest server's answer has at most ``longest`` bytes:
    :data:`ANSWER_FLOOR_BYTES` + 4 x ``longest``.

    Raises
    ------
    ValueError: ``longest`` negative (a bound computed wrongly).
    """
    if longest < 0:
        raise ValueError(f"an answer bound is not negative, got {longest}")
    return ANSWER_FLOOR_BYTES + 4 * longest


def answer_limit(rows: int, width: int, dense_size: int) -> int:
    """The longest answer a device or the operator reads once a two-server model's public sizes
    are known: :func:`answer_limit_for` of a table of ``rows`` rows of ``width`` 8-byte words
    and 32 bytes more per row, and a dense vector of ``dense_size`` 8-byte words.

    No honest answer reaches it with ``rows`` = max(the items, the slots a device requests):
    a retrieval reply is at most one row per slot with a 16-byte tag (SecEmb) or the whole table
    (full-download baselines), a dense vector or a model message is the table and the vector
    once, each with a header of a few dozen bytes.
    """
    return answer_limit_for(rows * (8 * width + 32) + 8 * dense_size)
