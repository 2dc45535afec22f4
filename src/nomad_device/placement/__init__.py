"""Nomad's device placement, as its scheduler decides it: a model of its own.

What ``nomad-device-launcher check`` shows is computed here, and the same
functions serve scripts and tests: read a job (:func:`load_job`), nodes
(:func:`load_nodes`, :func:`node_from_groups`, :func:`read_cluster`) and judge
them (:func:`evaluate_job` for a whole job, :func:`check_node` for one task
group on one node). See docs/architecture.md (placement) for the modules and
docs/launcher.md for the rules.
"""

from nomad_device.placement.cluster import ApiConfig, ApiError, read_cluster
from nomad_device.placement.evaluate import GroupReport, NodeEntry, Report, evaluate_job
from nomad_device.placement.jobspec import JobError, load_job, parse_job_text
from nomad_device.placement.model import (
    Affinity,
    Allocation,
    Constraint,
    DeviceRequest,
    Instance,
    Job,
    Node,
    NodeDevices,
    Numa,
    Task,
    TaskGroup,
    Topology,
)
from nomad_device.placement.nodes import NodeError, load_nodes, node_from_groups
from nomad_device.placement.scheduler import NodeVerdict, check_node

__all__ = [
    "Affinity",
    "Allocation",
    "ApiConfig",
    "ApiError",
    "Constraint",
    "DeviceRequest",
    "GroupReport",
    "Instance",
    "Job",
    "JobError",
    "Node",
    "NodeDevices",
    "NodeEntry",
    "NodeError",
    "NodeVerdict",
    "Numa",
    "Report",
    "Task",
    "TaskGroup",
    "Topology",
    "check_node",
    "evaluate_job",
    "load_job",
    "load_nodes",
    "node_from_groups",
    "parse_job_text",
    "read_cluster",
]
