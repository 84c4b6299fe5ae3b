"""``python -m secemb.server.openapi > docs/openapi.json``: the servers' OpenAPI description.

The description does not depend on the configuration (a throwaway server 0 in a temporary
directory is built to produce it); ``tests/client/test_net_cli.py`` checks that the committed
file is current.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from secemb.server.app import create_app
from secemb.server.config import ServerConfig
from secemb.server.node import make_node


def spec() -> dict[str, Any]:

    with tempfile.TemporaryDirectory() as d:
        cfg = ServerConfig(party=0, peer_url="http://127.0.0.1:9", state_dir=Path(d), peer_secret=b"p" * 32,
                           admin_secret=b"a" * 32, user_secret=b"u" * 32, num_items=10, num_users=5, m_prime=2)
        return create_app(make_node(cfg, start_threads=False)).openapi()


if __name__ == "__main__":
    print(json.dumps(spec(), indent=2, sort_keys=True))
