"""``secemb bench robust``: the cost of verified uploads (issue 34), checked against unchecked
rounds in one run (:mod:`secemb.bench.robust`)."""

import json

import typer

__all__ = ["register"]


def register(bench_app: typer.Typer) -> None:
    """Attach ``robust`` to the ``bench`` group."""

    @bench_app.command("robust")
    def robust(
        users: int = typer.Option(20, min=1, help="Devices per round."),
        repeats: int = typer.Option(6, min=1, help="Rounds of each kind (checked and unchecked, alternating)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object per layout."),
        size: str = typer.Option("ml100k", help="ml100k (m = 1,682, m' = 200) or yelp (the stand-in: m = 93,386, "
                                               "m' = 500)."),
        layouts: str = typer.Option("cuckoo,full", help="Comma-separated: cuckoo (with relay), full (without)."),
        bound: bool = typer.Option(False, "--bound", help="Also rounds with bounded payloads (issue 34 (b)): "
                                                          "each device's range proof and the servers' check."),
        workers: int = typer.Option(0, min=0, help="Servers' evaluation and checks on a thread backend of this many "
                                                   "threads (0: the serial backend)."),
        roles: bool = typer.Option(False, "--roles", help="Also each server role call's median seconds a round, by "
                                                          "kind of round (with --json: each kind's \"roles\")."),
        batch: int = typer.Option(0, min=0, help="Devices' requests and uploads a server takes at once, as over HTTP "
                                                 "(each upload batch its own challenge with --bound); 0: all the "
                                                 "round's at once."),
    ) -> None:
        """Server seconds and bytes per round with the servers' upload verification against the
        same round without it, cuckoo+relay and full layouts (ratios within one run;
        docs/results.md, "Verified uploads")."""
        from secemb.bench.robust import SIZES, measure
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import print_table

        chosen = tuple(x.strip() for x in layouts.split(","))
        if size not in SIZES or not chosen or any(x not in ("cuckoo", "full") for x in chosen):
            fail(f"--size must be one of {', '.join(sorted(SIZES))} and --layouts of cuckoo, full; got {size!r}, "
                 f"{layouts!r}")
        lines = measure(users, repeats, size=size, layouts=chosen, bound=bound, workers=workers or None, roles=roles,
                        batch=batch or None)
        if as_json:
            for line in lines:
                typer.echo(json.dumps(line))
            return
        rows = []
        for r in lines:
            u = r["unchecked"]
            for kind, prefix in (("checked", ""), ("bounded", "bounded_")):
                if kind not in r:
                    continue
                c = r[kind]
                proof = f"; proofs {c['device_proof_s'] / users * 1e3:.2f} ms a device" if kind == "bounded" else ""
                rows.append([f"{r['layout']}{', relay' if r['relay'] else ''} ({kind}{proof})",
                             f"{c['server_s']:.4f} / {u['server_s']:.4f}", f"{r[prefix + 'server_time_ratio']:.2f}",
                             f"{c['device_upload_bytes']:,.0f} / {u['device_upload_bytes']:,.0f}",
                             f"{r[prefix + 'device_upload_ratio']:.3f}",
                             f"{c['server_bytes']:,.0f} / {u['server_bytes']:,.0f}",
                             f"{r[prefix + 'server_bytes_ratio']:.3f}"])
        threads = (f", {workers} threads" if workers else "") + (f", batches of {batch}" if batch else "")
        print_table(f"secemb bench robust ({size}, {users} devices per round{threads}, median of {repeats}; checked / "
                    "unchecked)",
                    [("layout", "left"), ("server s / round", "right"), ("ratio", "right"),
                     ("device upload B", "right"), ("ratio", "right"), ("server<->server B", "right"),
                     ("ratio", "right")], rows)
        for r in lines if roles else []:
            kinds = [k for k in ("unchecked", "checked", "bounded") if k in r]
            names = sorted({name for k in kinds for name in r[k]["roles"]})
            print_table(f"role calls, {r['layout']}{', relay' if r['relay'] else ''} (median ms a round)",
                        [("call", "left")] + [(k, "right") for k in kinds],
                        [[name] + [f"{r[k]['roles'].get(name, 0.0) * 1e3:.3f}" for k in kinds] for name in names])
