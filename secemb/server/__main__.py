"""``python -m secemb.server [OPTIONS]``: the ``secemb serve`` command (one Typer app; its
options, help and exit codes are those of ``secemb serve --help``).  The local cluster of the
simulation harness starts servers this way."""

from __future__ import annotations

import sys


def main() -> None:
    from secemb.cli import app

    app(["serve", *sys.argv[1:]], prog_name="python -m secemb.server")


if __name__ == "__main__":
    main()
