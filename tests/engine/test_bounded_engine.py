"""Bounded payloads through the engine, in process (issue 34 (b)): with SecEmb's option
``bound`` every device that uploads fetches server 0's challenge and proves its upload small,
and server 0's close checks the proofs with server 1 before the digests.

* an honest run's model is bit for bit the run's without ``bound`` where the clip to the bound
  does not bind (the largest contribution is measured here, against ``clip_norm``), and the
  model of a plain run whose devices clip to the same norm where it binds;
* devices running ``oversized-payload`` or ``wrapped-dense`` are left out of every round they
  take part in (``rejected_devices`` in ``secemb train``'s JSON), and the model is bit for bit
  the one of the same run where those devices drop out;
* the transcript of a round is the protocol's plan, with the ``prove`` hops.

Expected models come from other runs (bound off, or the attackers dropped), not from the code
under test."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.data import synthetic_like, train_test_split
from secemb.models import MatrixFactorization
from secemb.privacy.noise import ClipSpec
from secemb.protocols.adversary import AdversaryRecord, attack_behavior
from secemb.protocols.secemb import SecEmbProtocol
from secemb.protocols.secemb.bounds import clip_norm
from secemb.protocols.stages import COUNT, PROVE, USER
from secemb.ring import FixedPoint
from secemb.training import Experiment, TrainConfig, train
from secemb.transport.inprocess import InProcessTransport, parse_endpoint

USERS = 20
LAYOUTS = [("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)]


def _run(layout: str, relay: bool, bound: bool, behavior: Callable[[int, int], str | None] | None = None,
         record: AdversaryRecord | None = None) -> str:
    """The model digest of a small synthetic run through :class:`Experiment` (the builder's
    plumbing of ``bound``): one epoch of 6 rounds of 20 users, seed 3."""
    exp = Experiment(dataset="synthetic", protocol="secemb", layout=layout, relay=relay, epochs=1,
                     users_per_round=USERS, rounds_per_epoch=6, m_prime=8, seed=3, dim=4, bound=bound)
    run = exp.run(behavior=behavior, after_round=None if record is None else record.after_round)
    return run.train_result.model_sha256


@pytest.fixture
def norms(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The L2 norms (real units) of every contribution a device clips in the test."""
    seen: list[float] = []
    clip = ClipSpec.clip

    def spy(self: ClipSpec, rows: np.ndarray, dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.append(math.sqrt(float(np.sum(np.square(rows))) + float(np.sum(np.square(dense)))))
        return clip(self, rows, dense)

    monkeypatch.setattr(ClipSpec, "clip", spy)
    yield seen


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_an_honest_bounded_run_is_the_unbounded_run(layout: str, relay: bool, norms: list[float]) -> None:
    """No device is left out, and the model is the one without ``bound``: the clip does not
    bind, because every contribution of this run (MF, dim 4, 8 rows) is far below the bound's
    L2 norm C2 = T / (sqrt(40.5) 2^16) at 20 users on the 32-bit ring, ~ 80.5 full (T = 2^25) and
    ~ 40.2 cuckoo (T = 2^24: three proven values a row) (measured here)."""
    record = AdversaryRecord("oversized-payload", 1)  # used only for its per-round record of rejections
    bounded = _run(layout, relay, True, None, record)
    assert len(norms) > 0 and max(norms) < clip_norm(FixedPoint(32, 16), USERS, layout=layout) / 10
    assert all(r["rejected_devices"] == [] for r in record.rounds) and len(record.rounds) == 6
    assert bounded == _run(layout, relay, False)


def _mf_data() -> tuple:  # noqa: ANN202 - a pair of RatingData
    return train_test_split(synthetic_like(30, 40, 400, seed=5), 0.2, seed=0)


def test_a_binding_clip_is_the_plain_run_with_the_same_clip(monkeypatch: pytest.MonkeyPatch,
                                                             norms: list[float]) -> None:
    """``users_per_round = 2^18`` makes the bound's norm C2 = 2^10 / (sqrt(40.5) 2^16) ~ 0.0025 (cuckoo,
    t = 11):
    it binds for the contributions of this run, every honest device still proves (none left
    out: the run commits every round with all its devices), and the model is the one of a run
    without ``bound`` whose devices clip to the same norm."""
    tr, te = _mf_data()
    config = TrainConfig(epochs=1, users_per_round=10, m_prime=6, seed=1)
    c2 = clip_norm(FixedPoint(32, 16), 1 << 18, layout="cuckoo")
    record = AdversaryRecord("oversized-payload", 1)
    bounded = train(MatrixFactorization(dim=4, reg=0.01), SecEmbProtocol(layout="cuckoo", bound=True,
                                                                          users_per_round=1 << 18),
                    tr, te, config, after_round=record.after_round)
    assert max(norms) > 2 * c2  # the clip binds
    assert all(r["rejected_devices"] == [] for r in record.rounds) and len(record.rounds) == bounded.rounds
    plain = train(MatrixFactorization(dim=4, reg=0.01), SecEmbProtocol(layout="cuckoo"), tr, te, config)
    assert plain.model_sha256 != bounded.model_sha256
    monkeypatch.setattr(SecEmbProtocol, "upload_clip", lambda _proto, _fp, _clip: ClipSpec(c2))
    same_clip = train(MatrixFactorization(dim=4, reg=0.01), SecEmbProtocol(layout="cuckoo"), tr, te, config)
    assert same_clip.model_sha256 == bounded.model_sha256


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_payload_attackers_are_left_out_as_if_they_dropped(layout: str, relay: bool) -> None:
    """With ``bound``, 2 devices running ``oversized-payload`` or ``wrapped-dense`` cannot prove
    (they send no proof) and are rejected in every round they take part in; the model is bit
    for bit the run's where those 2 devices retrieve and never upload."""
    absent = _run(layout, relay, True, lambda _r, u: "drop" if u < 2 else None)
    for attack in ("oversized-payload", "wrapped-dense"):
        record = AdversaryRecord(attack, 2)
        assert _run(layout, relay, True, attack_behavior(attack, 2), record) == absent, attack
        assert [u for r in record.rounds for u in r["rejected_devices"]], attack  # they took part
        for r in record.rounds:
            assert r["malicious_included"] == [] and set(r["rejected_devices"]) <= {0, 1}, (attack, r)


def test_secemb_train_reports_the_rejected_attackers(tmp_path: Path) -> None:
    """``secemb train --bound --adversary oversized-payload --adversaries 2``: the JSON's
    ``rejected_devices`` names devices 0 and 1 in the rounds they took part in (each user takes
    part once per epoch: once each here), and none is ever included."""
    out = tmp_path / "run.json"
    res = CliRunner().invoke(app, ["train", "--dataset", "synthetic-mini", "--epochs", "1", "--users-per-round", "20",
                                   "--m-prime", "8", "--dim", "4", "-q", "--bound", "--adversary",
                                   "oversized-payload", "--adversaries", "2", "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert sorted(u for ids in doc["rejected_devices"] for u in ids) == [0, 1]
    assert all(r["malicious_included"] == [] and r["refused_devices"] == [] for r in doc["adversary"]["rounds"])


def test_bound_needs_secemb() -> None:
    """Another protocol refuses the option: exit 2, one line."""
    res = CliRunner().invoke(app, ["train", "--dataset", "synthetic", "--protocol", "plaintext", "--epochs", "1",
                                   "--bound", "-q"])
    assert res.exit_code == 2 and "bound" in res.stderr and res.stderr.count("\n") == 1, res.output


def test_bound_refuses_central_dp() -> None:
    """Central DP's Poisson sampling varies the users a round, which the bound's t is fixed for:
    refused before any data is loaded, exit 2, one line."""
    res = CliRunner().invoke(app, ["train", "--dataset", "synthetic", "--epochs", "1", "--bound", "--dp-epsilon", "1",
                                   "-q"])
    assert res.exit_code == 2 and "--dp-epsilon" in res.stderr and res.stderr.count("\n") == 1, res.output


class _Recording(InProcessTransport):
    """Remembers every message's (round, stage, src, dst) in the order sent."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[int | None, str, str, str]] = []

    def send(self, src: str, dst: str, payload: bytes, *, stage: str) -> int:
        kind, _ = parse_endpoint(src)
        dkind, _ = parse_endpoint(dst)
        self.log.append((self.round_id, stage, USER if kind == "user" else src, USER if dkind == "user" else dst))
        return super().send(src, dst, payload, stage=stage)


@pytest.mark.parametrize("relay", [False, True])
def test_a_bounded_rounds_transcript_is_the_plan(relay: bool) -> None:
    """Every round carries the declared hops in the declared order, the ``prove`` hops after the
    upload and before the aggregate shares: each device's challenge and proof once, the
    servers' check once."""
    tr, te = _mf_data()
    proto = SecEmbProtocol(layout="cuckoo", relay=relay, bound=True, users_per_round=3)
    tp = _Recording()
    r = train(MatrixFactorization(dim=4, reg=0.01), proto, tr, te,
              TrainConfig(epochs=1, users_per_round=3, m_prime=None, alpha=1.0), transport=tp)
    plan = [(h.stage, h.src, h.dst) for h in proto.plan().hops if h.stage != COUNT]
    assert [h.message for h in proto.plan().stage(PROVE)] == ["challenge", "bound_proof", "bound_request",
                                                               "bound_answer"]
    rounds = sorted({x for x, *_ in tp.log if x is not None})
    assert len(rounds) == r.rounds == 10
    for rr in rounds:
        got = [(stage, s, d) for x, stage, s, d in tp.log if x == rr]
        assert list(dict.fromkeys(got)) == plan, rr
        assert got.count((PROVE, "server0", USER)) == got.count((PROVE, USER, "server0")) == 3, rr
        assert got.count((PROVE, "server0", "server1")) == got.count((PROVE, "server1", "server0")) == 1, rr


def test_the_device_clips_to_the_tighter_of_dp_and_the_bound() -> None:
    """:meth:`SecEmbProtocol.upload_clip`: without ``bound`` the round's clip as it is; with it, the bound's
    norm (C2 = 2^25 / (sqrt(40.5) 2^16) ~ 80.5 at 20 users, full layout), or the DP clip's if smaller,
    the DP noise's reserves kept."""
    fp = FixedPoint(32, 16)
    plain, bounded = SecEmbProtocol(), SecEmbProtocol(bound=True, users_per_round=USERS)
    dp = ClipSpec(1.0, reserve=7, per_user=3)
    assert plain.upload_clip(fp, None) is None and plain.upload_clip(fp, dp) is dp
    c2 = 2.0**25 / (math.sqrt(40.5) * 2.0**16)
    assert bounded.upload_clip(fp, None) == ClipSpec(c2)
    assert bounded.upload_clip(fp, dp) == dp
    assert bounded.upload_clip(fp, ClipSpec(100.0, reserve=7, per_user=3)) == ClipSpec(c2, 7, 3)
