"""The simulation: the round driver and the servers it runs against, in process or as real
server processes on 127.0.0.1.

* :mod:`secemb.sim.driver` -- :func:`~secemb.sim.driver.run` (:class:`~secemb.sim.driver.TrainingRun`),
  the one round driver: the operator and every simulated device of a two-server run; its parts
  :mod:`secemb.sim.devices` (the devices of a round attempt, phase by phase), :mod:`secemb.sim.admin`
  (the operator's calls to the servers) and :mod:`secemb.sim.spec` (the run's option groups);
* :mod:`secemb.sim.local` -- :class:`~secemb.sim.local.InProcessServers`, both server nodes in
  memory behind a transport that counts every message (what :func:`secemb.training.train` runs);
* :mod:`secemb.sim.settings` -- what both servers are configured with for a run
  (:func:`~secemb.sim.settings.cluster_settings`) and where the devices' private draws come from;
* :mod:`secemb.sim.cluster` -- :class:`LocalCluster`, the two server processes (start, kill,
  restart, supervise);
* :mod:`secemb.sim.coordinator` -- :func:`train_networked`, the driver over HTTP (the network
  twin of :func:`secemb.training.train`);
* :mod:`secemb.sim.player` -- the one-server round player (:func:`~secemb.sim.player.play`,
  :func:`~secemb.sim.player.train_exchange`): a one-server protocol's rounds over the stage links
  (:mod:`secemb.transport.links`), in process through :mod:`secemb.sim.local`'s;
* :mod:`secemb.sim.exchange`, :mod:`secemb.sim.secea` -- a one-server protocol's server behind
  HTTPS (``secemb demo --network``), and SecEA's silos in process.

Neither the server package nor the device SDK imports this package; ``secemb demo --network``
in Python (an Experiment run by these servers) sits above it, in :mod:`secemb.training.networked`.
"""
