"""`python -m rlx_rules.cli`: the same as the `rlx-rules` command."""

from .app import run

run()
