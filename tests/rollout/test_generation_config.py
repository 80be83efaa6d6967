"""The hf rollout samples exactly the policy dagrl trains: a model's generation_config.json (Qwen2.5-Instruct ships
repetition_penalty 1.05) must not reshape the distribution the rollout draws from, since the actor's log-probs
assume plain sampling at rollout.temperature / top_k / top_p."""

import json
import shutil

import pytest
import torch

from dagrl.data.dataset import PromptDataset
from dagrl.engine.rollout.hf import HFRollout
from dagrl.engine.rollout.interface import SamplingSpec

# each reshapes the next-token distribution: a penalty on every token already in the prompt or response, and a
# ban on repeating any token
PENALTIES = {"repetition_penalty": 3.0, "no_repeat_ngram_size": 1, "temperature": 0.2, "top_k": 3}
RESPONSE = 12


@pytest.fixture(scope="module")
def penalised(tiny_model, tmp_path_factory):
    """The tiny model, its generation_config.json setting PENALTIES."""
    directory = tmp_path_factory.mktemp("penalised") / "model"
    shutil.copytree(tiny_model, directory)
    (directory / "generation_config.json").write_text(json.dumps(PENALTIES))
    return directory


def plain_log_probs(model, out, temperature: float) -> torch.Tensor:
    """The policy's log-probs of the sampled response tokens: one forward, logits / temperature, no processing."""
    with torch.no_grad():
        logits = model(input_ids=out["input_ids"], attention_mask=out["attention_mask"]).logits.float()
    response = out["responses"].shape[1]
    logits = logits[:, -response - 1 : -1] / temperature
    return logits.log_softmax(-1).gather(-1, out["responses"][..., None]).squeeze(-1)


def test_the_models_generation_config_does_not_reshape_sampling(penalised, tiny_data, monkeypatch):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(penalised)
    data = PromptDataset([tiny_data["train"]], tokenizer, max_prompt_length=32)
    rollout = HFRollout(
        str(penalised), [tokenizer.eos_token_id], tokenizer.pad_token_id, torch.device("cpu"), log_probs=True
    )
    scores = []
    generate = rollout.model.generate

    def recording(**kwargs):  # the processed scores: the distribution each token was drawn from
        kwargs["generation_config"].output_scores = True
        output = generate(**kwargs)
        scores.append(torch.stack(output.scores, dim=1).float())
        return output

    monkeypatch.setattr(rollout.model, "generate", recording)
    spec = SamplingSpec(n=4, temperature=0.7, response_length=RESPONSE, ignore_eos=True)
    out = rollout.generate(data.rows(list(range(8))), spec, seed=3)
    drawn = scores[0].log_softmax(-1).gather(-1, out["responses"][..., None]).squeeze(-1)
    plain = plain_log_probs(rollout.model, out, spec.temperature)
    torch.testing.assert_close(drawn, plain, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out["rollout_log_probs"], plain, rtol=1e-4, atol=1e-4)
    # the test can fail: plain sampling repeats tokens that no_repeat_ngram_size=1 would have banned
    assert any(len(set(row.tolist())) < RESPONSE for row in out["responses"])
    # greedy (validation): each token the policy's argmax, which repetition_penalty would have moved
    greedy = rollout.generate(
        data.rows(list(range(8))), SamplingSpec(n=1, do_sample=False, response_length=RESPONSE, ignore_eos=True), 0
    )
    with torch.no_grad():
        logits = rollout.model(input_ids=greedy["input_ids"], attention_mask=greedy["attention_mask"]).logits
    assert torch.equal(logits[:, -RESPONSE - 1 : -1].argmax(-1), greedy["responses"])
