"""`python -m rlx_rules.cli`: the same as the `rlx-rules` command."""

import sys

from .app import main

sys.exit(main())
