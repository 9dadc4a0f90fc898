//! The op registry (ops.json, shared with the Python checker): arity, attribute types, commutativity.
