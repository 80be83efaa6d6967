# Why verl's generation is slower than dagrl's (run.sh sources it): one vLLM engine driven dagrl's way and verl's way
# (benchmarks/vllm_drive.py), each mode its own process and file, the most telling first: a run stopped early keeps
# the modes it finished (~2 min each on one GPU, the first with vLLM's compile).
step drive python3 benchmarks/vllm_drive.py --tokenizer "$MODEL" --out $O/drive \
  --modes inproc,async_mp,async_mp_final,detok --repeats 2 --timeout 400
