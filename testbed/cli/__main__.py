"""`python -m testbed.cli`: the same as the `hpnlab` command."""

import sys

from . import main

sys.exit(main())
