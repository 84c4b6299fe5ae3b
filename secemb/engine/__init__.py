"""The round engine: executes a protocol's declared round (:mod:`secemb.protocols.stages`) between
devices and the two server nodes -- in process (:mod:`.local`, an in-memory transport that counts
bytes) or over HTTP (:mod:`secemb.transport.http`, the same node objects behind FastAPI) -- through one
driver (:mod:`.driver`), so simulation and deployment train the same model by construction.

Importing this package imports nothing heavy; the submodules are imported where used.
"""
