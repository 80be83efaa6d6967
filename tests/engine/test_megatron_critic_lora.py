"""LoRA on the Megatron critic: step 0 is the full critic, only the adapters and the value head train (the base
bit-identical), the checkpoint holds those and their optimizer state and resumes exactly; and (2 ranks of the shared
engine world: world.py) the same values, loss and grad norm at TP2, TP2+SP, PP2, and DP2 and TP2 with the distributed
optimizer as at TP1, checkpoints continued at another layout (TP2 -> PP2, DP2 -> TP2 with the distributed optimizer)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dagrl.engine.lora import LoraSpec
from dagrl.placement import ParallelLayout as L
from test_megatron_critic import TOL, critic, squared_error, with_targets
from engine_helpers import fresh_parallel_state, make_batch, resume_kwargs
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

    kwargs = resume_kwargs(LORA, distributed_optimizer)
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


# ---- 2 ranks under torchrun -------------------------------------------------------------------------------
LAYOUTS = [  # (label, layout, engine kwargs, checkpoint of label to continue from)
    ("tp2", L(tensor_model_parallel_size=2), {}, None),
    ("tp2_sp", L(tensor_model_parallel_size=2, sequence_parallel=True), {}, None),
    ("pp2", L(pipeline_model_parallel_size=2), {}, "tp2"),
    ("dp2_distopt", L(), {"use_distributed_optimizer": True}, None),
    ("tp2_distopt", L(tensor_model_parallel_size=2), {"use_distributed_optimizer": True}, "dp2_distopt"),
]
JOB = "test_megatron_critic_lora:layouts"


def trained(engine, rows) -> dict:
    """Values, one Adam step's loss and grad norm, and the values after it."""
    values = engine.compute_values(rows, micro_batch_size=1)
    step = engine.train_step(rows, squared_error, micro_batch_size=1)
    return {
        "values": values.cpu(),
        "step": (step["loss"], step["critic/grad_norm"]),
        "after": engine.compute_values(rows, micro_batch_size=1).cpu(),
    }


def prepare_world_job(name: str, work_dir: Path) -> None:
    model_dir = make_model_dir(work_dir / "qwen3", "qwen3", num_layers=4, seed=3)
    torch.save(trained(critic(model_dir, lora=LORA), with_targets(make_batch(rows=4))), work_dir / "tp1.pt")


def run_world_job(name: str, work_dir: Path) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    want = torch.load(work_dir / "tp1.pt")
    batch = with_targets(make_batch(rows=4))
    continued = {}
    for label, layout, kwargs, load_from in LAYOUTS:
        fresh_parallel_state()
        engine = critic(work_dir / "qwen3", layout=layout, lora=LORA, **kwargs)
        dp_size, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
        rows = batch.chunk(dp_size)[dp_rank]

        def mine(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.chunk(dp_size)[dp_rank]

        got = trained(engine, rows)
        assert (got["values"] - mine(want["values"])).abs().max() <= TOL, f"{label}: values differ"
        for value, expected in zip(got["step"], want["step"]):
            assert abs(value - expected) <= TOL * abs(expected), (label, got["step"], want["step"])
        assert (got["after"] - mine(want["after"])).abs().max() <= 10 * TOL, f"{label}: values after a step"
        engine.save_checkpoint(str(work_dir / label))
        continued[label] = engine.train_step(rows, squared_error, micro_batch_size=1)
        if load_from is not None:  # a LoRA critic checkpoint of another layout continues like the original did
            engine.load_checkpoint(str(work_dir / load_from))
            resumed = engine.train_step(rows, squared_error, micro_batch_size=1)
            for key in ("loss", "critic/grad_norm"):
                saved = continued[load_from][key]
                assert abs(resumed[key] - saved) <= 10 * TOL * abs(saved), (label, load_from, key, resumed[key], saved)
        if dist.get_rank() == 0:
            print(f"OK {label}", flush=True)


@pytest.mark.slow  # about 20 s of the shared world; the single-process tests above are its fast siblings
@pytest.mark.engine_world(JOB)
def test_critic_lora_at_every_layout_equals_critic_lora_at_tp1(engine_world):
    work_dir = engine_world.result(JOB)
    assert (work_dir / "stdout.txt").read_text().split() == [w for label, *_ in LAYOUTS for w in ("OK", label)]
