"""A network answer's JSON document (:func:`answer_document`), without the HTTP client.

:mod:`secemb.transport.network` reads every answer through it, and so does server 0's peer link
(:mod:`secemb.server.peer`), which the training simulation imports without the ``server`` extra
(httpx) installed: this module imports only the standard library.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["answer_document"]


def answer_document(raw: bytes) -> Any:
    """The JSON value of a server's or peer's answer body ``raw`` (UTF-8, -16 or -32).

    Raises
    ------
    ValueError
        ``raw`` is not JSON, or nests deeper than the decoder recurses (its ``RecursionError``,
        which no caller of a network answer expects: S40-R1, a peer's answer nested ~100,000
        deep made server 0's count routes answer 500).
    """
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("the JSON nests deeper than the decoder recurses") from None
