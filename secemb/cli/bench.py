"""``secemb bench ...``: benchmarks measured on this machine."""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``bench`` command group to ``app``."""
    bench_app = typer.Typer(help="Benchmarks measured on this machine.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")
    _register_server(bench_app)

    @bench_app.command("fss")
    def fss(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        quick: bool = typer.Option(False, "--quick", help="Small workloads (a smoke test)."),
    ) -> None:
        """DPF key generation and evaluation throughput, next to raw AES in the same run."""
        from secemb.bench import fss as bench_fss

        result = bench_fss.run(quick=quick)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title="secemb bench fss")
        table.add_column("measure")
        table.add_column("value", justify="right")
        table.add_column("ratio to AES", justify="right")
        aes = result["aes_blocks_per_s"]
        table.add_row("raw AES-128-ECB", f"{aes / 1e6:,.0f} M blocks/s", "1.00")
        for name, ms in result["keygen_ms"].items():
            table.add_row(f"keygen per user ({name})", f"{ms:.3f} ms", "")
        table.add_row(
            f"full-domain path eval (m={result['eval_domain']})",
            f"{result['eval_leaves_per_s'] / 1e6:,.1f} M leaves/s",
            f"{result['eval_ratio_to_aes']:.3f}",
        )
        table.add_row(
            "full-domain path eval (m=1682)",
            f"{result['eval_leaves_per_s_ml100k'] / 1e6:,.1f} M leaves/s",
            f"{result['eval_ratio_to_aes_ml100k']:.3f}",
        )
        table.add_row(
            "payload conversion (d=64, k=32)",
            f"{result['convert_blocks_per_s'] / 1e6:,.1f} M blocks/s",
            f"{result['convert_ratio_to_aes']:.3f}",
        )
        mem = result.get("fused_memory")
        if mem:
            table.add_row(
                f"fused eval, {mem['keys']} keys x {mem['m']} items, d={mem['d']}",
                f"{mem['seconds']:.1f} s, peak {mem['peak_rss_mib']:.0f} MiB",
                "",
            )
        Console().print(table)


def _register_server(bench_app: typer.Typer) -> None:
    @bench_app.command("server")
    def server(
        as_json: bool = typer.Option(False, "--json", help="Print the JSON list of configurations."),
        quick: bool = typer.Option(False, "--quick", help="Small workloads (a smoke test)."),
        out: str = typer.Option("results/server", help="Folder for the JSON, Markdown and the plot."),
    ) -> None:
        """Server computation per round: full-domain against cuckoo layout."""
        import os

        from rich.console import Console

        from secemb.bench import server as bench_server

        console = Console(stderr=True)
        with console.status("measuring") as status:
            result = bench_server.run(quick=quick, progress=lambda msg: status.update(msg))
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "server.json"), "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
        bench_server.plot(result["sweep"], os.path.join(out, "server_vs_m.png"))
        if as_json:
            typer.echo(json.dumps(result["records"], indent=2))
            return
        from rich.table import Table

        table = Table(title="secemb bench server")
        for col in ("dataset", "layout", "relay", "m", "m'", "users", "server s/round"):
            table.add_column(col)
        for r in result["records"]:
            table.add_row(
                r["dataset"], r["layout"], str(r["relay"]), str(r["m"]), str(r["m_prime"]),
                str(r["users"]), f"{r['server_s_per_round']:.3f}",
            )
        Console().print(table)
        Console().print(f"plot: {os.path.join(out, 'server_vs_m.png')}")
