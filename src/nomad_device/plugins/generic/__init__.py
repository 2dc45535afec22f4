"""nomad-device-generic: ``/dev`` nodes, USB devices, PCI cards and CDI devices as Nomad devices.

Installed as the console script ``nomad-device-generic``;
``docs/plugins/generic.md`` covers configuration, job ``device`` blocks for
the exec and docker drivers, health, identity, PCI cards with their presets
(ROCm, Intel GPUs, Gaudi, Neuron, Alveo, Coral, VFIO), devices described by
CDI specs (``nvidia-ctk cdi generate`` ...) and how it compares with
squat/generic-device-plugin and Nomad's USB plugin.

Modules by role: :mod:`.config` (the schema and its validation),
:mod:`.roots` (``/dev`` and ``/sys``, overridable for tests),
:mod:`.sysfs`, :mod:`.pci`, :mod:`.pciids`, :mod:`.patterns` and
:mod:`.discovery` (finding devices), :mod:`.cdi` and :mod:`.yamlsubset`
(CDI spec files, read as the reference library reads them) with
:mod:`.cdidevices` (what the plugin makes of them),
:mod:`.trust` (what may be offered: the safety rules, in one place),
:mod:`.health` (node checks), :mod:`.probes` (probe commands, held to their
job), :mod:`.events` (what wakes a rescan), :mod:`.inventory` (groups),
:mod:`.reservation`, :mod:`.stats`, and :mod:`.plugin`, which ties them
together.
"""

from nomad_device.plugins.generic.config import (
    CdiBlock,
    DeviceBlock,
    GenericConfig,
    PciBlock,
    ProbeBlock,
    UsbBlock,
)
from nomad_device.plugins.generic.plugin import PLUGIN_NAME, GenericDevicePlugin
from nomad_device.plugins.generic.roots import ENV_DEV_ROOT, ENV_PCI_IDS, ENV_SYS_ROOT, Roots

__all__ = [
    "ENV_DEV_ROOT",
    "ENV_PCI_IDS",
    "ENV_SYS_ROOT",
    "PLUGIN_NAME",
    "CdiBlock",
    "DeviceBlock",
    "GenericConfig",
    "GenericDevicePlugin",
    "PciBlock",
    "ProbeBlock",
    "Roots",
    "UsbBlock",
]
