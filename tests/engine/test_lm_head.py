"""fp32 LM head (`actor_rollout_ref.model.fp32_lm_head`): fp32 logits from bf16 operands in the Megatron engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.engine.logits import fp32_logits, hf_response_log_probs
from dagrl.plan.presets import peak_logits, random_model
from engine_helpers import make_batch, sum_loss


def test_fp32_logits_keep_what_bf16_rounds_away_and_the_same_gradient():
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 5, 64, generator=generator).bfloat16().requires_grad_()
    weight = (torch.randn(200, 64, generator=generator) * 3).bfloat16().requires_grad_()
    exact = hidden.detach().double() @ weight.detach().double().t()
    got = fp32_logits(hidden, weight)
    bf16 = torch.nn.functional.linear(hidden, weight)
    assert got.dtype == torch.float32 and got.shape == (3, 5, 200)
    # fp32 sums of exact bf16 products: ~1e-6 relative, where bf16 output rounding costs ~4e-3
    assert (got.double() - exact).abs().max() <= 1e-5 * exact.abs().max()
    assert (bf16.double() - exact).abs().mean() > 100 * (got.double() - exact).abs().mean()

    upstream = torch.randn(3, 5, 200, generator=generator)
    grad_hidden, grad_weight = torch.autograd.grad(got, (hidden, weight), upstream)
    want_hidden, want_weight = torch.autograd.grad(bf16.float(), (hidden, weight), upstream)
    assert grad_hidden.dtype == torch.bfloat16 and grad_weight.dtype == torch.bfloat16
    torch.testing.assert_close(grad_hidden, want_hidden, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(grad_weight, want_weight, rtol=1e-2, atol=1e-2)


def test_hf_response_log_probs_score_the_response_tokens_of_a_left_padded_batch():
    """The reference the GPU parity checks use: position t's logits score response token t (a shift by one)."""
    model = random_model("llama", "tiny", seed=3, num_layers=2, vocab_size=128).eval()
    batch = make_batch(rows=3, prompt_len=5, response_len=4, vocab=128, seed=2)
    got = hf_response_log_probs(model, batch, fp32_head=True)
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits.float()
    want = torch.log_softmax(logits[:, 4:-1], -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(hf_response_log_probs(model, batch, fp32_head=False), got)  # an fp32 model: one value


def peaked_model_dir(path: Path, family: str, tie: bool) -> Path:
    """A tiny model with logits ~x20 (like a trained LM's), where bf16 logit rounding dominates the error."""
    model = random_model(family, "tiny", seed=5, num_layers=2, tie=tie, vocab_size=128)
    peak_logits(model, 20.0)
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.mark.parametrize("family, tie", [("qwen3", False), ("llama", True)])
def test_engine_logits_are_the_exact_head_of_its_hidden_states_and_train_the_same(tmp_path, family, tie):
    """With the flag, the logits the engine's log-probs come from are the exact product of the final hidden states
    and the (tied or untied) head weights; without it they carry bf16 rounding. The step is the same."""
    from dagrl.engine.megatron.actor import MegatronActorEngine

    path = peaked_model_dir(tmp_path / family, family, tie)
    batch = make_batch(rows=4, prompt_len=6, response_len=8)
    optim = OptimSpec(lr=1e-4, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)

    def run(fp32_head: bool) -> tuple[float, torch.dtype, dict]:
        engine = MegatronActorEngine(
            MegatronEngineSpec(model_path=str(path), param_dtype=torch.bfloat16, optim=optim, fp32_lm_head=fp32_head)
        )
        model = engine.modules[0]
        seen = []
        hook = model.output_layer.register_forward_hook(  # copies: the loss works on the logits in place
            lambda layer, args, out: seen.append((args[0].detach().clone(), out[0].detach().clone()))
        )
        engine.compute_log_prob(batch, micro_batch_size=2, temperature=1.0, with_entropy=False)
        hook.remove()
        weight = (model.shared_embedding_or_output_weight() if tie else model.output_layer.weight).detach().double()
        errors = [
            ((out.double() - hidden.detach().double() @ weight.t()).abs().max() / out.double().abs().max()).item()
            for hidden, out in seen
        ]
        return max(errors), seen[0][1].dtype, engine.train_step(batch, sum_loss, micro_batch_size=2, temperature=1.0)

    exact_error, exact_dtype, exact_step = run(True)
    rounded_error, rounded_dtype, rounded_step = run(False)
    assert exact_dtype == torch.float32 and rounded_dtype == torch.bfloat16
    assert exact_error <= 1e-5 and rounded_error >= 1e-3, (exact_error, rounded_error)
    # the backward is Megatron's bf16 one: the same step up to the forward's logit rounding
    assert abs(exact_step["loss"] - rounded_step["loss"]) <= 0.02 * abs(rounded_step["loss"])
    assert (
        abs(exact_step["actor/grad_norm"] - rounded_step["actor/grad_norm"]) <= 0.05 * rounded_step["actor/grad_norm"]
    )


def test_hf_rollout_logits_are_the_exact_head_with_the_flag(tmp_path):
    """The HF rollout (bf16 weights) computes the same fp32 logits the engine does when fp32_lm_head is set."""
    from dagrl.engine.rollout.hf import HFRollout

    path = peaked_model_dir(tmp_path / "qwen3", "qwen3", tie=False)
    ids = make_batch(rows=2)["input_ids"]
    for flag in (True, False):
        rollout = HFRollout(str(path), [2], 0, device=torch.device("cpu"), dtype=torch.bfloat16, fp32_lm_head=flag)
        with torch.no_grad():
            out = rollout.model(input_ids=ids, output_hidden_states=True)
        exact = out.hidden_states[-1].double() @ rollout.model.lm_head.weight.double().t()
        error = ((out.logits.double() - exact).abs().max() / exact.abs().max()).item()
        assert (out.logits.dtype, error <= 1e-5) == ((torch.float32, True) if flag else (torch.bfloat16, False)), error
