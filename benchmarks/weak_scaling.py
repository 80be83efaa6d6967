"""Weak scaling of colocated GRPO from 1 to 8 GPUs, and the 8-GPU seed script, each beside dagrl.plan.

usage: python3 benchmarks/weak_scaling.py --out DIR [--gpus 1,2,4,8] [--layouts dp,tp2] [--steps 5]
           [--prompts-per-gpu 16] [--mini-per-gpu 8] [--n 8] [--tokenizer DIR] [--models DIR] [--arith DIR]
           [--gpu-memory-gb N] [--timeout 560] [--first-step 2] [--plan-only] [--seed-script] [--report]
           [-- extra dotted overrides for every point]

A point is a layout at G GPUs: `dp` (actor TP1 x DP=G, vLLM TP1) or `tp2` (actor TP2+SP x DP=G/2, vLLM TP2; G >= 2).
The work per GPU is fixed: --prompts-per-gpu x G prompts a step, --n responses each, prompts of exactly 512 tokens
(benchmarks/verl_data.py), responses of exactly 1,024 (EOS ignored), on a random Qwen3-1.7B-shaped model
(scripts/init_random_model.py with the SmolLM2 tokenizer of --tokenizer). Each point is one
`python3 -m torch.distributed.run --nproc-per-node G -m dagrl.main_dag ...` for --steps steps into --out/<layout>_g<G>/
(console.log, metrics.jsonl, plan.txt: dagrl.plan of the same overrides, run.json: exit code, wall seconds and the
highest nvidia-smi memory.used of its GPUs). The model and data are built under --models when absent.
  --report       runs nothing: per layout, the median of steps --first-step..N of the step and its phases (generation
                 without the switch; old log-prob; update; the colocated switch, with the weight sync it includes;
                 the rest), trained response tokens/s/GPU, efficiency = that over the 1-GPU dp point's (goal >= 0.90
                 at 8), the phase that grew most in seconds against that point, and plan's peak GiB beside nvidia-smi's.
  --plan-only    runs only dagrl.plan for every point (a config-only model: works on a CPU) and prints its table.
  --seed-script  examples/grpo_trainer/run_qwen3-8b-megatron.sh as written, on a random Qwen3-8B-shaped model and the
                 arithmetic parquet: its plan (with --plan-only) or a --steps run into --out/seed_8b/ (8 GPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, logged, padded_prompts, random_qwen3  # noqa: E402 - after the sys.path insert above
from benchmarks.weak_scaling_report import cell, plan_cell, plan_figures, report  # noqa: E402 - as above

PROMPT_LEN, RESPONSE_LEN = 512, 1024
SEED_SCRIPT = "examples/grpo_trainer/run_qwen3-8b-megatron.sh"


@dataclass(frozen=True)
class Point:
    layout: str  # dp or tp2
    gpus: int

    @property
    def tp(self) -> int:
        return 2 if self.layout == "tp2" else 1

    @property
    def name(self) -> str:
        return f"{self.layout}_g{self.gpus}"


def points_of(gpus: str, layouts: str) -> list[Point]:
    """Every (layout, G) asked for that can exist: tp2 needs an even G."""
    sizes = [int(g) for g in gpus.split(",") if g]
    names = [name for name in layouts.split(",") if name]
    if set(names) - {"dp", "tp2"}:
        raise SystemExit(f"--layouts: dp and/or tp2, not {layouts}")
    return [Point(name, g) for name in names for g in sizes if g % Point(name, g).tp == 0]


def overrides(point: Point, args: argparse.Namespace, model: str, data: str, out: Path) -> list[str]:
    """dagrl.main_dag's overrides for `point`; the batch grows with G so that each GPU's work stays the same."""
    prompts, seq = args.prompts_per_gpu * point.gpus, PROMPT_LEN + RESPONSE_LEN
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={data}/train.parquet",
        "data.val_files=null",
        f"data.train_batch_size={prompts}",
        f"data.max_prompt_length={PROMPT_LEN}",
        f"data.max_response_length={RESPONSE_LEN}",
        f"actor_rollout_ref.rollout.n={args.n}",
        # several optimizer steps a batch, so that the old-log-prob pass runs (with one it reuses the update's)
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.mini_per_gpu * point.gpus}",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={args.train_tokens}",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={args.logprob_tokens}",
        # every sequence is exactly `seq` tokens, so the token budgets make micro-batches of these many rows;
        # dagrl.plan sizes its memory estimate from the row counts, not the budgets
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={max(1, args.train_tokens // seq)}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={max(1, args.logprob_tokens // seq)}",
        f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={point.tp}",
        f"actor_rollout_ref.actor.megatron.sequence_parallel={str(point.tp > 1).lower()}",  # SP needs TP > 1
        "actor_rollout_ref.actor.megatron.use_distributed_optimizer=true",  # as the seed script; a no-op at DP=1
        "actor_rollout_ref.actor.megatron.param_dtype=bfloat16",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={point.tp}",
        "actor_rollout_ref.rollout.ignore_eos=true",
        "actor_rollout_ref.rollout.enforce_eager=false",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        "actor_rollout_ref.rollout.max_num_seqs=1024",
        f"trainer.n_gpus_per_node={point.gpus}",
        f"trainer.total_training_steps={args.steps}",
        f"trainer.total_epochs={args.steps}",  # a small data set repeats rather than ending the run early
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console,jsonl]",
        f"trainer.default_local_dir={out}",
        "trainer.resume_mode=disable",
    ]


def train_command(point: Point, words: list[str]) -> list[str]:
    # --standalone: a free rendezvous port per run, so a point cannot collide with the previous one's leftovers
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(point.gpus),
        "-m",
        "dagrl.main_dag",
        *words,
    ]


def plan_command(words: list[str], gpu_gb: float) -> list[str]:
    return [sys.executable, "-m", "dagrl.plan", "--gpu-memory-gb", f"{gpu_gb:g}", *words]


def seed_env(model: str, arith: str, out: Path) -> dict:
    return {
        **os.environ,
        "MODEL_PATH": model,
        "TRAIN_DATA_PATH": f"{arith}/train.parquet",
        "TEST_DATA_PATH": f"{arith}/test.parquet",
        "BASE_CKPT_PATH": str(out / "ckpts"),
        "BASE_TENSORBOARD_PATH": str(out / "tensorboard"),
    }


# ---- preparing (any machine; the weights need a GPU) ----
def model_dir(args: argparse.Namespace, size: str, config_only: bool) -> str:
    """A random Qwen3 of `size` with --tokenizer's vocabulary (what a run trains), built once per machine."""
    path = Path(args.models) / f"qwen3-{size}{'-config' if config_only else ''}"
    if not (path / "config.json").exists() or not (config_only or list(path.glob("*.safetensors"))):
        flags = ["--config-only"] if config_only else ["--dtype", "bf16", "--device", "cuda"]
        random_qwen3(size, str(path), args.tokenizer, Path(args.models) / "prep.log", *flags)
    return str(path)


def arith_dir(args: argparse.Namespace) -> str:
    if not (Path(args.arith) / "train.parquet").exists():
        words = ["--local_dir", args.arith, "--max_operand", "99", "--train_size", "2048"]
        logged([sys.executable, "examples/data_preprocess/arithmetic.py", *words], Path(args.models) / "prep.log")
    return args.arith


def prompt_dir(args: argparse.Namespace, model: str) -> str:
    """The arithmetic prompts padded to exactly PROMPT_LEN tokens with the model's tokenizer."""
    path = Path(args.models) / f"prompt{PROMPT_LEN}"
    if not (path / "train.parquet").exists():
        padded_prompts(arith_dir(args), str(path), model, PROMPT_LEN, Path(args.models) / "prep.log")
    return str(path)


def gpu_memory_gb(args: argparse.Namespace) -> float:
    """--gpu-memory-gb, else this machine's first GPU, else 80 (an H100). nvidia-smi, not torch: a CUDA context in
    this process would hold memory on GPU 0 through every run."""
    return args.gpu_memory_gb or round((nvidia_smi("memory.total") or [80 * 1024])[0] / 1024, 1)


# ---- running ----
def run_plan(command: list[str], env: dict | None = None) -> tuple[str, dict]:
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    text = done.stdout + done.stderr
    return text, plan_figures(text, done.returncode)


def nvidia_smi(field: str) -> list[int]:
    """`field` (MiB) of every GPU; empty without nvidia-smi."""
    try:
        text = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(v) for v in text.split() if v.isdigit()]


def execute(command: list[str], out: Path, gpus: int, timeout: float, env: dict | None = None) -> int:
    """Run `command` into out/console.log, sampling the first `gpus` GPUs' memory; run.json records the result."""
    peak, done = [0], threading.Event()

    def sample() -> None:  # nvidia-smi: every process on the GPU (vLLM's pool, NCCL, the allocator's cache)
        while not done.wait(0.5):
            peak[0] = max([peak[0], *nvidia_smi("memory.used")[:gpus]])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    with open(out / "console.log", "w") as log:
        log.write(f"command: {' '.join(command)}\n")
        log.flush()
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )  # its own group: a timeout ends every rank it started
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = 124
    done.set()
    sampler.join()
    (out / "run.json").write_text(
        json.dumps({"rc": rc, "wall_s": round(time.perf_counter() - start, 1), "peak_gib": round(peak[0] / 1024, 1)})
    )
    print(f"{out.name}: exit {rc} after {time.perf_counter() - start:.0f} s", flush=True)
    return rc


def run_point(point: Point, args: argparse.Namespace, model: str, data: str, extra: list[str]) -> int:
    out = Path(args.out) / point.name
    out.mkdir(parents=True, exist_ok=True)
    words = [*overrides(point, args, model, data, out), *extra]
    (out / "point.json").write_text(
        json.dumps(
            {
                "layout": point.layout,
                "gpus": point.gpus,
                "tp": point.tp,
                "prompts": args.prompts_per_gpu * point.gpus,
                "n": args.n,
            }
        )
    )
    (out / "plan.txt").write_text(run_plan(plan_command(words, gpu_memory_gb(args)))[0])
    return execute(train_command(point, words), out, point.gpus, args.timeout)


def seed_script(args: argparse.Namespace, extra: list[str]) -> None:
    """The seed script as written: DAGRL_PLAN=1 for its plan; otherwise also a --steps run into --out/seed_8b."""
    out = Path(args.out) / "seed_8b"
    out.mkdir(parents=True, exist_ok=True)
    model, arith = model_dir(args, "8b", args.plan_only), arith_dir(args)
    # the run's only additions: its length, metrics in a file, and where; none changes the layout or memory
    more = (
        []
        if args.plan_only
        else [
            f"trainer.total_training_steps={args.steps}",
            "trainer.logger=[console,jsonl]",
            f"trainer.default_local_dir={out}",
            *extra,
        ]
    )
    env = seed_env(model, arith, out)
    text = run_plan(
        ["bash", SEED_SCRIPT, *more, "--gpu-memory-gb", f"{gpu_memory_gb(args):g}"], {**env, "DAGRL_PLAN": "1"}
    )[0]
    (out / "plan.txt").write_text(text)
    print(
        f"$ DAGRL_PLAN=1 MODEL_PATH={model} TRAIN_DATA_PATH={arith}/train.parquet "
        f"TEST_DATA_PATH={arith}/test.parquet "
        f"bash {' '.join([SEED_SCRIPT, *more])} --gpu-memory-gb {gpu_memory_gb(args):g}\n{text}"
    )
    if not args.plan_only:
        (out / "point.json").write_text(json.dumps({"layout": "seed", "gpus": 8, "tp": 2, "prompts": 128, "n": 8}))
        execute(["bash", SEED_SCRIPT, *more], out, 8, args.timeout, env)
        print(report(args))


def plan_table(args: argparse.Namespace, points: list[Point], extra: list[str]) -> str:
    """dagrl.plan's estimates for every point, from a config-only model (no weights, no GPU)."""
    model, gb = model_dir(args, args.size, True), gpu_memory_gb(args)
    lines = [
        f"dagrl.plan estimates per GPU for Qwen3-{args.size} (GiB; GPUs of {gb:g} GiB), "
        f"{args.prompts_per_gpu} prompts x {args.n} "
        f"per GPU, {PROMPT_LEN} + {RESPONSE_LEN} tokens",
        "| point | actor | vLLM | prompts x n | rollout | log-prob | update | peak (phase) |",
        "|---" * 8 + "|",
    ]
    for p in points:
        words = [
            *overrides(p, args, model, str(Path(args.models) / f"prompt{PROMPT_LEN}"), Path(args.out) / p.name),
            *extra,
        ]
        fig = run_plan(plan_command(words, gb))[1]
        lines.append(
            f"| {p.name} | TP{p.tp} x DP{p.gpus // p.tp} | TP{p.tp} x DP{p.gpus // p.tp} | "
            f"{args.prompts_per_gpu * p.gpus} x {args.n} | {cell(fig.get('rollout'), 1)} | "
            f"{cell(fig.get('log-prob'), 1)} | {cell(fig.get('update'), 1)} | {plan_cell(fig)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--gpus", default="1,2,4,8")
    parser.add_argument("--layouts", default="dp,tp2")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--first-step", type=int, default=2, help="step 1 carries vLLM's first wake-up")
    parser.add_argument("--size", default="1.7b", help="the Qwen3 preset of the points' model")
    parser.add_argument("--prompts-per-gpu", type=int, default=16)
    parser.add_argument("--mini-per-gpu", type=int, default=8, help="prompts per GPU in a mini-batch")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument(
        "--train-tokens", type=int, default=4 * (PROMPT_LEN + RESPONSE_LEN), help="ppo_max_token_len_per_gpu"
    )
    parser.add_argument(
        "--logprob-tokens",
        type=int,
        default=16 * (PROMPT_LEN + RESPONSE_LEN),
        help="rollout.log_prob_max_token_len_per_gpu",
    )
    parser.add_argument(
        "--tokenizer",
        default=str(Path.home() / "models" / "SmolLM2-135M-Instruct"),
        help="a SmolLM2 tokenizer directory (the quickstart's model has one)",
    )
    parser.add_argument("--models", default="/tmp/weak_scaling", help="where the models and prompts are built")
    parser.add_argument("--arith", default="/tmp/weak_scaling/arithmetic", help="the arithmetic parquet directory")
    parser.add_argument("--gpu-memory-gb", type=float, default=None, help="for dagrl.plan (default: this GPU, or 80)")
    parser.add_argument("--timeout", type=float, default=560, help="seconds a point may run")
    parser.add_argument("--plan-only", action="store_true")
    parser.add_argument("--seed-script", action="store_true")
    parser.add_argument("--report", action="store_true", help="run nothing: the tables of the points in --out")
    args, extra = parser.parse_known_args()
    extra = [arg for arg in extra if arg != "--"]
    points = points_of(args.gpus, args.layouts)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.models).mkdir(parents=True, exist_ok=True)
    if args.report:
        print(report(args))
        return
    if args.seed_script:
        seed_script(args, extra)
    elif args.plan_only:
        print(plan_table(args, points, extra))
    else:
        model = model_dir(args, args.size, False)
        data = prompt_dir(args, model)
        failed = [p.name for p in points if run_point(p, args, model, data, extra)]
        print(report(args) + (f"\nfailed (see each console.log): {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    main()
