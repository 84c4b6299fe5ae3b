"""Session 21 (helper K): a SecEA deployment whose silo 0 runs as deployed (``secemb client``, its
state file beside its credentials) against set-ups and rounds served over HTTP on 127.0.0.1 by
:class:`~session21_deviating_server.DeviatingNode` (honest, or with a union of the server's
choosing); silos 1 and 2 are played in process.  Used by ``test_session21_secea_union_oracle.py``
and ``test_session21_secea_setup.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.stages import device_state_file
from secemb.protocols.secea.protocol import SecEAProtocol, SecEASilo
from secemb.protocols.secea.staged import SecEANode
from secemb.secagg import messages
from secemb.server.exchange_deploy import ExchangeCredentials

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import init_one_server  # type: ignore[import-not-found]  # noqa: E402
from session21_deviating_server import DeviatingNode, Tamper, honest  # noqa: E402

KEY_BITS = 1024
#: the stages of a set-up (SECEA_SETUP_STAGES), as the node's ``posted`` lists them
SETUP_STAGES = ["secea-keys", "psu-advertise", "psu-shares", "psu-masked", "psu-consistency", "psu-unmask"]
#: the public entities the deployment averages (secea_items=6 of the synthetic dataset, 1682
#: items; every silo holds all six, so each silo's entities are these)
CHOSEN = [651, 654, 763, 794, 1184, 1610]


class Deployment:
    """A one-server SecEA deployment at ``root`` (3 silos, T = 1, 1,024-bit keys, 6 entities):
    :meth:`set_up` / :meth:`round` serve one round to silo 0's ``secemb client`` (:meth:`client`)."""

    def __init__(self, root: Path) -> None:
        init_one_server(root, "--protocol", "secea", "--dataset", "synthetic", "--users-per-round", "3",
                        "--option", f"secea_key_bits={KEY_BITS}", "--option", f"secea_items={len(CHOSEN)}")
        self.creds = root / "devices" / "device-0.json"
        protocol = ExchangeCredentials.load(self.creds).protocol(None)
        assert isinstance(protocol, SecEAProtocol)
        self.protocol = protocol
        self.node: SecEANode | None = None
        self.others: dict[int, SecEASilo] = {}
        self.served: list[DeviatingNode] = []

    def set_up(self, round_id: int, tamper: Tamper = honest) -> DeviatingNode:
        """A fresh server (as after the server's own restart) opening set-up ``round_id``, silos 1
        and 2 fresh; ``tamper``: its deviation."""
        node = self.protocol.make_server().node
        assert isinstance(node, SecEANode)
        self.node, self.others = node, {u: self.silo(u) for u in (1, 2)}
        return self._serve(node.open_round(round_id, [0, 1, 2]), tamper)

    def silo(self, user: int) -> SecEASilo:
        """Silo ``user`` in process, signing with the identity of its credentials (as ``secemb client`` sets it)."""
        silo, identity = self.protocol.make_device(user), self.credentials(user).identity
        assert identity is not None
        silo.identity = identity
        return silo

    def credentials(self, user: int) -> ExchangeCredentials:
        """Device ``user``'s credentials (``secemb admin add-devices``'s)."""
        return ExchangeCredentials.load(self.creds.parent / f"device-{user}.json")

    def round(self, round_id: int) -> DeviatingNode:
        """Aggregation round ``round_id`` on the server of the last set-up (honest)."""
        assert self.node is not None
        return self._serve(self.node.open_round(round_id, [0, 1, 2]), honest)

    def _serve(self, doc: dict[str, Any], tamper: Tamper) -> DeviatingNode:
        assert self.node is not None
        served = DeviatingNode(self.node, doc, {u: d.party(doc) for u, d in self.others.items()}, tamper=tamper)
        self.served.append(served)
        creds = json.loads(self.creds.read_text())
        creds |= {"url": served.url, "ca": str((self.creds.parent / creds["ca"]).resolve())}
        self.creds.write_text(json.dumps(creds))
        return served

    def client(self, *args: str) -> tuple[int, dict[str, Any]]:
        """``secemb client --user 0`` of silo 0 (a new process's state: only its state file carries
        over) for one round: its exit code and its one JSON line (asserted: one line, no traceback)."""
        res = CliRunner().invoke(app, ["client", "--user", "0", "--credentials", str(self.creds), "--wait", "10",
                                       *args])
        assert res.exception is None or isinstance(res.exception, SystemExit), res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.output, res.output
        return res.exit_code, json.loads(lines[0])

    @property
    def state_path(self) -> Path:
        return self.creds.with_suffix(".state")

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Silo 0's state file, read as ``secemb client`` reads it."""
        creds = ExchangeCredentials.load(self.creds)
        return device_state_file(creds.path, 0, creds.doc, creds.key, creds.ca.read_bytes()).load()

    def close(self) -> None:
        for served in self.served:
            served.close()


def replacing_union(ids: list[int] | np.ndarray, round_id: int) -> Tamper:
    """A server's deviation: set-up ``round_id``'s union replaced by ``ids`` (a union message:
    ``count`` u32 then the ids, docs/secagg.md)."""
    body = messages.frame("union", round_id, messages.SERVER, messages.rows_bytes(np.asarray(ids)))
    return lambda stage, answer: body if stage == "psu-unmask" else answer


def union_less(entity: int, round_id: int) -> Tamper:
    """A server's deviation: set-up ``round_id``'s union (every silo holds :data:`CHOSEN`) without ``entity``."""
    return replacing_union([e for e in CHOSEN if e != entity], round_id)
