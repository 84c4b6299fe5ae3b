"""``secemb bench startup``: the set-up of ``secemb train`` and a fresh process's first kernel
call (issue 37, goal 2)."""

from __future__ import annotations

import json

import typer


def register(bench_app: typer.Typer) -> None:
    """Attach ``startup`` to the ``bench`` group."""

    @bench_app.command("startup")
    def startup(
        dataset: str = typer.Option("ml-100k", help="Dataset of the measured secemb train."),
        data_dir: str = typer.Option(None, "--data-dir", envvar="SECEMB_DATA_DIR", help="Directory of MovieLens "
                                     "files."),
        repeats: int = typer.Option(3, min=1, help="Fresh processes of each kind; the table shows the fastest."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Set-up of `secemb train` up to its first round plus the kernels' warm-up (goal <= 1.5 s
        wall), and the first kernel call of a fresh process; each in fresh processes, this machine."""
        from rich.console import Console

        from secemb.bench import startup as bench_startup
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import print_table
        from secemb.errors import SecembError

        console = Console(stderr=True)
        try:
            with console.status("measuring") as status:
                result = bench_startup.run(dataset, data_dir=data_dir, repeats=repeats,
                                           progress=lambda step: status.update(step))
        except SecembError as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        m = result["machine"]
        print_table(f"secemb bench startup ({result['dataset']}, kernels: {result['kernels']})",
                    [("measure", "left"), ("value", "right"), ("goal", "right")], bench_startup.table_rows(result))
        load = result["loadavg"]
        typer.echo(f"machine: {m['processor']}, {m['cores']} cores; load average {load['before'][0]:.1f} before, "
                   f"{load['after'][0]:.1f} after; fastest of {result['repeats']} fresh processes each"
                   + ("" if result["bytecode_cache"] else "; Python writes no bytecode here (PYTHONDONTWRITEBYTECODE): "
                      "a module without a cached .pyc compiles from source in every child"))
