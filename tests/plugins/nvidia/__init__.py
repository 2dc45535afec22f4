"""nomad_device.plugins.nvidia: NVIDIA GPUs through NVML (a fake NVML here)."""
