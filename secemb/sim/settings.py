"""The servers' configuration for a run: what both server nodes must be told to train a model
with a protocol as a :class:`~secemb.round.results.TrainConfig` says -- the same for an
in-process run (:mod:`secemb.sim.local`) and two server processes
(:mod:`secemb.sim.cluster`)."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Literal

import numpy as np

from secemb.data import RatingData
from secemb.errors import InvalidParameters
from secemb.models.base import RecModel
from secemb.privacy.accounting import DPPlan, plan_dp
from secemb.protocols.base import Protocol
from secemb.ring import FixedPoint
from secemb.round.policy import DEFAULT_MIN_USERS, MIN_USERS_FLOOR
from secemb.round.results import TrainConfig

__all__ = [
    "DEVICE_RANDOMNESS",
    "DeviceRandomness",
    "cluster_settings",
    "dp_plan_of",
    "public_init_seed",
    "rating_range_of",
    "simulation_floor",
]

_PUBLIC_INIT = b"secemb/public-model-init/v1"

#: Where a run's simulated devices draw their private state -- the initialization of their
#: private parameters, their task samples, the padding slots of their requests
#: (:func:`secemb.sim.driver.run`):
#:
#: ``"reproducible"`` -- from the run's seed (``numpy.random.default_rng(seed)``, a derivation
#: apart from :func:`public_init_seed`'s; the seed itself is never sent).  One seed, one model:
#: secure equals plaintext and an in-process run equals a networked one bit for bit.  A
#: simulation only: whoever guesses the seed (a small one is found from ``init_seed`` by brute
#: force) replays every device.
#:
#: ``"private"`` -- each device's own OS entropy
#: (:func:`secemb.client.device.private_rng`), as a deployed device draws it: the run's seed
#: drives only the public model and the operator's choice of users per round, and no two runs
#: give the same model.
DeviceRandomness = Literal["reproducible", "private"]
DEVICE_RANDOMNESS: tuple[DeviceRandomness, ...] = ("reproducible", "private")


def public_init_seed(seed: int) -> int:
    """The seed server 0 initializes the public model from: SHA-256 of a domain tag and the
    run's ``seed``, as a 63-bit int.

    One-way, but not hiding: a small ``seed`` is found from this value by trying seeds (issue
    33, item 4: 4242 in 0.04 s).  So nothing private may come from ``seed`` where the servers
    are not the simulation's own: there the devices draw from their own entropy
    (:data:`DeviceRandomness` ``"private"``)."""
    digest = hashlib.sha256(_PUBLIC_INIT + int(seed).to_bytes(16, "little", signed=True)).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def rating_range_of(train_data: RatingData, config: TrainConfig) -> tuple[float, float]:
    """The public rating scale: ``config.rating_range``, else the training set's min and max."""
    if config.rating_range is not None:
        return float(config.rating_range[0]), float(config.rating_range[1])
    return float(train_data.ratings.min()), float(train_data.ratings.max())


def simulation_floor(train_data: RatingData, config: TrainConfig) -> int:
    """The floor on users per aggregate (``min_users``) of a simulation of ``train_data``:
    the deployment default (10), lowered to the smallest round the run has (the last round
    of an epoch), but never below 2.  A simulation whose smallest round has one user is
    refused when that round opens."""
    active = int(np.unique(train_data.users).size)
    per_round = config.users_per_round
    smallest = active if active < per_round else (active % per_round or per_round)
    return min(DEFAULT_MIN_USERS, max(MIN_USERS_FLOOR, smallest))


def dp_plan_of(model: RecModel, protocol: Protocol, train_data: RatingData, config: TrainConfig) -> DPPlan | None:
    """The run's DP noise (``None`` without ``config.dp``): added by each server for a protocol
    that declares ``central_dp`` (with Poisson sampling), by each device for one that declares
    ``local_dp`` (DP-FedRec, with the epoch permutation).

    Raises
    ------
    InvalidParameters: the protocol supports neither; the sampling does not match the mode;
        the noise does not fit the ring."""
    if config.dp is None:
        return None
    caps = protocol.capabilities
    if not (caps.central_dp or caps.local_dp):
        raise InvalidParameters(f"protocol {protocol.name!r} supports no differential privacy")
    want = "poisson" if caps.central_dp else "permutation"
    if config.sampling != want:
        raise InvalidParameters(f"DP with protocol {protocol.name!r} needs sampling={want!r} (its accounting "
                                f"assumes it), got {config.sampling!r}")
    return plan_dp(config.dp, central=caps.central_dp, fp=FixedPoint(config.ring_bits, config.frac_bits),
                   coordinates=train_data.num_items * model.sparse_width + model.dense_size,
                   active_users=int(np.unique(train_data.users).size), users_per_round=config.users_per_round,
                   epochs=config.epochs, rounds_per_epoch=config.rounds_per_epoch)


def cluster_settings(model: RecModel, protocol: Protocol, train_data: RatingData, config: TrainConfig,
                     *, deadline_s: float = 120.0, item_features: str | os.PathLike | None = None,
                     frozen_table: str | os.PathLike | None = None, min_users: int | None = None) -> dict[str, Any]:
    """The :class:`~secemb.server.config.ServerConfig` fields two servers need to train
    ``model`` with ``protocol`` as ``config`` says (both servers get the same).

    ``item_features``: the file :func:`secemb.data.features.save_item_features` wrote for a
    feature model (FM, DeepFM); server processes build the model from it.  In-process nodes
    are handed the model itself and need none.  ``frozen_table``: likewise the file
    :func:`secemb.inference.saved.save_frozen_table` wrote for GREC's denoiser (the
    recommender's public table, its frozen columns).  ``min_users``: the servers' (and the
    simulated devices') floor on users per aggregate; default :func:`simulation_floor`."""
    extra = {key: str(path) for key, path in (("item_features", item_features), ("frozen_table", frozen_table))
             if path is not None}
    return {
        **extra,
        "min_users": simulation_floor(train_data, config) if min_users is None else min_users,
        **_central_dp(dp_plan_of(model, protocol, train_data, config)),
        "num_items": train_data.num_items,
        "num_users": train_data.num_users,
        "protocol": protocol.name,
        "layout": protocol.layout,
        "relay": bool(protocol.relay),
        "expansion": float(protocol.expansion),
        "layout_seed": int(protocol.layout_seed),
        # the run's own choice of bounded payloads, stated (a deployment's default is on where they apply)
        "protocol_options": ({"bound": False} if "bound" in protocol.capabilities.options else {}) | protocol.spec(),
        "model": model.name,
        "model_hparams": model.spec(),
        "rating_range": rating_range_of(train_data, config),
        "init_seed": public_init_seed(config.seed),
        "lr": config.lr,
        "beta1": config.beta1,
        "beta2": config.beta2,
        "eps": config.eps,
        "lazy_adam": config.lazy_adam,
        "ring_bits": config.ring_bits,
        "frac_bits": config.frac_bits,
        "m_prime": config.m_prime,
        "alpha": config.alpha,
        "deadline_s": deadline_s,
    }


def _central_dp(plan: DPPlan | None) -> dict[str, float]:
    """Each server's noise scale (ring units) and the devices' L2 clip: the plan's under
    central DP, else 0 (none)."""
    if plan is None or not plan.central:
        return {"dp_sigma": 0.0, "dp_clip": 0.0}
    return {"dp_sigma": plan.sigma_ring, "dp_clip": plan.settings.clip}
