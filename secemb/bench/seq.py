"""``secemb bench seq``: SecEmb on sequential recommendation (Table 4: Caser and SASRec).

Two parts, the paper's cells beside ours:

* **Accuracy** -- :func:`accuracy`: a model trained with SecEmb (cuckoo layout, relay; the
  secure run gives the plaintext model bit for bit, tests/engine/test_engine_sequential.py) on a
  dataset split leave-one-out, HR@10 and NDCG@10 on the test items over the full catalogue and
  against 100 sampled negatives, at the epoch with the best validation NDCG@10 (full
  catalogue); beside it the popularity ranking under the same protocol.  Real ML-100K; the
  synthetic ML-1M stand-in on request (its sequences carry no order signal: a stand-in for
  scale, not for accuracy).  The lossy baselines (``quant8``, ``ternary``, ``svd``, ``colr``:
  the item-embedding update compressed, Table 10's ranks for the sequential models, K.6) are
  trained the same way on request (``protocols``), each with its own best layout (they
  download the whole model and have no relay).  ``plaintext`` (cuckoo layout, no relay) trains
  SecEmb's model bit for bit without the cryptography (the twin tests), for accuracy runs where
  the machine has no time for the secure one; its rows are labelled as such.
* **Upload** -- :func:`traffic`: one device of one round on an Amazon-shaped catalogue
  (m = 9,267,503 items, K.6) with the cuckoo layout and relay: its sequence (synthetic items),
  the task's sample with negatives, the placement, the retrieval request and the upload are
  built by the protocol's real user role and their ``len()`` summed.  The reduction ratio
  divides the uncompressed upload -- the float32 gradient of the whole item table and the dense
  vector, ``4 (m w + dense)`` bytes, what the paper's R.R. compares against -- by those bytes.
  The servers' evaluation is not run (it does not change the bytes a device sends).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from secemb.bench.progress import Steps
from secemb.data import concat
from secemb.metrics import get_metric
from secemb.metrics.ranking import popularity_scorer, rank_next_items
from secemb.errors import InvalidParameters, check_int
from secemb.models import SequenceModel, get_model
from secemb.protocols import get_protocol
from secemb.protocols.lossy import LOSSY_PROTOCOLS
from secemb.protocols.placement import place
from secemb.ring import FixedPoint

__all__ = ["AMAZON_ITEMS", "PAPER", "accuracy", "run", "table_rows", "traffic"]

#: items of the paper's Amazon dataset after filtering users with < 3 ratings (Appendix K.6)
AMAZON_ITEMS = 9_267_503
#: Table 4, SecEmb rows: (model, dataset) -> (HR@10, NDCG@10, R.R.)
PAPER: dict[tuple[str, str], tuple[float, float, float]] = {
    ("caser", "ml-1m"): (0.475, 0.270, 4.79),
    ("caser", "amazon"): (0.629, 0.483, 2549.0),
    ("sasrec", "ml-1m"): (0.472, 0.268, 3.86),
    ("sasrec", "amazon"): (0.639, 0.485, 2342.0),
}
#: training settings per model on ML-100K (chosen on the validation items, docs/results.md)
SETTINGS: dict[str, dict[str, Any]] = {
    "sasrec": {"lr": 0.003, "users_per_round": 10, "epochs": 20},
    "caser": {"lr": 0.005, "users_per_round": 20, "epochs": 15},
}
_SELECT = "ndcg@10"
_ROWS = (("hr_sampled@10", "HR@10 (100 neg.)"), ("ndcg_sampled@10", "NDCG@10 (100 neg.)"), ("hr@10", "HR@10 (full)"),
         ("ndcg@10", "NDCG@10 (full)"))


def _sequential(model: object) -> SequenceModel:
    """``model`` as a sequential model, else InvalidParameters naming it."""
    if not isinstance(model, SequenceModel):
        raise InvalidParameters(f"secemb bench seq needs a sequential model (sasrec, caser), got {model!r}")
    return model


def traffic(model_name: str, *, num_items: int = AMAZON_ITEMS, sequence_length: int = 60, seed: int = 0,
            ring_bits: int = 32) -> dict[str, Any]:
    """One device's upload in one SecEmb round (cuckoo layout, relay) over ``num_items`` items.

    The device holds ``sequence_length`` distinct random items (a sequence long enough for the
    model's largest request); m' is the task's largest request.  Returns the byte counts
    (``request_bytes``: retrieval requests; ``upload_bytes``: gradient uploads; their sum
    ``total_upload_bytes``; ``dense_upload_bytes``: the dense shares inside the uploads), the
    uncompressed baseline ``full_gradient_bytes`` and ``reduction_ratio``.
    """
    model = _sequential(get_model(model_name))
    task = model.task
    protocol = get_protocol("secemb", layout="cuckoo", relay=True)
    m_prime = task.max_request()
    rc = protocol.round_config(0, num_items, model.sparse_width, model.dense_size, m_prime, ring_bits)
    rng = np.random.default_rng(seed)
    sequence = rng.choice(num_items, size=sequence_length, replace=False)
    sample = task.sample(sequence, np.ones(sequence_length, np.float32), num_items, rng)
    request = place(rc, sample.items, rng)
    role = protocol.make_user(rc)
    t0 = time.perf_counter()
    requests = [msg for msg in role.retrieval_request(request.indices) if msg is not None]
    # no server runs here (the table is Amazon's size): the device is given the 16-byte sketch seed
    # its retrieval reply would carry (verified uploads), which sizes nothing -- the sketch proof's
    # length is fixed by the keys -- and costs the device the same work as the reply's own
    role._sketch_seed = bytes(16)  # type: ignore[attr-defined]
    fp = FixedPoint(ring_bits, 16)
    grads = np.zeros((rc.slots, rc.width))
    grads[request.real_pos] = rng.normal(0.0, 0.01, size=(request.real_pos.size, rc.width))
    uploads = [msg for msg in role.upload(fp.encode(grads), fp.encode(rng.normal(0.0, 0.01, rc.dense_size)))
               if msg is not None]
    seconds = time.perf_counter() - t0
    req_b, up_b = sum(map(len, requests)), sum(map(len, uploads))
    full = 4 * (num_items * model.sparse_width + model.dense_size)
    return {
        "model": model_name, "num_items": num_items, "width": model.sparse_width, "dense_size": model.dense_size,
        "m_prime": m_prime, "buckets": rc.slots, "requested_items": int(sample.items.size),
        "placed_items": int(request.kept.size), "request_bytes": req_b, "upload_bytes": up_b,
        "total_upload_bytes": req_b + up_b, "dense_upload_bytes": len(uploads) * rc.dense_size * (ring_bits // 8),
        "full_gradient_bytes": full, "reduction_ratio": full / (req_b + up_b), "device_s": seconds,
    }


def accuracy(model_name: str, dataset: str, *, lr: float, users_per_round: int, epochs: int, seed: int = 0,
             protocol: str = "secemb", progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train ``model_name`` on ``dataset`` with ``protocol`` (SecEmb: cuckoo layout, relay;
    plaintext: cuckoo layout; a lossy baseline: its best layout, Table 10's rank) and score it
    leave-one-out; the popularity ranking under the same protocol beside it.

    Returns the run's ``m_prime``, the per-epoch validation and test metrics, the test metrics
    at the epoch of the best validation NDCG@10 (``selected``), the popularity metrics and the
    wall time.
    """
    from secemb.training import Experiment
    from secemb.training.builder import build_experiment
    from secemb.training.loop import train

    layout, relay = {"secemb": ("cuckoo", True), "plaintext": ("cuckoo", False)}.get(protocol, (None, None))
    exp = Experiment(dataset=dataset, model=model_name, protocol=protocol, layout=layout, relay=relay,
                     epochs=epochs, users_per_round=users_per_round, lr=lr, seed=seed)
    built = build_experiment(exp)
    assert built.val_data is not None  # a sequential task holds validation items out
    metrics = [get_metric(n) for n in built.config.metrics]
    context = concat(built.train_data, built.val_data)
    popularity = rank_next_items(popularity_scorer(built.train_data), built.train_data.num_items,
                                 _sequential(built.model).task.max_len, context, built.test_data, metrics, seed=seed)

    def on_epoch(e: Any) -> None:
        if progress is not None:
            progress(f"{model_name} {dataset} epoch {e.epoch}/{epochs}: val {_SELECT} {e.val_metrics[_SELECT]:.4f}")

    t0 = time.perf_counter()
    result = train(built.model, built.protocol, built.train_data, built.test_data, built.config,
                   val_data=built.val_data, extra_config=built.extra_config, on_epoch=on_epoch)
    best = max(result.epochs, key=lambda e: e.val_metrics[_SELECT] or 0.0)
    return {
        "model": model_name, "dataset": dataset, "protocol": protocol, "layout": built.protocol.layout,
        "relay": built.protocol.relay, "rank": getattr(built.protocol, "rank", None), "lr": lr,
        "users_per_round": users_per_round, "epochs": epochs, "m_prime": result.config["m_prime"],
        "evaluation": built.extra_config["evaluation"], "selected_epoch": best.epoch, "selected": best.test_metrics,
        "last": result.epochs[-1].test_metrics, "popularity": popularity,
        "per_epoch": [{"epoch": e.epoch, "val": e.val_metrics, "test": e.test_metrics} for e in result.epochs],
        "upload_bytes_per_user_round": result.upload_bytes_per_user_round, "model_sha256": result.model_sha256,
        "wall_s": time.perf_counter() - t0,
    }


def run(*, models: Sequence[str] = ("sasrec", "caser"), datasets: Sequence[str] = ("ml-100k",),
        protocols: Sequence[str] = ("secemb",), epochs: int | None = None, traffic_part: bool = True,
        quick: bool = False, progress: Steps | None = None) -> dict[str, Any]:
    """Accuracy for every model, dataset and protocol (``epochs``: instead of :data:`SETTINGS`'
    per-model count; ``quick``: synthetic-mini, two epochs) and, with ``traffic_part``, each
    model's Amazon-size upload (``quick``: a 300,000-item catalogue).  ``progress`` hears of
    every step: an upload measurement, or an epoch of an accuracy run."""
    for name in protocols:
        if name not in ("secemb", "plaintext", *LOSSY_PROTOCOLS):
            raise InvalidParameters(f"secemb bench seq trains secemb, plaintext or a lossy baseline {LOSSY_PROTOCOLS}, "
                                    f"got {name!r}")
    if epochs is not None:
        check_int("epochs", epochs, low=1)
    for model in models:
        _sequential(get_model(model))  # a bad model fails before any run
    out: dict[str, Any] = {"accuracy": [], "traffic": []}
    plan: list[tuple[str, str, dict[str, Any]]] = []  # (model, dataset or "" for the upload, settings)
    for model in models:
        if traffic_part:
            plan.append((model, "", {}))
        for dataset in (("synthetic-mini",) if quick else datasets):
            for protocol in protocols:
                settings = dict(SETTINGS[model], **({"epochs": 2} if quick else {}), protocol=protocol)
                if epochs is not None:
                    settings["epochs"] = epochs
                plan.append((model, dataset, settings))
    # a step is an upload measurement or one epoch of an accuracy run
    total = sum(settings["epochs"] if dataset else 1 for _, dataset, settings in plan)
    done = 0

    def report(message: str, advance: int = 0) -> None:
        nonlocal done
        done += advance
        if progress is not None:
            progress(message, done, total)

    for model, dataset, settings in plan:
        if not dataset:
            report(f"{model}: one device's upload over {'300,000' if quick else f'{AMAZON_ITEMS:,}'} items")
            out["traffic"].append(traffic(model, num_items=300_000 if quick else AMAZON_ITEMS))
            report(f"{model}: upload measured", 1)
        else:
            report(f"{model} {dataset} ({settings['protocol']}): training")
            out["accuracy"].append(accuracy(model, dataset, progress=lambda msg: report(msg, 1), **settings))
    report("done")
    return out


def table_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """Rows ``(model, dataset, metric, ours, popularity, paper)`` for the printed table; a lossy
    baseline's rows name it beside the model (``sasrec + colr``)."""
    rows: list[tuple[str, ...]] = []
    for acc in result["accuracy"]:
        secemb = acc.get("protocol", "secemb") == "secemb"
        paper = PAPER.get((acc["model"], "ml-1m")) if secemb else None
        label_model = acc["model"] if secemb else f"{acc['model']} + {acc['protocol']}"
        for j, (name, label) in enumerate(_ROWS):
            cell = f"{paper[j]:.3f} (ML-1M)" if paper is not None and j < 2 else "-"
            rows.append((label_model, f"{acc['dataset']} ({acc['selected_epoch']}/{acc['epochs']} ep.)", label,
                         f"{acc['selected'][name]:.4f}", f"{acc['popularity'][name]:.4f}", cell))
    for tr in result["traffic"]:
        paper = PAPER.get((tr["model"], "amazon"))
        rows.append((tr["model"], f"m = {tr['num_items']:,}", "upload bytes / round", f"{tr['total_upload_bytes']:,}",
                     "-", "-"))
        rows.append((tr["model"], f"m = {tr['num_items']:,}", "R.R.", f"{tr['reduction_ratio']:,.0f}", "-",
                     f"{paper[2]:,.0f}" if paper is not None else "-"))
    return rows
