"""``secemb bench grec``: GREC's private inference (grec.txt Table 3; docs/inference.md).

Per model (MF, NCF, FM, DeepFM) and seed:

1. the recommender is trained federatedly on the 80/20 split of the seed with Table 8's preset
   (the experiment builder; ``plaintext`` -- SecEmb's bit-identical twin, as ``secemb bench
   accuracy`` trains SecEmb rows -- or ``secemb`` itself with ``secure=True``); by default
   (:data:`VALID_FRACTION`, :data:`EARLY_STOP`) 10 % of each user's training ratings are held
   out as validation data (:func:`secemb.data.validation_split`) and the best validation
   epoch's model is kept, training stopped after 10 epochs without improvement (RecBole's
   ``stopping_step``);
2. the denoiser F_p (:class:`~secemb.inference.Denoiser`, Table 8's d^, lr and reg) is trained
   federatedly *after* it, on the same training ratings, a fresh noise draw per local step; by
   the plaintext twin of SecEmb, or SecEmb itself with ``secure=True`` (tests/inference prove the
   two give the same denoiser bit for bit and that the SecEmb run's uploads are SecEmb's); it is
   scored on the same validation ratings (post-processed RMSE; the recommender never trained on
   them either) and early-stopped the same way: at the paper's 50 epochs the denoisers overfit;
3. every test user draws one ``Z'_u`` (analytic Gaussian, sensitivity 2B, ``(epsilon,
   delta)``): naive LDP sends ``clip(H_u) + Z'_u`` and predicts the server's ``r~`` plus the
   device's private offset (Eq. 7); GREC sends the same matrix re-clipped (Eq. 15) and
   denoises (Eq. 16); ``reclipped_no_denoiser`` is the re-clipped release without F_p (what
   re-clipping alone buys).  RMSE of predictions clipped to the rating scale, beside the
   non-private recommender's on the same test pairs.

Table 14 (:func:`ranking`): HR@10 and NDCG@10 of the test ratings >= 4 against 100 sampled
unrated items, under the same four predictions; :func:`rank_saved` computes them apart from the
training, from a run's saved models.  Figure 4 (:func:`device_cost`): one device's
time and held memory to predict 150 items, full local model against perturb + denoise.
Table 15 (:func:`server_minutes`): the server's minutes per round of GREC's training protocol
for 100-500 active users on ML-1M's shape.  Table 9 (:func:`table9`): MF trained losslessly
(GREC) against FedMF w/ Top-K (:mod:`secemb.protocols.topk`), RMSE and reduction ratio.

The paper's cells (all five datasets) are in :data:`PAPER_TABLE3`.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from secemb.bench.progress import Steps
from secemb.data.synthetic import STANDS_FOR
from secemb.errors import InvalidParameters
from secemb.randomness import RandomBytes

__all__ = ["DENOISER_HPARAMS", "FIGURE4_ITEMS", "HAT_D_BY_DIM", "PAPER_TABLE3", "PAPER_TABLE9", "PAPER_TABLE15",
           "PREDICTIONS", "TABLE15_USERS", "device_cost", "evaluate", "rank_saved", "ranking", "run", "run_one",
           "server_minutes", "table", "table9", "TABLE9_SCHEMES"]

#: Table 3: paper dataset -> model -> (non-private, naive LDP, post-processing LDP) RMSE means
#: (a synthetic stand-in is compared with the dataset it stands for, ``STANDS_FOR``)
PAPER_TABLE3: dict[str, dict[str, tuple[float, float, float]]] = {
    "ml-100k": {"mf": (0.944, 1.693, 0.957), "ncf": (0.949, 1.297, 0.962), "fm": (0.937, 1.851, 0.945),
                "deepfm": (0.939, 2.120, 0.943)},
    "ml-1m": {"mf": (0.903, 1.637, 0.919), "ncf": (0.897, 1.169, 0.915), "fm": (0.906, 2.350, 0.908),
              "deepfm": (0.902, 2.281, 0.905)},
    "ml-10m": {"mf": (0.868, 1.403, 0.875), "ncf": (0.819, 1.383, 0.839), "fm": (0.848, 1.411, 0.881),
               "deepfm": (0.821, 1.703, 0.833)},
    "ml-25m": {"mf": (0.864, 1.603, 0.870), "ncf": (0.786, 1.496, 0.812), "fm": (0.789, 2.042, 0.813),
               "deepfm": (0.791, 1.573, 0.799)},
    "yelp": {"mf": (1.050, 1.580, 1.097), "ncf": (1.035, 1.857, 1.083), "fm": (1.008, 1.851, 1.055),
             "deepfm": (1.011, 1.776, 1.055)},
}
#: Table 8, ML-100K: the denoiser's d^, learning rate and regularization per model
DENOISER_HPARAMS: dict[str, dict[str, float]] = {
    "mf": {"hat_d": 8, "lr": 0.025, "reg": 0.001},
    "ncf": {"hat_d": 5, "lr": 0.025, "reg": 0.001},
    "fm": {"hat_d": 8, "lr": 0.025, "reg": 0.01},
    "deepfm": {"hat_d": 8, "lr": 0.025, "reg": 0.001},
}
#: the share of each user's training ratings the bench holds out for validation by default
VALID_FRACTION = 0.1
#: the bench's default patience (epochs without a better validation RMSE; RecBole's stopping_step)
EARLY_STOP = 10

#: recommender epochs per model on ML-100K, bounded for this machine (docs/results.md: MF/NCF
#: converge by ~80 epochs at Table 8's settings, FM by ~15; a DeepFM epoch costs ~45 s here)
REC_EPOCHS: dict[str, int] = {"mf": 20, "ncf": 20, "fm": 8, "deepfm": 2}


def _release(denoiser: Any, users: np.ndarray, _rng: RandomBytes | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One noise draw ``Z'_u`` per device of ``users``: the naive release ``clip(H_u) + Z'_u``
    (Eq. 7) and GREC's re-clipped one (Eq. 15), both float64 ``(U, R, d)``.  ``_rng``: random
    bytes (tests only; the OS CSPRNG by default)."""
    from secemb.inference import clip_frobenius, gaussian_noise

    ctx = denoiser.context
    mech = ctx.mechanism
    h = ctx.h[users]
    sent_naive = clip_frobenius(h, mech.bound) + gaussian_noise(h.shape, mech.sigma, _rng=_rng)
    return sent_naive, clip_frobenius(sent_naive, mech.bound)


#: the four predictions of :func:`_predictions`, in its order
PREDICTIONS = ("non_private", "naive_ldp", "reclipped_no_denoiser", "post_processing_ldp")


def _predictions(denoiser: Any, den_table: np.ndarray, den_dense: np.ndarray, rec_model: Any, rec_table: np.ndarray,
                 rec_dense: np.ndarray, rec_store: Any, users: np.ndarray, items: np.ndarray,
                 release: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The non-private, naive-LDP, re-clipped (no denoiser) and post-processed predictions of
    the pairs ``(users[j], items[j])``, one release per distinct user shared by all four:
    ``release`` ``(uniq, sent_naive, h_tilde)`` drawn by :func:`_release` for the ascending
    ``uniq`` (a superset of ``users``), else drawn here."""
    if release is None:
        uniq, pair_user = np.unique(users, return_inverse=True)
        sent_naive, h_tilde = _release(denoiser, uniq)
    else:
        uniq, sent_naive, h_tilde = release
        pair_user = np.searchsorted(uniq, users)
    r_tilde = denoiser.noisy_scores(uniq, h_tilde, rec_table[items], pair_user)
    z = h_tilde - denoiser.context.h[uniq]
    return {"non_private": rec_model.predict(rec_table, rec_dense, rec_store, users, items),
            "naive_ldp": denoiser.noisy_scores(uniq, sent_naive, rec_table[items], pair_user),
            "reclipped_no_denoiser": r_tilde,
            "post_processing_ldp": denoiser.denoise(den_table, den_dense, uniq, h_tilde, z, pair_user, items, r_tilde)}


def evaluate(denoiser: Any, den_table: np.ndarray, den_dense: np.ndarray, rec_model: Any, rec_table: np.ndarray,
             rec_dense: np.ndarray, rec_store: Any, test: Any, rating_range: tuple[float, float]) -> dict[str, float]:
    """Table 3: RMSE of the four predictions (:func:`_predictions`) on ``test``, clipped to the
    rating scale.  One noise draw per test user serves all: naive LDP sends
    ``clip(H_u) + Z'_u`` (Eq. 7); GREC sends that matrix re-clipped (Eq. 15) and denoises."""
    from secemb.metrics.rating import rmse

    preds = _predictions(denoiser, den_table, den_dense, rec_model, rec_table, rec_dense, rec_store, test.users,
                         test.items)
    out = {k: rmse(v, test.ratings, rating_range) for k, v in preds.items()}
    return {k: float(v) for k, v in out.items() if v is not None}


def _negatives(train: Any, test: Any, users: np.ndarray, negatives: int, seed: int) -> np.ndarray:
    """int64 ``(len(users), negatives)``: for each row's user, ``negatives`` items it rated
    neither in ``train`` nor in ``test``, drawn uniformly with replacement (generator ``seed``).

    Raises
    ------
    InvalidParameters
        A user of ``users`` rated every item."""
    m = np.int64(train.num_items)
    # the (user, item) pairs rated in training or test, as sorted keys (a dense users x items
    # mask would take 0.9 GB on the Yelp stand-in)
    seen = np.unique(np.concatenate([train.users.astype(np.int64) * m + train.items,
                                     test.users.astype(np.int64) * m + test.items]))
    if users.size and (np.bincount(seen // m, minlength=int(users.max()) + 1)[users] >= m).any():
        raise InvalidParameters("a user with a positive test rating rated every item: no negative to draw")
    rng = np.random.default_rng(seed)
    negs = np.empty((users.size, negatives), dtype=np.int64)
    todo = np.arange(users.size)
    while todo.size:
        draw = rng.integers(0, train.num_items, (todo.size, 4 * negatives))
        keys = users[todo, None].astype(np.int64) * m + draw
        at = np.minimum(np.searchsorted(seen, keys), seen.size - 1)
        ok = seen[at] != keys
        # a row's first `negatives` unseen draws (repeats allowed, as in uniform sampling with replacement)
        order = np.argsort(~ok, axis=1, kind="stable")[:, :negatives]
        full = ok.sum(axis=1) >= negatives
        negs[todo[full]] = np.take_along_axis(draw, order, axis=1)[full]
        todo = todo[~full]
    return negs


def ranking(denoiser: Any, den_table: np.ndarray, den_dense: np.ndarray, rec_model: Any, rec_table: np.ndarray,
            rec_dense: np.ndarray, rec_store: Any, train: Any, test: Any, *, negatives: int = 100, k: int = 10,
            threshold: float = 4.0, seed: int = 0, chunk: int = 1 << 14,
            _rng: RandomBytes | None = None) -> dict[str, float]:
    """Table 14: HR@k and NDCG@k of each test rating >= ``threshold`` (the positives; the paper
    does not say) ranked against ``negatives`` items the user rated neither in training nor in
    test, drawn uniformly (Koren 2008), under the four predictions (one release per user).

    Scored ``chunk`` positives at a time (``chunk * (negatives + 1)`` pairs; 10.6 M pairs on
    the ML-1M stand-in): the releases are drawn once for every user first, and each positive
    keeps only its rank (the candidates scoring at least as high: ties rank it last, as
    :func:`secemb.metrics.ranking.hit_rate` and :func:`~secemb.metrics.ranking.ndcg` do), so
    the cells do not depend on ``chunk`` (tested).  ``_rng``: the releases' random bytes
    (tests only; the OS CSPRNG by default)."""
    pos = test.ratings >= threshold
    pu, pi = test.users[pos].astype(np.int64), test.items[pos].astype(np.int64)
    cand = np.concatenate([pi[:, None], _negatives(train, test, pu, negatives, seed)], axis=1)
    uniq = np.unique(pu)
    release = (uniq, *_release(denoiser, uniq, _rng))
    ranks: dict[str, list[np.ndarray]] = {}
    for lo in range(0, pu.size, max(1, int(chunk))):
        part = cand[lo : lo + chunk]
        preds = _predictions(denoiser, den_table, den_dense, rec_model, rec_table, rec_dense, rec_store,
                             np.repeat(pu[lo : lo + chunk], negatives + 1), part.reshape(-1), release)
        for name, p in preds.items():
            scores = p.reshape(part.shape)
            ranks.setdefault(name, []).append((scores[:, 1:] >= scores[:, :1]).sum(axis=1))
    discount = 1.0 / np.log2(np.arange(k) + 2.0)
    out: dict[str, float] = {"positives": float(pu.size)}
    for name in PREDICTIONS:
        rank = np.concatenate(ranks.get(name, [np.zeros(0, dtype=np.int64)]))
        top = rank < k
        out[f"hr@{k}_{name}"] = float(top.mean()) if rank.size else 0.0
        out[f"ndcg@{k}_{name}"] = float(np.mean(np.where(top, discount[np.minimum(rank, k - 1)], 0.0))) \
            if rank.size else 0.0
    return out


def rank_saved(folder: Any, *, data_dir: Any = None, chunk: int = 1 << 14) -> dict[str, Any]:
    """Table 14 from a saved run (``secemb bench grec --save-dir``, e.g. with ``--no-ranking``):
    ``folder`` holds ``recommender`` (the saved-model folder) and ``denoiser.npz``.  The split
    is rebuilt from the recommender's recorded dataset, test fraction, validation fraction and
    seed, and checked against its recorded training interactions (validation ones excluded);
    the cells are :func:`ranking`'s with that seed (fresh releases).  Returns the model,
    dataset, seed, the cells and the seconds ranking took.

    Raises
    ------
    InvalidParameters
        ``folder`` lacks either file, the denoiser was trained against another recommender (its
        SHA-256), the saved model records no split, or the rebuilt split's training
        interactions are not the recorded ones.
    InvalidMessage
        A corrupted saved model or denoiser.
    """
    from pathlib import Path

    import torch
    from threadpoolctl import threadpool_limits

    from secemb.data import by_user, load_dataset, validation_split
    from secemb.inference.saved import load_denoiser
    from secemb.inference.trained import TrainedModel

    root = Path(folder)
    if not (root / "recommender").is_dir() or not (root / "denoiser.npz").is_file():
        raise InvalidParameters(f"{root}: expected a 'secemb bench grec --save-dir' folder (recommender/, "
                                f"denoiser.npz)")
    trained = TrainedModel.load(root / "recommender")
    cfg = trained.info.get("config", {})
    try:
        dataset, fraction, seed = cfg["dataset"], float(cfg["test_fraction"]), cfg["split_seed"]
        if not isinstance(dataset, str) or isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise InvalidParameters(f"{root / 'recommender'}: the saved model records no split (dataset, "
                                f"test_fraction, a split_seed >= 0)") from None
    den, den_table, den_dense = load_denoiser(root / "denoiser.npz", trained, recommender=root / "recommender")
    train, _, test = trained.model.task.split(load_dataset(dataset, data_dir, seed=seed), fraction, seed)
    fit = validation_split(train, cfg.get("valid_fraction") or 0.0, seed)[0]  # what the recommender trained on
    rated = by_user(fit, order="time" if fit.timestamps is not None else "item")  # as TrainedModel records it
    if not (np.array_equal(rated.indptr, trained.rated_indptr) and np.array_equal(rated.items, trained.rated_items)):
        raise InvalidParameters(f"{root}: the rebuilt {dataset} split (seed {seed}) is not the one the recommender "
                                f"was trained on")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        cells = ranking(den, den_table, den_dense, trained.model, trained.table, trained.dense, trained.user_store,
                        train, test, seed=seed, chunk=chunk)
    return {"model": trained.model.name, "dataset": dataset, "seed": seed, "dim": int(getattr(trained.model, "dim", 0)),
            "epsilon": den.mechanism.epsilon, "rec_model_sha256": trained.model_sha256,
            "ranking_seconds": time.perf_counter() - t0, **cells}


#: Table 10: d^ by the recommender's d (MF, FM, DeepFM; NCF's d are its own)
HAT_D_BY_DIM: dict[str, dict[int, int]] = {
    "mf": {64: 8, 128: 10, 512: 12}, "fm": {64: 8, 128: 10, 512: 12}, "deepfm": {64: 8, 128: 10, 512: 12},
    "ncf": {16: 5, 20: 5, 64: 6, 128: 8},
}


def run_one(model: str, *, dataset: str = "ml-100k", seed: int = 0, epsilons: Sequence[float] = (1.0,),
            delta: float = 1e-4, bound: float = 1.0, dim: int | None = None, rec_epochs: int | None = None,
            den_epochs: int = 10, secure: bool = False, users_per_round: int = 100, m_prime: int = 200,
            data_dir: Any = None, save_dir: Any = None, with_ranking: bool = True, network: bool = False,
            valid_fraction: float = VALID_FRACTION, early_stop: int | None = EARLY_STOP,
            log: Callable[[str], None] = lambda s: None,
            epoch_done: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Train the recommender once (``dim``: its d, default the preset's), then for each epsilon
    of ``epsilons`` a denoiser for that release (Table 12 varies epsilon), and evaluate; one
    result row (JSON-able) per epsilon.  d^ is Table 10's for ``dim`` where it lists one, else
    Table 8's.  ``save_dir``: write ``<save_dir>/<model>-seed<k>[-eps<e>]/recommender`` (the
    saved-model folder) and ``.../denoiser.npz`` for ``secemb infer``.  ``with_ranking``: also
    Table 14's HR/NDCG cells (:func:`ranking`; 101 predictions per positive test rating).
    ``network``: train each denoiser through two server processes on 127.0.0.1
    (:func:`~secemb.training.networked.train_on_local_cluster`: the servers read the recommender's public
    table for the frozen columns; the devices run here), the model the in-process run gives.
    ``valid_fraction``: the share of each user's training ratings held out for validation (both
    models train on the rest and are scored on it after every epoch; 0: none, both train on all
    of them); ``early_stop``: the patience of both models' early stopping (``None``: each keeps
    its last epoch; needs ``valid_fraction > 0``).  ``epoch_done`` hears of every planned epoch,
    those early stopping skipped included (when it stops)."""
    import torch

    from secemb.data import concat
    from secemb.sim.settings import rating_range_of
    from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
    from secemb.protocols import get_protocol
    from secemb.training import TrainConfig, train
    from secemb.training.builder import build_experiment
    from secemb.training.experiment import Experiment, _train_built

    if model not in DENOISER_HPARAMS:
        raise InvalidParameters(f"model must be one of {sorted(DENOISER_HPARAMS)}, got {model!r}")
    if not epsilons:
        raise InvalidParameters("give at least one epsilon")
    torch.set_num_threads(1)  # small per-device batches: more threads only contend
    protocol = "secemb" if secure else "plaintext"
    epochs = REC_EPOCHS[model] if rec_epochs is None else rec_epochs
    t0 = time.perf_counter()
    built = build_experiment(Experiment(dataset=dataset, data_dir=data_dir, model=model, protocol=protocol,
                                        layout="full", relay=False, epochs=epochs, users_per_round=users_per_round,
                                        m_prime=m_prime, seed=seed, dim=dim, valid_fraction=valid_fraction,
                                        early_stop=early_stop))
    rec = _train_built(built, on_epoch=partial(_log_epoch, log, "recommender", done=epoch_done))
    _skipped(epoch_done, epochs, rec)
    t_rec = time.perf_counter() - t0
    d = int(built.extra_config["dim"])
    rec_kept = rec.kept
    log(f"{model} d={d} seed {seed}: recommender epoch {rec.epoch_kept} of {len(rec.epochs)} kept, test RMSE "
        f"{None if rec_kept is None else rec_kept.test_metrics}, {t_rec:.0f} s")
    # every training rating, validation included: what a device has rated (ranking's negatives avoid them)
    rated = built.train_data if built.val_data is None else concat(built.train_data, built.val_data)
    hp = DENOISER_HPARAMS[model]
    hat_d = HAT_D_BY_DIM[model].get(d, int(hp["hat_d"]))
    rating_range = rating_range_of(built.train_data, built.config)
    rows = []
    for epsilon in epsilons:
        mech = GaussianLDP(float(epsilon), delta, bound)
        ctx = DenoiserContext.from_trained(built.model, rec.table, rec.dense, rec.user_store, mech, built.features)
        den = Denoiser.for_context(ctx, hat_d=hat_d, reg=hp["reg"], rating_range=rating_range)
        cfg = TrainConfig(epochs=den_epochs, users_per_round=users_per_round, m_prime=m_prime, lr=hp["lr"],
                          seed=seed, rating_range=rating_range, early_stop=early_stop)
        extra = {"valid_fraction": float(valid_fraction)}
        t1 = time.perf_counter()
        den_protocol = get_protocol(protocol, layout="full", relay=False)
        on_epoch = partial(_log_epoch, log, "denoiser", done=epoch_done)
        if network:
            from secemb.training.networked import train_on_local_cluster

            dres = train_on_local_cluster(den, den_protocol, built.train_data, built.test_data, cfg,
                                          frozen_table=den.public_table, on_epoch=on_epoch, val_data=built.val_data,
                                          extra_config=extra)
        else:
            dres = train(den, den_protocol, built.train_data, built.test_data, cfg, on_epoch=on_epoch,
                         val_data=built.val_data, extra_config=extra)
        _skipped(epoch_done, den_epochs, dres)
        t_den = time.perf_counter() - t1
        cells = evaluate(den, dres.table, dres.dense, built.model, rec.table, rec.dense, rec.user_store,
                         built.test_data, rating_range)
        if with_ranking:
            cells.update(ranking(den, dres.table, dres.dense, built.model, rec.table, rec.dense, rec.user_store,
                                 rated, built.test_data, seed=seed))
        log(f"{model} d={d} seed {seed} epsilon {epsilon}: {cells} (denoiser {t_den:.0f} s)")
        if save_dir is not None:
            from pathlib import Path

            from secemb.inference.saved import save_denoiser
            from secemb.inference.trained import TrainedModel

            folder = Path(save_dir) / (f"{model}-seed{seed}" + ("" if len(epsilons) == 1 else f"-eps{epsilon}"))
            TrainedModel.from_training(built.model, built.train_data, rec).save(folder / "recommender")
            save_denoiser(folder / "denoiser.npz", den, dres.table, dres.dense,
                          recommender_sha256=rec.model_sha256, selection=dres.selection())
        rows.append({"model": model, "dataset": dataset, "seed": seed, "dim": d, "epsilon": float(epsilon),
                     "delta": delta, "bound": bound, "sigma": mech.sigma, "protocol": protocol, "rec_epochs": epochs,
                     "den_epochs": den_epochs, "hat_d": hat_d, "den_lr": hp["lr"], "den_reg": hp["reg"],
                     "rows": ctx.rep.rows, "rec_model_sha256": rec.model_sha256, "rec_seconds": t_rec,
                     "den_seconds": t_den, "den_network": network, "valid_fraction": float(valid_fraction),
                     "early_stop": early_stop, "rec_selection": rec.selection(), "den_selection": dres.selection(),
                     "den_test_per_epoch": [e.test_rmse for e in dres.epochs], **cells})
    return rows


def _skipped(done: Callable[[], None] | None, planned: int, result: Any) -> None:
    """Tell ``done`` of the planned epochs early stopping did not run (the progress counts them)."""
    if done is not None:
        for _ in range(planned - len(result.epochs)):
            done()


def _log_epoch(log: Callable[[str], None], what: str, e: Any, done: Callable[[], None] | None = None) -> None:
    log(f"  {what} epoch {e.epoch}: {e.test_metrics}")
    if done is not None:
        done()


def run(models: Sequence[str] = ("mf", "ncf", "fm", "deepfm"), seeds: Sequence[int] = (0,),
        log: Callable[[str], None] = lambda s: None, progress: Steps | None = None,
        **options: Any) -> list[dict[str, Any]]:
    """:func:`run_one` for every model and seed (``options`` passed through), rows flattened;
    ``progress`` hears of every epoch (the recommender's, then each epsilon's denoiser's).
    numpy's BLAS is held to one thread, as torch is in :func:`run_one`: the per-device products
    are small, and on a loaded machine BLAS threads spinning for a core made the DeepFM
    denoiser's steps 5x slower (same results: one device's products do not depend on it)."""
    from threadpoolctl import threadpool_limits

    defaults = {k: p.default for k, p in inspect.signature(run_one).parameters.items()}
    given = {**defaults, **options}
    total = len(seeds) * sum((REC_EPOCHS.get(m, 0) if given["rec_epochs"] is None else given["rec_epochs"])
                             + len(given["epsilons"]) * given["den_epochs"] for m in models)
    done = 0

    def epoch_done() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(f"training: {done} of {total} epochs (recommenders, denoisers)", done, total)

    if progress is not None:
        progress(f"training: 0 of {total} epochs (recommenders, denoisers)", 0, total)
    with threadpool_limits(limits=1, user_api="blas"):
        return [row for m in models for s in seeds
                for row in run_one(m, seed=s, log=log, epoch_done=epoch_done, **options)]


def table(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean (and population std) over seeds per (model, d, epsilon) of every RMSE and ranking cell, the naive
    to post-processing RMSE reduction in percent (the paper's "Diff"), and the paper's cells."""
    cells = ("non_private", "naive_ldp", "reclipped_no_denoiser", "post_processing_ldp")
    keys = [*cells, *(f"{m}@10_{c}" for m in ("hr", "ndcg") for c in cells)]
    out = []
    for model, dim, eps in dict.fromkeys((r["model"], r.get("dim"), r["epsilon"]) for r in rows):
        mine = [r for r in rows if (r["model"], r.get("dim"), r["epsilon"]) == (model, dim, eps)]
        cell: dict[str, Any] = {"model": model, "dim": dim, "epsilon": eps, "seeds": len(mine)}
        for key in keys:
            if all(key in r for r in mine):
                vals = np.array([r[key] for r in mine])
                cell[key], cell[key + "_std"] = float(vals.mean()), float(vals.std())
        cell["diff_pct"] = 100.0 * (cell["naive_ldp"] - cell["post_processing_ldp"]) / cell["naive_ldp"]
        ds = str(mine[0].get("dataset", "ml-100k"))
        paper = PAPER_TABLE3.get(STANDS_FOR.get(ds, ds), {}).get(model)
        if paper is not None and eps == 1.0:
            cell["paper"] = {"non_private": paper[0], "naive_ldp": paper[1], "post_processing_ldp": paper[2]}
        out.append(cell)
    return out


#: Figure 4's workload: items a device scores in one inference
FIGURE4_ITEMS = 150


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall milliseconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def _perturb_and_denoise(den: Any, e: np.ndarray, dense: np.ndarray, users: np.ndarray, items: np.ndarray,
                         reply: np.ndarray) -> np.ndarray:
    """GREC's device work for one inference: the release of device 0, then F_p on the items."""
    from secemb.inference import privatize

    ctx = den.context
    h_tilde, z = privatize(ctx.h[:1], ctx.mechanism)
    return np.asarray(den.denoise(e, dense, np.zeros(1, dtype=np.int64), h_tilde, z, users, items,
                                  reply + ctx.offset[0]))


def device_cost(models: Sequence[str] = ("mf", "ncf", "fm", "deepfm"), *, dataset: str = "ml-100k",
                items: int = FIGURE4_ITEMS, repeats: int = 30, data_dir: Any = None,
                seed: int = 0) -> list[dict[str, Any]]:
    """Figure 4: one device's time and held memory to predict ``items`` items.

    * ``full``: the device holds the whole recommender (its table, dense vector and own private
      vector) and computes ``model.predict`` for the items;
    * ``grec``: the device privatizes its representation (one release) and runs F_p on the
      items' noisy scores (the server's reply, taken as given: the server's time is not the
      device's); it holds ``H_u``, ``Z_u``, its offset, F_i's ``e`` (m x d^) and F_p's dense.

    Time: median wall milliseconds over ``repeats`` calls (one torch thread).  Memory: the bytes of
    the arrays the device holds for the computation (``nbytes``), not the process's peak.
    Parameters are the models' initial values at the dataset's real shapes (ML-100K: real
    features); time and memory do not depend on the values.
    """
    import torch

    from secemb.data import load_dataset
    from secemb.data.features import load_features
    from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
    from secemb.models import get_model, get_preset, uses_features

    torch.set_num_threads(1)
    data = load_dataset(dataset, data_dir, seed=seed)
    rng = np.random.default_rng(seed)
    out = []
    for name in models:
        preset = get_preset(name, "ml-100k" if dataset not in ("ml-1m", "ml-10m", "ml-25m", "yelp") else dataset)
        kw: dict[str, Any] = {}
        if uses_features(name):
            kw["features"] = load_features(dataset, data_dir, num_users=data.num_users, num_items=data.num_items,
                                           seed=seed)
        model = get_model(name, dim=preset.dim, reg=preset.reg, **kw)
        table, dense = model.init_public(data.num_items, rng)
        params = model.init_private(data.num_users, rng)  # device 0's row is used
        chosen = rng.choice(data.num_items, size=items, replace=False)
        users = np.zeros(items, dtype=np.int64)
        mech = GaussianLDP(1.0, 1e-4, 1.0)
        ctx = DenoiserContext.from_trained(model, table, dense, params, mech, kw.get("features"))
        den = Denoiser.for_context(ctx, hat_d=int(DENOISER_HPARAMS[name]["hat_d"]))
        den_table, den_dense = den.init_public(data.num_items, rng)
        e = np.ascontiguousarray(den_table[:, : den.hat_d])
        reply = rng.normal(3.0, 1.0, items)  # the server's scores of the items (values irrelevant)

        row: dict[str, Any] = {"model": name, "dataset": dataset, "items": items, "repeats": repeats,
                               "full_ms": _median_ms(partial(model.predict, table, dense, params, users, chosen),
                                                     repeats),
                               "grec_ms": _median_ms(partial(_perturb_and_denoise, den, e, den_dense, users, chosen,
                                                             reply), repeats)}
        row["full_bytes"] = int(table.nbytes + dense.nbytes + params[0].nbytes)
        row["grec_bytes"] = int(2 * ctx.h[0].nbytes + 8 + e.nbytes + den_dense.nbytes)
        row["time_ratio"] = row["full_ms"] / row["grec_ms"]
        row["memory_ratio"] = row["full_bytes"] / row["grec_bytes"]
        out.append(row)
    return out


#: Table 15: GREC's and HE's (CKKS) server minutes per iteration on ML-1M, by active users
TABLE15_USERS = (100, 200, 300, 400, 500)
PAPER_TABLE15: dict[str, tuple[float, ...]] = {"grec": (0.99, 1.92, 2.93, 3.88, 4.90),
                                               "he-ckks": (127.26, 244.51, 391.76, 519.05, 646.38)}


def server_minutes(users: Sequence[int] = TABLE15_USERS, *, dataset: str = "ml-1m",
                   on_done: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Table 15: one real training round of ``n`` users (each of ``users``) with GREC's training
    protocol (:class:`~secemb.protocols.grec.GrecProtocol`: full-model download, ``m'`` full DPF
    row keys per user, each server evaluating every key over the whole catalogue), MF at d = 64
    on ``dataset``'s comm round data (:func:`secemb.bench.comm.round_data`: the synthetic
    stand-in of ML-1M's shape, the real ratings are not on this machine) with its ``m'``
    (:data:`secemb.bench.comm.DATASETS`, 300 on ML-1M), the first ``n`` users with ratings.

    A row per ``n``: ``server_s`` (the slower server's seconds in its role calls,
    ``TrainResult.server_s_per_round``), ``server_min``, the user's upload bytes per round
    (``len()`` of its messages) and the paper's minutes at that ``n`` (None elsewhere);
    ``on_done`` hears of each row as it is measured.  One torch and BLAS thread.

    Raises
    ------
    InvalidParameters
        ``dataset`` has no comm round shape, or a count is < 2 or above its users with ratings.
    """
    from threadpoolctl import threadpool_limits

    from secemb.bench.comm import DATASETS, round_data, single_thread
    from secemb.data import by_user
    from secemb.models import get_model
    from secemb.protocols import get_protocol
    from secemb.training import TrainConfig, train

    if dataset not in DATASETS:
        raise InvalidParameters(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}")
    data, _ = round_data(dataset)
    active = np.flatnonzero(by_user(data).counts() > 0)
    if not users or min(users) < 2 or max(users) > active.size:
        raise InvalidParameters(f"user counts must lie in [2, {active.size}], got {list(users)}")
    single_thread()
    m_prime = DATASETS[dataset][1]
    paper = dict(zip(TABLE15_USERS, PAPER_TABLE15["grec"], strict=True))
    rows = []
    with threadpool_limits(limits=1, user_api="blas"):
        for n in users:
            sub = data.subset(np.isin(data.users, active[:n]))
            t0 = time.perf_counter()
            res = train(get_model("mf", dim=64), get_protocol("grec", layout="full", relay=False), sub, None,
                        TrainConfig(epochs=1, users_per_round=n, m_prime=m_prime, rating_range=(1.0, 5.0)))
            row = {"users": n, "dataset": dataset, "m": data.num_items, "m_prime": m_prime, "protocol": "grec",
                   "server_s": res.server_s_per_round, "server_min": res.server_s_per_round / 60,
                   "upload_bytes_per_user": res.upload_bytes_per_user_round, "wall_s": time.perf_counter() - t0,
                   "paper_min": paper.get(n)}
            rows.append(row)
            if on_done is not None:
                on_done(row)
    return rows


#: Table 9 (MF without its bias, d = 64; ML-10M and Yelp): RMSE mean, its std over four runs and the
#: reduction ratio of the upload, per scheme (GREC, and FedMF w/ Top-K and the other baselines)
PAPER_TABLE9: dict[str, dict[str, tuple[float, float, float]]] = {
    "ml-10m": {"grec": (0.894, 0.004, 19.25), "fedmf-svd": (0.903, 0.002, 16.00), "colr": (0.931, 0.002, 16.00),
               "fedmf-topk": (0.906, 0.003, 16.00), "ternquant": (1.631, 0.0, 16.00)},
    "yelp": {"grec": (1.353, 0.004, 91.18), "fedmf-svd": (1.563, 0.007, 16.00), "colr": (1.894, 0.011, 16.00),
             "fedmf-topk": (1.829, 0.005, 16.00), "ternquant": (1.587, 0.0, 16.00)},
}


def _upload_per_user(protocol: str, built: Any, m_prime: int, **options: Any) -> float:
    """Measured upload bytes per user and round (``len()`` of its messages) of ``protocol`` for
    ``built``'s model and sizes at ``m_prime`` (the trained runs' m'): one round of the first two
    users with ratings."""
    from secemb.data import by_user
    from secemb.protocols import get_protocol
    from secemb.training import TrainConfig, train

    data = built.train_data
    two = np.flatnonzero(by_user(data).counts() > 0)[:2]
    cfg = built.config
    res = train(built.model, get_protocol(protocol, layout="full", relay=False, **options),
                data.subset(np.isin(data.users, two)), None,
                TrainConfig(epochs=1, users_per_round=2, m_prime=m_prime, rating_range=cfg.rating_range))
    return float(res.upload_bytes_per_user_round)


#: Table 9's schemes: name -> (protocol, its options); FedMF w/ Top-K under both readings of its
#: reduction ratio (:mod:`secemb.protocols.topk`: of the user's own update, or of the full table)
TABLE9_SCHEMES: dict[str, tuple[str, dict[str, Any]]] = {
    "grec": ("plaintext", {}), "fedmf-topk": ("fedmf-topk", {"basis": "update"}),
    "fedmf-topk-table": ("fedmf-topk", {"basis": "table"})}


def table9(seeds: Sequence[int] = (0, 1, 2, 3), *, epochs: int = 20, dataset: str = "ml-100k", data_dir: Any = None,
           log: Callable[[str], None] = lambda s: None,
           progress: Steps | None = None) -> dict[str, Any]:
    """Table 9 on ``dataset``: MF (Table 8's preset, biases kept: our MF has them) trained
    ``epochs`` epochs per seed, no validation split, the last epoch's test RMSE, by each of
    :data:`TABLE9_SCHEMES`:

    * ``grec``: GREC's lossless training, run as its bit-identical plaintext twin (GREC's FSS
      aggregation is exact: tests/protocols/test_baseline_exact.py);
    * ``fedmf-topk``: FedMF w/ Top-K at the paper's reduction ratio 16 of the user's own sparse
      update (its m' rows), its real protocol every round;
    * ``fedmf-topk-table``: the same with K a sixteenth of the full table (SecFedRec's upload).

    ``runs``: one row per scheme and seed (RMSE after each epoch, the kept model's SHA-256,
    seconds).  ``table``: per scheme the RMSE mean and population std over the seeds, the upload
    per user and round (measured: ``len()`` of the messages -- the Top-K schemes' over their
    runs, GREC's, SecFedRec's and the plaintext (uncompressed sparse) upload from one real round
    of two users at the runs' m', :func:`_upload_per_user`) and two reduction ratios: SecFedRec / scheme
    (``reduction_ratio``, the basis of the paper's GREC column) and plaintext / scheme
    (``ratio_to_sparse``), beside :data:`PAPER_TABLE9` (``fedmf-topk-table`` against the
    paper's Top-K cells too).  ``progress`` hears of every epoch.
    """
    from threadpoolctl import threadpool_limits

    from secemb.training.builder import build_experiment
    from secemb.training.experiment import Experiment, _train_built

    from dataclasses import replace

    from secemb.protocols import get_protocol

    total, done = len(seeds) * len(TABLE9_SCHEMES) * epochs, 0

    def epoch_done(e: Any) -> None:
        nonlocal done
        done += 1
        log(f"  epoch {e.epoch}: {e.test_metrics}")
        if progress is not None:
            progress(f"Table 9: {done} of {total} epochs", done, total)

    import torch

    torch.set_num_threads(1)
    runs: list[dict[str, Any]] = []
    uploads: dict[str, float] = {}
    with threadpool_limits(limits=1, user_api="blas"):
        for seed in seeds:
            for scheme, (protocol, options) in TABLE9_SCHEMES.items():
                built = build_experiment(Experiment(dataset=dataset, data_dir=data_dir, model="mf", protocol=protocol,
                                                    layout="full", relay=False, epochs=epochs, seed=seed))
                if options:
                    built = replace(built, protocol=get_protocol(protocol, layout="full", relay=False, **options))
                t0 = time.perf_counter()
                res = _train_built(built, on_epoch=epoch_done)
                runs.append({"scheme": scheme, "protocol": protocol, "options": options, "seed": seed, "epochs": epochs,
                             "rmse": res.final_rmse, "rmse_per_epoch": [e.test_rmse for e in res.epochs],
                             "upload_bytes_per_user_round": res.upload_bytes_per_user_round,
                             "m_prime": int(res.config["m_prime"]), "model_sha256": res.model_sha256,
                             "seconds": time.perf_counter() - t0})
                log(f"{scheme} seed {seed}: RMSE {res.final_rmse:.4f} after epoch {epochs}")
                if not uploads:  # the runs' m' (given, or Eq. 11's count: the same for every run of the data)
                    m_prime = int(res.config["m_prime"])
                    uploads = {"secfedrec": _upload_per_user("secfedrec", built, m_prime),
                               "plaintext": _upload_per_user("plaintext", built, m_prime),
                               "grec": _upload_per_user("grec", built, m_prime, server_eval=False)}
    table = []
    for scheme in TABLE9_SCHEMES:
        mine = [r for r in runs if r["scheme"] == scheme]
        rmse = np.array([r["rmse"] for r in mine], dtype=np.float64)
        up = uploads["grec"] if scheme == "grec" else float(np.mean([r["upload_bytes_per_user_round"] for r in mine]))
        table.append({"scheme": scheme, "seeds": len(mine), "rmse": float(rmse.mean()), "rmse_std": float(rmse.std()),
                      "upload_bytes_per_user_round": up, "reduction_ratio": uploads["secfedrec"] / up,
                      "ratio_to_sparse": uploads["plaintext"] / up,
                      "paper": {ds: PAPER_TABLE9[ds][scheme.removesuffix("-table")] for ds in PAPER_TABLE9}})
    return {"dataset": dataset, "epochs": epochs, "secfedrec_upload_bytes": uploads["secfedrec"],
            "plaintext_upload_bytes": uploads["plaintext"],
            "runs": runs, "table": table}
