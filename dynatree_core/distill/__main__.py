"""``python -m dynatree_core.distill``: the ``dynatree distill`` command."""

import sys

from .cli import main

sys.exit(main())
