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
