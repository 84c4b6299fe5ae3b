"""One layered configuration (issue 36 item 5): ``secemb train/demo --config FILE`` and
:mod:`secemb.options` -- command line > config file > defaults, a bad file exits 2 with
one line naming the file and the key, the defaults ``--help`` shows are the model's, and the
example file of docs/training.md parses."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import typer

from secemb.cli import app
from secemb.errors import InvalidParameters
from secemb.options import RunOptions, load_options, read_options
from cli_helpers import assert_usage_error, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _params(command: str) -> list:  # noqa: ANN401 - click's parameters
    return typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]


def _write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _doc_example() -> str:
    """The TOML block of docs/training.md's "Configuration" section."""
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    section = text.split("## Configuration\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```toml\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_the_doc_example_parses(tmp_path: Path) -> None:
    path = _write(tmp_path, _doc_example())
    assert read_options(path, taken=[p.name for p in _params("train")]) == {
        "dataset": "synthetic-mini", "protocol": "plaintext", "epochs": 3, "users_per_round": 50, "alpha": 2.5,
        "lazy_adam": True, "metrics": ("rmse", "mae"), "dp_epsilon": math.inf}
    assert run_cli("train", "--config", str(path), "--help").exit_code == 0


def test_command_line_over_file_over_defaults(tmp_path: Path) -> None:
    """The run's JSON document: epochs from the command line, users_per_round and seed from
    the file, alpha and lazy_adam the defaults; the model is the one of the same options
    all given on the command line."""
    path = _write(tmp_path, 'dataset = "synthetic-mini"\nprotocol = "plaintext"\nepochs = 3\n'
                            "users-per-round = 50\nseed = 2\n")
    res = run_cli("train", "-q", "--config", str(path), "--epochs", "1", "--json-out", str(tmp_path / "a.json"))
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "a.json").read_text())["config"]
    assert (config["dataset"], config["protocol"], config["epochs"], config["users_per_round"], config["seed"],
            config["alpha"], config["lazy_adam"]) == ("synthetic-mini", "plaintext", 1, 50, 2, 2.5, True)
    res = run_cli("train", "-q", "--dataset", "synthetic-mini", "--protocol", "plaintext", "--epochs", "1",
                  "--users-per-round", "50", "--seed", "2", "--json-out", str(tmp_path / "b.json"))
    assert res.exit_code == 0, res.output
    assert (json.loads((tmp_path / "a.json").read_text())["model_sha256"]
            == json.loads((tmp_path / "b.json").read_text())["model_sha256"])


def test_load_options_keywords_over_file_over_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"epochs": 3, "users_per_round": 50, "metrics": "rmse, mae"}', "run.json")
    opts = load_options(path, epochs=1)
    assert (opts.epochs, opts.users_per_round, opts.metrics, opts.seed, opts.protocol) == (
        1, 50, ("rmse", "mae"), 0, "secemb")
    assert load_options().epochs == 5
    with pytest.raises(InvalidParameters, match="unknown option 'epoch'"):
        load_options(epoch=1)
    with pytest.raises(InvalidParameters, match="epochs"):
        load_options(epochs=0)


@pytest.mark.parametrize("command", ["train", "demo"])
def test_an_unknown_key_exits_2_naming_it_and_the_file(tmp_path: Path, command: str) -> None:
    path = _write(tmp_path, "epoch = 3\n")
    res = run_cli(command, "-q", "--config", str(path))
    assert_usage_error(res, f"config file {path}: key 'epoch' is unknown")


def test_a_key_the_command_does_not_take_exits_2(tmp_path: Path) -> None:
    path = _write(tmp_path, 'metrics = ["rmse"]\n')
    assert_usage_error(run_cli("demo", "-q", "--config", str(path)),
                       f"config file {path}: key 'metrics' is an option this command does not take")


@pytest.mark.parametrize(("line", "key"), [
    ("epochs = 0", "epochs"), ('epochs = "3"', "epochs"), ("epochs = 2.5", "epochs"), ("relay = 1", "relay"),
    ("dataset = 3", "dataset"), ("expansion = 0.5", "expansion"), ("workers = true", "workers"),
    ("metrics = [1]", "metrics"),
])
def test_a_bad_value_exits_2_naming_the_key_and_the_file(tmp_path: Path, line: str, key: str) -> None:
    path = _write(tmp_path, line + "\n")
    assert_usage_error(run_cli("train", "-q", "--config", str(path)), f"config file {path}: {key}: ")


@pytest.mark.parametrize(("text", "message"), [("epochs = \n", "is not valid TOML"), ("[x]\ny = 1\n", "key 'x'")])
def test_a_broken_file_exits_2(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    assert_usage_error(run_cli("train", "-q", "--config", str(path)), message)
    assert_usage_error(run_cli("train", "-q", "--config", str(tmp_path / "missing.toml")), "cannot read config file")


def test_a_file_option_counts_as_set_for_a_one_server_protocol(tmp_path: Path) -> None:
    """A one-server protocol gets the options the file sets (an unknown preset reaches SFSL) and
    refuses those it does not take, as on the command line."""
    path = _write(tmp_path, 'protocol = "sfsl"\nlayout = "full"\n')
    assert_usage_error(run_cli("train", "-q", "--config", str(path)), "--protocol sfsl does not take --layout")
    path = _write(tmp_path, 'sfsl_preset = "CPP9"\ndataset = "taobao-mini"\n')
    assert_usage_error(run_cli("train", "-q", "--protocol", "sfsl", "--config", str(path)), "'CPP9'")
    assert_usage_error(run_cli("train", "-q", "--config", str(path)),
                       "--sfsl-preset is an option of --protocol sfsl, not of --protocol secemb")


@pytest.mark.parametrize("command", ["train", "demo"])
def test_the_command_line_defaults_are_the_models(command: str) -> None:
    defaults = RunOptions()
    shared = [p for p in _params(command) if p.name in RunOptions.model_fields]
    assert len(shared) >= 26
    for p in shared:
        assert p.default == defaults.cli_value(p.name), p.name
    epochs = next(p for p in shared if p.name == "epochs")
    assert (epochs.default, epochs.help) == (5, RunOptions.model_fields["epochs"].description)


#: a run's options changed in the one place (RunOptions) by :func:`test_every_entry_point_reads_the_one_place`
_CHANGED = {"epochs": 7, "users_per_round": 37, "seed": 3, "alpha": 3.5, "backend": "thread", "expansion": 1.5}

_ENTRY_POINTS = """
import json, sys
import secemb.options as o
for name, value in json.loads(sys.argv[1]).items():
    o.RunOptions.model_fields[name].default = value
o.RunOptions.model_rebuild(force=True)
o.DEFAULTS, o.DEFAULT_MODEL = o.RunOptions(), "ncf"
import typer
from secemb.cli import app
from secemb.protocols import available_protocols, get_protocol
from secemb.protocols.exchange import ExchangeRun
from secemb.round.results import TrainConfig
from secemb.server.config import ServerConfig
from secemb.training import Experiment
commands = typer.main.get_command(app).commands
def defaults(obj, names):
    return {n: getattr(obj, n) for n in names if hasattr(obj, n)}
names = list(json.loads(sys.argv[1]))
print(json.dumps({
    "RunOptions": defaults(o.DEFAULTS, names),
    "train": {p.name: p.default for p in commands["train"].params if p.name in names},
    "demo": {p.name: p.default for p in commands["demo"].params if p.name in names},
    "Experiment": defaults(Experiment(), names),
    "TrainConfig": defaults(TrainConfig(), names),
    "ExchangeRun": defaults(ExchangeRun("synthetic"), names),
    "ServerConfig": {n: ServerConfig.model_fields[n].default for n in names if n in ServerConfig.model_fields},
    "serve --help": next(p.help for p in commands["serve"].params if p.name == "backend"),
    "model": [Experiment().model, ServerConfig.model_fields["model"].default],
    "protocols": {name: get_protocol(name).expansion for name in available_protocols(2)},
}))
"""


def test_every_entry_point_reads_the_one_place() -> None:
    """Change the defaults in RunOptions alone (a fresh process): train, demo, serve,
    Experiment, TrainConfig, ExchangeRun, ServerConfig and the protocols' constructors all
    default to the changed values, so none of them restates a default of its own."""
    out = subprocess.run([sys.executable, "-c", _ENTRY_POINTS, json.dumps(_CHANGED)], capture_output=True, text=True,
                         timeout=120, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["RunOptions"] == _CHANGED  # the change took: otherwise the test below proves nothing
    for entry in ("train", "demo", "Experiment"):
        assert got[entry] == _CHANGED, entry
    assert got["TrainConfig"] == {k: v for k, v in _CHANGED.items() if k not in ("backend", "expansion")}
    assert got["ExchangeRun"] == {"epochs": 7, "users_per_round": 37, "seed": 3}
    assert got["ServerConfig"] == {"alpha": 3.5, "backend": "thread", "expansion": 1.5}
    assert len(got["protocols"]) >= 13 and set(got["protocols"].values()) == {1.5}  # each protocol's constructor
    assert got["serve --help"].endswith("default: thread.")
    assert got["model"] == ["ncf", "ncf"]  # DEFAULT_MODEL, the model None stands for


def test_every_entry_point_has_the_same_defaults() -> None:
    """As shipped: the command line's default is the Python API's (epochs 5 both, issue 36:
    Experiment used to train 1 epoch where ``secemb train`` trains 5)."""
    from secemb.protocols.exchange import ExchangeRun
    from secemb.round.results import TrainConfig
    from secemb.server.config import ServerConfig
    from secemb.training import Experiment

    defaults = RunOptions()
    for f in fields(Experiment):
        if f.name in RunOptions.model_fields:
            assert f.default == {"model": "mf"}.get(f.name, getattr(defaults, f.name)), f.name
    assert Experiment() == Experiment.from_options(defaults)
    assert (Experiment().epochs, TrainConfig().epochs, ExchangeRun("synthetic").epochs) == (5, 5, 5)
    assert (TrainConfig().users_per_round, ExchangeRun("synthetic").users_per_round) == (100, 100)
    for name in ("protocol", "expansion", "backend", "workers", "lazy_adam", "ring_bits", "m_prime", "alpha"):
        assert ServerConfig.model_fields[name].default == getattr(defaults, name), name
    assert Experiment().model == ServerConfig.model_fields["model"].default == "mf"


def _server_file(tmp_path: Path, protocol: str) -> Path:
    """A sectioned server file (docs/deployment.md) with ``protocol`` as its ``[protocol]`` table."""
    path = tmp_path / "server0.toml"
    path.write_text(f"""[server]
party = 0
port = 8711
peer_url = "http://127.0.0.1:8712"
state_dir = "{tmp_path / 'state'}"
insecure_http = true

[secrets]
peer = "{'11' * 32}"
admin = "{'22' * 32}"
users = "{'33' * 32}"

[protocol]
{protocol}

[model]
num_items = 50
num_users = 10
hparams = {{ dim = 4 }}
""", encoding="utf-8")
    return path


@pytest.mark.parametrize(("protocol", "args", "expected"), [
    ('name = "secemb"\nbackend = "thread"\nworkers = 2', ["--backend", "process", "--port", "8799"],
     ("process", 2, 8799)),                                           # the command line beats the file
    ('name = "secemb"\nbackend = "thread"\nworkers = 2', [], ("thread", 2, 8711)),  # the file beats the default
    ('name = "secemb"', [], ("serial", None, 8711)),                  # the default: RunOptions'
])
def test_serve_command_line_over_file_over_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: str,
                                                     args: list[str], expected: tuple) -> None:
    pytest.importorskip("fastapi")
    import secemb.server

    served = []
    monkeypatch.setattr(secemb.server, "serve", lambda cfg, log_level: served.append(cfg))
    res = run_cli("serve", "--config", str(_server_file(tmp_path, protocol)), *args)
    assert res.exit_code == 0, res.output
    [cfg] = served
    assert (cfg.backend, cfg.workers, cfg.port) == expected


def test_serve_refuses_a_bad_backend_and_backend_for_one_server(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    assert_usage_error(run_cli("serve", "--config", str(_server_file(tmp_path, 'name = "secemb"')), "--backend",
                               "abacus"), "backend must be")
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "exchange.json").write_text("{}")
    assert_usage_error(run_cli("serve", "--config", str(tmp_path / "one" / "exchange.json"), "--backend", "thread"),
                       "a one-server deployment has no --party, --peer-url, --state-dir, --backend or --workers")


def test_experiment_from_options() -> None:
    from secemb.training import Experiment

    exp = Experiment.from_options(load_options(protocol="plaintext", metrics="rmse,mae", sfsl_preset="CPP1"),
                                  test_fraction=0.3)
    assert (exp.epochs, exp.model, exp.metrics, exp.test_fraction, exp.protocol) == (
        5, "mf", ("rmse", "mae"), 0.3, "plaintext")
    assert Experiment.from_options(load_options(model="ncf")).model == "ncf"
