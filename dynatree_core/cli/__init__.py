"""The ``dynatree`` command line: generate, bench, table, sweep, calibrate, distill.

Modules: ``args`` (argument groups), ``resolve`` (options -> specs, pair, protocol numbers),
``run`` (running an experiment: backend, checkpoint, result, printout), ``commands`` (one function
per subcommand), ``parser`` (the argparse tree and ``dynatree --help``'s text). Everything up to
parsing is torch-free: ``dynatree --help`` loads no model code.
"""

from __future__ import annotations

import shlex
import sys
from typing import Sequence

from dynatree_core.bench.data import DataError
from dynatree_core.bench.execution import ShardFailed
from dynatree_core.bench.protocol import LengthError
from dynatree_core.bench.results import ResultError
from dynatree_core.cli.args import CLIError
from dynatree_core.cli.parser import build_parser

__all__ = ["CLIError", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dynatree`` console script; returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    args.command_line = " ".join(["dynatree", *map(shlex.quote, argv)])
    try:
        return int(args.func(args) or 0)
    except (CLIError, DataError, LengthError, ResultError, FileExistsError) as e:
        print(f"dynatree: error: {e}", file=sys.stderr)
        return 2
    except ShardFailed as e:  # the partial result and the checkpoint are already written
        print(f"dynatree: error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # config validation and other bad input
        print(f"dynatree: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"dynatree: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dynatree: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
