"""The Megatron critic (value head) on tiny random HF models: values against HF hidden states, training, checkpoints,
and (on 2 ranks, a job of the shared engine world: world.py) the same values, loss and grad norm at TP2, TP2+SP, PP2
and DP2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).parent))

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.placement import ParallelLayout
from engine_helpers import fresh_parallel_state, make_batch
from tiny_models import load_hf, make_model_dir

ADAM = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the same tests run on a GPU machine
TOL = 1e-5 if DEVICE == "cpu" else 1e-4  # fp32; GPU kernels reduce in other orders
torch.backends.cuda.matmul.allow_tf32 = False


def critic(path: Path, optim: OptimSpec | None = ADAM, **kwargs):
    from dagrl.engine.megatron.critic import MegatronCriticEngine

    return MegatronCriticEngine(MegatronEngineSpec(model_path=str(path), optim=optim, **kwargs))


def with_targets(batch, seed: int = 0):
    """`batch` on DEVICE with fixed random `targets` for the values."""
    batch["targets"] = torch.randn(batch["responses"].shape, generator=torch.Generator().manual_seed(seed))
    return batch.to(DEVICE)


def squared_error(micro_batch, values: torch.Tensor, entropy: torch.Tensor | None):
    """An additive loss: summed squared error of response values against fixed targets."""
    assert entropy is None
    mask = micro_batch["response_mask"].float()
    loss = ((values - micro_batch["targets"]) ** 2 * mask).sum()
    return loss, {"loss": loss.detach(), "tokens": mask.sum()}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("critic_models")
    return {
        "llama": make_model_dir(root / "llama", "llama", tie=True),  # tied: the head must not tie
        "qwen2": make_model_dir(root / "qwen2", "qwen2", seed=2),
    }


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_values_are_the_head_of_hf_hidden_states_before_each_response_token(model_dirs, family):
    engine = critic(model_dirs[family])
    batch = make_batch(rows=5).to(DEVICE)
    values = engine.compute_values(batch, micro_batch_size=2)
    assert values.dtype == torch.float32 and values.shape == batch["responses"].shape
    assert torch.all(values[batch["response_mask"] == 0] == 0)

    hf = load_hf(model_dirs[family]).to(DEVICE)
    with torch.no_grad():
        hidden = hf(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            output_hidden_states=True,
        ).hidden_states[-1]
    response_len = batch["responses"].shape[1]
    head = engine.modules[-1].output_layer
    want = (hidden[:, -response_len - 1 : -1] @ head.weight.detach().t() + head.bias.detach()).squeeze(-1)
    want = want * batch["response_mask"]
    assert (values - want).abs().max() <= TOL
    assert values[batch["response_mask"] == 1].std() > 0.1  # a random head gives varied values, not zeros

    # the head is seeded: the same seed gives the same values, another seed others
    assert torch.equal(critic(model_dirs[family], optim=None).compute_values(batch, 5), values)
    assert not torch.allclose(critic(model_dirs[family], optim=None, seed=7).compute_values(batch, 5), values)


def test_training_reduces_the_value_loss_and_ignores_micro_batching(model_dirs):
    batch = with_targets(make_batch(rows=4))
    engine = critic(model_dirs["qwen2"])
    first = engine.train_step(batch, squared_error, micro_batch_size=1)
    assert first["tokens"] == batch["response_mask"].sum().item()
    assert first["critic/grad_norm"] > 0 and first["critic/lr"] == pytest.approx(1e-3)
    losses = [first["loss"]] + [engine.train_step(batch, squared_error, 2)["loss"] for _ in range(4)]
    assert losses[-1] < 0.5 * losses[0], losses

    whole = critic(model_dirs["qwen2"]).train_step(batch, squared_error, micro_batch_size=4)
    assert whole["loss"] == pytest.approx(first["loss"], rel=1e-6)
    assert whole["critic/grad_norm"] == pytest.approx(first["critic/grad_norm"], rel=1e-5)


def test_save_load_restores_values_and_continues_bit_identically(model_dirs, tmp_path):
    batch = with_targets(make_batch(rows=4))
    engine = critic(model_dirs["llama"], param_offload=True, grad_offload=True, optimizer_offload=True)
    engine.train_step(batch, squared_error, 2)
    engine.save_checkpoint(str(tmp_path / "ckpt"))
    saved_values = engine.compute_values(batch, 2)
    continued = engine.train_step(batch, squared_error, 2)
    assert not torch.equal(engine.compute_values(batch, 2), saved_values)

    resumed = critic(model_dirs["llama"], seed=5, param_offload=True, grad_offload=True, optimizer_offload=True)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert torch.equal(resumed.compute_values(batch, 2), saved_values)  # the value head included
    assert resumed.train_step(batch, squared_error, 2) == continued


# ---- 2 ranks under torchrun -------------------------------------------------------------------------------
LAYOUTS = [  # (label, layout, checkpoint label to load afterwards)
    ("tp2", ParallelLayout(tensor_model_parallel_size=2), None),
    ("tp2_sp", ParallelLayout(tensor_model_parallel_size=2, sequence_parallel=True), None),
    ("pp2", ParallelLayout(pipeline_model_parallel_size=2), "tp2"),
    ("dp2", ParallelLayout(), "pp2"),
]


def _layouts() -> list:
    """LAYOUTS this machine can run: a GPU without TransformerEngine has Megatron's local spec, whose norms refuse
    sequence parallelism (the CPU shim provides norms that take it)."""
    from dagrl.engine.megatron.compat import transformer_engine_available

    gpu_without_te = torch.cuda.is_available() and not transformer_engine_available()
    return [entry for entry in LAYOUTS if not (gpu_without_te and entry[1].sequence_parallel)]


def _reference(model_dir: Path, batch) -> dict:
    """Single-process (TP1) values, one step's loss and grad norm, and the values after that step."""
    engine = critic(model_dir)
    values = engine.compute_values(batch, 1)
    metrics = engine.train_step(batch, squared_error, 1)
    return {"values": values, "metrics": metrics, "values_after": engine.compute_values(batch, 1)}


def prepare_world_job(name: str, work_dir: Path) -> None:
    model_dir = make_model_dir(work_dir / "qwen3", "qwen3", num_layers=4, seed=3)
    torch.save(_reference(model_dir, with_targets(make_batch(rows=4))), work_dir / "reference.pt")


def run_world_job(name: str, work_dir: Path) -> None:
    """On both ranks: each layout's values, loss, grad norm and values after a step against the reference."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    batch = with_targets(make_batch(rows=4))
    reference = torch.load(work_dir / "reference.pt", weights_only=False, map_location=DEVICE)
    for label, layout, load_from in _layouts():
        fresh_parallel_state()
        engine = critic(work_dir / "qwen3", layout=layout)
        dp_size, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
        rows = batch.chunk(dp_size)[dp_rank]

        def mine(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.chunk(dp_size)[dp_rank]

        values = engine.compute_values(rows, micro_batch_size=1)
        assert (values - mine(reference["values"])).abs().max() <= TOL, f"{label}: values differ"
        metrics = engine.train_step(rows, squared_error, micro_batch_size=1)
        for key in ("loss", "critic/grad_norm"):
            want = reference["metrics"][key]
            assert abs(metrics[key] - want) <= TOL * abs(want), (label, key, metrics[key], want)
        after = engine.compute_values(rows, micro_batch_size=1)
        assert (after - mine(reference["values_after"])).abs().max() <= 10 * TOL, f"{label}: values after a step"
        engine.save_checkpoint(str(work_dir / label))
        if load_from is not None:  # a checkpoint written at another layout gives the same values here
            engine.load_checkpoint(str(work_dir / load_from))
            loaded = engine.compute_values(rows, micro_batch_size=1)
            assert (loaded - mine(reference["values_after"])).abs().max() <= 10 * TOL, f"{label} from {load_from}"
        if dist.get_rank() == 0:
            print(f"OK {label}: loss {metrics['loss']:.6f} grad_norm {metrics['critic/grad_norm']:.6f}", flush=True)


@pytest.mark.engine_world("test_megatron_critic:layouts")
def test_values_loss_and_grad_norm_agree_across_layouts(engine_world):
    work_dir = engine_world.result("test_megatron_critic:layouts")
    assert (work_dir / "stdout.txt").read_text().count("OK ") == len(_layouts())
