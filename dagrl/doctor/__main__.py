"""CLI of dagrl.doctor: `python3 -m dagrl.doctor [--env-only] [--prompt-tokens N] [--response-tokens N] k=v ...`."""

from __future__ import annotations

import argparse
import sys

from dagrl.config.errors import ConfigError
from dagrl.config.tool_cli import parse_tool_args


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python3 -m dagrl.doctor",
        description="Check the install and the model's weights and numerics at the layout of the run that "
        "`python3 -m dagrl.main_dag` would start with the same overrides (launch it the same way).",
    )
    parser.add_argument("--env-only", action="store_true", help="check the install only; build no model")
    parser.add_argument("--prompt-tokens", type=int, default=16, help="tokens of each fixed prompt (default 16)")
    parser.add_argument("--response-tokens", type=int, default=16, help="greedy tokens per prompt (default 16)")
    return parse_tool_args(parser, argv)


def say(text: str) -> None:
    """Rank 0 prints (every rank of a torchrun launch runs the same checks)."""
    import os

    if os.environ.get("RANK", "0") == "0":
        sys.stdout.write(text)
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    from dagrl.main_dag import fail

    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        from dagrl.config.load import compose
        from dagrl.config.tree import Cfg
        from dagrl.config.validate import preflight
        from dagrl.launch.process import setup_logging

        setup_logging()
        cfg = Cfg(compose(overrides))  # a bad override: one ConfigError line, as in dagrl.main_dag
        shape = preflight(cfg)
    except ConfigError as error:
        fail(str(error), 2)
    from dagrl.doctor import environment, examine, layout_text, needs

    env = environment.current()
    say("environment:\n" + "".join(f"  {line}\n" for line in environment.describe(env)))
    say("".join(f"  note: {note}\n" for note in environment.untested(env)))
    problems = environment.problems(env, needs(cfg))
    if problems:
        fail("\n".join(problems), 2)
    if args.env_only:
        return
    from dagrl.doctor.report import render
    from dagrl.trainer import build
    from dagrl.utils.dist import destroy_process_groups, init_process_group

    init_process_group(timeout_s=cfg.actor_rollout_ref.nccl_timeout)
    from dagrl.engine.megatron import compat
    from dagrl.engine.megatron.actor import MegatronActorEngine

    compat.import_megatron(keep_wandb=False)
    tokenizer = build.load_tokenizer(cfg.actor_rollout_ref.model.path)
    actor = MegatronActorEngine(build.megatron_spec(cfg, shape, optim=None))
    rollout = build.build_rollout(cfg, shape, tokenizer, actor.device)
    diagnosis = examine(cfg, shape, actor, rollout, tokenizer, args.prompt_tokens, args.response_tokens)
    say(render(diagnosis, layout_text(cfg, shape, actor)))
    del actor, rollout
    destroy_process_groups()
    sys.exit(0 if diagnosis.ok else 1)


if __name__ == "__main__":
    main()
