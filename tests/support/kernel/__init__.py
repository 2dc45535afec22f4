"""The real-kernel tier's machinery: the QEMU VM, its guest agent, and what tests ask of
the guest."""
