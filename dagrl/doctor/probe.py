"""The doctor's fixed inputs and its reference: a few prompts cut to one token length (no padding anywhere, so
every engine sees the same positions), the rollout's greedy responses with its own log-probs, and the same
sequences scored by HF transformers in a given dtype, optionally recording each stage's hidden states (the
embedding, every decoder layer, the final norm) for the layer-by-layer comparison."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from dagrl.data.batch import Batch

PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Question: what is 17 times 23? Answer: let us compute step by step.",
    "In 1905 Albert Einstein published four papers that",
)


@dataclass
class Probe:
    """Prompt + greedy response rows, all of one length, and the rollout's log-prob of each response token."""

    input_ids: torch.Tensor  # [B, P + R]
    prompt_length: int
    rollout_log_probs: torch.Tensor  # [B, R], float32

    @property
    def response_length(self) -> int:
        return self.input_ids.shape[1] - self.prompt_length

    def batch(self, rows: slice | None = None) -> Batch:
        """The rows as the actor scores them (no padding: every mask is ones)."""
        ids = self.input_ids[rows if rows is not None else slice(None)]
        positions = torch.arange(ids.shape[1]).expand_as(ids).clone()
        return Batch(
            {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "position_ids": positions,
                "responses": ids[:, self.prompt_length :].clone(),
                "response_mask": torch.ones_like(ids[:, self.prompt_length :]),
            }
        )


def prompt_ids(tokenizer, max_tokens: int) -> list[list[int]]:
    """PROMPTS tokenized, each cut to the shortest one's length (at most `max_tokens`)."""
    encoded = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in PROMPTS]
    length = min(max_tokens, *(len(ids) for ids in encoded))
    return [ids[:length] for ids in encoded]


def generate(rollout, prompts: list[list[int]], response_tokens: int) -> Probe:
    """Greedy responses of exactly `response_tokens` tokens (eos ignored) with the rollout's log-probs."""
    from dagrl.engine.rollout.interface import Request, SamplingSpec, run_to_completion

    sampling = SamplingSpec(do_sample=False, temperature=0.0, response_length=response_tokens, ignore_eos=True)
    requests = [Request(f"doctor-{i}", tuple(ids), sampling, seed=i) for i, ids in enumerate(prompts)]
    completions = run_to_completion(rollout, requests)
    rows = [list(request.prompt_ids) + list(done.token_ids) for request, done in zip(requests, completions)]
    return Probe(
        input_ids=torch.tensor(rows),
        prompt_length=len(prompts[0]),
        rollout_log_probs=torch.tensor([list(done.log_probs) for done in completions], dtype=torch.float32),
    )


def load_hf(model_path: str, dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM

    # the grouped-GEMM MoE kernels have no float64: the fp32 floor's model runs its experts one by one
    extra = {"experts_implementation": "eager"} if dtype == torch.float64 else {}
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, **extra).to(device).eval()


def stage_modules(model) -> dict[str, torch.nn.Module]:
    """An HF causal LM's stages by the doctor's names: embedding, layer i, final norm."""
    body = model.model
    stages = {"embedding": body.embed_tokens}
    stages.update({f"layer {i}": layer for i, layer in enumerate(body.layers)})
    stages["final norm"] = body.norm
    return stages


@contextlib.contextmanager
def recording(modules: dict[str, torch.nn.Module], into: dict[str, torch.Tensor]):
    """Forward hooks that store each module's output (the hidden states) under its stage name, on the host in
    float32 (a float64 model's in float64: the fp32 floor's stages, as its log-probs)."""

    def hook(name):
        def store(module, args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            into[name] = hidden.detach().to(torch.promote_types(hidden.dtype, torch.float32)).cpu()

        return store

    handles = [module.register_forward_hook(hook(name)) for name, module in modules.items()]
    try:
        yield into
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def hf_log_probs(model, probe: Probe, row: int | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """[B, R] log-probs of the responses under `model` (softmax in float32, a float64 model's in float64), and, with
    `row`, the hidden states of that row at every stage ([S, H] each)."""
    device = next(model.parameters()).device
    stages: dict[str, torch.Tensor] = {}
    ids = probe.input_ids.to(device)
    logits = model(input_ids=ids).logits
    # float32 at least, float64 for the fp32 floor's model: its log-softmax in float32 would share the rounding of
    # the reference's own (SmolLM2: HF fp32 is 8.5e-6 a token from float64 throughout, 2.2e-6 from float64 logits
    # with a float32 softmax), and an fp32 actor would be held to a floor below the reference's own error
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if row is not None:
        with recording(stage_modules(model), stages):
            model(input_ids=ids[row : row + 1])
        stages = {name: hidden[0] for name, hidden in stages.items()}
    log_softmax = torch.log_softmax(logits[:, probe.prompt_length - 1 : -1], dim=-1)
    picked = log_softmax.gather(-1, ids[:, probe.prompt_length :, None]).squeeze(-1)
    return picked.cpu(), stages
