"""Pre-flight of actor_rollout_ref.rollout: its TP against the pool and the model's heads, the engine's sequence
limit and install, and sampling that contradicts itself or the estimator."""

from __future__ import annotations

from typing import Any

from dagrl.config.checks import divides
from dagrl.config.errors import ConfigError, require
from dagrl.config.tree import Cfg
from dagrl.placement import ParallelLayout, Placement

# config.json architectures whose head scores a sequence or token instead of predicting the next token
CLASSIFIER_HEADS = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering", "RewardModel")
MIN_TEMPERATURE = 1e-3  # below it the softmax puts all but ~0 mass on the likeliest token: sampling is greedy


def check_sampling(config: Any) -> None:
    """Validation that samples at temperature 0 contradicts itself (vLLM and HF both refuse or divide by zero).
    `config` a Cfg (pre-flight: its reads are recorded, so a do_sample that failed its type check is not reread
    here as true) or plain data."""
    val = (Cfg(config) if isinstance(config, dict) else config).actor_rollout_ref.rollout.val_kwargs
    key = "actor_rollout_ref.rollout.val_kwargs.temperature"
    if val.do_sample and val.temperature == 0:
        raise ConfigError(
            key,
            f"{key}=0 with actor_rollout_ref.rollout.val_kwargs.do_sample=true: sampling needs a "
            f"temperature > 0 (e.g. 0.6); for greedy validation set val_kwargs.do_sample=false",
        )


def check_policy_model(cfg: Cfg, hf_config: dict) -> None:
    """The policy must be a full-precision causal LM: a classifier head (a reward model) has no next-token logits
    to sample from, and quantized weights (an FP8 release's weight_scale_inv) are not what the actor trains."""
    key = "actor_rollout_ref.model.path"
    architectures = hf_config.get("architectures") or []
    head = next((a for a in architectures if isinstance(a, str) and a.endswith(CLASSIFIER_HEADS)), None)
    require(
        head is None,
        key,
        f"{key}={cfg.actor_rollout_ref.model.path} has a classifier head (config.json architectures: {head}, a "
        f"reward or classification model), not a language-model head to sample from: point {key} at the causal LM "
        f"(architectures ...ForCausalLM) to train",
    )
    quantization = hf_config.get("quantization_config")
    method = quantization.get("quant_method", "?") if isinstance(quantization, dict) else quantization
    require(
        quantization is None,
        key,
        f"{key}={cfg.actor_rollout_ref.model.path} is a quantized checkpoint (config.json quantization_config, "
        f"quant_method={method}): dagrl trains full-precision weights; point {key} at the unquantized release "
        f"(e.g. Qwen/Qwen3-8B, not Qwen/Qwen3-8B-FP8)",
    )


def check_rollout_tp(cfg: Cfg, parallel: ParallelLayout, place: Placement) -> int:
    rollout = cfg.actor_rollout_ref.rollout
    rollout_tp = rollout.tensor_model_parallel_size or parallel.tensor_model_parallel_size
    require(
        rollout.name != "hf" or rollout_tp == 1,
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        f"the hf rollout runs one full model per rank: set actor_rollout_ref.rollout.tensor_model_parallel_size=1 "
        f"(now {rollout_tp}) or use rollout.name=vllm",
    )
    divides(
        place.pool("rollout").size,
        rollout_tp,
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "world size by rollout TP" if place.is_colocated else "the rollout pool's processes by rollout TP",
    )
    return rollout_tp


def check_rollout_heads(cfg: Cfg, rollout_tp: int, hf_config: dict) -> None:
    """vLLM splits the attention heads over its TP ranks and refuses a TP that does not divide them (found on a GPU
    only once the actor was built); KV heads fewer than the TP are replicated, so the TP must be their multiple."""
    key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    if cfg.actor_rollout_ref.rollout.name != "vllm" or rollout_tp == 1:
        return
    heads = hf_config.get("num_attention_heads")
    if not isinstance(heads, int) or heads < 1:
        return  # reported by the model checks
    kv_heads = hf_config.get("num_key_value_heads") or heads

    def splits_kv(tp: int) -> bool:
        return kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0

    if heads % rollout_tp == 0 and splits_kv(rollout_tp):
        return
    divisors = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0 and splits_kv(d))
    require(
        heads % rollout_tp == 0,
        key,
        f"{key}={rollout_tp} does not divide the model's num_attention_heads={heads} "
        f"(vLLM splits the heads over its TP ranks): pick one of {divisors}",
    )
    raise ConfigError(
        key,
        f"{key}={rollout_tp} neither divides nor is a multiple of the model's num_key_value_heads="
        f"{kv_heads} (vLLM splits or replicates the KV heads): pick one of {divisors}",
    )


def check_greedy_groups(cfg: Cfg) -> None:
    """Greedy training rollouts give a group n identical responses: a group estimator's advantages are all 0."""
    from dagrl.algo.catalog import ADV_ESTIMATORS

    rollout, estimator = cfg.actor_rollout_ref.rollout, cfg.algorithm.adv_estimator
    group = estimator in ADV_ESTIMATORS and ADV_ESTIMATORS[estimator].group
    require(
        rollout.do_sample is not False or not group or rollout.n == 1,
        "actor_rollout_ref.rollout.do_sample",
        f"actor_rollout_ref.rollout.do_sample=false samples greedily: the {rollout.n} responses of a prompt are "
        f"the same, so algorithm.adv_estimator={estimator} gives every advantage 0 and nothing trains; set "
        f"actor_rollout_ref.rollout.do_sample=true (greedy is for validation: val_kwargs.do_sample=false)",
    )
    if rollout.do_sample is False or not group or rollout.n == 1:
        return
    # sampling that is greedy in all but name: every sample of a group the same token for token
    require(
        not (isinstance(rollout.temperature, (int, float)) and rollout.temperature < MIN_TEMPERATURE),
        "actor_rollout_ref.rollout.temperature",
        f"actor_rollout_ref.rollout.temperature={rollout.temperature} is below {MIN_TEMPERATURE:g}: sampling is "
        f"greedy, the {rollout.n} responses of a prompt are the same and algorithm.adv_estimator={estimator} gives "
        f"every advantage 0; set actor_rollout_ref.rollout.temperature to 0.6-1.0",
    )
    require(
        rollout.top_k != 1,
        "actor_rollout_ref.rollout.top_k",
        f"actor_rollout_ref.rollout.top_k=1 keeps only the likeliest token: sampling is greedy, the {rollout.n} "
        f"responses of a prompt are the same and algorithm.adv_estimator={estimator} gives every advantage 0; set "
        f"actor_rollout_ref.rollout.top_k=-1 (off) or 20 or more",
    )


def check_ignored_rollout_keys(cfg: Cfg) -> None:
    """Rollout settings another rollout setting makes the engine ignore."""
    rollout, val = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.rollout.val_kwargs
    vllm_kwargs = rollout.engine_kwargs.vllm
    vllm_kwargs = vllm_kwargs.to_dict() if isinstance(vllm_kwargs, Cfg) else vllm_kwargs or {}
    require(
        rollout.name == "vllm" or not vllm_kwargs,
        "actor_rollout_ref.rollout.engine_kwargs.vllm",
        f"actor_rollout_ref.rollout.engine_kwargs.vllm has no effect with actor_rollout_ref.rollout.name="
        f"{rollout.name} (only the vLLM engine reads it): set actor_rollout_ref.rollout.name=vllm, or drop "
        f"engine_kwargs.vllm ({', '.join(vllm_kwargs)})",
    )
    require(
        not (isinstance(val.n, int) and val.n > 1 and val.do_sample is False),
        "actor_rollout_ref.rollout.val_kwargs.n",
        f"actor_rollout_ref.rollout.val_kwargs.n={val.n} with actor_rollout_ref.rollout.val_kwargs.do_sample=false: "
        f"greedy validation gives the {val.n} responses of a prompt the same text (the same score {val.n} times); "
        f"set val_kwargs.do_sample=true (and a val_kwargs.temperature), or val_kwargs.n=1",
    )


def check_rollout_engine(cfg: Cfg, sequence_length: int, check_installed: bool = True) -> int:
    """The vLLM engine's sequence limit and install (checked on every run so a bad value fails before a GPU job is
    queued; the engine keys' types and ranges are the schema's)."""
    rollout = cfg.actor_rollout_ref.rollout
    max_model_len = rollout.max_model_len or sequence_length
    require(
        isinstance(max_model_len, int) and max_model_len >= sequence_length,
        "actor_rollout_ref.rollout.max_model_len",
        f"actor_rollout_ref.rollout.max_model_len={max_model_len} is shorter than max_prompt_length + "
        f"max_response_length = {sequence_length}: raise it or leave it null",
    )
    if rollout.name == "vllm" and check_installed:
        import importlib.util

        require(
            importlib.util.find_spec("vllm") is not None,
            "actor_rollout_ref.rollout.name",
            "actor_rollout_ref.rollout.name=vllm but vLLM is not installed: pip install 'dagrl[gpu]' "
            "(or use rollout.name=hf)",
        )
    return max_model_len


ROUTE_RECORDING = ("hf", "vllm")  # the rollout engines whose generate records routed_experts


def check_router_replay(cfg: Cfg, hf_config: dict) -> None:
    """Routing replay needs routed experts, and R3 the rollout's routes, which the hf and vLLM rollouts' batch-level
    `generate` records (the request-level decode of multi-turn and asynchronous runs returns none yet)."""
    from dagrl.models.families import family

    rollout, mode = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor.router_replay.mode
    record = rollout.enable_rollout_routing_replay
    enable = "actor_rollout_ref.rollout.enable_rollout_routing_replay"
    require(
        mode != "R3" or record,
        enable,
        f"actor_rollout_ref.actor.router_replay.mode=R3 replays the rollout's routes, which it records only with "
        f"{enable}=true: set it, or use router_replay.mode=R2 (the old-log-prob pass's routes)",
    )
    if not record and mode == "disabled":
        return
    model_type = hf_config.get("model_type")
    moe = family(model_type)
    key = enable if mode == "disabled" else "actor_rollout_ref.actor.router_replay.mode"
    require(
        moe is not None and moe.moe,
        key,
        f"{key}={'true' if key == enable else mode} needs an MoE model (routed experts to replay); "
        f"actor_rollout_ref.model.path has model_type {model_type!r}: set {key}="
        f"{'false' if key == enable else 'disabled'}",
    )
    require(
        not record or rollout.name in ROUTE_RECORDING,
        "actor_rollout_ref.rollout.name",
        f"{enable}=true: the {rollout.name} rollout does not record routes: use actor_rollout_ref.rollout.name=hf, "
        f"or set {enable}=false and actor_rollout_ref.actor.router_replay.mode=R2 or disabled",
    )
    require(
        not record or (not rollout.multi_turn.enable and cfg.actor_rollout_ref.hybrid_engine),
        enable,
        f"{enable}=true: only the single-turn colocated generate records routes (not multi-turn or "
        f"asynchronous runs): set {enable}=false and actor_rollout_ref.actor.router_replay.mode=R2 or disabled",
    )
    megatron, replay = cfg.actor_rollout_ref.actor.megatron, "actor_rollout_ref.actor.router_replay.mode"
    switch = f"{enable}=false and {replay}=disabled" if record else f"{replay}=disabled"
    require(
        megatron.context_parallel_size == 1,
        "actor_rollout_ref.actor.megatron.context_parallel_size",
        f"routing replay is not supported under context parallelism: set "
        f"actor_rollout_ref.actor.megatron.context_parallel_size=1, or {switch}",
    )
    require(
        megatron.pipeline_model_parallel_size == 1 or not cfg.actor_rollout_ref.model.enable_gradient_checkpointing,
        "actor_rollout_ref.model.enable_gradient_checkpointing",
        f"routing replay with activation recompute needs pipeline_model_parallel_size=1 (a recomputed forward would "
        f"read another micro-batch's routes): set actor_rollout_ref.model.enable_gradient_checkpointing=false, or "
        f"{switch}",
    )
