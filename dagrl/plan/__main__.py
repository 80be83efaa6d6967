"""CLI of dagrl.plan: `python3 -m dagrl.plan [--gpu-memory-gb N] [--all-groups] key=value ...`."""
from __future__ import annotations

import argparse
import logging
import sys

from dagrl.config.errors import ConfigError


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python3 -m dagrl.plan",
        description="Print the parallel layout, the batch schedule and a per-GPU memory estimate of the run that "
                    "`python3 -m dagrl.main_dag` would start with the same overrides; nothing is launched.")
    parser.add_argument("--gpu-memory-gb", type=float, default=141.0,
                        help="memory of one GPU in GiB, as torch reports it (default 141: H200; H100: 80)")
    parser.add_argument("--all-groups", action="store_true", help="list every rank group (default: the first 8)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, as for dagrl.main_dag")
    args, unknown = parser.parse_known_intermixed_args(argv)
    flags = [arg for arg in unknown if arg.startswith("-")]
    if flags:
        parser.error(f"unknown option(s): {' '.join(flags)}")
    return args, args.overrides + unknown


def main(argv: list[str] | None = None) -> None:
    from dagrl.main_dag import fail

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        from dagrl.config.load import compose
        from dagrl.config.tree import Cfg
        from dagrl.config.validate import planned_world_size, preflight
        from dagrl.plan import make_plan
        from dagrl.plan.report import render

        cfg = Cfg(compose(overrides))  # a bad override: one ConfigError line, as in dagrl.main_dag
        shape = preflight(cfg, world_size=planned_world_size(cfg))
        plan = make_plan(cfg, shape, args.gpu_memory_gb)
    except ConfigError as error:
        fail(str(error), 2)
    sys.stdout.write(render(plan, group_limit=0 if args.all_groups else 8))


if __name__ == "__main__":
    main()
