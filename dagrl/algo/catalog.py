"""Every advantage estimator, policy loss, loss aggregation and KL estimator dagrl has: name, function, verl's name,
one-line doc and traits. Torch-free: pre-flight, the inert-key rules and docs/config_reference.md read it.

Call conventions, one per kind:
  estimator    fn(inputs: advantage.AdvantageInputs, algorithm_cfg) -> (advantages, returns), each [B, R]
  policy loss  fn(log_prob, old_log_prob, advantages, response_mask, spec) -> (per-token loss, per-token terms)
  aggregation  fn(mask, global_tokens, global_sequences, loss_scale_factor) -> per-token weights
  KL           fn(log_prob, ref_log_prob) -> per-token KL estimate
`uses` names the config keys an entry reads, relative to its registry's section.
"""

from __future__ import annotations

from dagrl.algo.registry import Registry

ADV = "dagrl.algo.advantage"
LOSS, MORE = "dagrl.algo.policy_loss", "dagrl.algo.policy_variants"
KL = "dagrl.algo.kl"

ADV_ESTIMATORS = Registry("advantage estimator", ("algorithm.adv_estimator",), "algorithm")
POLICY_LOSSES = Registry("policy loss", ("actor_rollout_ref.actor.policy_loss.loss_mode",), "actor_rollout_ref.actor")
LOSS_AGGREGATIONS = Registry(
    "loss aggregation", ("actor_rollout_ref.actor.loss_agg_mode", "critic.loss_agg_mode"), "actor_rollout_ref.actor"
)
KL_ESTIMATORS = Registry(
    "KL estimator",
    ("actor_rollout_ref.actor.kl_loss_type", "algorithm.kl_penalty", "distillation.distillation_loss.loss_mode"),
    "algorithm",
)
REGISTRIES = (ADV_ESTIMATORS, POLICY_LOSSES, LOSS_AGGREGATIONS, KL_ESTIMATORS)

est = ADV_ESTIMATORS.register
est(
    "grpo",
    f"{ADV}:grpo",
    "score minus its group's mean, over the group's std (GRPO); the default for verifiable "
    "rewards with several responses per prompt",
    verl="grpo",
    group=True,
    uses=("norm_adv_by_std_in_grpo",),
    lone="as in verl a group of one counts as mean 0, std 1, so each advantage would be the raw score / (1 + 1e-6): "
    "grpo without its group baseline",
)
est(
    "rloo",
    f"{ADV}:rloo",
    "score minus the mean score of the prompt's other responses (leave-one-out); an "
    "unbiased baseline without the std division",
    verl="rloo",
    group=True,
    lone="with no other response to leave out, each would keep its raw reward as its advantage: rloo without its "
    "baseline",
)
est(
    "reinforce_plus_plus",
    f"{ADV}:reinforce_plus_plus",
    "discounted returns (algorithm.gamma) whitened over the batch; needs no groups, so it works with rollout.n=1",
    verl="reinforce_plus_plus",
    uses=("gamma",),
)
est(
    "reinforce_plus_plus_baseline",
    f"{ADV}:reinforce_plus_plus_baseline",
    "score minus its group's mean, whitened "
    "over the batch (REINFORCE++-baseline); GRPO's centring with a batch-wide scale",
    verl="reinforce_plus_plus_baseline",
    group=True,
    lone="with no group mean to subtract, each would keep its raw reward before whitening: REINFORCE++ without its "
    "group baseline",
)
est(
    "gae",
    f"{ADV}:gae",
    "generalized advantage estimation from the critic's values (algorithm.gamma, lam), "
    "whitened; PPO with a critic (dag=ppo)",
    verl="gae",
    uses=("gamma", "lam"),
    needs=("values",),
)
est(
    "opo",
    f"{ADV}:opo",
    "score minus its group's length-weighted mean score (OPO, the optimal baseline for "
    "on-policy updates); exact on-policy training (ppo_epochs=1, one mini-batch)",
    verl="opo",
    group=True,
    lone="with no other response its baseline is 0, so each would keep its raw score as its advantage: opo without "
    "its baseline",
)
est(
    "grpo_passk",
    f"{ADV}:grpo_passk",
    "only each group's best response learns, by its margin over the second best "
    "(over the group's std with norm_adv_by_std_in_grpo; Pass@k training): to raise pass@k rather than pass@1",
    verl="grpo_passk",
    group=True,
    uses=("norm_adv_by_std_in_grpo",),
    lone="Pass@k gives each group's best response its margin over the second best, which a group of one does not "
    "have (verl raises)",
)
est(
    "gpg",
    f"{ADV}:gpg",
    "score minus its group's mean, times batch size / responses with a non-zero score (GPG, "
    "no std division); pair with policy_loss.loss_mode=gpg",
    verl="gpg",
    group=True,
    lone="as in verl a group of one counts as mean 0, so each would keep its raw score (times the batch's scale): "
    "gpg without its group baseline",
)
est(
    "remax",
    f"{ADV}:remax",
    "return to go minus the score of the prompt's greedy response (ReMax): a baseline "
    "without groups (rollout.n=1 works), for one extra greedy generation and scoring per prompt each step",
    verl="remax",
    needs=("reward_baselines",),
)

loss = POLICY_LOSSES.register
loss(
    "vanilla",
    f"{LOSS}:vanilla_policy_loss",
    "PPO's clipped ratio (clip_ratio_low/high) with the dual clip (clip_ratio_c) for negative advantages; the default",
    verl="vanilla",
)
loss(
    "gspo",
    f"{LOSS}:gspo_policy_loss",
    "PPO clipping on the sequence-level (geometric-mean) ratio (GSPO); "
    "aggregate with seq-mean-token-mean, the paper's mode",
    verl="gspo",
    differs="honours loss_agg_mode, where verl 0.9.0 always aggregates with seq-mean-token-mean",
)
loss(
    "cispo",
    f"{LOSS}:cispo_policy_loss",
    "clipped, detached ratio times log-prob (CISPO): every token keeps a "
    "gradient, for long responses whose rare tokens PPO would clip away",
    verl="cispo",
)
loss(
    "geo_mean",
    f"{MORE}:geo_mean_policy_loss",
    "PPO on the geometric mean of the token ratios, clipped per token "
    "in log space (GMPO): steadier ratios than vanilla on long responses",
    verl="geo_mean",
    aggregation="seq-mean-token-mean",
    differs="the mean over sequences is the mini-batch's (verl: each micro-batch's, fully masked rows included); "
    "truncated IS weights multiply per token (verl: their geometric mean per sequence)",
)
loss(
    "clip_cov",
    f"{MORE}:clip_cov_policy_loss",
    "vanilla PPO that also drops from the gradient a random "
    "clip_cov_ratio of the tokens whose advantage-log-prob covariance lies in (clip_cov_lb, clip_cov_ub) "
    "(Clip-Cov): against entropy collapse",
    verl="clip_cov",
    uses=("policy_loss.clip_cov_ratio", "policy_loss.clip_cov_lb", "policy_loss.clip_cov_ub"),
)
loss(
    "kl_cov",
    f"{MORE}:kl_cov_policy_loss",
    "unclipped ratio loss plus ppo_kl_coef x |log ratio| on the kl_cov_ratio "
    "of tokens with the largest advantage-log-prob covariance (KL-Cov): against entropy collapse",
    verl="kl_cov",
    uses=("policy_loss.kl_cov_ratio", "policy_loss.ppo_kl_coef"),
)
loss(
    "gpg",
    f"{MORE}:gpg_policy_loss",
    "plain policy gradient -A x log-prob, no ratio and no clip (GPG); with adv_estimator=gpg and one update per batch",
    verl="gpg",
)
loss(
    "sapo",
    f"{MORE}:sapo_policy_loss",
    "a smooth sigmoid gate of the ratio in place of the clip, steeper for negative advantages (tau_pos, tau_neg; SAPO)",
    verl="sapo",
    aggregation="seq-mean-token-mean",
    uses=("tau_pos", "tau_neg"),
)
loss(
    "dppo_tv",
    f"{MORE}:dppo_tv_policy_loss",
    "masks the tokens whose probability moved more than clip_ratio_low/"
    "high (total variation) since pi_old, with the ratio truncated at clip_ratio_c and detached (DPPO-TV)",
    verl="dppo_tv",
)
loss(
    "dppo_kl",
    f"{MORE}:dppo_kl_policy_loss",
    "as dppo_tv with the binary KL between the token's old and new probability as the divergence (DPPO-KL)",
    verl="dppo_kl",
)
POLICY_LOSSES.refuse("dro", "is verl's Direct Reward Optimization, which dagrl does not have: use vanilla or cispo")
POLICY_LOSSES.refuse(
    "bypass_mode",
    "is verl's loss without a recomputed pi_old; dagrl always recomputes it (use "
    "vanilla, with actor_rollout_ref.actor.tis_imp_ratio_cap for the rollout gap)",
)

agg = LOSS_AGGREGATIONS.register
agg(
    "token-mean", f"{LOSS}:token_mean", "sum over the mini-batch's tokens / their count; the default", verl="token-mean"
)
agg(
    "token-sum",
    f"{LOSS}:token_sum",
    "sum over the mini-batch's tokens, unnormalised (the gradient grows with the token count: lower the learning rate)",
    verl="token-sum",
)
agg(
    "seq-mean-token-sum",
    f"{LOSS}:seq_mean_token_sum",
    "each sequence's token sum, averaged over sequences",
    verl="seq-mean-token-sum",
)
agg(
    "seq-mean-token-mean",
    f"{LOSS}:seq_mean_token_mean",
    "each sequence's token mean, averaged over sequences (every response counts the same however long)",
    verl="seq-mean-token-mean",
)
agg(
    "seq-mean-token-sum-norm",
    f"{LOSS}:seq_mean_token_sum_norm",
    "token sums / loss_scale_factor (default the response length), averaged over sequences (Dr. GRPO: no length bias)",
    verl="seq-mean-token-sum-norm",
    uses=("loss_scale_factor",),
)

kl = KL_ESTIMATORS.register
kl("k1", f"{KL}:k1", "log pi - log pi_ref: unbiased value, high variance", verl="kl", aliases=("kl",))
kl("k2", f"{KL}:k2", "(log pi - log pi_ref)^2 / 2: biased value, the right gradient", verl="mse", aliases=("mse",))
kl(
    "k3",
    f"{KL}:k3",
    "pi_ref/pi - log(pi_ref/pi) - 1: unbiased, non-negative, low variance; the default of the KL loss",
    verl="low_var_kl",
    aliases=("low_var_kl",),
)
kl("abs", f"{KL}:abs_kl", "|log pi - log pi_ref|", verl="abs")
kl(
    "k1+",
    f"{KL}:k1",
    "k1's value with k2's gradient (straight-through): an unbiased KL gradient",
    verl="k1+",
    aliases=("kl+",),
    straight_through=True,
)
kl(
    "k3+",
    f"{KL}:k3",
    "k3's value with k2's gradient (straight-through): the KL loss's value with an unbiased gradient",
    verl="k3+",
    aliases=("low_var_kl+",),
    straight_through=True,
)
kl("abs+", f"{KL}:abs_kl", "abs's value with k2's gradient (straight-through)", verl="abs+", straight_through=True)
KL_ESTIMATORS.refuse(
    "full",
    "is verl's KL over the whole vocabulary, which needs every logit; dagrl's estimators "
    "read the sampled tokens' log-probs only: use k3 (low_var_kl) or k3+",
)
