"""Compatibility shim: the ``dynatree distill`` command line lives in :mod:`dynatree_core.distill.cli`
(torch-free; ``dynatree_core.cli`` imports ``add_distill_parser`` from here)."""

from .distill.cli import DESCRIPTION, add_distill_args, add_distill_parser, check_distill_args  # noqa: F401
from .distill.config import DEFAULT_WORK_DIR, DistillConfig  # noqa: F401

__all__ = ["DEFAULT_WORK_DIR", "DESCRIPTION", "DistillConfig", "add_distill_args", "add_distill_parser",
           "check_distill_args"]
