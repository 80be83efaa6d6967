"""Batches, loss functions and comparisons shared by the single- and multi-process engine tests; an actor engine
in this process, and scripts/model_merger.py run in it."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import torch

from dagrl.data.batch import Batch
from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.models.families import Family, family

ADAM = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def actor_engine(path: Path, optim: OptimSpec | None = None, **kwargs):
    """The Megatron actor engine of the model at `path`, in this process (`kwargs`: MegatronEngineSpec's)."""
    from dagrl.engine.megatron.actor import MegatronActorEngine

    return MegatronActorEngine(MegatronEngineSpec(model_path=str(path), optim=optim, **kwargs))


def fresh_parallel_state() -> None:
    """Before an engine of another layout in the same world: Megatron's parallel state reset and every process group
    but the default destroyed in a gloo world. torch's registry keeps each group (and a gloo group its worker
    threads) until it is destroyed, so the engine world's jobs, a few dozen layouts, otherwise ran on ~2,000 idle
    threads a rank, ~50 more a layout, which on two cores made the later layouts 2-3x slower. (NCCL worlds keep
    their groups, as dagrl.utils.dist.destroy_process_groups does. A group an engine still holds lives on: the
    engine must be collectable, tests/engine/test_megatron_engine.py checks that it is.)"""
    import torch.distributed as dist
    from megatron.core import parallel_state

    from dagrl.engine.megatron import compat

    if parallel_state.model_parallel_is_initialized():
        compat.destroy_model_parallel()
    if dist.is_initialized() and dist.get_backend() == "gloo":
        for group in list(dist.distributed_c10d._world.pg_map):
            if group is not dist.group.WORLD:
                dist.destroy_process_group(group)


def resume_kwargs(lora, distributed_optimizer: bool) -> dict:
    """Engine options of the LoRA resume tests: bf16, and with the distributed optimizer every offload too."""
    return dict(
        lora=lora,
        use_distributed_optimizer=distributed_optimizer,
        param_dtype=torch.bfloat16,
        param_offload=distributed_optimizer,
        optimizer_offload=distributed_optimizer,
    )


def merge_args(local_dir: Path, target_dir: Path, *more: str) -> list[str]:
    """scripts/model_merger.py's arguments that merge the Megatron checkpoint `local_dir` into `target_dir`."""
    return ["merge", "--backend", "megatron", "--local_dir", str(local_dir), "--target_dir", str(target_dir), *more]


def run_merger(*args: str, code: int = 0) -> None:
    """scripts/model_merger.py with `args`, run in this process (its engine reuses this process's TP1 Megatron
    state); it must exit with `code`."""
    import pytest

    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    import model_merger

    with pytest.raises(SystemExit) as done:
        model_merger.main(list(args))
    assert done.value.code == code


def make_batch(rows: int = 4, prompt_len: int = 6, response_len: int = 5, vocab: int = 128, seed: int = 0) -> Batch:
    """Left-padded prompts + right-padded responses with uneven lengths."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, vocab, (rows, prompt_len + response_len), generator=g)
    attention_mask = torch.ones_like(input_ids)
    for row in range(rows):
        attention_mask[row, : row % prompt_len] = 0  # left padding of the prompt
        cut = response_len - (row % 3)
        attention_mask[row, prompt_len + cut :] = 0  # right padding of the response
    input_ids = input_ids * attention_mask
    responses = input_ids[:, prompt_len:].clone()
    response_mask = attention_mask[:, prompt_len:].clone()
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    return Batch(
        {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": responses,
            "response_mask": response_mask,
        }
    )


def hf_log_probs(model, batch: Batch, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies computed by hand from HF transformers' logits on the original layout."""
    response_len = batch["responses"].shape[1]
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits.float()
    logits = logits[:, -response_len - 1 : -1] / temperature
    log_softmax = torch.log_softmax(logits, dim=-1)
    mask = batch["response_mask"].float()
    log_probs = log_softmax.gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1) * mask
    entropy = -(log_softmax.exp() * log_softmax).sum(-1) * mask
    return log_probs, entropy


def sum_loss(micro_batch: Batch, log_probs: torch.Tensor, entropy: torch.Tensor | None):
    """An additive loss: minus the summed log-prob of response tokens, plus a little entropy."""
    mask = micro_batch["response_mask"].float()
    loss = -(log_probs * mask).sum() - 0.01 * (entropy * mask).sum()
    return loss, {"loss": loss.detach(), "tokens": mask.sum()}


def exported(engine, bucket_bytes: int = 1 << 16) -> dict[str, torch.Tensor]:
    """Every exported tensor, copied to the host (GPU engines export device tensors)."""
    return {
        name: tensor.detach().to("cpu", copy=True)
        for bucket in engine.export_weights(bucket_bytes)
        for name, tensor in bucket
    }


def per_expert_names(state_dict: dict[str, torch.Tensor], model_type: str | None = None) -> dict[str, torch.Tensor]:
    """transformers 5 keeps MoE experts fused in memory (gate_up_proj [E, 2I, H], down_proj [E, H, I]); files and
    the export use one tensor per expert, under the names checkpoints of `model_type` give them
    (mlp.experts.{e}.gate_proj/up_proj/down_proj.weight; Mixtral's block_sparse_moe.experts.{e}.w1/w3/w2.weight)."""
    kind = family(model_type) or Family("", "")
    gate_name, up_name, down_name = kind.expert_names
    out = {}
    for name, tensor in state_dict.items():
        block = name.replace(".mlp.", f".{kind.moe_block}.")
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix = block[: -len("gate_up_proj")]
            for expert, fused in enumerate(tensor):
                gate, up = fused.chunk(2, dim=0)
                out[f"{prefix}{expert}.{gate_name}.weight"] = gate
                out[f"{prefix}{expert}.{up_name}.weight"] = up
        elif name.endswith("mlp.experts.down_proj"):
            prefix = block[: -len("down_proj")]
            for expert, down in enumerate(tensor):
                out[f"{prefix}{expert}.{down_name}.weight"] = down
        elif name.endswith("mlp.gate.weight"):
            out[block] = tensor
        else:
            out[name] = tensor
    return out


def free_port() -> int:
    """A free TCP port for a torchrun rendezvous (--master-port 0 makes torchrun's rendezvous hang)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
