"""Lossy compression of the item-embedding update, each aggregated with two-server additive
sharing (SecEmb §5.3, Table 3; Appendix J): ``quant8``, ``ternary``, ``svd``, ``colr``.

All four are SecFedRec (:mod:`secemb.protocols.secfedrec`) with the user's *full* sparse
gradient ``G`` (m x w, zeros outside its rows) compressed before upload; the dense gradient
goes uncompressed as 32-bit additive shares, and the model is downloaded in full.  As in the
paper, compression applies to the item embeddings only.  Float values come from the loop's
fixed-point ring (``frac_bits``, default 16) and go back into it after reconstruction, so the
loop runs them unchanged (``--verify`` does not apply: they are lossy by design).

``quant8`` -- 8-bit linear quantization, stochastic rounding
    ``q = round_stoch(G / s)`` clipped to ``[-127, 127]`` with a **public** per-column scale
    ``s`` (w values, sent by server 0 with the model).  ``q`` is additively shared in
    ``Z_2^16``: a sum of up to 258 users' 8-bit values needs 16 bits, and shares must live in
    the ring of the sum.  Upload ``2 m w`` bytes per server (the paper counts 8 bits per value,
    R.R. 4; measured R.R. is about 2 -- the extra bits are what makes the sum correct).
``ternary`` -- TernGrad (Wen et al., 2017)
    ``t in {-1, 0, 1}`` with ``P(t = sign g) = min(|g| / s, 1)``, ``s`` the public per-column
    scale; shared in ``Z_2^8`` (sums of up to 127 users fit), ``m w`` bytes per server.
``svd`` -- truncated SVD, rank ``r`` (Table 10)
    The user sends additive shares of ``U_r S_r`` (m x r) and ``V_r`` (r x w) in ``Z_2^32``
    with 24 fractional bits.  A sum of products is not a product of sums, so the servers cannot
    add factors: server 1 forwards its per-user factor shares with its aggregate share and
    server 0 reconstructs **each user's rank-r update** -- SVD compression is *not* compatible
    with secure aggregation without secure multiplication, which this baseline does not
    implement (docs/baselines.md states the leak).
``colr`` -- CoLR (Nguyen et al., 2024)
    A public random ``B_t`` (r x w', orthonormal rows over the trainable columns, seeded by the
    round id) is shared by all users of round ``t``; each user sends shares of ``G B_t^T``
    (m x r, ``Z_2^32``, 24 fractional bits).  Linear, hence exactly aggregatable: server 0
    reconstructs ``(sum_u G_u B_t^T) B_t``, the projection of the true sum.

The public scale of ``quant8``/``ternary`` is server 0's view of the previous round's aggregate:
``s_c = max_j |sum_{t-1}[j, c]| / L`` (L = 127 for quant8, 1 for ternary), floored at
``min_scale``; round 0 uses ``initial_scale``.  It reveals nothing beyond the aggregate server 0
already learns.  ``frozen_columns`` (trailing public constant columns such as item feature
codes, :mod:`secemb.models.features`) are never projected by CoLR.

Cost: a user compresses its own rows only (every scheme maps zero rows to zero; stochastic
rounding draws uniforms for the user's rows only, since a zero rounds to zero whatever its
uniform -- tests/protocols/test_lossy_fast_path.py compares with whole-table rounding), and the
full-size share 0 of the compressed update is the AES-CTR expansion of a fresh 16-byte seed
(:func:`secemb.randomness.expand_seed`, as SecEmb's seeded shares) instead of m w fresh
OS-random words.

Errors (documented bounds, tested): quant8/ternary are unbiased (stochastic rounding) with
per-element error at most ``s_c`` (plus clipping of values beyond ``127 s_c`` / ``s_c``); svd
and colr are exact projections up to the 2^-24 fixed-point step.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from secemb.errors import InvalidParameters, ProtocolError, check_float, check_int
from secemb.options import DEFAULTS
from secemb.protocols.base import Capabilities, RoundConfig
from secemb.protocols.secfedrec import FullModelProtocol, FullModelServer, FullModelUser, _accumulate
from secemb.protocols.wire import array_bytes, read_array
from secemb.randomness import SEED_BYTES, RandomBytes, expand_seed
from secemb.ring import FixedPoint
from secemb.sharing import share

__all__ = [
    "LOSSY_PROTOCOLS",
    "TABLE10_RANKS",
    "ColrProtocol",
    "Quant8Protocol",
    "SvdProtocol",
    "TernaryProtocol",
    "colr_basis",
    "lossy_options",
]

#: Table 10: rank of SVD and CoLR per model and dataset
TABLE10_RANKS = {
    "mf": {"ml-100k": 12, "ml-1m": 10, "ml-10m": 4, "ml-25m": 4, "yelp": 4},
    "ncf": {"ml-100k": 10, "ml-1m": 8, "ml-10m": 4, "ml-25m": 4, "yelp": 4},
    "fm": {"ml-100k": 12, "ml-1m": 10, "ml-10m": 4, "ml-25m": 4, "yelp": 4},
    "deepfm": {"ml-100k": 12, "ml-1m": 10, "ml-10m": 4, "ml-25m": 4, "yelp": 4},
    # Appendix K.6 (sequential models): 8 on ML-1M, 4 on Amazon; ML-100K as ML-1M
    "sasrec": {"ml-100k": 8, "ml-1m": 8, "amazon": 4},
    "caser": {"ml-100k": 8, "ml-1m": 8, "amazon": 4},
}
FACTOR_FRAC_BITS = 24
#: the lossy baselines' protocol names
LOSSY_PROTOCOLS = ("quant8", "ternary", "svd", "colr")


def lossy_options(protocol: str, model: Any, dataset: str) -> dict[str, Any]:
    """Options a lossy baseline needs from the model it trains: ``frozen_columns`` (the model's
    packed feature-code columns, which CoLR must not project) and ``rank`` (Table 10 for the
    model and dataset, 4 -- the large-dataset rank -- where Table 10 has no entry).  ``{}``
    for every other protocol."""
    if protocol not in LOSSY_PROTOCOLS:
        return {}
    ranks = TABLE10_RANKS.get(model.name, {})
    return {"frozen_columns": int(getattr(model, "frozen_columns", 0)), "rank": ranks.get(dataset, 4)}


def _share_rows(m: int, w: int, items: np.ndarray, values: np.ndarray, dtype: np.dtype,
                rng: RandomBytes) -> tuple[np.ndarray, np.ndarray]:
    """Additive shares in ``Z_2^(8 * itemsize)`` of the (m, w) signed-integer matrix that is
    ``values`` (float64 with integer values, (len(items), w)) at rows ``items`` and zero
    elsewhere, flattened.  Share 0 is the expansion of a fresh 16-byte seed from ``rng``
    (AES-CTR, :func:`secemb.randomness.expand_seed`, as SecEmb's own seeded shares)."""
    full = np.zeros((m, w), dtype)
    full[items] = values.astype(np.int64).astype(dtype)
    r = expand_seed(rng(SEED_BYTES), (m * w,), dtype)
    return r, full.reshape(-1) - r


def _share_words(x: np.ndarray, rng: RandomBytes) -> tuple[np.ndarray, np.ndarray]:
    """Additive shares of ring words ``x`` (1-D), share 0 expanded from a 16-byte seed."""
    r = expand_seed(rng(SEED_BYTES), x.shape, x.dtype)
    return r, x - r


def _stochastic_round(x: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """``floor(x) + [uniform < x - floor(x)]``: unbiased rounding of ``x`` with the uniforms
    ``uniform`` in [0, 1) of ``x``'s shape."""
    lo = np.floor(x)
    return lo + (uniform < (x - lo))


def colr_basis(round_id: int, rank: int, width: int, seed: int = 0) -> np.ndarray:
    """CoLR's public ``B_t``: float64 (rank, width) with orthonormal rows, from the round id
    (a read-only array: computed once per round and argument set, then reused)."""
    return _colr_basis(round_id, rank, width, seed)


@functools.lru_cache(maxsize=4)
def _colr_basis(round_id: int, rank: int, width: int, seed: int) -> np.ndarray:
    g = np.random.default_rng([seed, 0xC0112, round_id])
    a = g.standard_normal((width, max(rank, 1)))
    q, _ = np.linalg.qr(a)
    basis = q[:, :rank].T.copy()
    basis.flags.writeable = False
    return basis


class _LossyUser(FullModelUser):
    proto: _LossyProtocol

    def __init__(self, config: RoundConfig, *, proto: _LossyProtocol, _rng: RandomBytes | None = None) -> None:
        super().__init__(config, proto=proto, _rng=_rng)
        self._scale: np.ndarray | None = None
        # stochastic rounding is training randomness; it comes from the OS per user-round so
        # the server cannot predict it, and tests inject _rng for reproducibility
        seed = int.from_bytes(self._rng(8), "little")
        self._np_rng = np.random.default_rng(seed)

    @property
    def kind(self) -> str:
        return self.proto.kind

    def read_extra(self, body: memoryview) -> None:
        """quant8/ternary: the public per-column scale, the reply's last ``8 w`` bytes."""
        scale_bytes = self.proto.scale_bytes(self.config)
        if scale_bytes:
            self._scale = np.frombuffer(body, "<f8", self.config.width, len(body) - scale_bytes).astype(np.float64)

    def _touched(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The user's item rows (sorted, unique) and its gradient there, decoded to float64
        ((len(items), w)); the full gradient (:meth:`full_gradient`) is zero elsewhere, so
        every compression below computes on these rows only."""
        full = self.full_gradient(rows)
        idx = self._requested()
        items = np.unique(idx[idx >= 0])
        return items, FixedPoint(self.config.ring_bits, self.proto.frac_bits).decode(full[items])

    def encode_upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        """The compressed item update's shares, then the dense gradient's.

        Work is on the user's own rows (zero rows compress to zero under every scheme), so
        it costs O(rows w) plus the O(m w) share of the full-size upload.  Stochastic
        rounding draws one uniform per entry of those rows (row-major, items ascending) from
        the user's generator: rounding a zero is 0 whatever its uniform, so this is the
        whole-table rounding with the uniforms of the zero rows left undrawn (tests compare
        both given the same uniforms on the user's rows)."""
        cfg = self.config
        m, w = cfg.num_items, cfg.width
        items, g = self._touched(rows)
        d0, d1 = share(dense, _rng=self._rng)
        tail0, tail1 = array_bytes(d0), array_bytes(d1)
        if self.kind in ("quant8", "ternary"):
            assert self._scale is not None  # read_extra (retrieval_result) sets it
            uniform = self._np_rng.random((items.size, w))
            if self.kind == "quant8":
                q = np.clip(_stochastic_round(g / self._scale, uniform), -127, 127)
                s0, s1 = _share_rows(m, w, items, q, np.dtype(np.uint16), self._rng)
            else:
                t = np.sign(g) * (uniform < np.minimum(np.abs(g) / self._scale, 1.0))
                s0, s1 = _share_rows(m, w, items, t, np.dtype(np.uint8), self._rng)
            return array_bytes(s0) + tail0, array_bytes(s1) + tail1
        ffp = FixedPoint(cfg.ring_bits, FACTOR_FRAC_BITS)
        r, wt = self.proto.rank, w - self.proto.frozen_columns
        if self.kind == "colr":
            # the whole-table product: BLAS sums a row subset's products in another order
            gf = np.zeros((m, wt))
            gf[items] = g[:, :wt]
            a = gf @ colr_basis(cfg.round_id, r, wt, self.proto.basis_seed).T
            s0, s1 = _share_words(ffp.encode(a).reshape(-1), self._rng)
            return array_bytes(s0) + tail0, array_bytes(s1) + tail1
        # svd: factors of the user's own gradient (U is zero outside its nonzero rows)
        keep = np.any(g != 0, axis=1)
        nz = items[keep]
        u, s, vt = np.linalg.svd(g[keep], full_matrices=False)
        k = min(r, s.size)
        us = np.zeros((m, r))
        v = np.zeros((r, w))
        us[nz, :k] = u[:, :k] * s[:k]
        v[:k] = vt[:k]
        v[:, np.all(g == 0, axis=0)] = 0.0  # columns that are zero stay exactly zero
        fac = np.concatenate([ffp.encode(us).reshape(-1), ffp.encode(v).reshape(-1)])
        s0, s1 = _share_words(fac, self._rng)
        return array_bytes(s0) + tail0, array_bytes(s1) + tail1


class _LossyServer(FullModelServer):
    proto: _LossyProtocol

    def __init__(self, party: int, *, proto: _LossyProtocol) -> None:
        super().__init__(party, proto=proto)
        self._scale: np.ndarray | None = None

    @property
    def kind(self) -> str:
        return self.proto.kind

    def _compressed_shape(self) -> tuple[tuple[int, ...], np.dtype]:
        return self.proto.compressed_shape(self._cfg())

    def reset_state(self, config: RoundConfig) -> None:
        shape, dt = self._compressed_shape()
        self._comp = np.zeros(shape, dt)
        self._dense = np.zeros(config.dense_size, config.dtype)
        self._per_user: dict[int, np.ndarray] = {}
        if self._scale is None or self._scale.size != config.width:
            self._scale = np.full(config.width, self.proto.initial_scale)

    def extra_reply(self) -> bytes:
        if self.kind not in ("quant8", "ternary"):
            return b""
        assert self._scale is not None  # reset_state (begin_round) sets it
        return self._scale.astype("<f8").tobytes()

    def absorb(self, user_id: int, body: memoryview, *, retract: bool = False) -> None:
        cfg = self._cfg()
        shape, dt = self._compressed_shape()
        comp, off = read_array(body, 0, dt, shape)
        dense = read_array(body, off, cfg.dtype, (cfg.dense_size,))[0]
        limit = {"quant8": 258, "ternary": 127}.get(self.kind)
        if not retract and limit is not None and len(self._uploaded) + 1 > limit:
            raise ProtocolError(f"{self.kind}: at most {limit} users per round fit the share ring")
        if self.kind != "svd":
            _accumulate(self._comp, comp, retract)
        elif retract:
            del self._per_user[user_id]
        else:
            self._per_user[user_id] = comp
        _accumulate(self._dense, dense, retract)

    def share_body(self) -> bytes:
        if self.kind == "svd":  # per-user factor shares, in user-id order (see module docstring)
            return b"".join(array_bytes(self._per_user[u]) for u in sorted(self._uploaded)) + array_bytes(self._dense)
        return array_bytes(self._comp) + array_bytes(self._dense)

    def reconstruct(self, peer: memoryview) -> tuple[np.ndarray, np.ndarray]:
        cfg = self._cfg()
        fp = FixedPoint(cfg.ring_bits, self.proto.frac_bits)
        ffp = FixedPoint(cfg.ring_bits, FACTOR_FRAC_BITS)
        shape, dt = self._compressed_shape()
        m, w, r = cfg.num_items, cfg.width, self.proto.rank
        users = sorted(self._uploaded)
        if self.kind == "svd":
            g = np.zeros((m, w))
            off = 0
            for u in users:
                other, off = read_array(peer, off, dt, shape)
                fac = ffp.decode(self._per_user[u] + other)
                g += fac[: m * r].reshape(m, r) @ fac[m * r :].reshape(r, w)
        else:
            other, off = read_array(peer, 0, dt, shape)
            total = self._comp + other
            if self.kind in ("quant8", "ternary"):
                signed = total.view(np.int16 if self.kind == "quant8" else np.int8).astype(np.float64)
                g = (signed.reshape(m, w) * self._scale)
            else:  # colr
                wt = w - self.proto.frozen_columns
                a = ffp.decode(total).reshape(m, r)
                g = np.zeros((m, w))
                g[:, :wt] = a @ colr_basis(cfg.round_id, r, wt, self.proto.basis_seed)
        dense_peer = read_array(peer, off, cfg.dtype, (cfg.dense_size,))[0]
        if self.kind in ("quant8", "ternary"):
            level = 127.0 if self.kind == "quant8" else 1.0
            peak = np.abs(g).max(axis=0) / level
            self._scale = np.maximum(np.where(peak > 0, peak, self._scale), self.proto.min_scale)
        return fp.encode(g), self._dense + dense_peer


_OPTIONS = ("rank", "frozen_columns", "frac_bits", "initial_scale", "min_scale", "basis_seed")


class _LossyProtocol(FullModelProtocol):
    kind = ""
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=True, options=_OPTIONS)

    def __init__(self, layout: str = "full", relay: bool = False, expansion: float = DEFAULTS.expansion,
                 layout_seed: int = 0, *,
                 rank: int = 12, frozen_columns: int = 0, frac_bits: int = 16, initial_scale: float = 4e-4,
                 min_scale: float = 1e-7, basis_seed: int = 0) -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        rank = check_int("rank", rank, low=1)
        frozen_columns = check_int("frozen_columns", frozen_columns, low=0)
        for nm, v in (("initial_scale", initial_scale), ("min_scale", min_scale)):
            check_float(nm, v, above=0)
        self.rank, self.frozen_columns, self.frac_bits = rank, frozen_columns, int(frac_bits)
        self.initial_scale, self.min_scale, self.basis_seed = float(initial_scale), float(min_scale), int(basis_seed)

    def compressed_shape(self, rc: RoundConfig) -> tuple[tuple[int, ...], np.dtype]:
        """Shape and dtype of one user's compressed sparse update (see the module docstring)."""
        m, w, r = rc.num_items, rc.width, self.rank
        if self.kind == "quant8":
            return (m * w,), np.dtype(np.uint16)
        if self.kind == "ternary":
            return (m * w,), np.dtype(np.uint8)
        if self.kind == "colr":
            return (m * r,), rc.dtype
        return (m * r + r * w,), rc.dtype

    def scale_bytes(self, rc: RoundConfig) -> int:
        """quant8/ternary: the public per-column scale server 0 appends to the table (f64)."""
        return 8 * rc.width if self.kind in ("quant8", "ternary") else 0

    def reply_body_bytes(self, rc: RoundConfig) -> int:
        return super().reply_body_bytes(rc) + self.scale_bytes(rc)

    def upload_body_bytes(self, rc: RoundConfig, party: int) -> int:
        """The compressed update's share, then the dense gradient's."""
        shape, dt = self.compressed_shape(rc)
        return shape[0] * dt.itemsize + rc.dense_size * rc.dtype.itemsize

    def share_body_bytes(self, rc: RoundConfig, num_users: int) -> int:
        """The summed compressed shares (svd: one per user, ``num_users`` of them), then the
        dense sum."""
        shape, dt = self.compressed_shape(rc)
        n = num_users if self.kind == "svd" else 1
        return n * shape[0] * dt.itemsize + rc.dense_size * rc.dtype.itemsize

    def make_server(self, party: int, *, peer_key: bytes | None = None) -> _LossyServer:
        """Server ``party``; its servers share no key (``peer_key`` is ignored)."""
        return _LossyServer(party, proto=self)

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> _LossyUser:
        if self.kind == "colr" and config.width - self.frozen_columns < self.rank:
            raise InvalidParameters(
                f"colr rank {self.rank} exceeds the {config.width - self.frozen_columns} trainable columns"
            )
        return _LossyUser(config, proto=self, _rng=_rng)


#: quant8 and ternary do not run in the server deployment: server 0's public scale is state
#: carried across rounds that a server's journal does not restore, and stochastic rounding
#: draws OS randomness, so a networked run could not reproduce the in-process model
_STATEFUL = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=False, options=_OPTIONS)


class Quant8Protocol(_LossyProtocol):
    """8-bit stochastic quantization, shares in Z_2^16."""

    kind = name = "quant8"
    capabilities = _STATEFUL


class TernaryProtocol(_LossyProtocol):
    """TernGrad ternary quantization, shares in Z_2^8."""

    kind = name = "ternary"
    capabilities = _STATEFUL


class SvdProtocol(_LossyProtocol):
    """Rank-r SVD factors (server 0 reconstructs each user's low-rank update)."""

    kind = name = "svd"


class ColrProtocol(_LossyProtocol):
    """CoLR: projection on a public rank-r basis per round; exactly aggregatable."""

    kind = name = "colr"


