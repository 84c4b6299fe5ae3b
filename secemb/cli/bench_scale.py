"""``secemb bench scale``: server time per round against workers (processes, threads), with a plot."""

from pathlib import Path

import typer

from secemb.cli.bench_output import FORCE_HELP


def register(bench_app: typer.Typer) -> None:
    """Attach ``scale`` to the ``bench`` group."""

    @bench_app.command("scale")
    def scale(
        workers: str = typer.Option("", help="Comma-separated worker counts of each backend (default: 1, 2, 4, ... "
                                    "up to the core count)."),
        backends: str = typer.Option("process,thread", help="Comma-separated backends to compare with serial: "
                                     "process (worker processes, shared memory), thread (threads of the "
                                     "server's process)."),
        size: str = typer.Option("ml-1m", help="Round size: ml-1m (m = 3,883, m' = 300, 100 users), yelp "
                                 "(m = 93,386, m' = 500, 100 users) or tiny (a smoke test)."),
        layout: str = typer.Option("cuckoo", help="full or cuckoo."),
        relay: bool = typer.Option(True, "--relay/--no-relay", help="Relay mode (default on)."),
        repeat: int = typer.Option(3, min=1, help="Timed rounds per configuration (the fastest is reported)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path = typer.Option(Path("results/scale.json"), help="Write the JSON result here."),
        plot: Path = typer.Option(Path("results/scale.png"), help="Write the speed-up plot (PNG) here."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """The busier server's time per round through the serial backend and the process and thread
        backends at each worker count (results checked equal), its speed-up, and each worker
        process's peak memory."""
        from secemb.bench import plots
        from secemb.bench import scale as bench_scale
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, print_table, save_json, steps_bar
        from secemb.errors import InvalidParameters

        check_outputs(force, ("--out", out), ("--plot", plot))
        try:
            counts = [int(x) for x in workers.split(",") if x.strip()]
        except ValueError:
            fail(f"--workers must be comma-separated integers, got {workers!r}")
        try:
            plots.require()
            with steps_bar(quiet=as_json) as progress:
                result = bench_scale.run(counts or None, size=size, layout=layout, relay=relay, repeat=repeat,
                                         progress=progress,
                                         backends=[b.strip() for b in backends.split(",") if b.strip()])
        except (InvalidParameters, plots.PlotsUnavailable) as exc:
            fail(exc)
        bench_scale.plot(result, str(plot))
        if save_json(result, out, as_json):
            return
        load = f", load average {result['load_average'][0]:.1f}" if result["load_average"] else ""
        print_table(f"secemb bench scale ({result['size']}: m = {result['m']:,}, m' = {result['m_prime']}, "
                    f"{result['users']} users, {result['layout']}{' + relay' if result['relay'] else ''}; "
                    f"{result['machine']['cores']} cores{load})",
                    [(col, "left" if col == "backend" else "right") for col in
                     ("backend", "n", "round s", "x", "eval s", "x ", "out s", "cpu s", "wcpu s", "RSS MiB")],
                    bench_scale.table_rows(result))
        typer.echo("n: workers; round s: the busier server's calls in one round; eval s: both servers' "
                   "work in the backend's tasks (evaluations; with threads also the control-bit products); "
                   "x: speed-up over serial; out s: the busier server's round outside the backend's tasks; "
                   "cpu s: the busier server's CPU time in this process; wcpu s: the "
                   "workers' CPU time (both servers); RSS: the largest worker's peak resident set")
        ceiling = ", ".join(f"{n}: {v:.2f}x" for n, v in result["machine_ceiling"].items())
        typer.echo(f"machine ceiling (n threads of the AES conversion at once, against one): {ceiling}")
        bound = result["amdahl"]
        if bound is not None:
            at_most = ", ".join(f"{n}: {v:.1f}x" for n, v in bound["speedup_at_most"].items())
            typer.echo(f"outside the tasks with {bound['workers']} threads: {bound['outside_tasks_s']:.3f} s of the "
                       f"serial round's {bound['serial_round_s']:.3f} s ({100 * bound['share']:.1f} %); Amdahl's law "
                       f"bounds the round's speed-up at n workers by {at_most} (a bound from this run's times, "
                       "not a measurement)")
            cpu = bound["cpu"]
            if cpu is not None:
                at_most = ", ".join(f"{n}: {v:.1f}x" for n, v in cpu["speedup_at_most"].items())
                typer.echo(f"the same on the CPU clock (the server thread's CPU outside the tasks, the serial round's "
                           f"CPU): {cpu['outside_tasks_cpu_s']:.3f} s of {cpu['serial_round_cpu_s']:.3f} s "
                           f"({100 * cpu['share']:.1f} %), bounds {at_most}")
        shared = max(r["peak_shared_bytes"] for r in result["records"])
        typer.echo(f"published tables (both servers): {shared / 2**20:,.1f} MiB of shared memory")
        for name, n, x in bench_scale.above_ideal(result):
            typer.echo(f"warning: the {name} backend's round at {n} workers measured {x:.2f}x, above the ideal {n}x: "
                       "no backend can beat it, so the serial round was slowed (load?); run again before using it")
        typer.echo(f"wrote {out} and {plot}")
