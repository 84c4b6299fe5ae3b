"""What a benchmark ran on: machine and library versions, recorded with every result."""

from __future__ import annotations

import os
import platform


#: the CPU features the compiled kernels choose their code by (docs/deployment.md, "CPUs: which compiled paths run")
KERNEL_FEATURES = ("aes", "vaes", "avx2", "avx512f", "avx512ifma", "avx512vnni", "sha", "amx-tile", "amx-int8")


def machine_info() -> dict[str, object]:
    """CPU, core count, the versions of the libraries that do the work, and the kernels' paths
    (:func:`kernel_paths`)."""
    import cryptography
    import numpy as np
    from cryptography.hazmat.backends.openssl.backend import backend

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cores": os.cpu_count(),
        "numpy": np.__version__,
        "cryptography": cryptography.__version__,
        "openssl": backend.openssl_version_text(),
        "kernels": kernel_paths(),
    }


def kernel_paths() -> dict[str, object]:
    """Which kernels ran: ``{"backend": "numba" | "numpy"}`` and, with the compiled kernels, ``"features"``:
    those of :data:`KERNEL_FEATURES` the CPU numba compiles for has (:func:`secemb.fss.kernels.host_cpu_features`),
    by which they chose their code (e.g. ``avx512vnni``: the bound check's projections as VNNI dot products)."""
    from secemb.fss import kernels

    if kernels.BACKEND != "numba":
        return {"backend": kernels.BACKEND}
    features = kernels.host_cpu_features()
    return {"backend": kernels.BACKEND, "features": [f for f in KERNEL_FEATURES if features.get(f)]}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
