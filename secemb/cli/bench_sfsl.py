"""``secemb bench sfsl``: secure federated submodel learning (Table V, Figure 5 with its cost
baselines SFL / pure FSL / pure FL, Table VI, Figure 6 of its paper, and SFSL training for the
side-by-side table), measured in process."""

import json
import math
from pathlib import Path
from typing import Any

import typer

from secemb.cli.bench_output import FORCE_HELP, print_fitted


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip().upper() for x in text.split(",") if x.strip())


def register(bench_app: typer.Typer) -> None:
    """Attach ``sfsl`` to the ``bench`` group."""

    @bench_app.command("sfsl")
    def sfsl(
        parts: str = typer.Option("table5,fig5,fig6", help="Comma-separated: table5, fig5 (Table VI is its PSU "
                                  "share), fig6, baselines (Figure 5's SFL, pure FSL and pure FL rounds), memory "
                                  "(Section VI-D), train, fig4 (AUC over rounds); empty with --from: only merge and "
                                  "plot."),
        ns: str = typer.Option("20,40,60", help="Figure 5: numbers of clients n, every preset."),
        presets: str = typer.Option("CPP1,CPP2,CPP3,CPP4,CPP5", help="Figure 5: presets at each --ns."),
        n_large: str = typer.Option("100", help="Figure 5: larger n, only --large-presets."),
        large_presets: str = typer.Option("CPP2", help="Presets measured at --n-large."),
        dropouts: str = typer.Option("0,0.1,0.2", help="Figure 6: dropout ratios (after ShareKeys)."),
        dropout_n: int = typer.Option(40, min=4, help="Figure 6: clients per round."),
        dropout_presets: str = typer.Option("CPP2,CPP5", help="Figure 6: presets."),
        baselines: str = typer.Option("SFL,FSL,FL", help="baselines: schemes (SFL: secure federated learning; FSL, "
                                      "FL: the pure versions)."),
        baseline_ns: str = typer.Option("20", help="baselines: numbers of clients n."),
        memory_schemes: str = typer.Option("CPP2,CPP5,SFL,FSL,FL", help="memory: presets and baselines."),
        memory_ns: str = typer.Option("20", help="memory: numbers of clients n."),
        memory_what: str = typer.Option("client,round", help="memory: client (one client's round work), server (the "
                                        "server alone, in its own process; presets only, the baselines are "
                                        "skipped), round (a whole in-process round: an upper bound of the "
                                        "server's)."),
        shape: str = typer.Option("taobao", help="Taobao shape of the cost rounds: taobao, taobao-small, taobao-mini."),
        batch: int = typer.Option(32, min=1, help="Local SGD batch of the cost rounds (the paper: 2)."),
        train_data: str = typer.Option("ml-100k,taobao-small", help="train: datasets (ml-100k, taobao-*)."),
        train_presets: str = typer.Option("CPP2,CPP5", help="train: presets."),
        rounds: int = typer.Option(50, min=1, help="train: rounds."),
        clients: int = typer.Option(20, min=2, help="train: clients per round."),
        train_batch: int = typer.Option(8, min=1, help="train: local SGD batch."),
        lr: float = typer.Option(1.0, help="train: SGD step size (decayed x0.999 per round)."),
        curves: str = typer.Option("CPP2,CPP4,CPP5,centralized,fl", help="fig4: schemes (presets: SFSL; "
                                   "centralized, fl: the plaintext baselines)."),
        curve_rounds: int = typer.Option(100, min=1, help="fig4: rounds per curve (at most)."),
        curve_clients: int = typer.Option(20, min=2, help="fig4: clients per round."),
        curve_batch: int = typer.Option(2, min=1, help="fig4: local SGD batch (the paper: 2)."),
        eval_every: int = typer.Option(5, min=1, help="fig4: rounds between AUC evaluations."),
        curve_seconds: float = typer.Option(0.0, min=0.0, help="fig4: stop a curve at the first evaluation "
                                            "after this many seconds (0: run every round)."),
        merge_from: str = typer.Option("", "--from", help="Comma-separated earlier result files of this command "
                                       "whose rows join this run's (a sweep run in pieces) before plotting."),
        seed: int = typer.Option(0, min=0, help="Seed of the workloads and training."),
        min_row_holders: int | None = typer.Option(
            None, min=1, help="SFSL's secure sum reveals a row's sum only over at least this many clients, else the "
            "row is not updated; at most the threshold n // 2 + 1 of every n measured (docs/sfsl.md). 1: the "
            "paper's, as every figure measured before session 26 (finding R6's leak; warns). Default: 2."),
        quick: bool = typer.Option(False, "--quick", help="Tiny workloads (a smoke test): taobao-mini, n <= 6."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path = typer.Option(Path("results/sfsl.json"), help="Write the JSON result here, and the plots "
                                 "beside it (<out>-fig5.png, <out>-fig4.png)."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Per-client traffic (len() of the messages), client and server seconds of SFSL rounds on
        Taobao-shaped clients, the privacy levels of the presets, SFSL training with AUC, and AUC
        over rounds against the FL and centralized baselines; PNG plots with the paper's values."""

        from secemb.bench import sfsl as bench_sfsl
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, save_json, steps_bar
        from secemb.data.ctr import TAOBAO_SHAPES
        from secemb.errors import InvalidParameters
        from secemb.privacy.randomized_response import CPP_PRESETS
        from secemb.protocols.sfsl.baselines import BASELINES
        from secemb.protocols.sfsl.parties import MIN_ROW_HOLDERS, warn_min_row_holders
        from secemb.secagg import SecAggAborted, default_threshold

        sources = [Path(x.strip()) for x in merge_from.split(",") if x.strip()]
        try:
            want = tuple(x.strip().lower() for x in parts.split(",") if x.strip())
            counts, big, base_ns, mem_ns = _ints(ns), _ints(n_large), _ints(baseline_ns), _ints(memory_ns)
            ratios = tuple(float(x) for x in dropouts.split(",") if x.strip())
        except ValueError:
            fail(f"--ns/--n-large/--baseline-ns/--memory-ns must be integers and --dropouts numbers, got {ns!r}, "
                 f"{n_large!r}, {baseline_ns!r}, {memory_ns!r}, {dropouts!r}")
        names = {"presets": _names(presets), "large": _names(large_presets), "drop": _names(dropout_presets),
                 "train": _names(train_presets)}
        schemes = tuple(x.strip() if x.strip().lower() in BASELINES else x.strip().upper()
                        for x in curves.split(",") if x.strip())
        if not set(want) <= {"table5", "fig5", "fig6", "baselines", "memory", "train", "fig4"} or not (want or sources):
            fail(f"--parts must name table5, fig5, fig6, baselines, memory, train, fig4 (or be empty with --from); "
                 f"got {parts!r}")
        mem_schemes = _names(memory_schemes)
        mem_what = tuple(x.strip().lower() for x in memory_what.split(",") if x.strip())
        if any(m not in (*CPP_PRESETS, *bench_sfsl.COST_BASELINES) for m in mem_schemes) \
                or not set(mem_what) <= {"client", "server", "round"} or (mem_ns and min(mem_ns) < 2):
            fail(f"--memory-schemes must be presets or {list(bench_sfsl.COST_BASELINES)}, --memory-what client, "
                 f"server and/or round, --memory-ns >= 2; got {memory_schemes!r}, {memory_what!r}, {memory_ns!r}")
        schemes_b = _names(baselines)
        if any(b not in bench_sfsl.COST_BASELINES for b in schemes_b) or (base_ns and min(base_ns) < 2):
            fail(f"--baselines must be among {list(bench_sfsl.COST_BASELINES)} and --baseline-ns >= 2, got "
                 f"{baselines!r}, {baseline_ns!r}")
        if any(c not in bench_sfsl.CURVES for c in schemes):
            fail(f"--curves must be among {list(bench_sfsl.CURVES)}, got {curves!r}")
        earlier = []
        for src in sources:
            try:
                earlier.append(_infinities(json.loads(src.read_text()), back=True))
            except (OSError, ValueError) as exc:
                fail(f"--from {src}: not a readable result of this command ({exc})")
        plotted = [key for key in ("fig5", "fig4")
                   if any(k in want or any(isinstance(doc, dict) and doc.get(k) for doc in earlier)
                          for k in _PLOTTED_FROM[key])]
        check_outputs(force, ("--out", out), *((f"--out ({key} plot)", _plot_path(out, key)) for key in plotted),
                      inputs=sources)
        if any(p not in CPP_PRESETS for group in names.values() for p in group):
            fail(f"presets must be among {sorted(CPP_PRESETS)}")
        if (counts and min(counts) < 2) or (big and min(big) < 2) or any(not 0 <= r < 0.25 for r in ratios):
            fail("need n >= 2 and 0 <= dropout < 0.25 (two dropout sets must leave a majority)")
        if shape not in TAOBAO_SHAPES:
            fail(f"--shape must be one of {sorted(TAOBAO_SHAPES)}, got {shape!r}")
        datasets = tuple(x.strip() for x in train_data.split(",") if x.strip())
        if any(d != "ml-100k" and d not in TAOBAO_SHAPES for d in datasets):
            fail(f"--train-data must be ml-100k or a Taobao shape, got {train_data!r}")
        if quick:
            shape, counts, big, dropout_n, datasets, rounds = "taobao-mini", (4,), (6,), 6, ("taobao-mini",), 2
            base_ns, mem_ns = (4,), (4,)
            curve_rounds, curve_clients, eval_every = 2, 4, 1
        measured = tuple(p for p in want if p not in ("train", "fig4"))
        m = MIN_ROW_HOLDERS if min_row_holders is None else min_row_holders
        secure_ns = [n for part, group in (("fig5", (*counts, *big)), ("fig6", (dropout_n,)), ("memory", mem_ns),
                                           ("train", (clients,)), ("fig4", (curve_clients,)))
                     if part in want for n in group]  # the n of every SFSL secure sum measured
        if secure_ns and m > default_threshold(min(secure_ns)):
            fail(f"--min-row-holders must be at most the threshold {default_threshold(min(secure_ns))} of the "
                 f"smallest n measured ({min(secure_ns)}), got {m}")
        warn_min_row_holders(m)
        sizes: dict[str, Any] = {"ns": counts, "presets": names["presets"], "n_large": big,
                                 "large_presets": names["large"], "dropouts": ratios, "dropout_n": dropout_n,
                                 "dropout_presets": names["drop"], "baselines": schemes_b, "baseline_ns": base_ns,
                                 "memory_schemes": mem_schemes, "memory_ns": mem_ns, "memory_what": mem_what}
        # the steps: each measurement of bench_sfsl.run, each round of every curve and training run
        total = len(bench_sfsl.plan(measured, **sizes)) \
            + ("fig4" in want) * len(datasets) * len(schemes) * curve_rounds \
            + ("train" in want) * len(datasets) * len(names["train"]) * rounds
        result: dict[str, Any] = {}
        try:
            with steps_bar(quiet=as_json) as bar:
                done, started = 0, False

                def announce(msg: str) -> None:  # a measurement starts: the one before it is done
                    nonlocal done, started
                    done += started
                    started = True
                    bar(msg, done, total)

                result = bench_sfsl.run(measured, **sizes, shape=shape, batch=batch, seed=seed, min_row_holders=m,
                                        on_step=announce)
                done += started
                if "fig4" in want:
                    result["fig4"] = []
                    for ds in datasets:
                        train, test = _click_data(ds, seed)
                        for c in schemes:
                            def tick(r: int, label: str = f"Figure 4: {c} on {ds}", base: int = done) -> None:
                                bar(f"{label}: round {r}/{curve_rounds}", base + r, total)
                            result["fig4"].append(bench_sfsl.curve(
                                train, test, c, clients_per_round=curve_clients, rounds=curve_rounds,
                                batch=curve_batch, lr=lr, eval_every=eval_every, seconds=curve_seconds or None,
                                seed=seed, min_row_holders=m, progress=tick))
                            done += curve_rounds  # a curve stopped by --curve-seconds skips its last rounds
                if "train" in want:
                    result["train"] = []
                    for ds in datasets:
                        train, test = _click_data(ds, seed)
                        for p in names["train"]:
                            def progress(r: int, _res: object, label: str = f"SFSL {p} on {ds}",
                                         base: int = done) -> None:
                                bar(f"{label}: round {r}/{rounds}", base + r, total)
                            result["train"].append(bench_sfsl.training(
                                train, test, p, clients_per_round=clients, rounds=rounds, batch=train_batch, lr=lr,
                                seed=seed, eval_every=max(1, rounds // 5), min_row_holders=m, progress=progress))
                            done += rounds
                bar("done", total, total)
        except InvalidParameters as exc:
            fail(exc)
        except SecAggAborted as exc:
            fail(f"an SFSL round aborted ({exc}); with --min-row-holders {m} a client dropping after ShareKeys (Figure "
                 "6) aborts the round where it leaves a row one surviving holder -- --min-row-holders 1 measures the "
                 "paper's round")
        if earlier:
            result = bench_sfsl.merge([*earlier, result])
        result["plots"] = _plots(result, out)
        if save_json(_infinities(json.loads(json.dumps(result, default=_jsonable))), out, as_json):
            return
        _print(result, out)


#: the result rows each plot draws: Figure 5 its presets' and the cost baselines' rounds
_PLOTTED_FROM = {"fig5": ("fig5", "baselines"), "fig4": ("fig4",)}


def _plots(result: dict[str, Any], out: Path) -> list[str]:
    """Draw Figure 5 and Figure 4 beside ``out`` where the result has their rows; the paths."""
    from secemb.bench import sfsl as bench_sfsl

    paths = []
    if result.get("fig5") or result.get("baselines"):
        path = _plot_path(out, "fig5")
        bench_sfsl.plot_fig5(result.get("fig5", []), path, result.get("baselines", []))
        paths.append(str(path))
    if result.get("fig4"):
        path = _plot_path(out, "fig4")
        bench_sfsl.plot_fig4(result["fig4"], path)
        paths.append(str(path))
    return paths


def _plot_path(out: Path, key: str) -> Path:
    """Where the plot ``key`` (fig5, fig4) of a result written to ``out`` goes: beside it."""
    return out.with_name(f"{out.stem}-{key}.png")


def _infinities(doc: Any, back: bool = False) -> Any:
    """``doc`` with every infinite float (a preset's epsilon can be infinite) as the string
    ``"inf"`` / ``"-inf"`` -- strict JSON has no infinity; ``back``: those strings as floats
    again (and ``Infinity`` of results written before, which ``json`` reads as floats, kept)."""
    if isinstance(doc, dict):
        return {k: _infinities(v, back) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_infinities(v, back) for v in doc]
    if back and doc in ("inf", "-inf"):
        return float(doc)
    if not back and isinstance(doc, float) and math.isinf(doc):
        return "inf" if doc > 0 else "-inf"
    return doc


def _jsonable(x: object) -> object:
    return float(x) if isinstance(x, (int, float)) else str(x)


def _click_data(name: str, seed: int) -> tuple[Any, Any]:
    import numpy as np

    from secemb.data import load_dataset
    from secemb.data.ctr import TaobaoShaped, movielens_clicks, split_clicks
    from secemb.data.features import movielens_features

    if name == "ml-100k":
        data = movielens_clicks(load_dataset("ml-100k"), movielens_features("ml-100k").item)
    else:
        world = TaobaoShaped(name, seed)
        data = world.clients(np.arange(world.shape.users))
    return split_clicks(data)


def _print(result: dict[str, Any], out: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    from secemb.cli._console import console

    con = console()
    if "table5" in result:
        t5 = result["table5"]
        table = Table(title=f"Table V (n = {t5['n']}, union {t5['union']:,}, single-owner share "
                            f"{t5['single_owner_share']:.1%}); paper in brackets")
        for col in ("preset", "p5", "p6", "eps_1", "eps_inf", "p7", "p8"):
            table.add_column(col, justify="right")
        for r in t5["presets"]:
            pp = r["paper"]

            def e(x: float) -> str:
                return "inf" if math.isinf(x) else f"{x:.2f}"
            table.add_row(r["preset"], f"{r['p5']:.3f}", f"{r['p6']:.3f}", f"{e(r['eps_one'])} [{e(pp['eps_one'])}]",
                          f"{e(r['eps_inf'])} [{e(pp['eps_inf'])}]", f"{r['p7']:.1%} [{pp['p7']:.1%}]",
                          f"{r['p8']:.1%} [{pp['p8']:.1%}]")
        print_fitted(table, con)
    for key, title in (("fig5", "Figure 5 / Table VI: one round, per client"), ("fig6", "Figure 6: dropouts")):
        if key not in result:
            continue
        table = Table(title=title)
        for col in ("preset", "n", "drop", "|S''|", "traffic MB", "PSU MB", "client s (train)", "server s",
                    "server PSU s", "server secagg s"):
            table.add_column(col, justify="right")
        for r in result[key]:
            traffic = sum(r["upload_bytes"].values()) + sum(r["download_bytes"].values())
            table.add_row(r["preset"], str(r["n"]), f"{r['dropout']:.0%}", f"{r['perturbed']:,.0f}",
                          f"{traffic / 1e6:.2f}", f"{r['psu_client_bytes'] / 1e6:.2f}",
                          f"{sum(r['client_s'].values()):.2f} ({r['client_s']['train']:.2f})",
                          f"{sum(r['server_s'].values()):.2f}", f"{r['server_s']['psu']:.2f}",
                          f"{r['server_s']['secagg']:.2f}")
        print_fitted(table, con)
    if result.get("baselines"):
        table = Table(title="Figure 5's cost baselines: one round, per client (paper, n = 100: SFL 27.94 MB; "
                            "pure FSL 0.41 MB, pure FL 20.70 MB)")
        for col in ("scheme", "n", "rows", "traffic MB", "up MB", "down MB", "client s (train)", "server s"):
            table.add_column(col, justify="right")
        for r in result["baselines"]:
            upb, downb = sum(r["upload_bytes"].values()), sum(r["download_bytes"].values())
            table.add_row(r["scheme"], str(r["n"]), f"{r['rows']:,.0f}", f"{(upb + downb) / 1e6:.2f}",
                          f"{upb / 1e6:.2f}", f"{downb / 1e6:.2f}",
                          f"{sum(r['client_s'].values()):.2f} ({r['client_s']['train']:.2f})",
                          f"{sum(r['server_s'].values()):.2f}")
        print_fitted(table, con)
    if result.get("memory"):
        table = Table(title="Section VI-D: peak RSS (MB) in a fresh process; paper, n = 100: client CPP2 209, "
                            "CPP5 281; server CPP2 1,580, CPP5 3,150")
        for col in ("what", "scheme", "n", "work MB", "process MB", "base MB"):
            table.add_column(col, justify="right")
        for r in result["memory"]:
            table.add_row(r["what"], r["scheme"], str(r["n"]), f"{r['work_mb']:.1f}", f"{r['process_mb']:.1f}",
                          f"{r['base_mb']:.1f}")
        print_fitted(table, con)
    if "train" in result:
        table = Table(title="SFSL training")
        for col in ("dataset", "preset", "rounds", "AUC", "traffic MB/client/round", "client s", "server s"):
            table.add_column(col, justify="right")
        for r in result["train"]:
            table.add_row(r["dataset"], r["preset"], str(r["rounds"]), f"{r['final_auc']:.4f}",
                          f"{r['client_traffic_bytes'] / 1e6:.3f}", f"{r['client_s']:.2f}", f"{r['server_s']:.2f}")
        print_fitted(table, con)
    if "fig4" in result:
        table = Table(title="Figure 4: test AUC over rounds (paper: Taobao, n = 100, 5,000 rounds)")
        for col in ("dataset", "scheme", "n", "rounds run", "best AUC (round)", "last AUC", "paper best AUC (round)",
                    "wall s"):
            table.add_column(col, justify="right")
        for c in result["fig4"]:
            paper = result.get("paper", {}).get("fig4_best", {}).get(c["scheme"])
            last = c["auc"][str(max(int(k) for k in c["auc"]))] if c["auc"] else float("nan")
            table.add_row(c["dataset"], c["scheme"], str(c["clients_per_round"]), str(c["rounds_run"]),
                          f"{c['best_auc']:.4f} ({c['best_round']})" if c["best_auc"] is not None else "-",
                          f"{last:.4f}", f"{paper['auc']:.3f} ({paper['round'] or '?'})" if paper else "-",
                          f"{c['wall_s']:.0f}")
        print_fitted(table, con)
    con.print(escape(f"machine: {result.get('machine', '?')}; written to {out}"
                     + "".join(f", {p}" for p in result.get("plots", []))))
