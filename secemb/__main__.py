"""``python -m secemb [COMMAND] [OPTIONS]``: the ``secemb`` command line (what the ``secemb``
script runs), for an environment without the script on its PATH.  The local cluster of the
simulation harness starts each server as ``python -m secemb serve``."""

from __future__ import annotations

from secemb.cli import main

if __name__ == "__main__":
    main()
