"""The command line of dagrl's tools that take a run's overrides (dagrl.plan, dagrl.doctor): their own flags
anywhere among the dotted overrides, which are passed on as `python3 -m dagrl.main_dag` takes them."""

from __future__ import annotations

import argparse


def parse_tool_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(the tool's flags, the overrides); an unknown --flag is the parser's one-line usage error."""
    parser.add_argument("overrides", nargs="*", help="dotted overrides, as for dagrl.main_dag")
    args, unknown = parser.parse_known_intermixed_args(argv)
    flags = [arg for arg in unknown if arg.startswith("-")]
    if flags:
        parser.error(f"unknown option(s): {' '.join(flags)}")
    return args, args.overrides + unknown
