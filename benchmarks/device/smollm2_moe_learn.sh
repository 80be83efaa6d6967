# The upcycled SmolLM2-MoE (8 experts, top-2, made on the machine by scripts/upcycle_moe.py) beside the dense
# SmolLM2-135M-Instruct on one GPU with the vLLM rollout (run.sh sources it): $STEPS (16) GRPO steps each arm of $ARMS
# (dense, moe, moe_r3), greedy held-out accuracy every 4, the log-prob gap and routing agreement with routing replay
# off and on, into $O/moe (benchmarks/moe_learn.py prints the table); then two 3-step runs of the MoE with the
# determinism switch on, whose metrics must be equal (determinism.log says whether they are).
step moe env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/moe_learn.py --out $O/moe --steps ${STEPS:-16} --test-freq 4 \
  --arms ${ARMS:-dense,moe,moe_r3}
gpu_used
if [ "${DET:-1}" = 1 ]; then  # DET=0 leaves the determinism runs out
for run in first second; do
  step det_$run env NGPUS=1 MODEL_PATH=$O/moe/moe_model DATA_DIR=$DATA CKPT_DIR=$O/det/$run \
    bash examples/grpo_trainer/run_smollm2-135m-vllm.sh trainer.total_training_steps=3 trainer.resume_mode=disable \
    trainer.val_before_train=False trainer.test_freq=-1 actor_rollout_ref.actor.megatron.use_deterministic_algorithms=true
done
step determinism python3 -c "
import json, sys
rows = [[{k: v for k, v in json.loads(l).items() if not k.startswith(('timing', 'perf', 'time'))}
         for l in open(f'$O/det/{r}/metrics.jsonl')] for r in ('first', 'second')]
print('equal' if rows[0] == rows[1] else 'DIFFERENT', len(rows[0]), 'steps')
for a, b in zip(*rows):
    print(a['step'], sorted(k for k in a if a[k] != b.get(k))[:12])
sys.exit(rows[0] != rows[1])"
fi
rm -rf $O/moe/*/ckpt/global_step_* $O/moe/moe_model $O/det/*/global_step_*
gpu_used
