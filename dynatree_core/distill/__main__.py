"""``python -m dynatree_core.distill``: the ``dynatree distill`` command."""

import sys

from dynatree_core.distill.cli import main

sys.exit(main())
