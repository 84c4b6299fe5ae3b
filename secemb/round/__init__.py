"""What every party of a round shares, above the protocols and below every party (DESIGN §2:
``round/``): the device SDK, the server node and the simulation import these, never each other.

* :mod:`secemb.round.messages` -- the round's own messages (model, dense vector, count shares);
* :mod:`secemb.round.local` -- a device's local step between retrieval and upload;
* :mod:`secemb.round.update` and :mod:`secemb.round.optimizer` -- the post-aggregation step
  (server-side Adam);
* :mod:`secemb.round.results` -- a run's configuration and results (:class:`TrainConfig`,
  :class:`TrainResult`, the per-round and per-epoch figures);
* :mod:`secemb.round.selection` -- which epoch's model a run keeps (early stopping);
* :mod:`secemb.round.policy` -- the policy constants (the floor on the users of an aggregate).

Importing this package is cheap: it imports nothing; import the module you need.
"""
