"""NVIDIA GPUs on the SDK: a drop-in for HashiCorp's ``nomad-device-nvidia``.

Same settings, device identity and attributes as the Go plugin, plus MIG
instances, health that recovers (XID and ECC events, failed queries, pending
page retirement, an optional temperature limit), device nodes for the ``exec``
driver, time-slicing (``share``) and richer stats. NVIDIA's binding
(``pip install 'nomad-device-sdk[nvidia]'``) is imported only when the plugin
looks for GPUs, so the plugin starts, and says what is missing, without it.
Installed as the console script ``nomad-device-nvidia``; see
``docs/plugins/nvidia.md``.
"""

from nomad_device.plugins.nvidia.config import NvidiaConfig
from nomad_device.plugins.nvidia.plugin import NvidiaPlugin

__all__ = ["NvidiaConfig", "NvidiaPlugin"]
