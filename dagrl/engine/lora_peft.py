"""A LoraAdapter on disk as PEFT writes it, and merged into the weights it adapts.

PEFT's adapter directory (adapter_config.json + adapter_model.safetensors) is what `peft.PeftModel.from_pretrained`
and vLLM's LoRARequest load, so the model merger's export and the vLLM rollout's adapter-only sync write the same
files. Every merge goes through `merged_weight`: the merged sync and an adapter loaded into the hf rollout then give
the same weights bit for bit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from dagrl.engine.lora import LoraAdapter

PREFIX = "base_model.model."  # PEFT's wrapper (PeftModelForCausalLM → LoraModel) before the HF model's own names
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_A, _B = ".lora_A.weight", ".lora_B.weight"


def module_pairs(adapter: LoraAdapter) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The HF weight each pair adapts (`model.layers.0.self_attn.q_proj.weight`) → (A [rank, in], B [out, rank]).
    A tensor under another name, an A without its B (or the reverse), or a rank other than the adapter's fails here
    with that name, before anything is loaded or written."""
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in adapter.tensors.items():
        end = _A if name.endswith(_A) else _B if name.endswith(_B) else None
        if not name.startswith(PREFIX) or end is None:
            raise KeyError(f"LoRA tensor {name!r} is not named {PREFIX}<module>{_A} or {_B}")
        module = name[len(PREFIX) : -len(end)]
        if module.rsplit(".", 1)[-1] not in adapter.target_modules:
            raise KeyError(f"LoRA tensor {name!r} adapts a module outside target_modules={adapter.target_modules}")
        halves.setdefault(module, {})[end] = tensor
    pairs = {}
    for module, half in sorted(halves.items()):
        if len(half) != 2:
            raise KeyError(f"LoRA module {module!r} has {next(iter(half)).strip('.')} only: A and B travel together")
        a, b = half[_A], half[_B]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != adapter.rank or b.shape[1] != adapter.rank:
            raise ValueError(
                f"LoRA module {module!r}: A {tuple(a.shape)} and B {tuple(b.shape)} are not [rank, in] and "
                f"[out, rank] with rank={adapter.rank}"
            )
        pairs[module + ".weight"] = (a, b)
    return pairs


def nbytes(adapter: LoraAdapter) -> int:
    """What an adapter-only sync moves."""
    return sum(t.numel() * t.element_size() for t in adapter.tensors.values())


def merged_weight(weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: float) -> torch.Tensor:
    """W + scaling·B·A, summed in fp32 and returned in W's dtype and device. In place on the fp32 product: one fp32
    temporary of W's size (the actor's merged forward runs this on every adapted linear of every forward); the sum
    is the same bits as fp32(W) + scaling·(B·A), fp32 addition being commutative."""
    delta = b.to(weight.device, torch.float32) @ a.to(weight.device, torch.float32)
    return delta.mul_(scaling).add_(weight).to(weight.dtype)


def merge_state_dict(state: dict[str, torch.Tensor], adapter: LoraAdapter) -> dict[str, torch.Tensor]:
    """`state` (HF names) with every adapted weight merged; the others are the same tensors, not copies."""
    merged = dict(state)
    for name, (a, b) in module_pairs(adapter).items():
        if name not in state:
            raise KeyError(f"the LoRA adapter adapts {name!r}, which the base model does not have")
        if tuple(state[name].shape) != (b.shape[0], a.shape[1]):
            raise ValueError(f"LoRA on {name}: B·A is {b.shape[0]}x{a.shape[1]}, the weight {tuple(state[name].shape)}")
        merged[name] = merged_weight(state[name], a, b, adapter.scaling)
    return merged


def adapter_config(adapter: LoraAdapter, base_model_name_or_path: str) -> dict:
    """PEFT's LoraConfig fields that decide what the adapter computes (the rest keep PEFT's defaults)."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model_name_or_path,
        "r": adapter.rank,
        "lora_alpha": adapter.alpha,
        "target_modules": sorted(adapter.target_modules),
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "inference_mode": True,
    }


def write_peft_dir(adapter: LoraAdapter, path: str | os.PathLike, base_model_name_or_path: str) -> Path:
    """Write the adapter as a PEFT adapter directory at `path` (made if missing); each file appears whole
    (written beside it, then renamed), so a reader never sees half an adapter."""
    from safetensors.torch import save_file

    module_pairs(adapter)  # refuse a malformed adapter before anything is written
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in adapter.tensors.items()}
    save_file(tensors, str(path / (WEIGHTS_FILE + ".tmp")), metadata={"format": "pt"})
    os.replace(path / (WEIGHTS_FILE + ".tmp"), path / WEIGHTS_FILE)
    (path / (CONFIG_FILE + ".tmp")).write_text(json.dumps(adapter_config(adapter, base_model_name_or_path), indent=2))
    os.replace(path / (CONFIG_FILE + ".tmp"), path / CONFIG_FILE)
    return path


def read_peft_dir(path: str | os.PathLike) -> LoraAdapter:
    """A PEFT LoRA adapter directory as a LoraAdapter (names as PEFT saved them, without the adapter's name)."""
    from safetensors.torch import load_file

    path = Path(path)
    config = json.loads((path / CONFIG_FILE).read_text())
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{path / CONFIG_FILE}: peft_type is {config.get('peft_type')!r}, not LORA")
    for flag in ("use_dora", "use_rslora", "fan_in_fan_out"):
        if config.get(flag):
            raise ValueError(f"{path / CONFIG_FILE}: {flag}=true is not a plain LoRA (W + alpha/r·B·A)")
    targets = config["target_modules"]
    adapter = LoraAdapter(
        tensors=load_file(str(path / WEIGHTS_FILE)),
        rank=int(config["r"]),
        alpha=float(config["lora_alpha"]),
        target_modules=tuple([targets] if isinstance(targets, str) else targets),
    )
    module_pairs(adapter)
    return adapter
