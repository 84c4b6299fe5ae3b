"""The run's options: one layered configuration (command line > config file > defaults).

:class:`RunOptions` is the one statement of the training options ``secemb train`` and
``secemb demo`` take -- each field's type, bounds, default and documentation (the command
line's ``--help`` text).  Every layer reads it:

* the command line: each option's default and help come from the field
  (:mod:`secemb.cli._run_options`); ``--config FILE`` sets options from a file
  (:func:`read_options`), the command line overrides them, and what neither sets is the
  field's default;
* the Python API: ``Experiment.from_options(load_options("run.toml", epochs=2))``
  (:func:`load_options`: keywords > file > defaults) and :class:`~secemb.training.Experiment`'s
  own defaults, which are these;
* ``secemb serve``: :class:`~secemb.server.config.ServerConfig` takes the defaults of the
  options it shares (protocol, expansion, backend, workers, lazy_adam, ring_bits, alpha,
  m_prime) from here, reads its file with :func:`read_table`, and its ``--backend`` and
  ``--workers`` are these fields' (command line > the file's ``[protocol]`` > default);
* the layers below: :class:`~secemb.round.results.TrainConfig` (the round loop's parameters)
  and :class:`~secemb.protocols.exchange.ExchangeRun` (a one-server protocol's run) default
  to these fields.

A config file is TOML (``.toml``, read with :mod:`tomllib`) or JSON (``.json``): one flat table
whose keys are the fields' names (``users_per_round``; the option's spelling
``users-per-round`` is taken too).  An unknown key, or a value of the wrong type or out of
bounds, is refused with one line naming the key and the file.  Values are strict: ``epochs =
"3"``, ``epochs = 2.5`` and ``verify = 1`` are refused, an int is taken where a float is asked
for (``alpha = 2``).  Relative paths (``data_dir``) are relative to the working directory, as on
the command line.

Layer: the bottom (beside :mod:`secemb.errors`), so that every layer that has one of these
options -- protocols/ (:class:`~secemb.protocols.exchange.ExchangeRun`), round/, server/,
training/, cli/ -- reads its default from here instead of restating it; the module imports
pydantic and :mod:`secemb.errors` only, so the command line reads the defaults without loading
numpy.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError,
                      field_validator)

from secemb.errors import InvalidParameters

__all__ = ["DEFAULTS", "DEFAULT_MODEL", "RunOptions", "load_options", "read_options", "read_table"]

#: the model a two-server run trains when none is named (``model`` None; a one-server protocol
#: names its own): :class:`~secemb.training.Experiment`'s and a server's (``[model] name``) default
DEFAULT_MODEL = "mf"


class RunOptions(BaseModel):
    """The training options of a run (validated on creation; immutable).

    ``None`` means "chosen for the run": by the paper's preset (``lr``, ``reg``, ``dim``), by
    Eq. 11 (``m_prime``), by the protocol's capabilities (``layout``, ``relay``) or by the
    protocol (``model``, ``sfsl_preset``, ``min_row_holders``, ``metrics``).  Which option a
    protocol takes is the protocol's to say: a two-server protocol takes all but ``sfsl_preset``
    and ``min_row_holders``; a one-server protocol the run (dataset, data_dir, download, epochs,
    users_per_round, seed) and its own declared options.  Semantic checks (a known dataset,
    ``alpha > 0``, DP options together) stay where the values are used (:class:`~secemb.training.Experiment`,
    :class:`~secemb.round.results.TrainConfig`); this model checks types and bounds.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: StrictStr = Field(
        default="synthetic",
        description="synthetic, ml-100k, ml-1m, ml-10m, ml-25m, yelp, synthetic-<name>, or the path of your own "
                    ".csv, .tsv or RecBole .inter rating file (docs/data.md).")
    data_dir: Path | None = Field(default=None, description="Directory of MovieLens files.")
    download: StrictBool = Field(default=False, description="Fetch missing MovieLens files.")
    model: StrictStr | None = Field(
        default=None,
        description="mf, ncf, fm or deepfm (fm/deepfm use the dataset's features); din with --protocol sfsl. "
                    f"Default: {DEFAULT_MODEL} (din with sfsl).")
    protocol: StrictStr = Field(default="secemb",
                                description="A registered protocol (docs/baselines.md, docs/sfsl.md).")
    sfsl_preset: StrictStr | None = Field(
        default=None,
        description="--protocol sfsl: the privacy preset CPP1..CPP5 of randomized response (Table V). Default: CPP2.")
    min_row_holders: StrictInt | None = Field(
        default=None, ge=1,
        description="--protocol sfsl: the secure sum reveals a row's sum only over at least this many devices, else "
                    "the row is not updated; at most users_per_round // 2 + 1 (docs/sfsl.md). 1: the paper's, with "
                    "finding R6's leak (warns). Default: 2.")
    layout: StrictStr | None = Field(
        default=None,
        description="cuckoo: B = expansion*m' keys over small buckets; full: m' keys over all items (the paper). "
                    "Default: cuckoo where the protocol supports it, else full.")
    relay: StrictBool | None = Field(
        default=None,
        description="Send identical bytes once, download one share. Default: on where the protocol supports it "
                    "(secemb).")
    expansion: StrictFloat = Field(default=1.25, ge=1.0, le=8.0, description="Cuckoo buckets per request row (B/m').")
    backend: StrictStr = Field(
        default="serial",
        description="Server evaluation: serial, thread (all cores, in process), process (all cores), ray or gpu "
                    "(CUDA, secemb[gpu]).")
    workers: StrictInt | None = Field(default=None, ge=1, description="Workers of the thread/process/ray backend.")
    bound: StrictBool = Field(
        default=False,
        description="Bounded payloads (secemb, 32-bit ring): each device clips its upload and proves it small; the "
                    "servers leave out a device whose proof fails or is missing (docs/security.md).")
    epochs: StrictInt = Field(
        default=5, ge=1, description="Passes over the users (5 SecEmb epochs on synthetic: about 10 s, plus about a "
                                     "minute once, the first run after an install, to compile the kernels).")
    users_per_round: StrictInt = Field(default=100, ge=1, description="Users per round.")
    m_prime: StrictInt | None = Field(default=None, ge=1,
                                      description="Rows per user and round; default: Eq. 11 with --alpha.")
    alpha: StrictFloat = Field(default=2.5, description="Eq. 11 multiplier of the mean rating count (> 0).")
    m_prime_update: StrictInt = Field(
        default=0, ge=0,
        description="Recount m' (Eq. 11's secure count) before every N-th epoch and use the new value (Appendix "
                    "L.2); 0: m' fixed once.")
    seed: StrictInt = Field(default=0, ge=0, description="Seed of all training randomness.")
    verify: StrictBool = Field(default=False,
                               description="Check every round against the direct plaintext computation.")
    lr: StrictFloat | None = Field(default=None, description="Adam step size (default: preset).")
    reg: StrictFloat | None = Field(default=None, description="L2 weight (default: preset).")
    dim: StrictInt | None = Field(default=None, ge=1, description="Embedding size (default: preset).")
    ring_bits: StrictInt = Field(default=32, description="Ring Z_{2^k}: 32 or 64.")
    lazy_adam: StrictBool = Field(default=True, description="Server Adam moves only rows with a gradient.")
    dp_epsilon: StrictFloat = Field(
        default=math.inf,
        description="Differential privacy: target epsilon (inf: no DP). Central DP (secemb, plaintext, secfedrec: "
                    "each server noises its share, the devices clip to the bound the servers announce, Poisson "
                    "sampling) or local DP (dp-fedrec).")
    dp_delta: StrictFloat = Field(default=1e-5, description="Differential privacy: target delta.")
    dp_clip: StrictFloat = Field(default=1.0,
                                 description="Differential privacy: L2 bound of a user's round contribution.")
    dp_level: StrictStr = Field(default="user",
                                description="Differential privacy: user (a user's whole contribution).")
    metrics: tuple[StrictStr, ...] | None = Field(
        default=None,
        description="Comma-separated metrics from the registry, e.g. rmse,mae or ndcg@10 (default: the model's: "
                    "rmse; hr@10, ndcg@10 and their sampled forms for sasrec/caser).")
    valid_fraction: StrictFloat = Field(
        default=0.0, ge=0.0,
        description="Share of each user's training ratings held out as validation data (from the training split, "
                    "never the test set; each user keeps one rating to train on), scored after every epoch. 0: "
                    "none.")
    early_stop: StrictInt | None = Field(
        default=None, ge=1,
        description="Keep the best validation epoch's model (public and device-private) and stop after PATIENCE "
                    "epochs without improvement (needs --valid-fraction, or a sequential model's own validation "
                    "items). Default: the last epoch.")

    @field_validator("metrics", mode="before")
    @classmethod
    def _split_metrics(cls, value: Any) -> Any:
        """``"rmse, mae"`` (the command line's form) is ``("rmse", "mae")``."""
        return tuple(n.strip() for n in value.split(",")) if isinstance(value, str) else value

    def cli_value(self, name: str) -> Any:
        """Field ``name`` as the command line's option takes it (``metrics`` comma-separated)."""
        value = getattr(self, name)
        return ",".join(value) if name == "metrics" and value is not None else value


#: every option's default: what each entry point (the command line, ``Experiment``, ``TrainConfig``,
#: ``ExchangeRun``, ``ServerConfig``, the protocols' constructors) defaults to
DEFAULTS = RunOptions()


def _error(exc: ValidationError, where: str) -> InvalidParameters:
    """The first of pydantic's errors as one line: where, the key, what it must be, what it got."""
    err = exc.errors()[0]
    key = str(err["loc"][0]) if err["loc"] else "?"
    msg = err["msg"][:1].lower() + err["msg"][1:]
    return InvalidParameters(f"{where}{key}: {msg}, got {err['input']!r}")


def read_table(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The top-level table of the TOML (``.toml``) or JSON (any other suffix) file ``path``.

    Raises
    ------
    InvalidParameters
        The file cannot be read, is not valid TOML/JSON, or does not hold a table.
    """
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise InvalidParameters(f"cannot read config file {p}: {exc}") from None
    try:
        doc = tomllib.loads(text.decode()) if p.suffix == ".toml" else json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "TOML" if p.suffix == ".toml" else "JSON"
        raise InvalidParameters(f"config file {p} is not valid {kind}: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidParameters(f"config file {p} must hold a table")
    return doc


def read_options(path: str | os.PathLike[str], taken: Iterable[str] | None = None) -> dict[str, Any]:
    """The options config file ``path`` sets, validated (:class:`RunOptions`), by field name.

    ``taken``: the fields the reader takes (a command's options; ``None``: every field); any
    other key is refused.

    Raises
    ------
    InvalidParameters
        As :func:`read_table`; an unknown key or one outside ``taken``, a bad value (one line:
        the file, the key, what it must be and what it got).
    """
    keys = set(RunOptions.model_fields) if taken is None else set(taken) & set(RunOptions.model_fields)
    values: dict[str, Any] = {}
    for key, value in read_table(path).items():
        name = key.replace("-", "_")
        if name not in keys:
            what = "an option this command does not take" if name in RunOptions.model_fields else "unknown"
            raise InvalidParameters(f"config file {path}: key {key!r} is {what} (it takes: {', '.join(sorted(keys))})")
        values[name] = value
    try:
        opts = RunOptions(**values)
    except ValidationError as exc:
        raise _error(exc, f"config file {path}: ") from None
    return {name: getattr(opts, name) for name in values}


def load_options(path: str | os.PathLike[str] | None = None, **overrides: Any) -> RunOptions:
    """The layered options: ``overrides`` (field names) over the file ``path``'s (when given)
    over the defaults.

    Raises
    ------
    InvalidParameters
        As :func:`read_options`; an unknown or bad override.
    """
    values = {} if path is None else read_options(path)
    unknown = sorted(set(overrides) - set(RunOptions.model_fields))
    if unknown:
        raise InvalidParameters(f"unknown option {unknown[0]!r} (known: {', '.join(sorted(RunOptions.model_fields))})")
    try:
        return RunOptions(**(values | overrides))
    except ValidationError as exc:
        raise _error(exc, "") from None
