"""Without a CUDA device the GPU benchmarks and ``--backend gpu`` refuse cleanly: exit 2 and
one line naming what is missing, no traceback (the kernels themselves are tested under
Triton's interpreter in ``tests/fss/test_fss_gpu.py``)."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from secemb.cli import app
from secemb.errors import InvalidParameters
from secemb.protocols.backends import make_backend

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: nothing to refuse")


def test_bench_fss_device_cuda_refuses_without_a_gpu() -> None:
    res = CliRunner().invoke(app, ["bench", "fss", "--device", "cuda", "--quick"])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and ("CUDA" in res.output or "Triton" in res.output)
    assert "Traceback" not in res.output


def test_bench_fss_rejects_an_unknown_device() -> None:
    res = CliRunner().invoke(app, ["bench", "fss", "--device", "tpu", "--quick"])
    assert res.exit_code == 2 and "--device must be cpu or cuda" in res.output


def test_bench_server_backend_gpu_refuses_without_a_gpu(tmp_path) -> None:
    res = CliRunner().invoke(app, ["bench", "server", "--backend", "gpu", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and ("CUDA" in res.output or "Triton" in res.output)
    assert not (tmp_path / "server.json").exists()


def test_gpu_backend_refuses_without_a_gpu_or_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InvalidParameters, match="CUDA|Triton"):
        make_backend("gpu")


def test_gpu_backend_without_triton_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    with pytest.raises(InvalidParameters, match=r"pip install 'secemb\[gpu\]'"):
        make_backend("gpu")


def test_importing_secemb_does_not_import_triton() -> None:
    """The CLI, the protocols and the GPU package import without Triton (it loads only when a
    GPU evaluation runs)."""
    import subprocess
    import sys

    code = ("import sys, secemb.cli, secemb.protocols.secemb, secemb.fss.gpu, secemb.bench.gpu; "
            "print('triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
