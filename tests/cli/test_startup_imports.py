"""Start-up cost (issue 37): what ``import secemb.cli`` and a ``secemb train`` run load.

Each check runs in a fresh interpreter (``sys.modules`` of this test process is shared with
every other test) and lists which of the modules a command has no use for were imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: optional extras of other commands: the server, plots, Ray
NOT_FOR_TRAIN = ("matplotlib", "httpx", "fastapi", "ray")
#: heavy modules a default training run has no use for (torch alone: ~2 s of CPU to import);
#: ``scipy.linalg`` is what numba's first kernel call used to import
HEAVY = ("torch", "pandas", "sklearn", "scipy.linalg", "scipy.stats", "scipy.sparse", "scipy.special",
         "scipy.optimize", "dp_accounting", "pooch", "sympy", "mpmath")

_LOADED = f"""
import json, sys
def loaded():
    return sorted(m for m in {list(NOT_FOR_TRAIN + HEAVY)!r} if m in sys.modules)
"""


def _run(body: str) -> dict[str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", _LOADED + body], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_cli_loads_no_optional_extra() -> None:
    """``import secemb.cli`` (every ``secemb`` command pays it, ``--help`` included) loads none
    of the extras, nor numpy (0.1 s; the commands that compute import it when they run)."""
    got = _run("import secemb.cli\nprint(json.dumps({'loaded': loaded(), 'numpy': 'numpy' in sys.modules}))")
    assert got == {"loaded": [], "numpy": False}


@pytest.mark.parametrize("protocol", ["secemb", "plaintext"])
def test_train_in_process_loads_no_optional_extra(protocol: str, tmp_path) -> None:  # noqa: ANN001
    """A whole ``secemb train`` run in process (compiled kernels included where numba is
    installed) loads none of the extras nor of the :data:`HEAVY` modules, ``scipy.linalg``
    included, which numba's first kernel call used to import (0.13-0.16 s)."""
    out = tmp_path / "r.json"
    got = _run(
        "sys.argv = ['secemb', 'train', '--dataset', 'synthetic-mini', '--protocol', "
        f"{protocol!r}, '--epochs', '1', '--json-out', {str(out)!r}]\n"
        "from secemb.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "import secemb.fss.kernels as k\n"
        "print(json.dumps({'loaded': loaded(), 'numba': 'secemb.fss._numba_kernels' in sys.modules, "
        "'compiled': k.compiled()}))"
    )
    assert out.exists()
    assert got["loaded"] == []
    if protocol == "secemb" and got["compiled"]:  # the check above covered numba's first calls
        assert got["numba"]


def test_kernels_first_use_leaves_scipy_importable() -> None:
    """Loading numba's registries without the BLAS probe (``secemb.fss._aesni``) imports no
    ``scipy.linalg`` and leaves it importable afterwards, for numba's ``np.dot`` too."""
    from secemb.fss import kernels

    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    got = _run(
        "import secemb.fss._aesni\n"
        "before = loaded()\n"
        "import numpy as np, scipy.linalg\n"
        "from numba import njit\n"
        "dot = njit(lambda a, b: np.dot(a, b))\n"
        "print(json.dumps({'loaded': before, 'dot': float(dot(np.arange(3.0), np.arange(3.0)))}))"
    )
    assert got == {"loaded": [], "dot": 5.0}


def test_a_first_kernel_that_is_no_aes_kernel_loads_no_scipy() -> None:
    """A process whose first kernel is SHA-256's (a server authenticating its first request:
    :mod:`secemb.fss._shani` imports no AES module) loads numba's registries without
    ``scipy.linalg`` too (session 37: the kernels' first load goes through
    :func:`secemb.fss._kernel_cache.load_numba_registries`)."""
    from secemb.fss import kernels

    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    got = _run(
        "import numpy as np\n"
        "from secemb.fss._shani import sha256_many\n"
        "digest = sha256_many(b'', np.zeros((1, 32), np.uint8))\n"
        "print(json.dumps({'loaded': loaded(), 'aes': 'secemb.fss._aesni' in sys.modules, 'n': len(digest)}))"
    )
    assert got == {"loaded": [], "aes": False, "n": 1}


def test_the_cli_exits_without_collecting_what_it_holds() -> None:
    """``secemb`` freezes the garbage collector's objects at exit (the final collections over
    numba's registries cost 0.25-0.3 s of CPU a process); an exit handler registered before
    ``main`` runs after it and sees them frozen."""
    got = _run(
        "import atexit, gc\n"
        "atexit.register(lambda: print(json.dumps({'frozen': gc.get_freeze_count() > 0})))\n"
        "sys.argv = ['secemb', '--version']\n"
        "from secemb.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
    )
    assert got == {"frozen": True}
