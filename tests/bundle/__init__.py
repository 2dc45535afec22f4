"""Tests of nomad-device-bundle.

A package, so that its conftest does not shadow tests/conftest.py for the
modules that import from it.
"""
