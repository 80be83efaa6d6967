"""The Megatron engine on one GPU: no CPU shim, log-probs equal HF, a train step, save -> load -> same step."""

from __future__ import annotations

import sys

import pytest
import torch

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.engine.megatron import compat
from tests.engine.engine_helpers import hf_log_probs, make_batch, sum_loss
from tests.engine.tiny_models import load_hf, make_model_dir


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from dagrl.engine.megatron.actor import MegatronActorEngine

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    path = make_model_dir(tmp_path_factory.mktemp("qwen3"), family="qwen3", num_layers=2)
    spec = MegatronEngineSpec(model_path=str(path), optim=OptimSpec(lr=1e-3, total_training_steps=10))
    return path, MegatronActorEngine(spec), MegatronActorEngine


def test_shim_is_not_installed_and_engine_is_on_cuda(engines):
    _, engine, _ = engines
    from dagrl.engine.megatron import cpu

    assert engine.device.type == "cuda"
    assert not cpu.is_installed()
    assert all(p.device.type == "cuda" for m in engine.modules for p in m.parameters())
    assert not any(type(hook).__name__ == "_MegatronImportHook" for hook in sys.meta_path)
    assert torch.zeros(1, device="cuda").type() == "torch.cuda.FloatTensor"
    assert torch.zeros(1).type() == "torch.FloatTensor"  # the shim's type-string patch is absent


def test_log_probs_equal_hf_on_gpu(engines):
    path, engine, _ = engines
    batch = make_batch(rows=4, vocab=128)
    log_probs, entropy = engine.compute_log_prob(
        batch.to("cuda"), micro_batch_size=2, temperature=1.0, with_entropy=True
    )
    hf = load_hf(path).to("cuda")
    expected, expected_entropy = hf_log_probs(hf, batch.to("cuda"))
    # TransformerEngine's fp32 GEMMs are TF32; the local spec (no TE) keeps full fp32.
    atol = 1e-2 if compat.transformer_engine_available() else 1e-4
    assert torch.allclose(log_probs, expected, atol=atol), (log_probs - expected).abs().max()
    assert torch.allclose(entropy, expected_entropy, atol=atol)


def test_train_step_save_load_identical_next_step(engines, tmp_path):
    path, engine, engine_cls = engines
    batch = make_batch(rows=4, vocab=128).to("cuda")
    first = engine.train_step(batch, sum_loss, micro_batch_size=2, temperature=1.0)
    assert first["actor/grad_norm"] > 0 and first["actor/skipped_steps"] == 0
    engine.save_checkpoint(str(tmp_path / "ckpt"))
    expected = engine.train_step(batch, sum_loss, micro_batch_size=2, temperature=1.0)
    restored = engine_cls(MegatronEngineSpec(model_path=str(path), optim=OptimSpec(lr=1e-3, total_training_steps=10)))
    restored.load_checkpoint(str(tmp_path / "ckpt"))
    again = restored.train_step(batch, sum_loss, micro_batch_size=2, temperature=1.0)
    assert again == expected
