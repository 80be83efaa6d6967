"""The algorithm section: each key's type, default, range, choices and doc (conf/algorithm/default.yaml is written from
it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.algo.catalog import ADV_ESTIMATORS, KL_ESTIMATORS
from dagrl.config.schema.spec import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, UNIT, Section, hinted, key, section


@dataclass(frozen=True)
class KlCtrl(Section):
    """coefficient of the KL-in-reward penalty"""

    type: str = key("fixed", "fixed | adaptive", choices=("fixed", "adaptive"))
    kl_coef: float = key(0.001, "(initial) KL coefficient", NON_NEGATIVE)
    target_kl: float = key(0.1, "adaptive: KL the controller aims at", NON_NEGATIVE)
    horizon: int = key(10000, "adaptive: responses over which the coefficient adapts", POSITIVE_INT)


@dataclass(frozen=True)
class FilterGroups(Section):
    """DAPO dynamic sampling (the dynamic_sampling node of dag=dapo)"""

    enable: bool = key(False, "keep only groups whose metric varies; regenerate until train_batch_size groups")
    metric: str = key(
        "acc",
        "per-response value a group must vary in: acc | score | seq_reward | seq_final_reward",
        choices=("acc", "score", "seq_reward", "seq_final_reward"),
    )
    max_num_gen_batches: int = key(
        0,
        "generation batches per step at most; 0 = a whole epoch of prompts",
        hinted(NON_NEGATIVE_INT, "0 = a whole epoch of prompts"),
    )
    on_limit: str = key(
        "raise",
        "limit reached with too few groups: raise (stop, naming these keys) | smaller_batch",
        choices=("raise", "smaller_batch"),
    )


@dataclass(frozen=True)
class Algorithm(Section):
    """Advantage estimation and KL control."""

    adv_estimator: str = key(
        "grpo", "advantage estimator (gae needs a critic: dag=ppo)", choices=ADV_ESTIMATORS.choices
    )
    norm_adv_by_std_in_grpo: bool = key(True, "divide group advantages by the group's reward std")
    gamma: float = key(1.0, "discount factor of the returns", UNIT)
    lam: float = key(1.0, "lambda of generalized advantage estimation", UNIT)
    use_kl_in_reward: bool = key(False, "subtract kl_ctrl.kl_coef * KL(actor || reference) from token rewards")
    kl_penalty: str = key("kl", "KL estimator for the reward penalty", choices=KL_ESTIMATORS.choices)
    kl_ctrl: KlCtrl = section(KlCtrl, "coefficient of the KL-in-reward penalty")
    filter_groups: FilterGroups = section(FilterGroups, "DAPO dynamic sampling (the dynamic_sampling node of dag=dapo)")
