"""The one-server phase of the round engine: rounds of exchanges for a protocol whose round
plan has one server (:mod:`.exchange`: in process through a counting
:class:`~secemb.transport.inprocess.InProcessTransport`; :mod:`.http_exchange`: the same links
over HTTP).

The two-server round driver, its in-process server nodes and the servers' settings for a run
are the simulation's (:mod:`secemb.sim.driver`, :mod:`secemb.sim.local`,
:mod:`secemb.sim.settings`).

Importing this package imports nothing heavy; the submodules are imported where used.
"""
