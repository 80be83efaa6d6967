"""The multi-turn loop on the real `hf` engine and in whole runs: behaviour log-probs of every sampled turn against a
full forward of the final trajectory, and a seeded multi-turn run killed mid-way that resumes exactly."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dagrl.agent.interaction import TryAgainInteraction
from dagrl.agent.loop import AgentLoop
from dagrl.data.dataset import PromptDataset
from dagrl.engine.rollout.hf import HFRollout
from dagrl.engine.rollout.interface import SamplingSpec
from tests.conftest import cpu_run_overrides, make_arithmetic_rows
from tests.helpers import metrics_by_step, run_in_session, straight_and_resumed, write_parquet


@pytest.fixture(scope="module")
def retry_data(tmp_path_factory) -> dict[str, str]:
    """Arithmetic rows whose samples get "wrong, try again" from the built-in interaction until right."""
    root = tmp_path_factory.mktemp("retry_data")
    files = {}
    for split, count, seed in (("train", 32, 0), ("test", 8, 1)):
        rows = make_arithmetic_rows(count, split, seed)
        for row in rows:
            row["extra_info"]["interaction_kwargs"] = {
                "name": "try_again",
                "ground_truth": row["reward_model"]["ground_truth"],
            }
        files[split] = write_parquet(str(root / f"{split}.parquet"), rows)
    config = root / "interaction.yaml"
    config.write_text(
        "interaction:\n  - name: try_again\n    class_name: dagrl.agent.interaction.TryAgainInteraction\n"
        "    config: {}\n"
    )
    files["interaction"] = str(config)
    return files


def test_hf_turns_carry_the_log_probs_a_full_forward_gives(long_tail_model, retry_data):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(long_tail_model)
    data = PromptDataset([retry_data["train"]], tokenizer, max_prompt_length=32)
    from transformers import GenerationConfig

    eos = [tokenizer.eos_token_id, GenerationConfig.from_pretrained(long_tail_model).eos_token_id]  # as runs use
    rollout = HFRollout(str(long_tail_model), eos, tokenizer.pad_token_id, torch.device("cpu"))
    options = SimpleNamespace(
        max_assistant_turns=4,
        max_user_turns=3,
        max_parallel_calls=1,
        max_tool_response_length=64,
        tool_response_truncate_side="middle",
        tool_timeout_s=5,
        tool_overlap_steps=0,
    )
    loop = AgentLoop(
        options, tokenizer, {}, {"try_again": TryAgainInteraction({"name": "try_again"})}, template_renders_tools=False
    )
    batch, metrics = loop.generate(
        rollout,
        data.rows([0, 1, 2, 3]),
        SamplingSpec(n=2, temperature=1.0, response_length=48),
        seed=3,
        response_length=48,
    )
    assert metrics["multi_turn/num_turns/max"] >= 3  # feedback turns happened
    width = batch["prompts"].shape[1]
    checked = 0
    for row in range(len(batch)):
        attention = batch["attention_mask"][row].bool()
        sequence = batch["input_ids"][row][attention]
        logits = rollout.model(sequence[None]).logits[0].float()
        prompt_len = int(attention[:width].sum())
        mask = batch["response_mask"][row].bool()
        length = int(attention[width:].sum())
        positions = torch.nonzero(mask[:length]).flatten()
        tokens = batch["responses"][row][positions]
        expected = logits[prompt_len - 1 + positions].log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
        assert torch.allclose(batch["rollout_log_probs"][row][positions], expected, atol=1e-4)
        checked += int((~mask[:length]).sum() > 0)  # observation tokens sit between sampled ones
    assert checked > 0


@pytest.fixture(scope="module")
def args(long_tail_model, retry_data):
    def make(out: Path, **extra) -> list[str]:
        return cpu_run_overrides(
            long_tail_model,
            retry_data,
            out,
            **{
                "actor_rollout_ref.rollout.multi_turn.enable": True,
                "actor_rollout_ref.rollout.multi_turn.interaction_config_path": retry_data["interaction"],
                "actor_rollout_ref.rollout.multi_turn.max_user_turns": 2,
                "trainer.total_training_steps": 4,
                "trainer.save_freq": 2,
                "trainer.test_freq": 4,
                "trainer.val_before_train": False,
                "data.max_response_length": 40,
                **extra,
            },
        )

    return make


@pytest.mark.slow  # the partial-rollout multi-turn run below trains, resumes exactly and validates too
def test_a_multi_turn_run_trains_and_resumes_exactly(args, tmp_path):
    straight, resumed = straight_and_resumed(args, tmp_path)
    expected, actual = metrics_by_step(straight), metrics_by_step(resumed)
    assert actual == expected
    assert max(expected[s]["multi_turn/num_turns/max"] for s in range(1, 5)) >= 3
    assert all(expected[s]["multi_turn/tokens/observation/mean"] > 0 for s in range(1, 5))
    assert "val-core/dagrl/arithmetic/acc/mean@1" in expected[4]


def test_multi_turn_on_two_ranks_shards_prompts_and_validates_each_once(args, tmp_path):
    import json

    from tests.engine.engine_helpers import free_port

    out = tmp_path / "dp2"
    code, stderr = run_in_session(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "dagrl.main_dag",
            *args(
                out,
                **{
                    "trainer.n_gpus_per_node": 2,
                    "trainer.total_training_steps": 2,
                    "trainer.save_freq": -1,
                    "trainer.test_freq": 2,
                    "trainer.validation_data_dir": str(out / "val"),
                },
            ),
        ]
    )
    assert code == 0, stderr[-3000:]
    records = metrics_by_step(out)
    assert all(records[s]["multi_turn/tokens/observation/mean"] > 0 for s in (1, 2))
    assert "val-aux/multi_turn/interaction/first_score" in records[2]
    dumped = [json.loads(line) for line in (out / "val" / "2.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in dumped) == list(range(8))  # both ranks' shards, each prompt once


@pytest.mark.slow  # the default suite keeps multi-turn in two pools (partial rollout, below) and K=0 pools = colocated
def test_multi_turn_in_two_pools_at_k0_is_the_colocated_run(args, tmp_path):
    """The multi-turn loop runs in the rollout pool as it does colocated: at K=0 the same metrics, step for step,
    validation (in the rollout pool) included."""
    from tests.trainer.test_two_pools import launch, ok, without_async

    colocated, pools = tmp_path / "colocated", tmp_path / "pools"

    def make(out, **extra):
        return args(
            out, **{"trainer.total_training_steps": 2, "trainer.save_freq": -1, "trainer.test_freq": 2, **extra}
        )

    for result in launch(
        (make(colocated), 1, {}),
        (
            make(
                pools,
                **{
                    "actor_rollout_ref.hybrid_engine": False,
                    "rollout.n_gpus_per_node": 1,
                    "trainer.n_gpus_per_node": 1,
                    "async_training.max_staleness": 0,
                },
            ),
            2,
            {},
        ),
    ):
        ok(result)
    expected = metrics_by_step(colocated)
    assert without_async(metrics_by_step(pools)) == expected
    assert expected[2]["multi_turn/tokens/observation/mean"] > 0
    assert "val-core/dagrl/arithmetic/acc/mean@1" in expected[2]


def test_multi_turn_partial_rollout_carries_trajectories_and_resumes_exactly(args, tmp_path):
    """Partial rollout over multi-turn trajectories: the unfinished ones (an aborted turn, or waiting on the
    interaction) are carried into the next step and saved with the checkpoint; a killed and relaunched run gives the
    uninterrupted run's metrics exactly."""
    # data.seed 1 (the default) with bf16 sampling draws prompts and responses whose carried groups reach the bound
    # K=2 within the 4 steps (float32 sampling, the tests' default, draws other responses, carried within K=1)
    extra = {
        "async_training.partial_rollout": True,
        "async_training.oversample_ratio": 2.0,
        "async_training.max_staleness": 2,
        "data.seed": 1,
        "actor_rollout_ref.rollout.dtype": "bfloat16",
    }
    straight, resumed = straight_and_resumed(lambda out: args(out, **extra), tmp_path)
    expected, actual = metrics_by_step(straight), metrics_by_step(resumed)
    assert actual == expected
    steps = range(1, 5)
    assert all(expected[s]["async/buffer_groups"] > 0 for s in steps)  # groups carried every step
    assert max(expected[s]["async/partial_fraction"] for s in steps) > 0  # trajectories spanning two versions
    assert max(expected[s]["async/staleness_max"] for s in steps) == 2  # the bound K=2, reached and kept
    assert max(expected[s]["multi_turn/num_turns/max"] for s in steps) >= 3
    # the checkpoint holds carried trajectories as plain data: conversations under way, some with turns to go
    import json

    saved = json.loads((straight / "global_step_2" / "partial_rollout" / "dp0.json").read_text())
    turns = [s["turns"] for group in saved for s in group["samples"] if s is not None]
    assert turns and any(not t["done"] for t in turns) and any(len(t["messages"]) > 2 for t in turns)
    assert "val-core/dagrl/arithmetic/acc/mean@1" in expected[4]


def test_multi_turn_partial_rollout_in_two_pools_loads_pushes_mid_batch(args, tmp_path):
    """The rollout pool carries multi-turn trajectories under partial rollout and takes weight pushes between
    engine steps (a slow decode makes them arrive mid-batch); every sampled token stays within K=1."""
    from tests.trainer.test_two_pools import launch, ok

    out = tmp_path / "pools"
    run = args(
        out,
        **{
            "trainer.total_training_steps": 4,
            "trainer.save_freq": -1,
            "trainer.test_freq": -1,
            "actor_rollout_ref.hybrid_engine": False,
            "rollout.n_gpus_per_node": 1,
            "trainer.n_gpus_per_node": 1,
            "async_training.max_staleness": 1,
            "async_training.partial_rollout": True,
            "async_training.oversample_ratio": 2.0,
        },
    )
    for result in launch((run, 2, {"DAGRL_DELAY": "rollout_poll:0.05"})):
        ok(result)
    metrics = metrics_by_step(out)
    steps = range(1, 5)
    assert max(metrics[s]["async/staleness_max"] for s in steps) <= 1
    assert sum(metrics[s]["async/mid_batch_loads"] for s in steps) > 0
    assert all(metrics[s]["multi_turn/num_turns/mean"] > 1 for s in steps)
