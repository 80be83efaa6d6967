"""The plan as text: layout, batch schedule, memory table."""
from __future__ import annotations

from dagrl.plan import Plan
from dagrl.plan.model import stage_layers
from dagrl.placement.groups import format_groups

_PARTS = (  # (key in StageMemory.parts, label); rows that are zero everywhere are left out
    ("weights", "actor weights"),
    ("gradients", "gradients (fp32 buffers)"),
    ("optimizer", "optimizer state"),
    ("reference", "reference weights (KL term)"),
    ("activations", "activations kept for backward"),
    ("logits", "logits of one micro-batch (update)"),
    ("log-prob pass", "log-prob/values pass (one layer + logits)"),
    ("hf rollout", "hf rollout model copy"),
    ("critic state", "critic weights + gradients + optimizer"),
    ("critic activations", "critic activations (its update)"),
    ("vllm", "vLLM weights + KV cache (while awake)"),
    ("overhead", "CUDA context, NCCL, allocator (assumed)"),
)


def _billions(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e8 else f"{count / 1e6:.2f}M"


def model_line(plan: Plan) -> str:
    m = plan.model
    text = (f"{m.model_type}: {_billions(m.total_params())} params, {m.layers} layers, hidden {m.hidden}, "
            f"{m.heads} heads / {m.kv_heads} KV heads of {m.head_dim}, vocab {m.vocab}")
    if m.moe:
        text += f"; {m.experts} experts (top-{m.topk}, FFN {m.moe_ffn}), {_billions(m.active_params())} active"
    return text


def layout_section(plan: Plan, limit: int) -> list[str]:
    lo, m = plan.layout, plan.model
    world = lo.world_size
    lines = [f"Parallel layout: {plan.nnodes} node(s) x {plan.gpus_per_node} GPU(s) = {world} ranks, "
             f"Megatron-Core order tp-cp-ep-dp-pp (ranks of a TP group are neighbours)",
             f"  actor/reference: TP={lo.tp} PP={lo.pp}" + (f" (VPP={lo.vpp})" if lo.vpp > 1 else "")
             + f" CP={lo.cp} DP={lo.dp}" + (f" EP={lo.ep} expert-TP={lo.etp} expert-DP={lo.expert_dp}" if m.moe else "")
             + f", sequence parallel {'on' if lo.sequence_parallel else 'off'}"]
    for name, groups in plan.groups.rows(m.moe):
        lines.append(f"  {name + ' groups':<17} {format_groups(groups, limit)}")
    if lo.pp > 1:
        stages = "; ".join(f"{s}: layers " + ", ".join(f"{chunk.start}-{chunk.stop - 1}"
                                                         for chunk in stage_layers(m, lo.pp, s, lo.vpp))
                           for s in range(lo.pp))
        lines.append(f"  pipeline stages   {stages} (embedding on 0, output layer on {lo.pp - 1})")
    lines.append(f"  rollout ({plan.rollout_name}): TP={lo.rollout_tp} DP={lo.rollout_dp}")
    lines.append(f"  {'rollout TP groups':<17} {format_groups(plan.groups.rollout_tp, limit)}")
    lines.append(f"  {'rollout DP groups':<17} {format_groups(plan.groups.rollout_dp, limit)}")
    return lines


def schedule_section(plan: Plan) -> list[str]:
    s = plan.schedule
    lines = [f"Batch schedule per training step ({s.total_steps} steps: {s.steps_per_epoch} per epoch)",
             f"  {s.prompts} prompts x n={s.n} = {s.responses} responses",
             f"  rollout: {s.layout.rollout_dp} DP rank(s) x {s.prompts_per_rollout_rank} prompts "
             f"({s.prompts_per_rollout_rank * s.n} responses) each",
             f"  actor:   {s.layout.dp} DP rank(s) x {s.responses_per_actor_rank} responses each",
             f"  update:  {s.mini_batches} mini-batch(es) x ppo_epochs {s.ppo_epochs} = {s.optimizer_steps} "
             f"optimizer step(s) per training step",
             f"           per rank and mini-batch: {s.mini_batch_rows_per_rank} responses = "
             f"{s.micro_batches_per_mini_batch} micro-batch(es) of {s.micro_batch}"]
    if s.layout.pp > 1:
        lines.append(f"           pipeline bubble {100 * s.pipeline_bubble:.0f}% ({s.micro_batches_per_mini_batch} "
                     f"micro-batches over {s.layout.pp} stages" + (f", VPP {s.layout.vpp}" if s.layout.vpp > 1 else "")
                     + ")")
    old, ref = s.old_log_prob_micro_batch, s.ref_log_prob_micro_batch
    lines.append("  old log-prob: " + (f"{s.log_prob_micro_batches(old)} micro-batch(es) of {old} per rank" if old
                                       else "skipped (one optimizer step per batch: the update's own log-probs)"))
    lines.append("  ref log-prob: " + (f"{s.log_prob_micro_batches(ref)} micro-batch(es) of {ref} per rank" if ref
                                       else "none (no KL term, no reference model)"))
    if s.critic:
        c = s.critic
        lines.append(f"  critic:  {c.mini_batches} mini-batch(es) x ppo_epochs {c.ppo_epochs}; per rank and "
                     f"mini-batch {c.mini_batch_rows_per_rank} responses = {c.micro_batches_per_mini_batch} "
                     f"micro-batch(es) of {c.micro_batch}; values: "
                     f"{s.log_prob_micro_batches(c.forward_micro_batch)} micro-batch(es) of {c.forward_micro_batch}")
    return lines


def memory_section(plan: Plan) -> list[str]:
    run, stages = plan.run, plan.memory
    header = ["stage 0", f"stage {plan.layout.pp - 1}"] if len(stages) > 1 else ["per GPU"]
    dtype = "bf16" if run.bf16 else "fp32"
    offloaded = [name for name, on in (("params", run.param_offload), ("grads", run.grad_offload),
                                       ("optimizer", run.optimizer_offload),
                                       ("reference params", run.reference and run.ref_param_offload)) if on]
    lines = [f"Memory estimate per GPU (GiB; {dtype} weights, "
             + ("distributed" if run.distributed_optimizer else "replicated") + " optimizer, recompute "
             + run.recompute.describe() + f", micro-batch {run.micro_batch} x {run.sequence_length} tokens"
             + (f", offload: {', '.join(offloaded)}" if offloaded else "") + ")",
             f"  {'':<42}" + "".join(f"{h:>11}" for h in header)]
    for key, label in _PARTS:
        values = [stage.parts[key] for stage in stages]
        if any(v > 0 for v in values):
            lines.append(f"  {label:<42}" + "".join(f"{v:>11.1f}" for v in values))
    lines.append("  phase totals:")
    for phase in stages[0].phases:
        lines.append(f"    {phase:<40}" + "".join(f"{stage.phases[phase]:>11.1f}" for stage in stages))
    peak_stage = max(stages, key=lambda stage: stage.peak)
    phase = max(peak_stage.phases, key=peak_stage.phases.get)
    peak, size = peak_stage.peak, run.gpu_memory_gib
    where = f"stage {peak_stage.stage}, {phase}" if len(stages) > 1 else phase
    if peak > size:
        lines.append(f"  WARNING: estimated peak {peak:.1f} GiB ({where}) exceeds the {size:.0f} GiB GPU: "
                     f"add ranks (TP/PP/EP, or DP with the distributed optimizer), offload, recompute, a smaller "
                     f"micro-batch, or a lower rollout.gpu_memory_utilization")
    else:
        lines.append(f"  peak {peak:.1f} GiB ({where}) of {size:.0f} GiB: fits ({100 * peak / size:.0f}%)")
    return lines


def render(plan: Plan, group_limit: int = 8) -> str:
    sections = [[f"dagrl plan for {model_line(plan)}"], layout_section(plan, group_limit), schedule_section(plan),
                memory_section(plan)]
    return "\n\n".join("\n".join(section) for section in sections) + "\n"

