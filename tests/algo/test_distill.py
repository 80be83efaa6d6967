"""On-policy distillation (dag=opd): the reverse-KL advantage against hand values, and tiny CPU runs through the
real trainer: a teacher equal to the student gives no signal at all; a teacher of another size trains the student on
one response per prompt without the task reward. That the signal teaches is shown on a real model in
benchmarks/opd_learn.py (docs/algorithms.md)."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from dagrl.algo.distill import DistillSpec, distill_advantages
from dagrl.config.load import compose
from dagrl.config.tree import leaf_keys
from tests.conftest import cpu_run_overrides, make_tiny_model_dir
from tests.helpers import run_in_session, undocumented_metrics
from tests.trainer.test_end_to_end import metrics_by_step, train

STUDENT = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
TEACHER = torch.tensor([[-0.5, -3.0, -20.0, -1.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last token is not the model's (a tool's output, padding)


def spec(**changes) -> DistillSpec:
    return DistillSpec(
        **{
            "loss_mode": "k1",
            "use_task_rewards": False,
            "coef": 1.0,
            "loss_max_clamp": 10.0,
            "log_prob_min_clamp": -10.0,
            **changes,
        }
    )


def test_pure_distillation_is_minus_the_reverse_kl_per_token():
    # k1 = student - teacher, the teacher's -20 floored at -10: [-0.5, 1, 9.5]; masked token 0
    advantages, kl = distill_advantages(torch.zeros(1, 4), STUDENT, TEACHER, MASK, spec())
    assert advantages.tolist() == [[0.5, -1.0, -9.5, 0.0]]
    assert kl.tolist() == [[-0.5, 1.0, 9.5, 0.0]]


def test_the_cap_and_the_floor():
    advantages, _ = distill_advantages(torch.zeros(1, 4), STUDENT, TEACHER, MASK, spec(loss_max_clamp=5.0))
    assert advantages.tolist() == [[0.5, -1.0, -5.0, 0.0]]  # 9.5 cut to 5
    advantages, _ = distill_advantages(
        torch.zeros(1, 4), STUDENT, TEACHER, MASK, spec(loss_max_clamp=None, log_prob_min_clamp=None)
    )
    assert advantages.tolist() == [[0.5, -1.0, -19.5, 0.0]]  # neither: the raw -0.5 - (-20)


def test_with_the_task_reward_the_term_is_added_with_its_coefficient():
    task = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    advantages, _ = distill_advantages(task, STUDENT, TEACHER, MASK, spec(use_task_rewards=True, coef=0.5))
    assert advantages.tolist() == [[1.25, 0.5, -3.75, 0.0]]  # 1 + 0.5 x [0.5, -1, -9.5]; 0 outside the mask


def test_k3_estimator_by_hand():
    # k3 = exp(t - s) - (t - s) - 1 at s = -1, t = -0.5: e^0.5 - 0.5 - 1
    _, kl = distill_advantages(
        torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.tensor([[-0.5]]), torch.ones(1, 1), spec(loss_mode="k3")
    )
    assert kl.item() == pytest.approx(math.exp(0.5) - 1.5, rel=1e-6)


def opd_run(tiny_model, tiny_data, out, teacher, **extra):
    return cpu_run_overrides(
        tiny_model,
        tiny_data,
        out,
        **{
            "dag": "opd",
            "distillation.teacher_model.model_path": str(teacher),
            "trainer.val_before_train": False,
            "trainer.test_freq": -1,
            **extra,
        },
    )


def test_a_teacher_equal_to_the_student_gives_no_signal(tiny_model, tiny_data, tmp_path):
    """The teacher is another engine built from the student's own weights: every reverse KL is exactly 0, and so
    (pure distillation) is every advantage, and the update leaves the weights as they are."""
    out = tmp_path / "run"
    train(
        opd_run(
            tiny_model,
            tiny_data,
            out,
            tiny_model,
            **{"distillation.distillation_loss.use_task_rewards": False, "trainer.total_training_steps": 1},
        )
    )
    metrics = metrics_by_step(out)[1]
    assert metrics["distillation/reverse_kl"] == 0.0 and metrics["distillation/loss_max"] == 0.0
    assert metrics["critic/advantages/max"] == metrics["critic/advantages/min"] == 0.0
    assert metrics["actor/grad_norm"] == 0.0


def test_pure_distillation_from_a_larger_teacher_on_one_response_per_prompt(tiny_model, tiny_data, tmp_path):
    """A 3-layer teacher for the 2-layer student, one response per prompt (GRPO's groups are not needed without the
    task reward): the advantage is exactly minus the per-token KL, the update moves the student, and every
    distillation.* key is read by the run."""
    teacher = make_tiny_model_dir(tmp_path / "teacher", num_layers=3, seed=1)
    out, reads = tmp_path / "run", tmp_path / "reads.json"
    code, stderr = run_in_session(
        [
            sys.executable,
            "-m",
            "dagrl.main_dag",
            *opd_run(
                tiny_model,
                tiny_data,
                out,
                teacher,
                **{
                    "distillation.distillation_loss.use_task_rewards": False,
                    "actor_rollout_ref.rollout.n": 1,
                    "trainer.total_training_steps": 2,
                },
            ),
        ],
        {"DAGRL_RECORD_CONFIG_READS": str(reads)},
    )
    assert code == 0, stderr[-3000:]
    assert "building the teacher from" in stderr
    for step, metrics in sorted(metrics_by_step(out).items()):
        assert metrics["distillation/reverse_kl"] > 0.1, (step, metrics)
        assert metrics["critic/advantages/mean"] == pytest.approx(-metrics["distillation/loss"], abs=1e-9)
        assert metrics["critic/advantages/max"] == pytest.approx(-metrics["distillation/loss_min"], abs=1e-9)
        assert metrics["actor/grad_norm"] > 0 and math.isfinite(metrics["actor/pg_loss"])
    assert not undocumented_metrics(out), "add these to docs/metrics.md"
    read = set(json.loads(reads.read_text()))
    keys = [k for k in leaf_keys(compose([])) if k.startswith("distillation.")]
    assert keys and not [k for k in keys if k not in read]
