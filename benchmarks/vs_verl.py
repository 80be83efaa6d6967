"""dagrl against verl 0.9.1 on one GPU: the same GRPO job run by each trainer, one after the other, and the tables.

usage: python3 benchmarks/vs_verl.py --job learn|throughput --out DIR [--sides verl,dagrl] [--report] [--steps N]
           [--seeds 0[,1...]] [--smol DIR] [--arith DIR] [--model DIR] [--data DIR] [--train-tokens 6144]
           [--logprob-tokens 24576] [--timeout 560] [--verl-extra "k=v ..."] [--dagrl-extra "k=v ..."] [--dry-run]
           [--parallel] [--plot FILE.svg] [--repeat-of DIR]

On a GPU machine with verl installed apart from dagrl (benchmarks/verl_kit/README.md, "Rerun") it runs each side in
--sides as a subprocess, then prints the tables; `--report` runs nothing and prints the tables of the files already
in --out, on any machine. With several --seeds each seed runs (both sides, one after the
other) into --out/seed<S>/, and the report adds the held-out accuracy of every seed and whether dagrl's mean reaches
verl's within the seeds' spread at each evaluated step (the learn job's goal); `--repeat-of EARLIER`
(with --report) adds whether each side's runs repeat those of an earlier --out, value for value (a trainer whose
reruns differ has a run-to-run spread that two seeds do not show). The tables are vs_verl_report.py's. `--parallel`
(learn only) starts every seed of every side at once on the one GPU, each vLLM with a fixed KV cache (`shared_gpu`):
the accuracy tables in the time of the slowest run; their step tables are left out, since shared times measure the
sharing. Jobs:
  learn       SmolLM2-135M-Instruct (--smol) on the arithmetic task (--arith): 32 prompts x 8, responses <= 12,
              lr 1e-5, grad clip 1.0, KL off, T=1, greedy held-out every 4 steps, 32 steps. verl runs
              benchmarks/verl_kit/run_smollm2_grpo.sh, dagrl examples/grpo_trainer/run_smollm2-135m-vllm.sh.
  throughput  a random Qwen3-1.7B-shaped model (--model, built with scripts/init_random_model.py when absent),
              prompts of exactly 512 tokens (--data, built with benchmarks/verl_data.py when absent), 256 responses of
              exactly 1,024 tokens (EOS ignored), gpu_memory_utilization 0.5, CUDA graphs, dynamic batching with the
              same token budgets on both sides (--train-tokens, --logprob-tokens), no validation, 6 steps.
Files in --out, per side S: S.log (a `versions:` line from S's own environment, then S's console), S_run.json (exit
code, wall seconds, seconds from launch to each `step:N` console line; rewritten at every step line, so a run cut
short keeps its step times, with exit code null), S_mem.log (nvidia-smi memory.used every
0.5 s); dagrl_metrics.jsonl (dagrl's jsonl logger). verl's numbers come from its console `step:N - key:value` lines.

The step table is the median over steps 3..N of each phase: generate, old log-prob, update, weight sync and
everything else (the step minus those four, per step). Weight sync is the switch of the GPU between training and
generation: verl's timing_s/update_weights (vLLM wakes, weights sync, KV cache back; its sleep stays in its gen) and
dagrl's timing_s/rollout_switch (actor offloads, vLLM wakes, weights sync, KV cache back, sleep), which this script
takes out of dagrl's timing_s/gen. Launch to first step: when step 1's console line appeared minus step 1's seconds
(learn: includes the held-out pass before step 1, on both sides). Peak memory: the highest nvidia-smi sample (all
processes on the GPU; the first of CUDA_VISIBLE_DEVICES when set, so that two jobs can share a host of two GPUs).
Ratios are dagrl/verl; `!` marks a difference over 10 %. The report also counts the steps whose batches hold the
same prompts on both sides (equal prompt_length/mean; dagrl draws verl's prompt order for the same data.seed).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, padded_prompts, random_qwen3  # noqa: E402 - after the sys.path insert above
from vs_verl_report import (
    ANSI,
    PROMPT_LEN,
    RESPONSE_LEN,
    SHARED,
    STEP_LINE,
    curves_svg,
    learn_curves,
    repeat_report,
    report,
    seeds_report,
)

STEPS = {"learn": 32, "throughput": 6}
VERSIONS = {
    "verl": ["verl", "vllm", "torch", "transformers", "ray"],
    "dagrl": ["vllm", "torch", "transformers", "megatron.core", "transformer_engine"],
}
# printed from each side's own environment: verl runs with the verl kit's PYTHONPATH in front of the vLLM kit's
VERSION_SNIPPET = (
    "import importlib, sys\n"
    "def v(name):\n"
    "    try:\n"
    "        return getattr(importlib.import_module(name), '__version__', '?')\n"
    "    except Exception as err:\n"
    "        return f'missing ({type(err).__name__})'\n"
    "print('versions: ' + ', '.join(f'{n} {v(n)}' for n in sys.argv[1:]), flush=True)"
)
VERL_ENV = 'eval "$(bash benchmarks/verl_kit/build.sh env)" && '


# ---- running (GPU machine) ----
def overrides(side: str, args: argparse.Namespace) -> list[str]:
    """The job's overrides on top of the side's script; equal keys on both sides unless a side lacks one."""
    common = [f"trainer.total_training_steps={args.steps}", "trainer.resume_mode=disable"]
    # verl keeps its actor on the GPU while it generates (its *_offload flags are off), and so does dagrl here; verl
    # scores each response in its agent loop as it finishes, and dagrl scores beside its old log-prob pass
    resident = (
        ["actor_rollout_ref.rollout.offload_train_state=False", "reward_model.launch_reward_fn_async=True"]
        if side == "dagrl"
        else []
    )
    if args.job == "learn":
        return common + resident + (shared_gpu(side) if args.parallel else [])
    both = [
        f"data.max_prompt_length={PROMPT_LEN}",
        f"data.max_response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.ignore_eos=True",
        "actor_rollout_ref.rollout.enforce_eager=False",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        "actor_rollout_ref.rollout.max_num_seqs=1024",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={args.train_tokens}",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={args.logprob_tokens}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=-1",
    ]
    if side == "verl":  # unset, verl sizes vLLM for max_position_embeddings (40960); dagrl for prompt + response
        return common + both + [f"actor_rollout_ref.rollout.max_model_len={PROMPT_LEN + RESPONSE_LEN}"]
    # verl keeps data.val_files (it builds the validation set even when it never validates); dagrl needs none
    return common + both + resident + ["actor_rollout_ref.actor.megatron.param_dtype=bfloat16", "data.val_files=null"]


def shared_gpu(side: str) -> list[str]:
    """--parallel: runs that start together on one GPU. vLLM sizes its KV cache by profiling the GPU's free memory,
    which another process starting beside it changes (vLLM asserts, or sizes a cache that does not fit); a fixed
    cache skips the profile and changes no token (4 GiB holds 180,000 of SmolLM2's, the job needs < 30,000 at once).
    verl: a Ray cluster of its own, never one another run started (`address=local`), and no dashboard (one port)."""
    fixed = [f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={4 << 30}"]
    return fixed + (
        ["+ray_kwargs.ray_init.address=local", "+ray_kwargs.ray_init.include_dashboard=False"] if side == "verl" else []
    )


def command(side: str, args: argparse.Namespace) -> tuple[str, dict]:
    """The side's shell command and the environment variables its script reads."""
    env = {
        "MODEL_PATH": args.model,
        "DATA_DIR": args.data,
        "NGPUS": "1",
        "SEED": str(args.seed),
        "PYTHONUNBUFFERED": "1",
    }
    script = {
        "verl": "benchmarks/verl_kit/run_smollm2_grpo.sh",
        "dagrl": "examples/grpo_trainer/run_smollm2-135m-vllm.sh",
    }
    extra = shlex.split(args.verl_extra if side == "verl" else args.dagrl_extra)
    if side == "verl":
        extra = [f"trainer.default_local_dir=/tmp/vs_verl/verl_{args.job}_seed{args.seed}", *extra]
    else:
        env["CKPT_DIR"] = f"/tmp/vs_verl/dagrl_{args.job}_seed{args.seed}"  # its metrics.jsonl and data cache
        env["PYTHONPATH"] = f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"
        if args.parallel:  # torchrun's rendezvous port, one per run beside the others
            env["PET_MASTER_PORT"] = str(29700 + args.seed)
    words = [script[side], *overrides(side, args), *extra]
    return (VERL_ENV if side == "verl" else "") + "exec bash " + " ".join(map(shlex.quote, words)), env


def smi_gpu() -> list[str]:
    """nvidia-smi's `-i` for the GPU this job runs on, the first of CUDA_VISIBLE_DEVICES, so that two jobs on two GPUs
    of one host each watch their own (with CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA counts as nvidia-smi does); all GPUs
    when it is unset."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return ["-i", first] if first.isdigit() else []


def gpu_used_mib() -> list[int]:
    try:
        text = subprocess.run(
            ["nvidia-smi", *smi_gpu(), "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(v) for v in text.split() if v.isdigit()]


def wait_for_idle_gpu(limit_s: float = 120) -> None:
    """The previous side's processes (Ray's workers, vLLM's engine) may hold the GPU a while after its exit."""
    end = time.time() + limit_s
    while time.time() < end and max(gpu_used_mib() or [0]) > 1500:
        time.sleep(2)


def run_side(side: str, args: argparse.Namespace) -> None:
    out = Path(args.out)
    shell, env = command(side, args)
    env = {**os.environ, **env}
    if "CKPT_DIR" in env:  # dagrl keeps an ended run's rows (and refuses to start beside them): a rerun starts fresh
        for name in ("metrics.jsonl", "prompt_ledger.jsonl"):
            Path(env["CKPT_DIR"], name).unlink(missing_ok=True)
    if not args.parallel:
        wait_for_idle_gpu()
    with open(out / f"{side}.log", "wb") as log:
        prefix = VERL_ENV if side == "verl" else ""
        versions = f"{prefix}python3 -c {shlex.quote(VERSION_SNIPPET)} {' '.join(VERSIONS[side])}"
        subprocess.run(["bash", "-c", versions], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        log.write(f"command: {shell}\n".encode())
        log.flush()
        with open(out / f"{side}_mem.log", "w") as mem_log:
            try:
                mem = subprocess.Popen(
                    ["nvidia-smi", *smi_gpu(), "--query-gpu=memory.used", "--format=csv,noheader", "-lms", "500"],
                    stdout=mem_log,
                    stderr=subprocess.DEVNULL,
                )
            except OSError:
                mem = None
            # the launch clock starts after the versions line: importing vLLM there must not count as start-up
            launch, seen, lock, finished = time.time(), {}, threading.Lock(), []
            proc = subprocess.Popen(
                ["bash", "-c", shell],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
                start_new_session=True,
            )

            def pump() -> None:  # bytes: tqdm's carriage returns stay as they are in the log
                for raw in proc.stdout:
                    log.write(raw)
                    found = STEP_LINE.search(ANSI.sub("", raw.decode(errors="replace")).split("\r")[-1])
                    if found and found[1] not in seen:
                        seen[found[1]] = round(time.time() - launch, 2)
                        with lock:  # a cut run keeps these; never after the final write below
                            if not finished:
                                write_run(out, side, None, time.time() - launch, seen, shell)

            # a reader thread: the clock stops when the side exits, even if a stray process holds the pipe open
            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            try:
                rc = proc.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                rc = 124
            wall = time.time() - launch
            try:  # the side's leftovers (Ray's raylet and workers, torchrun's children): its own session only
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            reader.join(timeout=10)
            if mem is not None:
                mem.terminate()
    if side == "dagrl" and Path(env["CKPT_DIR"], "metrics.jsonl").exists():
        (out / "dagrl_metrics.jsonl").write_bytes(Path(env["CKPT_DIR"], "metrics.jsonl").read_bytes())
    with lock:
        finished.append(True)
        write_run(out, side, rc, wall, seen, shell)
    print(f"{side}: exit {rc} after {wall:.0f} s, {len(seen)} step lines -> {out / (side + '.log')}", flush=True)


def write_run(out: Path, side: str, rc: int | None, wall: float, seen: dict, shell: str) -> None:
    """S_run.json, replaced whole (a reader never sees half a file); rc None while the side still runs."""
    path = out / f"{side}_run.json"
    path.with_suffix(".tmp").write_text(
        json.dumps({"rc": rc, "wall_s": round(wall, 1), "step_line_s": dict(seen), "command": shell}, indent=1)
    )
    path.with_suffix(".tmp").replace(path)


def prepare_throughput(args: argparse.Namespace) -> None:
    """The random model and the 512-token prompts, built once per machine (a no-op when they are there)."""
    log = Path(args.out) / "prep.log"
    if not (Path(args.model) / "config.json").exists():
        random_qwen3("1.7b", args.model, args.smol, log, "--dtype", "bf16", "--device", "cuda")
    if not (Path(args.data) / "train.parquet").exists():
        padded_prompts(args.arith, args.data, args.model, PROMPT_LEN, log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=sorted(STEPS), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sides", default="verl,dagrl", help="which sides to run, in order")
    parser.add_argument("--report", action="store_true", help="run nothing: the tables of the files in --out")
    parser.add_argument("--dry-run", action="store_true", help="print each side's command and exit")
    parser.add_argument("--steps", type=int, default=None, help="training steps (learn 32, throughput 6)")
    parser.add_argument("--seeds", default="0", help="comma-separated; several: each into --out/seed<S>/")
    parser.add_argument("--smol", default="/tmp/smol", help="SmolLM2-135M-Instruct (learn; the throughput tokenizer)")
    parser.add_argument("--arith", default="/tmp/data/arithmetic", help="the arithmetic parquet directory")
    parser.add_argument("--model", default=None, help="learn: --smol; throughput: /tmp/q17")
    parser.add_argument("--data", default=None, help="learn: --arith; throughput: /tmp/data/prompt512")
    parser.add_argument(
        "--train-tokens",
        type=int,
        default=4 * (PROMPT_LEN + RESPONSE_LEN),
        help="throughput: ppo_max_token_len_per_gpu, both sides",
    )
    parser.add_argument(
        "--logprob-tokens",
        type=int,
        default=16 * (PROMPT_LEN + RESPONSE_LEN),
        help="throughput: rollout.log_prob_max_token_len_per_gpu, both sides",
    )
    parser.add_argument("--timeout", type=float, default=560, help="seconds a side may run")
    parser.add_argument("--verl-extra", default="", help="more verl overrides, one string")
    parser.add_argument("--dagrl-extra", default="", help="more dagrl overrides, one string")
    parser.add_argument("--plot", default=None, help="with several --seeds: the held-out accuracy curves as an SVG")
    parser.add_argument(
        "--repeat-of",
        default=None,
        help="with --report: whether the runs in --out repeat those in this earlier --out, value for value",
    )
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="learn: start every seed of every side at once on the one GPU (accuracy only)",
    )
    args = parser.parse_args()
    args.steps = args.steps or STEPS[args.job]
    learn = args.job == "learn"
    args.model = args.model or (args.smol if learn else "/tmp/q17")
    args.data = args.data or (args.arith if learn else "/tmp/data/prompt512")
    sides = [side for side in args.sides.split(",") if side]
    if set(sides) - {"verl", "dagrl"}:
        raise SystemExit(f"--sides: verl and/or dagrl, not {args.sides}")
    if args.parallel and not learn:
        raise SystemExit("--parallel: the learn job only (the throughput job's times need the GPU to one run)")
    try:
        seeds = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
    except ValueError:
        raise SystemExit(f"--seeds: comma-separated integers, e.g. 0,1 (got {args.seeds!r})") from None

    def seeded(seed: int, where: Path | None = None) -> argparse.Namespace:
        """args for one seed's run (into `where`)."""
        return argparse.Namespace(**{**vars(args), "seed": seed, **({"out": str(where)} if where else {})})

    if args.dry_run:
        for seed in seeds:
            for side in sides:
                shell, env = command(side, seeded(seed))
                print(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k != "PYTHONPATH"), shell)
        return
    out = Path(args.out)
    runs = [(seed, out / f"seed{seed}" if len(seeds) > 1 else out) for seed in seeds]
    for _, where in runs:
        where.mkdir(parents=True, exist_ok=True)
    todo = [] if args.report else [(side, seeded(seed, where)) for seed, where in runs for side in sides]
    if args.parallel and todo:  # accuracy does not depend on timing: every run at once, one wall for all
        for _, where in runs:
            (where / SHARED).write_text(
                f"{len(todo)} runs shared one GPU (--parallel): their times and memory measure the sharing\n"
            )
        threads = [threading.Thread(target=run_side, args=job) for job in todo]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for side, run_args in [] if args.parallel else todo:
        if not learn:
            prepare_throughput(run_args)  # once per machine: a no-op when the model and data are there
        run_side(side, run_args)
    for seed, where in runs:
        print(report(seeded(seed, where)), end="\n\n")
    if args.repeat_of:
        print(repeat_report(out, Path(args.repeat_of)), end="\n\n")
    if len(seeds) > 1:
        print(seeds_report(out))
        if args.plot:
            Path(args.plot).write_text(curves_svg(learn_curves(out), "held-out greedy accuracy, SmolLM2-135M GRPO"))


if __name__ == "__main__":
    main()
