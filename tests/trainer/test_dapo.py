"""DAPO dynamic sampling: the node with a scripted rollout (exact counts, trim order, the limit, the smaller batch),
then CPU runs of dag=dapo on the tiny model with a reward that makes some groups uniform."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.shape import RunShape
from dagrl.data.batch import Batch
from dagrl.nodes.context import StepContext, WeightVersions
from dagrl.nodes.dynamic_sampling import filter_groups, group_metric, keep_counts, varied_groups
from dagrl.nodes.reward import score
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_in_session
from tests.engine.engine_helpers import free_port

N, RESPONSE = 2, 4


class ScriptedRollout:
    """Each prompt's `kind` decides its group: 'same' -> every response scores 1, 'mixed' -> 0, 1, 0, ..."""

    colocated, needs_weights = False, False

    def __init__(self) -> None:
        self.seeds: list[int] = []

    def wake_weights(self) -> None: ...

    def wake_cache(self) -> None: ...

    def sleep(self) -> None: ...

    def generate(self, prompts: Batch, sampling, seed: int) -> Batch:
        self.seeds.append(seed)
        out = prompts.repeat_interleave(sampling.n)
        rows = len(out)
        out["planned"] = torch.tensor(
            [1.0 if kind == "same" else float(i % sampling.n % 2) for i, kind in enumerate(out["kind"])]
        )
        out["responses"] = torch.ones(rows, RESPONSE, dtype=torch.long)
        out["response_mask"] = torch.ones(rows, RESPONSE, dtype=torch.long)
        out["attention_mask"] = torch.ones(rows, RESPONSE + 2, dtype=torch.long)
        return out


class PlannedReward:
    """score_batch as the RewardManager's: the planned score on the last token; acc = score; none failed."""

    def score_batch(self, batch: Batch, tokenizer):
        scores = torch.zeros(len(batch), RESPONSE)
        scores[:, -1] = batch["planned"]
        return (
            scores,
            {},
            {"score": batch["planned"].clone(), "acc": batch["planned"].clone(), "failed": torch.zeros(len(batch))},
        )


def make_ctx(schedule: dict[int, str], actor_dp: int = 1, **overrides) -> StepContext:
    """Rank 0's context, whose round r draws prompts of kinds schedule[r] (one letter per prompt): the world is
    one rollout-TP group of `actor_dp` ranks, so one rollout shard (this rank's) holds every prompt."""
    args = {"data.train_batch_size": 4, "actor_rollout_ref.rollout.n": N, **overrides}
    cfg = Cfg(compose(["dag=dapo", *(f"{k}={v}" for k, v in args.items())]))
    shape = RunShape(
        world_size=actor_dp,
        rollout_tp=actor_dp,
        prompt_length=2,
        response_length=RESPONSE,
        grad_clip=1.0,
        train_rows=64,
        hf_config={},
    )

    def draw(step: int, round_index: int) -> Batch:
        kinds = ["same" if letter == "s" else "mixed" for letter in schedule[round_index]]
        return Batch(columns={"uid": [f"{step}:{round_index}:{p}" for p in range(len(kinds))], "kind": kinds})

    return StepContext(
        cfg=cfg,
        shape=shape,
        actor=None,
        rollout=ScriptedRollout(),
        reference=None,
        reward_fn=PlannedReward(),
        tokenizer=None,
        kl_ctrl=None,
        versions=WeightVersions(actor=0, rollout=0),
        step=7,
        draw_prompts=draw,
    )


def first_round(ctx: StepContext) -> Batch:
    """What the rollout and score nodes hand to dynamic sampling."""
    from dagrl.nodes.common import train_sampling

    batch, _ = score(ctx, ctx.rollout.generate(ctx.draw_prompts(ctx.step, 0), train_sampling(ctx), seed=0))
    return batch


def groups_of(batch: Batch) -> list[str]:
    return list(dict.fromkeys(batch["uid"]))


def test_regenerates_until_the_batch_is_full_then_trims_in_round_order():
    ctx = make_ctx({0: "ssms", 1: "mmss", 2: "mmmm"})
    out, metrics = filter_groups(ctx, first_round(ctx))
    assert metrics == {
        "train/num_gen_batches": 3.0,
        "train/num_generated_groups": 12.0,
        "train/num_kept_groups": 7.0,
        "train/num_batch_groups": 4.0,
    }
    assert groups_of(out) == ["7:0:2", "7:1:0", "7:1:1", "7:2:0"]
    assert len(out) == 4 * N and set(out["kind"]) == {"mixed"}
    assert out["token_level_scores"].sum(-1).tolist() == [0.0, 1.0] * 4
    assert len(set(ctx.rollout.seeds)) == 3  # each round samples with a seed of its own


def test_nothing_is_regenerated_when_the_first_batch_has_enough_and_off_means_untouched():
    ctx = make_ctx({0: "mmmm"})
    batch = first_round(ctx)
    out, metrics = filter_groups(ctx, batch)
    assert metrics["train/num_gen_batches"] == 1.0 and groups_of(out) == groups_of(batch)
    ctx = make_ctx({0: "ssss"}, **{"algorithm.filter_groups.enable": False})
    batch = first_round(ctx)
    assert filter_groups(ctx, batch) == (batch, {})


def test_the_limit_raises_naming_the_keys():
    ctx = make_ctx({0: "ssms", 1: "msss", 2: "mmmm"}, **{"algorithm.filter_groups.max_num_gen_batches": 2})
    with pytest.raises(
        RuntimeError,
        match=r"only 2 of data.train_batch_size=4 .* after 2 generation batches "
        r"\(algorithm.filter_groups.max_num_gen_batches=2\).*"
        r"on_limit=smaller_batch",
    ):
        filter_groups(ctx, first_round(ctx))


def test_no_limit_stops_a_step_after_a_whole_epoch_of_prompts():
    # 64 rows / 4 prompts a batch = 16 generation batches an epoch; the 17th would have varied
    schedule = {**{r: "ssss" for r in range(16)}, 16: "mmmm"}
    ctx = make_ctx(schedule)
    with pytest.raises(
        RuntimeError,
        match=r"only 0 of data.train_batch_size=4 .* after 16 generation batches \(a whole epoch of the 64 training "
        r"prompts, where algorithm.filter_groups.max_num_gen_batches=0 stops a step\); set max_num_gen_batches "
        r"above 16, set algorithm.filter_groups.on_limit=smaller_batch",
    ):
        filter_groups(ctx, first_round(ctx))
    assert len(ctx.rollout.seeds) == 16  # the first batch and 15 more: never the 17th
    schedule[5] = "smss"
    ctx = make_ctx(schedule, **{"algorithm.filter_groups.on_limit": "smaller_batch"})
    out, metrics = filter_groups(ctx, first_round(ctx))
    assert groups_of(out) == ["7:5:1"] and metrics["train/num_gen_batches"] == 16.0


@pytest.mark.parametrize("actor_dp,expected", [(1, ["7:0:0", "7:0:1", "7:1:3"]), (2, ["7:0:0", "7:0:1"])])
def test_smaller_batch_trains_on_whole_groups_for_every_dp_rank(actor_dp, expected):
    ctx = make_ctx(
        {0: "mmss", 1: "sssm", 2: "mmmm"},
        actor_dp=actor_dp,
        **{"algorithm.filter_groups.max_num_gen_batches": 2, "algorithm.filter_groups.on_limit": "smaller_batch"},
    )
    out, metrics = filter_groups(ctx, first_round(ctx))
    assert groups_of(out) == expected
    assert metrics["train/num_kept_groups"] == 3.0 and metrics["train/num_batch_groups"] == len(expected)


def test_too_few_groups_for_the_dp_ranks_is_an_error_even_with_smaller_batch():
    ctx = make_ctx(
        {0: "msss"},
        actor_dp=2,
        **{"algorithm.filter_groups.max_num_gen_batches": 1, "algorithm.filter_groups.on_limit": "smaller_batch"},
    )
    with pytest.raises(RuntimeError, match="fewer than the 2 actor-DP ranks"):
        filter_groups(ctx, first_round(ctx))


def test_metrics_and_trim_plan():
    batch = Batch(
        {
            "token_level_scores": torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.5, 0.0], [0.0, 0.2]]),
            "acc": torch.tensor([1.0, 1.0, 0.0, 0.0]),
        },
        {"uid": ["a", "a", "b", "b"]},
    )
    # shaped rewards differ inside group b while acc is uniform everywhere: what DAPO's acc metric is for
    assert group_metric(batch, "seq_reward").tolist() == pytest.approx([1.0, 1.0, 0.5, 0.2])
    assert [rows.tolist() for rows in varied_groups(batch["uid"], group_metric(batch, "seq_reward"))] == [[2, 3]]
    assert varied_groups(batch["uid"], group_metric(batch, "acc")) == []
    assert varied_groups(["x"], np.array([1.0]))[0].tolist() == [0]  # a group of one is kept (as verl)
    # kept groups per (round, shard) taken in that order up to the goal
    assert keep_counts(np.array([[1, 0], [2, 3]]), 4).tolist() == [[1, 0], [2, 1]]
    assert keep_counts(np.array([[3, 3]]), 4).tolist() == [[3, 1]]


@pytest.mark.parametrize(
    "overrides,key,message",
    [
        (["algorithm.filter_groups.metric=reward"], "algorithm.filter_groups.metric", "acc, score, seq_reward"),
        (["algorithm.filter_groups.on_limit=ignore"], "algorithm.filter_groups.on_limit", "raise, smaller_batch"),
        (["algorithm.filter_groups.max_num_gen_batches=1.5"], "algorithm.filter_groups.max_num_gen_batches", "integer"),
        (
            ["algorithm.filter_groups.metric=seq_final_reward", "algorithm.use_kl_in_reward=true"],
            "algorithm.filter_groups.metric",
            "filter on seq_reward instead",
        ),
        (["trainer.balance_batch=sometimes"], "trainer.balance_batch", "true or false"),
    ],
)
def test_preflight_refuses_bad_dynamic_sampling_keys(overrides, key, message, tiny_model, tiny_data, tmp_path):
    from dagrl.config.errors import ConfigError
    from dagrl.config.validate import preflight

    base = cpu_run_overrides(tiny_model, tiny_data, tmp_path)
    with pytest.raises(ConfigError, match=message) as error:
        preflight(Cfg(compose(["dag=dapo", *base, *overrides])))
    assert error.value.key == key
    preflight(Cfg(compose(["dag=dapo", *base])))  # the base is valid
    with pytest.raises(ConfigError, match="no dynamic_sampling node: use dag=dapo"):
        preflight(Cfg(compose([*base, "algorithm.filter_groups.enable=true"])))


# ---- CPU runs on the tiny model ---------------------------------------------------------------------------
# dapo_args (dag=dapo with a parity reward that makes some groups uniform) is in tests/trainer/conftest.py, shared
# with the prompt ledger's tests
def launch(args: list[str]) -> tuple[int, str]:
    return run_in_session([sys.executable, "-m", "dagrl.main_dag", *args])


def test_dapo_run_filters_groups_and_regenerates(dapo_args, tmp_path):
    reads = tmp_path / "reads.json"
    code, stderr = run_in_session(
        [sys.executable, "-m", "dagrl.main_dag", *dapo_args(tmp_path / "run")],
        {"DAGRL_RECORD_CONFIG_READS": str(reads)},
    )
    assert code == 0, stderr[-3000:]
    # the GRPO run's dead-key test (tests/trainer/test_end_to_end.py) leaves dynamic sampling's keys to this run
    read = set(json.loads(reads.read_text()))
    assert {f"algorithm.filter_groups.{key}" for key in ("enable", "metric", "max_num_gen_batches")} <= read
    records = metrics_by_step(tmp_path / "run")
    for step in (1, 2):
        assert records[step]["train/num_batch_groups"] == 4.0
        assert records[step]["train/num_kept_groups"] >= 4.0
        assert records[step]["actor/grad_norm"] > 0
        assert "reward/overlong_penalty/mean" in records[step]
    # even-answer prompts are uniform, so one batch of 4 prompts rarely suffices (here: seeded, it never does)
    assert all(records[step]["train/num_gen_batches"] > 1 for step in (1, 2))


@pytest.mark.slow
def test_dapo_limit_error_and_smaller_batch_runs(dapo_args, tmp_path):
    code, stderr = launch(
        dapo_args(tmp_path / "error", mode="constant", **{"algorithm.filter_groups.max_num_gen_batches": 2})
    )
    assert code != 0
    assert "algorithm.filter_groups.max_num_gen_batches=2" in stderr and "on_limit=smaller_batch" in stderr
    assert "only 0 of data.train_batch_size=4" in stderr

    # data.seed 3: each step's one generation batch holds a group that varies (in verl's prompt order; some seeds'
    # batches hold none, and smaller_batch then stops the run, as the first part asserts)
    code, stderr = launch(
        dapo_args(
            tmp_path / "smaller",
            **{
                "data.seed": 3,
                "algorithm.filter_groups.max_num_gen_batches": 1,
                "algorithm.filter_groups.on_limit": "smaller_batch",
            },
        )
    )
    assert code == 0, stderr[-3000:]
    records = metrics_by_step(tmp_path / "smaller")
    for step in (1, 2):
        kept = records[step]["train/num_kept_groups"]
        assert records[step]["train/num_gen_batches"] == 1.0
        assert records[step]["train/num_batch_groups"] == min(kept, 4.0)
    assert any(records[step]["train/num_batch_groups"] < 4 for step in (1, 2))
    assert "training on" in stderr


@pytest.mark.slow
def test_dapo_kill_and_resume_matches_an_uninterrupted_run(dapo_args, tmp_path):
    """Extra prompts come from the checkpointed sampler: a resumed run draws exactly what the original drew."""
    extra = {"trainer.total_training_steps": 3, "trainer.save_freq": 2}
    code, stderr = launch(dapo_args(tmp_path / "straight", **extra))
    assert code == 0, stderr[-3000:]
    code, _ = run_in_session(
        [sys.executable, "-m", "dagrl.main_dag", *dapo_args(tmp_path / "resumed", **extra)],
        env={"DAGRL_FAULT": "actor_update:3"},
    )
    assert code == -9
    code, stderr = launch(dapo_args(tmp_path / "resumed", **extra))
    assert code == 0, stderr[-3000:]
    straight, resumed = metrics_by_step(tmp_path / "straight"), metrics_by_step(tmp_path / "resumed")
    assert straight == resumed and straight[3]["train/num_gen_batches"] >= 1
    data = [
        json.dumps(sorted(torch.load(p / "global_step_3" / "data.pt", weights_only=False)["sampler"].items()))
        for p in (tmp_path / "straight", tmp_path / "resumed")
    ]
    assert data[0] == data[1]


@pytest.mark.slow
def test_dapo_on_two_processes_counts_groups_globally(dapo_args, tmp_path):
    """Rollout DP 2 (hf) and actor TP 2 (DP 1): both ranks run the same rounds (else the run would hang), the
    trimmed batch is assembled from both rollout shards and moved to the one actor-DP rank."""
    args = dapo_args(
        tmp_path / "dp2",
        **{
            "trainer.n_gpus_per_node": 2,
            "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2,
        },
    )
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
            *args,
        ],
        env={"OMP_NUM_THREADS": "1"},
    )
    assert code == 0, stderr[-3000:]
    records = metrics_by_step(tmp_path / "dp2")
    for step in (1, 2):
        assert records[step]["train/num_batch_groups"] == 4.0 and records[step]["actor/grad_norm"] > 0
        assert records[step]["train/num_kept_groups"] >= 4.0
