# dagrl's vLLM rollout against bare vllm.LLM.generate on one GPU, certified or called noise (run.sh sources it; 9-14
# min on an H100, the profiled forced step 4-6 of them): the Qwen3-1.7B shape (dummy weights), 256 prompts x 4, bf16,
# CUDA graphs, model runner V2; $REPEATS (5) interleaved pairs, the first of each pair alternating. Three times:
# forced lengths (ignore_eos: every response 256 tokens), the same with the bare path's requests and SamplingParams
# built per call as the node builds them (--bare-fresh), and sampled lengths (up to 256 tokens, the same per-request
# seeds on both). Each log ends with the verdict line, every run's seconds and tokens beside the GPU clock,
# temperature, power, allocator, load, gc, prefix-cache hits and time to first token, and which of them moved with the
# time; $O/*.json keep the numbers. The forced run ends with one profiled call of each path and the functions whose
# own time differs most between them (--profile). First, 30 s of benchmarks/host_speed.py: a host whose own speed
# drifts (its 5-second windows' medians apart by more than the gap to certify) cannot certify a host-bound ratio.
step host_speed python3 benchmarks/host_speed.py --seconds 30 --window 5 --json $O/host_speed.json
CERTIFY="python3 benchmarks/rollout.py --size 1.7b --repeats ${REPEATS:-5} --runner v2"
step certify_forced timeout 420 $CERTIFY --force-lengths --profile --json $O/certify_forced.json
gpu_used
step certify_forced_fresh timeout 360 $CERTIFY --force-lengths --bare-fresh --json $O/certify_forced_fresh.json
gpu_used
step certify_sampled timeout 360 $CERTIFY --json $O/certify_sampled.json
gpu_used
