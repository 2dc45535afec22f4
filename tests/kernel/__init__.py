"""The real-kernel tier: nomad-device-generic in a Debian kernel under QEMU (tests/kernel)."""
