"""A per-GPU memory estimate for one layout, by training phase. Every formula is written out here.

Model state (per rank, from model.rank_params):
  weights     = params x 2 bytes (bf16) or 4 (fp32)
  gradients   = trainable params x 4: dagrl's Megatron DDP reduces gradients in fp32 buffers
  optimizer   = trainable params x 12 (bf16: fp32 main params + two fp32 Adam moments) or x 8 (fp32: moments),
                divided over DP x CP (dense) and expert-DP (experts) with use_distributed_optimizer
  reference   = the actor's weights again when a KL term needs the frozen reference
Activations kept for backward, per token of a micro-batch, per layer (elements of the activation dtype), with
flash attention (no S^2 term) and no dropout:
  norms       4h: both RMSNorms' inputs and outputs (2h when "layernorm" is recomputed)
  attention   2q + 2kv: Q, K, V and the attention output (q = heads x head_dim, kv = kv_heads x head_dim);
              + q + kv for Qwen3's QK-norm inputs; all / TP
  dense MLP   3f: fc1's gate and up outputs and the SwiGLU output; / TP (0 when "mlp" is recomputed)
  MoE MLP     topk x (2h + ETP x h + 3 f_moe): the permuted tokens in and out, the tokens gathered over
              expert-TP and each expert's fc1/SwiGLU outputs, balanced routing assumed (0 when "moe" is
              recomputed, - topk x f_moe for "moe_act")
  Sequence parallelism divides the h-sized terms (and the MoE term, whose tokens are split first) by TP;
  CP divides everything by CP. Full recompute keeps only each recompute unit's input (h per token) plus one
  unit's full activations while it is recomputed.
  Pipeline: stage s of 1F1B holds min(M, PP - s) micro-batches; interleaved (VPP = v) holds
  min(M x v, 2 (PP - s - 1) + (v - 1) PP + 1) model chunks of layers / (PP x v) layers each.
Logits (last stage): rows x positions x vocab / TP, positions = the response only (dagrl projects only there)
  or the whole sequence under sequence parallelism; bytes per logit = the logit (2 or 4) + an fp32 copy (bf16)
  + exp (4) + entropy product (4, when entropy is computed) + the fp32 gradient (4, update only).
Log-prob passes keep no activations: one layer's working set (the training per-layer figure) plus the logits.
Rollout: vLLM takes gpu_memory_utilization x GPU memory while awake; with free_cache_engine it sleeps (weights
and KV cache released) during training. The hf rollout keeps a full model copy per rank. The rollout phase counts
the actor's idle state beside vLLM: so it is at start-up (vLLM starts beside the resident actor) and while generating
with rollout.offload_train_state=false; the default moves that state to the host while generating.
Separate pools (actor_rollout_ref.hybrid_engine=false): a training GPU holds no rollout engine (no rollout phase);
a rollout GPU holds the engine alone: vLLM's weights in the rollout dtype / rollout TP plus the KV cache it sizes
to fill gpu_memory_utilization x GPU memory, or the hf rollout's full model copy.
Offload (param/grad/optimizer_offload, and the reference's own ref.megatron.param_offload) moves that state to
the host outside the phases that use it.
Critic (graphs with a critic node, dag=ppo): the actor's decoder with a value head (h + 1) instead of the LM head,
with its own state, offload flags and micro-batches; its update is a phase of its own.
Runtime overhead (CUDA context, NCCL communicators, allocator slack) is an assumed constant.
Checked against dagrl's measured actor-update peaks on 2xH200 (benchmarks/actor_mfu.py): -2 % for Qwen3-8B at
TP2+SP and -9 % for Qwen3-1.7B at DP2 (docs/plan.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dagrl.placement import WorldLayout
from dagrl.plan.model import ModelShape, RankParams, lora_layer_params, lora_merge_bytes, rank_params, stage_layers

GIB = float(1 << 30)
RUNTIME_OVERHEAD_GIB = 2.0


@dataclass(frozen=True)
class Recompute:
    granularity: str | None = None  # None | "full" | "selective"
    method: str | None = None  # "uniform" | "block" (full)
    num_layers: int | None = None
    modules: tuple[str, ...] = ()  # selective: what is recomputed

    def describe(self) -> str:
        if self.granularity == "full":
            return f"full ({self.method}, {self.num_layers} layer(s) per unit)"
        if self.granularity == "selective":
            return f"selective ({', '.join(self.modules)})"
        return "none"


def recompute_from_config(gradient_checkpointing: bool, overrides: dict[str, Any]) -> Recompute:
    """What dagrl's transformer_config() hands Megatron: model.enable_gradient_checkpointing means full, uniform,
    one layer per unit unless override_transformer_config sets recompute_granularity; overrides win."""
    settings: dict[str, Any] = {}
    if gradient_checkpointing and "recompute_granularity" not in overrides:
        settings = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    settings.update({k: v for k, v in overrides.items() if k.startswith("recompute_")})
    granularity = settings.get("recompute_granularity")
    modules = settings.get("recompute_modules") or ["core_attn"]
    return Recompute(
        granularity=granularity,
        method=settings.get("recompute_method"),
        num_layers=settings.get("recompute_num_layers"),
        modules=tuple(modules) if granularity == "selective" else (),
    )


@dataclass(frozen=True)
class CriticSettings:
    """The PPO critic: its model shape (critic.model.path, else the actor's), batches, recompute and offload."""

    shape: ModelShape
    micro_batch: int = 1
    micro_batches: int = 1
    forward_micro_batch: int = 1
    recompute: Recompute = field(default_factory=Recompute)
    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    lora_rank: int = 0  # critic.model.lora: adapters on its frozen decoder, the value head trained whole
    lora_targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunSettings:
    """What the estimate needs from the config, already resolved."""

    bf16: bool = True
    distributed_optimizer: bool = False
    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    ref_param_offload: bool = False  # the reference's own flag (actor_rollout_ref.ref.megatron.param_offload)
    trainable_top_layers: int | None = None
    lora_rank: int = 0  # LoRA adapters on a frozen base (actor_rollout_ref.model.lora); 0 = every parameter trains
    lora_targets: tuple[str, ...] = ()  # Megatron linear names
    lora_merged: bool = False  # lora.merge: the actor's forward runs on merged weights (a transient per linear)
    recompute: Recompute = field(default_factory=Recompute)
    sequence_length: int = 1024  # prompt + response
    response_length: int = 512
    micro_batch: int = 1  # training rows per micro-batch
    micro_batches: int = 1  # micro-batches per mini-batch per rank
    old_log_prob_micro_batch: int | None = None
    ref_log_prob_micro_batch: int | None = None
    reference: bool = False
    rollout: str | None = "vllm"  # vllm | hf | None: the engine runs in a separate rollout pool
    rollout_bf16: bool = True
    gpu_memory_utilization: float = 0.5
    free_cache_engine: bool = True
    gpu_memory_gib: float = 141.0
    critic: CriticSettings | None = None
    teacher: ModelShape | None = None  # dag=opd's frozen teacher (the actor's layout and dtype)
    teacher_param_offload: bool = False
    teacher_log_prob_micro_batch: int | None = None


def rollout_weight_bytes(shape: ModelShape, run: RunSettings, tp: int = 1) -> float:
    """The rollout engine's weights on one GPU: the rollout dtype, split over rollout TP (the hf rollout: TP 1)."""
    return shape.total_params() * (2 if run.rollout_bf16 else 4) / tp


def vllm_bytes(run: RunSettings) -> float:
    """What vLLM takes while awake: gpu_memory_utilization of the GPU (its weights, KV cache and working memory)."""
    return run.gpu_memory_utilization * run.gpu_memory_gib * GIB


def layer_activation_elements(shape: ModelShape, layout: WorldLayout, recompute: Recompute) -> float:
    """Activation elements one layer keeps for backward per token of the sequence, on one rank (no full recompute)."""
    modules = set(recompute.modules)
    h, tp = shape.hidden, layout.tp
    token_split = tp if layout.sequence_parallel else 1
    norms = (2 if "layernorm" in modules else 4) * h / token_split
    attention = (2 * shape.q_dim + 2 * shape.kv_dim + (shape.q_dim + shape.kv_dim if shape.qk_norm else 0)) / tp
    if shape.moe:
        per_route = 2 * h + layout.etp * h + 3 * shape.moe_ffn - (shape.moe_ffn if "moe_act" in modules else 0)
        mlp = 0.0 if "moe" in modules else shape.topk * per_route / token_split
    else:
        mlp = 0.0 if "mlp" in modules else 3 * shape.ffn / tp
    return (norms + attention + mlp) / layout.cp


def _chunks_in_flight(layout: WorldLayout, micro_batches: int, stage: int) -> int:
    """Model chunks (of layers / (PP x VPP) layers) whose activations stage `stage` holds at its peak."""
    pp, v = layout.pp, layout.vpp
    if v == 1:
        return min(micro_batches, pp - stage)
    return min(micro_batches * v, 2 * (pp - stage - 1) + (v - 1) * pp + 1)


def training_activation_bytes(shape: ModelShape, layout: WorldLayout, run: RunSettings, stage: int) -> float:
    act_bytes = 2 if run.bf16 else 4
    tokens = run.micro_batch * run.sequence_length
    layer_bytes = layer_activation_elements(shape, layout, run.recompute) * tokens * act_bytes
    layers_per_stage = shape.layers // layout.pp
    held_layers = _chunks_in_flight(layout, run.micro_batches, stage) * layers_per_stage // layout.vpp
    if run.recompute.granularity != "full":
        return held_layers * layer_bytes
    unit = run.recompute.num_layers or 1
    input_bytes = shape.hidden / (layout.tp if layout.sequence_parallel else 1) / layout.cp * tokens * act_bytes
    if run.recompute.method == "block":  # the first `unit` layers of each chunk keep inputs only
        recomputed = min(unit, layers_per_stage) / layers_per_stage
        return held_layers * (recomputed * input_bytes + (1 - recomputed) * layer_bytes) + layer_bytes
    return -(-held_layers // unit) * input_bytes + min(unit, layers_per_stage) * layer_bytes


def logits_bytes(
    shape: ModelShape, layout: WorldLayout, run: RunSettings, rows: int, entropy: bool, backward: bool
) -> float:
    positions = run.sequence_length if layout.sequence_parallel else run.response_length
    per_logit = (2 + 4 if run.bf16 else 4) + 4 + (4 if entropy else 0) + (4 if backward else 0)
    return rows * positions * shape.vocab / layout.tp / layout.cp * per_logit


@dataclass
class StageMemory:
    """GiB on one rank of a pipeline stage, by component, and the totals of each phase."""

    stage: int
    parts: dict[str, float]
    phases: dict[str, float]

    @property
    def peak(self) -> float:
        return max(self.phases.values())


def model_state_bytes(params: RankParams, layout: WorldLayout, run: RunSettings) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) of one rank."""
    dense_shard = layout.dp * layout.cp if run.distributed_optimizer else 1
    expert_shard = layout.expert_dp if run.distributed_optimizer else 1
    optimizer = (12 if run.bf16 else 8) * (
        params.trainable_dense / dense_shard + params.trainable_expert / expert_shard
    )
    return params.total * (2 if run.bf16 else 4), params.trainable * 4.0, optimizer


def stage_adapters(shape: ModelShape, layout: WorldLayout, stage: int, rank: int, targets: tuple[str, ...]) -> int:
    """The LoRA adapter parameters of one rank's layers on `stage`."""
    layers = sum(len(chunk) for chunk in stage_layers(shape, layout.pp, stage, layout.vpp))
    return layers * lora_layer_params(shape, rank, targets, layout.tp)


def critic_params(
    shape: ModelShape, layout: WorldLayout, stage: int, lora_rank: int = 0, lora_targets: tuple[str, ...] = ()
) -> RankParams:
    """The actor's parameters less the LM head (on the last stage) plus the value head, all trainable; with LoRA
    the decoder frozen, its adapters and the value head trainable."""
    params = rank_params(shape, tp=layout.tp, pp=layout.pp, ep=layout.ep, etp=layout.etp, stage=stage, vpp=layout.vpp)
    delta, value_head = 0, 0
    if stage == layout.pp - 1:
        head = shape.vocab * shape.hidden // layout.tp if (not shape.tied or layout.pp > 1) else 0
        value_head = shape.hidden + 1
        delta = value_head - head
    if lora_rank:
        adapters = stage_adapters(shape, layout, stage, lora_rank, lora_targets)
        return RankParams(
            dense=params.dense + delta + adapters,
            expert=params.expert,
            trainable_dense=adapters + value_head,
            trainable_expert=0,
        )
    return RankParams(
        dense=params.dense + delta,
        expert=params.expert,
        trainable_dense=params.dense + delta,
        trainable_expert=params.expert,
    )


def stage_memory(shape: ModelShape, layout: WorldLayout, run: RunSettings, stage: int) -> StageMemory:
    params = rank_params(
        shape,
        tp=layout.tp,
        pp=layout.pp,
        ep=layout.ep,
        etp=layout.etp,
        stage=stage,
        vpp=layout.vpp,
        trainable_top_layers=run.trainable_top_layers,
    )
    if run.lora_rank:  # the frozen base has no grads and no optimizer state; the reference is it, adapters off
        adapters = stage_adapters(shape, layout, stage, run.lora_rank, run.lora_targets)
        params = RankParams(
            dense=params.dense + adapters, expert=params.expert, trainable_dense=adapters, trainable_expert=0
        )
    weights, grads, optimizer = model_state_bytes(params, layout, run)
    merge = lora_merge_bytes(shape, run.lora_targets, layout.tp, 2 if run.bf16 else 4) if run.lora_merged else 0
    reference = weights if run.reference and not run.lora_rank else 0.0
    teacher = 0.0
    if run.teacher is not None:
        teacher_params = rank_params(
            run.teacher, tp=layout.tp, pp=layout.pp, ep=layout.ep, etp=layout.etp, stage=stage, vpp=layout.vpp
        )
        teacher = teacher_params.total * (2 if run.bf16 else 4)
    last = stage == layout.pp - 1
    train = training_activation_bytes(shape, layout, run, stage)
    train_logits = logits_bytes(shape, layout, run, run.micro_batch, True, True) if last else 0.0
    act_bytes = 2 if run.bf16 else 4
    forward = 0.0
    per_row = layer_activation_elements(shape, layout, Recompute()) * run.sequence_length * act_bytes
    for rows, entropy in ((run.old_log_prob_micro_batch, True), (run.ref_log_prob_micro_batch, False)):
        if rows:
            logits = logits_bytes(shape, layout, run, rows, entropy, False) if last else 0.0
            forward = max(forward, rows * per_row + logits)
    if run.teacher is not None and run.teacher_log_prob_micro_batch:
        rows = run.teacher_log_prob_micro_batch
        teacher_row = layer_activation_elements(run.teacher, layout, Recompute()) * run.sequence_length * act_bytes
        logits = logits_bytes(run.teacher, layout, run, rows, False, False) if last else 0.0
        forward = max(forward, rows * teacher_row + logits)
    hf_rollout = rollout_weight_bytes(shape, run) if run.rollout == "hf" else 0.0
    vllm = vllm_bytes(run) if run.rollout == "vllm" else 0.0
    vllm_asleep = 0.0 if run.free_cache_engine else vllm

    critic = run.critic
    critic_state = critic_idle = critic_train = critic_weights = 0.0
    if critic:
        c_params = critic_params(critic.shape, layout, stage, critic.lora_rank, critic.lora_targets)
        c_weights, c_grads, c_optimizer = model_state_bytes(c_params, layout, run)
        critic_state, critic_weights = c_weights + c_grads + c_optimizer, c_weights
        critic_idle = (
            (0 if critic.param_offload else c_weights)
            + (0 if critic.grad_offload else c_grads)
            + (0 if critic.optimizer_offload else c_optimizer)
        )
        critic_run = replace(
            run, micro_batch=critic.micro_batch, micro_batches=critic.micro_batches, recompute=critic.recompute
        )
        critic_train = training_activation_bytes(critic.shape, layout, critic_run, stage)
        critic_per_row = layer_activation_elements(critic.shape, layout, Recompute()) * run.sequence_length
        forward = max(forward, critic.forward_micro_batch * critic_per_row * act_bytes)

    frozen_idle = (0 if run.ref_param_offload else reference) + (0 if run.teacher_param_offload else teacher)
    actor_idle = (
        (0 if run.param_offload else weights)
        + frozen_idle
        + (0 if run.grad_offload else grads)
        + (0 if run.optimizer_offload else optimizer)
    )
    idle = actor_idle + critic_idle + hf_rollout
    overhead = RUNTIME_OVERHEAD_GIB * GIB
    # a log-prob or values pass onloads the one model it runs: at most the larger of the offloaded weights
    onloaded = max(
        weights if run.param_offload else 0.0,
        reference if run.ref_param_offload else 0.0,
        teacher if run.teacher_param_offload else 0.0,
        critic_weights if critic and critic.param_offload else 0.0,
    )
    phases = {} if run.rollout is None else {"rollout": idle + vllm + overhead}  # None: the rollout pool generates
    phases |= {
        "log-prob": idle + onloaded + forward + merge + vllm_asleep + overhead,
        "update": (
            weights
            + grads
            + optimizer
            + frozen_idle
            + critic_idle
            + hf_rollout
            + train
            + train_logits
            + merge
            + vllm_asleep
            + overhead
        ),
    }
    if critic:
        phases["critic update"] = actor_idle + critic_state + hf_rollout + critic_train + vllm_asleep + overhead
    parts = {
        "weights": weights,
        "gradients": grads,
        "optimizer": optimizer,
        "reference": reference,
        "teacher": teacher,
        "activations": train,
        "logits": train_logits,
        "log-prob pass": forward,
        "lora merge": merge,
        "hf rollout": hf_rollout,
        "critic state": critic_state,
        "critic activations": critic_train,
        "vllm": vllm,
        "overhead": overhead,
    }
    return StageMemory(
        stage=stage, parts={k: v / GIB for k, v in parts.items()}, phases={k: v / GIB for k, v in phases.items()}
    )


def estimate(shape: ModelShape, layout: WorldLayout, run: RunSettings) -> list[StageMemory]:
    """The first and the last pipeline stage: every other stage holds less than the first (fewer micro-batches in
    flight, no embedding), so the worst GPU is one of these."""
    stages = [0] if layout.pp == 1 else [0, layout.pp - 1]
    return [stage_memory(shape, layout, run, stage) for stage in stages]


def rollout_pool_memory(shape: ModelShape, layout: WorldLayout, run: RunSettings) -> StageMemory:
    """One GPU of a separate rollout pool: the engine alone (no actor state, reference, gradients or optimizer).
    vLLM: its weights (rollout dtype, / rollout TP) and a KV cache filling the rest of gpu_memory_utilization x GPU
    (parts["kv cache"] < 0: the weights alone exceed that share); hf: one full model copy."""
    if run.rollout == "vllm":
        weights = rollout_weight_bytes(shape, run, layout.rollout_tp)
        cache = vllm_bytes(run) - weights
    else:
        weights, cache = rollout_weight_bytes(shape, run), 0.0
    overhead = RUNTIME_OVERHEAD_GIB * GIB
    parts = {"rollout weights": weights, "kv cache": cache, "overhead": overhead}
    return StageMemory(
        stage=0,
        parts={k: v / GIB for k, v in parts.items()},
        phases={"rollout": (weights + max(cache, 0.0) + overhead) / GIB},
    )
