"""The adapter slot of a vLLM engine built for adapter-only LoRA sync.

vLLM takes adapters as PEFT directories named by a LoRARequest; it caches an adapter by its integer id, so every load
gets a fresh id (a reused id would keep serving the old tensors). The engine is built with one slot
(max_loras = max_cpu_loras = 1) and the previous adapter is removed before the next is added: memory stays flat over
a run. The directories live on tmpfs (/dev/shm) where it has room for two adapters (the old and the new, side by
side during a swap; a container's /dev/shm is often 64 MB), else in the temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import torch

from dagrl.engine.lora import LoraAdapter
from dagrl.engine.lora_peft import nbytes, write_peft_dir

# vLLM's LoRAConfig.max_lora_rank accepts only these (vLLM 0.26)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def adapter_rank(cfg: Any) -> int:
    """The rank of the adapter slot to build: actor_rollout_ref.model.lora.rank under adapter-only sync
    (lora.merge=false), else 0 (no LoRA, or merged sync: the engine takes full weights as without LoRA)."""
    lora = cfg.actor_rollout_ref.model.get("lora")
    return lora.rank if lora is not None and lora.rank > 0 and not lora.merge else 0


def lora_engine_kwargs(rank: int) -> dict[str, Any]:
    """The LLM(...) arguments of an engine that serves one adapter of rank `rank` (the smallest slot that holds it)."""
    slot = next((r for r in VLLM_LORA_RANKS if r >= rank), None)
    if slot is None:
        raise ValueError(
            f"actor_rollout_ref.model.lora.rank={rank}: vLLM serves adapters up to rank {VLLM_LORA_RANKS[-1]}; "
            f"lower the rank or set actor_rollout_ref.model.lora.merge=true (merged sync takes any rank)"
        )
    return {"enable_lora": True, "max_lora_rank": slot, "max_loras": 1, "max_cpu_loras": 1}


def base_layer_names(model: torch.nn.Module) -> Callable[[str], str]:
    """The name under which the LoRA-enabled engine loads an HF tensor. With LoRA on, vLLM wraps every linear layer it
    can adapt (not only the adapter's targets: it learns those per adapter) and keeps the base weight in the wrapper's
    `base_layer` child, so `...q_proj.weight` must arrive as `...q_proj.base_layer.weight`; vLLM's own loader still
    stacks q/k/v into qkv_proj. Whether a module is wrapped is read off the live model (its `base_layer` children),
    through the model's HF→vLLM renames and packed modules, never from a list of names."""
    wrapped = {name.removesuffix(".base_layer") for name, _ in model.named_modules() if name.endswith(".base_layer")}
    packed = getattr(model, "packed_modules_mapping", None) or {}  # e.g. qkv_proj: [q_proj, k_proj, v_proj]
    mapper = getattr(model, "hf_to_vllm_mapper", None)

    def vllm_module(module: str) -> list[str]:
        mapped = mapper.apply_list([module]) if mapper is not None else [module]
        names = []
        for name in mapped or [module]:
            parent, _, leaf = name.rpartition(".")
            names += [name] + [f"{parent}.{fused}" for fused, parts in packed.items() if leaf in parts]
        return names

    def rename(name: str) -> str:
        module, _, kind = name.rpartition(".")
        if module and any(candidate in wrapped for candidate in vllm_module(module)):
            return f"{module}.base_layer.{kind}"
        return name

    return rename


def _tmpfs(size: int) -> str | None:
    """/dev/shm if it can hold two adapters of `size` bytes, else None (tempfile's own: $TMPDIR or /tmp)."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * size + (16 << 20):
        return shm
    return None


class AdapterSlot:
    """Writes each adapter as a PEFT directory and swaps it into `engine` (vLLM's LLMEngine: add_lora, remove_lora)."""

    def __init__(self, engine: Any, base_model: str, root: str | None = None) -> None:
        self.engine, self.base_model, self._where = engine, base_model, root
        self.root: Path | None = None  # made at the first load, where that adapter's size fits
        self.request: Any = None  # the LoRARequest every generate and submit carries; None: the base model
        self._last_id = 0

    def load(self, adapter: LoraAdapter) -> dict[str, float]:
        """Swap `adapter` in; the sync's metrics (the keys of load_weights')."""
        from vllm.lora.request import LoRARequest

        start = time.perf_counter()
        if self.root is None:
            # one directory per process: the ranks of a rollout-TP group each load the same adapter into their engine
            self.root = Path(tempfile.mkdtemp(prefix="dagrl_lora_", dir=self._where or _tmpfs(nbytes(adapter))))
            weakref.finalize(self, shutil.rmtree, str(self.root))
        self._last_id += 1
        path = write_peft_dir(adapter, self.root / f"adapter_{self._last_id}", self.base_model)
        request = LoRARequest(f"dagrl_adapter_{self._last_id}", self._last_id, str(path))
        if self.request is not None:
            old, self.request = self.request, None
            self.engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path)
        # loaded now, so the sync's seconds are spent in the sync and a bad adapter fails here, not in generate
        if not self.engine.add_lora(request):
            raise RuntimeError(f"vLLM refused the LoRA adapter at {path} (add_lora returned False)")
        self.request = request
        return {"timing_s/weight_sync": time.perf_counter() - start, "perf/weight_sync_gb": nbytes(adapter) / 1e9}


def request_kwargs(slot: AdapterSlot | None) -> dict[str, Any]:
    """What every generate and add_request passes for the adapter: nothing without one (the engine's own path)."""
    return {"lora_request": slot.request} if slot is not None and slot.request is not None else {}
