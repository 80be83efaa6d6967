"""Launch to the first training step, with vLLM's cache cold and kept with the run.

Three launches of the same job in one run directory, one training step each:
  1. fresh   — a new run; its vLLM cache (actor_rollout_ref.rollout.cache_dir=<run>/vllm_cache) is empty
  2. cold    — a resume whose vLLM cache is an empty directory: a resume on a machine that never ran the job, with
               vLLM's own cache (~/.cache/vllm, the default)
  3. warm    — a resume with the cache the first launch left in the run directory
For each: seconds from launch to the start of its step (the jsonl row's time minus the step's own time), the phases
main_dag logs before the Trainer ("start-up: …"), the Trainer's "ready in N s", vLLM's "engine up in N s" (one per
engine), the step's seconds and its rollout switch's (`timing_s/rollout_switch`: a launch's first switch also
allocates the host memory the actor offloads into) and the launch's wall time.

    python3 benchmarks/startup.py --out DIR -- bash examples/grpo_trainer/run_smollm2-135m-vllm.sh KEY=VALUE ...
    python3 benchmarks/startup.py --report --out DIR

The command after `--` starts a training job; the benchmark appends the run directory, step and resume overrides
and the vLLM cache_dir (not with --hf: a command that runs the hf rollout, which has no such cache).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHES = ("fresh", "cold", "warm")
ENGINE_UP = re.compile(r"vLLM engine up in ([\d.]+) s")
START_UP = re.compile(r"start-up: ([\d.]+) s composing the config, ([\d.]+) s of pre-flight, ([\d.]+) s importing")
READY = re.compile(r"ready in (\d+) s")


def launch_overrides(name: str, step: int, out: Path, vllm: bool = True) -> list[str]:
    words = [
        f"trainer.default_local_dir={out / 'run'}",
        f"trainer.total_training_steps={step}",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.resume_mode=auto",
        "trainer.max_actor_ckpt_to_keep=1",
    ]  # a 1.7B checkpoint is ~24 GB
    if not vllm:  # the hf rollout has no compile cache (pre-flight refuses cache_dir there)
        return words
    cache = out / "empty_cache" if name == "cold" else out / "run" / "vllm_cache"  # cold: as on a new machine
    return [*words, f"actor_rollout_ref.rollout.cache_dir={cache}"]


def run_launch(name: str, step: int, command: list[str], out: Path, vllm: bool = True) -> dict:
    log = out / f"{name}.log"
    if name == "cold":
        shutil.rmtree(out / "empty_cache", ignore_errors=True)
    launched = time.time()
    with open(log, "w") as stream:
        rc = subprocess.run(
            [*command, *launch_overrides(name, step, out, vllm)],
            cwd=ROOT,
            stdout=stream,
            stderr=subprocess.STDOUT,
        ).returncode
    row = {"launch": name, "rc": rc, "launched": launched, "wall_s": round(time.time() - launched, 1)}
    (out / f"{name}.json").write_text(json.dumps(row))
    print(f"{name}: exit {rc} after {row['wall_s']:.0f} s", flush=True)
    return row


def step_row(out: Path, step: int) -> dict | None:
    path = out / "run" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return next((r for r in reversed(rows) if r.get("step") == step), None)


def report(out: Path) -> str:
    lines = [
        "| launch | what vLLM's cache holds | launch to step start s | compose / pre-flight / imports + process "
        "group s | trainer ready s | vLLM engine up s | step s | its rollout switch s | wall s | exit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    what = {
        "fresh": "nothing (new run)",
        "cold": "nothing (resume, as on a machine that never ran the job)",
        "warm": "the first launch's (resume, cache in the run directory)",
    }
    for step, name in enumerate(LAUNCHES, start=1):
        path = out / f"{name}.json"
        if not path.exists():
            continue
        launch = json.loads(path.read_text())
        row = step_row(out, step)
        log = (out / f"{name}.log").read_text(errors="replace")
        engine = [float(s) for s in ENGINE_UP.findall(log)]
        first = f"{row['time'] - row['timing_s/step'] - launch['launched']:.1f}" if row else "-"
        step_s = f"{row['timing_s/step']:.2f}" if row else "-"
        switch = row.get("timing_s/rollout_switch") if row else None  # the first one allocates the offload's memory
        switch_s = "-" if switch is None else f"{switch:.2f}"
        up = "/".join(f"{s:.1f}" for s in engine) or "-"  # one per engine on this machine's ranks
        phases = START_UP.search(log)
        before = " / ".join(phases.groups()) if phases else "-"
        ready = READY.search(log)
        lines.append(
            f"| {name} | {what[name]} | {first} | {before} | {ready.group(1) if ready else '-'} | {up} | "
            f"{step_s} | {switch_s} | {launch['wall_s']:.1f} | {launch['rc']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--report", action="store_true", help="only print the table of an earlier run")
    parser.add_argument("--hf", action="store_true", help="the command runs the hf rollout: no vLLM cache_dir is set")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command that starts training")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.report:
        if not command:
            raise SystemExit("startup.py: give the training command after --")
        if (args.out / "run").exists():
            raise SystemExit(f"startup.py: {args.out / 'run'} exists; give a new --out")
        args.out.mkdir(parents=True, exist_ok=True)
        for step, name in enumerate(LAUNCHES, start=1):
            if run_launch(name, step, command, args.out, not args.hf)["rc"] != 0:
                break
    print(report(args.out))


if __name__ == "__main__":
    main()
