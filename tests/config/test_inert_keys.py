"""Settings another key switches off (dagrl/config/inert_keys.py): refused when set to something that would apply,
accepted when zeroed as well (verl's DAPO scripts write use_kl_loss=False kl_loss_coef=0.0)."""

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.inert_keys import check_inert_keys
from dagrl.config.load import compose
from dagrl.config.tree import Cfg


def cfg_of(*overrides):
    return Cfg(compose(list(overrides)))


@pytest.mark.parametrize(
    "overrides",
    [
        (
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.actor.kl_loss_coef=0.0",
            "algorithm.use_kl_in_reward=false",
            "algorithm.kl_ctrl.kl_coef=0.0",
        ),
        ("actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.01"),
        ("actor_rollout_ref.rollout.val_kwargs.do_sample=false", "actor_rollout_ref.rollout.val_kwargs.temperature=0"),
    ],
)
def test_settings_that_apply_or_are_zeroed_pass(overrides):
    check_inert_keys(cfg_of(*overrides))


@pytest.mark.parametrize(
    "overrides, key, switch",
    [
        (
            ("actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.kl_loss_coef=0.01"),
            "actor_rollout_ref.actor.kl_loss_coef",
            "use_kl_loss=true",
        ),
        (
            ("algorithm.use_kl_in_reward=false", "algorithm.kl_ctrl.kl_coef=0.05"),
            "algorithm.kl_ctrl.kl_coef",
            "use_kl_in_reward=true",
        ),
        (
            (
                "actor_rollout_ref.rollout.val_kwargs.do_sample=false",
                "actor_rollout_ref.rollout.val_kwargs.temperature=0.6",
            ),
            "actor_rollout_ref.rollout.val_kwargs.temperature",
            "do_sample=true",
        ),
        (
            ("actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.fp8_scales=tensor"),
            "actor_rollout_ref.rollout.fp8_scales",
            "quantization=fp8",
        ),
        (
            ("distillation.distillation_loss.distillation_loss_coef=2",),
            "distillation.distillation_loss.distillation_loss_coef",
            "dag=opd",
        ),
        (
            (
                "dag=opd",
                "distillation.distillation_loss.use_task_rewards=false",
                "distillation.distillation_loss.distillation_loss_coef=2",
            ),
            "distillation.distillation_loss.distillation_loss_coef",
            "use_task_rewards=true",
        ),
    ],
)
def test_a_setting_its_switch_turns_off_is_named_with_the_switch(overrides, key, switch):
    with pytest.raises(ConfigError) as err:
        check_inert_keys(cfg_of(*overrides))
    assert key in str(err.value) and switch in str(err.value) and "has no effect" in str(err.value)
