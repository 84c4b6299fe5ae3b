"""``secemb bench compare``: SecEmb (two layouts), GREC, SFSL, SecEA, SecFedRec and plaintext
on the same data, one table and one plot."""

import json
from pathlib import Path

import typer

from secemb.cli.bench_output import FORCE_HELP


def register(bench_app: typer.Typer) -> None:
    """Attach ``compare`` to the ``bench`` group."""

    @bench_app.command("compare")
    def compare(
        epochs: int = typer.Option(1, help="Epochs of each device-protocol run (its cost and RMSE)."),
        accuracy_epochs: int = typer.Option(20, help="Epochs of the plaintext accuracy reference (0: skip)."),
        secea_silos: int = typer.Option(3, help="Silos N of the SecEA row."),
        secea_rounds: int = typer.Option(10, help="Rounds of the SecEA accuracy run."),
        secea_items: int = typer.Option(100, help="Most-rated items in SecEA's full-protocol round (0: all)."),
        sfsl_rounds: int = typer.Option(2, help="Rounds of the SFSL row."),
        sfsl_clients: int = typer.Option(10, help="Devices per round of the SFSL row."),
        only: str = typer.Option("", help="Comma-separated rows to run (secemb-paper, secemb-cuckoo, grec, "
                                 "secfedrec, plaintext, secea, sfsl); default all."),
        merge_from: str = typer.Option("", "--from", help="Comma-separated JSON results of earlier runs (--only) "
                                       "to merge into one table and plot; nothing is run."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path = typer.Option(Path("results/compare.json"), help="Write the JSON result here."),
        plot_out: Path = typer.Option(Path("results/compare.png"), "--plot", help="Write the plot here."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Traffic up/down per client and round, client and server seconds, test RMSE and what
        each server learns, for every protocol of the four papers on MF / ML-100K (same split)."""
        from secemb.bench import compare as bench_compare
        from secemb.bench.plots import PlotsUnavailable, require
        from secemb.cli._usage import fail
        from secemb.data import DataFormatError, DatasetNotFoundError
        from secemb.cli.bench_output import check_outputs, print_table, save_json, steps_bar
        from secemb.errors import InvalidParameters

        sources = [Path(p.strip()) for p in merge_from.split(",") if p.strip()]
        check_outputs(force, ("--out", out), ("--plot", plot_out), inputs=sources)
        positive = min(epochs, secea_rounds, secea_silos - 1, sfsl_rounds, sfsl_clients - 1)
        if positive < 1 or min(accuracy_epochs, secea_items) < 0:
            fail("--epochs, --secea-rounds and --sfsl-rounds must be >= 1, --secea-silos and --sfsl-clients >= 2, "
                 "the others >= 0")
        keys = tuple(k.strip() for k in only.split(",") if k.strip())
        unknown = [k for k in keys if k not in bench_compare.KEYS]
        if unknown:
            fail(f"--only: unknown row(s) {unknown}; choose from {', '.join(bench_compare.KEYS)}")
        try:
            require()
        except PlotsUnavailable as exc:
            fail(exc)
        if merge_from:
            try:
                parts = [json.loads(p.read_text()) for p in sources]
                result = bench_compare.merge(parts)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                fail(f"--from: cannot read the results: {exc}")
        else:
            try:
                with steps_bar(quiet=as_json) as progress:
                    result = bench_compare.run(epochs=epochs, accuracy_epochs=accuracy_epochs,
                                               secea_silos=secea_silos, secea_rounds=secea_rounds,
                                               secea_items=secea_items, sfsl_rounds=sfsl_rounds,
                                               sfsl_clients=sfsl_clients,
                                               only=tuple(bench_compare.KEYS[k] for k in keys) or None,
                                               progress=progress)
            except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
                fail(exc)
        bench_compare.plot(result, str(plot_out))
        if save_json(result, out, as_json):
            return
        source = f"merged from {merge_from}" if merge_from else "measured in this run"
        columns = [("protocol", "left"), ("clients", "left"), ("training", "left"), ("accuracy", "right"),
                   ("up KB", "right"), ("down KB", "right"), ("client s", "right"), ("server s", "right"),
                   ("what the server (or a coalition) learns", "left")]
        print_table(f"secemb bench compare: MF on ML-100K, same 80/20 split ({source})", columns,
                    bench_compare.table_rows(result))
        typer.echo("up / down KB: bytes a client sent / received per round; client s / server s: seconds per round "
                   "(after an untimed warm-up)")
        typer.echo(f"wrote {out} and {plot_out}")
