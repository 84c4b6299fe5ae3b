"""The device side of secemb deployments.

* :mod:`secemb.client.device` -- the device SDK: :class:`DeviceClient` (signed connections to
  both servers), :class:`RoundSession` (one round: keys, retrieval, local training hook,
  upload), :class:`Device` (a device with its private state);
* :mod:`secemb.client.stages` -- a device's part in a one-server round under ``secemb serve``
  (:func:`~secemb.client.stages.take_part`, over :class:`~secemb.transport.http.HttpStageLink`);

The networked simulation harness (coordinator, demo, local cluster) is :mod:`secemb.sim`;
this package is the device SDK only and imports neither the server nor the simulation.
"""

from __future__ import annotations

from secemb.client.device import Device, DeviceClient, RoundInfo, RoundSession

__all__ = ["Device", "DeviceClient", "RoundInfo", "RoundSession"]
