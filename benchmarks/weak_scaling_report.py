"""weak_scaling.py's reading side, on any machine: dagrl.plan's figures from its text, and the report's per-layout
tables of step and phase medians, tokens/s/GPU and efficiency from the points' metrics.jsonl, run.json and plan.txt."""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

PHASES = ("gen", "old_log_prob", "update", "switch", "rest")
PEAK = re.compile(r"peak ([\d.]+) GiB \(([^)]*)\) (of [\d.]+ GiB: fits|exceeds)")
PHASE_TOTAL = re.compile(r"^ +(rollout|log-prob|update) +([\d. ]+)$", re.M)


def plan_figures(text: str, rc: int) -> dict:
    """The plan's peak GiB, where it falls, whether it fits, and each phase's total (the largest stage's)."""
    if rc:
        return {"error": ([line for line in text.splitlines() if line.strip()] or ["no output"])[-1]}
    found = PEAK.search(text)
    if not found:
        return {"error": "no peak line in the plan"}
    totals = {name: max(float(v) for v in values.split()) for name, values in PHASE_TOTAL.findall(text)}
    return {"peak": float(found[1]), "where": found[2], "fits": found[3].endswith("fits"), **totals}


def phases(row: dict) -> dict[str, float]:
    """One step's seconds by phase; timing_s/gen includes the colocated switch (offload, wake, weight sync, sleep)."""
    switch = row.get("timing_s/rollout_switch", 0.0)
    named = {
        "gen": row["timing_s/gen"] - switch,
        "old_log_prob": row.get("timing_s/old_log_prob", 0.0),
        "update": row.get("timing_s/update_actor", 0.0),
        "switch": switch,
    }
    return {
        "step": row["timing_s/step"],
        **named,
        "rest": row["timing_s/step"] - sum(named.values()),
        "sync": row.get("timing_s/weight_sync", 0.0),
    }


def summary(directory: Path, first: int) -> dict | None:
    """Medians over steps >= first of a point's metrics.jsonl; None before a counted step is logged."""
    path = directory / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    steps = [row for row in rows if row.get("step", 0) >= first and "timing_s/step" in row]
    if not steps:
        return None
    meta = json.loads((directory / "point.json").read_text())
    per_step = [phases(row) for row in steps]
    result = {key: statistics.median(p[key] for p in per_step) for key in per_step[0]}
    result["tok_s_gpu"] = statistics.median(
        row["response_length/mean"] * meta["prompts"] * meta["n"] / row["timing_s/step"] / meta["gpus"] for row in steps
    )
    run = directory / "run.json"
    plan = directory / "plan.txt"
    result["measured_gib"] = json.loads(run.read_text()).get("peak_gib") if run.exists() else None
    result["plan"] = plan_figures(plan.read_text(), 0) if plan.exists() else {}
    return {**meta, "steps": len(steps), **result}


def cell(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def plan_cell(plan: dict) -> str:
    if "error" in plan:
        return f"error: {plan['error']}"
    return f"{plan['peak']:.1f} ({plan['where']})" + ("" if plan["fits"] else " EXCEEDS") if plan else "-"


def report(args: argparse.Namespace) -> str:
    out, lines = Path(args.out), []
    found = {d.name: s for d in sorted(out.glob("*_g*")) if d.is_dir() and (s := summary(d, args.first_step))}
    base = found.get("dp_g1")  # the 1-GPU point: both layouts' efficiency is against it
    lines.append(
        f"median of steps {args.first_step}..N; trained response tokens/s/GPU; efficiency against dp_g1"
        + ("" if base else " (not measured: efficiency not computed)")
        + "; grew most: the phase whose seconds grew most against dp_g1"
    )
    for layout in ("dp", "tp2"):
        rows = sorted((s for s in found.values() if s["layout"] == layout), key=lambda s: s["gpus"])
        if not rows:
            continue
        lines += [
            "",
            f"layout {layout}: actor TP{rows[0]['tp']} x DP=G/{rows[0]['tp']}, vLLM TP{rows[0]['tp']}",
            "| G | steps | step s | gen | old_log_prob | update | switch (sync) | rest | tokens/s/GPU | "
            "efficiency | grew most | plan peak GiB | nvidia-smi peak GiB |",
            "|---" * 13 + "|",
        ]
        for s in rows:
            grew = "-"
            if base and s is not base:
                name = max(PHASES, key=lambda p: s[p] - base[p])
                grew = f"{name} +{s[name] - base[name]:.2f} s (step {s['step'] - base['step']:+.2f})"
            eff = s["tok_s_gpu"] / base["tok_s_gpu"] if base else None
            lines.append(
                f"| {s['gpus']} | {s['steps']} | {s['step']:.2f} | {s['gen']:.2f} | {s['old_log_prob']:.2f} | "
                f"{s['update']:.2f} | {s['switch']:.2f} ({s['sync']:.2f}) | {s['rest']:.2f} | "
                f"{s['tok_s_gpu']:,.0f} | {cell(eff, 3)} | {grew} | {plan_cell(s['plan'])} | "
                f"{cell(s['measured_gib'], 1)} |"
            )
        if base:
            last = rows[-1]
            eff = last["tok_s_gpu"] / base["tok_s_gpu"]
            lines.append(
                f"efficiency at G={last['gpus']}: {eff:.3f} ({'meets' if eff >= 0.9 else 'misses'} the "
                f">= 0.90 goal{'' if last['gpus'] == 8 else ', which is set at G=8'})"
            )
        if rows[0] is not base and len(rows) > 1:  # against dp_g1 a layout's own cost shows; this is its scaling
            first, last = rows[0], rows[-1]
            lines.append(
                f"within layout {layout}: G={last['gpus']} keeps {last['tok_s_gpu'] / first['tok_s_gpu']:.3f} "
                f"of G={first['gpus']}'s tokens/s/GPU"
            )
    seed = summary(out / "seed_8b", args.first_step) if (out / "seed_8b").is_dir() else None
    if seed:
        lines += [
            "",
            f"seed script (8 GPUs, 128 prompts x 8): step {seed['step']:.2f} s, gen {seed['gen']:.2f}, "
            f"old_log_prob {seed['old_log_prob']:.2f}, update {seed['update']:.2f}, switch {seed['switch']:.2f} "
            f"(weight sync {seed['sync']:.2f}), rest {seed['rest']:.2f}; {seed['tok_s_gpu']:,.0f} tokens/s/GPU; "
            f"peak GiB plan {plan_cell(seed['plan'])}, nvidia-smi {cell(seed['measured_gib'], 1)}",
        ]
    return "\n".join(lines)
