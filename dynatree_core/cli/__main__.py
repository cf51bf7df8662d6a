"""``python -m dynatree_core.cli``: the ``dynatree`` command."""

import sys

from dynatree_core.cli import main

sys.exit(main())
