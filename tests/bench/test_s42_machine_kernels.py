"""Every benchmark result names its machine with the compiled kernels' paths (session 42): which backend ran and,
with the compiled kernels, the CPU features they chose their code by -- so a figure of the bound check says
whether its projections ran on AMX tiles, AVX-512 VNNI or the row kernels.  ``secemb bench robust``'s lines carry
it too."""

from __future__ import annotations

import pytest

from secemb.bench import machine
from secemb.fss import kernels


def test_kernel_paths_name_the_backend_and_the_features_by_which_the_kernels_chose(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    assert machine.kernel_paths() == {"backend": "numpy"}  # no features: the reference picks no code by them
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    monkeypatch.setattr(kernels, "host_cpu_features",
                        lambda: {"avx512vnni": True, "aes": True, "avx2": True, "sse4.1": True, "vaes": False})
    assert machine.kernel_paths() == {"backend": "numba", "features": ["aes", "avx2", "avx512vnni"]}


def test_machine_info_holds_the_kernel_paths() -> None:
    info = machine.machine_info()
    assert info["kernels"] == machine.kernel_paths()
    assert {"processor", "cores", "numpy", "openssl"} <= set(info)


@pytest.mark.skipif(not kernels.compiled(), reason="needs the compiled kernels (numba)")
def test_robust_lines_name_the_machine() -> None:
    from secemb.bench.robust import measure

    (line,) = measure(2, 1, layouts=("cuckoo",))
    assert line["machine"]["kernels"]["backend"] == "numba"
    assert ("avx512vnni" in line["machine"]["kernels"]["features"]) == bool(
        kernels.host_cpu_features().get("avx512vnni"))
