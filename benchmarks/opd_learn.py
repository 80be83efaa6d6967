"""On-policy distillation against GRPO from the same start: held-out accuracy per step, same seeds, one table.

usage: python3 benchmarks/opd_learn.py --out DIR (--teacher HF_DIR | --teacher-from-grpo [--teacher-steps N])
           [--arms grpo,opd,opd_pure,remax] [--seeds 0[,1]] [--steps 20] [--test-freq 5]
           [--script examples/grpo_trainer/run_smollm2-135m-cpu.sh] [--report] [--extra "k=v ..."]

Each arm runs the --script (the CPU quickstart by default, or run_smollm2-135m-vllm.sh on a GPU) for --steps steps
with greedy held-out accuracy every --test-freq steps, one after the other, each in DIR/<arm>_seed<S>/:
  grpo      the script as it is: GRPO on the task reward (the baseline)
  opd       dag=opd with the --teacher: GRPO's advantage plus the teacher's per-token reverse KL
  opd_pure  dag=opd without the task reward (distillation.distillation_loss.use_task_rewards=false)
  remax     GRPO's graph with algorithm.adv_estimator=remax (a greedy baseline per prompt; no teacher)
With --teacher-from-grpo the teacher is the grpo arm's last step, merged with scripts/model_merger.py into
DIR/teacher (the grpo arm runs first; later seeds reuse the first seed's): distillation then has to beat the
very run that made its teacher. With --teacher-steps N (> --steps) the teacher is instead a GRPO run of N steps of
the first seed (DIR/teacher_train, more epochs over the same prompts): a teacher stronger than the run it races.
Every arm samples the same prompts in the same order (data.seed) from the same student. The table gives each arm's
accuracy at every evaluated step (the mean over seeds, with min-max when there are several), its seconds a step
(median), and the first evaluated step at which it reaches the teacher's accuracy less 0.05 (the teacher's is
measured first, by a validation-only run of the teacher). `--report` prints the table of DIR only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common import chosen_arms, learn_parser  # noqa: E402 - after the sys.path insert above

ARMS = {
    "grpo": [],
    "opd": ["dag=opd", "distillation.teacher_model.model_path={teacher}"],
    "opd_pure": [
        "dag=opd",
        "distillation.teacher_model.model_path={teacher}",
        "distillation.distillation_loss.use_task_rewards=False",
    ],
    "remax": ["algorithm.adv_estimator=remax"],
}
ACC = "val-core/"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = learn_parser(__doc__, "grpo,opd,opd_pure", 20, 5, "examples/grpo_trainer/run_smollm2-135m-cpu.sh")
    parser.add_argument("--teacher", default=str(Path.home() / "models" / "smollm2-grpo"))
    parser.add_argument("--teacher-from-grpo", action="store_true")
    parser.add_argument("--teacher-steps", type=int, default=0, help="train the teacher this long (> --steps)")
    return parser.parse_args(argv)


def run(
    name: str,
    overrides: list[str],
    seed: int,
    args: argparse.Namespace,
    model: str | None = None,
    steps: int = 0,
    keep: bool = False,
) -> None:
    """One run of the script into DIR/name; `keep` saves its last step (to become the teacher)."""
    steps = steps or args.steps
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SEED": str(seed), "CKPT_DIR": str(out / "ckpt"), "NGPUS": "1", "PYTHONUNBUFFERED": "1"}
    if model:
        env["MODEL_PATH"] = model
    common = [
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={args.test_freq}",
        f"trainer.save_freq={steps if keep else -1}",
        "trainer.resume_mode=disable",
        "trainer.val_before_train=True",
        "trainer.logger=[console,jsonl]",
    ]
    command = ["bash", args.script, *common, *overrides, *shlex.split(args.extra)]
    started = time.perf_counter()
    with open(out / "console.log", "w") as log:
        log.write("$ " + shlex.join(command) + "\n")
        log.flush()
        code = subprocess.call(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    (out / "run.json").write_text(json.dumps({"exit": code, "wall_s": time.perf_counter() - started}))
    if code != 0:
        sys.exit(f"{name} exited {code}: see {out / 'console.log'}")


def merge(actor_dir: Path, target: str) -> None:
    command = [
        sys.executable,
        "scripts/model_merger.py",
        "merge",
        "--backend",
        "megatron",
        "--local_dir",
        str(actor_dir),
        "--target_dir",
        target,
    ]
    if subprocess.call(command, cwd=ROOT) != 0:
        sys.exit(f"merging {actor_dir} failed")


def curve(directory: Path) -> tuple[dict[int, float], list[float]]:
    """(step -> held-out accuracy, seconds of each training step) of one run's metrics.jsonl."""
    path = directory / "ckpt" / "metrics.jsonl"
    accuracy, seconds = {}, []
    for line in path.read_text().splitlines() if path.is_file() else []:
        row = json.loads(line)
        scores = [v for k, v in row.items() if k.startswith(ACC) and "/acc/" in k]
        if scores:
            accuracy[row["step"]] = scores[0]
        if "timing_s/step" in row:
            seconds.append(row["timing_s/step"])
    return accuracy, seconds


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ({min(values):.3f}-{max(values):.3f})"


def report(args: argparse.Namespace) -> str:
    arms, seeds = args.arms.split(","), [int(s) for s in args.seeds.split(",")]
    teacher = [curve(args.out / f"teacher_seed{s}")[0].get(0) for s in seeds]
    teacher = [t for t in teacher if t is not None]
    target = statistics.fmean(teacher) - 0.05 if teacher else None
    curves = {arm: [curve(args.out / f"{arm}_seed{s}") for s in seeds] for arm in arms}
    steps = sorted({step for runs in curves.values() for accuracy, _ in runs for step in accuracy})
    lines = [
        f"held-out greedy accuracy by step ({len(seeds)} seed(s): mean, min-max over seeds)"
        + (f"; teacher {statistics.fmean(teacher):.3f}" if teacher else ""),
        "| arm | " + " | ".join(f"step {s}" for s in steps) + " | s/step (median) | first step >= teacher - 0.05 |",
        "|---|" + "---|" * (len(steps) + 2),
    ]
    for arm, runs in curves.items():
        cells = [
            spread([acc[s] for acc, _ in runs if s in acc]) if any(s in acc for acc, _ in runs) else "-" for s in steps
        ]
        seconds = [t for _, times in runs for t in times]
        means = {
            s: statistics.fmean([acc[s] for acc, _ in runs if s in acc])
            for s in steps
            if all(s in acc for acc, _ in runs)
        }
        reached = next((s for s in sorted(means) if target is not None and means[s] >= target), None)
        lines.append(
            f"| {arm} | "
            + " | ".join(cells)
            + f" | {statistics.median(seconds) if seconds else 0:.1f} | "
            + (str(reached) if reached is not None else "not reached")
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    arms = chosen_arms(args.arms, list(ARMS))
    if args.teacher_steps and (not args.teacher_from_grpo or args.teacher_steps <= args.steps):
        sys.exit("--teacher-steps needs --teacher-from-grpo and more steps than --steps")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.teacher_from_grpo:
        args.teacher = str(args.out / "teacher")
        arms = ["grpo"] + [arm for arm in arms if arm != "grpo"]
    if not args.report:
        if args.teacher_steps and not Path(args.teacher, "config.json").is_file():
            run("teacher_train", ["trainer.total_epochs=100"], seeds[0], args, steps=args.teacher_steps, keep=True)
            merge(args.out / "teacher_train" / "ckpt" / f"global_step_{args.teacher_steps}" / "actor", args.teacher)
        measured = False  # greedy validation: the teacher's accuracy is the same for every seed
        for seed in seeds:
            for arm in arms:
                taught = any("{teacher}" in o for o in ARMS[arm])
                if taught and not measured:  # the teacher's own held-out accuracy, once it exists
                    if args.teacher_from_grpo and not Path(args.teacher, "config.json").is_file():
                        merge(
                            args.out / f"grpo_seed{seed}" / "ckpt" / f"global_step_{args.steps}" / "actor", args.teacher
                        )
                    run(f"teacher_seed{seed}", ["trainer.val_only=True"], seed, args, model=args.teacher)
                    measured = True
                keep = arm == "grpo" and args.teacher_from_grpo and not args.teacher_steps
                run(f"{arm}_seed{seed}", [o.format(teacher=args.teacher) for o in ARMS[arm]], seed, args, keep=keep)
    table = report(args)
    (args.out / "report.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
