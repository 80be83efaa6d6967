"""The reading half of benchmarks/vs_verl.py, on any machine: both sides' files parsed into the step table, the
held-out accuracy of every seed against the learn job's goal, the curves as an SVG, and whether a rerun repeated an
earlier run of the same side (`--repeat-of`). File layout and table definitions: vs_verl.py's docstring."""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

PROMPTS, N, PROMPT_LEN, RESPONSE_LEN = 32, 8, 512, 1024  # both jobs: 32 prompts x 8 responses a step
FIRST = 3  # steps 1-2 carry one-time costs (CUDA graph warm-up, allocator growth, torch.compile on verl's side)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STEP_LINE = re.compile(r"(?:^|[\s)])step:(\d+) - (.*)$")
NUMPY = re.compile(r"^np\.\w+\((.*)\)$")  # verl prints numpy scalars as np.float64(0.5)
ACC = re.compile(r"^val-core/.+/(acc|reward)/mean@\d+$")
SHARED = "shared_gpu.txt"  # written by --parallel into each run's directory: the report then prints no step table


def number(text: str) -> float | str:
    text = text.strip()
    found = NUMPY.match(text)
    text = found[1] if found else text
    try:
        return float(text)
    except ValueError:
        return text


def console_steps(text: str) -> dict[int, dict]:
    """{step: {key: value}} from `step:N - key:value - ...` console lines (Ray's `(TaskRunner pid=…)` prefix, ANSI
    colours and a tqdm carriage return before the line are dropped)."""
    rows: dict[int, dict] = {}
    for line in text.split("\n"):
        found = STEP_LINE.search(ANSI.sub("", line).split("\r")[-1])
        if found:
            row = rows.setdefault(int(found[1]), {})
            for item in found[2].split(" - "):  # a negative value reads "key:-0.1": no spaces around its dash
                key, sep, value = item.partition(":")
                if sep:
                    row[key.strip()] = number(value)
    return rows


def side_rows(out: Path, side: str) -> dict[int, dict]:
    jsonl = out / f"{side}_metrics.jsonl"
    if jsonl.exists():
        rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
        return {int(row["step"]): row for row in rows}
    log = out / f"{side}.log"
    return console_steps(log.read_text(errors="replace")) if log.exists() else {}


def versions(out: Path, side: str) -> str:
    log = out / f"{side}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    found = re.search(r"^versions: (.*)$", text, re.M)
    if found:
        return found[1]
    engine = re.search(r"LLM engine \(v([\w.+-]+)\)", text)  # a log from before the versions line: vLLM's own
    return f"not recorded (vllm {engine[1]}, from its engine line)" if engine else "not recorded"


def accuracy(row: dict) -> float | None:
    keys = sorted((key for key in row if ACC.match(key)), key=lambda key: "/reward/" in key)  # acc first
    return float(row[keys[0]]) if keys else None


def phases(row: dict, side: str) -> dict[str, float]:
    """One step's seconds by phase (see the module docstring for weight sync)."""
    sync = row.get("timing_s/update_weights" if side == "verl" else "timing_s/rollout_switch", 0.0)
    named = {
        "generate": row["timing_s/gen"] - (sync if side == "dagrl" else 0.0),
        "old log-prob": row.get("timing_s/old_log_prob", 0.0),
        "update": row["timing_s/update_actor"],
        "weight sync": sync,
    }
    return {"whole step": row["timing_s/step"], **named, "everything else": row["timing_s/step"] - sum(named.values())}


def summary(out: Path, side: str, first: int) -> dict[str, float]:
    rows = side_rows(out, side)
    steps = [row for step, row in sorted(rows.items()) if step >= first and "timing_s/step" in row]
    result: dict[str, float] = {}
    if steps:
        per_step = [phases(row, side) for row in steps]
        result = {name: statistics.median(p[name] for p in per_step) for name in per_step[0]}
        result["tokens/s/GPU"] = statistics.median(
            row["response_length/mean"] * PROMPTS * N / row["timing_s/step"] for row in steps
        )
    mem = out / f"{side}_mem.log"
    samples = [int(v) for v in re.findall(r"^\s*(\d+)", mem.read_text(), re.M)] if mem.exists() else []
    if samples:
        result["peak GPU memory, MiB"] = max(samples)
    run = json.loads((out / f"{side}_run.json").read_text()) if (out / f"{side}_run.json").exists() else {}
    if "1" in run.get("step_line_s", {}) and "timing_s/step" in rows.get(1, {}):
        result["launch to first step, s"] = run["step_line_s"]["1"] - rows[1]["timing_s/step"]
    if "wall_s" in run:
        result["whole wall, s"] = run["wall_s"]
    result["steps"] = len(steps)
    return result


def cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(args: argparse.Namespace) -> str:
    out, first = Path(args.out), FIRST
    lines = [f"vs_verl {args.job}: {PROMPTS} prompts x {N}, 1 GPU, seed {args.seed}; files in {out}"]
    for side in ("verl", "dagrl"):
        run = out / f"{side}_run.json"
        rc = f" (exit {json.loads(run.read_text())['rc']})" if run.exists() else ""
        lines.append(f"{side:5}: {versions(out, side)}{rc}")
    rows = {side: side_rows(out, side) for side in ("verl", "dagrl")}
    evaluated = sorted({step for side in rows for step, row in rows[side].items() if accuracy(row) is not None})
    if evaluated:
        lines += ["", "held-out greedy accuracy", "| step | verl | dagrl | dagrl - verl |", "|---:|---:|---:|---:|"]
        for step in evaluated:
            verl, dagrl = (accuracy(rows[side].get(step, {})) for side in ("verl", "dagrl"))
            diff = f"{dagrl - verl:+.3f}" if verl is not None and dagrl is not None else "-"
            lines.append(f"| {step} | {cell(verl)} | {cell(dagrl)} | {diff} |")
    last = max(max(rows["verl"], default=0), max(rows["dagrl"], default=0))
    shared = out / SHARED
    sums: dict[str, dict[str, float]] = {"verl": {}, "dagrl": {}}
    if shared.exists():  # times and memory of runs that shared the GPU measure the sharing, not the trainers
        lines += ["", f"no step table: {shared.read_text().strip()}"]
    else:
        sums = {side: summary(out, side, first) for side in sums}
        lines += [
            "",
            f"median of steps {first}..{last} (verl {sums['verl']['steps']} steps, dagrl "
            f"{sums['dagrl']['steps']}); seconds unless named",
            "| phase | verl | dagrl | dagrl/verl |",
            "|---|---:|---:|---:|",
        ]
        names = [
            "whole step",
            "generate",
            "old log-prob",
            "update",
            "weight sync",
            "everything else",
            "tokens/s/GPU",
            "peak GPU memory, MiB",
            "launch to first step, s",
            "whole wall, s",
        ]
        for name in names:
            verl, dagrl = sums["verl"].get(name), sums["dagrl"].get(name)
            ratio = "-"
            if verl and dagrl is not None:
                ratio = f"{dagrl / verl:.2f}" + (" !" if abs(dagrl / verl - 1) > 0.10 else "")
            digits = 0 if "MiB" in name or "tokens" in name or name.endswith(", s") else 3
            lines.append(f"| {name} | {cell(verl, digits)} | {cell(dagrl, digits)} | {ratio} |")
        lines.append("! : dagrl and verl differ by more than 10 %")
    both = sorted(
        step
        for step in set(rows["verl"]) & set(rows["dagrl"])
        if "prompt_length/mean" in rows["verl"][step] and "prompt_length/mean" in rows["dagrl"][step]
    )
    if both:  # the same data.seed draws the same batches on both sides (dagrl draws verl's order)
        same = [
            step
            for step in both
            if abs(rows["verl"][step]["prompt_length/mean"] - rows["dagrl"][step]["prompt_length/mean"]) < 1e-6
        ]
        lines.append(f"same prompts (equal prompt_length/mean): {len(same)} of {len(both)} steps")
    if sums["verl"].get("tokens/s/GPU") and sums["dagrl"].get("tokens/s/GPU"):
        gain = sums["dagrl"]["tokens/s/GPU"] / sums["verl"]["tokens/s/GPU"]
        lines.append(f"dagrl/verl tokens/s/GPU: {gain:.2f}x (the throughput job's goal: >= 1.3x)")
    return "\n".join(lines)


def seed_dirs(out: Path) -> list[Path]:
    """The seed<S>/ directories of a --seeds run, by seed."""
    return sorted(out.glob("seed*"), key=lambda path: int(path.name[4:]) if path.name[4:].isdigit() else -1)


def learn_curves(out: Path) -> dict[str, dict[str, dict[int, float]]]:
    """{side: {seed directory name: {step: held-out accuracy}}}, the seeds in order."""
    return {
        side: {
            path.name: {step: accuracy(row) for step, row in side_rows(path, side).items() if accuracy(row) is not None}
            for path in seed_dirs(out)
        }
        for side in ("verl", "dagrl")
    }


def curves_svg(curves: dict[str, dict[str, dict[int, float]]], title: str) -> str:
    """The held-out accuracy curves as a small SVG (no plotting library on the machines): one line per seed, named
    by its directory, verl blue, dagrl orange, seeds after the first dashed; x the step, y the accuracy 0..1."""
    width, height, left, bottom, top, right = 640, 360, 50, 40, 30, 120
    steps = sorted({step for side in curves for curve in curves[side].values() for step in curve}) or [0]
    last = max(steps[-1], 1)
    x = lambda step: left + (width - left - right) * step / last  # noqa: E731 - a short local helper
    y = lambda acc: height - bottom - (height - bottom - top) * acc  # noqa: E731 - a short local helper
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="18">{title}</text>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#ddd"/>'
            f'<text x="{left - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.2f}</text>'
        )
    for step in steps:
        parts.append(f'<text x="{x(step):.1f}" y="{height - bottom + 16}" text-anchor="middle">{step}</text>')
    parts.append(f'<text x="{(width - right + left) / 2}" y="{height - 6}" text-anchor="middle">step</text>')
    legend = 0
    for side, colour in (("verl", "#1f77b4"), ("dagrl", "#ff7f0e")):
        for index, (name, curve) in enumerate(curves[side].items()):
            points = " ".join(f"{x(step):.1f},{y(acc):.1f}" for step, acc in sorted(curve.items()))
            dash = ' stroke-dasharray="5,4"' if index else ""
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{points}"/>')
            ly = top + 16 * legend
            parts.append(
                f'<line x1="{width - right + 10}" x2="{width - right + 40}" y1="{ly}" y2="{ly}" '
                f'stroke="{colour}" stroke-width="2"{dash}/><text x="{width - right + 46}" y="{ly + 4}">'
                f"{side} {name}</text>"
            )
            legend += 1
    return "\n".join(parts + ["</svg>"]) + "\n"


def seeds_report(out: Path) -> str:
    """Held-out accuracy of every seed of both sides (--out/seed<S>/) and, at each evaluated step, whether dagrl's
    mean over its seeds reaches verl's less the seeds' spread (the largest max - min of either side at that step)."""
    curves = learn_curves(out)
    names = list(curves["verl"])
    steps = sorted({step for side in curves for curve in curves[side].values() for step in curve})
    lines = [
        f"held-out greedy accuracy over {len(names)} seeds ({', '.join(names)})",
        "| step | "
        + " | ".join(f"verl {n}" for n in names)
        + " | "
        + " | ".join(f"dagrl {n}" for n in names)
        + " | verl mean | dagrl mean | spread | dagrl >= verl - spread |",
        "|---:|" + "---:|" * (2 * len(names) + 4),
    ]
    met_all = bool(steps)
    for step in steps:
        values = {side: [curve.get(step) for curve in curves[side].values()] for side in curves}
        cells = [cell(v) for side in ("verl", "dagrl") for v in values[side]]
        known = {side: [v for v in values[side] if v is not None] for side in values}
        if known["verl"] and known["dagrl"]:
            mean = {side: statistics.mean(known[side]) for side in known}
            spread = max(max(known[side]) - min(known[side]) for side in known)
            met = mean["dagrl"] >= mean["verl"] - spread - 1e-9
            met_all &= met
            tail = [cell(mean["verl"]), cell(mean["dagrl"]), cell(spread), "yes" if met else "**no**"]
        else:
            met_all, tail = False, ["-", "-", "-", "-"]
        lines.append(f"| {step} | " + " | ".join(cells + tail) + " |")
    lines.append(f"dagrl reaches verl at every evaluated step, within the seeds' spread: {'yes' if met_all else 'no'}")
    return "\n".join(lines)


# ---- a rerun against an earlier run of the same side ----
UNREPEATABLE = re.compile(r"^(timing_s/|perf/|time$|step$|throughput)|mem")  # wall times and memory differ anyway


def repeats(rows: dict[int, dict], earlier: dict[int, dict]) -> dict:
    """How a run's rows repeat an earlier run's on the steps both logged: values compared and equal (times and memory
    left out) and the first step with a difference, with the largest relative difference there."""
    compared = equal = 0
    first = None
    steps = sorted(set(rows) & set(earlier))
    for step in steps:
        keys = [key for key in rows[step] if key in earlier[step] and not UNREPEATABLE.search(key)]
        same = [rows[step][key] == earlier[step][key] for key in keys]
        compared, equal = compared + len(keys), equal + sum(same)
        if first is None and not all(same):
            now, then = rows[step], earlier[step]
            differ = [key for key, ok in zip(keys, same) if not ok]
            numeric = [key for key in differ if all(isinstance(row[key], (int, float)) for row in (now, then))]
            key = max(numeric, key=lambda k: abs(now[k] - then[k]) / max(abs(then[k]), 1e-12), default=differ[0])
            first = (step, key, now[key], then[key])
    return {"steps": len(steps), "compared": compared, "equal": equal, "first": first}


def repeat_report(out: Path, earlier: Path) -> str:
    """Whether each side's runs in --out (each seed directory, or --out itself) repeat those in `earlier`, value for
    value, and their held-out accuracy beside the earlier run's. A trainer whose seeded runs repeat themselves can be
    compared on two seeds; one whose reruns differ needs its own rerun spread beside the seeds'."""
    pairs = [(path.name, path, earlier / path.name) for path in seed_dirs(out) if (earlier / path.name).is_dir()]
    pairs = pairs or [(out.name, out, earlier)]
    lines = [
        f"{out} against the earlier run {earlier}: the steps both logged, values other than times and memory",
        "| side | run | steps | values | equal | first difference (step, key: this / earlier) |",
        "|---|---|---:|---:|---:|---|",
    ]
    accs = []
    for side in ("verl", "dagrl"):
        for name, this, before in pairs:
            rows, old = side_rows(this, side), side_rows(before, side)
            if not rows or not old:
                continue
            found = repeats(rows, old)
            first = "none"
            if found["first"] is not None:
                step, key, this_value, old_value = found["first"]
                shown = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in (this_value, old_value)]
                first = f"{step}, {key}: {shown[0]} / {shown[1]}"
            lines.append(f"| {side} | {name} | {found['steps']} | {found['compared']} | {found['equal']} | {first} |")
            for step in sorted(set(rows) & set(old)):
                pair = accuracy(rows[step]), accuracy(old[step])
                if None not in pair:
                    accs.append((side, name, step, *pair))
    if accs:
        lines += [
            "",
            "held-out greedy accuracy, this run / the earlier one",
            "| side | run | step | this | earlier |",
            "|---|---|---:|---:|---:|",
        ]
        lines += [f"| {side} | {name} | {step} | {cell(a)} | {cell(b)} |" for side, name, step, a, b in accs]
    return "\n".join(lines)
