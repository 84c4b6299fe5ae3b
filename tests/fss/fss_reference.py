"""An independent, deliberately slow reference for the DPF key format and evaluation.

Written from the specification only (``docs/wire-format.md``, the docstrings of
``secemb/fss/keys.py``, ``prg.py`` and ``convert.py``), with plain Python integers and a fresh
AES-128-ECB ``Cipher`` from ``cryptography``: no secemb code is imported, so the fast
implementation is checked against the written spec rather than against itself.

* a 128-bit word is 16 little-endian bytes (low ``uint64`` first); bit 0 is the control bit;
* ``MMO_name(x) = AES_{K_name}(x) XOR x`` with ``K_name = SHA-256(b"secemb/fss/" + name)[:16]``;
* level step: ``child = MMO_{tree/left|tree/right}(w) XOR (t ? (sCW | tCW_dir) : 0)``;
* ``Convert_tag(s)``: the first ``d`` little-endian ring elements of the blocks
  ``MMO_{convert/tag}(s XOR (j << 64))``, ``j = 0 .. ceil(d k / 128) - 1``;
* share of party ``b``: ``(-1)^b (Convert(s) + t * CW_out) mod 2^k``.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import cache

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

MASK128 = (1 << 128) - 1
# docs/wire-format.md: the framing header (magic, version, protocol, kind, flags, party, peer,
# round, body length), then the key parameters (ring bits, domain size, width, count)
FRAME = struct.Struct("<4sBBBBIIQQ")
PARAMS = struct.Struct("<BQII")


def ref_fixed_key(name: str) -> bytes:
    return hashlib.sha256(b"secemb/fss/" + name.encode()).digest()[:16]


@cache
def _cipher(name: str) -> Cipher:
    return Cipher(algorithms.AES(ref_fixed_key(name)), modes.ECB())


def ref_aes(name: str, block: bytes) -> bytes:
    enc = _cipher(name).encryptor()
    return enc.update(block) + enc.finalize()


def ref_mmo(name: str, w: int) -> int:
    block = w.to_bytes(16, "little")
    return int.from_bytes(ref_aes(name, block), "little") ^ w


@dataclass
class RefKey:
    root: int
    cw_seed: list[int]  # bit 0 cleared
    cw_tl: list[int]
    cw_tr: list[int]
    cw_out: list[int]


@dataclass
class RefBatch:
    kind: int
    party: int
    ring_bits: int
    domain_size: int
    width: int
    keys: list[RefKey]

    @property
    def depth(self) -> int:
        return (self.domain_size - 1).bit_length()


def ref_parse(data: bytes) -> RefBatch:
    """Parse a key batch following the documented layout (no validation beyond lengths)."""
    magic, version, protocol, kind, flags, party, peer, rnd, body_len = FRAME.unpack_from(data)
    assert (magic, version, protocol, flags, peer, rnd) == (b"SEMB", 2, 255, 0, 0, 0)
    assert body_len == len(data) - FRAME.size
    ring, m, width, count = PARAMS.unpack_from(data, FRAME.size)
    n = (m - 1).bit_length()
    nb = (n + 7) // 8
    off = FRAME.size + PARAMS.size
    roots = []
    for _ in range(count):
        roots.append(int.from_bytes(data[off : off + 16], "little"))
        off += 16
    seeds = []
    for _ in range(count):
        row = []
        for _ in range(n):
            row.append(int.from_bytes(data[off : off + 16], "little"))
            off += 16
        seeds.append(row)
    trs = []
    for _ in range(count):
        bits = int.from_bytes(data[off : off + nb], "little")
        trs.append([(bits >> i) & 1 for i in range(n)])
        off += nb
    outs = []
    item = ring // 8 if kind == 1 else 0
    for _ in range(count):
        row = []
        for _ in range(width if kind == 1 else 0):
            row.append(int.from_bytes(data[off : off + item], "little"))
            off += item
        outs.append(row)
    assert off == len(data), (off, len(data))
    keys = [
        RefKey(
            roots[i],
            [s & ~1 for s in seeds[i]],
            [s & 1 for s in seeds[i]],
            trs[i],
            outs[i],
        )
        for i in range(count)
    ]
    return RefBatch(kind, party, ring, m, width, keys)


def ref_leaf(key: RefKey, n: int, x: int) -> int:
    """The leaf word of ``key`` at point ``x`` (control bit in bit 0)."""
    w = key.root
    for i in range(n):
        bit = (x >> (n - 1 - i)) & 1
        t = w & 1
        child = ref_mmo("tree/right" if bit else "tree/left", w)
        if t:
            child ^= key.cw_seed[i] | (key.cw_tr[i] if bit else key.cw_tl[i])
        w = child
    return w


def ref_convert(word: int, width: int, ring_bits: int, tag: str) -> list[int]:
    blocks = -(-width * ring_bits // 128)
    raw = b"".join(
        ref_mmo("convert/" + tag, word ^ (j << 64)).to_bytes(16, "little")
        for j in range(blocks)
    )
    item = ring_bits // 8
    return [
        int.from_bytes(raw[i * item : (i + 1) * item], "little") for i in range(width)
    ]


def ref_share(
    word: int, cw: list[int], party: int, ring_bits: int, tag: str
) -> list[int]:
    mod = 1 << ring_bits
    t = word & 1
    conv = ref_convert(word, len(cw), ring_bits, tag)
    vals = [(c + t * o) % mod for c, o in zip(conv, cw)]
    return [(-v) % mod for v in vals] if party else vals


def ref_eval(batch: RefBatch, key_index: int, x: int, tag: str = "point") -> list[int]:
    """Party ``batch.party``'s share of key ``key_index`` at ``x``."""
    key = batch.keys[key_index]
    leaf = ref_leaf(key, batch.depth, x)
    return ref_share(leaf, key.cw_out, batch.party, batch.ring_bits, tag)
