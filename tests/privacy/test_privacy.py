"""Differential privacy (SecEmb Appendix G): the discrete Gaussian sampler, the servers' ring
noise, clipping and the widened bound, the accountant against dp-accounting called directly,
the seeded secure/plaintext twin, ``--dp-epsilon inf``, and DP-FedRec's full-size uploads."""

from __future__ import annotations

import math
from dataclasses import replace

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp

from secemb.data import synthetic_like, train_test_split
from secemb.sim.driver import run
from secemb.sim.local import InProcessServers
from secemb.sim.settings import cluster_settings
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.models import MatrixFactorization
from secemb.models.base import StepResult
from secemb.models.batch import rating_batch
from secemb.privacy import ClipSpec, DPSettings, RingNoise, discrete_gaussian, plan_dp
from secemb.privacy.noise import add_to_share
from secemb.protocols import get_protocol
from secemb.protocols.base import RoundConfig
from secemb.protocols.placement import place
from secemb.protocols.wire import frame
from secemb.randomness import CtrDrbg, expand_seed
from secemb.ring import FixedPoint
from secemb.round.local import local_update
from secemb.training import Experiment, TrainConfig, run_experiment, train
from secemb.round.messages import RECEIPT_BYTES


@pytest.fixture(scope="module")
def small():
    return train_test_split(synthetic_like(60, 50, 900, seed=3), 0.2, seed=0)


def _dp_config(**kw):
    return TrainConfig(**{"epochs": 2, "users_per_round": 20, "sampling": "poisson",
                          "dp": DPSettings(4.0, 1e-5, 0.5), **kw})


# ---------------------------------------------------------------- the sampler and the noise
def test_discrete_gaussian_tails_match_the_exact_pmf():
    sigma, n = 1.5, 400_000
    y = discrete_gaussian(sigma, n, _rng=CtrDrbg(1))
    support = np.arange(-60, 61)
    pmf = np.exp(-(support.astype(float) ** 2) / (2 * sigma**2))
    pmf /= pmf.sum()
    for k in range(1, 8):
        want = float(pmf[np.abs(support) >= k].sum())
        got = float(np.mean(np.abs(y) >= k))
        se = math.sqrt(max(want * (1 - want), 0.0) / n)
        assert abs(got - want) <= 5 * se + 2 / n, (k, got, want)
    assert abs(float(np.mean(y == 0)) - float(pmf[60])) <= 5 * math.sqrt(pmf[60] / n)


def test_discrete_gaussian_is_truncated_at_the_tail():
    y = discrete_gaussian(4.0, 100_000, tail=5, _rng=CtrDrbg(2))
    assert int(np.abs(y).max()) == 5  # reached, never passed


def test_ring_noise_moments_match_sigma():
    fp = FixedPoint(32, 16)
    noise = RingNoise(fp, 1000.0, _rng=CtrDrbg(3))
    v = fp.decode(noise.draw(200_000)) * 2.0**16  # back to ring units, signed
    assert abs(float(v.mean())) < 4 * 1000.0 / math.sqrt(v.size)
    assert abs(float(v.var()) / 1000.0**2 - 1.0) < 0.03
    assert float(np.abs(v).max()) <= noise.tail


def test_sampler_refuses_bad_parameters():
    for sigma in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidParameters):
            discrete_gaussian(sigma, 3)
    with pytest.raises(InvalidParameters):
        discrete_gaussian(2.0, 3, tail=1.0)


def test_noise_on_a_share_lands_on_its_trailing_aggregate_words():
    words = np.arange(10, dtype="<u4")
    msg = b"HEAD" + words.tobytes()
    noise = np.array([1, 2**32 - 1, 5], dtype=np.uint32)
    out = add_to_share(msg, noise)
    assert out[:4 + 7 * 4] == msg[:4 + 7 * 4]
    assert np.frombuffer(out[-12:], "<u4").tolist() == [8, 7, 14]  # 7+1, 8-1, 9+5 (mod 2^32)


# ---------------------------------------------------------------- clipping and the widened bound
def test_clip_bounds_the_whole_contribution():
    rng = np.random.default_rng(0)
    clip = ClipSpec(0.5)
    for scale in (1e-3, 1.0, 1e3):
        rows, dense = rng.normal(size=(7, 4)) * scale, rng.normal(size=3) * scale
        r, d = clip.clip(rows, dense)
        norm = math.sqrt(float((r**2).sum() + (d**2).sum()))
        before = math.sqrt(float((rows**2).sum() + (dense**2).sum()))
        assert norm <= 0.5 * (1 + 1e-12)
        if before <= 0.5:
            assert np.array_equal(r, rows) and np.array_equal(d, dense)


def test_device_update_is_clipped_and_encoded_inside_the_widened_bound():
    fp = FixedPoint(32, 16)
    rc = RoundConfig(round_id=1, num_items=30, width=4, dense_size=3, m_prime=5, ring_bits=32, layout="full")
    req = place(rc, np.array([2, 7, 11]), np.random.default_rng(0))
    huge = StepResult(np.full((3, 4), 1e4), np.full(3, -1e4), 0.0)
    clip = ClipSpec(0.5, reserve=2**30)
    batch = rating_batch(np.arange(3, dtype=np.int64), np.ones(3))
    g, d, _ = local_update(fp, rc, 20, req, 3, batch, np.zeros((rc.slots, 4), fp.dtype), np.zeros(3, fp.dtype),
                           lambda rows, dense, b: huge, clip=clip)
    gx, dx = fp.decode(g), fp.decode(d)
    rounding = 0.5 * math.sqrt(gx.size + dx.size) / 2**16
    norm = math.sqrt(float((gx**2).sum() + (dx**2).sum()))
    assert 0.5 - rounding <= norm <= 0.5 + rounding  # scaled onto the L2 bound, not zeroed


def test_no_wrap_at_the_widened_bound():
    fp = FixedPoint(32, 16)
    noise = RingNoise(fp, 3.0e5)
    n_p = 50
    clip = ClipSpec(1.0, reserve=2 * noise.tail)
    bound = clip.coordinate_bound(fp, n_p)
    units = round(bound * 2**16)
    for sign in (1, -1):
        users = [fp.encode(np.array([sign * bound])) for _ in range(n_p)]
        worst = (sign * noise.tail) % 2**32  # both servers' largest noise, same sign
        total = sum(users, np.zeros(1, fp.dtype)) + np.uint32(worst) + np.uint32(worst)
        exact = sign * (n_p * units + 2 * noise.tail)
        assert abs(exact) <= 2**31 - 1
        assert float(fp.decode(total)[0]) * 2**16 == exact
    with pytest.raises(InvalidParameters, match="ring_bits=64"):
        ClipSpec(1.0, reserve=2**31).coordinate_bound(fp, n_p)


# ---------------------------------------------------------------- accounting
def test_accountant_agrees_with_dp_accounting_and_stays_under_the_target(small):
    tr, te = small
    res = train(MatrixFactorization(dim=8, reg=0.01), get_protocol("plaintext", layout="full"), tr, te, _dp_config())
    p = res.privacy
    assert p is not None and p["delta"] == 1e-5 and p["steps"] == 2 * math.ceil(60 / 20)
    assert p["sampling_rate"] == 20 / 60
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(p["sampling_rate"], dp_accounting.GaussianDpEvent(
        p["noise_multiplier"])), p["steps"])
    assert p["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert p["epsilon"] <= 4.0 and p["epsilon"] > 3.9  # spent, not wasted
    tighter = pld.PLDAccountant()  # an independent method: PLD is at least as tight as RDP
    tighter.compose(dp_accounting.PoissonSampledDpEvent(p["sampling_rate"], dp_accounting.GaussianDpEvent(
        p["noise_multiplier"])), p["steps"])
    assert tighter.get_epsilon(1e-5) <= p["epsilon"] * 1.001
    assert p["epsilon_known_participation"] >= p["epsilon"]  # against a server that sees who took part


def test_rounds_per_epoch_cuts_epochs_and_the_accountant_counts_the_rounds_run(small):
    tr, te = small  # 60 users, 20 a round: 3 rounds an epoch
    model, proto = MatrixFactorization(dim=8, reg=0.01), get_protocol("plaintext", layout="full")
    res = train(model, proto, tr, te, _dp_config(rounds_per_epoch=2))
    p = res.privacy
    assert res.rounds == 4 and p["steps"] == 4 and res.config["total_rounds"] == 4
    acc = rdp.RdpAccountant()  # the library called on the rounds that ran
    acc.compose(dp_accounting.PoissonSampledDpEvent(p["sampling_rate"], dp_accounting.GaussianDpEvent(
        p["noise_multiplier"])), 4)
    assert p["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9) and 3.9 < p["epsilon"] <= 4.0
    full = train(model, proto, tr, te, _dp_config())
    assert full.rounds == 6 and full.privacy["noise_multiplier"] > p["noise_multiplier"]  # more steps, more noise
    plain = TrainConfig(epochs=2, users_per_round=20)
    whole = train(model, proto, tr, te, plain)
    assert train(model, proto, tr, te, replace(plain, rounds_per_epoch=3)).model_sha256 == whole.model_sha256
    cut = train(model, proto, tr, te, replace(plain, rounds_per_epoch=1))
    assert cut.rounds == 2 and cut.participations == 40 and cut.model_sha256 != whole.model_sha256
    with pytest.raises(InvalidParameters, match="rounds_per_epoch"):
        TrainConfig(rounds_per_epoch=0)


def test_plan_counts_the_rounds_of_cut_epochs_and_refuses_a_bound_below_one():
    def plan(r, central=True):  # 100 users, 10 a round: 10 rounds an epoch, 2 epochs
        return plan_dp(DPSettings(4.0, 1e-5, 0.5), central=central, fp=FixedPoint(64, 16), coordinates=100,
                       active_users=100, users_per_round=10, epochs=2, rounds_per_epoch=r)

    assert [plan(r).steps for r in (None, 1, 3, 10, 11, 1000)] == [20, 2, 6, 20, 20, 20]
    assert plan(1, central=False).steps == 2  # local DP: a user's epochs, however many rounds run
    for bad in (0, -1, 2.0, True):  # 0 counted every round of an epoch, as if no bound were set
        for central in (True, False):
            with pytest.raises(InvalidParameters, match="rounds_per_epoch"):
                plan(bad, central)


def test_plan_refuses_noise_that_does_not_fit_the_ring():
    with pytest.raises(InvalidParameters, match="ring_bits=64"):
        plan_dp(DPSettings(0.05, 1e-5, 100.0), central=False, fp=FixedPoint(32, 16), coordinates=100,
                active_users=100, users_per_round=100, epochs=50)


def test_record_level_and_bad_targets_are_refused():
    with pytest.raises(InvalidParameters, match="record level"):
        DPSettings(1.0, 1e-5, 1.0, level="record")
    for eps, delta, clip in ((0.0, 1e-5, 1.0), (1.0, 1.0, 1.0), (1.0, 1e-5, -1.0)):
        with pytest.raises(InvalidParameters):
            DPSettings(eps, delta, clip)


# ---------------------------------------------------------------- runs
def _twin(small, name, rngs):
    tr, te = small
    model, cfg = MatrixFactorization(dim=8, reg=0.01), _dp_config(epochs=1)
    protocol = get_protocol(name, layout="full")
    cluster = InProcessServers(cluster_settings(model, protocol, tr, cfg), protocol, model,
                               _noise_rngs=(CtrDrbg(rngs[0]), CtrDrbg(rngs[1])))
    try:
        return run(cluster.servers(), model, protocol, tr, te, cfg, device_randomness="reproducible").model_sha256
    finally:
        cluster.stop()


def test_seeded_noise_secure_equals_plaintext_and_each_server_adds_noise(small):
    secure = _twin(small, "secemb", (1, 2))
    assert secure == _twin(small, "plaintext", (1, 2))
    assert secure != _twin(small, "plaintext", (1, 3))  # server 1's noise is in the model
    assert secure != _twin(small, "plaintext", (4, 2))  # and server 0's


def test_dp_epsilon_inf_reproduces_the_non_dp_run():
    base = Experiment(dataset="synthetic-mini", protocol="plaintext", layout="full", epochs=1, users_per_round=40)
    plain = run_experiment(base)
    inf = run_experiment(Experiment(**{**base.__dict__, "dp_epsilon": float("inf")}))
    assert inf.model_sha256 == plain.model_sha256 and inf.privacy is None and "privacy" not in inf.to_dict()
    # a DP option beside an infinite epsilon asks for a guarantee the run would not give (issue 32)
    with pytest.raises(InvalidParameters, match="needs a finite dp_epsilon"):
        run_experiment(Experiment(**{**base.__dict__, "dp_epsilon": float("inf"), "dp_clip": 0.01}))
    noisy = run_experiment(Experiment(**{**base.__dict__, "dp_epsilon": 8.0}))
    assert noisy.model_sha256 != plain.model_sha256 and noisy.to_dict()["privacy"]["epsilon"] <= 8.0


def test_dp_fedrec_uploads_are_full_size_and_noised(small):
    tr, te = small
    model = MatrixFactorization(dim=8, reg=0.01)
    cfg = TrainConfig(epochs=1, users_per_round=20, dp=DPSettings(4.0, 1e-5, 0.5), ring_bits=64)
    res = train(model, get_protocol("dp-fedrec", layout="full"), tr, te, cfg)
    coords = tr.num_items * model.sparse_width + model.dense_size
    # server 0: a 16-byte seed; server 1: the full-size share; requests: header only
    # 32-byte headers, and server 1's receipt, appended to the upload to server 0
    assert res.upload_bytes_per_user_round == (32 + 16) + (32 + 8 * coords) + 2 * 32 + RECEIPT_BYTES
    assert res.privacy["sampling_rate"] == 1.0 and res.privacy["steps"] == 1
    rc = RoundConfig(round_id=1, num_items=tr.num_items, width=model.sparse_width, dense_size=model.dense_size,
                     m_prime=4, ring_bits=64, layout="full")
    user = get_protocol("dp-fedrec", layout="full").with_noise(5e4, 0.5).make_user(rc)
    user.retrieval_request(np.arange(4))
    table = np.zeros((rc.num_items, rc.width), np.uint64)
    user.retrieval_result(frame("dp-fedrec", "retrieval_reply", 0, 1, table.tobytes()),
                          frame("dp-fedrec", "retrieval_reply", 1, 1))
    up0, up1 = user.upload(np.zeros((4, rc.width), np.uint64), np.zeros(rc.dense_size, np.uint64))
    assert len(up0) == 32 + 16 and len(up1) == 32 + 8 * coords
    total = expand_seed(up0[32:], (coords,), np.uint64) + np.frombuffer(up1[32:], "<u8")
    assert np.mean(total == 0) < 0.01  # every coordinate noised, zero rows too


def test_dp_fedrec_aggregate_is_the_sum_of_the_noisy_uploads_given_the_same_noise():
    """Server 0 expands seeds, server 1 sums full-size shares: the combined aggregate is, bit for
    bit, the ring sum of every included user's gradient plus the noise it drew first from its
    randomness (what two full-size uniform shares gave); a user left out is retracted on both; an
    upload of the wrong length is refused before it touches either server's state."""
    m, w, p, sigma = 30, 5, 2, 3e4
    rc = RoundConfig(round_id=3, num_items=m, width=w, dense_size=p, m_prime=4, ring_bits=64, layout="full")
    proto = get_protocol("dp-fedrec", layout="full").with_noise(sigma, 0.5)
    servers = [proto.make_server(0), proto.make_server(1)]
    table = np.arange(m * w, dtype=np.uint64).reshape(m, w)
    for s in servers:
        s.begin_round(rc, table)
    gen = np.random.default_rng(5)  # test data only
    want = np.zeros(m * w + p, np.uint64)
    for u in range(4):
        idx = gen.choice(m, 4, replace=False)
        user = proto.make_user(rc, _rng=CtrDrbg(100 + u))
        requests = user.retrieval_request(idx)
        got = user.retrieval_result(*(s.handle_retrieval(u, q) for s, q in zip(servers, requests, strict=True)))
        assert np.array_equal(got, table[idx])
        rows = gen.integers(0, 2**64, (4, w), dtype=np.uint64)
        dense = gen.integers(0, 2**64, p, dtype=np.uint64)
        uploads = user.upload(rows, dense)
        if u == 0:  # a seed of the wrong length, or each server sent the other's body: refused, nothing absorbed
            bad = [(0, frame("dp-fedrec", "upload", 0, 3, bytes(n))) for n in (15, 17)]
            bad += [(0, frame("dp-fedrec", "upload", 0, 3, uploads[1][24:])),
                    (1, frame("dp-fedrec", "upload", 1, 3, uploads[0][24:]))]
            for party, msg in bad:
                with pytest.raises(InvalidMessage, match="upload: expected"):
                    servers[party].handle_upload(u, msg)
        for s, msg in zip(servers, uploads, strict=True):
            s.handle_upload(u, msg)
        if u == 2:
            continue  # left out below
        full = np.zeros((m, w), np.uint64)
        full[idx] = rows
        noise = discrete_gaussian(sigma, m * w + p, _rng=CtrDrbg(100 + u)).view(np.uint64)
        want += np.concatenate([full.reshape(-1), dense]) + noise
    keep = [0, 1, 3]
    sparse, dense_sum = servers[0].combine(servers[1].aggregate_share(keep), keep)
    assert np.array_equal(np.concatenate([sparse.reshape(-1), dense_sum]), want)


def test_dp_with_verify_or_an_unsupported_protocol_is_refused(small):
    tr, te = small
    with pytest.raises(InvalidParameters, match="verify"):
        train(MatrixFactorization(dim=8), get_protocol("plaintext", layout="full"), tr, te, _dp_config(verify=True))
    with pytest.raises(InvalidParameters, match="sampling='poisson'"):
        train(MatrixFactorization(dim=8), get_protocol("plaintext", layout="full"), tr, te,
              _dp_config(sampling="permutation"))
