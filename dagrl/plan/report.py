"""The plan as text: layout, batch schedule, memory table."""

from __future__ import annotations

from dagrl.placement import Pool
from dagrl.plan import Plan, RolloutPool
from dagrl.plan.fp8 import fp8_rollout_lines
from dagrl.plan.model import stage_layers
from dagrl.placement.groups import format_groups

_PARTS = (  # (key in StageMemory.parts, label); rows that are zero everywhere are left out
    ("weights", "actor weights"),
    ("gradients", "gradients (fp32 buffers)"),
    ("optimizer", "optimizer state"),
    ("reference", "reference weights (KL term)"),
    ("teacher", "teacher weights (dag=opd)"),
    ("activations", "activations kept for backward"),
    ("logits", "logits of one micro-batch (update)"),
    ("log-prob pass", "log-prob/values pass (one layer + logits)"),
    ("lora merge", "LoRA merge of one linear (merged forward)"),
    ("hf rollout", "hf rollout model copy"),
    ("critic state", "critic weights + gradients + optimizer"),
    ("critic activations", "critic activations (its update)"),
    ("vllm", "vLLM weights + KV cache (while awake)"),
    ("overhead", "CUDA context, NCCL, allocator (assumed)"),
)


_ROLLOUT_PARTS = (  # a GPU of the rollout pool (two pools): the engine alone
    ("rollout weights", "rollout weights"),
    ("kv cache", "KV cache + working memory (to the share)"),
    ("overhead", "CUDA context, NCCL, allocator (assumed)"),
)


def _billions(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e8 else f"{count / 1e6:.2f}M"


def model_line(plan: Plan) -> str:
    m = plan.model
    text = (
        f"{m.model_type}: {_billions(m.total_params())} params, {m.layers} layers, hidden {m.hidden}, "
        f"{m.heads} heads / {m.kv_heads} KV heads of {m.head_dim}, vocab {m.vocab}"
    )
    if m.moe:
        text += f"; {m.experts} experts (top-{m.topk}, FFN {m.moe_ffn}), {_billions(m.active_params())} active"
    return text


def _ranks(pool: Pool) -> str:
    last = pool.first_rank + pool.size - 1
    return f"rank {last}" if pool.size == 1 else f"ranks {pool.first_rank}-{last}"


def placement_line(plan: Plan) -> str:
    """`pools: rollout ranks 0-1 (1 node x 2), train ranks 2-5 (1 node x 4)`."""
    return (
        "pools: "
        + ", ".join(
            f"{pool.name} {_ranks(pool)} ({pool.size // pool.per_node} node"
            f"{'s' if pool.size // pool.per_node > 1 else ''} x {pool.per_node})"
            for pool in plan.placement.pools
        )
        + f" (actor_rollout_ref.hybrid_engine=false: {plan.placement.world_size} ranks in all)"
    )


def _actor_lines(plan: Plan, limit: int) -> list[str]:
    """A dense model's one grid; an MoE model's attention grid and its experts' grid over the same ranks, each with
    AReaL's name of it (d<DP>p<PP>t<TP>c<CP> and d<expert-DP>p<PP>t<expert-TP>e<EP>)."""
    lo, m = plan.layout, plan.model
    vpp = f" (VPP={lo.vpp})" if lo.vpp > 1 else ""
    sequence_parallel = f", sequence parallel {'on' if lo.sequence_parallel else 'off'}"
    if not m.moe:
        lines = [f"  actor/reference: TP={lo.tp} PP={lo.pp}{vpp} CP={lo.cp} DP={lo.dp}{sequence_parallel}"]
    else:
        lines = [
            f"  actor/reference attention: TP={lo.tp} CP={lo.cp} DP={lo.dp} PP={lo.pp}{vpp}{sequence_parallel} "
            f"(d{lo.dp}p{lo.pp}t{lo.tp}c{lo.cp})"
        ]
    lines += [
        f"  {name + ' groups':<17} {format_groups(groups, limit)}" for name, groups in plan.groups.attention_rows()
    ]
    if m.moe:
        lines.append(
            f"  actor/reference experts: EP={lo.ep} expert-TP={lo.etp} expert-DP={lo.expert_dp} PP={lo.pp} "
            f"(d{lo.expert_dp}p{lo.pp}t{lo.etp}e{lo.ep}), over the same ranks"
        )
        lines += [
            f"  {name + ' groups':<17} {format_groups(groups, limit)}" for name, groups in plan.groups.expert_rows()
        ]
    if lo.pp > 1:
        stages = "; ".join(
            f"{s}: layers "
            + ", ".join(f"{chunk.start}-{chunk.stop - 1}" for chunk in stage_layers(m, lo.pp, s, lo.vpp))
            for s in range(lo.pp)
        )
        lines.append(f"  pipeline stages   {stages} (embedding on 0, output layer on {lo.pp - 1})")
    return lines


def _rollout_lines(plan: Plan, layout, groups, limit: int) -> list[str]:
    return [
        f"  rollout ({plan.rollout_name}): TP={layout.rollout_tp} DP={layout.rollout_dp}",
        f"  {'rollout TP groups':<17} {format_groups(groups.rollout_tp, limit)}",
        f"  {'rollout DP groups':<17} {format_groups(groups.rollout_dp, limit)}",
    ]


def _ranks_on_a_node(plan: Plan, count: int) -> str:
    return f"{count} GPU(s)" if plan.cpu_memory_gib is None else f"{count} CPU process(es)"


def layout_section(plan: Plan, limit: int) -> list[str]:
    if plan.two_pools:
        return pools_section(plan, limit)
    world = plan.layout.world_size
    return (
        [
            f"Parallel layout: {plan.nnodes} node(s) x {_ranks_on_a_node(plan, plan.gpus_per_node)} = {world} ranks, "
            f"Megatron-Core order tp-cp-ep-dp-pp (ranks of a TP group are neighbours)"
        ]
        + _actor_lines(plan, limit)
        + _rollout_lines(plan, plan.layout, plan.groups, limit)
    )


def pools_section(plan: Plan, limit: int) -> list[str]:
    """Two pools: the training pool's Megatron groups and the rollout pool's groups, both in global launch ranks."""
    train, rollout = plan.placement.pool("train"), plan.rollout_pool
    return (
        [
            placement_line(plan),
            "",
            f"Training pool ({_ranks(train)}): {plan.nnodes} node(s) x {_ranks_on_a_node(plan, plan.gpus_per_node)} "
            f"= {train.size} ranks, Megatron-Core order tp-cp-ep-dp-pp over the pool (ranks of a TP group are "
            f"neighbours); every rank receives each step's whole batch from the rollout pool",
        ]
        + _actor_lines(plan, limit)
        + [
            "",
            f"Rollout pool ({_ranks(rollout.pool)}): {rollout.pool.size // rollout.pool.per_node} node(s) x "
            f"{_ranks_on_a_node(plan, rollout.pool.per_node)} = {rollout.pool.size} rank(s), no actor (weights "
            f"pushed after each training step)",
        ]
        + _rollout_lines(plan, rollout.layout, rollout.groups, limit)
    )


def schedule_section(plan: Plan) -> list[str]:
    s = plan.schedule
    rollout_dp = plan.rollout_pool.layout.rollout_dp if plan.two_pools else s.layout.rollout_dp
    per_rank = s.prompts // rollout_dp
    if s.steps_per_epoch is not None:
        length = f"{s.total_steps} steps: {s.steps_per_epoch} per epoch"
    else:  # planned without the data files
        length = "data files not found: steps per epoch unknown, " + (
            f"{s.total_steps} steps (trainer.total_training_steps)"
            if s.total_steps
            else "set trainer.total_training_steps for a step count"
        )
    lines = [
        f"Batch schedule per training step ({length})",
        f"  {s.prompts} prompts x n={s.n} = {s.responses} responses",
        f"  rollout: {rollout_dp} DP rank(s) x {per_rank} prompts ({per_rank * s.n} responses) each"
        + (" (rollout pool)" if plan.two_pools else ""),
        f"  actor:   {s.layout.dp} DP rank(s) x {s.responses_per_actor_rank} responses each"
        + (" (training pool)" if plan.two_pools else ""),
        f"  update:  {s.mini_batches} mini-batch(es) x ppo_epochs {s.ppo_epochs} = {s.optimizer_steps} "
        f"optimizer step(s) per training step",
        f"           per rank and mini-batch: {s.mini_batch_rows_per_rank} responses = "
        f"{s.micro_batches_per_mini_batch} micro-batch(es) of {s.micro_batch}",
    ]
    if s.layout.pp > 1:
        lines.append(
            f"           pipeline bubble {100 * s.pipeline_bubble:.0f}% ({s.micro_batches_per_mini_batch} "
            f"micro-batches over {s.layout.pp} stages" + (f", VPP {s.layout.vpp}" if s.layout.vpp > 1 else "") + ")"
        )
    old, ref = s.old_log_prob_micro_batch, s.ref_log_prob_micro_batch
    lines.append(
        "  old log-prob: "
        + (
            f"{s.log_prob_micro_batches(old)} micro-batch(es) of {old} per rank"
            if old
            else "skipped (one optimizer step per batch: the update's own log-probs)"
        )
    )
    lines.append(
        "  ref log-prob: "
        + (
            f"{s.log_prob_micro_batches(ref)} micro-batch(es) of {ref} per rank"
            if ref
            else "none (no KL term, no reference model)"
        )
    )
    if plan.run.teacher is not None:
        rows = plan.run.teacher_log_prob_micro_batch
        lines.append(f"  teacher log-prob: {s.log_prob_micro_batches(rows)} micro-batch(es) of {rows} per rank")
    if s.critic:
        c = s.critic
        lines.append(
            f"  critic:  {c.mini_batches} mini-batch(es) x ppo_epochs {c.ppo_epochs}; per rank and "
            f"mini-batch {c.mini_batch_rows_per_rank} responses = {c.micro_batches_per_mini_batch} "
            f"micro-batch(es) of {c.micro_batch}; values: "
            f"{s.log_prob_micro_batches(c.forward_micro_batch)} micro-batch(es) of {c.forward_micro_batch}"
        )
    return lines


def memory_section(plan: Plan) -> list[str]:
    run, stages = plan.run, plan.memory
    header = ["stage 0", f"stage {plan.layout.pp - 1}"] if len(stages) > 1 else [f"per {plan.rank_unit}"]
    dtype = "bf16" if run.bf16 else "fp32"
    offloaded = [
        name
        for name, on in (
            ("params", run.param_offload),
            ("grads", run.grad_offload),
            ("optimizer", run.optimizer_offload),
            ("reference params", run.reference and run.ref_param_offload),
            ("teacher params", run.teacher is not None and run.teacher_param_offload),
        )
        if on
    ]
    lines = [
        f"Memory estimate per {plan.rank_unit}{' of the training pool' if plan.two_pools else ''} (GiB; "
        f"{dtype} weights, "
        + ("distributed" if run.distributed_optimizer else "replicated")
        + " optimizer, recompute "
        + run.recompute.describe()
        + f", micro-batch {run.micro_batch} x {run.sequence_length} tokens"
        + (f", offload: {', '.join(offloaded)}" if offloaded else "")
        + (f", LoRA rank {run.lora_rank}: frozen base, the reference is the base" if run.lora_rank else "")
        + (f", critic LoRA rank {run.critic.lora_rank}" if run.critic and run.critic.lora_rank else "")
        + ")",
        f"  {'':<42}" + "".join(f"{h:>11}" for h in header),
    ]
    for key, label in _PARTS:
        values = [stage.parts[key] for stage in stages]
        if any(v > 0 for v in values):
            lines.append(f"  {_label(plan, key, label):<42}" + "".join(f"{v:>11.1f}" for v in values))
    lines.append("  phase totals:")
    for phase in stages[0].phases:
        lines.append(f"    {phase:<40}" + "".join(f"{stage.phases[phase]:>11.1f}" for stage in stages))
    peak_stage = max(stages, key=lambda stage: stage.peak)
    phase = max(peak_stage.phases, key=peak_stage.phases.get)
    where = f"stage {peak_stage.stage}, {phase}" if len(stages) > 1 else phase
    lines.append(
        _peak_line(
            plan,
            peak_stage.peak,
            where,
            run.gpu_memory_gib,
            "add ranks (TP/PP/EP, or DP with the distributed optimizer), offload, recompute, a smaller "
            "micro-batch" + ("" if plan.two_pools else ", or a lower rollout.gpu_memory_utilization"),
        )
    )
    return lines


def _label(plan: Plan, key: str, label: str) -> str:
    return (
        "torch runtime, gloo, allocator (assumed)" if key == "overhead" and plan.cpu_memory_gib is not None else label
    )


def _peak_line(plan: Plan, peak: float, where: str, size: float, fixes: str) -> str:
    """The peak against one GPU; on a CPU run the peak alone (the node's processes share its RAM: machine_section)."""
    if plan.cpu_memory_gib is not None:
        return f"  peak {peak:.1f} GiB a process ({where})"
    if peak > size:
        return f"  WARNING: estimated peak {peak:.1f} GiB ({where}) exceeds the {size:.0f} GiB GPU: {fixes}"
    return f"  peak {peak:.1f} GiB ({where}) of {size:.0f} GiB: fits ({100 * peak / size:.0f}%)"


def rollout_memory_section(plan: Plan) -> list[str]:
    """Two pools: one rollout GPU holds the engine alone."""
    pool: RolloutPool = plan.rollout_pool
    run, mem = plan.run, pool.memory
    dtype = "bf16" if run.rollout_bf16 else "fp32"
    vllm = plan.rollout_name == "vllm"
    lines = [
        f"Memory estimate per {plan.rank_unit} of the rollout pool (GiB; {plan.rollout_name}, {dtype} weights"
        + (
            f" / rollout TP {pool.layout.rollout_tp}, gpu_memory_utilization {run.gpu_memory_utilization}"
            f" = {run.gpu_memory_utilization * run.gpu_memory_gib:.1f} GiB"
            if vllm
            else ", a full model copy per rank"
        )
        + "; no actor, gradients or optimizer)",
        f"  {'':<42}{'per ' + plan.rank_unit:>11}",
    ]
    for key, label in _ROLLOUT_PARTS:
        value = mem.parts[key]
        if key == "rollout weights":
            label = f"{plan.rollout_name} weights ({dtype}" + (
                f", 1/{pool.layout.rollout_tp} each)" if vllm and pool.layout.rollout_tp > 1 else ")"
            )
        if value > 0:
            lines.append(f"  {_label(plan, key, label):<42}{value:>11.1f}")
    if vllm and mem.parts["kv cache"] <= 0:
        lines.append(
            f"  WARNING: vLLM's weights ({mem.parts['rollout weights']:.1f} GiB per GPU) leave no room for a "
            f"KV cache in its {run.gpu_memory_utilization * run.gpu_memory_gib:.1f} GiB share: raise "
            f"actor_rollout_ref.rollout.gpu_memory_utilization or the rollout TP"
        )
    lines.append(
        _peak_line(
            plan,
            mem.peak,
            "rollout",
            run.gpu_memory_gib,
            "lower actor_rollout_ref.rollout.gpu_memory_utilization or raise the rollout TP",
        )
    )
    return lines


def machine_section(plan: Plan) -> list[str]:
    """A CPU run: the processes of one node (both pools' with two) against the memory they share."""
    actor_peak = max(stage.peak for stage in plan.memory)
    pools = (
        [(plan.gpus_per_node, "", actor_peak)]
        if not plan.two_pools
        else [
            (plan.placement.pool("train").per_node, "training ", actor_peak),
            (plan.rollout_pool.pool.per_node, "rollout ", plan.rollout_pool.memory.peak),
        ]
    )
    total, ram = sum(count * peak for count, _, peak in pools), plan.cpu_memory_gib
    terms = " + ".join(f"{count} {kind}process(es) x {peak:.1f} GiB" for count, kind, peak in pools)
    if total > ram:
        verdict = (
            "WARNING: exceeds it: fewer processes a node (trainer.n_gpus_per_node), fewer "
            "actor_rollout_ref.model.trainable_top_layers, a smaller micro-batch or shorter sequences"
        )
    else:
        verdict = f"fits ({100 * total / ram:.0f}%)"
    return [
        f"Memory of one node (a CPU run: its processes share this machine's {ram:.1f} GiB of RAM)",
        f"  {terms} = {total:.1f} GiB at their peaks, of {ram:.1f} GiB: {verdict}",
    ]


def rollout_tp(plan: Plan) -> int:
    return (plan.rollout_pool.layout if plan.two_pools else plan.layout).rollout_tp


def render(plan: Plan, group_limit: int = 8) -> str:
    sections = (
        [
            [f"dagrl plan for {model_line(plan)}"],
            layout_section(plan, group_limit),
            schedule_section(plan),
            memory_section(plan),
        ]
        + ([rollout_memory_section(plan)] if plan.two_pools else [])
        + ([machine_section(plan)] if plan.cpu_memory_gib is not None else [])
        + ([fp8_rollout_lines(plan.model, rollout_tp(plan))] if plan.rollout_quantization == "fp8" else [])
    )
    return "\n\n".join("\n".join(section) for section in sections) + "\n"
