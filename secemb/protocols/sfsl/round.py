"""One round of secure federated submodel learning (Algorithm 1), run in process, message by
message, with every byte counted and every party timed.

1. **PSU** (Algorithm 3, :mod:`secemb.secagg.psu`): the chosen devices' real goods sets are
   united under secure aggregation; the server sends the union to the devices whose filters
   were summed (the PSU's survivors); the others take no further part in the round.
2. **Perturbation and download**: each device runs Algorithm 2 over the union and requests
   W_{S''} (its goods rows, their categories' rows, the dense layers) from the server.
3. **Local training** on the succinct set S ∩ S''.
4. **Secure sum** (:func:`secemb.secagg.run_round`, ``sparse``) of ``(v z, v)`` over the public
   row space (:class:`~secemb.protocols.sfsl.parties.RowSpace`): row ``j`` is summed over the
   live devices holding ``j``; the server applies the count-normalized mean.

Traffic is ``len()`` of every message that crossed (the secagg transcripts' counts plus the
request/reply of step 2); client time is each device's own work (``time.perf_counter``), server
time the server's.  Devices may drop out of either secure aggregation (``drop_after``, the
stages of :data:`secemb.secagg.STAGES`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from secemb.protocols.sfsl.parties import SFSLDevice, SFSLServer, TrainingSettings
from secemb.randomness import RandomBytes, system_rng
from secemb.protocols.sfsl.staged import sum_candidates, sum_config
from secemb.secagg import default_threshold, run_round
from secemb.secagg.psu import BloomParams, run_psu

__all__ = ["RoundReport", "sfsl_round"]


@dataclass
class RoundReport:
    """What one SFSL round cost and produced.

    Attributes
    ----------
    union_size: goods in the PSU's union.
    owners: int64 (union_size,): the chosen devices owning each union index (for Theorem 2's
        p7/p8; the simulation knows it, the server never does).
    perturbed_sizes: per device, |S''|.
    upload_bytes / download_bytes: per device and stage ("psu", "download", "secagg").
    client_seconds: per device and stage ("psu", "perturb", "train", "secagg").
    server_seconds: per stage ("psu", "download", "secagg", "update").
    survivors: the devices whose updates are in the aggregate.
    updated_rows: rows with a non-zero aggregate weight.
    losses: per device that trained on at least one sample, its mean local objective
        (:attr:`~secemb.protocols.sfsl.parties.SFSLDevice.loss`).
    """

    union_size: int = 0
    owners: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    perturbed_sizes: dict[int, int] = field(default_factory=dict)
    upload_bytes: dict[int, dict[str, int]] = field(default_factory=dict)
    download_bytes: dict[int, dict[str, int]] = field(default_factory=dict)
    client_seconds: dict[int, dict[str, float]] = field(default_factory=dict)
    server_seconds: dict[str, float] = field(default_factory=dict)
    survivors: list[int] = field(default_factory=list)
    updated_rows: int = 0
    losses: dict[int, float] = field(default_factory=dict)

    def per_client(self, what: str) -> float:
        """The mean over devices of the total ``"upload"``, ``"download"``, ``"traffic"`` (both)
        bytes or ``"seconds"``."""
        def total(u: int) -> float:
            if what == "seconds":
                return sum(self.client_seconds[u].values())
            up, down = sum(self.upload_bytes[u].values()), sum(self.download_bytes[u].values())
            return {"upload": up, "download": down, "traffic": up + down}[what]
        ids = list(self.upload_bytes)
        return float(np.mean([total(u) for u in ids])) if ids else 0.0


def sfsl_round(
    server: SFSLServer,
    devices: Mapping[int, SFSLDevice],
    round_id: int,
    settings: TrainingSettings,
    rng: np.random.Generator,
    *,
    threshold: int | None = None,
    psu_drop_after: Mapping[int, int] | None = None,
    drop_after: Mapping[int, int] | None = None,
    psu_params: BloomParams | None = None,
    _rng: RandomBytes = system_rng,
) -> RoundReport:
    """Run one round over ``devices`` (id -> device, the chosen clients) and update ``server``.

    ``threshold`` is the secure aggregations' t (default ``n // 2 + 1``); ``psu_drop_after`` /
    ``drop_after`` make devices drop out of the PSU / the update's secure sum after that many
    stages.  ``psu_params`` are the PSU's Bloom parameters (default: the paper's evaluation
    setting, one position per goods, :meth:`~secemb.secagg.psu.BloomParams.exact`).  ``rng`` is
    the training randomness (batch order, stochastic rounding); ``_rng`` the CSPRNG of the
    perturbation and of the secure aggregations.

    Raises
    ------
    secemb.secagg.SecAggAborted
        Fewer than ``threshold`` devices left in either secure aggregation; the server's model
        is then unchanged.
    """
    rep = RoundReport()
    ids = sorted(devices)
    t = default_threshold(len(ids)) if threshold is None else threshold
    for u in ids:
        rep.upload_bytes[u], rep.download_bytes[u], rep.client_seconds[u] = {}, {}, {}
    # 1. private set union of the real goods sets (Algorithm 3 over the dense secure sum)
    bloom = BloomParams.exact(server.space.goods) if psu_params is None else psu_params
    psu = run_psu(bloom, {u: devices[u].real for u in ids}, t, round_id=2 * round_id, drop_after=psu_drop_after,
                  signed=True, _rng=_rng)
    union, live = psu.union, sorted(psu.receivers)
    rep.server_seconds["psu"] = psu.server_seconds
    rep.union_size = int(union.size)
    held = np.concatenate([np.searchsorted(union, devices[u].real) for u in live])
    rep.owners = np.bincount(held, minlength=union.size).astype(np.int64)
    for u in ids:
        rep.upload_bytes[u]["psu"] = psu.upload_bytes[u]
        rep.download_bytes[u]["psu"] = psu.download_bytes[u]
        rep.client_seconds[u]["psu"] = psu.client_seconds[u]
    # 2. perturbation and submodel download
    replies: dict[int, bytes] = {}
    rep.server_seconds["download"] = 0.0
    for u in live:
        t0 = time.perf_counter()
        req = devices[u].request(union, round_id, _rng=_rng)
        rep.client_seconds[u]["perturb"] = time.perf_counter() - t0
        rep.perturbed_sizes[u] = int(devices[u]._perturbed.size)
        t0 = time.perf_counter()
        replies[u] = server.reply(req, round_id)
        rep.server_seconds["download"] += time.perf_counter() - t0
        rep.upload_bytes[u]["download"] = len(req)
        rep.download_bytes[u]["download"] = len(replies[u])
    # 3. local training on the succinct sets
    rows: dict[int, np.ndarray] = {}
    inputs: dict[int, np.ndarray] = {}
    for u in live:
        t0 = time.perf_counter()
        rows[u], inputs[u] = devices[u].train(replies[u], round_id, server.space, settings, rng)
        rep.client_seconds[u]["train"] = time.perf_counter() - t0
        if (loss := devices[u].loss) is not None:
            rep.losses[u] = loss
    # 4. weighted, count-normalized secure sum per row
    sp = server.space
    tr = run_round(sum_config(sp, t, round_id, sum_candidates(sp, union, server.goods_category),
                              min_row_holders=settings.min_row_holders),
                   inputs, rows=rows, drop_after={u: k for u, k in (drop_after or {}).items() if u in inputs},
                   _rng=_rng)
    for u in live:
        rep.upload_bytes[u]["secagg"] = tr.upload_bytes[u]
        rep.download_bytes[u]["secagg"] = tr.download_bytes[u]
        rep.client_seconds[u]["secagg"] = tr.client_seconds[u]
    rep.server_seconds["secagg"] = float(sum(tr.server_seconds.values()))
    rep.survivors = list(tr.survivors)
    t0 = time.perf_counter()
    rep.updated_rows = server.apply(tr.total, settings)
    rep.server_seconds["update"] = time.perf_counter() - t0
    return rep
