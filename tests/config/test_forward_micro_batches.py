"""The hint that a forward-only pass (old / reference log-probs) runs in smaller micro-batches than the update."""

from __future__ import annotations

import logging

import pytest

from dagrl.config.load import compose
from dagrl.config.preflight.batches import hint_forward_micro_batches
from dagrl.config.tree import Cfg


def hints(caplog, overrides: list[str]) -> list[str]:
    cfg = Cfg(compose(overrides))
    forward = {
        prefix: cfg.actor_rollout_ref[prefix.split(".")[-1]].log_prob_micro_batch_size_per_gpu
        for prefix in ("actor_rollout_ref.rollout", "actor_rollout_ref.ref")
    }
    with caplog.at_level(logging.WARNING, logger="dagrl.config.preflight.batches"):
        caplog.clear()
        hint_forward_micro_batches(cfg, forward, cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)
    return [record.getMessage() for record in caplog.records]


# ppo_epochs=2: the old log-probs are computed (a single on-policy step skips them)
TRAIN_64 = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64", "actor_rollout_ref.actor.ppo_epochs=2"]


def test_a_smaller_old_log_prob_micro_batch_is_named_with_the_fix(caplog):
    messages = hints(caplog, TRAIN_64 + ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16"])
    assert len(messages) == 1
    assert "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16" in messages[0]
    assert "4x as many micro-batches" in messages[0] and "set it to 64" in messages[0]


@pytest.mark.parametrize(
    "extra",
    [
        ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64"],  # as large: no hint
        [
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        ],  # a token budget instead
        [
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.actor.ppo_epochs=1",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1024",
        ],  # skipped
    ],
)
def test_no_hint_when_the_pass_is_not_smaller_or_not_run(caplog, extra):
    assert hints(caplog, TRAIN_64 + extra) == []


def test_the_reference_pass_is_named_only_when_a_kl_term_builds_it(caplog):
    small_ref = TRAIN_64 + [
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    ]
    assert hints(caplog, small_ref) == []
    messages = hints(caplog, small_ref + ["actor_rollout_ref.actor.use_kl_loss=true"])
    assert len(messages) == 1 and messages[0].startswith("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8")
