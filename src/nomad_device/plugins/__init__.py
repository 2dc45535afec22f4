"""Ready-made device plugins built on the SDK."""
