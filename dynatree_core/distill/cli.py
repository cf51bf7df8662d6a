"""The ``dynatree distill`` command line (torch-free): options generated from :class:`DistillConfig`.

``dynatree --help`` and ``dynatree distill --help`` start without loading torch; the command converts
the parsed options to a validated :class:`DistillConfig` and imports the pipeline when it runs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import typing

from dynatree_core.distill.config import DistillConfig

DESCRIPTION = """Build teacher data, train and export a draft for the SmolLM2-135M-Instruct target.

Stages (--stage): data (target continuations of the bundled prompts and of training-text passages,
plus plain training text; never the evaluation text), train (online distillation, resumable
checkpoints), export (fp16 weights into the package's assets). --evaluate measures agreement with
the target's greedy tokens on held-out prompts and passages.

--kind model trains the independent 2-layer draft; --kind feature trains the feature draft that
reads the target's hidden states (bash scripts/distill_gpu.sh: one 8-minute GPU lease, data to evaluation;
bash scripts/distill_feature.sh: 90 minutes on a 2-core CPU). See the module
dynatree_core.distill for the full description.
"""


def option_name(field_name: str) -> str:
    """``work_dir`` -> ``--work-dir``."""
    return "--" + field_name.replace("_", "-")


def add_distill_args(p: argparse.ArgumentParser) -> None:
    """One option per :meth:`DistillConfig.option_fields` field: type, default, choices and help from it."""
    types = typing.get_type_hints(DistillConfig)
    for f in DistillConfig.option_fields():
        md, tp = f.metadata, types[f.name]
        kw: dict = {"default": f.default}
        if md["help"] is not None:
            kw["help"] = md["help"]
        if tp is bool:
            kw["action"] = argparse.BooleanOptionalAction if md["negatable"] else "store_true"
        elif md["choices"]:
            kw["choices"] = list(md["choices"])
        elif tp in (int, float):
            kw["type"] = tp
        p.add_argument(option_name(f.name), **kw)


def check_distill_args(args: argparse.Namespace) -> DistillConfig:
    """The parsed options as a validated :class:`DistillConfig` (ValueError naming the option)."""
    return DistillConfig.from_namespace(args)


def add_distill_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``distill`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser("distill", help="build teacher data, train and export a draft",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                              allow_abbrev=False)
    add_distill_args(p)
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace, **models) -> int:
    config = DistillConfig.from_namespace(args)  # validated before torch and the models load
    from dynatree_core.distill.pipeline import run_distill

    return run_distill(config, **models)


def main(argv=None) -> int:
    """``python -m dynatree_core.distill``: the same options as ``dynatree distill``."""
    parser = argparse.ArgumentParser(prog="python -m dynatree_core.distill", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    add_distill_args(parser)
    args = parser.parse_args(argv)
    args.command_line = "python -m dynatree_core.distill " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    return _run(args)
