# FP8 against bf16 on one GPU (run.sh sources it). $PARTS (default "rollout parity update sync learn"; ~24 min on
# an H100: rollout ~10 with the default three arms (~7 with COMPARE=bf16,fp8), parity ~4, update ~2.5, sync ~3,
# learn ~3):
# rollout  dagrl's vLLM rollout, bf16 engine then FP8 weights (actor_rollout_ref.rollout.quantization=fp8) with
#          block and with per-tensor scales ($COMPARE), on the Qwen3-1.7B and 8B shapes (dummy weights), $PROMPTS (64)
#          prompts x 4, 1,024 tokens forced, CUDA graphs, 3 calls each: tokens/s of each and their ratio
#          (benchmarks/rollout.py --compare; PROMPTS=256 for a fuller batch; SIZES="8b" for one shape). ~4.5 min at
#          1.7B, ~5.5 at 8B
# parity   the FP8 node against bare vLLM generate on the same FP8 engine (benchmarks/rollout.py's certifying form,
#          5 interleaved pairs), Qwen3-8B shape, $PROMPTS (64) prompts x 4, 1,024 tokens forced, ~4 min
# update   the actor update on the Qwen3-1.7B shape, $USTEPS (8) steps, dagrl and bare Megatron-Core both in bf16,
#          then both in FP8 (TE e4m3) with each of $RECIPES (blockwise tensorwise), each FP8 run against the bf16 run
# sync     dagrl.doctor with the FP8 rollout after a real weight sync: SmolLM2-135M-Instruct (widths of 576: per-tensor
#          scales), a random Qwen3 (0.5b preset, 4 layers: block scales) and a random Qwen3-MoE (30b-a3b, 2 layers:
#          block scales through vLLM's FP8 MoE method, its routers left bf16), logits peaked x30 ($SYNC_MODELS: any
#          of "smollm2 qwen3:0.5b:4 qwen3_moe:30b-a3b:2"); each report's pairs against the FP8 floor and its export
#          check, ~3 min
# learn    SmolLM2-135M-Instruct GRPO, $STEPS (12) steps per arm: bf16, FP8 rollout with TIS (cap 2), FP8 rollout
#          with sequence masking instead of TIS; held-out accuracy every 4, s/step, sync, log-prob gap ($O/learn)
PARTS=${PARTS:-rollout parity update sync learn}
C=${COMPARE:-bf16,fp8,fp8_tensor}
FORCED="--prompts ${PROMPTS:-64} --n 4 --response-length 1024 --force-lengths --paths node --repeats 3"
case " $PARTS " in *" rollout "*)
  for size in ${SIZES:-1.7b 8b}; do
    step fp8_rollout${size/./} timeout 480 python3 benchmarks/rollout.py --compare $C --size $size $FORCED \
      --gpu-memory-utilization 0.85 --runner v2 --json $O/fp8_rollout${size/./}.json
  done
  gpu_used ;;
esac
case " $PARTS " in *" parity "*)
  step fp8_parity8b timeout 480 python3 benchmarks/rollout.py --size 8b --quantization fp8 --prompts ${PROMPTS:-64} \
    --n 4 --response-length 1024 --force-lengths --repeats 5 --gpu-memory-utilization 0.85 --runner v2 \
    --json $O/fp8_parity8b.json
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
case " $PARTS " in *" sync "*)
  FP8="actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.quantization=fp8
    actor_rollout_ref.rollout.calculate_log_probs=true actor_rollout_ref.actor.tis_imp_ratio_cap=2
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3 actor_rollout_ref.rollout.enforce_eager=true
    data.train_files=$DATA/train.parquet data.val_files=$DATA/test.parquet data.train_batch_size=32
    data.max_prompt_length=64 data.max_response_length=12 actor_rollout_ref.rollout.n=8
    actor_rollout_ref.actor.ppo_mini_batch_size=32 actor_rollout_ref.actor.megatron.param_dtype=bfloat16
    trainer.n_gpus_per_node=1 trainer.default_local_dir=$O/ckpt"
  for entry in ${SYNC_MODELS:-smollm2 qwen3:0.5b:4 qwen3_moe:30b-a3b:2}; do
    if [ "$entry" = smollm2 ]; then step sync_smollm2 python3 -m dagrl.doctor actor_rollout_ref.model.path=$MODEL $FP8
      continue; fi
    IFS=: read -r family size layers <<< "$entry"
    step init_$family python3 scripts/init_random_model.py --family $family --size $size --num-layers $layers \
      --out /tmp/fp8_$family --tokenizer $MODEL --device cuda --peak 30
    step sync_$family python3 -m dagrl.doctor actor_rollout_ref.model.path=/tmp/fp8_$family $FP8
    rm -rf /tmp/fp8_$family
  done
  gpu_used ;;
esac
case " $PARTS " in *" learn "*)
  step fp8_learn env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/fp8_learn.py --out $O/learn \
    --steps ${STEPS:-12} --test-freq 4
  rm -rf $O/learn/*/ckpt/global_step_*
  gpu_used ;;
esac
