# FP8 against bf16 on one GPU (run.sh sources it). $PARTS (default "rollout update learn"; ~14 min with two
# rollout arms (COMPARE=bf16,fp8), ~17 with the default three; update ~2.5 min, learn ~3 min on an H100):
# rollout  dagrl's vLLM rollout, bf16 engine then FP8 weights (actor_rollout_ref.rollout.quantization=fp8) with
#          block and with per-tensor scales ($COMPARE), on the Qwen3-1.7B and 8B shapes (dummy weights), $PROMPTS (64)
#          prompts x 4, 1,024 tokens forced, CUDA graphs, 3 calls each: tokens/s of each and their ratio
#          (benchmarks/rollout.py --compare; PROMPTS=256 for a fuller batch). ~4.5 min at 1.7B, ~5.5 at 8B
# update   the actor update on the Qwen3-1.7B shape, $USTEPS (8) steps, dagrl and bare Megatron-Core both in bf16,
#          then both in FP8 (TE e4m3) with each of $RECIPES (blockwise tensorwise), each FP8 run against the bf16 run
# learn    SmolLM2-135M-Instruct GRPO, $STEPS (12) steps per arm: bf16, FP8 rollout with TIS (cap 2), FP8 rollout
#          with sequence masking instead of TIS; held-out accuracy every 4, s/step, sync, log-prob gap ($O/learn)
PARTS=${PARTS:-rollout update learn}
C=${COMPARE:-bf16,fp8,fp8_tensor}
FORCED="--prompts ${PROMPTS:-64} --n 4 --response-length 1024 --force-lengths --paths node --repeats 3"
case " $PARTS " in *" rollout "*)
  step fp8_rollout17 timeout 480 python3 benchmarks/rollout.py --compare $C --size 1.7b $FORCED \
    --gpu-memory-utilization 0.85 --runner v2 --json $O/fp8_rollout17.json
  step fp8_rollout8b timeout 480 python3 benchmarks/rollout.py --compare $C --size 8b $FORCED \
    --gpu-memory-utilization 0.85 --runner v2 --json $O/fp8_rollout8b.json
  gpu_used ;;
esac
case " $PARTS " in *" update "*)
  UPDATE="python3 -m torch.distributed.run --nproc-per-node 1 benchmarks/actor_mfu.py --size 1.7b --steps ${USTEPS:-8}"
  step update17_bf16 timeout 240 $UPDATE --json $O/update17_bf16.json
  for recipe in ${RECIPES:-blockwise tensorwise}; do
    step update17_fp8_$recipe timeout 240 $UPDATE --fp8 e4m3 --fp8-recipe $recipe --against $O/update17_bf16.json \
      --json $O/update17_fp8_$recipe.json
  done
  gpu_used ;;
esac
case " $PARTS " in *" learn "*)
  step fp8_learn env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/fp8_learn.py --out $O/learn \
    --steps ${STEPS:-12} --test-freq 4
  rm -rf $O/learn/*/ckpt/global_step_*
  gpu_used ;;
esac
