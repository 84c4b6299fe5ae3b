"""``secemb bench secagg``: the PSU and its secure aggregation (Table VI, Figure 6 of secure
federated submodel learning), measured in process."""

from pathlib import Path

import typer

from secemb.cli.bench_output import FORCE_HELP, print_fitted


def register(bench_app: typer.Typer) -> None:
    """Attach ``secagg`` to the ``bench`` group."""

    @bench_app.command("secagg")
    def secagg(
        ns: str = typer.Option("20,40,60,80,100", help="Comma-separated numbers of clients n."),
        dropouts: str = typer.Option("0,0.05,0.1,0.15,0.2", help="Comma-separated dropout ratios (largest n)."),
        domain: int = typer.Option(143_534, help="Goods in the domain (the exact filter's length)."),
        set_size: int = typer.Option(329, help="Goods in each client's set."),
        repeats: int = typer.Option(1, help="Runs of each setting; seconds are the minimum over them."),
        quick: bool = typer.Option(False, "--quick", help="Small workloads (a smoke test)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path = typer.Option(Path("results/secagg.json"), help="Write the JSON result here."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """PSU over Bonawitz secure aggregation: per-client bytes (len() of the messages) and
        seconds of each party for n clients, and the server's seconds against the dropout ratio."""
        from rich.markup import escape
        from rich.table import Table

        from secemb.bench import secagg as bench_secagg
        from secemb.cli._console import console
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, save_json, steps_bar
        from secemb.errors import InvalidParameters

        check_outputs(force, ("--out", out))
        try:
            counts = tuple(int(x) for x in ns.split(",") if x.strip())
            ratios = tuple(float(x) for x in dropouts.split(",") if x.strip())
        except ValueError:
            fail(f"--ns must be integers and --dropouts numbers, got {ns!r}, {dropouts!r}")
        if not counts or min(counts) < 2 or any(not 0 <= r < 0.5 for r in ratios) or domain < set_size or set_size < 1 \
                or repeats < 1:
            fail("need n >= 2, 0 <= dropout < 0.5, 1 <= --set-size <= --domain and --repeats >= 1")
        try:
            with steps_bar(quiet=as_json) as progress:
                result = bench_secagg.run(ns=counts, dropouts=ratios, domain=domain, set_size=set_size, quick=quick,
                                          repeats=repeats, progress=progress)
        except InvalidParameters as exc:
            fail(exc)
        if save_json(result, out, as_json):
            return
        table = Table(title=f"PSU (exact filter over {result['psu'][0]['domain']:,} goods), per client")
        for col in ("n", "t", "upload MB", "download MB", "client s", "server s"):
            table.add_column(col, justify="right")
        for r in result["psu"]:
            table.add_row(str(r["n"]), str(r["threshold"]), f"{r['client_upload_bytes'] / 1e6:.3f}",
                          f"{r['client_download_bytes'] / 1e6:.3f}", f"{r['client_s']:.2f}", f"{r['server_s']:.2f}")
        drop = Table(title="PSU server seconds against dropouts after ShareKeys")
        for col in ("n", "dropout", "server s", "of which Unmasking s"):
            drop.add_column(col, justify="right")
        for r in result["dropout"]:
            drop.add_row(str(r["n"]), f"{r['dropout']:.0%}", f"{r['server_s']:.2f}", f"{r['server_unmask_s']:.2f}")
        out_console = console()
        print_fitted(table, out_console)
        print_fitted(drop, out_console)
        out_console.print(escape(f"machine: {result['machine']}, {result['cpus']} CPUs, load average "
                                 f"{result['load_average'][0]:.1f}; written to {out}"))
