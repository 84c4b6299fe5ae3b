"""SFSL's ``min_row_holders`` on the command line (session 26, helper G): ``secemb train
--protocol sfsl --min-row-holders`` reaches the rounds (another model, the run's config) and warns
at 1, naming finding R6; out of range, or with a two-server protocol, it exits 2 with one line;
``secemb admin init --protocol sfsl --option min_row_holders=N`` records it for ``serve`` and
``client`` or refuses it; ``secemb bench sfsl --min-row-holders`` runs every part with it and
exits 2, naming the option, where the default aborts Figure 6's rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _server_template import run
from cli_helpers import ENV, SECEMB, assert_usage_error, run_cli

from secemb.protocols.sfsl.parties import R6_WARNING

#: ``secemb train`` of SFSL on taobao-mini, one epoch of 4 devices a round (50 rounds), CPP1 (no
#: perturbation coins: the model depends on the seed and the settings only)
TRAIN = ["train", "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "4", "--epochs", "1",
         "--sfsl-preset", "CPP1", "--quiet"]


def _train(tmp_path: Path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / f"run{len(list(tmp_path.iterdir()))}.json"
    proc = run([*SECEMB, *TRAIN, *extra, "--json-out", str(out)], text=True, env=ENV, timeout=600)  # forked
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stderr


def test_train_hands_min_row_holders_to_the_protocol(monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The protocol ``secemb train`` builds has the option, and so do its rounds' settings (the
    run itself is stopped where it would start: the slow test below trains)."""
    from secemb.errors import InvalidParameters
    from secemb.protocols.sfsl.protocol import SFSLProtocol

    seen: list[tuple[int, int]] = []

    def stop(self: SFSLProtocol, *args: object, **kwargs: object) -> None:
        seen.append((self.min_row_holders, self._sfsl_run(1).settings.min_row_holders))
        raise InvalidParameters("stopped by the test")

    monkeypatch.setattr(SFSLProtocol, "train", stop)
    for extra, want in (([], 2), (["--min-row-holders", "1"], 1), (["--min-row-holders", "3"], 3)):
        caplog.clear()
        assert_usage_error(run_cli(*TRAIN, *extra), "stopped by the test")
        assert seen[-1] == (want, want)
        assert (R6_WARNING in caplog.messages) == (want == 1)


@pytest.mark.slow
def test_train_passes_min_row_holders_to_the_rounds_and_warns_at_1(tmp_path: Path) -> None:
    paper, err1 = _train(tmp_path, "--min-row-holders", "1")
    default, err2 = _train(tmp_path)
    assert paper["config"]["min_row_holders"] == 1 and default["config"]["min_row_holders"] == 2
    assert R6_WARNING in err1 and "finding R6" not in err2
    # rows one of a round's 4 devices holds are updated at 1 only: another model
    assert paper["model_sha256"] != default["model_sha256"]


@pytest.mark.parametrize("args, text", [
    (["--min-row-holders", "12"], "min_row_holders (at most the threshold of a round of 20 devices) must be an "
                                  "int in [1, 11], got 12"),
    (["--protocol", "secemb", "--min-row-holders", "2"], "--min-row-holders is an option of --protocol sfsl"),
])
def test_train_refuses_min_row_holders_with_one_line(args: list[str], text: str) -> None:
    base = ["train", "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "20"]
    if "--protocol" in args:
        base = ["train", "--dataset", "taobao-mini"]
    assert_usage_error(run_cli(*base, *args), text)


def test_train_refuses_min_row_holders_below_1() -> None:
    res = run_cli("train", "--protocol", "sfsl", "--dataset", "taobao-mini", "--min-row-holders", "0")
    assert res.exit_code == 2 and "--min-row-holders" in res.output and "Traceback" not in res.output


def _init(root: Path, value: str):  # noqa: ANN202 - click's Result
    return run_cli("admin", "init", "--out", str(root), "--host0", "127.0.0.1", "--protocol", "sfsl", "--dataset",
                   "taobao-mini", "--users-per-round", "3", "--option", f"min_row_holders={value}")


def test_admin_init_records_min_row_holders_for_serve_and_client_or_refuses_it(tmp_path: Path) -> None:
    res = _init(tmp_path / "one", "1")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "one" / "exchange.json").read_text())
    assert doc["options"]["min_row_holders"] == 1
    res = _init(tmp_path / "default", "2")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "default" / "exchange.json").read_text())["options"]["min_row_holders"] == 2
    assert_usage_error(_init(tmp_path / "three", "3"), "min_row_holders (at most the threshold of a round of 3 "
                                                         "devices) must be an int in [1, 2], got 3")
    assert not (tmp_path / "three" / "exchange.json").exists()


BENCH = ["bench", "sfsl", "--quick", "--parts", "fig6", "--dropouts", "0.2", "--dropout-presets", "CPP2", "--force"]


def test_bench_sfsl_runs_figure_6_with_min_row_holders_1_and_refuses_what_cannot_run(tmp_path: Path) -> None:
    out = tmp_path / "fig6.json"
    proc = run([*SECEMB, *BENCH, "--min-row-holders", "1", "--out", str(out), "--json"], text=True, env=ENV,
               timeout=600)  # forked from the suite's warm template where it can be
    assert proc.returncode == 0, proc.stderr
    assert R6_WARNING in proc.stderr
    doc = json.loads(out.read_text())
    assert doc["min_row_holders"] == 1 and [r["min_row_holders"] for r in doc["fig6"]] == [1]
    assert doc["fig6"][0]["dropped_update"] == 1  # one of the 6 devices dropped after its shares, and it ran
    # --quick: 6 devices a round, threshold 4
    assert_usage_error(run_cli(*BENCH, "--min-row-holders", "5", "--out", str(tmp_path / "x.json")),
                       "--min-row-holders must be at most the threshold 4 of the smallest n measured (6), got 5")


def test_bench_sfsl_names_the_option_when_the_default_aborts_a_dropout_round(tmp_path: Path) -> None:
    """Figure 6's clients drop after ShareKeys; with the default 2 a round aborts where a dropped
    client leaves a row one surviving holder (this quick round does): exit 2, one line, naming
    --min-row-holders 1."""
    res = run_cli(*BENCH, "--out", str(tmp_path / "fig6.json"))
    assert res.exit_code == 2, res.output
    line = res.stderr.strip()  # after the progress bar's last line
    assert len(line.splitlines()) == 1 and line.startswith("error: an SFSL round aborted"), res.stderr
    assert "fewer than min_row_holders 2" in line and "--min-row-holders 1 measures the paper's round" in line
    assert not (tmp_path / "fig6.json").exists()
