"""``secemb bench ...`` (placeholder until the benchmarks land)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``bench`` command group to ``app``."""
    bench_app = typer.Typer(help="Benchmarks measured on this machine.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")

    @bench_app.command("fss")
    def fss() -> None:
        """DPF throughput against raw AES."""
        raise typer.Exit(2)
