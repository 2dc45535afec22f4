"""``nomad-device-launcher check``: will a job get its devices, by Nomad's scheduler rules.

See ``command.py`` for the flow and docs/launcher.md for the rules and output.
"""
