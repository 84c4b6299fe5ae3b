"""``secemb bench ...``: benchmarks measured on this machine."""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``bench`` command group to ``app``."""
    bench_app = typer.Typer(help="Benchmarks measured on this machine.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")

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
        Console().print(table)
