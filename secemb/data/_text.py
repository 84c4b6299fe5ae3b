"""Fast, strict parsing of delimited numeric rating files (u.data, ratings.dat, ratings.csv).

Each data line holds ``ncols`` fields separated by ``sep``: non-negative integers, except the
rating field, which may carry a decimal point.  The file is read in blocks of whole lines.

* Fast path, per block (no Python object per line): check the bytes contain only digits, ``.``,
  the separator and newlines; check with numpy that every line has exactly ``ncols - 1``
  separators and no empty field, and that a ``.`` appears at most once per line and only
  inside the rating field; then parse all integers at once with :func:`numpy.fromstring`
  (the decimal point is turned into a separator, so ``3.5`` parses as ``3`` and ``5``).
* Slow path: when any fast-path check fails, the block is parsed line by line with
  ``int``/``float``; the first bad line raises :class:`DataFormatError` naming the file and
  its 1-based line number.  Lines the fast path merely does not cover (``881250949.0``, a
  ``+`` sign, an exponent) are accepted when they denote valid values.

Trailing blank lines at the end of the file are ignored; a blank line elsewhere is an error.
``\\r\\n`` line ends are accepted.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from secemb.data.errors import DataFormatError

__all__ = ["Columns", "parse_columns", "read_first_line"]

_CHUNK = 1 << 24  # 16 MiB of text per block
_MAX_DIGITS = 18  # tokens up to 18 digits cannot overflow int64
_INT_LIMIT = 1 << 62  # slow path: reject integers this large


@dataclass(frozen=True)
class Columns:
    """Parsed columns, one entry per data line, in file order."""

    users: np.ndarray  # int64
    items: np.ndarray  # int64
    ratings: np.ndarray  # float64
    timestamps: np.ndarray  # int64


class _SlowPath(Exception):
    """Internal: the fast path declines this block."""


def read_first_line(path: str | os.PathLike) -> str:
    """Return the first line of ``path`` decoded as UTF-8 (replacing bad bytes), no newline."""
    with open(path, "rb") as f:
        return f.readline().decode("utf-8", "replace").rstrip("\r\n")


def parse_columns(
    path: str | os.PathLike,
    sep: bytes,
    *,
    ncols: int = 4,
    order: tuple[int, int, int, int] = (0, 1, 2, 3),
    header_lines: int = 0,
    names: tuple[str, ...] = ("user", "item", "rating", "timestamp"),
    chunk_bytes: int = _CHUNK,
) -> Columns:
    """Parse a delimited rating file.

    Parameters
    ----------
    path:
        The file.
    sep:
        Field separator: ``b"\\t"``, ``b","`` or ``b"::"``.
    ncols:
        Number of fields on every data line.
    order:
        Field index (0-based) of the user, item, rating and timestamp columns.
    header_lines:
        Lines to skip at the start (not parsed; they count for line numbers).
    names:
        Names of the four columns, used in error messages.

    Raises
    ------
    DataFormatError
        On the first malformed line (wrong field count, empty field, not a number, a
        non-integer id or timestamp, a non-finite rating), naming the file and line.
    """
    if sep not in (b"\t", b",", b"::"):
        raise ValueError(f"unsupported separator {sep!r}")
    parts: list[tuple[np.ndarray, ...]] = []
    line_no = header_lines  # lines consumed so far
    with open(path, "rb") as f:
        for _ in range(header_lines):
            f.readline()
        tail = b""
        while True:
            data = f.read(chunk_bytes)
            eof = not data
            buf = tail + data
            if eof:
                block = buf.rstrip(b"\r\n")
                if not block:
                    break
                block += b"\n"
                tail = b""
            else:
                # Cut after the last non-blank line; blank lines after it wait in `tail`, since
                # they are harmless if nothing but blank lines follows them up to the end.
                body = buf[: buf.rfind(b"\n") + 1].rstrip(b"\r\n")
                if not body:
                    tail = buf
                    continue
                end = buf.index(b"\n", len(body)) + 1  # the newline ending that line
                block, tail = buf[:end], buf[end:]
            nlines = block.count(b"\n")
            try:
                cols = _fast_block(block, sep, ncols, order, nlines)
            except _SlowPath:
                cols = _slow_block(block, sep, ncols, order, path, line_no, names)
            parts.append(cols)
            line_no += nlines
            if eof:
                break
    if not parts:
        empty_i = np.zeros(0, dtype=np.int64)
        return Columns(empty_i, empty_i.copy(), np.zeros(0, dtype=np.float64), empty_i.copy())
    return Columns(*(np.concatenate([p[k] for p in parts]) for k in range(4)))


def _fast_block(
    block: bytes, sep: bytes, ncols: int, order: tuple[int, int, int, int], nlines: int
) -> tuple[np.ndarray, ...]:
    if b"\r" in block:
        block = block.replace(b"\r\n", b"\n")
    if sep == b"::":
        if block.count(b":") != 2 * block.count(b"::"):
            raise _SlowPath
        block = block.replace(b"::", b":")
        sep = b":"
    if block.translate(None, b"0123456789.\n" + sep):
        raise _SlowPath  # some other character: let the slow path judge it
    buf = np.frombuffer(block, dtype=np.uint8)
    sep_byte = sep[0]
    delims = np.flatnonzero((buf == sep_byte) | (buf == 10))
    if delims.shape[0] != ncols * nlines:
        raise _SlowPath
    kinds = buf[delims].reshape(nlines, ncols)
    if (kinds[:, :-1] != sep_byte).any() or (kinds[:, -1] != 10).any():
        raise _SlowPath
    starts = np.empty_like(delims)
    starts[0] = 0
    starts[1:] = delims[:-1] + 1
    lengths = delims - starts
    if lengths.min() < 1 or lengths.max() > _MAX_DIGITS:
        raise _SlowPath

    rating_col = order[2]
    dots = np.flatnonzero(buf == 46)
    has_dot = np.zeros(nlines, dtype=bool)
    frac_len = np.zeros(0, dtype=np.int64)  # digits after each dot
    if dots.shape[0]:
        tok = np.searchsorted(delims, dots)  # token (field) index of each dot
        if (
            (tok % ncols != rating_col).any()
            or (np.diff(tok) == 0).any()
            or (dots == starts[tok]).any()
            or (dots == delims[tok] - 1).any()
        ):
            raise _SlowPath
        has_dot[tok // ncols] = True
        frac_len = delims[tok] - dots - 1

    text = block.translate(bytes.maketrans(sep + b".\n", b"   "))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            values = np.fromstring(text, dtype=np.int64, sep=" ")
        except (ValueError, DeprecationWarning):
            raise _SlowPath from None
    if values.shape[0] != ncols * nlines + dots.shape[0]:
        raise _SlowPath

    ndots = dots.shape[0]
    if ndots == 0 or ndots == nlines:  # uniform lines: a strided view, no gather
        width = ncols + (ndots > 0)
        table = values.reshape(nlines, width)

        def field(c: int) -> np.ndarray:
            return table[:, c + (ndots > 0 and c > rating_col)]

        ratings = field(rating_col).astype(np.float64)
        if ndots:  # (int * 10^f + frac) / 10^f: one correctly rounded division, as float()
            scale = np.power(10.0, frac_len)
            ratings = (ratings * scale + table[:, rating_col + 1]) / scale
    else:
        first = np.zeros(nlines, dtype=np.int64)  # index in `values` of each line's 1st field
        np.cumsum(ncols + has_dot[:-1], out=first[1:])
        shift = has_dot.astype(np.int64)

        def field(c: int) -> np.ndarray:
            return values[first + c + (shift if c > rating_col else 0)]

        ratings = field(rating_col).astype(np.float64)
        lines = np.flatnonzero(has_dot)
        scale = np.power(10.0, frac_len)
        ratings[lines] = (ratings[lines] * scale + values[first[lines] + rating_col + 1]) / scale
    return field(order[0]), field(order[1]), ratings, field(order[3])


def _slow_block(
    block: bytes,
    sep: bytes,
    ncols: int,
    order: tuple[int, int, int, int],
    path: str | os.PathLike,
    line_offset: int,
    names: tuple[str, ...],
) -> tuple[np.ndarray, ...]:
    lines = block.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    n = len(lines)
    out_u = np.empty(n, dtype=np.int64)
    out_i = np.empty(n, dtype=np.int64)
    out_r = np.empty(n, dtype=np.float64)
    out_t = np.empty(n, dtype=np.int64)
    targets = {
        order[0]: (out_u, names[0]),
        order[1]: (out_i, names[1]),
        order[3]: (out_t, names[3]),
    }
    for k, line in enumerate(lines):
        line_no = line_offset + k + 1
        if line.endswith(b"\r"):
            line = line[:-1]
        fields = line.split(sep)
        if len(fields) != ncols:
            what = "an empty line" if not line.strip() else f"{len(fields)}"
            raise DataFormatError(
                f"expected {ncols} fields separated by {sep.decode()!r}, found {what}",
                path=path,
                line=line_no,
            )
        for c, tok in enumerate(fields):
            if c == order[2]:
                out_r[k] = _to_float(tok, names[2], path, line_no)
            elif c in targets:
                arr, name = targets[c]
                arr[k] = _to_int(tok, name, path, line_no)
    return out_u, out_i, out_r, out_t


def _show(tok: bytes) -> str:
    return repr(tok.decode("utf-8", "replace"))


def _to_float(tok: bytes, name: str, path: str | os.PathLike, line_no: int) -> float:
    try:
        if not tok or tok.strip() != tok or b"_" in tok:
            raise ValueError  # int()/float() would accept padding and digit separators
        v = float(tok)
    except ValueError:
        raise DataFormatError(
            f"{name} is not a number: {_show(tok)}", path=path, line=line_no
        ) from None
    if not math.isfinite(v):
        raise DataFormatError(f"{name} is not finite: {_show(tok)}", path=path, line=line_no)
    return v


def _to_int(tok: bytes, name: str, path: str | os.PathLike, line_no: int) -> int:
    try:
        if not tok or tok.strip() != tok or b"_" in tok:
            raise ValueError
        v = int(tok)
    except ValueError:
        f = _to_float(tok, name, path, line_no)
        if not f.is_integer():
            raise DataFormatError(
                f"{name} is not an integer: {_show(tok)}", path=path, line=line_no
            ) from None
        v = int(f)
    if not -_INT_LIMIT < v < _INT_LIMIT:
        raise DataFormatError(f"{name} is out of range: {_show(tok)}", path=path, line=line_no)
    return v
