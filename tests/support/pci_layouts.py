"""PCI cards as their drivers lay them out in sysfs, built into a :class:`FakeTree`.

One builder per preset of docs/plugins/generic.md. The function directories
follow this VM's real ``/sys/devices/pci0000:00/0000:00:02.0`` (see
fake_tree.py); what sits below each function, and where each driver puts
its nodes, comes from the sources named in each builder (none of these
cards is on the test machine, so none of these layouts was checked against
the hardware itself). Device numbers are what the kernel gives where they
are fixed (DRM 226, i2c 89, misc 10) and plausible dynamic ones elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from support.fake_tree import FakeTree, Link, PciHandle

DRM_MAJOR = 226
FB_MAJOR = 29
I2C_MAJOR = 89
GIB = 1 << 30

#: A pci.ids excerpt in the file's own format: vendors, devices, subsystems.
PCI_IDS = """\
# A few entries, as pciutils' pci.ids writes them
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t740f  Aldebaran/MI200 [Instinct MI210]
\t\t1002 0c34  Instinct MI210
10de  NVIDIA Corporation
\t2230  GA102GL [RTX A6000]
\t1aef  GA102 High Definition Audio Controller
1af4  Red Hat, Inc.
\t1042  Virtio 1.0 block device
1da3  Habana Labs Ltd.
\t1020  Gaudi2 AI Training Accelerator
8086  Intel Corporation
\t56a0  DG2 [Arc A770]
C 03  Display controller
\t00  VGA compatible controller
"""


@dataclass
class Layout:
    """What a builder made: the functions (by address) and the nodes the preset grants."""

    functions: dict[str, PciHandle] = field(default_factory=dict)
    grants: dict[str, list[str]] = field(default_factory=dict)  # address -> /dev/... paths
    companions: list[str] = field(default_factory=list)


def _bridge(tree: FakeTree, address: str, parent: str) -> None:
    """A PCIe port or switch port: a function of its own, bound to pcieport, with AER
    counters of its own; a root port (right below its root complex) also has the totals
    of what it received from below. As QEMU's root ports have them under a real kernel
    (tests/kernel), where an error a port detects is counted on the port alone."""
    root = {f"aer_rootport_total_err_{which}": "0\n" for which in ("cor", "fatal", "nonfatal")}
    tree.pci(
        address, 0x1022, 0x1483, 0x060400, driver="pcieport", parent=parent, link=Link(),
        aer=(0, 0), files=root if "/" not in parent else None,
    )  # fmt: skip


def amd_rocm(tree: FakeTree, per_socket: int = 1) -> Layout:
    """Instinct MI210s (1002:740f, board 1002:0c34), ``per_socket`` on each of two
    sockets, each behind a PCIe switch whose upstream and downstream ports are functions
    too. amdgpu registers its DRM device on the function: ``drm/card<N>`` and
    ``drm/renderD<128+N>`` below it (what ROCm's Kubernetes plugin globs,
    ``internal/pkg/amdgpu/amdgpu.go``), ``mem_info_vram_total`` on the function (the
    kernel's amdgpu docs); ``/dev/kfd`` is one virtual device for all GPUs
    (``/sys/devices/virtual/kfd/kfd``)."""
    layout = Layout()
    index = 0
    for socket, (root, port) in enumerate(
        (("pci0000:00", "0000:00:01"), ("pci0000:c0", "0000:c0:01"))
    ):
        bus = 0x01 if socket == 0 else 0xC1
        for slot in range(per_socket):
            first = bus + 3 * slot
            up, down, gpu = (f"0000:{first + i:02x}:00.0" for i in range(3))
            port_fn = f"{port}.{slot + 1}"
            _bridge(tree, port_fn, root)
            _bridge(tree, up, f"{root}/{port_fn}")
            _bridge(tree, down, f"{root}/{port_fn}/{up}")
            handle = tree.pci(
                gpu, 0x1002, 0x740F, 0x038000,
                subsystem=(0x1002, 0x0C34), driver="amdgpu", numa_node=socket, link=Link(),
                aer=(0, 0), iommu_group=10 + index,
                parent=f"{root}/{port_fn}/{up}/{down}",
                files={"mem_info_vram_total": f"{64 * GIB}\n"},
            )  # fmt: skip
            tree.pci_node(handle, f"drm/card{index + 1}", f"dri/card{index + 1}", DRM_MAJOR,
                          index + 1, subsystem="drm")  # fmt: skip
            render = tree.pci_node(handle, f"drm/renderD{128 + index}",
                                   f"dri/renderD{128 + index}", DRM_MAJOR, 128 + index,
                                   subsystem="drm")  # fmt: skip
            layout.functions[gpu] = handle
            layout.grants[gpu] = ["/dev/" + str(render.relative_to(tree.dev))]
            index += 1
    tree.virtual_node("kfd/kfd", "kfd", 234, 0, "kfd", "kfd")
    layout.companions = ["/dev/kfd"]
    return layout


def intel_gpu(tree: FakeTree) -> Layout:
    """An Arc A770 (8086:56a0) on xe, with a DisplayPort connector: xe's DRM device on the
    function (``drm/card0``, ``drm/renderD<N>``, as in the sysfs spec of Intel's GPU plugin,
    ``cmd/gpu_fakedev``), its connector's i2c-dev and DP AUX nodes below the card, its
    framebuffer (``graphics/fb0``), and ``tile0/physical_vram_size_bytes``
    (``xe_tile_sysfs.c``)."""
    handle = tree.pci(
        "0000:83:00.0", 0x8086, 0x56A0, 0x030000,
        subsystem=(0x8086, 0x1020), driver="xe", numa_node=0,
        link=Link("2.5 GT/s PCIe", 1, "2.5 GT/s PCIe", 1),  # the GPU behind its switch
        files={"tile0/physical_vram_size_bytes": f"{16 * GIB}\n"},
    )  # fmt: skip
    card = tree.pci_node(handle, "drm/card0", "dri/card0", DRM_MAJOR, 0, subsystem="drm")
    render = tree.pci_node(handle, "drm/renderD130", "dri/renderD130", DRM_MAJOR, 130,
                           subsystem="drm")  # fmt: skip
    tree.pci_node(handle, "drm/card0/card0-DP-1/i2c-3/i2c-dev/i2c-3", "i2c-3", I2C_MAJOR, 3,
                  subsystem="i2c-dev")  # fmt: skip
    tree.pci_node(handle, "drm/card0/card0-DP-1/drm_dp_aux0", "drm_dp_aux0", 237, 0,
                  subsystem="drm_dp_aux_dev")  # fmt: skip
    # DRM's fbdev emulation registers the framebuffer on the function too, as a real
    # kernel shows for virtio-gpu and bochs-drm (tests/kernel): the preset leaves it out.
    tree.pci_node(handle, "graphics/fb0", "fb0", FB_MAJOR, 0, subsystem="graphics")
    grants = ["/dev/" + str(p.relative_to(tree.dev)) for p in (card, render)]
    return Layout({handle.address: handle}, {handle.address: grants})


def habana_gaudi(tree: FakeTree) -> Layout:
    """Two Gaudi2 (1da3:1020). The DRM accel device is registered on the function
    (``accel/accel<N>``, ``/dev/accel/accel<N>``); the control device ``accel_controlD<N>``
    has no parent (``device_init_cdev``, drivers/accel/habanalabs/common/device.c), so it
    lives under ``/sys/devices/virtual/accel``."""
    layout = Layout()
    for index, address in enumerate(("0000:33:00.0", "0000:9a:00.0")):
        handle = tree.pci(
            address, 0x1DA3, 0x1020, 0x120000, driver="habanalabs", numa_node=index,
            link=Link(), aer=(0, 0),
        )  # fmt: skip
        node = tree.pci_node(handle, f"accel/accel{index}", f"accel/accel{index}", 261, index,
                             subsystem="accel")  # fmt: skip
        tree.virtual_node(f"accel/accel_controlD{index}", f"accel/accel_controlD{index}",
                          509, index, "accel")  # fmt: skip
        layout.functions[address] = handle
        layout.grants[address] = ["/dev/" + str(node.relative_to(tree.dev))]
    layout.companions = ["/dev/accel/accel_controlD0", "/dev/accel/accel_controlD1"]
    return layout


def aws_neuron(tree: FakeTree) -> Layout:
    """Two Trainium functions (1d0f:7164) and their nodes, which the Neuron driver makes
    with no parent (``device_create(neuron_dev_class, NULL, ...)``, neuron_cdev.c), named
    by routing ID: under /sys/devices/virtual/neuron_device, unrelated to the functions."""
    layout = Layout()
    for index, address in enumerate(("0000:10:1c.0", "0000:10:1d.0")):
        layout.functions[address] = tree.pci(address, 0x1D0F, 0x7164, 0x088000, driver="neuron")
        # Routing order, not PCI order: the first function is neuron1.
        tree.virtual_node(f"neuron_device/neuron{1 - index}", f"neuron{1 - index}", 240,
                          1 - index, "neuron_device")  # fmt: skip
    return layout


def alveo(tree: FakeTree) -> Layout:
    """An Alveo U250: its management function (xclmgmt, which makes /dev/xclmgmt<N>) and
    its user function (xocl), whose render node is under ``drm/`` (XRT reads it there,
    ``pcidev_linux.cpp``)."""
    gen3 = Link("8.0 GT/s PCIe", 16, "8.0 GT/s PCIe", 16)
    tree.pci("0000:d8:00.0", 0x10EE, 0x5004, 0x058000, driver="xclmgmt", link=gen3)
    user = tree.pci("0000:d8:00.1", 0x10EE, 0x5005, 0x058000, driver="xocl", link=gen3)
    render = tree.pci_node(user, "drm/renderD131", "dri/renderD131", DRM_MAJOR, 131,
                           subsystem="drm")  # fmt: skip
    grants = {user.address: ["/dev/" + str(render.relative_to(tree.dev))]}
    return Layout({user.address: user}, grants)


def coral(tree: FakeTree) -> Layout:
    """A dual Edge TPU M.2 card: two functions (1ac1:089a) behind a bridge, each with the
    apex class device the gasket driver creates with the function as parent
    (``gasket_core.c``): ``apex/apex_<N>``, /dev/apex_<N>; PCIe gen 2, one lane."""
    layout = Layout()
    for index, address in enumerate(("0000:05:00.0", "0000:06:00.0")):
        handle = tree.pci(
            address, 0x1AC1, 0x089A, 0x088000, driver="apex",
            link=Link("5.0 GT/s PCIe", 1, "5.0 GT/s PCIe", 1),
        )  # fmt: skip
        node = tree.pci_node(handle, f"apex/apex_{index}", f"apex_{index}", 120, index,
                             subsystem="apex")  # fmt: skip
        layout.functions[address] = handle
        layout.grants[address] = ["/dev/" + str(node.relative_to(tree.dev))]
    return layout


def vfio_gpu(tree: FakeTree, audio_driver: str | None = "snd_hda_intel") -> Layout:
    """An RTX A6000 (10de:2230) bound to vfio-pci, with its HDMI audio function
    (10de:1aef) in the same IOMMU group 35 (Documentation/driver-api/vfio.rst: the group
    is the unit of ownership); VFIO's group node and container under virtual/."""
    gpu = tree.pci(
        "0000:65:00.0", 0x10DE, 0x2230, 0x030000, driver="vfio-pci", iommu_group=35,
        link=Link(), numa_node=0,
    )  # fmt: skip
    tree.pci("0000:65:00.1", 0x10DE, 0x1AEF, 0x040300, driver=audio_driver, iommu_group=35)
    tree.vfio(35)
    return Layout({gpu.address: gpu}, {gpu.address: ["/dev/vfio/35", "/dev/vfio/vfio"]})
