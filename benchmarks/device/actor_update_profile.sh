# The actor update on one GPU (run.sh sources it; ~9 min): the 0.6B update against bare with 48
# rounds, one profiled step of each (kernels against wall, host ops, Python), the 1.7B update, and the SmolLM2 GRPO
# job's phases (old log-prob against update, step against their sum).
step mfu06 timeout 600 python3 -m torch.distributed.run --nproc-per-node 1 benchmarks/actor_mfu.py --size 0.6b \
  --rounds 48 --steps 1
step prof06 timeout 400 python3 -m torch.distributed.run --nproc-per-node 1 benchmarks/actor_mfu.py --size 0.6b \
  --rounds 2 --steps 1 --profile $O/prof06 --pyprofile $O/prof06
step smol32 env NGPUS=1 MODEL_PATH=$MODEL DATA_DIR=$DATA bash examples/grpo_trainer/run_smollm2-135m-vllm.sh \
  trainer.total_training_steps=32 trainer.val_before_train=False trainer.test_freq=-1 trainer.save_freq=-1 \
  trainer.default_local_dir=$O/smol32
gpu_used
step mfu17 timeout 600 python3 -m torch.distributed.run --nproc-per-node 1 benchmarks/actor_mfu.py --size 1.7b \
  --rounds 8 --steps 1
