"""The rule language front end: grammar and parser, AST, checker, analysis, and compilation to a matcher program."""
