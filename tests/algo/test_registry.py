"""The catalog is the one place an estimator, loss, aggregation or KL estimator is declared: a registration alone
makes pre-flight take its name, the trainer call it and the inert-key rules follow what it reads."""

import subprocess
import sys

import pytest
import torch

from dagrl.algo.advantage import AdvantageInputs
from dagrl.algo.catalog import ADV_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES, REGISTRIES
from dagrl.algo.policy_loss import PolicyLossSpec, policy_loss
from dagrl.config.errors import ConfigError
from dagrl.config.inert_keys import check_inert_keys
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.schema.check import choices_of
from dagrl.config.validate import preflight
from dagrl.data.batch import Batch
from dagrl.nodes.advantage import compute_advantage
from tests.helpers import node_context


def half_score(inputs: AdvantageInputs, algorithm) -> tuple[torch.Tensor, torch.Tensor]:
    """A test estimator: half of each response's score, discounted by nothing; reads algorithm.lam."""
    advantages = (inputs.scores * algorithm.lam / 2).unsqueeze(-1) * inputs.response_mask
    return advantages, advantages


@pytest.fixture
def registered():
    ADV_ESTIMATORS.register("half_score", f"{__name__}:half_score", "half the score", uses=("lam",))
    yield
    ADV_ESTIMATORS.unregister("half_score")


def _preflight_key(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        preflight(Cfg(compose(list(overrides))))
    return info.value.key


def test_a_registration_alone_reaches_preflight_the_node_and_the_inert_rules(registered):
    # pre-flight takes the name (the next problem is the missing model), also with rollout.n=1: no group trait
    assert "half_score" in choices_of("algorithm.adv_estimator")
    assert (
        _preflight_key("algorithm.adv_estimator=half_score", "actor_rollout_ref.rollout.n=1")
        == "actor_rollout_ref.model.path"
    )
    # the advantage node calls it
    cfg = Cfg(
        {
            "algorithm": {"adv_estimator": "half_score", "lam": 0.5},
            "actor_rollout_ref": {"actor": {"mis_ratio_low": None, "mis_ratio_high": None}},
        }
    )
    batch = Batch(
        {
            "token_level_rewards": torch.tensor([[0.0, 4.0], [2.0, 0.0]]),
            "response_mask": torch.tensor([[1, 1], [1, 0]]),
        },
        {"uid": ["a", "b"]},
    )
    out, metrics = compute_advantage(node_context(cfg), batch)
    torch.testing.assert_close(out["advantages"], torch.tensor([[1.0, 1.0], [0.5, 0.0]]))
    assert "critic/vf_explained_var" not in metrics  # it declares no need of the critic's values
    # what it reads (uses=("lam",)) is no longer inert with it; with grpo it still is
    check_inert_keys(Cfg(compose(["algorithm.adv_estimator=half_score", "algorithm.lam=0.5"])))
    with pytest.raises(ConfigError, match="set algorithm.adv_estimator=gae with dag=ppo \\(or half_score\\)"):
        check_inert_keys(Cfg(compose(["algorithm.lam=0.5"])))


def test_without_the_registration_the_name_is_refused():
    assert "half_score" not in choices_of("algorithm.adv_estimator")
    assert _preflight_key("algorithm.adv_estimator=half_score") == "algorithm.adv_estimator"


def test_every_key_a_registry_serves_takes_exactly_its_names():
    for registry in REGISTRIES:
        for key in registry.keys:
            assert tuple(choices_of(key)) == registry.names()
    assert "token-sum" in choices_of("critic.loss_agg_mode") and "k3+" in choices_of("algorithm.kl_penalty")


def test_every_entry_resolves_to_a_function_and_says_what_it_is():
    for registry in REGISTRIES:
        for entry in registry:
            assert callable(entry.fn), entry.name
            assert entry.doc and (entry.verl is None or entry.verl.strip()), entry.name  # None: verl has none
            assert not (entry.differs and entry.verl is None), f"{entry.name}: differs from a verl name it lacks"
    assert POLICY_LOSSES["sapo"].aggregation == "seq-mean-token-mean"
    assert PolicyLossSpec(loss_mode="sapo", loss_agg_mode="token-mean").loss_agg_mode == "seq-mean-token-mean"
    assert PolicyLossSpec(loss_mode="vanilla", loss_agg_mode="token-sum").loss_agg_mode == "token-sum"
    with pytest.raises(ValueError, match="registered twice"):
        LOSS_AGGREGATIONS.register("token-mean", "x:y", "again")


def doubled(log_prob, old_log_prob, advantages, response_mask, spec):
    return -2 * advantages * log_prob, {}


def test_a_registered_loss_is_called_with_the_common_convention():
    POLICY_LOSSES.register("doubled", f"{__name__}:doubled", "twice the plain policy gradient")
    try:
        loss, _ = policy_loss(
            PolicyLossSpec(loss_mode="doubled"),
            torch.tensor([-1.0]),
            torch.tensor([-1.0]),
            torch.tensor([3.0]),
            torch.ones(1),
        )
        assert loss.item() == 6.0
    finally:
        POLICY_LOSSES.unregister("doubled")


@pytest.mark.parametrize(
    "overrides,key,says",
    [
        (
            ("algorithm.adv_estimator=remax", "algorithm.filter_groups.enable=true"),
            "algorithm.adv_estimator",
            "greedy response per prompt",
        ),
        (
            ("actor_rollout_ref.actor.policy_loss.loss_mode=dro",),
            "actor_rollout_ref.actor.policy_loss.loss_mode",
            "Direct Reward Optimization",
        ),
        (("algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=full"), "algorithm.kl_penalty", "use k3"),
    ],
)
def test_verls_names_dagrl_lacks_or_cannot_combine_are_refused_with_the_reason(overrides, key, says):
    with pytest.raises(ConfigError) as info:
        preflight(Cfg(compose(["actor_rollout_ref.rollout.n=2", *overrides])))
    assert info.value.key == key and says in str(info.value).splitlines()[0]


@pytest.mark.parametrize(
    "overrides,key,says",
    [
        (
            ("actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.01",),
            "actor_rollout_ref.actor.policy_loss.clip_cov_ratio",
            "loss_mode=vanilla does not read policy_loss.clip_cov_ratio (clip_cov does)",
        ),
        (
            ("actor_rollout_ref.actor.tau_neg=2",),
            "actor_rollout_ref.actor.tau_neg",
            "set actor_rollout_ref.actor.policy_loss.loss_mode=sapo",
        ),
        (
            ("actor_rollout_ref.actor.policy_loss.loss_mode=sapo", "actor_rollout_ref.actor.loss_agg_mode=token-sum"),
            "actor_rollout_ref.actor.loss_agg_mode",
            "aggregates with seq-mean-token-mean",
        ),
        (
            ("algorithm.norm_adv_by_std_in_grpo=false", "algorithm.adv_estimator=rloo"),
            "algorithm.norm_adv_by_std_in_grpo",
            "(grpo and grpo_passk do)",
        ),
    ],
)
def test_options_a_registered_entry_reads_are_inert_without_it(overrides, key, says):
    with pytest.raises(ConfigError) as info:
        check_inert_keys(Cfg(compose(list(overrides))))
    assert info.value.key == key and "has no effect" in str(info.value) and says in str(info.value)


def test_the_catalog_imports_without_torch():
    code = (
        "import sys; import dagrl.algo.catalog, dagrl.config.preflight.algorithm, dagrl.config.inert_keys; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
