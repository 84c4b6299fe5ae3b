"""``secemb bench secea``: SecEA on MovieLens-100K silos -- an experiment of our own design
(the paper has none).

Setting: the ML-100K users are dealt at random (seeded) into N silos; the items are the
entities.  A silo trains a biased MF model on its users' ratings (its users' rows and biases
stay local); each round it runs ``local_epochs`` epochs, then the item rows ``(q_i, b_i)`` of
the items it holds are averaged across the silos that hold them (Eq. 2) and written back.

* **Accuracy** -- test RMSE of the silos' models on the held-out 20 % (a silo predicts
  ``mu + b_u`` for an item it never saw) under four aggregations of the same training: none
  (local only), FedAvg (the float average, plaintext at the server), PSI-style (averaging only the
  items that every silo holds, what a private-set-intersection design can do) and SecEA, every
  item held.  There SecEA's rounds run the protocol's full field arithmetic
  (:func:`secemb.protocols.secea.coding.run_arithmetic`: shares, queries, answers, the server's
  masks, interpolation) without the pads and Paillier (they return values unchanged), and each
  round's output is checked to equal the fixed-point average bit for bit: on the whole catalogue
  the complete protocol's Paillier work is N * sum |E_n| answers a round (about 13,000 at N = 3,
  63,000 at N = 7), beyond what a run of 10 rounds can afford.
* **Protocol** -- SecEA's accuracy run by the complete protocol, where it is affordable: the
  object ``secemb train --protocol secea`` trains
  (:class:`~secemb.protocols.secea.protocol.SecEAProtocol`: pads, Paillier, the entity union at
  set-up) through the round engine (:func:`secemb.sim.player.train_exchange`), on the same split,
  silos and schedule but only the ``protocol_items`` most-rated items averaged; beside it the
  arithmetic-only run of the same setting, whose RMSE curve it must equal bit for bit, and the
  seconds of both runs.
* **Cost** -- the offline phase (encryption randomizers ``r^n``, Sec. IV-B) and one round of the
  complete protocol through the round engine's exchanges (:class:`~secemb.sim.secea.Deployment`:
  X25519-padded relay, Paillier with 2048-bit keys, the private entity union at setup) on the
  silos' trained item rows, restricted to the ``cost_items`` most-rated items (the full catalogue
  takes N*sum|E_n| Paillier answers, about 63,000 for N = 7: tens of minutes on two cores).
  Bytes are ``len()`` of the messages; seconds per party and stage; next to them the counts of
  the paper's complexity terms (Sec. IV-B) and the seconds per counted operation.

SecEmb (two-server, one user per device) is trained on the same split through
:class:`secemb.Experiment` beside them.

Every timed figure follows an untimed warm-up on a tiny input (:data:`WARM_UP`, also in the
result): SecEA's field arithmetic before an accuracy run, a full-protocol round before a cost
round or a full-protocol accuracy run, so imports and first-call costs are in no figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from secemb.bench.progress import Steps
from secemb.data import RatingData, load_movielens, train_test_split
from secemb.errors import InvalidParameters, check_int
from secemb.protocols.secea import coding
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.paillier import MIN_KEY_BITS
from secemb.protocols.secea.silos import (
    MFSilo,
    local_epoch,
    make_silos,
    one_thread,
    popular_items,
    silo_entities,
    silos_rmse,
)
from secemb.randomness import system_rng

__all__ = ["AGGREGATIONS", "PARTS", "WARM_UP", "run", "accuracy", "protocol_accuracy", "cost", "warm_up"]

AGGREGATIONS = ("local", "fedavg", "psi", "secea")
#: the benchmark's parts (:func:`run`)
PARTS = ("accuracy", "protocol", "cost")
#: entities per silo of the untimed warm-ups (:func:`warm_up`, and the arithmetic before an accuracy run)
WARM_UP_ENTITIES = 2
#: what the result (and each cost entry) says about first-call costs
WARM_UP = (f"untimed warm-ups on a tiny input ({WARM_UP_ENTITIES} entities per silo) before every timed figure: "
           "SecEA's field arithmetic before each accuracy run, one full-protocol round (setup, offline phase, round; "
           "the smallest Paillier key allowed) before each cost round and each full-protocol accuracy run -- imports "
           "and first-call costs are in no figure")


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


def _aggregate(kind: str, silos: list[MFSilo], params: SecEAParams, num_items: int, chosen: np.ndarray) -> bool:
    """Average the item rows in place (SecEA: the rows of the items among ``chosen``, as
    :class:`~secemb.protocols.secea.protocol.SecEAProtocol` does); returns whether SecEA
    equalled the fixed-point average."""
    if kind == "local":
        return True
    if kind in ("fedavg", "psi"):
        total = np.zeros((num_items, params.dim))
        count = np.zeros(num_items)
        for s in silos:
            np.add.at(total, s.items, s.item_rows)
            count[s.items] += 1
        everywhere = count == len(silos)
        for s in silos:
            avg = total[s.items] / count[s.items, None]
            keep = ~everywhere[s.items] if kind == "psi" else np.zeros(s.items.size, bool)
            avg[keep] = s.item_rows[keep]
            s.set_item_rows(avg)
        return True
    own = [silo_entities(s, chosen) for s in silos]
    union = np.unique(np.concatenate([s.items[o] for s, o in zip(silos, own, strict=True)]))
    sets = [np.searchsorted(union, s.items[o]) for s, o in zip(silos, own, strict=True)]
    rows = [s.item_rows[o] for s, o in zip(silos, own, strict=True)]
    out = coding.run_arithmetic(params, union.size, sets, rows, system_rng)
    expected = fixed_point_average(params, sets, rows, union.size)
    for s, o, avg in zip(silos, own, out, strict=True):
        written = s.item_rows
        written[o] = avg
        s.set_item_rows(written)
    return all(np.array_equal(a, b) for a, b in zip(out, expected, strict=True))


def accuracy(data: RatingData, num_silos: int, *, rounds: int, local_epochs: int, dim: int = 16,
             threshold: int = 1, lr: float = 0.01, reg: float = 0.1, batch: int = 1024, seed: int = 0,
             kinds: tuple[str, ...] = AGGREGATIONS, items: int = 0,
             on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Test RMSE after every round per aggregation kind (same data, split and initialization);
    SecEA (its field arithmetic only: no pads, no Paillier) averages the ``items`` most-rated
    items of the training split (0: all), the other kinds every item.  SecEA's arithmetic runs
    once untimed on a tiny input first (first-call costs in no ``seconds``).  ``seconds``: the
    aggregations' time per kind; ``run_seconds``: the whole run's (local training, aggregation,
    scoring)."""
    train, test = train_test_split(data, 0.2, seed)
    params = SecEAParams(num_silos, threshold, dim=dim + 1)
    chosen = popular_items(train, items)
    out: dict[str, Any] = {"num_silos": num_silos, "rounds": rounds, "local_epochs": local_epochs, "dim": dim,
                           "threshold": threshold, "parts": params.k, "items": items, "rmse": {}, "seconds": {},
                           "run_seconds": {}}
    if "secea" in kinds:  # warm-up, untimed: the arithmetic's first-call costs are in no round's seconds
        own = [np.arange(WARM_UP_ENTITIES)] * num_silos
        coding.run_arithmetic(params, WARM_UP_ENTITIES, own, [np.zeros((WARM_UP_ENTITIES, params.dim))] * num_silos,
                              system_rng)
    for kind in kinds:
        run_start = time.perf_counter()
        silos = make_silos(train, num_silos, dim, lr, seed)
        gen = np.random.default_rng(seed + 1)
        curve, exact, agg_s = [], True, 0.0
        for rnd in range(rounds):
            with one_thread():
                for s in silos:
                    for _ in range(local_epochs):
                        local_epoch(s, reg, batch, gen)
            start = time.perf_counter()
            exact &= _aggregate(kind, silos, params, data.num_items, chosen)
            agg_s += time.perf_counter() - start
            curve.append(silos_rmse(silos, test))
            if on_step:
                on_step(f"N={num_silos} {kind} round {rnd + 1}/{rounds}: RMSE {curve[-1]:.4f}")
        out["rmse"][kind] = curve
        out["seconds"][kind] = agg_s
        out["run_seconds"][kind] = time.perf_counter() - run_start
        if kind == "secea":
            out["secea_equals_fixed_point_average"] = bool(exact)
    out["items_per_silo"] = [int(s.items.size) for s in make_silos(train, num_silos, dim, lr, seed)]
    return out


def protocol_accuracy(data: RatingData, num_silos: int, *, rounds: int, local_epochs: int, items: int,
                      dim: int = 16, threshold: int = 1, lr: float = 0.01, reg: float = 0.1, key_bits: int = 2048,
                      seed: int = 0, on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """SecEA's accuracy run by the complete protocol: the object ``secemb train --protocol secea``
    trains (:class:`~secemb.protocols.secea.protocol.SecEAProtocol`, X25519 pads, Paillier with
    ``key_bits`` keys, the entity union at set-up) through the round engine in process
    (:func:`secemb.sim.player.train_exchange`), on the split and silos of :func:`accuracy` and
    the ``items`` most-rated items (0: all); beside it :func:`accuracy`'s SecEA (the arithmetic
    only) on the same setting.  Both average exactly, so the two RMSE curves are expected equal
    bit for bit (``equal``).  ``seconds``: the protocol's whole run (key generation, set-up,
    rounds, local training, scoring) after an untimed :func:`warm_up`, and the arithmetic
    run's (``run_seconds`` of :func:`accuracy`), timed in the same process one after the other.

    Raises
    ------
    InvalidParameters: as ``secemb train --protocol secea`` refuses the options.
    """
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.secea.protocol import SecEAProtocol  # registered as "secea"
    from secemb.sim.player import train_exchange

    split = train_test_split(data, 0.2, seed)
    protocol = SecEAProtocol(
        ExchangeRun("ml-100k", epochs=rounds, seed=seed), lr=lr, reg=reg, dim=dim, secea_silos=num_silos,
        secea_threshold=threshold, secea_items=items, secea_key_bits=key_bits, secea_local_epochs=local_epochs,
        data=split)
    warm_up(SecEAParams(num_silos, threshold, dim=dim + 1))
    curve: list[float] = []

    def on_epoch(e: Any) -> None:
        curve.append(float(e.test_metrics["rmse"]))
        if on_step:
            on_step(f"N={num_silos} SecEA protocol round {len(curve)}/{rounds}: RMSE {curve[-1]:.4f}")

    res = train_exchange(protocol, on_epoch=on_epoch)
    arith = accuracy(data, num_silos, rounds=rounds, local_epochs=local_epochs, dim=dim, threshold=threshold,
                     lr=lr, reg=reg, seed=seed, kinds=("secea",), items=items)
    return {"num_silos": num_silos, "rounds": rounds, "local_epochs": local_epochs, "dim": dim,
            "threshold": threshold, "items": items, "key_bits": key_bits, "warm_up": WARM_UP,
            "entities_per_silo": res.config["entities_per_silo"], "model_sha256": res.model_sha256,
            "rmse": {"protocol": curve, "arithmetic": arith["rmse"]["secea"]},
            "equal": curve == arith["rmse"]["secea"] and bool(arith["secea_equals_fixed_point_average"]),
            "seconds": {"protocol": res.wall_s, "arithmetic": arith["run_seconds"]["secea"]},
            "upload_bytes_per_silo_round": res.upload_bytes_per_user_round}


def warm_up(params: SecEAParams) -> None:
    """One untimed round of the full protocol with ``params`` -- setup (keys, PSU), the offline
    phase and the round -- on a tiny input: :data:`WARM_UP_ENTITIES` entities per silo and the
    smallest Paillier key allowed.  Imports, first calls and first-touch allocations are paid
    here, so no timed figure of :func:`cost` contains them."""
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
        threshold: int = 1, cost_items: int = 100, key_bits: int = 2048, protocol_silos: tuple[int, ...] = (3,),
        protocol_items: int = 20, secemb_epochs: int = 10, quick: bool = False, seed: int = 0,
        parts: tuple[str, ...] = PARTS, progress: Steps | None = None) -> dict[str, Any]:
    """The benchmark's ``parts``: ``accuracy`` (every aggregation, SecEA by its arithmetic, for
    each N of ``silos``), ``protocol`` (SecEA's accuracy run by the complete protocol on the
    ``protocol_items`` most-rated items for each N of ``protocol_silos``,
    :func:`protocol_accuracy`), ``cost``; ``quick`` shrinks it to a smoke test (2 rounds, 30
    items for the cost, 10 for the protocol's accuracy, no SecEmb).  ``progress`` hears of every
    step: a round of an accuracy run, a full-protocol round, the SecEmb run.

    Raises
    ------
    InvalidParameters: an unknown part, a count out of range, Paillier keys below
    :data:`~secemb.protocols.secea.paillier.MIN_KEY_BITS`, an N without ``2 <= N`` and ``2T < N``.
    """
    if not parts or set(parts) - set(PARTS):
        raise InvalidParameters(f"parts must be a non-empty subset of {', '.join(PARTS)}; got {parts}")
    for name, value, low in (("rounds", rounds, 1), ("local_epochs", local_epochs, 1), ("cost_items", cost_items, 0),
                             ("protocol_items", protocol_items, 0), ("secemb_epochs", secemb_epochs, 0),
                             ("key_bits", key_bits, MIN_KEY_BITS)):
        check_int(name, value, low=low)
    if any(n < 2 or 2 * threshold >= n for n in silos + protocol_silos):
        raise InvalidParameters(f"every silo count N needs 2 <= N and T < N/2 (T = {threshold}), got "
                                f"{silos + protocol_silos}")
    if quick:
        rounds, cost_items, secemb_epochs = min(rounds, 2), min(cost_items or 30, 30), 0
        protocol_items = min(protocol_items or 10, 10)
    data = load_movielens("ml-100k")
    result: dict[str, Any] = {"dataset": "ml-100k", "warm_up": WARM_UP, "accuracy": [], "protocol": [], "cost": []}
    total = (len(silos) * rounds * len(AGGREGATIONS) if "accuracy" in parts else 0) \
        + (len(protocol_silos) * rounds if "protocol" in parts else 0) \
        + (len(silos) if "cost" in parts else 0) + (1 if secemb_epochs else 0)
    done = 0

    def report(message: str, finished: int = 1) -> None:
        nonlocal done
        done += finished
        if progress is not None:
            progress(message, done, total)

    common: dict[str, Any] = {"rounds": rounds, "local_epochs": local_epochs, "dim": dim, "threshold": threshold,
                              "seed": seed, "on_step": report}
    for n in silos if "accuracy" in parts else ():
        result["accuracy"].append(accuracy(data, n, **common))
    for n in protocol_silos if "protocol" in parts else ():
        result["protocol"].append(protocol_accuracy(data, n, items=protocol_items, key_bits=key_bits, **common))
    for n in silos if "cost" in parts else ():
        report(f"N={n}: one full-protocol round ({key_bits}-bit Paillier)", 0)
        result["cost"].append(cost(data, n, cost_items=cost_items, dim=dim, threshold=threshold,
                                   key_bits=key_bits, seed=seed))
        report(f"N={n}: full-protocol round done")
    if secemb_epochs:
        report(f"SecEmb MF, {secemb_epochs} epochs", 0)
        result["secemb"] = _secemb_line(secemb_epochs, seed)
        report("SecEmb MF done")
    report("done", 0)
    return result


def _secemb_line(epochs: int, seed: int) -> dict[str, Any]:
    """SecEmb (two servers, one device per user) trained on the same split: its RMSE per epoch
    and its traffic."""
    from secemb.training.experiment import Experiment

    res = Experiment(dataset="ml-100k", model="mf", protocol="secemb", epochs=epochs, seed=seed).run()
    return {"epochs": epochs, "rmse": [e.test_metrics.get("rmse") for e in res.train_result.epochs], **res.traffic}


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


def protocol_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """Per full-protocol accuracy run: N, items averaged, entities per silo, rounds, the RMSE
    after the last round by the complete protocol and by the arithmetic only, whether the two
    curves are equal in every round, the seconds of each run and their ratio."""
    rows: list[tuple[str, ...]] = []
    for p in result["protocol"]:
        secs = p["seconds"]
        rows.append((str(p["num_silos"]), str(p["items"] or "all"), "/".join(map(str, p["entities_per_silo"])),
                     str(p["rounds"]), f"{p['rmse']['protocol'][-1]:.4f}", f"{p['rmse']['arithmetic'][-1]:.4f}",
                     f"yes, all {p['rounds']} rounds" if p["equal"] else "NO",
                     f"{secs['protocol']:.1f} / {secs['arithmetic']:.1f}",
                     f"{secs['protocol'] / max(secs['arithmetic'], 1e-9):.0f}x"))
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
