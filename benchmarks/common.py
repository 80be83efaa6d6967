"""Pieces the GPU benchmarks share: a config-only model directory every rank sees, an actor engine on random
weights (the benchmarks measure speed, so no multi-GB checkpoint is written or read), a CPU-time profile, and the
preparing commands (a random Qwen3, prompts padded to one length) run with their output in a log.

Light to import: the drivers that only start processes load no torch through it."""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from dagrl.engine.base import MegatronEngineSpec

ROOT = Path(__file__).resolve().parents[1]


def logged(command: list[str], log: Path) -> None:
    """`command` run from the repository root, its output appended to `log`; a failure raises."""
    with open(log, "a") as stream:
        subprocess.run(command, cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT, check=True)


def random_qwen3(size: str, out: str, tokenizer: str, log: Path, *flags: str) -> None:
    """scripts/init_random_model.py: a random Qwen3 of the preset `size` with `tokenizer`'s vocabulary at `out`
    (`flags`: --config-only, or the weights' --dtype and --device)."""
    script = "scripts/init_random_model.py"
    logged(
        [sys.executable, script, "--family", "qwen3", "--size", size, "--out", out, "--tokenizer", tokenizer, *flags],
        log,
    )


def padded_prompts(src: str, dst: str, tokenizer: str, length: int, log: Path) -> None:
    """benchmarks/verl_data.py: the parquet prompts of `src` padded to exactly `length` tokens of `tokenizer`."""
    words = ["--src", src, "--dst", dst, "--tokenizer", tokenizer, "--prompt-length", str(length)]
    logged([sys.executable, "benchmarks/verl_data.py", *words], log)


def shared_config_dir(config: Any, prefix: str) -> str:
    """Rank 0 saves `config` (an HF config) into a fresh directory; every rank gets its path. Collective."""
    import torch.distributed as dist

    path = [tempfile.mkdtemp(prefix=prefix) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(path, src=0)
    if dist.get_rank() == 0:
        config.save_pretrained(path[0])
    dist.barrier()
    return path[0]


def random_actor(spec: MegatronEngineSpec):
    """The actor engine of `spec` with Megatron's random initialisation: the HF weight import is skipped."""
    import dagrl.engine.megatron.weights as weights
    from dagrl.engine.megatron.actor import MegatronActorEngine

    real_import = weights.import_hf_weights
    weights.import_hf_weights = lambda *args, **kwargs: None
    try:
        return MegatronActorEngine(spec)
    finally:
        weights.import_hf_weights = real_import


def cpu_profile(fn: Callable[[], Any], sort: str, *restrictions: Any) -> str:
    """cProfile's table of one call of `fn`, sorted by `sort` and cut by pstats `restrictions` (regex, count)."""
    profiler = cProfile.Profile()
    profiler.runcall(fn)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats(sort).print_stats(*restrictions)
    return text.getvalue()


# ---- the learning benchmarks (opd_learn, moe_learn, lora_learn): their --arms and a run's logged metrics ----------
GAP = "training/rollout_log_probs_diff_mean"  # the rollout/trainer log-prob gap of the sampled tokens


def learn_parser(doc: str, arms: str, steps: int, test_freq: int, script: str) -> argparse.ArgumentParser:
    """The options every learning benchmark takes (a benchmark adds its own): where its runs go, which arms and
    seeds, how long, the run script, overrides for every arm, and --report to re-print the table only."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--arms", default=arms)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--test-freq", type=int, default=test_freq)
    parser.add_argument("--script", default=script)
    parser.add_argument("--extra", default="", help="overrides added to every arm")
    parser.add_argument("--report", action="store_true")
    return parser


def chosen_arms(arms: str, known: list[str]) -> list[str]:
    """--arms split at its commas; a name not in `known` exits naming the choices."""
    chosen = arms.split(",")
    unknown = set(chosen) - set(known)
    if unknown:
        sys.exit(f"--arms: unknown {sorted(unknown)}; choose from {', '.join(known)}")
    return chosen


def run_arms(args: argparse.Namespace, overrides: dict[str, list[str]], run: Callable[..., Any]) -> None:
    """Each chosen arm's run for each seed, as `run(f"{arm}_seed{seed}", overrides[arm], seed, args)`; nothing
    with --report (the table only)."""
    names = chosen_arms(args.arms, list(overrides))
    if not args.report:
        for seed in (int(s) for s in args.seeds.split(",")):
            for name in names:
                run(f"{name}_seed{seed}", overrides[name], seed, args)


def values_of(directory: Path, key: str) -> list[float]:
    """One metric's values over the steps of a run's metrics.jsonl (none when it never logged it)."""
    import json

    path = directory / "ckpt" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return [row[key] for row in rows if key in row]
