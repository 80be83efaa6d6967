"""The fused vocab-parallel log-prob head (dagrl/engine/megatron/logprob.py) on one TP rank: values and gradients
of log p(target) and the entropy at a temperature, with padded vocabulary rows, against autograd's log_softmax.
(TP > 1 is covered end to end against HF by the multi-process engine tests.)"""

from __future__ import annotations

import pytest
import torch

import dagrl.engine.megatron.logprob as logprob


@pytest.fixture(autouse=True)
def one_tp_rank(monkeypatch):
    monkeypatch.setattr(logprob, "_tp", lambda: (0, 1, None))


@pytest.mark.parametrize(
    "vocab,temperature,with_entropy", [(50, 1.0, False), (45, 0.7, True), (50, 1.3, True), (45, 1.0, False)]
)
def test_values_and_gradients_match_log_softmax(vocab, temperature, with_entropy):
    generator = torch.Generator().manual_seed(vocab)
    logits = (torch.randn(2, 7, 50, generator=generator, dtype=torch.float64) * 3).requires_grad_()
    targets = torch.randint(0, vocab, (2, 7), generator=generator)
    w_lp, w_h = torch.randn(2, 7, generator=generator).double(), torch.randn(2, 7, generator=generator).double()

    log_probs, entropy = logprob.vocab_parallel_log_probs(logits, targets, vocab, with_entropy, temperature)
    loss = (log_probs * w_lp).sum() + ((entropy * w_h).sum() if with_entropy else 0.0)
    (grad,) = torch.autograd.grad(loss, logits)

    reference = logits.detach().clone().requires_grad_()
    log_softmax = torch.log_softmax(reference[..., :vocab] / temperature, -1)  # padding rows out of the softmax
    want_lp = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    want_h = -(log_softmax.exp() * log_softmax).sum(-1)
    want_loss = (want_lp * w_lp).sum() + ((want_h * w_h).sum() if with_entropy else 0.0)
    (want_grad,) = torch.autograd.grad(want_loss, reference)

    assert log_probs.dtype == torch.float32 and log_probs.shape == targets.shape
    assert (entropy is not None) == with_entropy
    torch.testing.assert_close(log_probs.double(), want_lp, rtol=0, atol=1e-5)
    if with_entropy:
        torch.testing.assert_close(entropy.double(), want_h, rtol=0, atol=1e-5)
    assert grad.dtype == logits.dtype
    torch.testing.assert_close(grad, want_grad, rtol=0, atol=1e-5)
    if vocab < 50:  # padding rows get no gradient
        assert grad[..., vocab:].abs().max() == 0


def test_bf16_logits_get_a_bf16_gradient_and_stay_untouched():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 40, generator=generator).bfloat16().requires_grad_()
    before = logits.detach().clone()
    targets = torch.randint(0, 40, (5,), generator=generator)
    log_probs, entropy = logprob.vocab_parallel_log_probs(logits, targets, 40, True, 0.5)
    (log_probs.sum() + entropy.sum()).backward()
    assert torch.equal(logits.detach(), before)
    assert logits.grad.dtype == torch.bfloat16
    want = torch.log_softmax(before.float() / 0.5, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(log_probs, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("with_entropy", [False, True])
def test_a_second_backward_is_refused_where_the_first_reused_the_softmax(with_entropy):
    """Without the entropy the backward turns the saved softmax into the gradient in place: a second backward
    (retain_graph=True) would compute from a gradient, and autograd's version check on the saved buffer refuses it;
    with the entropy nothing is reused and the second backward repeats the first."""
    logits = torch.randn(3, 10, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([1, 4, 9])
    log_probs, entropy = logprob.vocab_parallel_log_probs(logits, targets, 10, with_entropy)
    loss = log_probs.sum() + (entropy.sum() if with_entropy else 0.0)
    (first,) = torch.autograd.grad(loss, logits, retain_graph=True)
    if with_entropy:
        (second,) = torch.autograd.grad(loss, logits)
        torch.testing.assert_close(second, first)
    else:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad(loss, logits)
