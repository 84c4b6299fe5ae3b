"""A pytest plugin (listed in ``tests/conftest.py``'s ``pytest_plugins``): ``typer.testing.CliRunner.invoke``
builds an app's click command once per state of what the build reads, not on every call.

typer builds the click command afresh on each ``invoke`` (the whole ``secemb`` app: ~0.03 s of CPU, and
~0.1 s while the command modules' annotations were strings; the suite invokes it some 200 times).  A build
reads the app's tree -- its callback, commands and groups, the objects typer registered, whose annotations
are objects made when they were declared -- and, through the options made anew on each build
(:class:`secemb.cli._run_options.Fresh`: ``--protocol``'s help lists the registered protocols), the
protocol registry.  The cache key holds both, so a command added to an app or a protocol registered (a
plug-in's, by a test) after a build gets a new build, and the registry back in an earlier state gets that
state's build again.  A new input of a build (another :class:`~secemb.cli._run_options.Fresh` option that
reads something else) must join :func:`state`.
"""

from typing import Any

import typer
import typer.main
import typer.testing

#: state (:func:`state`) -> the click command built in it
_BUILT: dict[tuple[Any, ...], Any] = {}


def _tree(app: typer.Typer) -> tuple[Any, ...]:
    """What typer builds ``app`` from, as the objects it registered: the app, its callback, its commands
    and its groups (each with its own tree).  Held by the key, so no object's id is reused while cached."""
    return (app, app.registered_callback, *app.registered_commands,
            *((group, _tree(group.typer_instance)) for group in app.registered_groups if group.typer_instance))


def state(app: typer.Typer) -> tuple[Any, ...]:
    """Everything a build of ``app`` reads that can change in a test process: its tree and the protocol
    registry (name -> registration)."""
    from secemb.protocols.names import PROTOCOLS

    return _tree(app), tuple(PROTOCOLS.items())


def cached_command(app: typer.Typer) -> Any:
    """``typer.main.get_command(app)``, built once per :func:`state`."""
    key = state(app)
    command = _BUILT.get(key)
    if command is None:
        command = _BUILT[key] = typer.main.get_command(app)
    return command


def pytest_configure(config: Any) -> None:
    """``CliRunner.invoke`` (``typer.testing``'s ``_get_command``) takes the built command from the cache."""
    typer.testing._get_command = cached_command  # type: ignore[attr-defined]


def pytest_unconfigure(config: Any) -> None:
    typer.testing._get_command = typer.main.get_command  # type: ignore[attr-defined]
