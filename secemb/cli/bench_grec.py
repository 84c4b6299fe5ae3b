"""``secemb bench grec``: GREC's private inference, Table 3 (non-private / naive LDP /
post-processing LDP RMSE), the paper's cells beside ours; ``--table9``: GREC's lossless training
against FedMF w/ Top-K (Table 9); ``--table15``: the server's minutes per round of GREC's
training protocol (Table 15)."""

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from secemb.cli.bench_output import FORCE_HELP, print_fitted

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console


#: ``--out`` by mode: Table 3's bench, ``--rank-saved`` (Table 14) and ``--figure4`` write different
#: documents, so no mode's default overwrites another's results
DEFAULT_OUT = {"table3": Path("results/grec/table3.json"), "rank_saved": Path("results/grec/table14.json"),
               "figure4": Path("results/grec/figure4.json"), "table15": Path("results/grec/table15.json"),
               "table9": Path("results/grec/table9.json")}


def register(bench_app: typer.Typer) -> None:
    """Attach ``grec`` to the ``bench`` group."""

    @bench_app.command("grec")
    def grec(
        models: str = typer.Option("mf,ncf,fm,deepfm", help="Comma-separated models (mf, ncf, fm, deepfm)."),
        seeds: str = typer.Option("0", help="Comma-separated seeds (split, initialization)."),
        dataset: str = typer.Option("ml-100k", help="Dataset (real ML-100K, or a synthetic stand-in)."),
        epsilons: str = typer.Option("1", help="Comma-separated LDP epsilons of the one release per device (Table "
                                     "12: 0.1,1,10); the recommender is trained once, a denoiser per epsilon."),
        dim: int = typer.Option(0, help="The recommender's d (0: the preset's; Table 11); d^ follows Table 10."),
        delta: float = typer.Option(1e-4, help="LDP delta."),
        bound: float = typer.Option(1.0, help="Clipping norm B of the representation (Frobenius)."),
        rec_epochs: int = typer.Option(0, help="Recommender epochs (0: the per-model defaults, REC_EPOCHS)."),
        den_epochs: int = typer.Option(10, help="Denoiser epochs (the paper: 50)."),
        valid_fraction: float = typer.Option(0.1, help="Share of each user's training ratings held out as validation "
                                             "data for both models (never the test set; 0: none)."),
        early_stop: int = typer.Option(10, metavar="PATIENCE", help="Keep each model's best validation epoch and "
                                       "stop after PATIENCE epochs without improvement (0: train every epoch and "
                                       "keep the last; PATIENCE > 0 needs --valid-fraction > 0)."),
        secure: bool = typer.Option(False, "--secure", help="Train both models with SecEmb itself instead of its "
                                    "bit-identical plaintext twin (slow: full layout, ~5 s a round of 100 "
                                    "devices here against ~0.2 s)."),
        network: bool = typer.Option(False, "--network", help="Train each denoiser through two server processes "
                                     "on 127.0.0.1 (TLS; the devices run here): the in-process run's model."),
        figure4: bool = typer.Option(False, "--figure4", help="Only Figure 4: one device's time and held memory to "
                                     "predict 150 items, full local model against perturb + denoise (no training)."),
        repeats: int = typer.Option(30, help="--figure4: timed calls per measure (the median is reported)."),
        table9: bool = typer.Option(False, "--table9", help="Only Table 9: MF trained by GREC (lossless) and by FedMF "
                                    "w/ Top-K at reduction ratio 16 (of the user's update, and of the full table), "
                                    "--rec-epochs epochs (0: 20) per --seeds, test RMSE and the measured reduction "
                                    "ratios of the upload."),
        table15: str = typer.Option("", metavar="USERS", help="Only Table 15: server minutes of one training round "
                                    "of GREC's protocol (MF, d = 64) for each comma-separated number of active users "
                                    "(the paper: 100,200,300,400,500) on --dataset's shape (default ml-1m)."),
        save_dir: Path = typer.Option(None, help="Also save each recommender and denoiser here (for 'secemb infer')."),
        ranking: bool = typer.Option(True, "--ranking/--no-ranking", help="Also Table 14's HR@10/NDCG@10 (101 "
                                     "predictions per positive test rating: slow on the larger stand-ins)."),
        rank_saved: Path = typer.Option(None, help="Only Table 14, from a run's saved models: a folder "
                                        "'--save-dir' wrote (DIR/<model>-seed<k>, with recommender/ and "
                                        "denoiser.npz); no training."),
        as_json: bool = typer.Option(False, "--json", help="Print the JSON result."),
        out: Path = typer.Option(None, help="Write the JSON result here (default: results/grec/table3.json; "
                                 "--rank-saved: results/grec/table14.json; --figure4: results/grec/figure4.json)."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Table 3: test RMSE of the non-private recommender, naive LDP (Eq. 7) and GREC's
        post-processing LDP (Eq. 16) at (epsilon, delta), per model."""
        from rich.markup import escape
        from rich.table import Table

        from secemb.bench import grec as bench_grec
        from secemb.cli._console import console as make_console
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, save_json, steps_bar
        from secemb.data import DataFormatError, DatasetNotFoundError
        from secemb.errors import InvalidParameters

        if out is None:
            out = DEFAULT_OUT["rank_saved" if rank_saved is not None else "figure4" if figure4
                              else "table15" if table15 else "table9" if table9 else "table3"]
        check_outputs(force, ("--out", out))
        names = tuple(m.strip() for m in models.split(",") if m.strip())
        try:
            seed_list = tuple(int(s) for s in seeds.split(",") if s.strip())
            eps_list = tuple(float(e) for e in epsilons.split(",") if e.strip())
        except ValueError:
            fail(f"--seeds must be comma-separated integers and --epsilons numbers, got {seeds!r}, {epsilons!r}")
        if not names or not seed_list or min(seed_list) < 0 or rec_epochs < 0 or den_epochs < 1 or not eps_list \
                or dim < 0:
            fail("need >= 1 model, seed (>= 0) and epsilon, --rec-epochs >= 0, --den-epochs >= 1 and --dim >= 0")
        if not 0.0 <= valid_fraction < 1.0 or early_stop < 0 or (early_stop and not valid_fraction):
            fail(f"need 0 <= --valid-fraction < 1 and --early-stop >= 0, and early stopping needs validation data: got "
                 f"--valid-fraction {valid_fraction}, --early-stop {early_stop} (--early-stop 0 turns it off)")
        console = make_console(stderr=True)
        if rank_saved is not None:
            from secemb.errors import InvalidMessage

            try:
                with console.status("ranking"):
                    cells = bench_grec.rank_saved(rank_saved)
            except (InvalidParameters, InvalidMessage, DatasetNotFoundError, DataFormatError) as exc:
                fail(exc)
            if save_json({"ranking": cells}, out, as_json):
                return
            rank = Table(title=f"secemb bench grec --rank-saved (Table 14; {cells['model']}, {cells['dataset']}, "
                               f"{int(cells['positives'])} positives)")
            for col in ("metric", *bench_grec.PREDICTIONS):
                rank.add_column(col, justify="left" if col == "metric" else "right")
            for metric in ("hr@10", "ndcg@10"):
                rank.add_row(metric, *(f"{cells[f'{metric}_{p}']:.4f}" for p in bench_grec.PREDICTIONS))
            print_fitted(rank)
            typer.echo(f"wrote {out}")
            return
        if table15:
            _table15(table15, "ml-1m" if dataset == "ml-100k" else dataset, out, as_json, console)
            return
        if table9:
            _table9(seed_list, rec_epochs or 20, dataset, out, as_json, console)
            return
        if figure4:
            if repeats < 1:
                fail(f"--repeats must be >= 1, got {repeats}")
            try:
                with console.status("measuring"):
                    cost = bench_grec.device_cost(names, dataset=dataset, repeats=repeats)
            except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
                fail(exc)
            if save_json({"figure4": cost}, out, as_json):
                return
            fig = Table(title=f"secemb bench grec --figure4 ({dataset}, {bench_grec.FIGURE4_ITEMS} items, one device)")
            for col in ("model", "full ms", "GREC ms", "time ratio", "full MB", "GREC MB", "memory ratio"):
                fig.add_column(col, justify="left" if col == "model" else "right")
            for r in cost:
                fig.add_row(r["model"], f"{r['full_ms']:.3f}", f"{r['grec_ms']:.3f}", f"{r['time_ratio']:.2f}",
                            f"{r['full_bytes'] / 1e6:.3f}", f"{r['grec_bytes'] / 1e6:.3f}", f"{r['memory_ratio']:.2f}")
            print_fitted(fig)
            typer.echo(f"wrote {out}")
            return
        try:
            with steps_bar(quiet=as_json, console=console) as progress:
                def log(msg: str) -> None:
                    console.log(escape(msg))

                rows = bench_grec.run(models=names, seeds=seed_list, dataset=dataset, epsilons=eps_list, delta=delta,
                                      bound=bound, dim=dim or None, rec_epochs=rec_epochs or None,
                                      den_epochs=den_epochs, valid_fraction=valid_fraction,
                                      early_stop=early_stop or None,
                                      secure=secure, save_dir=save_dir, with_ranking=ranking, network=network,
                                      log=log, progress=progress)
        except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
            fail(exc)
        result = {"runs": rows, "table": bench_grec.table(rows)}
        if save_json(result, out, as_json):
            return
        table = Table(title=f"secemb bench grec (Tables 3, 11, 12: RMSE; {dataset}, delta={delta}, B={bound})")
        for col in ("model", "d", "epsilon", "seeds", "non-private", "naive LDP", "post-proc. LDP", "diff %",
                    "paper (np/naive/post)"):
            table.add_column(col, justify="left" if col == "model" else "right")
        for c in result["table"]:
            p = c.get("paper")
            table.add_row(c["model"], str(c["dim"]), str(c["epsilon"]), str(c["seeds"]), f"{c['non_private']:.4f}",
                          f"{c['naive_ldp']:.4f}",
                          f"{c['post_processing_ldp']:.4f}", f"{c['diff_pct']:.1f}",
                          "" if p is None else f"{p['non_private']} / {p['naive_ldp']} / {p['post_processing_ldp']}")
        print_fitted(table)
        typer.echo(f"wrote {out}")


def _table15(users: str, dataset: str, out: Path, as_json: bool, console: "Console") -> None:
    """``--table15 USERS``: measure, write ``out`` and print the table (exit 2 on bad input)."""
    from rich.markup import escape
    from rich.table import Table

    from secemb.bench import grec as bench_grec
    from secemb.cli._usage import fail
    from secemb.cli.bench_output import save_json
    from secemb.errors import InvalidParameters

    try:
        counts = tuple(int(x) for x in users.split(",") if x.strip())
    except ValueError:
        fail(f"--table15 must be comma-separated integers, got {users!r}")
    try:
        rows = bench_grec.server_minutes(
            counts, dataset=dataset,
            on_done=lambda r: console.log(escape(f"{r['users']} users: server {r['server_s']:.1f} s")))
    except InvalidParameters as exc:
        fail(exc)
    if save_json({"table15": rows}, out, as_json):
        return
    table = Table(title=f"secemb bench grec --table15 (Table 15: server minutes per round, GREC's training protocol, "
                        f"MF d=64, {dataset}, m'={rows[0]['m_prime']})")
    for col in ("users", "server s", "server min", "paper min", "upload MB per user"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["users"]), f"{r['server_s']:.2f}", f"{r['server_min']:.3f}",
                      "" if r["paper_min"] is None else f"{r['paper_min']:.2f}",
                      f"{r['upload_bytes_per_user'] / 1e6:.3f}")
    print_fitted(table)
    typer.echo(f"wrote {out}")


def _table9(seeds: tuple[int, ...], epochs: int, dataset: str, out: Path, as_json: bool, console: "Console") -> None:
    """``--table9``: train, write ``out`` and print the table (exit 2 on bad input)."""
    from rich.markup import escape
    from rich.table import Table

    from secemb.bench import grec as bench_grec
    from secemb.cli._usage import fail
    from secemb.cli.bench_output import save_json, steps_bar
    from secemb.data import DataFormatError, DatasetNotFoundError
    from secemb.errors import InvalidParameters

    try:
        with steps_bar(quiet=as_json, console=console) as progress:
            result = bench_grec.table9(seeds, epochs=epochs, dataset=dataset,
                                       log=lambda msg: console.log(escape(msg)), progress=progress)
    except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
        fail(exc)
    if save_json(result, out, as_json):
        return
    table = Table(title=f"secemb bench grec --table9 (Table 9: MF on {dataset}, {epochs} epochs; the paper: ML-10M "
                        f"and Yelp, MF without bias)")
    for col in ("scheme", "seeds", "RMSE", "upload MB per user-round", "R.R. (SecFedRec)", "R.R. (sparse)",
                "paper ML-10M", "paper Yelp"):
        table.add_column(col, justify="left" if col == "scheme" else "right")
    for r in result["table"]:
        paper = [f"{m:.3f} +- {sd:.3f}, R.R. {rr:.2f}" for m, sd, rr in (r["paper"]["ml-10m"], r["paper"]["yelp"])]
        table.add_row(r["scheme"], str(r["seeds"]), f"{r['rmse']:.4f} +- {r['rmse_std']:.4f}",
                      f"{r['upload_bytes_per_user_round'] / 1e6:.3f}", f"{r['reduction_ratio']:.2f}",
                      f"{r['ratio_to_sparse']:.2f}", *paper)
    print_fitted(table)
    typer.echo(f"wrote {out}")
