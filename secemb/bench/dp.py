"""``secemb bench dp``: SecEmb with differential privacy (Appendix G; Figures 6 and 7).

Two parts, MF on one dataset (real ML-100K by default), each a list of trained runs:

* **Figure 6** -- :func:`run` ``fig6``: test RMSE after ``epochs`` epochs against the target
  epsilon, at each of ``users_per_round`` (the paper: 100 and 500), SecEmb + DP (user-level,
  each server's discrete Gaussian on its share, Poisson sampling, the RDP accountant;
  docs/security.md), epsilon ``inf`` the run without DP.  The loss against ``inf`` is what the
  paper's check "MF loses <= 2 % for epsilon >= 2" is about.
* **Figure 7** -- ``fig7``: SecEmb + DP against DP-FedRec (local DP on the whole full-size
  upload, composed over the user's participations) at the same epsilon, epochs and round
  size, at each of ``fedrec_users_per_round``; the relative RMSE gap is the paper's "better by
  > 57 % for epsilon < 1.5 (ML-1M)".

By default the SecEmb + DP runs use the ``plaintext`` protocol: its servers add the same noise
to the same sums, and with the noise seeded a secure and a plaintext run give the same model
bit for bit (tests/privacy/test_privacy.py), so the RMSE is SecEmb + DP's without the hours of
cryptography; ``secure=True`` runs ``secemb`` itself.  Every run records the accountant's
``privacy`` block (epsilon spent <= target, noise multiplier, sampling rate, steps).

The paper's settings that do not fit a 2-core machine are stated by the run (epochs, dataset,
and ``rounds_per_epoch`` where even one epoch does not fit: every run, both methods, then stops
each epoch after that many rounds); the clip bound ``clip`` and the ``seed`` (the split, the
initialization and the Poisson participation; the servers' and devices' noise is fresh OS
randomness in every run) are one value for every run and both methods.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from secemb.bench.progress import Steps, reported
from secemb.errors import InvalidParameters, check_int

__all__ = ["EPSILONS", "PAPER", "one", "run", "table_rows"]

#: the target epsilons of Figure 6 (read off its axis; ``inf``: no DP)
EPSILONS = (1.0, 2.0, 4.0, 8.0, math.inf)
#: the paper's statements these figures test (Appendix G, Figures 6 and 7)
PAPER = {
    "fig6": "ML-1M, MF, 200 epochs: RMSE loss <= 2 % against no DP for epsilon >= 2 (100 and 500 users a round)",
    "fig7": "MF: SecEmb+DP beats DP-FedRec by > 57 % for epsilon < 1.5 (ML-1M) and > 47 % for epsilon < 13 (Yelp)",
}


def one(protocol: str, epsilon: float, *, dataset: str, users_per_round: int, epochs: int, clip: float,
        delta: float, seed: int = 0, rounds_per_epoch: int | None = None) -> dict[str, Any]:
    """Train MF with ``protocol`` under target ``(epsilon, delta)`` and clip bound ``clip``
    (``epsilon = inf``: no DP, recorded as ``epsilon_target: None`` -- JSON has no infinity), each
    epoch cut after ``rounds_per_epoch`` rounds if given; the last epoch's test RMSE, the privacy
    block, the traffic and the rounds run.  DP-FedRec runs
    in ``Z_2^64`` (its per-device noise needs the room), the others in ``Z_2^32``."""
    from secemb.training import Experiment, run_experiment

    dp: dict[str, Any] = {} if math.isinf(epsilon) else {"dp_delta": delta, "dp_clip": clip}  # no DP: no DP options
    exp = Experiment(dataset=dataset, model="mf", protocol=protocol, layout="full", relay=False, epochs=epochs,
                     users_per_round=users_per_round, dp_epsilon=epsilon, **dp,
                     ring_bits=64 if protocol == "dp-fedrec" else 32, seed=seed, rounds_per_epoch=rounds_per_epoch)
    t0 = time.perf_counter()
    res = run_experiment(exp)
    return {
        "protocol": protocol, "epsilon_target": None if math.isinf(epsilon) else epsilon, "delta": delta, "clip": clip,
        "dataset": dataset,
        "users_per_round": users_per_round, "epochs": epochs, "seed": seed, "rounds_per_epoch": rounds_per_epoch,
        "rounds": res.rounds,
        "rmse": res.epochs[-1].test_rmse, "rmse_per_epoch": [e.test_rmse for e in res.epochs],
        "privacy": res.privacy, "upload_bytes_per_user_round": res.upload_bytes_per_user_round,
        "model_sha256": res.model_sha256, "wall_s": time.perf_counter() - t0,
    }


def _check(epsilons: Sequence[float], counts: Sequence[int], epochs: int, clip: float,
           rounds_per_epoch: int | None, seed: int) -> None:
    if any(not (e > 0) for e in epsilons):
        raise InvalidParameters(f"epsilons must be > 0 (inf: no DP), got {list(epsilons)}")
    if not counts:
        raise InvalidParameters("users per round: give at least one count")
    for n in counts:
        check_int("users per round", n, low=2)
    check_int("epochs", epochs, low=1)
    if not (math.isfinite(clip) and clip > 0):
        raise InvalidParameters(f"clip must be a finite number > 0, got {clip!r}")
    if rounds_per_epoch is not None:
        check_int("rounds per epoch", rounds_per_epoch, low=1)
    check_int("seed", seed, low=0)


def run(*, dataset: str = "ml-100k", epsilons: Sequence[float] = EPSILONS, users_per_round: Sequence[int] = (100, 500),
        epochs: int = 5, fedrec_epsilons: Sequence[float] = (1.0, 4.0), fedrec_epochs: int = 2,
        fedrec_users_per_round: Sequence[int] = (100,), clip: float = 0.1, delta: float = 1e-5,
        secure: bool = False, quick: bool = False, rounds_per_epoch: int | None = None, seed: int = 0,
        progress: Steps | None = None) -> dict[str, Any]:
    """Both figures' runs (``quick``: synthetic-mini, one epoch, two epsilons, 40 users a
    round); an empty ``epsilons`` or ``fedrec_epsilons`` leaves that figure out.  Figure 6 runs
    every epsilon at every one of ``users_per_round``; Figure 7 runs SecEmb + DP, then
    DP-FedRec, for every epsilon at every one of ``fedrec_users_per_round``.  ``secure``:
    SecEmb + DP with ``secemb`` instead of its plaintext twin.  ``rounds_per_epoch``: every
    run of both figures stops each epoch after that many rounds (``None``: whole epochs);
    ``seed``: every run's seed (an int >= 0); ``progress`` hears of every run."""
    if quick:
        dataset, epsilons, users_per_round, epochs = "synthetic-mini", (2.0, math.inf), (40,), 1
        fedrec_epsilons, fedrec_epochs, fedrec_users_per_round = (2.0,), 1, (40,)
    _check(epsilons, users_per_round, epochs, clip, rounds_per_epoch, seed)
    _check(fedrec_epsilons, fedrec_users_per_round, fedrec_epochs, clip, rounds_per_epoch, seed)
    central = "secemb" if secure else "plaintext"
    out: dict[str, Any] = {"dataset": dataset, "clip": clip, "delta": delta, "seed": seed, "secemb_protocol": central,
                           "rounds_per_epoch": rounds_per_epoch, "paper": PAPER, "fig6": [], "fig7": []}

    plan = [("fig6", central, eps, n_p, epochs) for n_p in users_per_round for eps in epsilons]
    plan += [("fig7", protocol, eps, n_p, fedrec_epochs)
             for n_p in fedrec_users_per_round for eps in fedrec_epsilons for protocol in (central, "dp-fedrec")]
    for part, protocol, eps, n_p, ep in reported(plan, progress,
                                                 lambda s: f"{s[0]}: {s[1]} epsilon={s[2]} n_p={s[3]} ({s[4]} epochs)"):
        out[part].append(one(protocol, eps, dataset=dataset, users_per_round=n_p, epochs=ep, clip=clip, delta=delta,
                             seed=seed, rounds_per_epoch=rounds_per_epoch))
    return out


def table_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """Rows ``(figure, method, n_p, epochs, epsilon target, epsilon spent, noise multiplier,
    RMSE, loss against no DP)`` (epochs with the rounds run when an epoch was cut); the loss is
    relative to the same figure's ``inf`` run at the same round size and epochs (Figure 6), or
    DP-FedRec's RMSE over SecEmb + DP's at the same epsilon, round size and epochs (Figure 7)."""
    rows: list[tuple[str, ...]] = []
    base = {(r["users_per_round"], r["epochs"]): r["rmse"] for r in result["fig6"] if r["epsilon_target"] is None}
    ours = {(r["epsilon_target"], r["users_per_round"], r["epochs"]): r["rmse"]
            for r in result["fig7"] if r["protocol"] != "dp-fedrec"}
    for part in ("fig6", "fig7"):
        for r in result[part]:
            p = r["privacy"] or {}
            method = "DP-FedRec" if r["protocol"] == "dp-fedrec" else "SecEmb+DP"
            if part == "fig6":
                ref = base.get((r["users_per_round"], r["epochs"]))
                rel = "-" if ref is None or r["epsilon_target"] is None else f"{100 * (r['rmse'] / ref - 1):+.1f} %"
            else:
                mine = ours.get((r["epsilon_target"], r["users_per_round"], r["epochs"]))
                rel = f"{100 * (r['rmse'] / mine - 1):+.1f} %" if r["protocol"] == "dp-fedrec" and mine else "-"
            epochs = f"{r['epochs']} ({r['rounds']} rounds)" if r.get("rounds_per_epoch") else str(r["epochs"])
            rows.append(("Fig 6" if part == "fig6" else "Fig 7", method, str(r["users_per_round"]), epochs,
                         "inf" if r["epsilon_target"] is None else f"{r['epsilon_target']:g}",
                         f"{p['epsilon']:.3f}" if p else "-",
                         f"{p['noise_multiplier']:.3f}" if p else "-", f"{r['rmse']:.4f}", rel))
    return rows
