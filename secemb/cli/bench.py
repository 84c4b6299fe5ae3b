"""``secemb bench ...``: benchmarks measured on this machine."""

import contextlib
import json

import typer

from secemb.cli.bench_output import FORCE_HELP, print_fitted


def register(app: typer.Typer) -> None:
    """Attach the ``bench`` command group to ``app``."""
    bench_app = typer.Typer(help="Benchmarks measured on this machine.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")
    _register_server(bench_app)

    @bench_app.command("fss")
    def fss(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        quick: bool = typer.Option(False, "--quick", help="Small workloads (a smoke test)."),
        device: str = typer.Option("cpu", "--device", help="cpu (one core, numpy and numba kernels) or cuda "
                                   "(the GPU kernels of --backend gpu, secemb[gpu]; refuses without a CUDA device)."),
    ) -> None:
        """DPF key generation and evaluation throughput, next to raw AES in the same run."""
        if device == "cuda":
            _fss_cuda(as_json, quick)
            return
        if device != "cpu":
            from secemb.cli._usage import fail

            fail(f"--device must be cpu or cuda, got {device!r}")
        from secemb.bench import fss as bench_fss
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import print_table

        try:
            result = bench_fss.run(quick=quick)
        except bench_fss.ShareAboveCeiling as exc:
            fail(exc, code=1)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        print_table("secemb bench fss (one core; [backend] = secemb.fss.kernels)",
                    [("measure", "left"), ("value", "right"), ("of OpenSSL", "right"), ("of fastest", "right")],
                    bench_fss.table_rows(result))
        typer.echo(f"of OpenSSL / of fastest: share of the OpenSSL AES rate / of the fastest AES rate, each timed "
                   f"interleaved with its figure; timing: {bench_fss.TIMING} (best of {result['timing']['repeats']})")

    _register_paper_tables(bench_app)
    _register_seq(bench_app)
    from secemb.cli import bench_compare, bench_secea

    bench_secea.register(bench_app)
    bench_compare.register(bench_app)
    from secemb.cli import bench_grec

    bench_grec.register(bench_app)
    from secemb.cli import bench_secagg

    bench_secagg.register(bench_app)
    from secemb.cli import bench_sfsl

    bench_sfsl.register(bench_app)
    from secemb.cli import bench_dp

    bench_dp.register(bench_app)
    from secemb.cli import bench_scale

    bench_scale.register(bench_app)
    from secemb.cli import bench_popularity

    bench_popularity.register(bench_app)
    from secemb.cli import bench_noise

    bench_noise.register(bench_app)
    from secemb.cli import bench_robust

    bench_robust.register(bench_app)
    from secemb.cli import bench_overhead

    bench_overhead.register(bench_app)
    from secemb.cli import bench_startup

    bench_startup.register(bench_app)


def _fss_cuda(as_json: bool, quick: bool) -> None:
    """``secemb bench fss --device cuda``: the GPU kernels next to that GPU's raw AES rate."""
    from rich.markup import escape
    from rich.table import Table

    from secemb.bench import gpu as bench_gpu
    from secemb.cli._console import console
    from secemb.cli._usage import fail
    from secemb.errors import InvalidParameters

    try:
        with console(stderr=True).status("measuring on the GPU"):
            result = bench_gpu.run(quick=quick)
    except InvalidParameters as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    table = Table(title=escape(f"secemb bench fss --device cuda ({result['device']})"))
    for col, justify in (("measure", "left"), ("value", "right"), ("share of the GPU's AES", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for row in bench_gpu.table_rows(result):
        table.add_row(*map(escape, row))
    print_fitted(table)


def _register_seq(bench_app: typer.Typer) -> None:
    @bench_app.command("seq")
    def seq(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        quick: bool = typer.Option(False, "--quick", help="Small workloads (a smoke test)."),
        models: str = typer.Option("sasrec,caser", help="Comma-separated sequential models."),
        datasets: str = typer.Option("ml-100k", help="Comma-separated datasets for accuracy."),
        protocols: str = typer.Option("secemb", help="Comma-separated: secemb, plaintext (SecEmb's model bit for "
                                      "bit, no cryptography) and/or the lossy baselines quant8, ternary, svd, "
                                      "colr (trained on the same task)."),
        epochs: int = typer.Option(0, help="Epochs of every accuracy run (0: the per-model settings)."),
        no_traffic: bool = typer.Option(False, "--no-traffic", help="Skip the Amazon-size upload."),
        out: Path = typer.Option(Path("results/seq.json"), help="Write the JSON result here."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Table 4: Caser and SASRec through SecEmb (accuracy leave-one-out beside the popularity
        ranking; one device's upload on a 9,267,503-item catalogue, measured bytes); the lossy
        baselines on the item-embedding update with --protocols."""
        from rich.markup import escape
        from rich.table import Table

        from secemb.bench import seq as bench_seq

        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, save_json, steps_bar
        from secemb.data import DataFormatError, DatasetNotFoundError
        from secemb.errors import InvalidParameters

        check_outputs(force, ("--out", out))
        if epochs < 0:
            fail(f"--epochs must be >= 0, got {epochs}")
        try:
            with steps_bar(quiet=as_json) as progress:
                result = bench_seq.run(models=_split(models, ("sasrec", "caser")),
                                       datasets=_split(datasets, ("ml-100k",)),
                                       protocols=_split(protocols, ("secemb",)), epochs=epochs or None,
                                       traffic_part=not no_traffic, quick=quick, progress=progress)
        except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
            fail(exc)
        if save_json(result, out, as_json):
            return
        table = Table(title="secemb bench seq (Table 4; ours: SecEmb cuckoo + relay, leave-one-out)")
        for col in ("model", "data", "measure", "ours", "popularity", "paper"):
            table.add_column(col, justify="left" if col in ("model", "data", "measure") else "right")
        for row in bench_seq.table_rows(result):
            table.add_row(*map(escape, row))
        print_fitted(table)
        typer.echo(f"wrote {out}")


def _require_plots() -> None:
    """Exit 2 with the install command before a benchmark that plots runs without matplotlib."""
    from secemb.bench.plots import PlotsUnavailable, require
    from secemb.cli._usage import fail

    try:
        require()
    except PlotsUnavailable as exc:
        fail(exc)


def _register_server(bench_app: typer.Typer) -> None:
    @bench_app.command("server")
    def server(
        as_json: bool = typer.Option(False, "--json", help="Print the JSON list of configurations."),
        quick: bool = typer.Option(False, "--quick", help="Small workloads (a smoke test)."),
        out: str = typer.Option("results/server", help="Folder for the JSON and the plot."),
        full_users: int = typer.Option(0, help="Users of the full-layout runs (0: 100 at ML-1M, 10 at Yelp)."),
        backend: str = typer.Option("serial", help="Servers' evaluation: serial (CPU) or gpu (CUDA, secemb[gpu]: "
                                    "also prints that GPU's raw AES rate and the kernels' leaves/s)."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Server computation per round: full-domain against cuckoo layout."""
        import os

        from secemb.bench import server as bench_server
        from secemb.cli._console import console
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_folder, print_table, save_json, steps_bar
        from secemb.errors import InvalidParameters

        check_folder(force, "--out", Path(out), ("server.json", "server_vs_m.png"))
        _require_plots()
        if backend not in ("serial", "gpu"):
            fail(f"--backend must be serial or gpu, got {backend!r}")
        try:
            with steps_bar(quiet=as_json) as progress:
                result = bench_server.run(quick=quick, progress=progress, full_users=full_users or None,
                                          backend=backend)
        except InvalidParameters as exc:
            fail(exc)
        save_json(result, Path(out) / "server.json", False)
        bench_server.plot(result["sweep"], os.path.join(out, "server_vs_m.png"))
        if as_json:
            typer.echo(json.dumps(result["records"], indent=2))
            return
        print_table("secemb bench server", [(c, "left" if c in ("dataset", "layout") else "right") for c in
                                             ("dataset", "layout", "relay", "m", "m'", "users", "server s", "cpu s")],
                    [(r["dataset"], r["layout"], str(r["relay"]), str(r["m"]), str(r["m_prime"]), str(r["users"]),
                      f"{r['server_s_per_round']:.3f}", f"{r['server_cpu_s_per_round']:.3f}")
                     for r in result["records"]])
        typer.echo("server s: the busier server's wall seconds in one round; cpu s: its CPU seconds in this process "
                   f"(what load does not inflate); {result['warm_up']}")
        if result.get("gpu"):
            from secemb.bench import gpu as bench_gpu

            for label, value, share in bench_gpu.table_rows(result["gpu"]):
                console().print(f"{label}: {value}" + (f" ({share} of the GPU's AES rate)" if share else ""))
        console().print(f"plot: {os.path.join(out, 'server_vs_m.png')}")

    @bench_app.command("network")
    def network(
        devices: int = typer.Option(1000, min=1, max=100_000, help="Simulated devices in the round."),
        concurrency: int = typer.Option(32, min=1, max=1024, help="Devices running at the same time."),
        protocol: str = typer.Option("secemb", help="secemb or plaintext."),
        layout: str = typer.Option("cuckoo", help="cuckoo or full."),
        relay: bool = typer.Option(True, "--relay/--no-relay", help="Relay through server 0 (secemb)."),
        dim: int = typer.Option(16, min=1, help="Embedding size."),
        m_prime: int = typer.Option(50, min=1, help="Rows per device (m')."),
        num_items: int = typer.Option(1682, min=2, help="Items (m)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        batch_wait_ms: float | None = typer.Option(None, min=0.0, max=1000.0, help=(
            "The servers' [server] batch_wait_ms (docs/deployment.md, \"Batching\"). Default: theirs, 5.")),
    ) -> None:
        """One round of N devices against two server processes on loopback: p50/p99 latency
        and throughput per phase, and each server's compute."""
        from secemb.bench import network as bench_network

        result = bench_network.run(devices, concurrency=concurrency, protocol=protocol, layout=layout, relay=relay,
                                   dim=dim, m_prime=m_prime, num_items=num_items, batch_wait_ms=batch_wait_ms)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        from rich.table import Table

        table = Table(title=f"secemb bench network: {devices} devices, {protocol} ({layout}"
                            f"{', relay' if relay else ''}), m={num_items} d={dim} m'={m_prime}, "
                            f"batch wait {result['batch_wait_ms']:g} ms")
        for col in ("phase", "p50 ms", "p99 ms", "max ms", "wall s", "devices/s"):
            table.add_column(col, justify="right" if col != "phase" else "left")
        for name, ph in result["phases"].items():
            if "p50_ms" in ph:
                table.add_row(name, f"{ph['p50_ms']:.1f}", f"{ph['p99_ms']:.1f}", f"{ph['max_ms']:.1f}",
                              f"{ph['wall_s']:.2f}", f"{ph['devices_per_s']:,.0f}")
            else:
                table.add_row(name, "", "", "", f"{ph['wall_s']:.2f}", "")
        table.add_row("round", "", "", "", f"{result['round_s']:.2f}", f"{result['devices_per_s']:,.0f}")
        print_fitted(table)
        busy = result["server_s"]
        typer.echo(f"server compute (seconds in the protocol role's calls, the timed round): "
                   f"server 0 {busy['0']:.3f} s, server 1 {busy['1']:.3f} s")
        typer.echo(result["warm_up"])


# --------------------------------------------------------------------------- paper tables
# `secemb bench comm | compute | memory | he | accuracy`: the SecEmb paper's evaluation tables
# (docs/results.md).  Each writes Markdown, CSV and a PNG into results/<table>/.

from pathlib import Path  # noqa: E402  (module level: typer resolves the annotations below)


def _split(value: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    return default if not value else tuple(x.strip() for x in value.split(",") if x.strip())


@contextlib.contextmanager
def _progress(quiet: bool, out: Path, force: bool, table: str):  # noqa: ANN202
    """Progress bars (a count, the elapsed and the estimated remaining time) for a paper-table
    run writing ``<table>.md``, ``.csv`` and ``.png`` into ``out``.  Outputs that exist
    (without ``force``) or cannot be written, a bad option or missing data exit 2 with the
    reason (``out`` checked first, before any work)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    from secemb.cli._usage import fail
    from secemb.cli.bench_output import check_folder
    from secemb.data import DataFormatError, DatasetNotFoundError
    from secemb.errors import InvalidParameters

    check_folder(force, "--out", out, tuple(f"{table}.{ext}" for ext in ("md", "csv", "png")))
    _require_plots()
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("left"), TimeRemainingColumn(), disable=quiet, transient=True) as progress:
            yield progress
    except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
        fail(exc)


def _register_paper_tables(bench_app: typer.Typer) -> None:
    models_opt = typer.Option(None, help="Comma-separated models (default: mf,ncf,fm,deepfm).")
    datasets_opt = typer.Option(None, help="Comma-separated datasets (default: ml-100k,ml-1m,ml-10m,ml-25m,yelp).")
    quiet_opt = typer.Option(False, "--quiet", "-q", help="No progress bars.")
    force_opt = typer.Option(False, "--force", help=FORCE_HELP)

    @bench_app.command("comm")
    def comm(
        as_json: bool = typer.Option(False, "--json", help="Print the JSON list of measured configurations."),
        models: str = models_opt,
        datasets: str = datasets_opt,
        protocols: str = typer.Option(
            None, help="Comma-separated protocols (default: all of Tables 2, 3, 12, 13, 16)."
        ),
        out: Path = typer.Option(Path("results/comm"), help="Output folder."),
        fresh: bool = typer.Option(False, "--fresh", help="Measure everything again (ignore <out>/rows.jsonl)."),
        quiet: bool = quiet_opt,
        force: bool = force_opt,
    ) -> None:
        """Upload/download MB per user and round (Tables 2, 12, 13, 16; Table 3's R.R.), measured.

        A configuration measured before with identical settings is taken from <out>/rows.jsonl
        unless --fresh; the tables cover exactly the configurations asked for."""
        from secemb.bench import comm as bench_comm

        with _progress(quiet or as_json, out, force, "comm") as progress:
            rows = bench_comm.run(_split(models, bench_comm.MODELS), _split(datasets, tuple(bench_comm.DATASETS)),
                                  _split(protocols, bench_comm.PROTOCOLS), out=out, progress=progress, fresh=fresh)
        if as_json:
            keys = ("protocol", "model", "dataset", "m", "m_prime", "d", "upload_mb", "download_mb", "layout", "relay",
                    "from_cache")
            typer.echo(json.dumps([{k: r[k] for k in keys} for r in rows], indent=1))
        else:
            cached = sum(r["from_cache"] for r in rows)
            typer.echo(f"wrote {out}/comm.md, comm.csv, comm.png: {len(rows)} configurations, "
                       f"{len(rows) - cached} measured, {cached} from cache")

    @bench_app.command("compute")
    def compute(
        models: str = models_opt,
        datasets: str = datasets_opt,
        repeats: int = typer.Option(5, min=1, help="Timings per configuration (best is kept)."),
        out: Path = typer.Option(Path("results/compute"), help="Output folder."),
        quiet: bool = quiet_opt,
        force: bool = force_opt,
    ) -> None:
        """User ms for secret-share generation (Tables 5, 17, Figure 5)."""
        from secemb.bench import comm as bench_comm
        from secemb.bench import compute as bench_compute

        with _progress(quiet, out, force, "compute") as progress:
            rows = bench_compute.run(_split(models, bench_comm.MODELS), _split(datasets, tuple(bench_comm.DATASETS)),
                                     out=out, repeats=repeats, progress=progress)
        typer.echo(f"wrote {out}/compute.md, compute.csv, compute.png ({len(rows)} configurations)")

    @bench_app.command("memory")
    def memory(
        models: str = models_opt,
        datasets: str = typer.Option(None, help="Comma-separated datasets (default: ml-1m,ml-10m,ml-25m,yelp)."),
        out: Path = typer.Option(Path("results/memory"), help="Output folder."),
        server: bool = typer.Option(False, "--server", help="Instead: server 0's peak RSS over one round by the "
                                    "number of devices (issue 37; --models: one model, default deepfm; --datasets: "
                                    "one dataset, default ml-100k)."),
        devices: str = typer.Option("10,50,100", help="--server: comma-separated devices per round."),
        dim: int = typer.Option(128, min=1, help="--server: the model's embedding size d."),
        protocols: str = typer.Option("secemb", help="--server: comma-separated protocols (secemb, "
                                      "secemb-cuckoo-relay, secfedrec, dp-fedrec, plaintext)."),
        quiet: bool = quiet_opt,
        force: bool = force_opt,
    ) -> None:
        """Per-user training memory and storage, SecEmb vs full model (Appendix K.2); with
        --server, a server's peak memory by devices per round."""
        from secemb.bench import comm as bench_comm
        from secemb.bench import memory as bench_memory

        if server:
            from secemb.cli._usage import fail

            (model,), (dataset,) = _split(models, ("deepfm",))[:1], _split(datasets, ("ml-100k",))[:1]
            names = _split(protocols, ("secemb",))
            counts = _split(devices, ())
            bad = [p for p in names if p not in bench_memory.SERVER_PROTOCOLS]
            if bad or dataset not in bench_comm.DATASETS or model not in bench_comm.MODELS:
                fail(f"--server runs protocols {', '.join(bench_memory.SERVER_PROTOCOLS)}, datasets "
                     f"{', '.join(bench_comm.DATASETS)}, models {', '.join(bench_comm.MODELS)}; got {names}, "
                     f"{dataset!r}, {model!r}")
            if not counts or not all(n.isdigit() and int(n) >= 2 for n in counts):
                fail(f"--devices: comma-separated integers >= 2, got {devices!r}")
            with _progress(quiet, out, force, "server_memory") as progress:
                rows = bench_memory.server_run(model, dataset, dim, [int(n) for n in counts], names, out=out,
                                               progress=progress)
            for r in rows:
                typer.echo(f"{r['protocol']} {r['model']} d={r['d']} {r['devices']:>4} devices: server 0 peak RSS "
                           f"{r['peak_rss_mib']:.0f} MiB (round start {r['rss_round_start_mib']:.0f} MiB)")
            typer.echo(f"wrote {out}/server_memory.md, server_memory.csv")
            return
        with _progress(quiet, out, force, "memory") as progress:
            rows = bench_memory.run(_split(models, bench_comm.MODELS),
                                    _split(datasets, ("ml-1m", "ml-10m", "ml-25m", "yelp")), out=out, progress=progress)
        typer.echo(f"wrote {out}/memory.md, memory.csv, memory.png ({len(rows)} configurations)")

    @bench_app.command("he")
    def he(
        users: str = typer.Option("100,200,300,400,500", help="Comma-separated numbers of active users."),
        out: Path = typer.Option(Path("results/he"), help="Output folder."),
        quiet: bool = quiet_opt,
        force: bool = force_opt,
    ) -> None:
        """Server seconds per round, SecEmb vs CKKS aggregation, ML-1M (Table 14)."""
        from secemb.bench import compute as bench_compute

        with _progress(quiet, out, force, "he") as progress:
            s = bench_compute.run_he([int(x) for x in _split(users, ())], out=out, progress=progress)
        typer.echo(f"wrote {out}/he.md, he.csv, he.png{'; ' + s['note'] if s['note'] else ''}")

    @bench_app.command("accuracy")
    def accuracy(
        models: str = models_opt,
        protocols: str = typer.Option("secemb,quant8,ternary,svd,colr", help="Comma-separated protocols."),
        seeds: str = typer.Option("0,1,2,3", help="Comma-separated seeds."),
        epochs: str = typer.Option("200", help="Epochs: one number, or model=epochs pairs (mf=200,deepfm=20)."),
        dataset: str = typer.Option("ml-100k", help="Dataset (real ML-100K needs RecBole's copy)."),
        out: Path = typer.Option(Path("results/table3"), help="Output folder (runs are cached in <out>/runs)."),
        cached_only: bool = typer.Option(False, "--cached-only", help="Only tabulate runs already in <out>/runs."),
        quiet: bool = quiet_opt,
        force: bool = force_opt,
    ) -> None:
        """Test RMSE mean +- std over seeds, SecEmb and the lossy baselines (Table 3)."""
        from secemb.bench import accuracy as bench_accuracy

        ep: int | dict[str, int]
        if "=" in epochs:
            ep = {k.strip(): int(v) for k, v in (x.split("=") for x in epochs.split(","))}
        else:
            ep = int(epochs)
        with _progress(quiet, out, force, "table3") as progress:
            s = bench_accuracy.run(_split(models, ("mf", "ncf", "fm", "deepfm")), _split(protocols, ("secemb",)),
                                   [int(x) for x in _split(seeds, ("0",))], ep, out=out, dataset=dataset,
                                   progress=progress, cached_only=cached_only)
        for r in s["rows"]:
            typer.echo(f"{r['model']:7s} {r['protocol']:8s} final {r['final_rmse']}  best {r['best_rmse']}  "
                       f"paper {r['paper']}")
        typer.echo(f"wrote {out}/table3.md, table3.csv, table3.png")
