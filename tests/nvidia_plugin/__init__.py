"""Tests of the nvidia plugin, on a fake NVML (fake_nvml.c) loaded through the real binding."""
