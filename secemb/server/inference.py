"""GREC's private inference served by a deployment (``/v1/inference``; docs/inference.md).

The HTTP face of :class:`~secemb.inference.service.InferenceServer` over a node's current
public model: a device sends its noisy representation ``H~_u`` (a ``GRQ1`` request, nothing
else: no item id, no count) and receives the score of every item of the public candidate set
-- the whole catalogue, or the configuration's ``[inference] candidates``, the same for every
device -- in one ``GRS1`` reply.  The node keeps
nothing of a request: it changes no round, model, count or journal state (authentication's
nonce memory and rate limit aside, as for every signed call).

The server is rebuilt when the node commits a new model version (the arrays a commit installs
are new objects, so a snapshot of the references taken under the node's lock stays
consistent); scoring runs outside the lock.
"""

from __future__ import annotations

import threading
from typing import Any

from secemb.errors import InvalidParameters
from secemb.inference.representation import representation_for
from secemb.inference.service import STAGE, InferenceServer, reply_bytes, request_bytes
from secemb.server.errors import NotFound

__all__ = ["NodeInference"]


class NodeInference:
    """The inference service of one server ``node`` (:class:`~secemb.server.node.Node`).

    Attributes
    ----------
    rows, dim: ``R`` and ``d`` of the representation the model's devices send (``None`` when
        the model has no GREC inference: a sequential or CTR model).
    """

    def __init__(self, node: Any) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._cached: tuple[int, str | None, InferenceServer] | None = None
        try:
            rep = representation_for(node.model, node.dense)  # the shapes only: they do not depend on the values
            self.rows: int | None = rep.rows
            self.dim: int | None = rep.dim
        except InvalidParameters:
            self.rows = self.dim = None

    def _supported(self) -> tuple[int, int]:
        if self.rows is None or self.dim is None:
            raise NotFound(f"this deployment's model {self.node.cfg.model!r} has no GREC inference "
                           "(mf, ncf, fm and deepfm have)")
        return self.rows, self.dim

    def request_limit(self) -> int:
        """Body limit of ``POST /v1/inference``: the exact request size of this model's
        ``(R, d)`` (a small limit when the model has none: the answer is 404)."""
        if self.rows is None or self.dim is None:
            return 64
        return request_bytes(self.rows, self.dim)

    def _server(self) -> tuple[int, str | None, InferenceServer]:
        """``(model version, its SHA-256, server)`` of the node's current model (built once per
        version)."""
        self._supported()
        node = self.node
        with node.lock:
            version, sha, table, dense = node.version, node.model_sha(), node.table, node.dense
        with self._lock:
            if self._cached is None or self._cached[0] != version:
                self._cached = (version, sha, InferenceServer(representation_for(node.model, dense), table,
                                                              node.cfg.candidates()))
            return self._cached

    def info(self) -> dict[str, Any]:
        """The public description a device needs before it sends its release: the model spec,
        ``rows``/``dim`` of ``H~``, the candidate set (ascending item ids, the reply's order;
        ``null``: every item ``0..num_items-1``),
        the model version, and the exact byte sizes of both messages."""
        rows, dim = self._supported()
        version, sha, server = self._server()
        assert server.candidates is not None
        n = int(server.candidates.size)
        node = self.node
        candidates = None if node.cfg.inference_candidates is None else server.candidates.tolist()
        return {"stage": STAGE, "model": {"name": node.cfg.model, "hparams": node.cfg.model_hparams},
                "model_version": version, "model_sha256": sha, "rows": rows, "dim": dim,
                "num_items": int(node.cfg.num_items), "candidates": candidates, "num_candidates": n,
                "request_bytes": request_bytes(rows, dim), "reply_bytes": reply_bytes(n)}

    def answer(self, body: bytes) -> tuple[int, bytes]:
        """``(model version, GRS1 reply)`` to a device's GRQ1 request.

        Raises
        ------
        InvalidMessage
            A malformed request (wrong magic, shape, length, a non-finite value): 400.
        NotFound
            No inference for this model (404).
        """
        version, _, server = self._server()
        return version, server.answer(body)
