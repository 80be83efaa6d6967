# The upcycled SmolLM2-MoE (8 experts, top-2, made on the machine by scripts/upcycle_moe.py) beside the dense
# SmolLM2-135M-Instruct on one GPU with the vLLM rollout (run.sh sources it): 16 GRPO steps each, greedy held-out
# accuracy every 4, the log-prob gap and routing agreement with routing replay off and on, into $O/moe
# (benchmarks/moe_learn.py prints the table).
step moe env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/moe_learn.py --out $O/moe --steps 16 --test-freq 4 \
  --arms ${ARMS:-dense,moe,moe_r3}
rm -rf $O/moe/*/ckpt/global_step_* $O/moe/moe_model
gpu_used
