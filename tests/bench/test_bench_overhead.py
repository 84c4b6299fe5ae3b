"""``secemb bench overhead`` (issue 37, goal 1): the kernel clock counts the DPF kernels' calls
on both kernel backends and leaves them as they were; the per-epoch figures come from runs
that train the same model."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.bench import overhead
from secemb.errors import InvalidParameters
from secemb.fss import _numba_kernels as nk
from secemb.fss import kernels
from secemb.fss.convert import convert
from secemb.fss.prg import FixedKeyAES

_WORDS = np.arange(8, dtype=np.uint64).reshape(4, 2)


def test_the_compiled_kernels_are_counted_and_restored() -> None:
    if not kernels.available():
        pytest.skip("no compiled kernels here")
    before = nk.convert_blocks
    with overhead.kernel_clock() as clock:
        got = convert(_WORDS, 8, 32, "test")
        assert nk.convert_blocks is not before
    assert nk.convert_blocks is before
    assert clock.calls == {"convert_blocks": 1} and clock.total_s >= 0.0
    assert np.array_equal(got, convert(_WORDS, 8, 32, "test"))  # the wrapper changes no result
    assert "cuckoo_assign" not in overhead._entry_points()  # placement, not the DPF


def test_the_reference_counts_the_prg_aes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    encrypt = FixedKeyAES.encrypt_into
    with overhead.kernel_clock() as clock:
        convert(_WORDS, 8, 32, "test")
    assert FixedKeyAES.encrypt_into is encrypt
    assert set(clock.calls) == {"aes convert"}


def test_fewer_than_two_epochs_is_refused() -> None:
    with pytest.raises(InvalidParameters, match="epochs must be >= 2"):
        overhead.run("synthetic-mini", 1, process=False)


def test_one_run_gives_both_paths_the_same_model() -> None:
    result = overhead.run("synthetic-mini", 2, process=False)
    e = result["epoch"]
    assert e["same_model"] is True
    assert e["plaintext"]["epoch_kernel_s"] == [0.0, 0.0]  # plaintext runs no DPF kernel
    assert e["kernel_s"] > 0 and len(e["secure"]["epoch_cpu_s"]) == 2
    assert e["ratio"] == pytest.approx(e["beyond_s"] / e["kernel_s"])
    assert [row[0] for row in overhead.table_rows(result)][4] == "beyond / kernels"


def test_a_failing_child_train_is_an_error_with_its_message() -> None:
    from secemb.errors import SecembError

    with pytest.raises(SecembError, match="exited 2"):
        overhead._process_cpu(["--dataset", "no-such-dataset", "--epochs", "2"])


def test_the_command_refuses_a_bad_dataset_with_one_line() -> None:
    from typer.testing import CliRunner

    from secemb.cli import app

    res = CliRunner().invoke(app, ["bench", "overhead", "--dataset", "no-such-dataset", "--no-process"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "no-such-dataset" in res.output
