"""LoRA on the Megatron critic (one process): step 0 is the full critic, only the adapters and the value head train
(the base bit-identical), the checkpoint holds those and their optimizer state and resumes exactly."""

from __future__ import annotations

import pytest
import torch

from dagrl.engine.lora import LoraSpec
from test_megatron_critic import critic, squared_error, with_targets
from engine_helpers import make_batch
from tiny_models import make_model_dir

LORA = LoraSpec(rank=4, alpha=8.0)
HEAD = ("output_layer.weight", "output_layer.bias")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("critic_lora") / "qwen3", "qwen3")


def params(engine, trained: bool) -> dict[str, torch.Tensor]:
    """Copies of the chunks' parameters that train (`trained`) or stay frozen, by name."""
    return {
        f"{i}.{name}": p.detach().clone()
        for i, module in enumerate(engine.modules)
        for name, p in module.named_parameters()
        if p.requires_grad == trained
    }


def test_step_zero_is_the_full_critic_and_only_adapters_and_head_train(model_dir):
    batch = with_targets(make_batch(rows=4))
    full = critic(model_dir)
    lora = critic(model_dir, lora=LORA)
    assert torch.equal(lora.compute_values(batch, 2), full.compute_values(batch, 2))  # B = 0, the same seeded head
    trained = params(lora, trained=True)
    adapters = [n for n in trained if n.endswith(("lora_A", "lora_B"))]
    assert len(adapters) == 4 * 2 * 2  # 4 linears x 2 layers, A and B each
    assert sorted(set(trained) - set(adapters)) == [f"0.{name}" for name in sorted(HEAD)]  # the head trains whole
    optimized = [p for group in lora.optimizer.param_groups for p in group["params"]]
    assert sum(p.numel() for p in optimized) == sum(t.numel() for t in trained.values())  # no state for the base

    frozen = params(lora, trained=False)
    losses = [lora.train_step(batch, squared_error, 2)["loss"] for _ in range(3)]
    assert losses[-1] < losses[0], losses
    assert frozen.keys() == params(lora, trained=False).keys()
    assert all(torch.equal(t, params(lora, trained=False)[n]) for n, t in frozen.items())  # base bit-identical
    after = params(lora, trained=True)
    assert all(not torch.equal(trained[n], after[n]) for n in trained)  # every A, B and the head moved
    assert all(p.grad is None for p in lora.modules[0].parameters() if not p.requires_grad)


@pytest.mark.parametrize("distributed_optimizer", [False, True])
def test_checkpoint_holds_adapters_and_head_only_and_resumes_bit_identically(
    model_dir, tmp_path, distributed_optimizer
):
    from megatron.core import dist_checkpointing

    kwargs = dict(
        lora=LORA,
        use_distributed_optimizer=distributed_optimizer,
        param_dtype=torch.bfloat16,
        param_offload=distributed_optimizer,
        optimizer_offload=distributed_optimizer,
    )
    batch = with_targets(make_batch(rows=4))
    first = critic(model_dir, **kwargs)
    first.train_step(batch, squared_error, 2)
    first.save_checkpoint(str(tmp_path / "ckpt"))
    saved_values = first.compute_values(batch, 2)
    continued = first.train_step(batch, squared_error, 2)
    saved = dist_checkpointing.load_tensors_metadata(str(tmp_path / "ckpt"))
    model_keys = {k for k in saved if not k.startswith("optimizer")}
    assert {k for k in model_keys if not k.endswith(("lora_A", "lora_B"))} == set(HEAD), sorted(model_keys)
    assert sum(k.endswith(("lora_A", "lora_B")) for k in model_keys) == 4 * 2  # stacked over the layers
    state = {k for k in saved if k.startswith("optimizer.state")}
    assert state and all(k.endswith(("lora_A", "lora_B", *HEAD)) for k in state), sorted(state)[:4]
    assert not (tmp_path / "ckpt" / "adapter.safetensors").exists()  # the merger's file is the actor's only

    resumed = critic(model_dir, seed=5, **kwargs)  # another head seed: the checkpoint's head must replace it
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert torch.equal(resumed.compute_values(batch, 2), saved_values)
    assert resumed.train_step(batch, squared_error, 2) == continued

    with pytest.raises(ValueError, match="critic.model.lora.rank"):  # adapters do not load into a full critic
        critic(model_dir, use_distributed_optimizer=distributed_optimizer).load_checkpoint(str(tmp_path / "ckpt"))
