"""``secemb bench startup``: the set-up of ``secemb train`` and a fresh process's first kernel
call (issue 37, goal 2)."""

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
        from secemb.bench import startup as bench_startup
        from secemb.cli.bench_output import report_goals

        def note(result: dict) -> str:
            cache = "" if result["bytecode_cache"] else ("; Python writes no bytecode here (PYTHONDONTWRITEBYTECODE): "
                                                         "a module without a cached .pyc compiles from source in "
                                                         "every child")
            return f"; fastest of {result['repeats']} fresh processes each{cache}"

        report_goals("startup", lambda progress: bench_startup.run(dataset, data_dir=data_dir, repeats=repeats,
                                                                   progress=progress),
                     bench_startup.table_rows, as_json, note)
