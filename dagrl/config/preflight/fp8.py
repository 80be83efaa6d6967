"""Pre-flight of FP8: the rollout's (actor_rollout_ref.rollout.quantization=fp8, vLLM's FP8 layers) and the
actor's (override_transformer_config.fp8, TransformerEngine's FP8 GEMMs). `check_fp8` needs the config and the
model's config.json; `check_fp8_devices` needs this machine's GPU, so it runs where the run trains
(dagrl/launch/start_checks.py: a Ray driver or dagrl.plan may have none), still before any model is built.

An FP8 rollout without an importance-sampling correction is refused, not warned about: its log-probs differ from the
bf16 actor's by more than a bf16 rollout's, the policy gradient then weighs tokens by a policy that is not the one
that sampled them, and that bias does not show until the reward curve falls behind (verl's Qwen3-8B FP8 runs without
TIS lost accuracy; with token-level TIS at cap 2 they matched bf16). A warning scrolls past; the line names the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.errors import require
from dagrl.config.preflight.transformer_config import KEY as OVERRIDES, overrides_of
from dagrl.config.tree import Cfg
from dagrl.placement import ParallelLayout

ROLLOUT_KEY = "actor_rollout_ref.rollout.quantization"
SCALES_KEY = "actor_rollout_ref.rollout.fp8_scales"
TRAIN_KEY = f"{OVERRIDES}.fp8"
GEMM_MULTIPLE = 16  # FP8 tensor-core GEMMs (cuBLASLt, TE, CUTLASS) take dimensions in whole 16s
BLOCK = 128  # vLLM's weight_block_size, both sides
MIN_CAPABILITY = (8, 9)  # Ada and Hopper onwards have FP8 tensor cores


def rollout_fp8(cfg: Cfg) -> bool:
    return cfg.actor_rollout_ref.rollout.quantization == "fp8"


def train_fp8(cfg: Cfg) -> bool:
    return overrides_of(cfg).get("fp8") not in (None, False)


@dataclass(frozen=True)
class Widths:
    """One TP rank's share of the model's linear layers: their output widths (hidden is never split)."""

    hidden: int
    q: int
    kv: int  # k and v each; a KV head fewer ranks than TP is replicated, so at least one head
    mlp: int
    expert_mlp: int | None  # an MoE expert's intermediate width

    @staticmethod
    def of(hf_config: dict, tp: int) -> "Widths | None":
        """None for a config.json without the sizes (its own check, model_dir.py, names what is missing)."""
        hidden, heads = hf_config.get("hidden_size"), hf_config.get("num_attention_heads")
        if not isinstance(hidden, int) or not isinstance(heads, int) or not heads:
            return None
        head_dim = hf_config.get("head_dim") or hidden // heads
        kv_heads = hf_config.get("num_key_value_heads") or heads
        expert = hf_config.get("moe_intermediate_size")
        return Widths(
            hidden=hidden,
            q=heads * head_dim // tp,
            kv=max(kv_heads // tp, 1) * head_dim,
            mlp=(hf_config.get("intermediate_size") or 0) // tp,
            expert_mlp=expert // tp if expert else None,
        )

    def named(self) -> dict[str, int]:
        named = {"hidden_size": self.hidden, "q width": self.q, "k/v width": self.kv, "MLP width": self.mlp}
        return named | ({"expert MLP width": self.expert_mlp} if self.expert_mlp else {})


def _off_grid(widths: Widths | None, multiple: int, split_only: bool = False) -> str | None:
    """The widths not in whole `multiple`s, said; `split_only`: hidden_size left out (only an input edge of the
    linears, never split at a block: a partial last block has its own scale)."""
    named = {} if widths is None else widths.named()
    bad = [
        f"{name} {width}"
        for name, width in named.items()
        if width % multiple and not (split_only and name == "hidden_size")
    ]
    return ", ".join(bad) or None


def block_misfit(widths: Widths | None) -> str | None:
    """The `widths` (per rollout TP rank) that vLLM's block-FP8 layers cannot split at 128-block edges, said; None
    where every one lands on whole blocks (or config.json lacks the sizes)."""
    return _off_grid(widths, BLOCK, split_only=True)


def scale_layout(choice: str, hf_config: dict, rollout_tp: int) -> str:
    """actor_rollout_ref.rollout.fp8_scales resolved: `auto` is block where every width takes 128-blocks, else
    tensor (SmolLM2-135M's q width 576 does not; Qwen3-8B's widths do at rollout TP 1 to 16)."""
    if choice != "auto":
        return choice
    return "tensor" if block_misfit(Widths.of(hf_config, rollout_tp)) else "block"


def check_fp8(cfg: Cfg, hf_config: dict, parallel: ParallelLayout, rollout_tp: int) -> None:
    """The first reason this config's FP8 cannot run (one line: a later one often follows from the first)."""
    rollout, actor = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    if rollout_fp8(cfg):
        require(
            rollout.name == "vllm",
            ROLLOUT_KEY,
            f"{ROLLOUT_KEY}=fp8 is served by vLLM's FP8 kernels; the {rollout.name} rollout has none: set "
            f"actor_rollout_ref.rollout.name=vllm (on GPUs) or {ROLLOUT_KEY}=null",
        )
        require(
            rollout.load_format == "dummy",
            "actor_rollout_ref.rollout.load_format",
            f"actor_rollout_ref.rollout.load_format={rollout.load_format} reads the bf16 checkpoint into the FP8 "
            f"layers {ROLLOUT_KEY}=fp8 builds, which take FP8 weights with their block scales only from the weight "
            f"sync: set actor_rollout_ref.rollout.load_format=dummy",
        )
        require(
            (actor.tis_imp_ratio_cap > 0 and rollout.calculate_log_probs)
            or actor.mis_ratio_low is not None
            or actor.mis_ratio_high is not None,
            "actor_rollout_ref.actor.tis_imp_ratio_cap",
            f"{ROLLOUT_KEY}=fp8 samples from FP8 weights while the actor trains bf16 ones, and nothing corrects the "
            f"gap: set actor_rollout_ref.actor.tis_imp_ratio_cap=2 with actor_rollout_ref.rollout."
            f"calculate_log_probs=true (token-level TIS, verl's FP8 recipe), or mis_ratio_low/mis_ratio_high",
        )
        widths = Widths.of(hf_config, rollout_tp)
        bad = _off_grid(widths, GEMM_MULTIPLE)
        require(
            bad is None,
            ROLLOUT_KEY,
            f"{ROLLOUT_KEY}=fp8: FP8 GEMMs take widths in whole {GEMM_MULTIPLE}s and this model has {bad} per "
            f"rollout TP rank (TP={rollout_tp}): set {ROLLOUT_KEY}=null",
        )
        bad = block_misfit(widths)
        require(
            rollout.fp8_scales != "block" or bad is None,
            SCALES_KEY,
            f"{SCALES_KEY}=block: vLLM's block-FP8 layers split q/k/v and gate/up (and TP shards) at {BLOCK}-wide "
            f"blocks and this model has {bad} per rollout TP rank (TP={rollout_tp}): set {SCALES_KEY}=tensor (one "
            f"scale per weight matrix; auto picks it for such a model), or a rollout TP that lands on whole blocks",
        )
    if train_fp8(cfg):
        tp = parallel.tensor_model_parallel_size
        bad = _off_grid(Widths.of(hf_config, tp), GEMM_MULTIPLE)
        require(
            bad is None,
            TRAIN_KEY,
            f"{TRAIN_KEY}={overrides_of(cfg)['fp8']}: TransformerEngine's FP8 GEMMs take widths in whole "
            f"{GEMM_MULTIPLE}s and this model has {bad} per TP rank (TP={tp}): drop +{TRAIN_KEY}",
        )


def _fix(key: str) -> str:
    return f"set {ROLLOUT_KEY}=null" if key == ROLLOUT_KEY else f"drop +{TRAIN_KEY}"


def check_fp8_devices(cfg: Cfg) -> None:
    """This machine can run the FP8 the config asks for: a GPU of compute capability >= 8.9 and, for training,
    TransformerEngine (without it the actor is built with Megatron's local layer spec, which has no FP8)."""
    halves = [(ROLLOUT_KEY, "fp8")] if rollout_fp8(cfg) else []
    halves += [(TRAIN_KEY, overrides_of(cfg).get("fp8"))] if train_fp8(cfg) else []
    if not halves:
        return
    import importlib.util

    import torch

    key, value = halves[0]
    require(
        torch.cuda.is_available(),
        key,
        f"{key}={value} runs FP8 kernels on a GPU (compute capability >= 8.9: Ada, Hopper or newer) and this run "
        f"has none (a CPU run): {_fix(key)}",
    )
    capability = torch.cuda.get_device_capability()
    require(
        capability >= MIN_CAPABILITY,
        key,
        f"{key}={value}: {torch.cuda.get_device_name()} is compute capability {capability[0]}.{capability[1]}, "
        f"without FP8 tensor cores (8.9 or newer: Ada, Hopper, Blackwell): {_fix(key)} on this GPU",
    )
    if train_fp8(cfg):
        require(
            importlib.util.find_spec("transformer_engine") is not None,
            TRAIN_KEY,
            f"{TRAIN_KEY}={overrides_of(cfg)['fp8']} trains through TransformerEngine's FP8 layers, and without "
            f"transformer_engine installed the actor uses Megatron's local layer spec, which has none: "
            f"pip install transformer_engine, or drop +{TRAIN_KEY}",
        )
