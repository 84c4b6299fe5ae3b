"""``python -m secemb.server --config FILE [--party P] [--port N]`` (what ``secemb serve`` runs)."""

from __future__ import annotations

import argparse

from secemb.server import load_config, serve


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m secemb.server")
    ap.add_argument("--config", required=True)
    ap.add_argument("--party", type=int)
    ap.add_argument("--host")
    ap.add_argument("--port", type=int)
    ap.add_argument("--log-level", default="warning")
    args = ap.parse_args()
    cfg = load_config(args.config, party=args.party, host=args.host, port=args.port)
    serve(cfg, log_level=args.log_level)


if __name__ == "__main__":
    main()
