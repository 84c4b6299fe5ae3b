"""One-server protocols (``--protocol P`` registered with ``servers=1``) in ``secemb train`` and
``secemb demo``: the protocol built from the options the user set (each protocol declares
which it takes: :attr:`~secemb.protocols.exchange.ExchangeProtocol.options`), the refusal
(exit 2, one line) of every other option the user set, and the run's summary table.

An option counts as *set* when it came from the command line, the environment or a ``--config``
file, not from its default (click's parameter source): no default is restated here.
"""

from __future__ import annotations

from typing import Any

import typer

from secemb.cli._usage import fail

__all__ = ["RUN_OPTIONS", "exchange_protocol", "given_options", "protocol_help", "refuse_exchange_options",
           "summary_rows"]

#: the options that are the run (:class:`~secemb.protocols.exchange.ExchangeRun`): every
#: one-server protocol takes them
RUN_OPTIONS = ("dataset", "data_dir", "download", "epochs", "users_per_round", "seed")


def protocol_help(lead: str) -> str:
    """``--protocol``'s help: ``lead`` then the registered protocols, by shape (plug-ins included)."""
    from secemb.protocols import available_protocols

    return (f"{lead} Two servers: {', '.join(available_protocols(2))}. One server (docs/protocol.md): "
            f"{', '.join(available_protocols(1))}.")


def given_options(ctx: typer.Context) -> dict[str, Any]:
    """The command's options the user set (command line, environment or ``--config`` file: click's
    ``default_map``), by parameter name."""
    return {n: v for n, v in ctx.params.items() if _source(ctx, n) != "DEFAULT"}


def _source(ctx: typer.Context, name: str) -> str:
    """Where option ``name``'s value came from (the name of click's ``ParameterSource``: typer
    vendors its own click, so the enum is compared by name)."""
    source = ctx.get_parameter_source(name)
    return "DEFAULT" if source is None else source.name


def _flag(ctx: typer.Context, name: str, value: Any) -> str:
    """How the user wrote option ``name`` (``--dense-adam`` for ``lazy_adam=False``)."""
    for p in ctx.command.params:
        opts, secondary = getattr(p, "opts", None), getattr(p, "secondary_opts", None)
        if p.name == name and opts:
            return secondary[0] if secondary and value is False else opts[0]
    return "--" + name.replace("_", "-")


def exchange_protocol(ctx: typer.Context, protocol: str, command_options: tuple[str, ...]) -> Any:
    """The one-server protocol ``protocol`` of the command line: its run from
    :data:`RUN_OPTIONS`, its declared options those the user set; exit 2 (one line) if the user
    set an option that is neither, nor one of the command's own ``command_options`` (output,
    display), or if the protocol refuses a value."""
    from secemb.errors import InvalidParameters
    from secemb.protocols import exchange_class, get_protocol
    from secemb.protocols.exchange import ExchangeRun

    p = ctx.params
    try:
        cls = exchange_class(protocol)
        given = given_options(ctx)
        for name, value in given.items():
            if name not in RUN_OPTIONS and name not in command_options and name not in cls.options:
                fail(f"--protocol {protocol} does not take {_flag(ctx, name, value)} (one server: it takes "
                     f"{', '.join(_flag(ctx, n, True) for n in cls.options if n in p) or 'no protocol option'}; "
                     "docs/protocol.md)")
        run = ExchangeRun(dataset=p["dataset"], data_dir=p["data_dir"], download=p["download"], epochs=p["epochs"],
                          users_per_round=p["users_per_round"], seed=p["seed"])
        return get_protocol(protocol, run=run, **{n: v for n, v in given.items() if n in cls.options})
    except InvalidParameters as exc:
        fail(exc)


def refuse_exchange_options(ctx: typer.Context, protocol: str, taken: set[str]) -> None:
    """For a two-server ``protocol``: exit 2 if the user set an option that the two-server path
    does not use (not in ``taken``) and one-server protocols take, naming those that do (their
    modules are imported only then)."""
    from secemb.errors import InvalidParameters
    from secemb.protocols import available_protocols, exchange_class

    for name, value in given_options(ctx).items():
        if name in taken:
            continue
        owners = []
        for other in available_protocols(1):
            try:
                if name in exchange_class(other).options:
                    owners.append(other)
            except InvalidParameters:  # its module needs an extra that is not installed
                continue
        if owners:
            fail(f"{_flag(ctx, name, value)} is an option of --protocol {' or '.join(owners)}, not of "
                 f"--protocol {protocol}")


def summary_rows(result: Any) -> list[tuple[str, str]]:
    """The summary table of a one-server run (the rows of ``secemb train``'s table that apply:
    no server-to-server traffic, no verification)."""
    up, down = result.upload_bytes_per_user_round, result.download_bytes_per_user_round
    rows = [("upload / user / round", f"{up:,.0f} B ({up / 1e6:.4f} MB)"),
            ("download / user / round", f"{down:,.0f} B ({down / 1e6:.4f} MB)"),
            ("user compute / round", f"{result.user_ms_per_round:.3f} ms"),
            ("server compute / round (one server)", f"{result.server_s_per_round:.4f} s"),
            ("rounds", str(result.rounds))]
    final = result.epochs[-1].test_metrics if result.epochs else {}
    for name in result.config.get("metrics", []):
        value = final.get(name)
        rows.append((f"final test {name.upper()}", "n/a" if value is None else f"{value:.4f}"))
    rows.append(("wall time", f"{result.wall_s:.1f} s"))
    rows.append(("model sha256", result.model_sha256[:16] + "..."))
    return rows
