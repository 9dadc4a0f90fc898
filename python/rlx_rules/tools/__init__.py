"""Tools over rules and graphs: verification by execution, example synthesis, explain rendering, drawings, progress."""
