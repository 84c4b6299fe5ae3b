"""Federated training in one process: :func:`train` runs the round engine
(:func:`secemb.sim.driver.run`) against both server nodes in memory
(:class:`secemb.sim.local.InProcessServers`), behind a transport that counts every byte.

One run (see docs/training.md for every choice and its reason)::

    m'     given, or Eq. 11: each user additively shares its rating count with the two servers,
           which add the shares up and open only the mean; m' = ceil(alpha * mean) in [1, m].
    epoch  a seeded permutation of the users with >= 1 training rating, cut into rounds of
           ``users_per_round``.
    round  server 0 opens the round (server 1 mirrors it); per user: PadOrTruncIdx -> the
           retrieval requests, in the order the protocol's round plan declares -> replies ->
           rows; dense vector from server 0; local step on the real rows (private params move
           on the device); row gradients placed at their request positions (padding rows
           zero), clipped and encoded for n_p = users in the round; upload.  Server 0 closes:
           the users' agreed set, server 1's aggregate share, combine, the update step
           (:func:`secemb.round.update.apply_aggregate`), commit, model sync to server 1.

The server nodes are the objects a deployment runs behind FastAPI, and the driver is the one
the networked simulation runs (:func:`secemb.sim.coordinator.train_networked`), so an
in-process run and a networked run with one seed produce the same model by construction --
the networked run with ``device_randomness="reproducible"``, which this simulation always
uses: its devices draw their private state from the run's seed, so secure and plaintext runs
of one seed give the same model bit for bit (and whoever guesses the seed replays them; a
deployment's devices draw from their own entropy, docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from secemb.data import RatingData
from secemb.sim.driver import Behavior, run
from secemb.sim.local import InProcessServers
from secemb.sim.settings import cluster_settings
from secemb.models.base import RecModel
from secemb.protocols.base import Protocol
from secemb.round.results import EpochStats, RoundStats, TrainConfig, TrainResult
from secemb.transport.inprocess import InProcessTransport

__all__ = ["train"]


def train(
    model: RecModel,
    protocol: Protocol,
    train_data: RatingData,
    test_data: RatingData | None,
    config: TrainConfig,
    *,
    transport: InProcessTransport | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    extra_config: dict[str, Any] | None = None,
    val_data: RatingData | None = None,
    behavior: Behavior | None = None,
    after_round: Callable[[int, int, dict[str, Any], dict[int, BaseException]], None] | None = None,
) -> TrainResult:
    """Train ``model`` federatedly with ``protocol`` and return metrics and the final model: a
    reproducible simulation (the devices' private draws come from ``config.seed``).

    Parameters
    ----------
    model: the recommender (its hyperparameters are fixed at construction).
    protocol: roles factory; the two server nodes run its server roles, each device a user
        role per round.
    train_data, test_data: ratings with the same id spaces; ``test_data`` may be ``None``.
    config: loop parameters.
    transport: the transport to use; a fresh :class:`InProcessTransport` by default (whose
        per-round counters are then dropped after each round to bound memory).
    on_round, on_epoch: progress callbacks.
    on_start: called once before the first round with the run's configuration document
        (``result.config``), which includes ``total_rounds``.
    extra_config: merged into ``result.config`` (e.g. the dataset name).
    val_data: optional held-out ratings (same id spaces), scored after every epoch into
        :attr:`EpochStats.val_rmse`; they take no part in training.
    behavior, after_round: simulated device behaviors (faults, malicious devices) and the
        per-round callback, as :func:`secemb.sim.driver.run` takes them.

    Raises
    ------
    VerificationError
        With ``config.verify``, if a retrieved row or the aggregate differs from the direct
        computation, or the servers' model copies diverge.
    """
    settings = cluster_settings(model, protocol, train_data, config)
    cluster = InProcessServers(settings, protocol, model, transport)
    try:
        return run(
            cluster.servers(), model, protocol, train_data, test_data, config, device_randomness="reproducible",
            val_data=val_data, on_start=on_start, on_round=on_round, on_epoch=on_epoch, extra_config=extra_config,
            behavior=behavior, after_round=after_round,
        )
    finally:
        cluster.stop()
