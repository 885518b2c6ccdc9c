"""Files in and out: the versioned JSON documents of graphs, clusters, placements and traces
and the paper's ``.txt`` reader (:mod:`~doppler_lab.io.documents`, re-exported here), tensors
stored beside a graph (:mod:`~doppler_lab.io.stored`) and the paper's data
(:mod:`~doppler_lab.io.datasets`).
"""

from .documents import (
    FORMAT_VERSION,
    GRAPH_FIELDS,
    NODE_FIELDS,
    PAPER_NODE_TYPES,
    PAPER_TIME_SCALE,
    PLACEMENT_FIELDS,
    TRACE_FIELDS,
    TRANSFER_FIELDS,
    check_placement_graph,
    graph_from_dict,
    graph_to_dict,
    load_cluster,
    load_graph,
    load_placement,
    load_profile,
    load_trace,
    placement_from_dict,
    read_paper_graph,
    save_cluster,
    save_graph,
    save_placement,
    save_trace,
    trace_from_dict,
)

__all__ = [
    "FORMAT_VERSION",
    "PAPER_TIME_SCALE",
    "PAPER_NODE_TYPES",
    "graph_to_dict",
    "GRAPH_FIELDS",
    "NODE_FIELDS",
    "graph_from_dict",
    "save_graph",
    "load_graph",
    "read_paper_graph",
    "save_cluster",
    "load_cluster",
    "load_profile",
    "save_placement",
    "PLACEMENT_FIELDS",
    "placement_from_dict",
    "load_placement",
    "check_placement_graph",
    "save_trace",
    "TRACE_FIELDS",
    "trace_from_dict",
    "TRANSFER_FIELDS",
    "load_trace",
]
