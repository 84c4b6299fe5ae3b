"""Kvsagg -- secure aggregation of distributed key-value sets, the sparse baseline of SecEmb's
Tables 11 and 13 (Appendix J).

SecEmb's paper names the baseline "Kvsagg" without a reference entry or parameters.  The
published construction of that name is KVSAgg (Y. Wu, S. Dong, Y. Zhou, Y. Zhao, F. Fu,
T. Yang, C. Niu, F. Wu, B. Cui: "KVSAgg: Secure Aggregation of Distributed Key-Value Sets",
ICDE 2023): each client encodes its sparse key-value set into a fixed-size invertible sketch,
the sketches are summed by an ordinary secure aggregation, and the server decodes the summed
sketch into the aggregate key-value set.  What SecEmb's Appendix J says of it -- it "exposes
the exact number of clients who rated each item within a batch" and "has a minor failure rate,
occasionally yielding inaccurate aggregation results" -- is what such a sketch does, and is
what this module implements.  The sketch here is an invertible Bloom lookup table
(Goodrich and Mitzenmacher, 2011) with a key-count field; docs/baselines.md states the
parameters chosen, since neither paper's are given to us.

Per round and user (``m`` items, row width ``w``, dense size ``P``, ring ``Z_2^k``):

* download: the whole table, as SecFedRec (:mod:`secemb.protocols.secfedrec`; Table 11:
  no reduced download).
* upload: the user's key-value set is its non-zero gradient rows ``{(x, g_x)}``.  Each key goes
  to ``K = 3`` cells of a sketch of ``C`` cells, one in each third of the sketch (public hash
  functions of the round).  A cell holds ``count`` (keys in it), ``keysum`` (sum of keys),
  ``checksum`` (sum of a public 64-bit hash ``h(x)`` of its keys) -- these three in
  ``Z_2^64`` -- and ``valsum`` (sum of the keys' rows, ``w`` ring words).  The user sends one
  additive share of ``[count, keysum, checksum (3 C words, uint64), valsum (C w ring words),
  dense gradient (P ring words)]`` to each server: ``24 C + (C w + P) k / 8`` bytes each.
* aggregate: both servers add the shares; server 1 sends its sums to server 0, which
  reconstructs the round's summed sketch and *peels* it: a cell is pure when it holds a
  single key ``x`` (contributed by ``c`` users): ``keysum = c x``, ``x`` hashes to the cell
  and ``checksum = c h(x) mod 2^64``.  The pure cells' keys get their ``valsum`` -- the exact
  ring sum of the users' rows -- and are removed from their other cells, until no cell is
  pure.  Every pure cell of an iteration is peeled at once (numpy over cells).

Sizes: ``C = 3 ceil(load * capacity / 3)``, ``capacity`` the public bound on distinct keys in a
round's aggregate (0: ``m``, which always holds), ``load`` cells per key (default 1.3; the
peeling threshold of a 3-hash table is 1.222 cells per key).

What server 0 learns beyond the aggregate: for every decoded row the number ``c`` of users of
the round with a non-zero gradient for it (the count field is needed to tell a pure cell), and
for an undecoded remainder the cells' summed fields.  Failure: when the peel stops with cells
still non-zero (too many keys for the sketch, or an unlucky hash graph), the keys left in them
are **lost for the round** (their rows get no update); the server counts such rounds
(:attr:`KvsaggServer.decode_failures`).  With the decode complete, the aggregate equals the
plaintext ring sum bit for bit.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from secemb.errors import check_float, check_int
from secemb.options import DEFAULTS
from secemb.protocols.base import Capabilities, RoundConfig
from secemb.protocols.secfedrec import FullModelProtocol, FullModelServer, FullModelUser, _accumulate
from secemb.protocols.wire import array_bytes, read_array
from secemb.sharing import share

__all__ = ["KvsaggProtocol", "KvsaggServer", "KvsaggUser", "Sketch", "peel", "sketch_layout"]

#: hash functions per key (cells a key is added to)
NUM_HASHES = 3
_U64 = np.dtype(np.uint64)


@lru_cache(maxsize=8)
def sketch_layout(num_items: int, cells: int, seed: int, round_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The public hash functions of a round: ``(positions (m, 3) int64, check (m,) uint64)``.

    Key ``x`` goes to cell ``positions[x, j]`` in third ``j`` of the ``cells`` (a multiple of
    3), so a key's three cells are distinct; ``check[x]`` is its 64-bit check hash.  Drawn from
    a numpy Generator seeded by ``(seed, round_id)``: public, like the cuckoo layout, and fresh
    every round so that a peeling failure does not repeat.
    """
    third = cells // NUM_HASHES
    g = np.random.default_rng([seed, 0x4B5653, round_id])
    pos = g.integers(0, third, size=(num_items, NUM_HASHES), dtype=np.int64)
    pos += np.arange(NUM_HASHES, dtype=np.int64) * third
    check = g.integers(0, 2**64, size=num_items, dtype=np.uint64, endpoint=False)
    pos.flags.writeable = check.flags.writeable = False
    return pos, check


class Sketch:
    """A key-value sketch of ``cells`` cells: ``fields`` uint64 ``(3, cells)`` (count, keysum,
    checksum) and ``values`` ring ``(cells, w)``."""

    def __init__(self, fields: np.ndarray, values: np.ndarray) -> None:
        self.fields, self.values = fields, values

    @classmethod
    def encode(cls, keys: np.ndarray, rows: np.ndarray, cells: int, pos: np.ndarray, check: np.ndarray) -> Sketch:
        """The sketch of the key-value set ``{(keys[i], rows[i])}`` (distinct int64 keys, ring
        rows ``(len(keys), w)``) under the round's ``pos``/``check``."""
        fields = np.zeros((3, cells), _U64)
        values = np.zeros((cells, rows.shape[1]), rows.dtype)
        p = pos[keys].reshape(-1)
        np.add.at(fields[0], p, np.uint64(1))
        np.add.at(fields[1], p, np.repeat(keys.astype(_U64), NUM_HASHES))
        np.add.at(fields[2], p, np.repeat(check[keys], NUM_HASHES))
        np.add.at(values, p, np.repeat(rows, NUM_HASHES, axis=0))
        return cls(fields, values)


def peel(sketch: Sketch, num_items: int, pos: np.ndarray, check: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Decode a summed sketch (consumed: its cells end as what could not be decoded).

    Returns ``(rows (m, w) ring, counts (m,) int64, undecoded_cells)``: the decoded keys' ring
    sums (zero rows for keys not decoded), how many users contributed each decoded key, and the
    number of cells left non-zero (0: the decode is complete and exact).
    """
    cnt, ksum, csum = sketch.fields
    vals = sketch.values
    cells = cnt.size
    out = np.zeros((num_items, vals.shape[1]), vals.dtype)
    counts = np.zeros(num_items, np.int64)
    here = np.arange(cells, dtype=np.int64)
    while True:
        nz = cnt != 0
        c = np.where(nz, cnt, np.uint64(1))
        x = ksum // c
        pure = nz & (ksum % c == 0) & (x < np.uint64(num_items))
        xi = np.where(pure, x, np.uint64(0)).astype(np.int64)
        pure &= np.any(pos[xi] == here[:, None], axis=1)
        pure &= csum == c * check[xi]
        found = np.flatnonzero(pure)
        if found.size == 0:
            break
        keys, first = np.unique(xi[found], return_index=True)  # a key can be pure in several cells
        at = found[first]
        kc = cnt[at].copy()
        kv = vals[at].copy()
        out[keys] = kv
        counts[keys] = kc.astype(np.int64)
        p = pos[keys].reshape(-1)
        np.subtract.at(cnt, p, np.repeat(kc, NUM_HASHES))
        np.subtract.at(ksum, p, np.repeat(kc * keys.astype(_U64), NUM_HASHES))
        np.subtract.at(csum, p, np.repeat(kc * check[keys], NUM_HASHES))
        np.subtract.at(vals, p, np.repeat(kv, NUM_HASHES, axis=0))
    left = int(np.count_nonzero(((cnt | ksum | csum) != 0) | np.any(vals != 0, axis=1)))
    return out, counts, left


class KvsaggUser(FullModelUser):
    """A user that uploads shares of the sketch of its non-zero gradient rows."""

    proto: KvsaggProtocol

    def encode_upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        full = self.full_gradient(rows)
        keys = np.flatnonzero(np.any(full != 0, axis=1)).astype(np.int64)
        cells = self.proto.cells(cfg)
        pos, check = sketch_layout(cfg.num_items, cells, self.proto.layout_seed, cfg.round_id)
        sk = Sketch.encode(keys, full[keys], cells, pos, check)
        f0, f1 = share(sk.fields.reshape(-1), _rng=self._rng)
        v0, v1 = share(np.concatenate([sk.values.reshape(-1), dense]), _rng=self._rng)
        return array_bytes(f0) + array_bytes(v0), array_bytes(f1) + array_bytes(v1)


class KvsaggServer(FullModelServer):
    """Server ``party``: adds sketch shares; server 0 peels the summed sketch.

    Attributes
    ----------
    decode_failures: rounds whose peel left cells undecoded (their keys got no update).
    last_counts: server 0, after :meth:`combine`: users per decoded row in the last round
        (what Kvsagg reveals beyond the aggregate; int64 ``(m,)``).
    """

    proto: KvsaggProtocol

    def __init__(self, party: int, *, proto: KvsaggProtocol) -> None:
        super().__init__(party, proto=proto)
        self.decode_failures = 0
        self.last_counts: np.ndarray | None = None

    def reset_state(self, config: RoundConfig) -> None:
        cells = self.proto.cells(config)
        self._fields = np.zeros(3 * cells, _U64)
        self._acc = np.zeros(cells * config.width + config.dense_size, config.dtype)

    def absorb(self, user_id: int, body: memoryview, *, retract: bool = False) -> None:
        fields, off = read_array(body, 0, _U64, self._fields.shape)
        _accumulate(self._fields, fields, retract)
        _accumulate(self._acc, read_array(body, off, self._acc.dtype, self._acc.shape)[0], retract)

    def share_body(self) -> bytes:
        return array_bytes(self._fields) + array_bytes(self._acc)

    def reconstruct(self, peer: memoryview) -> tuple[np.ndarray, np.ndarray]:
        cfg = self._cfg()
        cells = self.proto.cells(cfg)
        fields, off = read_array(peer, 0, _U64, self._fields.shape)
        acc = read_array(peer, off, cfg.dtype, self._acc.shape)[0]
        total = self._acc + acc
        split = cells * cfg.width
        sk = Sketch((self._fields + fields).reshape(3, cells), total[:split].reshape(cells, cfg.width))
        pos, check = sketch_layout(cfg.num_items, cells, self.proto.layout_seed, cfg.round_id)
        rows, self.last_counts, left = peel(sk, cfg.num_items, pos, check)
        if left:
            self.decode_failures += 1
        return rows, total[split:]


class KvsaggProtocol(FullModelProtocol):
    """Factory of Kvsagg roles.

    ``capacity``: public bound on the distinct rows of a round's aggregate (0: ``m``);
    ``load``: sketch cells per key (``>= 1``).  No central DP: the aggregate share is a sketch,
    not the ``(m, w)`` ring share the servers' noise is added to.
    """

    name = "kvsagg"
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=True, options=("capacity", "load"))
    user_cls = KvsaggUser
    server_cls = KvsaggServer

    def __init__(self, layout: str = "full", relay: bool = False, expansion: float = DEFAULTS.expansion,
                 layout_seed: int = 0,
                 *, capacity: int = 0, load: float = 1.3) -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        capacity = check_int("capacity (0: every item)", capacity, low=0)
        self.capacity, self.load = capacity, check_float("load (sketch cells per key)", load, low=1)

    def cells(self, rc: RoundConfig) -> int:
        """Sketch cells of a round: ``3 ceil(load min(capacity or m, m) / 3)``."""
        keys = min(self.capacity or rc.num_items, rc.num_items)
        return NUM_HASHES * max(1, math.ceil(self.load * keys / NUM_HASHES))

    def upload_body_bytes(self, rc: RoundConfig, party: int) -> int:
        """Shares of the three uint64 fields (``3 C``), then of values and dense gradient."""
        c = self.cells(rc)
        return 3 * c * 8 + (c * rc.width + rc.dense_size) * rc.dtype.itemsize

    def share_body_bytes(self, rc: RoundConfig, num_users: int) -> int:
        """The summed sketch shares, laid out as the upload."""
        return self.upload_body_bytes(rc, 0)
