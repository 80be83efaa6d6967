# Start-up, rollout and actor update on one GPU (run.sh sources it; ~24 min): pinned-memory allocation,
# the 1.7B and 135M start-up (fresh / empty cache / the run's cache), rollout, the 0.6B update against bare, the
# SmolLM2 phases.
step pinned python3 benchmarks/pinned_host.py --sizes 16 4 1
step init17 python3 scripts/init_random_model.py --family qwen3 --size 1.7b --out /tmp/q17 --tokenizer $MODEL \
  --dtype bf16 --device cuda
step st17 timeout 1000 python3 benchmarks/startup.py --out $O/st17 -- env NGPUS=1 MODEL_PATH=/tmp/q17 \
  DATA_DIR=$DATA bash examples/grpo_trainer/run_smollm2-135m-vllm.sh \
  actor_rollout_ref.rollout.enforce_eager=false actor_rollout_ref.rollout.gpu_memory_utilization=0.5
rm -rf $O/st17/run/global_step_*; gpu_used
step mfu06 timeout 600 python3 -m torch.distributed.run --nproc-per-node 1 benchmarks/actor_mfu.py --size 0.6b \
  --rounds 32 --steps 1
step rollout timeout 600 python3 -m torch.distributed.run --nproc-per-node 1 benchmarks/rollout.py --repeats 5 --runner v2
gpu_used
step st135 timeout 600 python3 benchmarks/startup.py --out $O/st135 -- env NGPUS=1 MODEL_PATH=$MODEL \
  DATA_DIR=$DATA bash examples/grpo_trainer/run_smollm2-135m-vllm.sh
rm -rf $O/st135/run/global_step_*
# the SmolLM2 GRPO job's phases (old log-prob against update, step against their sum), 16 steps
step smol16 env NGPUS=1 MODEL_PATH=$MODEL DATA_DIR=$DATA bash examples/grpo_trainer/run_smollm2-135m-vllm.sh \
  trainer.total_training_steps=16 trainer.val_before_train=False trainer.test_freq=-1 trainer.save_freq=-1 \
  trainer.default_local_dir=$O/smol16
