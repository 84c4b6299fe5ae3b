"""SecEmb (Algorithm 3 of the paper): private embedding retrieval and secure sparse
aggregation with row-wise encoding and path sharing; dense parameters as additive shares.

Per round and user, with ``S`` request slots (``m'`` in the full layout, ``B`` buckets in the
cuckoo layout), row width ``w`` and dense size ``P``:

* ``retrieval_request``: one path key per slot (:func:`~secemb.fss.gen_path`) and its
  retrieval output correction word for a secret uniformly random odd payload ``beta`` (0 for
  an empty cuckoo bucket); server ``b`` gets the ``DPFKeys`` of party ``b``.
* ``handle_retrieval``: the server walks every tree once
  (:mod:`secemb.fss.fused`), answers with its shares of the ``S`` rows of the round's table
  with each row's tag appended (:func:`row_tags`, ``T`` more words), folds the
  payload-independent part of the aggregation share into its running aggregate and keeps
  the control bits.  The user unmasks each row by ``beta^{-1}`` and checks its tag (and that
  empty buckets answer zero); a failure raises :class:`~secemb.errors.RetrievalTampered`.
* ``upload``: one aggregation correction word per slot (:func:`~secemb.fss.convert_gen` on the
  same path, another conversion tag) and an additive share of the dense gradient.
* ``handle_upload``: the server adds the control-bit part for those correction words.
* ``aggregate_share`` / ``combine``: server 1 sends its aggregate and the sorted ids of the
  users it includes to server 0, which checks that both sets agree and reconstructs.

With ``relay=True`` the user sends every byte both servers would receive identically only
once (see ``docs/security.md``): server 0 gets the full keys and forwards their shared part
(everything but its roots) to server 1, which gets only its roots, two secret seeds, a MAC key
and the SHA-256 digest of that shared part from the user.  Server 1 returns its retrieval
shares to server 0 masked by a stream of the first seed; server 0 adds its own and returns one
array, from which the user removes the mask.  The aggregation correction words go to server 0
only, with an HMAC tag under the MAC key, and are forwarded; server 1's dense share is the
expansion of the second seed.  Server 1 evaluates a forwarded key part only if it matches the
digest and absorbs forwarded words only if their tag verifies; otherwise
:class:`~secemb.errors.RelayTampered` (``docs/security.md``, "A deviating server").

Verified uploads (``verify=True``, the default; issue 34): the servers share a sketch key and
derive each round's secret from it; per device a 16-byte sketch seed ``c_u`` is fixed once both
servers hold its request (:mod:`~secemb.protocols.secemb.checks`) and reaches the device only in its
retrieval reply (with relay from server 0; without relay as two halves, one in each reply).  Each
server folds the keys' sketch values from the leaves its walk visits anyway
(:class:`~secemb.fss.sketch.SketchCheck`); the device proves with its upload that every key's sketch
is a point function's (:mod:`~secemb.fss.sketchproof`: server 0 gets the proof share ``pi0``, server
1 expands its own from the 16-byte ``sigma`` of the request and gets the binding ``tau`` of ``c_u``
to ``sigma``).  Before the round closes the servers compare one digest per user
(:meth:`SecEmbServer.upload_digests`) and decide the proofs (:meth:`SecEmbServer.verify_answer`,
:meth:`SecEmbServer.verify_rejected`): a user whose keys are not point functions or differ between
the servers is left out like a dropout (``docs/security.md``, "A sound sketch with the challenge
drawn at retrieval").

Bounded payloads (``bound=True``, off by default; issue 34 (b)): after its upload a device
proves in zero knowledge that 40 random projections of its payloads and dense gradient are
small (:meth:`SecEmbUser.bound_proof`), and the servers check the proofs before the round
closes (:meth:`SecEmbServer.bound_request`, ``bound_answer``, ``bound_rejected``): a device
that fails or sends none is left out like a dropout (:mod:`~secemb.protocols.secemb.bounds`).

A server never sees an index, a row count or a gradient: every message has a size fixed by
the public round parameters.  A user that retrieved but never uploads is left out of the
aggregate (its folded part is recomputed and removed) -- dropouts of Appendix L.2.

The package, by concern: :mod:`~secemb.protocols.secemb.user` (the device's role),
:mod:`~secemb.protocols.secemb.server` (the server's role and its evaluation scheduling; the
worker tasks are :mod:`secemb.fss.tasks`), :mod:`~secemb.protocols.secemb.relay` (the relay
server's steps, seeded arrays, MAC and direct messages), :mod:`~secemb.protocols.secemb.checks` (row tags,
the sketch check's secrets and the verified-upload digest), :mod:`~secemb.protocols.secemb.bounds` (bounded payloads),
:mod:`~secemb.protocols.secemb.sizes` (message sizes) and :mod:`~secemb.protocols.secemb.protocol`
(the protocol object).
"""

from __future__ import annotations

from secemb.protocols.secemb.checks import row_tags
from secemb.protocols.secemb.protocol import SecEmbProtocol
from secemb.protocols.secemb.relay import RELAY_TAG, SecEmbRelayServer, relay_prg, relay_prgs
from secemb.protocols.secemb.server import SecEmbServer
from secemb.protocols.secemb.sizes import key_params, request_bytes, tag_words
from secemb.protocols.secemb.user import SecEmbUser

__all__ = ["RELAY_TAG", "SecEmbProtocol", "SecEmbRelayServer", "SecEmbServer", "SecEmbUser", "key_params",
           "relay_prg", "relay_prgs", "request_bytes", "row_tags", "tag_words"]
