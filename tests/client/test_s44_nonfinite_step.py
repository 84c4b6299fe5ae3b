"""Session 44: a local step with non-finite gradients contributes zero and is uploaded like any other.

A server can commit a crafted model both servers agree on (docs/security.md, "What is not protected": an offset
on the aggregate).  Were a device to fail on non-finite gradients -- fixed-point encoding refuses them, so before
session 44 its local step raised and it sent no upload -- a model crafted so that only devices holding a given
item's row diverge (e.g. an extreme value in that row feeding a deep network in float32) would let the servers
read, from who drops out, which devices hold it (probed in session 44 for the shipped models and not reached:
with every row and the dense vector at the ring's largest value their float64 steps stay finite; the guard is
for a plug-in model or a float32 network).  Now :func:`secemb.round.local.local_update` uploads a zero
contribution instead (a WARNING on the device only): the same messages, the same sizes.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "server")]
from test_s42_quorum_agreed import _RATINGS, _USERS, _cluster, _Cluster, make  # type: ignore[import-not-found]  # noqa: E402, F401

from secemb.client.device import RoundSession  # noqa: E402
from secemb.models.base import StepResult  # noqa: E402


def _session(c: _Cluster, u: int) -> tuple[RoundSession, object, object]:
    client = c.servers.servers().device(u)
    info = client.round_info()
    model = info.make_model()
    session = RoundSession(client, info, task=model.task, clip=info.clip())
    session.prepare(*_RATINGS.of(u), rng=np.random.default_rng(u))
    session.retrieve()
    state = model.new_user_store(1, np.random.default_rng(0), info.adam()).state(0)
    return session, model, state


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["rows", "dense"])
@pytest.mark.parametrize("relay", [True, False], ids=["relay", "no-relay"])
def test_a_diverged_step_uploads_a_zero_contribution_of_the_same_size(make: list[_Cluster],  # noqa: F811
                                                                      caplog: pytest.LogCaptureFixture,
                                                                      bad: float, where: str, relay: bool) -> None:
    """Device A's step is honest; device B's gives one non-finite gradient (in a row, or in the dense part).
    B trains without raising (before session 44: ``InvalidParameters``, no upload), its encoded gradients are
    zero, its upload messages have A's sizes, both uploads are taken, and B's own log says why."""
    c = _cluster(make, relay=relay, bound=False, quorum=8)
    a, b = _USERS[0], _USERS[1]
    sa, model, state = _session(c, a)
    sa.train(lambda rows, dense, batch: model.local_step(rows, dense, state, batch))  # type: ignore[attr-defined]

    def diverged(rows: np.ndarray, dense: np.ndarray, batch: object) -> StepResult:
        got = model.local_step(rows, dense, state, batch)  # type: ignore[attr-defined]
        row_grads, dense_grad = got.row_grads.copy(), got.dense_grad.copy()
        (row_grads if where == "rows" else dense_grad).flat[0] = bad
        return StepResult(row_grads, dense_grad, got.loss)

    sb, _, _ = _session(c, b)
    with caplog.at_level(logging.WARNING, logger="secemb.client"):
        sb.train(diverged)  # type: ignore[arg-type]
    assert "non-finite gradients" in caplog.text
    assert sb.g_ring is not None and sb.d_ring is not None
    assert not sb.g_ring.any() and not sb.d_ring.any()
    assert {p: len(m) for p, m in sb._uploads.items()} == {p: len(m) for p, m in sa._uploads.items()}  # noqa: SLF001
    sa.upload()
    sb.upload()
    assert {a, b} <= c.leader.round.uploaded
