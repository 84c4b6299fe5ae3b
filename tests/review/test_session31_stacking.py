"""Session 31 (helper A, issue 34): devices that stack their keys' payloads on one aggregate row.

With ``bound`` a device proves that each coordinate of its proven vector is below ``2^t`` (with
probability ``1 - 2^-40``); ``t`` is chosen so that ``n`` such values never wrap the 32-bit ring.
Until session 31 the proven vector held one coordinate per KEY (its payload, the key's outputs
summed over its domain), while the aggregate receives, per table row, the sum over the device's
keys whose point is that row:

* full layout: every key is over ``[0, m)``; a device may point all ``m'`` of them at one row.
  ``m'`` equal payloads ``a`` project to ``a S`` with ``S`` a sum of ``m'`` ternary entries
  (sub-Gaussian, variance proxy ``m' / 2``), so ``a = T / 50`` passes a row except with
  probability at most ``2 exp(-50^2 / m') = 2 e^-12.5`` at ``m' = 200`` (all 40 rows: at least
  ``1 - 3.0e-4``) and puts ``200 a = 4 T = 2^(t+1)`` on the row: 20 such devices wrap it.
* cuckoo layout: an item sits in up to 3 buckets; a device may put it in all three of its keys
  there.  Payloads ``a < T`` on three coordinates pass a row when ``|r_1 + r_2 + r_3| <= 1``
  (probability 50/64), all 40 rows with probability ``(50/64)^40 ~ 5e-5``; the item's row then
  gets ``3 a``, up to 1.5 times ``2^t``.  The test fixes server 0's challenge to one for which the
  chosen coordinates pass (found here by search; a real device meets such a challenge about once
  in 20,000 rounds) and has ``n`` devices do it: before the fix ``t`` ignored the multiplicity
  and their sum wrapped.

Each test asserts on the reconstructed aggregate: over the devices the servers include, the
stacked coordinate, read as a signed value, is the exact integer sum of what they added (no
wrap).  Expected values are computed here from what the devices upload.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from secemb.fss.cuckoo import NUM_HASHES
from secemb.fss.projections import ternary_rows
from secemb.fss.rangeproof import prove
from secemb.protocols.base import RoundConfig
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer, SecEmbUser
from secemb.protocols.secemb import server as server_module
from secemb.protocols.secemb.bounds import (CHALLENGE_BYTES, CLIP_MARGIN, ROWS, bound_params, clip_norm, context,
                                           layout_bits, multiplicity, payload_share, projected, upload_vector)
from secemb.protocols.secemb.sizes import NAME
from secemb.protocols.wire import frame
from secemb.randomness import CtrDrbg
from secemb.ring import FixedPoint
from secemb.server.verify import rejected as digest_rejected

RING_HALF = 1 << 31  # the 32-bit ring's signed range is [-2^31, 2^31)


class PerKeyProver(SecEmbUser):
    """A full-layout device that proves what the servers checked before session 31: the
    projections of its keys' payloads, one coordinate per key (``S_0`` from its party-0 keys'
    payload sums, ``S_1 = rows - S_0``).  For keys at distinct points this is its contribution;
    for keys stacked on one row each payload is small while the row gets their sum."""

    def bound_proof(self, challenge: bytes) -> bytes:
        kept, self._kept = self._kept, None
        assert kept is not None and self._bound is not None and self._sigma is not None
        s0 = payload_share(self.config, 0, kept.path0, kept.cw)
        a, b = projected([challenge] * 2, upload_vector(np.stack([s0, kept.rows - s0]),
                                                        np.stack([kept.dense0, kept.dense1])))
        msg0, _ = prove(self._bound, a, b, context(self.config.round_id, challenge, self._digest or b""),
                        seed_1=self._sigma, _rng=self._rng)
        return frame(NAME, "bound_proof", 0, self.config.round_id, msg0)


def _run(proto: SecEmbProtocol, cfg: RoundConfig, slots: list[np.ndarray], rows: list[np.ndarray],
         challenge: bytes | None = None, device: type[SecEmbUser] = SecEmbUser) -> tuple[set[int], np.ndarray]:
    """One round of ``len(slots)`` devices of class ``device`` (device ``u`` requests ``slots[u]``
    and uploads ``rows[u]``, a zero dense gradient), driven at the roles as
    ``secemb.bench.robust`` does; server 0's batch challenge is ``challenge`` if given.  The
    devices left out (digests, sketch check or bound) and the reconstructed sparse aggregate
    over the others."""
    s0, s1 = proto.make_server(0), proto.make_server(1)
    assert isinstance(s0, SecEmbServer) and isinstance(s1, SecEmbServer)
    table = np.arange(cfg.num_items * cfg.width, dtype=cfg.dtype).reshape(cfg.num_items, cfg.width)
    for s in (s0, s1):
        s.begin_round(cfg, table)
    ids = list(range(len(slots)))
    devices = [device(cfg, relay=proto.relay, verify=True, bound_users=proto.bound_users,
                      _rng=CtrDrbg(b"s31-stacking/%d" % u)) for u in ids]
    reqs = [d.retrieval_request(sl) for d, sl in zip(devices, slots, strict=True)]
    if proto.relay:
        assert s1.handle_retrieval_many([(u, r1) for u, (_, r1) in zip(ids, reqs, strict=True)]) == [None] * len(ids)
        fwd = s0.handle_retrieval_many([(u, r0) for u, (r0, _) in zip(ids, reqs, strict=True)])
        masked = s1.relay_retrieval_many(list(zip(ids, fwd, strict=True)))
        replies = [(r, None) for r in s0.complete_retrieval_many(list(zip(ids, masked, strict=True)))]
    else:
        a0 = s0.handle_retrieval_many([(u, r0) for u, (r0, _) in zip(ids, reqs, strict=True)])
        a1 = s1.handle_retrieval_many([(u, r1) for u, (_, r1) in zip(ids, reqs, strict=True)])
        replies = list(zip(a0, a1, strict=True))
    ups = []
    for d, (x0, x1), r in zip(devices, replies, rows, strict=True):
        d.retrieval_result(x0, x1)
        ups.append(d.upload(r, np.zeros(cfg.dense_size, cfg.dtype)))
    with pytest.MonkeyPatch.context() as mp:
        if challenge is not None:  # server 0 draws the batch's challenge as it absorbs the uploads
            mp.setattr(server_module, "system_rng", lambda n: challenge if n == CHALLENGE_BYTES else None)
        if proto.relay:
            fw = s0.handle_upload_many([(u, u0) for u, (u0, _) in zip(ids, ups, strict=True)])
            assert s1.relay_upload_many(list(zip(ids, fw, strict=True))) == [None] * len(ids)
        else:
            assert s1.handle_upload_many([(u, u1) for u, (_, u1) in zip(ids, ups, strict=True)]) == [None] * len(ids)
            assert s0.handle_upload_many([(u, u0) for u, (u0, _) in zip(ids, ups, strict=True)]) == [None] * len(ids)
    assert challenge is None or s0.challenge(0) == challenge
    assert s0.handle_proof_many([(u, d.bound_proof(s0.challenge(u))) for u, d in zip(ids, devices,
                                                                                  strict=True)]) == [None] * len(ids)
    d0, d1 = s0.upload_digests(ids), s1.upload_digests(ids)
    assert d0 is not None and d1 is not None
    out = set(digest_rejected(d0, d1)) | set(s0.verify_rejected(ids, s1.verify_answer(ids)))
    assert not out  # every key is a point function, the same at both servers
    out |= s0.bound_rejected(s1.bound_answer(s0.bound_request(ids)))
    include = [u for u in ids if u not in out]
    sparse, _ = s0.combine(s1.aggregate_share(include), include)
    return out, sparse


def _signed(word: np.integer) -> int:
    """A 32-bit ring word as the signed value in ``[-2^31, 2^31)``."""
    return int(np.asarray(word, np.uint32).astype(np.int32))


def test_full_layout_devices_stacking_every_key_on_one_row_cannot_wrap_it() -> None:
    """Full layout, 20 users a round (``t = 26``): every device points its 200 keys at row 7,
    each key's payload ``a = T / 50`` in column 0 (each key alone far inside the bound), and
    proves its per-key payloads (:class:`PerKeyProver`: the statement the servers checked before
    session 31, which such a device passes except with probability ``3.0e-4``).  Each device
    adds ``200 a ~ 2^(t+1)`` to the row: the 20 together ``~ 2.7e9``, past ``2^31``.  Either the
    check leaves them out or the row holds their exact sum; since session 31 the servers project
    each device's contribution per row (``200 a >= 2T`` there) and leave every one out."""
    users, m, mp, w, target = 20, 256, 200, 4, 7
    proto = SecEmbProtocol(layout="full", relay=False, verify=True, bound=True, users_per_round=users)
    cfg = proto.round_config(1, num_items=m, width=w, dense_size=1, m_prime=mp, ring_bits=32)
    t = bound_params(cfg, users).bits
    a = (1 << (t - 1)) // 50
    stacked = np.zeros((mp, w), cfg.dtype)
    stacked[:, 0] = a
    out, sparse = _run(proto, cfg, [np.full(mp, target, np.int64)] * users, [stacked] * users, device=PerKeyProver)
    included = users - len(out)
    assert _signed(sparse[target, 0]) == included * mp * a, (
        f"{included} stacking devices passed the bound and their row wrapped: {included} x {mp} x {a} = "
        f"{included * mp * a} >= 2^31")
    assert not sparse[np.arange(m) != target].any() and not sparse[target, 1:].any()


def _cuckoo_attack(cfg: RoundConfig, fixed: bytes) -> tuple[bytes, int, int]:
    """A challenge (the first of ``SHA-256(fixed || i)[:16]``, ``i = 0, 1, ...``) and an item
    with three distinct buckets and a column for which every one of the :data:`ROWS` rows
    projects the item's three payload coordinates (``bucket * w + column`` of the proven vector
    ``S || d``, :func:`~secemb.protocols.secemb.bounds.upload_vector`) to a sum in ``[-1, 1]``."""
    cu, w = cfg.cuckoo(), cfg.width
    cand = cu.candidates
    distinct = np.flatnonzero((cand[:, 0] != cand[:, 1]) & (cand[:, 0] != cand[:, 2]) & (cand[:, 1] != cand[:, 2]))
    length = cfg.slots * w + cfg.dense_size
    for i in range(200):
        challenge = hashlib.sha256(fixed + bytes([i])).digest()[:CHALLENGE_BYTES]
        r = ternary_rows(challenge, ROWS, length).astype(np.int64)  # (ROWS, length)
        cols = cand[distinct][:, :, None] * w + np.arange(w)[None, None, :]  # (items, 3, w)
        sums = r[:, cols].sum(axis=2)  # (ROWS, items, w)
        ok = np.all(np.abs(sums) <= 1, axis=0)
        if ok.any():
            item, col = np.argwhere(ok)[0]
            return challenge, int(distinct[item]), int(col)
    raise AssertionError("no challenge found")  # pragma: no cover - 200 tries at ~0.36 hits each


def test_cuckoo_devices_putting_an_item_in_its_three_buckets_cannot_wrap_its_row() -> None:
    """Cuckoo layout with relay (the default deployment), 31 users a round: each device puts
    one item in all three of its buckets with payload ``a = T - 1`` in one column.  Under a
    challenge that passes them (fixed here; ~5e-5 a round for a real device) each adds
    ``3 (T - 1)`` to the item's row.  Before session 31 ``t = 26`` (``n 2^t <= 2^31 - 1``, one
    key a row) and the 31 devices' ``3 (2^25 - 1)`` each wrapped the row; with the multiplicity
    (``n 3 2^t <= 2^31 - 1``) they pass and the row holds their exact sum."""
    users, m, mp, w = 31, 1682, 200, 4
    proto = SecEmbProtocol(layout="cuckoo", relay=True, verify=True, bound=True, users_per_round=users)
    cfg = proto.round_config(1, num_items=m, width=w, dense_size=1, m_prime=mp, ring_bits=32)
    challenge, item, col = _cuckoo_attack(cfg, b"s31-A cuckoo")
    t = bound_params(cfg, users).bits
    a = (1 << (t - 1)) - 1
    slots = np.full(cfg.slots, -1, np.int64)
    slots[cfg.cuckoo().candidates[item]] = item
    rows = np.zeros((cfg.slots, w), cfg.dtype)
    rows[cfg.cuckoo().candidates[item], col] = a
    out, sparse = _run(proto, cfg, [slots] * users, [rows] * users, challenge)
    assert not out  # the chosen challenge passes every device: what is left is the row's sum
    assert _signed(sparse[item, col]) == users * 3 * a, (
        f"{users} devices passed the bound with 3 x {a} each on item {item}: the row wrapped")
    assert np.count_nonzero(sparse) == 1


def test_the_clip_margin_and_the_layouts_values_a_row_by_hand() -> None:
    """``C2 = T / (c 2^f)`` with ``c = sqrt(40.5)`` (:data:`CLIP_MARGIN`), recomputed: a
    projection entry ``r`` is -1, 0, +1 with probabilities 1/4, 1/2, 1/4, so ``E exp(s r) = 1/2 +
    cosh(s) / 2 = cosh(s / 2)^2 <= exp(s^2 / 4)`` (checked on a grid); hence
    ``P(|<r, x>| >= T) <= 2 exp(-T^2 / ||x||^2)``, which at ``||x|| = T / c`` is Hoeffding's
    ``2 exp(-T^2 / (2 (T / 9)^2))`` of the old ``c = 9``.  With the encoding's rounding
    (``sqrt(L) / 2`` ring units, ``L = 16,251`` at ML-100K) an honest device still fails its 40
    rows with probability below ``2^-52``.  ``h`` is 3 cuckoo (its hashes), 1 full, and at
    ``n = 100``, ``f = 16``: ``t = 22``, ``C2 = 2^21 / (c 2^16) ~ 5.03`` cuckoo, above the largest
    honest upload measured (L2 norm 3.69, session 18)."""
    c = 6.363961030678928  # sqrt(40.5) to double precision
    assert CLIP_MARGIN == pytest.approx(c, rel=1e-15) and c * c == pytest.approx(81 / 2, rel=1e-15)
    s = np.linspace(-60.0, 60.0, 24001)
    mgf = 0.25 * np.exp(-s) + 0.5 + 0.25 * np.exp(s)
    np.testing.assert_allclose(mgf, np.cosh(s / 2) ** 2, rtol=1e-12)
    assert np.all(2 * np.log(np.cosh(s / 2)) <= s**2 / 4 + 1e-9)
    assert 2 * math.exp(-1 / (2 * (1 / 9) ** 2)) == pytest.approx(2 * math.exp(-c * c), rel=1e-12)
    big_t = 2.0**21  # T at n = 100 cuckoo
    exponent = big_t**2 / (big_t / c + math.sqrt(16251) / 2) ** 2
    assert 40.48 < exponent < 40.5 and 2 * ROWS * math.exp(-exponent) < 2.0**-52
    assert multiplicity("cuckoo") == NUM_HASHES == 3 and multiplicity("full") == 1
    fp = FixedPoint(32, 16)
    assert layout_bits(32, 100, layout="cuckoo") == 22  # (2^31 - 1) / 300 = 7158278.8: log2 22.77
    assert clip_norm(fp, 100, layout="cuckoo") == pytest.approx(32 / c, rel=1e-12)
    assert 5.02 < clip_norm(fp, 100, layout="cuckoo") < 5.03 and clip_norm(fp, 100, layout="cuckoo") > 3.69
    assert clip_norm(fp, 100, layout="full") == pytest.approx(128 / c, rel=1e-12)  # t = 24: 20.1
