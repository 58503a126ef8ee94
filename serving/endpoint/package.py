"""An endpoint tierbench does not run: its registry entry (serving/registry.py). It starts no process and needs
nothing of a node."""

from __future__ import annotations

from serving.endpoint.settings import EndpointSettings
from serving.package import BackendPackage

PACKAGE = BackendPackage(name="endpoint", settings=EndpointSettings, process_names=())
