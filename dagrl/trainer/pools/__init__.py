"""Separate rollout and training pools (`actor_rollout_ref.hybrid_engine=false`), in one package: the rollout pool
(`rollout.py`, `RolloutPool`), the training pool (`training.py`, `TrainingPool`: the colocated loop fed by the
rollout pool), the schedule both follow (`schedule.py`) and the weights on the wire (`wire.py`). Which ranks form
which pool, their process groups and the bridge between them are placement's (dagrl/placement/pools.py, bridge.py).

The same graph runs, cut at the reshard node: the rollout pool runs the nodes before it (rollout, score, filters)
for batch b = 1, 2, ..., the training pool the rest for step s = b. They meet on the bridge:

- weights: after step s the training pool exports the actor's weights (collective) and its rank 0 sends them,
  labelled version s, to every rollout rank (every `async_training.trigger_parameter_sync_step` steps, at every
  validation step and at the start: version = the step resumed from). A push waits until the previous one was
  received, so at most one is in transit;
- batches: the rollout pool's rank 0 sends batch b (every shard, its metrics, the prompt-ledger view and the rollout
  state after b: sampler and partial-rollout buffers) to the training pool's rank 0, which hands it to every training
  rank. Generating batch b needs weights of version >= b - 1 - K (K = `async_training.max_staleness`): step b's
  update starts from version b - 1, so no trained token is more than K versions behind, and the rollout pool runs at
  most K + 1 batches ahead of training (the admission bound). K = 0 is the colocated schedule, exactly;
- validation runs in the rollout pool on the version pushed after each validation step; the trainer waits for it.
  A SIGTERM/SIGUSR1 in either pool cuts it between generations, so the preemption checkpoint lands within the grace.

A checkpoint of step s stores the rollout state that came with batch s. A resumed run sends it back and the rollout
pool regenerates batch s + 1 onwards from there: batches generated beyond s before the kill are never trained (they
were not in the ledger), and each prompt is trained exactly once.
"""
