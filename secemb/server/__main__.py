"""``python -m secemb.server --config FILE [--party P] [--port N]`` (what ``secemb serve`` runs)."""

from __future__ import annotations

import argparse
import sys

from secemb.errors import InvalidParameters
from secemb.server import load_config, serve
from secemb.server.persist import CorruptState


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m secemb.server")
    ap.add_argument("--config", required=True)
    ap.add_argument("--party", type=int)
    ap.add_argument("--host")
    ap.add_argument("--port", type=int)
    ap.add_argument("--log-level", default="warning")
    ap.add_argument("--insecure-http", action="store_true", help="plain HTTP (loopback only)")
    args = ap.parse_args()
    try:
        cfg = load_config(args.config, party=args.party, host=args.host, port=args.port,
                          insecure_http=True if args.insecure_http else None)
        serve(cfg, log_level=args.log_level)
    except (InvalidParameters, CorruptState) as exc:
        print(f"secemb server: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
