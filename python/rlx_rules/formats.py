"""The names and versions of the file formats rlx-rules reads and writes (the Rust core has its own copy)."""

GRAPH_FORMAT = "rlx-graph"  # graph.json (docs/graph-format.md)
GRAPH_VERSION = 1
PROGRAM_FORMAT = "rlx-program"  # the compiled matcher program (docs/program.md)
PROGRAM_VERSION = 1
