"""rlx-rules: declarative pattern-matching rewrites for ML computation graphs, with a Rust core."""
