from __future__ import annotations

from tests.reliability.corpus.case import Case

TOPIC = "The reward manager (reward_model.*) and the overlong buffer"
CASES: tuple[Case, ...] = (
    Case(
        "reward_on_error_ignore",
        "`reward_model.on_error=ignore`",
        ("reward_model.on_error=ignore",),
        ("reward_model.on_error='ignore'", "zero, raise"),
    ),
    Case(
        "overlong_buffer_with_naive_manager",
        "`reward_model.overlong_buffer.enable=true` with the naive reward "
        "manager (the penalty would silently not apply)",
        ("reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=4"),
        ("reward_model.overlong_buffer.enable=true", "reward_manager=naive", "reward_model.reward_manager=dapo"),
    ),
    Case(
        "overlong_buffer_longer_than_response",
        "`overlong_buffer.len=10` with data.max_response_length=6",
        (
            "reward_model.reward_manager=dapo",
            "reward_model.overlong_buffer.enable=true",
            "reward_model.overlong_buffer.len=10",
        ),
        ("reward_model.overlong_buffer.len=10", "1..5"),
    ),
    Case(
        "overlong_buffer_len_negative",
        "`overlong_buffer.len=-4` (dapo manager)",
        (
            "reward_model.reward_manager=dapo",
            "reward_model.overlong_buffer.enable=true",
            "reward_model.overlong_buffer.len=-4",
        ),
        ("reward_model.overlong_buffer.len=-4", ">= 0"),
    ),
    Case(
        "async_reward_with_dynamic_sampling",
        "`reward_model.launch_reward_fn_async=true` with dag=dapo's filter",
        ("dag=dapo", "reward_model.launch_reward_fn_async=true"),
        (
            "reward_model.launch_reward_fn_async=true scores behind the reshard node",
            "filter_groups.enable=true) filters on the scores before it",
        ),
    ),
    Case(
        "async_reward_without_a_waiter",
        "`reward_model.launch_reward_fn_async=true` with the KL-in-reward node no longer depending on `score`",
        ("reward_model.launch_reward_fn_async=true", "dag.nodes.reward.deps=[ref_log_prob]"),
        (
            "reward_model.launch_reward_fn_async=true scores in the background behind the reshard node",
            "no node after it depends on 'score' to wait for the scores",
            "set reward_model.launch_reward_fn_async=false",
        ),
    ),
    Case(
        "async_reward_without_a_reshard",
        "`reward_model.launch_reward_fn_async=true` on a graph without the reshard node (one process)",
        (
            "reward_model.launch_reward_fn_async=true",
            "dag.nodes.to_actor_layout=null",
            "dag.nodes.old_log_prob.deps=[score]",
        ),
        (
            "reward_model.launch_reward_fn_async=true scores in the background behind the reshard node",
            "the graph has no reshard node (dagrl.nodes.layout:to_actor_layout) to score behind",
            "set reward_model.launch_reward_fn_async=false",
        ),
    ),
)
