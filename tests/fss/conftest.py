"""Fixtures shared by the tests of ``secemb.fss``."""

from __future__ import annotations

import pytest

from secemb.fss import kernels


@pytest.fixture(params=["kernel", "numpy"])
def sha_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The SHA-256 path a test runs on: the SHA-NI kernel (skipped where numba or the CPU's SHA
    extensions are missing) or the hashlib reference (the numpy backend)."""
    if request.param == "kernel" and not kernels.sha_compiled():
        pytest.skip("no SHA-NI kernel here (numba or the CPU's SHA extensions missing)")
    if request.param == "numpy":
        monkeypatch.setattr(kernels, "BACKEND", "numpy")
    return request.param


def _backends() -> list[str]:
    return ["numpy", "numba"] if kernels.available() else ["numpy"]


@pytest.fixture(params=_backends())
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernels' backend a test runs on: the numpy reference, and the compiled (numba) kernels
    where numba is installed."""
    monkeypatch.setattr(kernels, "BACKEND", request.param)
    return str(request.param)
