"""The doctor's findings as text (one verdict line last) and as `doctor/...` metrics."""

from __future__ import annotations

from dagrl.doctor import fp8
from dagrl.doctor.numerics import FACTOR, Diagnosis
from dagrl.doctor.stages import stage_of

SHOWN = 6  # tensors listed per finding


def verdict(diagnosis: Diagnosis) -> str:
    """One line: the weights map exactly and the gap is the floor, or where the first difference is."""
    pairs = {pair.key: pair for pair in diagnosis.pairs}
    divergences = {d.side: d for d in diagnosis.divergences}
    weights = diagnosis.weights
    if diagnosis.stale:
        return (
            f"the weight sync leaves {len(diagnosis.stale)} of the rollout engine's tensors as it started (first: "
            f"{diagnosis.stale[0]}): the actor's export, or the layers the engine builds, do not cover this model; "
            "no log-probs were compared"
        )
    if diagnosis.ok and fp8.NAME in diagnosis.floors:
        return (
            f"the weights map exactly (the FP8 ones within their rounding); the remaining gap is the floor (actor "
            f"{pairs['actor_vs_hf'].ratio:.1f}x the {pairs['actor_vs_hf'].held_to} floor, rollout "
            f"{pairs['rollout_vs_hf'].ratio:.1f}x the {fp8.NAME} floor; a finding starts at {FACTOR:g}x, "
            f"{fp8.FACTOR:g}x for the FP8 rollout's pairs)"
        )
    if diagnosis.ok:
        return (
            f"the weights map exactly; the remaining gap is the floor (actor {pairs['actor_vs_hf'].ratio:.1f}x, "
            f"rollout {pairs['rollout_vs_hf'].ratio:.1f}x of it; a finding starts at {FACTOR:g}x)"
        )
    inexact = [name for name, _ in weights.differing] + weights.missing + weights.extra
    if "actor" in divergences:
        where = divergences["actor"].where
        stage_weights = [name for name in inexact if stage_of(name) == where]
        named = f"; the export differs from the checkpoint in {', '.join(stage_weights[:3])}" if stage_weights else ""
        how = "" if stage_weights else "; the weights round-trip exactly, so the mapping is wrong both ways alike"
        return f"mapping error: the actor parts from HF at {where}{named}{how} (its tensors are listed above)"
    if "rollout" in divergences or pairs["rollout_vs_hf"].exceeds:
        where = f" at {divergences['rollout'].where}" if "rollout" in divergences else ""
        return (
            f"the actor matches HF but the rollout parts from it{where} after the weight sync: the export or "
            f"the rollout's loader maps {', '.join(inexact[:3]) or 'a tensor'} wrongly"
        )
    if pairs["rollout_vs_actor"].exceeds:
        return "the actor and the rollout each match HF within the floor but not each other: compare their dtypes"
    return f"the log-probs agree, but the export differs from the checkpoint in {len(inexact)} tensors: {inexact[:3]}"


def render(diagnosis: Diagnosis, layout: str) -> str:
    lines = [f"numerics at {layout}:"]
    if diagnosis.stale:
        lines.append(f"  weight sync: {len(diagnosis.stale)} rollout tensors not filled, e.g.")
        lines += [f"    {name}" for name in diagnosis.stale[:SHOWN]]
    if diagnosis.floors:
        lines.append(
            "  floor (HF in the dtype vs HF fp32; fp32: vs fp64): "
            + ", ".join(f"{dtype} {value:.3g}" for dtype, value in diagnosis.floors.items())
        )
    if fp8.NAME in diagnosis.floors:
        lines.append(
            f"  {fp8.NAME} floor: HF in the rollout's dtype with every weight the sync quantizes as its FP8 round "
            "trip, vs HF fp32 (the weights' rounding only; vLLM also quantizes activations)"
        )
    for pair in diagnosis.pairs:
        flag = "  <- past the floor" if pair.exceeds else ""
        held = f"x the {pair.held_to} floor, a finding past {pair.factor:g}x" if pair.held_to else "x floor"
        lines.append(
            f"  {pair.pair}: mean {pair.mean:.3g}, max {pair.max:.3g} per token ({pair.ratio:.1f}{held}){flag}"
        )
    weights = diagnosis.weights
    worst = max(weights.max_diff.values(), default=0.0)
    lines.append(
        f"  export vs checkpoint: {len(weights.max_diff)} tensors compared, max abs difference {worst:.3g}"
        + ("" if weights.exact else f"; {len(weights.differing)} differ")
    )
    if weights.rounded:  # an FP8 rollout's weights: their round trip, within its rounding (weights.fp8_rounding)
        lines.append(
            f"    of which {len(weights.rounded)} FP8 weights as their round trip: at most "
            f"{max(weights.rounded.values()):.2f} of the rounding their scales allow (above 1: not the checkpoint's)"
        )
    for name, diff in weights.differing[:SHOWN]:
        lines.append(f"    {name}: max abs difference {diff:.3g}")
    for name in weights.missing[:SHOWN]:
        lines.append(f"    {name}: in the checkpoint, not exported")
    for name in weights.extra[:SHOWN]:
        lines.append(f"    {name}: exported, not in the checkpoint")
    factors = {pair.key: pair.factor for pair in diagnosis.pairs}
    for divergence in diagnosis.divergences:
        factor = factors.get(f"{divergence.side}_vs_hf", FACTOR)
        lines.append(f"  {divergence.side}: first stage past {factor:g}x its floor: {divergence.where}")
        for gap in divergence.gaps:
            lines.append(f"    {gap.stage}: relative difference {gap.gap:.3g} (floor {gap.floor:.3g})")
        lines += [f"    tensor {tensor}" for tensor in divergence.tensors]
    lines += [f"  note: {note}" for note in diagnosis.notes]
    lines.append(f"  took {diagnosis.seconds:.1f} s, of which {diagnosis.loading_s:.1f} s loading the HF references")
    lines.append(f"verdict: {verdict(diagnosis)}")
    return "\n".join(lines) + "\n"


def metrics(diagnosis: Diagnosis) -> dict[str, float]:
    """The figures as metrics: each pair's mean and ratio to its floor, the floors, the export's worst tensor."""
    out = {f"doctor/floor_{dtype}": value for dtype, value in diagnosis.floors.items()}
    for pair in diagnosis.pairs:
        out[f"doctor/{pair.key}_mean"] = pair.mean
        out[f"doctor/{pair.key}_max"] = pair.max
        out[f"doctor/{pair.key}_floor_ratio"] = pair.ratio
    weights = diagnosis.weights
    out["doctor/weights_max_abs_diff"] = max(weights.max_diff.values(), default=0.0)
    out["doctor/weights_inexact"] = float(len(weights.differing) + len(weights.missing) + len(weights.extra))
    out["doctor/rollout_tensors_stale"] = float(len(diagnosis.stale))
    out["doctor/ok"] = float(diagnosis.ok)
    return out
