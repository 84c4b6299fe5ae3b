"""DPF parameters, key batches and their byte format (spec: ``docs/wire-format.md``).

A batch of ``K`` keys of one party shares one :class:`DPFParams`.  A 128-bit word is two
little-endian ``uint64``; a tree node's word carries its control bit ``t`` in bit 0 (the
low bit of byte 0) and its seed in the other 127 bits.

Serialized batch (all integers little-endian), a message of the one framing
(:mod:`secemb.framing`)::

    framing header (32 bytes)
      protocol     KEYS_WIRE_ID (255)
      kind         1 = full key (path + output correction word), 2 = path part only,
                   3 = shared part (a full key without its roots; party field 0)
      party        0 or 1
      peer, round  0
    key parameters (17 bytes)
      ring_bits    1  32 or 64 (0 for a path part)
      domain_size  8  m >= 1
      width        4  payload width d (0 for a path part)
      count        4  K
    then K entries of each field, field after field
      roots        K * 16               root word; bit 0 must equal the party
      cw_seeds     K * n * 16           per level: seed correction word, bit 0 = tCW_L
      cw_tr        K * ceil(n / 8)      per level i: bit (i % 8) of byte (i // 8) = tCW_R
      cw_out       K * d * ring_bits/8  output correction word (full keys only)

``n = ceil(log2 m)`` is the tree depth.  One key takes ``16 + 16 n + ceil(n/8) + d k/8``
bytes; a batch ``49 + K`` times that (:data:`HEADER_BYTES` = 49: the framing header and the
key parameters).  Both parties' keys share every field but the roots:
the *shared part* (kind 3) is a full batch without its ``roots`` field, and
:meth:`DPFKeys.from_shared` rebuilds either party's keys from it and that party's roots.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, Self, TypeVar, cast

import numpy as np

from secemb import framing
from secemb.fss import kernels
from secemb.errors import InvalidKey, InvalidParameters, check_int

__all__ = ["DPFParams", "PathKeys", "PathBlocks", "DPFKeys", "HEADER_BYTES"]

#: what the parsers accept (each takes a flat byte view of it)
_Bytes = framing.Buffer

_KIND_FULL = 1
_KIND_PATH = 2
_KIND_SHARED = 3
_PARAMS = struct.Struct("<BQII")  # ring_bits, domain_size, width, count
#: bytes before the roots: the framing header and the key parameters
HEADER_BYTES = framing.HEADER_BYTES + _PARAMS.size  # 49
_MAX_DOMAIN = 1 << 40
_MAX_WIDTH = 1 << 20


@dataclass(frozen=True)
class DPFParams:
    """Parameters of a batch of DPF keys, validated once.

    Attributes
    ----------
    domain_size: ``m >= 1``; inputs are ``0 <= x < m``.
    payload_width: ``d >= 0``; outputs lie in ``Z_{2^k}^d`` (0 for a path part only).
    ring_bits: ``k``, 32 or 64.
    """

    domain_size: int
    payload_width: int = 1
    ring_bits: int = 32

    def __post_init__(self) -> None:
        check_int("domain_size", self.domain_size, error=TypeError)
        if not 1 <= self.domain_size <= _MAX_DOMAIN:
            raise InvalidParameters(f"domain_size must be in [1, 2^40], got {self.domain_size}")
        if not 0 <= self.payload_width <= _MAX_WIDTH:
            raise InvalidParameters(
                f"payload_width must be in [0, 2^20], got {self.payload_width}"
            )
        if self.ring_bits not in (32, 64):
            raise InvalidParameters(f"ring_bits must be 32 or 64, got {self.ring_bits}")
        object.__setattr__(self, "domain_size", int(self.domain_size))

    @property
    def depth(self) -> int:
        """Tree depth ``n = ceil(log2 m)`` (0 for ``m = 1``)."""
        return (self.domain_size - 1).bit_length()

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of ring elements (uint32 or uint64)."""
        return np.dtype(np.uint32 if self.ring_bits == 32 else np.uint64)

    @property
    def convert_blocks(self) -> int:
        """AES blocks per leaf to convert a seed into ``d`` ring elements."""
        return -(-self.payload_width * self.ring_bits // 128)

    @property
    def path_key_bytes(self) -> int:
        """Serialized bytes of one key's path part."""
        n = self.depth
        return 16 + 16 * n + (n + 7) // 8

    @property
    def cw_bytes(self) -> int:
        """Serialized bytes of one output correction word."""
        return self.payload_width * self.ring_bits // 8

    @property
    def key_bytes(self) -> int:
        """Serialized bytes of one full key."""
        return self.path_key_bytes + self.cw_bytes

    def with_payload(self, payload_width: int, ring_bits: int | None = None) -> DPFParams:
        """The same domain with another payload."""
        return DPFParams(self.domain_size, payload_width, self.ring_bits if ring_bits is None else ring_bits)


def _frame(kind: int, party: int, ring_bits: int, domain_size: int, width: int, count: int, *fields: _Bytes) -> bytes:
    """One framed batch: the header, the key parameters, then ``fields``."""
    head = _PARAMS.pack(ring_bits, domain_size, width, count)
    return framing.frame(framing.KEYS_WIRE_ID, kind, party, 0, 0, head, *fields)


def _header(kind: int, party: int, params: DPFParams, count: int, body: int) -> bytes:
    """The :data:`HEADER_BYTES` bytes that start a batch (``kind`` full or shared) of ``count``
    keys of ``params`` (:func:`_frame`) whose fields after the key parameters take ``body`` bytes."""
    return _frame(kind, party, params.ring_bits, params.domain_size, params.payload_width, count,
                  bytes(body))[:HEADER_BYTES]


@dataclass(frozen=True, eq=False)
class PathKeys:
    """The path part of ``K`` keys of one party: root words and per-level correction words.

    Attributes
    ----------
    params: domain of the keys (payload fields unused).
    party: 0 or 1.
    roots: uint64 (K, 2); bit 0 of ``roots[:, 0]`` is the party.
    cw_seed: uint64 (K, n, 2); seed correction words with bit 0 cleared.
    cw_tl, cw_tr: uint8 (K, n); control-bit correction words, 0 or 1.
    """

    params: DPFParams
    party: int
    roots: np.ndarray
    cw_seed: np.ndarray
    cw_tl: np.ndarray
    cw_tr: np.ndarray

    def __len__(self) -> int:
        return self.roots.shape[0]

    def __getitem__(self, sl: slice) -> PathKeys:
        return PathKeys(self.params, self.party, self.roots[sl], self.cw_seed[sl], self.cw_tl[sl], self.cw_tr[sl])

    def blocks(self, count: int, lo: int, hi: int) -> PathKeys:
        """Keys ``lo..hi-1`` of each of the ``count`` equal consecutive blocks this batch is
        made of (e.g. every user's keys of a range of buckets), block after block: one copy
        per field, the same keys as concatenating the blocks' slices."""
        def part(a: np.ndarray) -> np.ndarray:
            return a.reshape(count, -1, *a.shape[1:])[:, lo:hi].reshape(-1, *a.shape[1:])

        return PathKeys(self.params, self.party, part(self.roots), part(self.cw_seed), part(self.cw_tl),
                        part(self.cw_tr))

    @classmethod
    def concat(cls, batches: list[PathKeys]) -> PathKeys:
        """One batch of all keys of ``batches`` (same parameters and party), in order."""
        first = batches[0]
        if any(b.params != first.params or b.party != first.party for b in batches):
            raise InvalidParameters("can only concatenate key batches with equal parameters and party")
        return cls(
            first.params,
            first.party,
            np.concatenate([b.roots for b in batches]),
            np.concatenate([b.cw_seed for b in batches]),
            np.concatenate([b.cw_tl for b in batches]),
            np.concatenate([b.cw_tr for b in batches]),
        )

    # -- bytes ---------------------------------------------------------------------------
    def _body(self) -> list[bytes]:
        k, n = len(self), self.params.depth
        seeds = self.cw_seed.copy()
        seeds[..., 0] |= self.cw_tl.astype(np.uint64)
        tr = np.packbits(self.cw_tr.reshape(k, n), axis=1, bitorder="little") if n else np.zeros((k, 0), np.uint8)
        return [self.roots.astype("<u8").tobytes(), seeds.astype("<u8").tobytes(), tr.tobytes()]

    def to_bytes(self) -> bytes:
        """Serialize (kind 2, path part only)."""
        return _frame(_KIND_PATH, self.party, 0, self.params.domain_size, 0, len(self), *self._body())

    @classmethod
    def _parse_body(cls, params: DPFParams, party: int, k: int, body: memoryview) -> tuple[PathKeys, int]:
        n = params.depth
        nb = (n + 7) // 8
        off = 0
        roots = np.frombuffer(body, "<u8", 2 * k, off).reshape(k, 2).astype(np.uint64)
        off += 16 * k
        seeds = np.frombuffer(body, "<u8", 2 * k * n, off).reshape(k, n, 2).astype(np.uint64)
        off += 16 * k * n
        trb = np.frombuffer(body, np.uint8, k * nb, off).reshape(k, nb)
        off += k * nb
        if np.any((roots[:, 0] & np.uint64(1)) != np.uint64(party)):
            raise InvalidKey("root control bit does not match the key's party")
        tr = np.unpackbits(trb, axis=1, bitorder="little")[:, :n] if n else np.zeros((k, 0), np.uint8)
        if n % 8 and np.any(np.unpackbits(trb[:, -1:], axis=1, bitorder="little")[:, n % 8 :]):
            raise InvalidKey("non-zero padding bits in the control-bit correction words")
        tl = (seeds[..., 0] & np.uint64(1)).astype(np.uint8)
        seeds[..., 0] &= ~np.uint64(1)
        return cls(params, party, roots, seeds, tl, np.ascontiguousarray(tr, dtype=np.uint8)), off

    @classmethod
    def from_bytes(
        cls, data: _Bytes, *, domain_size: int | None = None, party: int | None = None, count: int | None = None
    ) -> PathKeys:
        """Parse a serialized path part; optional expectations are checked too.

        Raises
        ------
        InvalidKey
            Whatever is wrong: magic, version, kind, party, sizes or length.
        """
        params, p, k, _, body = _parse_header(data, _KIND_PATH, domain_size, party, count)
        if len(body) != k * params.path_key_bytes:
            raise InvalidKey(f"path keys: expected {HEADER_BYTES + k * params.path_key_bytes} bytes, got {len(data)}")
        keys, _ = cls._parse_body(params, p, k, body)
        return keys


@dataclass(frozen=True, eq=False)
class PathBlocks:
    """Keys ``lo..hi-1`` of each of the ``count`` equal consecutive blocks of ``keys`` (e.g. every
    user's keys of a range of buckets), block after block, where ``keys`` holds them: the keys of
    ``keys.blocks(count, lo, hi)`` (:meth:`copy`), whose correction words the compiled walk
    (:func:`secemb.fss.tree.leaf_groups`) reads in place instead of copying them first.

    Raises
    ------
    InvalidParameters: ``count`` is not an int >= 1 dividing ``len(keys)``, or ``lo``, ``hi`` not
        ints with ``0 <= lo <= hi <= len(keys) / count`` (the walk reads the keys unchecked).
    """

    keys: PathKeys
    count: int
    lo: int
    hi: int

    def __post_init__(self) -> None:
        count = check_int("count", self.count, low=1)
        if len(self.keys) % count:
            raise InvalidParameters(f"count must divide the {len(self.keys)} keys, got {count}")
        lo = check_int("lo", self.lo, low=0)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", check_int("hi", self.hi, low=lo, high=len(self.keys) // count))

    @property
    def params(self) -> DPFParams:
        return self.keys.params

    @property
    def party(self) -> int:
        return self.keys.party

    def __len__(self) -> int:
        return self.count * (self.hi - self.lo)

    def roots(self) -> np.ndarray:
        """The keys' roots, uint64 (len, 2), C-contiguous (a copy: 16 bytes a key)."""
        return self.keys.roots.reshape(self.count, -1, 2)[:, self.lo : self.hi].reshape(-1, 2)

    def copy(self) -> PathKeys:
        """The keys as a batch of their own (:meth:`PathKeys.blocks`)."""
        return self.keys.blocks(self.count, self.lo, self.hi)


class _PathPart(Protocol):
    """What :class:`OutputKeys` needs of a path part: its party, its number of keys, a slice of it."""

    @property
    def party(self) -> int: ...

    def __len__(self) -> int: ...

    def __getitem__(self, sl: slice) -> Self: ...


_Path = TypeVar("_Path", bound=_PathPart)


@dataclass(frozen=True, eq=False)
class OutputKeys(Generic[_Path]):
    """``K`` complete keys of one party in any path scheme: the path part (e.g. :class:`PathKeys`)
    and the output correction words ``cw_out`` ring (K, d) under ``params`` (domain, ``d``, ring).
    A slice is the same keys' slice of both."""

    path: _Path
    cw_out: np.ndarray
    params: DPFParams

    @property
    def party(self) -> int:
        return self.path.party

    def __len__(self) -> int:
        return len(self.path)

    def __getitem__(self, sl: slice) -> Self:
        return type(self)(self.path[sl], self.cw_out[sl], self.params)


@dataclass(frozen=True, eq=False)
class DPFKeys(OutputKeys[PathKeys]):
    """``K`` complete DPF keys of one party: a path part and output correction words.

    Attributes
    ----------
    path: :class:`PathKeys` (its ``params`` carry the domain).
    cw_out: ring array (K, d) of ``params.dtype``.
    params: domain, payload width ``d`` and ring.
    """

    def blocks(self, count: int, lo: int, hi: int) -> DPFKeys:
        """:meth:`PathKeys.blocks` of the whole keys."""
        w = self.cw_out.shape[1]
        return DPFKeys(self.path.blocks(count, lo, hi),
                       self.cw_out.reshape(count, -1, w)[:, lo:hi].reshape(-1, w), self.params)

    @classmethod
    def concat(cls, batches: list[DPFKeys]) -> DPFKeys:
        """One batch of all keys of ``batches`` (same parameters and party), in order."""
        if any(b.params != batches[0].params for b in batches):
            raise InvalidParameters("can only concatenate key batches with equal parameters")
        return cls(
            PathKeys.concat([b.path for b in batches]),
            np.concatenate([b.cw_out for b in batches]),
            batches[0].params,
        )

    def to_bytes(self) -> bytes:
        """Serialize (kind 1); the length is ``24 + K * params.key_bytes``."""
        p = self.params
        out = self.cw_out.astype(p.dtype.newbyteorder("<")).tobytes()
        return _frame(_KIND_FULL, self.party, p.ring_bits, p.domain_size, p.payload_width, len(self),
                      *self.path._body(), out)

    def to_bytes_split(self, parts: int) -> list[bytes]:
        """:meth:`to_bytes` of each of ``parts`` equal consecutive batches of the keys (each
        user's keys of a batch generated for many users), serialized as one: the same bytes
        as ``self[i c:(i + 1) c].to_bytes()`` for ``c = K / parts``.

        Raises
        ------
        InvalidParameters: ``parts`` does not divide ``K``.
        """
        return [row.tobytes() for row in self.to_rows(parts)]

    def to_rows(self, parts: int, out: np.ndarray | None = None) -> np.ndarray:
        """:meth:`to_bytes_split` as the rows of one array, each field of all batches written at
        once: uint8 (parts, HEADER_BYTES + c key_bytes), row ``i`` the bytes of
        ``self[i c:(i + 1) c].to_bytes()`` for ``c = K / parts``.

        ``out``: write the rows into this writable uint8 array of that shape instead (its rows
        C-contiguous, of any stride: e.g. the key columns of a batch of whole messages) and
        return it.

        Raises
        ------
        InvalidParameters: ``parts`` does not divide ``K``, or ``out`` is not such an array.
        """
        k = len(self)
        if parts < 1 or k % parts:
            raise InvalidParameters(f"cannot split {k} keys into {parts} equal batches")
        c, p = k // parts, self.params
        n, width = p.depth, p.payload_width
        size = HEADER_BYTES + c * p.key_bytes
        if out is None:
            out = np.empty((parts, size), np.uint8)
        elif (not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != (parts, size)
              or (parts and out.strides[1] != 1) or not out.flags.writeable):
            raise InvalidParameters(f"out must be writable uint8 ({parts}, {size}) with contiguous rows, got "
                                    f"{getattr(out, 'dtype', None)} {getattr(out, 'shape', None)}")
        out[:, :HEADER_BYTES] = np.frombuffer(_header(_KIND_FULL, self.party, p, c, size - HEADER_BYTES), np.uint8)
        # the fields (PathKeys._body, then the output words), each row's c records of each
        ends = np.cumsum([HEADER_BYTES, 16 * c, 16 * c * n, c * ((n + 7) // 8), c * p.cw_bytes]).tolist()
        out[:, ends[0] : ends[1]].view("<u8")[...] = self.path.roots.reshape(parts, 2 * c)
        seeds = out[:, ends[1] : ends[2]].view("<u8")
        seeds[...] = self.path.cw_seed.reshape(parts, 2 * c * n)
        seeds[:, ::2] |= self.path.cw_tl.reshape(parts, c * n)  # t^L in bit 0 of each level's first word
        if n:  # t^R of level i in bit i % 8 of byte i // 8 (np.packbits' little bit order), level by level
            bits = out[:, ends[2] : ends[3]].reshape(parts, c, (n + 7) // 8)
            tr = self.path.cw_tr.reshape(parts, c, n)
            level = np.empty((parts, c), np.uint8)
            for i in range(n):
                np.not_equal(tr[..., i], 0, out=level.view(np.bool_))
                if i % 8:
                    np.bitwise_or(bits[..., i // 8], np.left_shift(level, np.uint8(i % 8), out=level),
                                  out=bits[..., i // 8])
                else:
                    bits[..., i // 8] = level
        out[:, ends[3] : ends[4]].view(p.dtype.newbyteorder("<"))[...] = self.cw_out.reshape(parts, c * width)
        return out

    def shared_bytes(self) -> bytes:
        """Serialize everything but the roots (kind 3): identical for both parties' keys."""
        p = self.params
        out = self.cw_out.astype(p.dtype.newbyteorder("<")).tobytes()
        return _frame(_KIND_SHARED, 0, p.ring_bits, p.domain_size, p.payload_width, len(self),
                      *self.path._body()[1:], out)

    @staticmethod
    def shared_header(domain_size: int, count: int, payload_width: int, ring_bits: int) -> bytes:
        """The first :data:`HEADER_BYTES` bytes of the shared part (kind 3) of ``count`` keys of
        these parameters (:meth:`shared_bytes`), the same for every such batch: the shared
        part is they followed by the keys' fields after their roots."""
        params = DPFParams(domain_size, payload_width, ring_bits)
        return _header(_KIND_SHARED, 0, params, count, count * (params.key_bytes - 16))

    @staticmethod
    def shared_of(data: _Bytes) -> bytes:
        """The shared part (kind 3) of serialized full keys that :meth:`from_bytes` (or
        :meth:`from_bytes_many`) accepted, without parsing them again: byte for byte
        ``from_bytes(data).shared_bytes()`` -- that parse keeps every field's bytes (it refuses
        non-zero padding bits, the one thing it would not serialize back), so the shared part
        is the key parameters under the shared kind's header, then everything after the roots.
        ``data`` is not checked again (a server's parsed request: one copy, no serialization)."""
        view = memoryview(data).cast("B")
        ring, m, width, k = _PARAMS.unpack_from(view, framing.HEADER_BYTES)
        return _frame(_KIND_SHARED, 0, ring, m, width, k, view[HEADER_BYTES + 16 * k :])

    @classmethod
    def empty(cls, params: DPFParams, party: int, count: int) -> DPFKeys:
        """A batch of ``count`` keys of ``party`` whose fields are allocated but not set: the
        destination of :meth:`from_bytes_many` ``(into=...)``, which fills it block by block."""
        k, n = count, params.depth
        return cls(PathKeys(params, party, np.empty((k, 2), np.uint64), np.empty((k, n, 2), np.uint64),
                            np.empty((k, n), np.uint8), np.empty((k, n), np.uint8)),
                   np.empty((k, params.payload_width), params.dtype), params)

    @classmethod
    def from_bytes_many(cls, datas: Sequence[_Bytes], *, domain_size: int, party: int, count: int, payload_width: int,
                        ring_bits: int, into: DPFKeys | None = None,
                        blocks: Sequence[int] | None = None) -> list[DPFKeys | InvalidKey]:
        """:meth:`from_bytes` of many serialized batches that must all have the given
        parameters (several users' keys): the headers are checked one by one, the bodies
        parsed and checked as one array.  Per input, its keys or the :class:`InvalidKey`
        that refused it (the same checks and messages as :meth:`from_bytes`).

        ``into``: write the keys of ``datas[j]`` to block ``blocks[j]`` (keys ``blocks[j] count``
        to ``(blocks[j] + 1) count - 1``) of this batch (of these parameters and ``party``, made by
        :meth:`empty`) and return views of it -- several ranges of a request batch parsed (on
        several threads) into one batch, with nothing to concatenate afterwards (a refused
        input's block holds nothing to read).  Default: a new batch for these inputs.
        """
        params = DPFParams(domain_size, payload_width, ring_bits)
        k = count
        out: list[DPFKeys | InvalidKey | None] = [None] * len(datas)
        bodies: list[memoryview] = []
        where: list[int] = []
        for i, data in enumerate(datas):
            try:
                _, _, _, (ring, width), body = _parse_header(data, _KIND_FULL, domain_size, party, count)
                if width != payload_width:
                    raise InvalidKey(f"expected payload width {payload_width}, got {width}")
                if ring != ring_bits:
                    raise InvalidKey(f"expected ring_bits {ring_bits}, got {ring}")
                if len(body) != k * params.key_bytes:
                    raise InvalidKey(f"keys: expected {HEADER_BYTES + k * params.key_bytes} bytes, got {len(data)}")
            except InvalidKey as exc:
                out[i] = exc
                continue
            bodies.append(body)
            where.append(i)
        dest, at = cls._destination(params, party, k, len(datas), into, blocks, where)
        raw = np.frombuffer(b"".join(bodies), np.uint8).reshape(len(bodies), k * params.key_bytes)
        for i, got in zip(where, cls._fill(dest, k, at, raw[:, : 16 * k], raw[:, 16 * k :]), strict=True):
            out[i] = got
        return cast("list[DPFKeys | InvalidKey]", out)  # every entry is set above

    @classmethod
    def from_rows(cls, rows: np.ndarray, *, domain_size: int, party: int, count: int, payload_width: int,
                  ring_bits: int, roots: np.ndarray | None = None, into: DPFKeys | None = None,
                  blocks: Sequence[int] | None = None) -> list[DPFKeys | InvalidKey]:
        """:meth:`from_bytes_many` of serialized full keys given as the rows of ``rows``
        (uint8 (u, L), one serialized batch a row), or with ``roots`` (uint8 (u, 16 count))
        :meth:`from_shared_many` of the shared parts ``rows[j]`` with the roots ``roots[j]``:
        the same keys, refusals and messages (and ``into``, ``blocks`` as there).

        A row whose header is byte for byte the one these parameters fix -- exactly what
        passes every header check, since they fix every header field, and the rows' length
        fixes the body's -- is parsed with the others as one array, with no header unpacked
        and nothing joined; any other row is parsed by :meth:`from_bytes_many` or
        :meth:`from_shared_many`, which refuse it with their error.

        Raises
        ------
        InvalidParameters: ``rows`` or ``roots`` is not such an array, or ``into`` / ``blocks``
            as for :meth:`from_bytes_many`.
        """
        params = DPFParams(domain_size, payload_width, ring_bits)
        k = count
        if not isinstance(rows, np.ndarray) or rows.dtype != np.uint8 or rows.ndim != 2 or (
                roots is not None and (not isinstance(roots, np.ndarray) or roots.dtype != np.uint8
                                       or roots.shape != (rows.shape[0], 16 * k))):
            raise InvalidParameters(f"rows must be uint8 (u, L) and roots None or uint8 (u, {16 * k}), got "
                                    f"{getattr(rows, 'dtype', None)} {getattr(rows, 'shape', None)} and "
                                    f"{getattr(roots, 'dtype', None)} {getattr(roots, 'shape', None)}")
        # the one-array path views a row's fields as words: each row's bytes contiguous (a copy otherwise)
        if rows.strides[1] != 1:
            rows = np.ascontiguousarray(rows)
        if roots is not None and roots.strides[1] != 1:
            roots = np.ascontiguousarray(roots)
        u = rows.shape[0]
        where = list(range(u))
        dest, at = cls._destination(params, party, k, u, into, blocks, where)
        body = k * (params.key_bytes - (0 if roots is None else 16))
        head = (_header(_KIND_FULL, party, params, k, body) if roots is None
                else cls.shared_header(domain_size, count, payload_width, ring_bits))
        if rows.shape[1] == HEADER_BYTES + body:
            canonical = np.all(rows[:, :HEADER_BYTES] == np.frombuffer(head, np.uint8), axis=1)
        else:
            canonical = np.zeros(u, bool)
        good = np.flatnonzero(canonical).tolist()
        other = np.flatnonzero(~canonical).tolist()
        out: list[DPFKeys | InvalidKey | None] = [None] * u
        if other:  # each parsed as any serialized keys are: refused with its error
            expect = {"domain_size": domain_size, "count": count, "payload_width": payload_width,
                      "ring_bits": ring_bits}
            spots = [at[j] for j in other]
            got = (cls.from_bytes_many([rows[j].tobytes() for j in other], party=party, into=dest, blocks=spots,
                                       **expect) if roots is None else
                   cls.from_shared_many([(rows[j].tobytes(), roots[j].tobytes()) for j in other], party, into=dest,
                                        blocks=spots, **expect))
            for j, g in zip(other, got, strict=True):
                out[j] = g
        if good:
            sel: slice | list[int] = slice(None) if not other else good
            fields = rows[sel, HEADER_BYTES:]
            root_bytes, rest = (fields[:, : 16 * k], fields[:, 16 * k :]) if roots is None else (roots[sel], fields)
            for j, g in zip(good, cls._fill(dest, k, [at[j] for j in good], root_bytes, rest), strict=True):
                out[j] = g
        return cast("list[DPFKeys | InvalidKey]", out)  # every entry is set above

    @classmethod
    def _destination(cls, params: DPFParams, party: int, count: int, inputs: int, into: DPFKeys | None,
                     blocks: Sequence[int] | None, where: list[int]) -> tuple[DPFKeys, list[int]]:
        """Where a parser of ``inputs`` serialized batches of ``count`` keys puts those of inputs
        ``where``: a new batch and their blocks in it, or ``into`` and their ``blocks`` (each
        input's checked: one per input, distinct, inside ``into``), before anything is written.

        Raises
        ------
        InvalidParameters: ``into`` or ``blocks`` is not such.
        """
        if into is None:
            return cls.empty(params, party, len(where) * count), list(range(len(where)))
        if into.params != params or into.party != party or blocks is None or len(blocks) != inputs:
            raise InvalidParameters("into: a batch of these parameters and party, with one block per input")
        # numpy would read -1 as the last block, write one named twice twice, and fail past the end
        if len(set(blocks)) != len(blocks) or not all(0 <= b < len(into) // count for b in blocks):
            raise InvalidParameters(f"blocks: distinct blocks of the {len(into) // count} of into, got {list(blocks)}")
        return into, [blocks[i] for i in where]

    @staticmethod
    def _fill(dest: DPFKeys, count: int, at: list[int], roots: np.ndarray,
              rest: np.ndarray) -> list[DPFKeys | InvalidKey]:
        """Write batches of ``count`` keys parsed from their serialized fields to blocks ``at`` of ``dest`` (of the
        parameters and party the inputs were checked against): ``roots`` uint8 (u, 16 K) and
        ``rest`` uint8 (u, K (key_bytes - 16)), the fields after the roots (rows of any stride,
        each contiguous), each field of every row written at once; per row its keys (a view
        of ``dest``) or the :class:`InvalidKey` that refuses it (the checks and messages of
        :meth:`from_bytes`).  The seed and control-bit correction words are written by the compiled
        kernel where it runs (:meth:`_fill_path_compiled`), else by the numpy reference below."""
        params, party, k = dest.params, dest.party, count
        u, n, width = len(roots), params.depth, params.payload_width
        nb = (n + 7) // 8
        spans = np.cumsum([0, 16 * k * n, k * nb, k * params.cw_bytes])
        root_words = roots.view("<u8").reshape(u, k, 2)
        seeds = rest[:, spans[0] : spans[1]].view("<u8")
        trb = rest[:, spans[1] : spans[2]]
        cw = rest[:, spans[2] : spans[3]].view(params.dtype.newbyteorder("<")).reshape(u, k, width)
        # each field written to the destination's blocks at once (a slice where they follow each other)
        rows: slice | list[int] = slice(at[0], at[-1] + 1) if at and at == list(range(at[0], at[0] + u)) else at
        path, size = dest.path, len(dest) // k if k else 0
        path.roots.reshape(size, k, 2)[rows] = root_words
        if kernels.compiled() and u and k and n:  # the seed and control-bit words in one pass
            DPFKeys._fill_path_compiled(dest, k, at, seeds, trb)
        else:
            dest_seeds = path.cw_seed.reshape(size, k, n, 2)
            dest_seeds[rows] = seeds.reshape(u, k, n, 2)
            dest_seeds[rows, ..., 0] &= ~np.uint64(1)
            # t^L is bit 0 of each level's first byte; t^R of level i bit i % 8 of byte i // 8 (byte-wise: no
            # 64-bit temporaries, no unpacked copy)
            path.cw_tl.reshape(size, k, n)[rows] = (rest[:, spans[0] : spans[1]].reshape(u, k, n, 16)[..., 0]
                                                    & np.uint8(1))
            tr = np.empty((u, k, n), np.uint8)
            for i in range(n):
                np.right_shift(trb.reshape(u, k, nb)[..., i // 8], np.uint8(i % 8), out=tr[..., i])
            tr &= np.uint8(1)
            path.cw_tr.reshape(size, k, n)[rows] = tr
        dest.cw_out.reshape(size, k, width)[rows] = cw
        bad_root = np.any((root_words[..., 0] & np.uint64(1)) != np.uint64(party), axis=1).tolist()
        bad_pad = np.any(trb.reshape(u, k, nb)[..., -1] >> np.uint8(n % 8), axis=1).tolist() if n % 8 else [False] * u
        out: list[DPFKeys | InvalidKey] = []
        for j in range(u):
            if bad_root[j]:
                out.append(InvalidKey("root control bit does not match the key's party"))
            elif bad_pad[j]:
                out.append(InvalidKey("non-zero padding bits in the control-bit correction words"))
            else:
                out.append(dest[at[j] * k : (at[j] + 1) * k])
        return out

    @staticmethod
    def _fill_path_compiled(dest: DPFKeys, count: int, at: list[int], seeds: np.ndarray, trb: np.ndarray) -> None:
        """:meth:`_fill`'s writes of the seed and control-bit correction words on the compiled kernel
        (``parse_path_fields``, one pass): ``seeds`` uint64 (u, 2 count n) and ``trb`` uint8 (u, count
        ceil(n / 8)), each row a batch's ``cw_seeds`` and ``cw_tr`` fields (views of its bytes), its
        keys to block ``at[j]`` of ``dest``.  Everything the kernel indexes unchecked is checked first.

        Raises
        ------
        InvalidParameters: the arrays are not those of ``len(at)`` batches of ``count`` keys of
            ``dest``'s depth, ``dest``'s fields not those of its keys, or ``at`` not its blocks.
        """
        from secemb.fss._numba_kernels import parse_path_fields

        path, n = dest.path, dest.params.depth
        total, size = len(dest), len(dest) // count
        blocks = np.asarray(at, np.int64)
        u = len(blocks)
        if (seeds.dtype != np.uint64 or seeds.shape != (u, 2 * count * n) or trb.dtype != np.uint8
                or trb.shape != (u, count * ((n + 7) // 8)) or path.cw_seed.shape != (total, n, 2)
                or path.cw_tl.shape != (total, n) or path.cw_tr.shape != (total, n) or blocks.ndim != 1
                or (u and not 0 <= int(blocks.min()) <= int(blocks.max()) < size)):
            raise InvalidParameters(f"cannot parse {u} batches of {count} keys of depth {n} into blocks {at} of a "
                                    f"batch of {total}")
        parse_path_fields(seeds, trb, blocks, count, path.cw_seed, path.cw_tl, path.cw_tr)

    @classmethod
    def from_shared(cls, shared: _Bytes, roots: _Bytes, party: int, **expect: int) -> DPFKeys:
        """Rebuild ``party``'s keys from a shared part and that party's serialized roots
        (``16 K`` bytes); ``expect`` as for :meth:`from_bytes`.

        Raises
        ------
        InvalidKey
            Whatever is wrong with either input.
        """
        return cls.from_bytes(cls._joined(shared, roots, party), party=party, **expect)

    @classmethod
    def from_shared_many(cls, parts: Sequence[tuple[_Bytes, _Bytes]], party: int, *, domain_size: int, count: int,
                         payload_width: int, ring_bits: int, into: DPFKeys | None = None,
                         blocks: Sequence[int] | None = None) -> list[DPFKeys | InvalidKey]:
        """:meth:`from_shared` of many ``(shared, roots)`` pairs with the given parameters,
        parsed as one batch (:meth:`from_bytes_many`, also for ``into`` and ``blocks``); per
        pair its keys or the :class:`InvalidKey` that refused it."""
        out: list[DPFKeys | InvalidKey | None] = [None] * len(parts)
        joined: list[bytes] = []
        where: list[int] = []
        for i, (shared, roots) in enumerate(parts):
            try:
                joined.append(cls._joined(shared, roots, party))
                where.append(i)
            except InvalidKey as exc:
                out[i] = exc
        parsed = cls.from_bytes_many(joined, domain_size=domain_size, party=party, count=count,
                                     payload_width=payload_width, ring_bits=ring_bits, into=into,
                                     blocks=None if blocks is None else [blocks[i] for i in where])
        for i, got in zip(where, parsed, strict=True):
            out[i] = got
        return cast("list[DPFKeys | InvalidKey]", out)  # every entry is set above

    @staticmethod
    def _joined(shared: _Bytes, roots: _Bytes, party: int) -> bytes:
        """The full serialized keys of ``party`` from a shared part and its roots."""
        if party not in (0, 1):
            raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
        if not isinstance(shared, _Bytes) or not isinstance(roots, _Bytes):
            raise TypeError("shared part and roots must be bytes")
        params, _, k, (ring, width), body = _parse_header(shared, _KIND_SHARED, None, 0, None)
        if len(roots) != 16 * k:
            raise InvalidKey(f"expected {16 * k} bytes of roots for {k} keys, got {len(roots)}")
        return _frame(_KIND_FULL, party, ring, params.domain_size, width, k, roots, body)

    @classmethod
    def from_bytes(
        cls,
        data: _Bytes,
        *,
        domain_size: int | None = None,
        party: int | None = None,
        count: int | None = None,
        payload_width: int | None = None,
        ring_bits: int | None = None,
    ) -> DPFKeys:
        """Parse serialized full keys; optional expectations are checked too.

        Raises
        ------
        InvalidKey
            Whatever is wrong: magic, version, kind, party, ring, sizes or length.
        """
        params, p, k, head, body = _parse_header(data, _KIND_FULL, domain_size, party, count)
        ring, width = head
        if width == 0:
            raise InvalidKey("full keys must have payload width >= 1, got 0")
        try:
            params = DPFParams(params.domain_size, width, ring)
        except (InvalidParameters, TypeError) as exc:
            raise InvalidKey(f"bad key parameters: {exc}") from None
        if payload_width is not None and width != payload_width:
            raise InvalidKey(f"expected payload width {payload_width}, got {width}")
        if ring_bits is not None and ring != ring_bits:
            raise InvalidKey(f"expected ring_bits {ring_bits}, got {ring}")
        if len(body) != k * params.key_bytes:
            raise InvalidKey(f"keys: expected {HEADER_BYTES + k * params.key_bytes} bytes, got {len(data)}")
        path, off = PathKeys._parse_body(params, p, k, body)
        cw = np.frombuffer(body, params.dtype.newbyteorder("<"), k * width, off).reshape(k, width)
        return cls(path, cw.astype(params.dtype), params)


def _parse_header(data: _Bytes, kind: int, domain_size: int | None, party: int | None, count: int | None):  # noqa: ANN202
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"key data must be bytes, got {type(data).__name__}")
    p, _, _, body = framing.open_frame(data, framing.KEYS_WIRE_ID, kind, "key batch", 0, None, 0, None, InvalidKey)
    if len(body) < _PARAMS.size:
        raise InvalidKey(f"key batch too short: {len(body)} bytes after the framing header, the key parameters "
                         f"need {_PARAMS.size}")
    ring, m, width, k = _PARAMS.unpack_from(body)
    if p not in (0, 1) or (party is not None and p != party):
        raise InvalidKey(f"key party {p} where {party if party is not None else '0 or 1'} was expected")
    if domain_size is not None and m != domain_size:
        raise InvalidKey(f"key domain size {m}, expected {domain_size}")
    if count is not None and k != count:
        raise InvalidKey(f"key count {k}, expected {count}")
    if kind == _KIND_PATH and (ring != 0 or width != 0):
        raise InvalidKey("path keys must have ring_bits 0 and width 0 in the header")
    try:
        params = DPFParams(m, 0)
    except InvalidParameters as exc:
        raise InvalidKey(f"bad key domain: {exc}") from None
    return params, p, k, (ring, width), body[_PARAMS.size :]
