"""The lossy baselines' row-restricted encoding (issue 15) gives the aggregates of the
whole-table encoding it replaced, bit for bit, over several rounds with seeded users.

``_WholeTableUser`` is the previous implementation, kept here as the reference: it decodes the
user's full (m, w) gradient and compresses every entry (quant8/ternary round all m w values
with one uniform each; colr projects the whole table; svd finds the nonzero rows of the full
matrix).  The new path draws uniforms for the user's rows only (``rng.random((rows, w))``, items
ascending); the reference gets those same uniforms on the user's rows and *other* random
uniforms everywhere else -- which must not matter, since a zero rounds to zero.  Shares differ
(the new path expands share 0 from a seed), so the comparison is on what the servers
reconstruct -- the decoded aggregate -- and on the public scale they carry forward.
"""

import numpy as np
import pytest

from secemb.protocols import get_protocol
from secemb.protocols.lossy import FACTOR_FRAC_BITS, _LossyUser, colr_basis
from secemb.protocols.wire import array_bytes
from secemb.randomness import CtrDrbg, random_words
from secemb.ring import FixedPoint
from secemb.sharing import share

FP = FixedPoint(32, 16)


def _share_small(x, dtype, rng):
    r = random_words(rng, x.shape, dtype)
    return r, (x.astype(np.int64).astype(dtype) - r).astype(dtype)


class _WholeTableUser(_LossyUser):
    def encode_upload(self, rows, dense):
        cfg = self.config
        fp = FixedPoint(cfg.ring_bits, self.proto.frac_bits)
        g = fp.decode(self.full_gradient(rows))
        d0, d1 = share(dense, _rng=self._rng)
        tail0, tail1 = array_bytes(d0), array_bytes(d1)
        if self.kind in ("quant8", "ternary"):
            idx = self._requested()
            items = np.unique(idx[idx >= 0])
            uniform = np.random.default_rng(12345 + cfg.round_id).random(g.shape)  # off the user's rows
            uniform[items] = self._np_rng.random((items.size, cfg.width))
        if self.kind == "quant8":
            x = g / self._scale
            lo = np.floor(x)
            q = np.clip(lo + (uniform < (x - lo)), -127, 127)
            s0, s1 = _share_small(q, np.dtype(np.uint16), self._rng)
            return array_bytes(s0) + tail0, array_bytes(s1) + tail1
        if self.kind == "ternary":
            p = np.minimum(np.abs(g) / self._scale, 1.0)
            t = np.sign(g) * (uniform < p)
            s0, s1 = _share_small(t, np.dtype(np.uint8), self._rng)
            return array_bytes(s0) + tail0, array_bytes(s1) + tail1
        ffp = FixedPoint(cfg.ring_bits, FACTOR_FRAC_BITS)
        r, wt = self.proto.rank, cfg.width - self.proto.frozen_columns
        if self.kind == "colr":
            a = g[:, :wt] @ colr_basis(cfg.round_id, r, wt, self.proto.basis_seed).T
            s0, s1 = share(ffp.encode(a), _rng=self._rng)
            return array_bytes(s0) + tail0, array_bytes(s1) + tail1
        nz = np.flatnonzero(np.any(g != 0, axis=1))
        u, s, vt = np.linalg.svd(g[nz], full_matrices=False)
        k = min(r, s.size)
        us = np.zeros((cfg.num_items, r))
        v = np.zeros((r, cfg.width))
        us[nz, :k] = u[:, :k] * s[:k]
        v[:k] = vt[:k]
        v[:, np.all(g == 0, axis=0)] = 0.0
        fac = np.concatenate([ffp.encode(us).reshape(-1), ffp.encode(v).reshape(-1)])
        s0, s1 = share(fac, _rng=self._rng)
        return array_bytes(s0) + tail0, array_bytes(s1) + tail1


def _rounds(name, reference, *, m=300, w=16, users=12, rounds=3, frozen=0):
    """``rounds`` rounds of ``name`` by hand with the same seeded users and gradients; per round
    the ring aggregate server 0 reconstructs (sparse, dense) and server 0's next public scale."""
    proto = get_protocol(name, rank=4, frozen_columns=frozen, initial_scale=2e-3)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    g = np.random.default_rng(7)
    out = []
    for t in range(rounds):
        slots = 40
        rc = proto.round_config(t, m, w, 3, slots)
        table = np.zeros((m, w), np.uint32)
        s0.begin_round(rc, table)
        s1.begin_round(rc, table)
        for u in range(users):
            rng = CtrDrbg(bytes([t, u]) * 8)
            user = _WholeTableUser(rc, proto=proto, _rng=rng) if reference else proto.make_user(rc, _rng=rng)
            k = int(g.integers(5, slots + 1))
            idx = np.full(slots, -1) if rc.layout == "cuckoo" else np.zeros(slots, np.int64)
            items = g.choice(m, k, replace=False)
            idx[:k] = items
            if rc.layout != "cuckoo":  # full layout: every slot is a real row; pad with repeats
                idx[k:] = items[0]
            rows = g.normal(0, 0.01, (slots, w))
            rows[k:] = rows[0] if rc.layout != "cuckoo" else 0
            if frozen:
                rows[:, w - frozen:] = 0
            rows[:, 3] = 0  # an all-zero column (svd keeps it exactly zero)
            q0, q1 = user.retrieval_request(idx)
            user.retrieval_result(s0.handle_retrieval(u, q0), s1.handle_retrieval(u, q1))
            u0, u1 = user.upload(FP.encode(rows), FP.encode(g.normal(0, 0.1, 3)))
            s0.handle_upload(u, u0)
            s1.handle_upload(u, u1)
        sp, de = s0.combine(s1.aggregate_share())
        out.append((sp.copy(), de.copy(), None if s0._scale is None else s0._scale.copy()))
    return out


@pytest.mark.parametrize("name", ["quant8", "ternary", "svd", "colr"])
def test_row_encoding_equals_whole_table_encoding(name):
    frozen = 2 if name == "colr" else 0
    new = _rounds(name, reference=False, frozen=frozen)
    old = _rounds(name, reference=True, frozen=frozen)
    for (sp, de, sc), (osp, ode, osc) in zip(new, old, strict=True):
        assert np.any(sp != 0)  # the round carried updates
        assert np.array_equal(sp, osp)
        assert np.array_equal(de, ode)
        assert (sc is None) == (osc is None) and (sc is None or np.array_equal(sc, osc))

