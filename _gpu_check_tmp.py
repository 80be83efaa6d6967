import sys, tempfile, torch
sys.path.insert(0, ".")
from dagrl.config.tree import Cfg
from dagrl.trainer.profiler import StepProfiler, node_range
out = tempfile.mkdtemp()
p = StepProfiler(Cfg({"tool": "torch", "steps": [1], "ranks": [0], "save_path": out, "with_trace": True}), rank=0)
def step(n):
    x = torch.randn(4096, 4096, device="cuda")
    for name in ("rollout", "actor_update"):
        with node_range(name):
            for _ in range(5):
                x = (x @ x).tanh()
    return float(x.sum())
print(p.run(1, step))
import os
print(os.listdir(out))
print(open(os.path.join(out, "step_1_rank0.txt")).read()[:6000])
