"""``secemb bench popularity``: ratings per item against the item's rank (Figure 2(a)), with a plot."""

from pathlib import Path

import typer

from secemb.cli.bench_output import FORCE_HELP


def register(bench_app: typer.Typer) -> None:
    """Attach ``popularity`` to the ``bench`` group."""

    @bench_app.command("popularity")
    def popularity(
        dataset: str = typer.Option("ml-10m", help="Dataset (the paper's figure: ml-10m, whose ratings.dat must "
                                    "be in --data-dir; synthetic-ml-10m: a stand-in of its shape)."),
        data_dir: Path = typer.Option(None, envvar="SECEMB_DATA_DIR", help="Directory of MovieLens files."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path = typer.Option(Path("results/popularity.json"), help="Write the JSON result here."),
        plot: Path = typer.Option(Path("results/popularity.png"), help="Write the plot (PNG) here."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Ratings per item, most rated first: the share of all ratings the top items hold, and the
        long-tail plot of Figure 2(a)."""
        from secemb.bench import plots
        from secemb.bench import popularity as bench_pop
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, save_json
        from secemb.data import DataFormatError, DatasetNotFoundError
        from secemb.errors import InvalidParameters

        check_outputs(force, ("--out", out), ("--plot", plot))
        try:
            plots.require()
            result = bench_pop.run(dataset, data_dir)
        except (InvalidParameters, DatasetNotFoundError, DataFormatError, plots.PlotsUnavailable) as exc:
            fail(exc)
        bench_pop.plot(result, plot)
        if save_json(result, out, as_json):
            return
        kind = " (synthetic stand-in)" if result["stand_in"] else ""
        typer.echo(f"{result['dataset']}{kind}: {result['items']:,} items, {result['ratings']:,} ratings; most rated "
                   f"item {result['max']:,}, median {result['median']:g}, {result['items_below_10']:,} items below 10")
        for p, share in result["head_share"].items():
            typer.echo(f"  top {100 * float(p):g} % of items hold {100 * share:.1f} % of the ratings")
        typer.echo(f"  half of the ratings: the top {100 * result['items_for_half']:.1f} % of items")
        typer.echo(f"wrote {out} and {plot}")
