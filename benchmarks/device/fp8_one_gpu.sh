# FP8 against bf16 on one GPU (run.sh sources it). $PARTS (default "rollout update learn"; about 15 min in all by
# estimate, so on a 12-minute budget run PARTS=rollout, ~8 min, then PARTS="update learn", ~7 min):
# rollout  dagrl's vLLM rollout, bf16 engine then FP8 weights (actor_rollout_ref.rollout.quantization=fp8), on the
#          Qwen3-1.7B and 8B shapes (dummy weights), $PROMPTS (64) prompts x 4, 1,024 tokens forced, CUDA graphs,
#          3 calls each: tokens/s of each and their ratio (benchmarks/rollout.py --compare; the conditions of the
#          two points dagrl.plan's FP8 rule rests on, 0.81x at 1.7B and 1.17x at 8B; PROMPTS=256 for a fuller batch)
# update   the actor update on the Qwen3-1.7B shape, dagrl and bare Megatron-Core both in bf16, then both in FP8
#          (TE e4m3, $RECIPE (blockwise) recipe), the FP8 run's steps against the bf16 run's
# learn    SmolLM2-135M-Instruct GRPO, $STEPS (12) steps per arm: bf16, FP8 rollout with TIS (cap 2), FP8 rollout
#          with sequence masking instead of TIS; held-out accuracy every 4, s/step, sync, log-prob gap ($O/learn)
PARTS=${PARTS:-rollout update learn}
FORCED="--prompts ${PROMPTS:-64} --n 4 --response-length 1024 --force-lengths --paths node --repeats 3"
case " $PARTS " in *" rollout "*)
  step fp8_rollout17 timeout 330 python3 benchmarks/rollout.py --compare bf16,fp8 --size 1.7b $FORCED \
    --gpu-memory-utilization 0.85 --runner v2 --json $O/fp8_rollout17.json
  step fp8_rollout8b timeout 330 python3 benchmarks/rollout.py --compare bf16,fp8 --size 8b $FORCED \
    --gpu-memory-utilization 0.85 --runner v2 --json $O/fp8_rollout8b.json
  gpu_used ;;
esac
case " $PARTS " in *" update "*)
  step update17_bf16 timeout 240 python3 -m torch.distributed.run --nproc-per-node 1 benchmarks/actor_mfu.py \
    --size 1.7b --steps 3 --json $O/update17_bf16.json
  step update17_fp8 timeout 240 python3 -m torch.distributed.run --nproc-per-node 1 benchmarks/actor_mfu.py \
    --size 1.7b --steps 3 --fp8 e4m3 --fp8-recipe ${RECIPE:-blockwise} --against $O/update17_bf16.json \
    --json $O/update17_fp8.json
  gpu_used ;;
esac
case " $PARTS " in *" learn "*)
  step fp8_learn env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/fp8_learn.py --out $O/learn \
    --steps ${STEPS:-12} --test-freq 4
  rm -rf $O/learn/*/ckpt/global_step_*
  gpu_used ;;
esac
