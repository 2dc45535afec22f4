"""Test doubles, harnesses and the conformance suite for plugin authors."""
