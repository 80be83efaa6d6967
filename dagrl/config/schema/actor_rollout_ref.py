"""The actor_rollout_ref section: each key's type, default, range, choices and doc (conf/actor_rollout_ref/default.yaml
is written from it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.algo.catalog import KL_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES
from dagrl.config.schema.lora import Lora
from dagrl.config.schema.megatron import Megatron
from dagrl.config.schema.optim import Optim
from dagrl.config.schema.rollout import fp8_scales_key, kv_cache_dtype_key, quantization_key
from dagrl.config.schema.router_replay import RouterReplay, rollout_routing_replay_key
from dagrl.engine.rollout.registry import ROLLOUT_ENGINES
from dagrl.config.schema.spec import (
    ABOVE_ONE,
    FINITE,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    OPEN_UNIT,
    POSITIVE,
    POSITIVE_INT,
    TIS_CAP,
    TOP_K,
    TOP_P,
    File,
    ModelDir,
    OutDir,
    Paths,
    Section,
    hinted,
    key,
    section,
)
from dagrl.utils import precision

MIS_BAND = "null for no bound; the band of kept sequence ratios must hold 1, an on-policy sequence's ratio"


@dataclass(frozen=True)
class Model(Section):
    """the HF model the actor, reference and rollout start from"""

    path: ModelDir | None = key(None, "local HF model directory (config, safetensors, tokenizer) (required)")
    enable_gradient_checkpointing: bool = key(
        False, "full activation recompute in the actor (refine via override_transformer_config)"
    )
    trainable_top_layers: int | None = key(
        None, "train only the top N decoder layers and the final norm; null = every parameter", POSITIVE_INT
    )
    fp32_lm_head: bool = key(
        False,
        "LM-head logits accumulated and kept in fp32 in the actor, reference and rollout "
        "(vLLM head_dtype=float32): a smaller rollout/train log-prob gap in bf16",
    )
    use_remove_padding: bool = key(
        False,
        "pack each micro-batch's sequences into one row without padding (THD on GPU "
        "with TE); needed for context_parallel_size > 1",
    )
    lora: Lora = section(
        Lora, "LoRA adapters on the actor: the base weights frozen, y = W x + alpha/rank * B A dropout(x)"
    )


@dataclass(frozen=True)
class PolicyLoss(Section):
    """which policy-gradient loss"""

    loss_mode: str = key(
        "vanilla", "the policy-gradient loss; vanilla = PPO clip with dual clip", choices=POLICY_LOSSES.choices
    )
    clip_cov_ratio: float = key(0.0002, "fraction of the tokens dropped from the gradient", OPEN_UNIT)
    clip_cov_lb: float = key(1.0, "a dropped token's advantage-log-prob covariance is above this", FINITE)
    clip_cov_ub: float = key(5.0, "and below this", FINITE)
    kl_cov_ratio: float = key(
        0.0002, "fraction of the tokens (largest covariance first) given the |log ratio| penalty", OPEN_UNIT
    )
    ppo_kl_coef: float = key(0.1, "weight of that penalty", NON_NEGATIVE)
    off_policy: str = key(
        "none",
        "none | decoupled (AReaL: ratio and clip against pi_old = pi_prox, each token's loss"
        " x pi_prox/pi_rollout); needs the rollout's log-probs",
        choices=("none", "decoupled"),
    )
    behav_imp_weight_cap: float | None = key(
        5.0,
        "decoupled: tokens whose pi_prox/pi_rollout exceeds this are masked out of the loss (AReaL); null = no cap",
        hinted(ABOVE_ONE, "AReaL masks tokens whose pi_prox/pi_behav exceeds it, e.g. 5; null for no cap"),
    )


@dataclass(frozen=True)
class Checkpoint(Section):
    """what each checkpoint writes under global_step_N/actor and what resume restores"""

    save_contents: Paths = key(
        ["model", "optimizer", "extra"],
        "model (required), optimizer (+ LR schedule), extra (RNG states), hf_model (HF copy in actor/huggingface)",
    )
    load_contents: Paths = key(
        "${actor_rollout_ref.actor.checkpoint.save_contents}",
        "parts restored on resume; must have been saved (hf_model is ignored)",
    )


@dataclass(frozen=True)
class Actor(Section):
    """the policy being trained (Megatron engine)"""

    strategy: str = key("megatron", "training engine; megatron is the one dagrl has", choices=("megatron",))
    ppo_mini_batch_size: int = key(
        256, "prompts per optimizer step, over all ranks (x rollout.n responses)", POSITIVE_INT
    )
    ppo_micro_batch_size_per_gpu: int = key(8, "responses per forward/backward on one rank", POSITIVE_INT)
    use_dynamic_bsz: bool = key(
        False, "form micro-batches by a token budget (ppo_max_token_len_per_gpu) instead of a row count"
    )
    ppo_max_token_len_per_gpu: int = key(
        16384,
        "use_dynamic_bsz: real prompt+response tokens per micro-batch on one GPU (>= max prompt + response length)",
        POSITIVE_INT,
    )
    ppo_epochs: int = key(1, "passes over each step's batch", POSITIVE_INT)
    shuffle: bool = key(False, "reshuffle responses into mini-batches each PPO epoch")
    clip_ratio: float = key(0.2, "PPO clip range (both sides unless clip_ratio_low/high are set)", NON_NEGATIVE)
    clip_ratio_low: float | None = key(None, "lower clip range; null = clip_ratio", NON_NEGATIVE)
    clip_ratio_high: float | None = key(None, "upper clip range (DAPO clip-higher); null = clip_ratio", NON_NEGATIVE)
    clip_ratio_c: float = key(3.0, "dual-clip bound for negative advantages (> 1)", hinted(ABOVE_ONE, "dual clip"))
    loss_agg_mode: str = key(
        "token-mean",
        "how per-token losses make the loss, global over the mini-batch (a loss may fix its own)",
        choices=LOSS_AGGREGATIONS.choices,
    )
    loss_scale_factor: float | None = key(
        None, "the length token sums are divided by; null = max_response_length", POSITIVE
    )
    entropy_coeff: float = key(0.0, "weight of the entropy bonus in the loss", NON_NEGATIVE)
    use_kl_loss: bool = key(False, "add a KL(actor || reference) term to the loss (GRPO style)")
    kl_loss_coef: float = key(0.001, "weight of that KL term", NON_NEGATIVE)
    kl_loss_type: str = key(
        "low_var_kl", 'KL estimator of that term (a "+" name: its value, k2\'s gradient)', choices=KL_ESTIMATORS.choices
    )
    tis_imp_ratio_cap: float = key(
        -1,
        "truncated importance sampling (verl's rollout_is=token, "
        "rollout_is_threshold=cap): weight tokens by min(pi_old/pi_rollout, cap); needs"
        " rollout.calculate_log_probs; -1 = off",
        TIS_CAP,
    )
    mis_ratio_low: float | None = key(
        None,
        "sequence masking: drop each sequence whose geometric-mean "
        "pi_old/pi_rollout is below this (in (0, 1)) from the advantage, the "
        "critic and the actor's loss; null = no lower bound",
        hinted(OPEN_UNIT, MIS_BAND),
    )
    mis_ratio_high: float | None = key(
        None,
        "sequence masking (verl's rollout_rs=seq_mean_k1, threshold "
        '"1/high_1/low"): drop each sequence whose geometric-mean '
        "pi_old/pi_rollout is above this (> 1); null = no upper bound; needs the "
        "rollout's log-probs",
        hinted(ABOVE_ONE, MIS_BAND),
    )
    tau_pos: float = key(1.0, "gate temperature where the advantage is positive", POSITIVE)
    tau_neg: float = key(
        1.05, "gate temperature where the advantage is negative (above tau_pos: negative updates fade sooner)", POSITIVE
    )
    grad_clip: float | None = key(1.0, "max global grad norm (canonical; optim.clip_grad is an alias)", POSITIVE)
    policy_loss: PolicyLoss = section(PolicyLoss, "which policy-gradient loss")
    optim: Optim = section(Optim, "optimizer and LR schedule (stepped once per mini-batch)")
    checkpoint: Checkpoint = section(
        Checkpoint, "what each checkpoint writes under global_step_N/actor and what resume restores"
    )
    megatron: Megatron = section(Megatron, "parallel layout and memory knobs; ref reuses the layout")
    router_replay: RouterReplay = section(RouterReplay, "MoE routing replay in the old-log-prob and update passes")


@dataclass(frozen=True)
class RefMegatron(Section):
    """the reference's own memory knobs (its layout and dtype are the actor's)"""

    param_offload: bool = key(False, "keep the reference's parameters on the host outside its log-prob pass")


@dataclass(frozen=True)
class Ref(Section):
    """the frozen reference model (built only when a KL term needs it)"""

    log_prob_micro_batch_size_per_gpu: int = key(
        16, "responses per forward of the reference model on one rank", POSITIVE_INT
    )
    log_prob_use_dynamic_bsz: bool = key(
        "${actor_rollout_ref.actor.use_dynamic_bsz}", "reference forward micro-batches by a token budget"
    )
    log_prob_max_token_len_per_gpu: int = key(
        "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}",
        "that budget: real tokens per reference forward on one GPU",
        POSITIVE_INT,
    )
    megatron: RefMegatron = section(
        RefMegatron, "the reference's own memory knobs (its layout and dtype are the actor's)"
    )


@dataclass(frozen=True)
class EngineKwargs(Section):
    """extra engine arguments per backend, passed through as given"""

    vllm: dict = key({}, "e.g. +actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4")


@dataclass(frozen=True)
class ValKwargs(Section):
    """sampling during validation"""

    n: int = key(1, "responses per validation prompt", POSITIVE_INT)
    do_sample: bool = key(False, "false = greedy validation")
    temperature: float = key(0.0, "used when do_sample is true", NON_NEGATIVE)
    top_p: float = key(1.0, "used when do_sample is true", TOP_P)
    top_k: int = key(-1, "used when do_sample is true", TOP_K)


@dataclass(frozen=True)
class MultiTurn(Section):
    """agentic rollouts: several assistant turns with tool calls and interaction feedback (verl's keys)"""

    enable: bool = key(False, "true = every rollout (and validation) runs the multi-turn loop (dagrl/agent/loop.py)")
    max_assistant_turns: int = key(5, "assistant turns per trajectory at most", POSITIVE_INT)
    max_user_turns: int = key(5, "interaction (user) replies per trajectory at most", POSITIVE_INT)
    max_parallel_calls: int = key(
        1, "tool calls run per assistant turn; further calls are answered with an error", POSITIVE_INT
    )
    max_tool_response_length: int = key(256, "characters of a tool's answer kept in the observation", POSITIVE_INT)
    tool_response_truncate_side: str = key("middle", "which part of a long tool answer is cut: left | middle | right")
    tool_timeout_s: float = key(30, 'wall-clock seconds per tool call; a call past it answers "timed out"', POSITIVE)
    tool_overlap_steps: int = key(
        0,
        "engine steps decoding goes on while a turn's calls run; their answer joins then (0 = wait at once)",
        NON_NEGATIVE_INT,
    )
    tool_config_path: File | None = key(None, "verl's tool YAML: a `tools` list of class_name, config, tool_schema")
    interaction_config_path: File | None = key(
        None, "verl's interaction YAML: an `interaction` list of name, class_name, config"
    )
    format: str = key("hermes", "tool-call format: hermes (<tool_call>{json}</tool_call> in the assistant text)")


@dataclass(frozen=True)
class Rollout(Section):
    """the engine that samples responses with the actor's latest weights"""

    name: str = key("hf", "rollout engine: hf (transformers generate) | vllm", choices=ROLLOUT_ENGINES.choices)
    n: int = key(1, "responses sampled per prompt (the GRPO group size)", POSITIVE_INT)
    temperature: float = key(
        1.0,
        "sampling temperature (also applied to the actor's log-probs)",
        hinted(
            POSITIVE,
            "log-probs are divided by it; for greedy validation set "
            "actor_rollout_ref.rollout.val_kwargs.do_sample=false",
        ),
    )
    top_p: float = key(1.0, "nucleus sampling", TOP_P)
    top_k: int = key(-1, "top-k sampling; -1 = off", TOP_K)
    do_sample: bool = key(True, "false = greedy")
    ignore_eos: bool = key(
        False, "training rollouts run every response to its limit past eos (fixed-length benchmarks)"
    )
    dtype: str = key(
        "auto",
        "rollout weights: bfloat16 | float32 | auto (bfloat16 on a GPU or a CPU with bf16 "
        "instructions, else float32); the actor keeps its own param_dtype",
        choices=precision.CHOICES,
    )
    seed: int = key(0, "sampling seed (combined with the step and rank, so resume is exact)", NON_NEGATIVE_INT)
    prompt_length: int | None = key(None, "alias of data.max_prompt_length; must match it if set", POSITIVE_INT)
    response_length: int | None = key(None, "alias of data.max_response_length; must match it if set", POSITIVE_INT)
    tensor_model_parallel_size: int | None = key(None, "rollout TP; null = the actor's TP", POSITIVE_INT)
    gpu_memory_utilization: float = key(0.5, "vLLM: fraction of GPU memory for weights and KV cache", OPEN_UNIT)
    max_model_len: int | None = key(
        None, "vLLM: longest sequence it schedules; null = max_prompt_length + max_response_length", POSITIVE_INT
    )
    max_num_batched_tokens: int = key(8192, "vLLM: tokens per scheduler step (prefill chunk budget)", POSITIVE_INT)
    max_num_seqs: int = key(1024, "vLLM: sequences decoded at once", POSITIVE_INT)
    enforce_eager: bool = key(True, "vLLM: no CUDA graphs (faster start, less memory; false = faster decode)")
    free_cache_engine: bool = key(
        True, "vLLM: sleep between rollouts (drop weights and KV cache) so training gets the memory"
    )
    offload_train_state: bool = key(
        True,
        "colocated: actor/critic/reference params, grads and optimizer state go to "
        "the host while generating; false = only what the *_offload flags move "
        "(verl's way: a faster switch, the same KV cache)",
    )
    enable_chunked_prefill: bool = key(True, "vLLM: split long prefills into max_num_batched_tokens chunks")
    enable_prefix_caching: bool = key(
        True, "vLLM: share the KV cache of common prompt prefixes (e.g. the n samples of a prompt)"
    )
    load_format: str = key(
        "dummy",
        "vLLM: dummy = random init, the first weight sync overwrites it | auto, safetensors = read the files",
        choices=("dummy", "auto", "safetensors"),
    )
    cache_dir: OutDir | None = key(
        None,
        "vLLM's cache (compiled graphs, model info; Triton's kernels under triton/); "
        "null = vLLM's own ($VLLM_CACHE_ROOT or ~/.cache/vllm); "
        "${trainer.default_local_dir}/vllm_cache: a resume on another machine starts "
        "warm",
    )
    calculate_log_probs: bool = key(
        False, "keep the rollout's log-probs of the sampled tokens (rollout_log_probs) for the mismatch metric / TIS"
    )
    enable_rollout_routing_replay: bool = rollout_routing_replay_key()
    quantization: str | None = quantization_key()
    fp8_scales: str = fp8_scales_key()
    kv_cache_dtype: str = kv_cache_dtype_key()
    engine_kwargs: EngineKwargs = section(EngineKwargs, "extra engine arguments per backend, passed through as given")
    log_prob_micro_batch_size_per_gpu: int = key(16, "responses per forward when computing old log-probs", POSITIVE_INT)
    log_prob_use_dynamic_bsz: bool = key(
        "${actor_rollout_ref.actor.use_dynamic_bsz}", "old-log-prob forward micro-batches by a token budget"
    )
    log_prob_max_token_len_per_gpu: int = key(
        "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}",
        "that budget: real tokens per old-log-prob forward on one GPU",
        POSITIVE_INT,
    )
    update_weights_bucket_megabytes: int = key(
        512, "weight sync from actor to rollout moves buckets of this size", POSITIVE_INT
    )
    val_kwargs: ValKwargs = section(ValKwargs, "sampling during validation")
    multi_turn: MultiTurn = section(
        MultiTurn, "agentic rollouts: several assistant turns with tool calls and interaction feedback (verl's keys)"
    )


@dataclass(frozen=True)
class ActorRolloutRef(Section):
    """The policy (actor), its frozen reference and the rollout engine that samples from it."""

    nccl_timeout: float = key(
        600, "seconds a collective waits for a peer before failing (verl's key; NCCL and gloo groups alike)", POSITIVE
    )
    hybrid_engine: bool = key(
        True,
        "true: every process trains and generates (colocated); false: separate rollout and"
        " training pools (rollout.*, async_training.*)",
    )
    model: Model = section(Model, "the HF model the actor, reference and rollout start from")
    actor: Actor = section(Actor, "the policy being trained (Megatron engine)")
    ref: Ref = section(Ref, "the frozen reference model (built only when a KL term needs it)")
    rollout: Rollout = section(Rollout, "the engine that samples responses with the actor's latest weights")
