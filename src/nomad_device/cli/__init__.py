"""The launcher: drive any Nomad device plugin from the command line."""
