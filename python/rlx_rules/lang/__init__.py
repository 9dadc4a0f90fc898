"""The rule language front end: grammar and parser, AST, checker, analysis, and compilation to a matcher program."""

# The largest rule file the parser reads, in bytes of UTF-8 (here, not in parse.py, so that the compiled-rule
# cache can check it without importing the parser).
MAX_SOURCE_BYTES = 4 * 1024 * 1024
