"""More of verl's keys that dagrl does not have, each with what to do instead (load.VERL_KEYS takes them in). A key
under one of these names (actor_rollout_ref.rollout.agent.num_workers under ...rollout.agent) is answered the same."""
from __future__ import annotations

MORE_VERL_KEYS = {
    "actor_rollout_ref.model.use_shm": "dagrl reads the model from actor_rollout_ref.model.path itself (no "
                                       "shared-memory copy); drop the key",
    "actor_rollout_ref.rollout.agent": "dagrl's agent loop runs inside each rollout process, configured by "
                                       "actor_rollout_ref.rollout.multi_turn.*; drop the key",
    "data.dataloader_num_workers": "dagrl memory-maps an Arrow copy of the data files (data.cache_dir) in the "
                                   "training process, without loader workers; drop the key",
    "trainer.del_local_ckpt_after_load": "dagrl never deletes a checkpoint it resumed from; keep fewer with "
                                         "trainer.max_actor_ckpt_to_keep=N; drop the key",
    "reward_model.launch_reward_fn_async": "dagrl scores responses in worker processes under a time limit "
                                           "(reward_model.timeout_s); drop the key",
    "actor_rollout_ref.actor.megatron.use_mbridge": "dagrl converts the HF weights of actor_rollout_ref.model.path "
                                                    "to Megatron itself (no mbridge); drop the key",
    "data.filter_overlong_prompts_workers": "dagrl filters overlong prompts in the training process while the data "
                                            "loads (data.filter_overlong_prompts=true), without worker processes; "
                                            "drop the key",
    "async_training.compute_prox_log_prob": "dagrl always recomputes pi_old (the proximal policy) in the trainer; "
                                            "for AReaL's decoupled loss set "
                                            "actor_rollout_ref.actor.policy_loss.off_policy=decoupled; drop the key",
}


def foreign_key_hint(key: str, known: dict[str, str]) -> str | None:
    """What to do instead of `key` when it, or a section above it, is one of `known`."""
    parts = key.split(".")
    for end in range(len(parts), 1, -1):
        hint = known.get(".".join(parts[:end]))
        if hint:
            return hint
    return None
