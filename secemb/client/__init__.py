"""The device side of secemb deployments.

* :mod:`secemb.client.device` -- the device SDK: :class:`DeviceClient` (signed connections to
  both servers), :class:`RoundSession` (one round: keys, retrieval, local training hook,
  upload), :class:`Device` (a device with its private state);
* :mod:`secemb.client.training` -- the local step shared with the in-process loop;
* :mod:`secemb.client.coordinator` -- a networked training run of simulated devices that
  reproduces the in-process run bit for bit (``secemb demo --network``).
"""

from __future__ import annotations

from secemb.client.device import Device, DeviceClient, RoundInfo, RoundSession
from secemb.client.training import local_update

__all__ = ["Device", "DeviceClient", "RoundInfo", "RoundSession", "local_update"]
