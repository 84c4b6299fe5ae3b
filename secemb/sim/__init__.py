"""The networked simulation harness: two real server processes on 127.0.0.1 and simulated
devices talking HTTP to them.

* :mod:`secemb.sim.cluster` -- :class:`LocalCluster`, the two server processes (start, kill,
  restart, supervise);
* :mod:`secemb.sim.coordinator` -- :func:`train_networked`, the round engine's driver over
  HTTP (the network twin of :func:`secemb.training.train`);
* :mod:`secemb.sim.demo` -- ``secemb demo --network`` in Python.

Neither the server package nor the device SDK imports this package.
"""
