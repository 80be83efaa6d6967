# dagrl against verl, both jobs from one run on one host of two GPUs (run.sh sources it; verl installed apart): the
# throughput job on GPU 0 and the two-seed learn job on GPU 1 at the same time. One after the other they take about
# 36 minutes of one H200 (18 + 17.5); side by side about 18. Each job's
# nvidia-smi samples watch its own GPU (vs_verl.py: the first of CUDA_VISIBLE_DEVICES, PCI bus order); the learn
# job's torchrun takes another port than the throughput job's (both run dagrl's script without --standalone); verl's
# two Ray clusters run without their dashboards, which would both ask for port 8265.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
NODASH="+ray_kwargs.ray_init.include_dashboard=False"
gpu_used
(export CUDA_VISIBLE_DEVICES=0
 step tput python3 benchmarks/vs_verl.py --smol "$MODEL" --arith "$DATA" --job throughput --out $O/tput \
   --sides dagrl,verl --timeout 1200 --verl-extra "$NODASH") &
(export CUDA_VISIBLE_DEVICES=1 PET_MASTER_PORT=29611
 step learn python3 benchmarks/vs_verl.py --smol "$MODEL" --arith "$DATA" --job learn --seeds 0,1 --out $O/learn \
   --timeout 900 --verl-extra "$NODASH") &
wait
gpu_used
