"""Nomad's device placement, as its scheduler decides it: a model of its own.

What ``nomad-device-launcher check`` shows is computed here, and the same
functions serve scripts and tests: read a job (``load_job``), nodes
(``load_nodes``, ``node_from_groups``, ``read_cluster``) and judge them
(``evaluate_job``, or ``check_node`` for one task group on one node). See
docs/architecture.md (placement) for the modules and docs/launcher.md for the rules.
"""
