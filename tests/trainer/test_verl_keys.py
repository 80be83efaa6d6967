"""verl's keys dagrl accepts under verl's name (docs/from_verl.md): trainer.rollout_data_dir,
trainer.log_val_generations, trainer.val_only, and the FSDP schedule keys optim.warmup_style / optim.min_lr_ratio."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.preflight.optim import check_verl_schedule
from dagrl.config.tree import Cfg
from dagrl.trainer.build import optim_spec
from tests.conftest import cpu_run_overrides
from tests.helpers import run_concurrently

REWARD = Path(__file__).with_name("reward_by_length.py")
OPTIM = "actor_rollout_ref.actor.optim"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # runs that go two at a time on the two cores (every run compared: the same)


def train(*runs: list[str]) -> list[str]:
    """The stderr of each run of `python -m dagrl.main_dag <overrides>`, all at the same time, each on one thread."""
    results = run_concurrently(
        [([sys.executable, "-m", "dagrl.main_dag", *overrides], ONE_THREAD) for overrides in runs]
    )
    for code, stderr in results:
        assert code == 0, stderr[-3000:]
    return [stderr for _, stderr in results]


def val_rows(out: Path) -> dict[int, float]:
    """{step: val-core metric} from <out>/metrics.jsonl, later rows winning."""
    found = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        found.update({row["step"]: v for k, v in row.items() if k.startswith("val-core/")})
    return found


def test_rollout_dump_val_generation_lines_and_val_only(tiny_model, tiny_data, tmp_path):
    def args(out: Path, **extra) -> list[str]:
        return cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{"custom_reward_function.path": str(REWARD), "trainer.test_freq": 2, "trainer.save_freq": 2, **extra},
        )

    out, fresh = tmp_path / "run", tmp_path / "fresh"
    stderr, _ = train(
        args(out, **{"trainer.rollout_data_dir": str(tmp_path / "rollouts"), "trainer.log_val_generations": 2}),
        args(fresh, **{"trainer.val_only": True}),
    )  # from model.path, beside it: checked last
    # every training step's responses: train_batch_size 4 x rollout.n 2, with the score the step's metric averaged
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["1.jsonl", "2.jsonl"]
    metrics = {json.loads(line)["step"]: json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()}
    for step in (1, 2):
        rows = [json.loads(line) for line in (tmp_path / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert len(rows) == 8 and all(r["step"] == step for r in rows)
        assert {"prompt", "response", "score", "data_source", "index"} <= set(rows[0])
        assert all("+" in r["prompt"] for r in rows)  # the arithmetic prompt's text, not token ids
        mean = sum(r["score"] for r in rows) / len(rows)
        assert mean == pytest.approx(metrics[step]["critic/score/mean"])
    # the first 2 validation generations at each validation (steps 0 and 2), the same prompts each time
    lines = [line for line in stderr.splitlines() if "val generation (step" in line]
    assert len(lines) == 4 and [line.split("] ")[0].split("[")[-1] for line in lines[:2]] == [
        line.split("] ")[0].split("[")[-1] for line in lines[2:]
    ]
    assert "prompt: " in stderr and "response: " in stderr
    expected = val_rows(out)
    assert sorted(expected) == [0, 2]

    # val_only on the checkpoint: validates step 2's weights once (the same greedy metric) and trains nothing
    (stderr,) = train(args(out, **{"trainer.val_only": True, "trainer.total_training_steps": 4}))
    assert "trainer.val_only: validated the weights of step 2" in stderr
    assert val_rows(out)[2] == expected[2]
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_2"]
    assert max(json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()) == 2

    # val_only from model.path: step 0's metric, no checkpoint, no training step
    assert val_rows(fresh) == {0: expected[0]}
    assert not list(fresh.glob("global_step_*"))


def spec(*overrides: str):
    cfg = Cfg(compose([f"{OPTIM}.lr=1e-5", f"{OPTIM}.lr_warmup_steps_ratio=0.1", *overrides]))
    check_verl_schedule(cfg, OPTIM)
    return optim_spec(cfg, SimpleNamespace(grad_clip=1.0), total_training_steps=100)


def test_verl_schedule_keys_give_the_schedule_of_dagrls_keys():
    verl = spec(f"{OPTIM}.warmup_style=cosine", f"{OPTIM}.min_lr_ratio=0.1")
    dagrl = spec(f"{OPTIM}.lr_decay_style=cosine", f"{OPTIM}.min_lr=1e-6")
    assert replace(verl, min_lr=dagrl.min_lr) == dagrl and verl.min_lr == pytest.approx(dagrl.min_lr)
    assert verl.lr_decay_style == "cosine"
    assert verl.lr_warmup_steps == dagrl.lr_warmup_steps > 0
    assert spec(f"{OPTIM}.warmup_style=constant").lr_decay_style == "constant"
    # both names with the same meaning are accepted
    assert spec(f"{OPTIM}.warmup_style=cosine", f"{OPTIM}.lr_decay_style=cosine") == replace(dagrl, min_lr=0.0)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ([f"{OPTIM}.warmup_style=linear"], "warmup_style='linear' is not one of: constant, cosine"),
        (
            [f"{OPTIM}.warmup_style=cosine", f"{OPTIM}.lr_decay_style=linear"],
            "warmup_style=cosine conflicts with actor_rollout_ref.actor.optim.lr_decay_style=linear",
        ),
        ([f"{OPTIM}.min_lr_ratio=0.1", f"{OPTIM}.min_lr=5e-6"], "min_lr_ratio=0.1 (min_lr 1e-06) conflicts with"),
    ],
)
def test_verl_schedule_keys_that_contradict_dagrls_are_refused(overrides, message):
    with pytest.raises(ConfigError) as info:
        spec(*overrides)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "actor_rollout_ref.actor.megatron.dtype=bfloat16",
            "dagrl's key is actor_rollout_ref.actor.megatron.param_dtype",
        ),
        (
            "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=4",
            "the reference reuses the actor's layout and dtype: set "
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size instead",
        ),
        ("critic.megatron.sequence_parallel=true", "set actor_rollout_ref.actor.megatron.sequence_parallel instead"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size=8", "set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"),
        ("reward_model.enable=false", "model-based reward models are not supported yet"),
        ("trainer.max_critic_ckpt_to_keep=2", "trainer.max_actor_ckpt_to_keep=N keeps N of them"),
    ],
)
def test_refused_verl_keys_say_why_and_what_to_set(override, message):
    with pytest.raises(ConfigError) as info:
        compose([override])
    assert f"'{override.split('=')[0]}' is verl's; " in str(info.value) and message in str(info.value)
