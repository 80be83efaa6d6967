"""Per-prompt response limits from the data (`extra_info.max_response_length`): derived and checked by the rollout
node, honoured by the hf rollout (batch and request level), vLLM's request building and unpacking, and the partial
rollout pool across an abort, a continuation and a checkpoint round trip. The tiny model is kept from sampling eos
(random weights sample it now and then), so the limits alone set the lengths."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from dagrl.config.errors import ConfigError
from dagrl.data.batch import Batch
from dagrl.data.dataset import PromptDataset
from dagrl.engine.rollout.hf import HFRollout
from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.engine.rollout.vllm_io import request_params, unpack_outputs
from dagrl.nodes.partial_rollout import PartialRolloutBuffer
from dagrl.nodes.rollout import response_metrics
from dagrl.nodes.common import response_limits
from tests.helpers import metrics_by_step, straight_and_resumed

R = 6  # data.max_response_length of these tests


@pytest.fixture(scope="module")
def setup(tiny_model, tiny_data):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    data = PromptDataset([tiny_data["train"]], tokenizer, max_prompt_length=32)
    rollout = HFRollout(str(tiny_model), [tokenizer.eos_token_id], tokenizer.pad_token_id, torch.device("cpu"))
    # never eos, nor pad (the eos of one test)
    never = torch.tensor([tokenizer.eos_token_id, tokenizer.pad_token_id])
    rollout.model.get_output_embeddings().register_forward_hook(
        lambda head, args, logits: logits.index_fill(-1, never, float("-inf"))
    )
    return tokenizer, data, rollout


def with_limits(prompts: Batch, limits: list) -> Batch:
    """`prompts` whose rows carry `extra_info.max_response_length` (None: the row has no such key)."""
    infos = [dict(info) for info in prompts["extra_info"]]
    for info, limit in zip(infos, limits):
        info.pop("max_response_length", None)
        if limit is not None:
            info["max_response_length"] = limit
    prompts["extra_info"] = infos
    return prompts


def test_limits_come_from_extra_info_capped_and_checked():
    def batch(*values):
        return Batch(
            {"input_ids": torch.zeros(len(values), 2)},
            {
                "extra_info": [{"split": "train"} if v is ... else {"max_response_length": v} for v in values],
                "index": [10 + i for i in range(len(values))],
            },
        )

    assert response_limits(batch(..., ...), R) is None  # no row has one: every row gets R
    assert response_limits(batch(None, ...), R) is None  # parquet fills a key absent from a row's struct with None
    assert response_limits(batch(3, ..., 100, None, 4.0), R) == (3, R, R, R, 4)
    for bad in (0, -2, 2.5, "512", True, float("nan")):
        with pytest.raises(
            ConfigError,
            match=r"extra_info.max_response_length=.* of prompt row 11 is not a "
            r"positive integer; set it to a token count >= 1",
        ) as error:
            response_limits(batch(2, bad), R)
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="1..response_length=6"):
        SamplingSpec(response_length=R, response_lengths=(7,))


def test_hf_rows_stop_at_their_own_limit(setup):
    tokenizer, data, rollout = setup
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    prompts = with_limits(data.rows([0, 1, 2]), [2, None, 100])
    sampling = SamplingSpec(n=2, temperature=1.0, response_length=R, response_lengths=response_limits(prompts, R))
    assert sampling.response_lengths == (2, R, R)
    out = rollout.generate(prompts, sampling, seed=5)
    free = rollout.generate(prompts, SamplingSpec(n=2, temperature=1.0, response_length=R), seed=5)
    assert not (free["responses"] == eos).any()  # the random model runs every row to the end
    assert out["response_mask"].sum(-1).tolist() == [2, 2, R, R, R, R]
    # the limited rows are the unlimited ones cut: the same first tokens, then padding outside every mask
    assert torch.equal(out["responses"][:, :2], free["responses"][:, :2])
    assert torch.equal(out["responses"][2:], free["responses"][2:])
    assert (out["responses"][:2, 2:] == pad).all()
    prompt_width = prompts["input_ids"].shape[1]
    assert out["attention_mask"][:2, prompt_width + 2 :].sum() == 0
    assert torch.equal(out["input_ids"][:, prompt_width:], out["responses"])
    assert response_metrics(out, R)["response_length/clip_ratio"] == 1.0  # every row reached its limit
    # as a row that stopped there for length: the greedy response of row 0 generated with response_length=2
    greedy = SamplingSpec(n=1, do_sample=False, response_length=R, response_lengths=(2,))
    limited = rollout.generate(prompts.select([0]), greedy, seed=0)
    short = rollout.generate(prompts.select([0]), SamplingSpec(n=1, do_sample=False, response_length=2), seed=0)
    assert torch.equal(limited["responses"][:, :2], short["responses"])
    assert limited["response_mask"].tolist() == [[1, 1, 0, 0, 0, 0]]


def test_hf_padding_stays_out_of_the_mask_when_pad_is_eos(setup):
    """A tokenizer whose pad token is its eos (Qwen base models): the padding after a row cut at its limit is
    not mistaken for the row's eos."""
    tokenizer, data, rollout = setup
    rollout = HFRollout.__new__(HFRollout)  # the same model, eos = pad
    rollout.__dict__.update(setup[2].__dict__, eos_token_ids=[tokenizer.pad_token_id])
    prompts = data.rows([0, 1])
    out = rollout.generate(
        prompts, SamplingSpec(n=1, do_sample=False, response_length=R, response_lengths=(3, 1)), seed=0
    )
    assert out["response_mask"].sum(-1).tolist() == [3, 1]


def test_vllm_requests_and_outputs_follow_the_row_limits():
    sampling = SamplingSpec(n=2, response_length=8, response_lengths=(3, 8))
    assert [p.max_tokens for p in request_params(sampling, 2, 1, [2], with_log_probs=False)] == [3, 8]
    assert [p.max_tokens for p in request_params(SamplingSpec(response_length=8), 2, 1, [2], False)] == [8, 8]
    prompts = Batch({"input_ids": torch.tensor([[5, 6], [7, 8]]), "attention_mask": torch.ones(2, 2, dtype=torch.long)})

    def completion(index, tokens):
        return SimpleNamespace(index=index, token_ids=tokens, logprobs=None, stop_reason=None)

    outputs = [
        SimpleNamespace(outputs=[completion(0, [11, 12, 13]), completion(1, [14, 15, 16])]),
        SimpleNamespace(outputs=[completion(0, list(range(20, 28))), completion(1, [30, 31, 0])]),
    ]
    # pad 0 is also the eos: a row cut at its limit keeps its padding out of the mask
    batch = unpack_outputs(prompts, outputs, sampling, [0], 0, with_log_probs=False)
    assert batch["response_mask"].sum(-1).tolist() == [3, 3, 8, 3]


def test_partial_rollout_groups_keep_their_limits_across_abort_continue_and_resume(setup):
    tokenizer, data, rollout = setup
    prompts = with_limits(data.rows([0, 1, 2]), [2, 5, None])
    prompts["uid"] = ["a", "b", "c"]
    prompts["position"] = [0, 1, 2]
    sampling = SamplingSpec(n=2, temperature=1.0, response_length=R, response_lengths=response_limits(prompts, R))
    pool = PartialRolloutBuffer()
    pool.add(prompts, prompts["position"], seed=3, sampling=sampling)
    first = pool.run(rollout, sampling, 1)
    assert [g.uid for g in first] == ["a"] and rollout.in_flight() == 0
    assert [len(s.token_ids) for s in first[0].samples] == [2, 2]
    assert [s.finish_reason for g in pool.groups for s in g.samples] == ["abort"] * 4  # cut after 2 tokens
    # a checkpoint round trip re-derives each group's limit from its dataset row
    state = json.loads(json.dumps(pool.state_dict()))
    rows = Batch.concat([pool.rows[g.uid] for g in pool.groups])
    resumed = PartialRolloutBuffer()
    resumed.load_state_dict(
        state, rows, SamplingSpec(n=2, temperature=1.0, response_length=R, response_lengths=response_limits(rows, R))
    )
    assert [g.limit for g in resumed.groups] == [5, R]
    later = SamplingSpec(n=2, temperature=1.0, response_length=R)  # a later step's spec, without per-row limits
    for continued in (pool, resumed):
        groups = continued.run(rollout, later, 2)
        assert [(g.uid, [len(s.token_ids) for s in g.samples]) for g in groups] == [("b", [5, 5]), ("c", [R, R])]
        assert all(s.finish_reason == "length" for g in groups for s in g.samples)
        out = continued.batch(groups, R, rollout.eos_token_ids, rollout.pad_token_id)
        assert out["response_mask"].sum(-1).tolist() == [5, 5, R, R]
        assert ((out["token_versions"] >= 0) == out["response_mask"].bool()).all()


def test_multi_turn_trajectories_stop_at_their_rows_limit(setup):
    """The multi-turn loop counts every token after the prompt against the row's own limit."""
    from dagrl.agent.loop import AgentLoop

    tokenizer, data, rollout = setup
    config = SimpleNamespace(max_assistant_turns=3, max_user_turns=0, max_parallel_calls=1, tool_overlap_steps=0)
    loop = AgentLoop(config, tokenizer, {}, {}, template_renders_tools=False)
    batch, metrics = loop.generate(
        rollout, data.rows([0, 1]), SamplingSpec(n=2, response_length=R, response_lengths=(2, 5)), 0, R
    )
    assert batch["response_mask"].sum(-1).tolist() == [2, 2, 5, 5]
    assert all(info["truncated"] for info in batch["extra_info"])  # the model never ends a turn: the budget does


def test_a_partial_rollout_run_keeps_the_row_limits_across_a_kill_and_resume(
    partial_rollout_args, tiny_model, tiny_data, tmp_path
):
    """The trainer end to end (data.max_response_length=16, rows limited to 2..8 tokens, the random model that runs
    to the limit): no response runs past its row's limit, and a run killed after its checkpoint resumes its carried
    groups with their limits (the same metrics as the run never killed)."""
    from benchmarks.long_tail_data import with_limits

    table = pq.read_table(tiny_data["train"])
    rows = np.arange(len(table))  # every other row limited to 8, so that any prompt order trains one in 4 steps
    pq.write_table(with_limits(table, np.where(rows % 2 == 0, 8, 2 + rows % 6)), tmp_path / "train.parquet")
    overrides = {"data.train_files": str(tmp_path / "train.parquet"), "actor_rollout_ref.model.path": str(tiny_model)}
    straight, resumed = straight_and_resumed(
        lambda out: partial_rollout_args(out, **overrides), tmp_path, fault="actor_update:3"
    )
    expected = metrics_by_step(straight)
    assert metrics_by_step(resumed) == expected
    assert max(expected[s]["response_length/max"] for s in range(1, 5)) == 8.0  # never the 16 rows without one
