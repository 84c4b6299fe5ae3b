"""Strict parsing of request input (issue 12, finding 5: bad input is a 4xx, never a 500).

* :func:`ascii_int` reads every integer that arrives as text -- query parameters
  (``user``, ``round``), headers (``Content-Length``, the signature timestamp, the user id in
  the key id): ASCII digits in canonical form only.  ``str.isdigit`` and ``int`` accept far
  more (``"²"`` is a digit to ``isdigit`` but not to ``int``; ``int`` reads fullwidth and
  Arabic-Indic digits, ``_`` separators and surrounding blanks).
* :func:`json_object` parses a JSON control body under a size limit and a nesting-depth
  limit checked *before* the recursive decoder runs, so ``[[[[...`` cannot exhaust the stack.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the web framework is the [server] extra; in-process nodes import this module too
    from starlette.requests import Request

from secemb.errors import InvalidMessage, InvalidParameters, SecembError, check_int

__all__ = ["JSON_MAX_DEPTH", "PayloadTooLarge", "RequestTimeout", "ascii_int", "json_object", "read_body"]

#: deepest nesting of arrays and objects a JSON body may have (the API's documents need 3)
JSON_MAX_DEPTH = 32

_INT = re.compile(r"0|-?[1-9][0-9]{0,18}")
#: a JSON string; an unterminated one runs to the end (so a scan is linear in the body's length)
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


class PayloadTooLarge(SecembError):
    """The body exceeds the endpoint's limit (HTTP 413)."""


class RequestTimeout(SecembError):
    """The body did not arrive within the server's ``read_timeout_s`` (HTTP 408)."""


async def read_body(request: Request, limit: int) -> bytes:
    """``request``'s body, refused with :class:`PayloadTooLarge` as soon as it is known to
    exceed ``limit`` bytes: by its ``Content-Length`` before anything is read (a malformed one
    is :class:`~secemb.errors.InvalidMessage`), else while it streams in."""
    cl = request.headers.get("content-length")
    if cl is not None:
        size = ascii_int(cl, "header Content-Length", 0, 2**63, InvalidMessage)
        if size > limit:
            raise PayloadTooLarge(f"body of {size} bytes exceeds this endpoint's limit of {limit} bytes")
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise PayloadTooLarge(f"body exceeds this endpoint's limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def ascii_int(raw: str | None, field: str, lo: int, hi: int,
              error: type[SecembError] = InvalidParameters) -> int:
    """The integer written in ``raw``, which must lie in ``[lo, hi)`` (the range checked, and
    named when refused, by :func:`~secemb.errors.check_int`).

    ``raw`` must be ``0`` or an optionally negative ASCII-digit numeral without leading zeros,
    signs other than ``-``, blanks or separators, of at most 19 digits.

    Raises
    ------
    error
        (``InvalidParameters`` unless given) naming ``field`` when ``raw`` is missing,
        malformed or out of range.
    """
    if raw is None:
        raise error(f"{field} is missing")
    if _INT.fullmatch(raw) is None:
        raise error(f"{field} must be an integer in ASCII digits, got {raw[:40]!r}")
    return check_int(field, int(raw), low=lo, high=hi - 1, error=error)


def _depth(body: bytes) -> int:
    """Deepest nesting of ``[``/``{`` in ``body`` outside JSON strings.  Exact for any valid
    prefix of a JSON text -- the part the decoder recurses through before it can fail."""
    marks = _OPEN[np.frombuffer(_STRING.sub(b"", body), np.uint8)]
    return int(np.cumsum(marks, dtype=np.int64).max(initial=0))


def json_object(body: bytes, max_bytes: int, max_depth: int = JSON_MAX_DEPTH) -> dict[str, Any]:
    """The JSON object in ``body`` (``{}`` for an empty body).

    Raises
    ------
    PayloadTooLarge
        ``body`` is longer than ``max_bytes``.
    InvalidMessage
        It is not UTF-8 JSON, nests deeper than ``max_depth``, or is not an object.
    """
    if len(body) > max_bytes:
        raise PayloadTooLarge(f"JSON body of {len(body)} bytes exceeds the limit of {max_bytes} bytes")
    if not body:
        return {}
    if _depth(body) > max_depth:
        raise InvalidMessage(f"JSON body nests deeper than {max_depth} levels")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidMessage("body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise InvalidMessage("JSON body must be an object")
    return doc
