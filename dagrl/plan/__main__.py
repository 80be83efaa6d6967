"""CLI of dagrl.plan: `python3 -m dagrl.plan [--gpu-memory-gb N | --cpu] [--all-groups] key=value ...`."""

from __future__ import annotations

import argparse
import logging
import sys

from dagrl.config.errors import ConfigError
from dagrl.config.tool_cli import parse_tool_args


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python3 -m dagrl.plan",
        description="Print the parallel layout, the batch schedule and a per-GPU memory estimate of the run that "
        "`python3 -m dagrl.main_dag` would start with the same overrides; nothing is launched.",
    )
    device = parser.add_mutually_exclusive_group()
    device.add_argument(
        "--gpu-memory-gb",
        type=float,
        default=None,
        help="plan for GPUs of this much memory in GiB, as torch reports it (default: this machine's GPU as "
        "nvidia-smi reports it; 141, an H200, where it has none; H100: 80)",
    )
    device.add_argument(
        "--cpu",
        action="store_true",
        help="plan a CPU run against this machine's RAM (the default where this machine has no GPU "
        "and the rollout is hf: the run dagrl.main_dag would start here)",
    )
    parser.add_argument("--all-groups", action="store_true", help="list every rank group (default: the first 8)")
    return parse_tool_args(parser, argv)


def on_cpu(args: argparse.Namespace, cfg) -> bool:
    """--cpu, or neither flag on a machine without a GPU for a run it could start (vLLM needs GPUs)."""
    from dagrl.config.errors import require
    from dagrl.plan.machine import has_gpu

    vllm = cfg.actor_rollout_ref.rollout.name == "vllm"
    if args.cpu:
        require(
            not vllm,
            "actor_rollout_ref.rollout.name",
            "actor_rollout_ref.rollout.name=vllm needs a CUDA GPU: "
            "use actor_rollout_ref.rollout.name=hf for a CPU run (or plan for GPUs without --cpu)",
        )
    if args.cpu or args.gpu_memory_gb is not None:
        return args.cpu
    return not vllm and not has_gpu()


def main(argv: list[str] | None = None) -> None:
    from dagrl.main_dag import fail

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        from dagrl.config.load import compose
        from dagrl.config.tree import Cfg
        from dagrl.config.validate import planned_world_size, preflight
        from dagrl.plan import H200_GIB, make_plan
        from dagrl.plan.machine import gpu_gib, has_gpu, ram_gib
        from dagrl.plan.report import render

        cfg = Cfg(compose(overrides))  # a bad override: one ConfigError line, as in dagrl.main_dag
        shape = preflight(cfg, world_size=planned_world_size(cfg))
        cpu = on_cpu(args, cfg)
        measured = None if cpu or args.gpu_memory_gb or not has_gpu() else gpu_gib()  # this machine's GPU first
        if not cpu and not args.gpu_memory_gb and has_gpu() and measured is None:
            logging.warning(
                "nvidia-smi did not say this machine's GPU memory: planning for %.0f GiB (an H200); "
                "--gpu-memory-gb N plans for N",
                H200_GIB,
            )
        gpu_memory = args.gpu_memory_gb or measured or H200_GIB
        plan = make_plan(cfg, shape, gpu_memory, cpu_memory_gib=ram_gib() if cpu else None)
    except ConfigError as error:
        fail(str(error), 2)
    sys.stdout.write(render(plan, group_limit=0 if args.all_groups else 8))


if __name__ == "__main__":
    main()
