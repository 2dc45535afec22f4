"""Interop tests: the real go-plugin client and server against the SDK."""
