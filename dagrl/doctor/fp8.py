"""The doctor with an FP8 rollout (actor_rollout_ref.rollout.quantization=fp8). The sync quantizes the rollout's
linear weights on their way into vLLM (dagrl/engine/rollout/fp8.py), so the rollout sits further from HF fp32 than
a bf16 rollout by design. Its pairs are held to a floor of their own, measured as the bf16 one is: HF in the
rollout's dtype with every weight the sync quantizes replaced by its FP8 round trip, against HF fp32. The export is
compared with the checkpoint through the same round trip, within the rounding its scales allow
(weights.fp8_rounding).

The floor covers the weights only: vLLM also quantizes the activations at run time (per token, or per token and
128-wide group with block scales), and with per-tensor scales it requantizes a fused layer's q/k/v (gate/up) to
their largest scale. Activations rounded as finely as the weights add an error of the same size, independent of
theirs (about sqrt(2) = 1.4x the floor in all), up to about 2x where the two line up; FACTOR is the bf16 check's 4x
margin over the ~1.5x a correct FP8 rollout is expected to show. No higher: the FP8 floor is a large share of a
mapping error's gap (a planted export error on the tiny test models sits at 7.7x it), and the export comparison
below catches what the log-probs miss.
"""

from __future__ import annotations

import os

import torch

from dagrl.engine.rollout import fp8

NAME = "fp8"  # the floor's name in the report and its metric, doctor/floor_fp8
FACTOR = 6.0  # an FP8 pair past 6x its floor is a finding: 1.5x for the rounding the floor leaves out, then 4x


def layout(cfg, shape) -> str | None:
    """The run's resolved FP8 scale layout (block or tensor); None without an FP8 rollout."""
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.quantization != "fp8":
        return None
    model_path = os.path.expanduser(cfg.actor_rollout_ref.model.path)
    return fp8.resolved_layout(rollout.fp8_scales, rollout.quantization, model_path, shape.rollout_tp)


def round_trip(weight: torch.Tensor, scales: str) -> torch.Tensor:
    """float32 `dequantize(quantize(weight))`: the weight the rollout's FP8 GEMM multiplies by."""
    return fp8.dequantize(*fp8.quantize(weight, scales), scales)


@torch.no_grad()
def round_trip_model(model, model_path: str, scales: str, export_dtype: torch.dtype) -> list[str]:
    """Replace, in place, every weight of HF `model` that the sync quantizes by its FP8 round trip (the checkpoint's
    tensor in the export's dtype, as the actor sends it): the checkpoint names replaced."""
    from dagrl.doctor.weights import checkpoint_names
    from dagrl.engine.megatron.weights import SafetensorsDir
    from dagrl.engine.rollout import fused_experts

    params = dict(model.named_parameters())
    source = SafetensorsDir(model_path)
    replaced = []
    for name in checkpoint_names(model_path):
        if not fp8.quantized_by_name(name):  # only the linear weights are read
            continue
        tensor = source.get(name)
        if not fp8.is_quantized(name, tensor.shape):
            continue
        target = params.get(name)
        if target is None:  # one expert's tensor of a fused MoE parameter
            found = fused_experts.slot(params, name)
            if found is None:
                raise KeyError(f"the checkpoint's {name} is no parameter of the HF model {model_path}")
            target = found[3]
        exported = tensor.to(target.device, export_dtype)
        target.copy_(round_trip(exported, scales))
        replaced.append(name)
    return replaced
