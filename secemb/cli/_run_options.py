"""The training options ``secemb train`` and ``secemb demo`` share, declared from
:class:`~secemb.options.RunOptions`: each option's help and lower bound are the field's
(its default is ``DEFAULTS.<name>`` in the command's signature, so ``--help`` shows the
model's), and ``--config FILE`` layers a config file under the command line.

``--config`` is eager: its callback reads and validates the file
(:func:`~secemb.options.read_options`, the keys limited to the command's own options)
and puts its values in click's ``default_map``, so click applies the precedence: command line
(and ``SECEMB_DATA_DIR``) > config file > default.  An option the file sets counts as set by the
user (:func:`secemb.cli._exchange.given_options`): a one-server protocol gets it, or refuses it.
A bad file exits 2 with one line naming the file and the key.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import annotated_types
import typer

from secemb.cli._usage import fail
from secemb.errors import InvalidParameters
from secemb.options import DEFAULTS, RunOptions, read_options

__all__ = ["DEFAULTS", "Alpha", "Backend", "ConfigFile", "DataDir", "Dataset", "Dim", "Download", "DpClip", "DpDelta",
           "DpEpsilon", "DpLevel", "EarlyStop", "Epochs", "Expansion", "Fresh", "LazyAdam", "Layout", "Lr", "MPrime",
           "MPrimeUpdate", "Metrics", "MinRowHolders", "Model", "Reg", "Relay", "RingBits", "Seed", "SfslPreset",
           "UsersPerRound", "ValidFraction", "Verify", "Workers", "MODEL_OPTIONS", "TRAINING_OPTIONS", "described",
           "option", "run_options", "with_shared_options"]


def described(name: str) -> str:
    """Field ``name``'s description (its option's help)."""
    return RunOptions.model_fields[name].description or ""


def option(name: str, *param_decls: str, help: str | None = None, **kwargs: Any) -> Any:
    """The ``typer.Option`` of field ``name``: the field's description as help (unless ``help``)
    and its bounds (``ge``, ``le``) as ``min`` and ``max``."""
    info = RunOptions.model_fields[name]
    low: Any = next((m.ge for m in info.metadata if isinstance(m, annotated_types.Ge)), None)
    high: Any = next((m.le for m in info.metadata if isinstance(m, annotated_types.Le)), None)
    return typer.Option(*param_decls, help=described(name) if help is None else help, min=low, max=high, **kwargs)


def _read_config(ctx: typer.Context, path: Path | None) -> Path | None:
    """``--config``'s callback: the file's options become the command's defaults (exit 2 on a bad file)."""
    if path is None:
        return None
    try:
        values = read_options(path, taken=[p.name for p in ctx.command.params if p.name])
    except InvalidParameters as exc:
        fail(exc)
    opts = RunOptions(**values)
    ctx.default_map = {**(ctx.default_map or {}), **{name: opts.cli_value(name) for name in values}}
    return path


def run_options(ctx: typer.Context) -> RunOptions:
    """The command's training options, as parsed (command line > config file > default)."""
    return RunOptions(**{name: value for name, value in ctx.params.items() if name in RunOptions.model_fields})


ConfigFile = Annotated[Path | None, typer.Option(
    "--config", metavar="FILE", is_eager=True, callback=_read_config, dir_okay=False,
    help="TOML (.toml) or JSON file of training options, keys as the options' names (users_per_round = 50); the "
         "command line overrides it (docs/training.md).")]
Dataset = Annotated[str, option("dataset")]
DataDir = Annotated[Path | None, option("data_dir", envvar="SECEMB_DATA_DIR")]
Download = Annotated[bool, option("download")]
Model = Annotated[str | None, option("model")]
SfslPreset = Annotated[str | None, option("sfsl_preset", "--sfsl-preset")]
MinRowHolders = Annotated[int | None, option("min_row_holders", "--min-row-holders")]
Layout = Annotated[str | None, option("layout")]
Relay = Annotated[bool | None, option("relay", "--relay/--no-relay")]
Expansion = Annotated[float, option("expansion")]
Backend = Annotated[str, option("backend")]
Workers = Annotated[int | None, option("workers")]
Bound = Annotated[bool, option("bound")]
Epochs = Annotated[int, option("epochs")]
UsersPerRound = Annotated[int, option("users_per_round")]
MPrime = Annotated[int | None, option("m_prime")]
Alpha = Annotated[float, option("alpha")]
MPrimeUpdate = Annotated[int, option("m_prime_update")]
Seed = Annotated[int, option("seed")]
Verify = Annotated[bool, option("verify")]
Lr = Annotated[float | None, option("lr")]
Reg = Annotated[float | None, option("reg")]
Dim = Annotated[int | None, option("dim")]
RingBits = Annotated[int, option("ring_bits")]
LazyAdam = Annotated[bool, option("lazy_adam", "--lazy-adam/--dense-adam")]
DpEpsilon = Annotated[float, option("dp_epsilon")]
DpDelta = Annotated[float, option("dp_delta")]
DpClip = Annotated[float, option("dp_clip")]
DpLevel = Annotated[str, option("dp_level")]
Metrics = Annotated[str | None, option("metrics")]
ValidFraction = Annotated[float, option("valid_fraction")]
EarlyStop = Annotated[int | None, option("early_stop", metavar="PATIENCE")]


class SharedOptions(tuple):  # noqa: SLOT001 - a marker tuple, no state of its own
    """A group of ``(field name, option type)``: as the default of a placeholder parameter of a command
    decorated with :func:`with_shared_options`, it stands for those options at that place."""


#: the model and round options ``secemb train`` and ``secemb demo`` both declare, in their ``--help`` order
MODEL_OPTIONS = SharedOptions((
    ("sfsl_preset", SfslPreset), ("min_row_holders", MinRowHolders), ("layout", Layout), ("relay", Relay),
    ("expansion", Expansion), ("backend", Backend), ("workers", Workers), ("bound", Bound), ("epochs", Epochs),
    ("users_per_round", UsersPerRound), ("m_prime", MPrime), ("alpha", Alpha)))
#: the optimizer, ring and differential-privacy options both commands declare, in their ``--help`` order
TRAINING_OPTIONS = SharedOptions((
    ("lr", Lr), ("reg", Reg), ("dim", Dim), ("ring_bits", RingBits), ("lazy_adam", LazyAdam),
    ("dp_epsilon", DpEpsilon), ("dp_delta", DpDelta), ("dp_clip", DpClip), ("dp_level", DpLevel)))


class Fresh:
    """In ``Annotated[T, Fresh(make)]``, a parameter of a command decorated with :func:`with_shared_options`:
    its option is ``make()``, called on each read of the signature -- for a help made from a registry that
    may grow after the command is declared (``protocol_help``: plug-in protocols)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


class _SharedOptionsCommand:
    """A command whose signature (what typer builds it from) has its :class:`SharedOptions` placeholders
    replaced by their options and its :class:`Fresh` options made, afresh on each read, so typer's every
    build of the command shows the registry's current state; its other annotations are objects, made once."""

    def __init__(self, command: Callable[..., Any]) -> None:
        functools.update_wrapper(self, command)
        self._command = command

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._command(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        signature = inspect.signature(self._command, eval_str=True)
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():  # all keyword-only: typer passes every option by name
            if isinstance(param.default, SharedOptions):
                params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                             default=getattr(DEFAULTS, name)) for name, kind in param.default]
            elif param.kind is not inspect.Parameter.VAR_KEYWORD:
                fresh = getattr(param.annotation, "__metadata__", ())
                if fresh and isinstance(fresh[0], Fresh):
                    param = param.replace(annotation=Annotated[param.annotation.__origin__, fresh[0].make()])
                params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        return signature.replace(parameters=params)


def with_shared_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with each parameter whose default is a :class:`SharedOptions` group (:data:`MODEL_OPTIONS`,
    :data:`TRAINING_OPTIONS`) replaced, in the signature typer reads, by that group's options (keyword
    parameters, default ``DEFAULTS.<name>``, in the group's order) -- so ``--help`` lists them there --
    and each :class:`Fresh` option made anew on each build of the command.  ``command`` takes the groups'
    options in its ``**options`` and reads them through :func:`run_options`."""
    return _SharedOptionsCommand(command)
