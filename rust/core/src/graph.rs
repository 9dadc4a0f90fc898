//! Graph model of graph.json: load, validate, topologically order and write atomically.
