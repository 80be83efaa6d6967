"""kill -9 anywhere: a seeded CPU run killed at named phases and at random moments, relaunched with
resume_mode=auto until it finishes, ends with exactly the metrics and weights of an uninterrupted run.

`DAGRL_UPDATE_DOCS=1 pytest tests/reliability/test_kill_resume.py -m slow` rewrites the figures in
docs/reliability.md from the slow test's kills.
"""

from __future__ import annotations

import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides
from tests.helpers import run_in_session
from tests.reliability.harness import (
    CHECKPOINT_PHASES,
    Chain,
    KillSpec,
    assert_same_run,
    figures_table,
    launch,
    run_until_done,
    trace_timings,
)

REWARD = Path(__file__).parents[1] / "trainer" / "reward_by_length.py"  # gives the tiny model a learning signal
DOCS = Path(__file__).parents[2] / "docs" / "reliability.md"
FIGURES_BEGIN, FIGURES_END = "<!-- kill-figures:begin -->", "<!-- kill-figures:end -->"


@pytest.fixture(scope="module")
def run_args(tiny_model, tiny_data):
    """A seconds-per-step run whose resume needs every piece of state: Adam moments (two optimizer steps per
    step), a warmup + cosine LR schedule, a shuffled sampler and shuffled mini-batches."""

    def make(out: Path, steps: int, save_freq: int) -> list[str]:
        return cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "custom_reward_function.path": str(REWARD),
                "data.val_files": "null",
                "trainer.val_before_train": False,
                "trainer.test_freq": -1,
                "trainer.total_training_steps": steps,
                "trainer.save_freq": save_freq,
                "actor_rollout_ref.actor.ppo_epochs": 2,
                "actor_rollout_ref.actor.shuffle": True,
                "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.5,
                "actor_rollout_ref.actor.optim.lr_decay_style": "cosine",
            },
        )

    return make


@pytest.mark.slow  # a chain of kills; CI kills and resumes in test_end_to_end.py and tests/reliability/test_ctrl_c.py
def test_three_named_kills_then_the_run_matches_an_uninterrupted_one(run_args, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    plan = iter(
        [
            KillSpec("between_shards", 1),  # leaves .tmp_global_step_1 behind
            KillSpec("before_tracker", 1),  # global_step_1 complete, tracker file not yet written
            KillSpec("actor_update", 2),
        ]
    )  # mid-step, after a resume
    with ThreadPoolExecutor(1) as pool:  # the uninterrupted run alongside the killed one: two cores, half the wait
        baseline = pool.submit(run_in_session, [sys.executable, "-m", "dagrl.main_dag", *run_args(straight, 2, 1)])
        chain = run_until_done(
            run_args(killed, 2, 1), killed, tmp_path / "trace", lambda newest, chain: next(plan, None)
        )
        code, stderr = baseline.result()
    assert code == 0, stderr[-3000:]

    assert [(k.phase, k.step) for k in chain.kills] == [
        ("between_shards", 1),
        ("before_tracker", 1),
        ("actor_update", 2),
    ]
    assert chain.launches[1].partials_before == [".tmp_global_step_1"]  # there, and not chosen:
    assert [launch.resumed_from for launch in chain.launches] == [None, None, 1, 1]
    assert (killed / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert_same_run(straight, killed)


def kill_plan(
    rng: random.Random, earlier: list[Chain], kills: int, total: int, save_freq: int, startup_s: float, step_s: float
):
    """Seeded kills, until `kills` have happened (in the `earlier` chains and this one), in a fixed rotation of named
    phases and wall-clock moments: "steps" within about 1.5 checkpoint intervals after training begins, "start-up"
    within the start-up. Named kills aim at the next step or the next save."""
    rotation = [
        "rollout",
        "steps",
        "actor_update",
        "before_shards",
        "steps",
        "between_shards",
        "before_marker",
        "start-up",
        "before_tracker",
        "steps",
    ]
    issued = 0

    def plan(newest: int | None, chain: Chain) -> KillSpec | None:
        nonlocal issued
        if sum(len(c.kills) for c in earlier) + len(chain.kills) >= kills:
            return None
        phase = rotation[issued % len(rotation)]
        issued += 1
        done = newest or 0
        if done >= total:  # finished: the launch says so and exits 0
            return None
        if phase == "steps":
            return KillSpec(delay_s=round(rng.uniform(0, 1.5 * save_freq * step_s), 2), from_first_step=True)
        if phase == "start-up":
            return KillSpec(delay_s=round(rng.uniform(0.2, 0.9) * startup_s, 2))
        if phase in CHECKPOINT_PHASES:
            return KillSpec(phase, min(done + save_freq - done % save_freq, total))
        return KillSpec(phase, rng.randint(done + 1, min(done + save_freq, total)))

    return plan


@pytest.mark.slow
def test_twenty_kills_anywhere_lose_no_checkpoint_and_change_no_result(run_args, tmp_path):
    steps, save_freq, wanted = 6, 2, 20
    straight = tmp_path / "straight"
    baseline = launch(run_args(straight, steps, save_freq), straight, tmp_path / "trace", None)
    assert baseline.code == 0, baseline.stderr_tail
    startup_s, step_s = trace_timings(tmp_path / "trace", baseline.started_at)

    chains: list[Chain] = []
    plan = kill_plan(random.Random(8), chains, wanted, steps, save_freq, startup_s, step_s)
    while sum(len(chain.kills) for chain in chains) < wanted:  # a run that finishes early: kill a fresh one
        assert len(chains) < 5, "the runs keep finishing before the kills land"
        root = tmp_path / f"killed{len(chains)}"
        chains.append(run_until_done(run_args(root, steps, save_freq), root, tmp_path / "trace", plan))
        assert_same_run(straight, root)

    kills = [k for chain in chains for k in chain.kills]
    assert len(kills) >= wanted
    assert {k.phase for k in kills if k.spec.phase} == {"rollout", "actor_update", *CHECKPOINT_PHASES}
    assert all(k.steps_redone <= save_freq for k in kills)
    figures = figures_table(chains, steps, save_freq)
    print(f"\nbaseline: {startup_s:.1f} s to the first step, {step_s:.1f} s per step\n{figures}")
    if os.environ.get("DAGRL_UPDATE_DOCS"):
        text = DOCS.read_text()
        head, rest = text.split(FIGURES_BEGIN)
        DOCS.write_text(f"{head}{FIGURES_BEGIN}\n{figures}{FIGURES_END}{rest.split(FIGURES_END)[1]}")
