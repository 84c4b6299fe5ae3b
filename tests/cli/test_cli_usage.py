"""Issue 13, items 2, 3, 5 and 11: output paths checked before any work, user text printed as
it is (never read as Rich markup), help that matches behaviour, errors on stderr, --version."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import secemb
from secemb.cli import app


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, list(args), terminal_width=120)


def _is_usage_error(res, text: str) -> None:  # noqa: ANN001
    """Exit 2, one ``error: ...`` line on stderr holding ``text``, nothing on stdout, no traceback."""
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and text in res.stderr, res.stderr
    assert res.stdout == ""
    assert "Traceback" not in res.output


# --- item 2: a bad --json-out path crashed after training -------------------------------------


def test_bad_json_out_path_is_refused_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = _run("train", "--epochs", "1", "-q", "--json-out", str(blocker / "result.json"))
    _is_usage_error(res, f"--json-out {blocker / 'result.json'}: expected a path under a folder")
    assert "epoch" not in res.output  # refused before the first round


def test_json_out_naming_a_folder_is_refused(tmp_path: Path) -> None:
    _is_usage_error(_run("train", "-q", "--json-out", str(tmp_path)), "expected a file name, got a folder")


def test_demo_checks_json_out_before_starting_servers(tmp_path: Path) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("")
    _is_usage_error(_run("demo", "-q", "--json-out", str(blocker / "x.json")), "expected a path under a folder")


@pytest.mark.parametrize("command", ["comm", "compute", "memory", "he", "accuracy"])
def test_bench_out_under_a_file_is_refused_before_measuring(tmp_path: Path, command: str) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("")
    _is_usage_error(_run("bench", command, "--out", str(blocker / "o"), "-q"), f"--out {blocker / 'o'}")


def test_bench_server_out_naming_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("")
    _is_usage_error(_run("bench", "server", "--quick", "--out", str(blocker)), "expected a folder, got a file")


# --- item 3: Rich read `[rounds]` as markup and dropped it ------------------------------------


def test_serve_config_error_keeps_the_section_name(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    cfg = tmp_path / "server.toml"
    cfg.write_text("[rounds]\ndeadline = 3\n")
    res = _run("serve", "--party", "0", "--config", str(cfg))
    _is_usage_error(res, "unknown key 'deadline' in [rounds]")


def test_dataset_path_with_brackets_is_printed_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "[red]x"
    _is_usage_error(_run("train", "-q", "--dataset", str(folder / "r.csv")), str(folder / "r.csv"))


# --- item 5: help and behaviour disagreed ------------------------------------------------------


def test_alpha_help_says_positive_and_zero_is_a_usage_error() -> None:
    assert "(> 0)" in _run("train", "--help").stdout
    _is_usage_error(_run("train", "-q", "--epochs", "1", "--alpha", "0"), "alpha must be a finite number > 0, got 0.0")


def test_unknown_synthetic_dataset_is_named_whole() -> None:
    res = _run("train", "-q", "--dataset", "synthetic-foo")
    _is_usage_error(res, "'synthetic-foo'")
    assert "'foo'" not in res.stderr


@pytest.mark.parametrize("command", [("bench", "comm"), ("bench", "fss"), ("train",)])
def test_help_shows_no_value_after_flags(command: tuple[str, ...]) -> None:
    text = _run(*command, "--help").stdout
    assert "<bool>" not in text
    assert "-q, --quiet" in text or "--json" in text


def test_flags_take_no_value() -> None:
    res = _run("bench", "fss", "--json", "true")
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_train_errors_go_to_stderr() -> None:
    res = _run("train", "-q", "--model", "nope")
    _is_usage_error(res, "no preset for model 'nope'")
    # a name that is no model says so and lists the models, instead of asking for dim, lr and reg
    _is_usage_error(res, "no such model; available: ['caser', 'deepfm', 'din'")


# --- item 11 -----------------------------------------------------------------------------------


def test_version_flag_prints_the_package_version() -> None:
    res = _run("--version")
    assert res.exit_code == 0 and res.stdout == f"secemb {secemb.__version__}\n"


def test_license_and_citation_are_in_the_repository() -> None:
    root = Path(__file__).resolve().parents[2]
    assert "Apache License" in (root / "LICENSE").read_text() and "Version 2.0" in (root / "LICENSE").read_text()
    citation = (root / "CITATION.cff").read_text()
    assert citation.startswith("cff-version: 1.2.0") and "SecEmb" in citation


def test_the_progress_bar_says_the_first_round_may_compile_the_kernels() -> None:
    # session 39, helper U: a fresh install's first `secemb train` sat at 0/N rounds for about a
    # minute (numba compiling the kernels) with nothing to say why; the first round's end replaces it
    from io import StringIO

    from rich.console import Console

    from secemb.cli._report import training_display

    progress, on_start, on_round, _ = training_display(Console(file=StringIO()), quiet=False)
    with progress:
        on_start({"protocol": "secemb", "layout": "cuckoo", "relay": True, "dataset": "synthetic", "model": "mf",
                  "dim": 4, "lr": 0.1, "reg": 0.0, "active_users": 2, "num_items": 3, "m_prime": 1,
                  "m_prime_source": "fixed", "users_per_round": 2, "total_rounds": 2})
        assert "compiles the kernels" in progress.tasks[0].fields["status"]
        on_round(type("R", (), {"epoch": 1, "train_loss": 0.5})())
        assert progress.tasks[0].fields["status"] == "epoch 1 loss 0.5000"


def test_serve_without_a_config_says_which_file_to_give() -> None:
    # session 39, helper U: `secemb serve` alone listed eight missing keys and nothing to do
    res = _run("serve")
    _is_usage_error(res, "config is missing party, peer_url")
    _is_usage_error(res, "give --config FILE, the serverP.json that 'secemb admin init'")


def test_dp_fedrec_without_an_epsilon_warns_that_it_adds_no_noise() -> None:
    # session 39, helper U: `--protocol dp-fedrec` alone trained plaintext's model, with no word that
    # its devices added no noise; the warning comes before any work (here the missing file stops it)
    res = _run("train", "-q", "--protocol", "dp-fedrec", "--dataset", "/nonexistent/ratings.csv")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.stderr.startswith("warning: --protocol dp-fedrec without --dp-epsilon: the devices add no noise")
    assert "error: rating file /nonexistent/ratings.csv not found" in res.stderr, res.stderr
    res = _run("train", "-q", "--protocol", "dp-fedrec", "--dp-epsilon", "1", "--dataset", "/nonexistent/ratings.csv")
    assert res.exit_code == 2 and "warning" not in res.stderr, res.stderr
    # and secemb demo alike (session 39, lead; helper U's finding: only train warned)
    res = _run("demo", "-q", "--protocol", "dp-fedrec", "--dataset", "/nonexistent/ratings.csv")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.stderr.startswith("warning: --protocol dp-fedrec without --dp-epsilon: the devices add no noise")
