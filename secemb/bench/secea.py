"""``secemb bench secea``: SecEA on MovieLens-100K silos -- an experiment of our own design
(the paper has none).

Setting: the ML-100K users are dealt at random (seeded) into N silos; the items are the
entities.  A silo trains a biased MF model on its users' ratings (its users' rows and biases
stay local); each round it runs ``local_epochs`` epochs, then the item rows ``(q_i, b_i)`` of
the items it holds are averaged across the silos that hold them (Eq. 2) and written back.

* **Accuracy** -- test RMSE of the silos' models on the held-out 20 % (a silo predicts
  ``mu + b_u`` for an item it never saw) under four aggregations of the same training: none
  (local only), FedAvg (the float average, plaintext at the server), PSI-style (averaging only the
  items that every silo holds, what a private-set-intersection design can do) and SecEA.  SecEA's
  rounds run the protocol's full field arithmetic (:func:`secemb.protocols.secea.coding.run_arithmetic`:
  shares, queries, answers, the server's masks, interpolation) without the pads and Paillier
  (they return values unchanged), and each round's output is checked to equal the fixed-point
  average bit for bit.  (The complete protocol computes the same average exactly -- tests --
  but on the whole catalogue its Paillier work is minutes per round; the training run with the
  pads and Paillier for real is ``secemb train --protocol secea``, on the most-rated items.)
  SecEmb (two-server, one user per device) is trained on the same split through
  :class:`secemb.Experiment` beside it.
* **Cost** -- the offline phase (encryption randomizers ``r^n``, Sec. IV-B) and one round of the
  complete protocol through the round engine's exchanges (:class:`~secemb.sim.secea.Deployment`:
  X25519-padded relay, Paillier with 2048-bit keys, the private entity union at setup) on the
  silos' trained item rows, restricted to the ``cost_items`` most-rated items (the full catalogue
  takes N*sum|E_n| Paillier answers, about 65,000 for N = 7: tens of minutes on two cores).
  Bytes are ``len()`` of the messages; seconds per party and stage; next to them the counts of
  the paper's complexity terms (Sec. IV-B) and the seconds per counted operation.

Every timed figure follows an untimed warm-up on a tiny input (:data:`WARM_UP`, also in the
result): SecEA's field arithmetic before an accuracy run, a full-protocol round before a cost
round, so imports and first-call costs are in no figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from secemb.bench.progress import Steps
from secemb.data import RatingData, load_movielens, train_test_split
from secemb.errors import InvalidParameters
from secemb.protocols.secea import coding
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.silos import MFSilo, local_epoch, make_silos, one_thread, popular_items, silos_rmse
from secemb.randomness import system_rng

__all__ = ["AGGREGATIONS", "WARM_UP", "run", "accuracy", "cost", "warm_up"]

AGGREGATIONS = ("local", "fedavg", "psi", "secea")
#: entities per silo of the untimed warm-ups (:func:`warm_up`, and the arithmetic before an accuracy run)
WARM_UP_ENTITIES = 2
#: what the result (and each cost entry) says about first-call costs
WARM_UP = (f"untimed warm-ups on a tiny input ({WARM_UP_ENTITIES} entities per silo) before every timed figure: "
           "SecEA's field arithmetic before each accuracy run, one full-protocol round (setup, offline phase, round; "
           "the smallest Paillier key allowed) before each cost round -- imports and first-call costs are in no figure")


def fixed_point_average(params: SecEAParams, item_sets: list[np.ndarray], rows: list[np.ndarray],
                        num_items: int) -> list[np.ndarray]:
    """Eq. 2 on the fixed-point encoding, computed directly (the reference SecEA must equal)."""
    total = np.zeros((num_items, params.dim), dtype=np.int64)
    count = np.zeros(num_items, dtype=np.int64)
    for items, r in zip(item_sets, rows, strict=True):
        enc = np.rint(np.clip(r, -params.max_abs, params.max_abs) * 2.0**params.frac_bits).astype(np.int64)
        np.add.at(total, items, enc)
        count[items] += 1
    return [total[items] / (count[items, None] * 2.0**params.frac_bits) for items in item_sets]


def _aggregate(kind: str, silos: list[MFSilo], params: SecEAParams, num_items: int) -> bool:
    """Average the item rows in place; returns whether SecEA equalled the fixed-point average."""
    rows = [s.item_rows for s in silos]
    sets = [s.items for s in silos]
    if kind == "local":
        return True
    if kind in ("fedavg", "psi"):
        total = np.zeros((num_items, params.dim))
        count = np.zeros(num_items)
        for items, r in zip(sets, rows, strict=True):
            np.add.at(total, items, r)
            count[items] += 1
        everywhere = count == len(silos)
        for s in silos:
            avg = total[s.items] / count[s.items, None]
            keep = ~everywhere[s.items] if kind == "psi" else np.zeros(s.items.size, bool)
            avg[keep] = s.item_rows[keep]
            s.set_item_rows(avg)
        return True
    union = np.unique(np.concatenate(sets))
    own = [np.searchsorted(union, items) for items in sets]
    out = coding.run_arithmetic(params, union.size, own, rows, system_rng)
    expected = fixed_point_average(params, own, rows, union.size)
    for s, avg in zip(silos, out, strict=True):
        s.set_item_rows(avg)
    return all(np.array_equal(a, b) for a, b in zip(out, expected, strict=True))


def accuracy(data: RatingData, num_silos: int, *, rounds: int, local_epochs: int, dim: int = 16,
             threshold: int = 1, lr: float = 0.01, reg: float = 0.1, batch: int = 1024, seed: int = 0,
             kinds: tuple[str, ...] = AGGREGATIONS, on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Test RMSE after every round per aggregation kind (same data, split and initialization);
    SecEA's arithmetic runs once untimed on a tiny input first (first-call costs in no ``seconds``)."""
    train, test = train_test_split(data, 0.2, seed)
    params = SecEAParams(num_silos, threshold, dim=dim + 1)
    out: dict[str, Any] = {"num_silos": num_silos, "rounds": rounds, "local_epochs": local_epochs, "dim": dim,
                           "threshold": threshold, "parts": params.k, "rmse": {}, "seconds": {}}
    if "secea" in kinds:  # warm-up, untimed: the arithmetic's first-call costs are in no round's seconds
        own = [np.arange(WARM_UP_ENTITIES)] * num_silos
        coding.run_arithmetic(params, WARM_UP_ENTITIES, own, [np.zeros((WARM_UP_ENTITIES, params.dim))] * num_silos,
                              system_rng)
    for kind in kinds:
        silos = make_silos(train, num_silos, dim, lr, seed)
        gen = np.random.default_rng(seed + 1)
        curve, exact, agg_s = [], True, 0.0
        for rnd in range(rounds):
            with one_thread():
                for s in silos:
                    for _ in range(local_epochs):
                        local_epoch(s, reg, batch, gen)
            start = time.perf_counter()
            exact &= _aggregate(kind, silos, params, data.num_items)
            agg_s += time.perf_counter() - start
            curve.append(silos_rmse(silos, test))
            if on_step:
                on_step(f"N={num_silos} {kind} round {rnd + 1}/{rounds}: RMSE {curve[-1]:.4f}")
        out["rmse"][kind] = curve
        out["seconds"][kind] = agg_s
        if kind == "secea":
            out["secea_equals_fixed_point_average"] = bool(exact)
    out["items_per_silo"] = [int(s.items.size) for s in make_silos(train, num_silos, dim, lr, seed)]
    return out


def warm_up(params: SecEAParams) -> None:
    """One untimed round of the full protocol with ``params`` -- setup (keys, PSU), the offline
    phase and the round -- on a tiny input: :data:`WARM_UP_ENTITIES` entities per silo and the
    smallest Paillier key allowed.  Imports, first calls and first-touch allocations are paid
    here, so no timed figure of :func:`cost` contains them."""
    from secemb.protocols.secea.paillier import MIN_KEY_BITS
    from secemb.sim.secea import Deployment

    sets = [np.arange(WARM_UP_ENTITIES, dtype=np.int64)] * params.num_clients
    dep = Deployment(params, sets, domain=WARM_UP_ENTITIES, key_bits=MIN_KEY_BITS)
    dep.precompute([WARM_UP_ENTITIES] * params.num_clients)
    dep.round(1, [np.zeros((WARM_UP_ENTITIES, params.dim))] * params.num_clients)


def cost(data: RatingData, num_silos: int, *, cost_items: int, dim: int = 16, threshold: int = 1,
         key_bits: int = 2048, local_epochs: int = 1, seed: int = 0) -> dict[str, Any]:
    """One round of the full protocol (bytes and seconds measured) on the ``cost_items`` most
    rated items, with item rows from ``local_epochs`` of local training; :func:`warm_up` runs
    first, untimed (the result's ``warm_up`` says so)."""
    from secemb.sim.secea import Deployment

    train, _ = train_test_split(data, 0.2, seed)
    silos = make_silos(train, num_silos, dim, 0.01, seed)
    gen = np.random.default_rng(seed + 1)
    with one_thread():
        for s in silos:
            for _ in range(local_epochs):
                local_epoch(s, 0.1, 1024, gen)
    chosen = popular_items(train, cost_items)
    sets, rows = [], []
    for s in silos:
        keep = np.isin(s.items, chosen)
        sets.append(s.items[keep])
        rows.append(s.item_rows[keep])
    params = SecEAParams(num_silos, threshold, dim=dim + 1)
    warm_up(params)
    start = time.perf_counter()
    dep = Deployment(params, sets, domain=data.num_items, key_bits=key_bits)
    setup_s = time.perf_counter() - start
    dep.precompute([len(s) for s in sets])  # the offline phase: encryption randomizers
    out = dep.round(1, rows)
    expected = fixed_point_average(params, [np.searchsorted(dep.union, s) for s in sets], rows, dep.union.size)
    exact = all(np.array_equal(out[n], expected[n]) for n in range(num_silos))
    key = dep.clients[0].paillier_key  # every key has the same size
    m, w, chunks = dep.union.size, params.width, key.chunks(params.width)
    sizes = [len(s) for s in sets]
    secs = dep.traffic.seconds
    per_client: list[dict[str, Any]] = []
    for n in range(num_silos):
        per_client.append({
            "entities": sizes[n],
            "up_bytes": dep.traffic.up[n], "down_bytes": dep.traffic.down[n],
            "field_elements_up": (num_silos - 1) * (m * w + sizes[n] * m),
            "ciphertexts_up": sum(sizes) * chunks,
            "field_elements_down": sum(m * w + sizes[v] * m for v in range(num_silos) if v != n),
            "ciphertexts_down": num_silos * sizes[n] * chunks,
            "seconds": {stage: secs.get((n, stage), 0.0) for stage in ("offline", "share+query", "answer", "decode")},
        })
    server_ops = num_silos * sum(sizes) * chunks
    client_s = [sum(c["seconds"].values()) for c in per_client]
    online_s = [sum(v for k, v in c["seconds"].items() if k != "offline") for c in per_client]
    return {
        "num_silos": num_silos, "threshold": threshold, "parts": params.k, "width": w, "entities_union": m,
        "cost_items": cost_items, "key_bits": key_bits, "warm_up": WARM_UP, "slots_per_ciphertext": key.slots,
        "ciphertext_bytes": key.ciphertext_bytes, "chunks_per_answer": chunks,
        "setup_seconds": setup_s, "setup_bytes_up": sum(dep.setup_traffic.up.values()),
        "setup_bytes_down": sum(dep.setup_traffic.down.values()),
        "exact": exact, "clients": per_client,
        "server_seconds": {stage: secs.get(("server", stage), 0.0) for stage in ("offline", "relay", "mask")},
        "terms": {
            "server_paillier_ops": server_ops,
            "client_answer_macs": m * w * sum(sizes),
            "client_encryptions": sum(sizes) * chunks,
            "client_decryptions_mean": num_silos * float(np.mean(sizes)) * chunks,
        },
        "ms_per_server_op": 1000 * secs.get(("server", "mask"), 0.0) / max(server_ops, 1),
        "ms_per_client_answer_ciphertext": 1000 * float(np.mean([c["seconds"]["answer"] for c in per_client]))
        / max(sum(sizes) * chunks, 1),
        "client_seconds_mean": float(np.mean(client_s)),
        "client_online_seconds_mean": float(np.mean(online_s)),
    }


def run(*, silos: tuple[int, ...] = (3, 5, 7), rounds: int = 10, local_epochs: int = 2, dim: int = 16,
        threshold: int = 1, cost_items: int = 100, key_bits: int = 2048, secemb_epochs: int = 10,
        quick: bool = False, seed: int = 0, parts: tuple[str, ...] = ("accuracy", "cost"),
        progress: Steps | None = None) -> dict[str, Any]:
    """The benchmark's ``parts`` (accuracy, cost); ``quick`` shrinks it to a smoke test (2 rounds,
    30 items, no SecEmb).  ``progress`` hears of every step: a round of an accuracy run, a
    full-protocol round, the SecEmb run."""
    if not parts or set(parts) - {"accuracy", "cost"}:
        raise InvalidParameters(f"parts must be a non-empty subset of accuracy, cost; got {parts}")
    if rounds < 1 or local_epochs < 1 or cost_items < 0 or secemb_epochs < 0:
        raise InvalidParameters("rounds and local_epochs must be >= 1; cost_items and secemb_epochs >= 0")
    if any(n < 2 or 2 * threshold >= n for n in silos):
        raise InvalidParameters(f"every silo count N needs 2 <= N and T < N/2 (T = {threshold}), got {silos}")
    if quick:
        rounds, cost_items, secemb_epochs = min(rounds, 2), min(cost_items or 30, 30), 0
    data = load_movielens("ml-100k")
    result: dict[str, Any] = {"dataset": "ml-100k", "warm_up": WARM_UP, "accuracy": [], "cost": []}
    total = (len(silos) * rounds * len(AGGREGATIONS) if "accuracy" in parts else 0) \
        + (len(silos) if "cost" in parts else 0) + (1 if secemb_epochs else 0)
    done = 0

    def report(message: str, finished: int) -> None:
        nonlocal done
        done += finished
        if progress is not None:
            progress(message, done, total)

    _run_parts(result, data, silos, rounds if "accuracy" in parts else 0, local_epochs, dim, threshold,
               cost_items if "cost" in parts else -1, key_bits, secemb_epochs, seed, report)
    report("done", 0)
    return result


def _run_parts(result: dict[str, Any], data: RatingData, silos: tuple[int, ...], rounds: int, local_epochs: int,
               dim: int, threshold: int, cost_items: int, key_bits: int, secemb_epochs: int, seed: int,
               report: Callable[[str, int], None]) -> None:
    """Run the parts into ``result``, telling ``report(message, steps finished since)``."""
    for n in silos if rounds else ():
        result["accuracy"].append(accuracy(data, n, rounds=rounds, local_epochs=local_epochs, dim=dim,
                                           threshold=threshold, seed=seed, on_step=lambda msg: report(msg, 1)))
    for n in silos if cost_items >= 0 else ():
        report(f"N={n}: one full-protocol round ({key_bits}-bit Paillier)", 0)
        result["cost"].append(cost(data, n, cost_items=cost_items, dim=dim, threshold=threshold,
                                   key_bits=key_bits, seed=seed))
        report(f"N={n}: full-protocol round done", 1)
    if secemb_epochs:
        from secemb.training.experiment import Experiment

        report(f"SecEmb MF, {secemb_epochs} epochs", 0)
        res = Experiment(dataset="ml-100k", model="mf", protocol="secemb", epochs=secemb_epochs, seed=seed).run()
        result["secemb"] = {"epochs": secemb_epochs,
                            "rmse": [e.test_metrics.get("rmse") for e in res.train_result.epochs],
                            **res.traffic}
        report("SecEmb MF done", 1)


def accuracy_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """(N, K, items per silo, RMSE after the last round per aggregation, SecEA exact) rows."""
    rows: list[tuple[str, ...]] = []
    for acc in result["accuracy"]:
        rmse = acc["rmse"]
        rows.append((str(acc["num_silos"]), str(acc["parts"]), "/".join(map(str, acc["items_per_silo"])),
                     *(f"{rmse[k][-1]:.4f}" if k in rmse else "-" for k in AGGREGATIONS),
                     "yes" if acc.get("secea_equals_fixed_point_average") else "NO",
                     f"{acc['seconds'].get('secea', 0.0):.1f}"))
    return rows


def cost_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """Per N: entities, bytes and field elements/ciphertexts per client (mean), seconds."""
    rows: list[tuple[str, ...]] = []
    for c in result["cost"]:
        cl = c["clients"]

        def mean(key: str, cl: list[dict[str, Any]] = cl) -> float:
            return float(np.mean([x[key] for x in cl]))

        rows.append((str(c["num_silos"]), str(c["entities_union"]), f"{mean('entities'):.0f}",
                     f"{mean('up_bytes') / 1e6:.2f}", f"{mean('down_bytes') / 1e6:.2f}",
                     f"{mean('field_elements_up'):,.0f}", f"{mean('ciphertexts_up'):,.0f}",
                     f"{c['client_online_seconds_mean']:.1f} + {c['clients'][0]['seconds']['offline']:.1f}",
                     f"{c['server_seconds']['relay'] + c['server_seconds']['mask']:.1f} + "
                     f"{c['server_seconds']['offline']:.1f}",
                     f"{c['ms_per_server_op']:.2f}", "yes" if c["exact"] else "NO"))
    return rows
