"""What a benchmark ran on: machine and library versions, recorded with every result."""

from __future__ import annotations

import os
import platform


def machine_info() -> dict[str, object]:
    """CPU, core count and the versions of the libraries that do the work."""
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
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
