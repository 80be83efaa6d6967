"""Every model family at every 2-rank layout (test_family_matrix.py's jobs in the engine world, world.py).

check_families(WORK_DIR, FAMILIES) runs on both ranks of an initialized 2-rank world. WORK_DIR/<family> holds the
family's tiny HF model (4 layers, so that PP2xVPP2 has a layer per chunk). Each layout goes through
mp_worker.check_layout against HF transformers on the full batch: the export of the fresh import is
bit-exact, log-probs and entropy within 1e-5 (fp32), loss and grad norm of one step, the weights after one
Adam step, and where a checkpoint label is named, the checkpoint saved at that other layout gives the same next
step. Qwen3 and Qwen3-MoE also run the SP/DP/distributed-optimizer layouts and the packed/dynamic-batch cases of
mp_worker. Any failed check raises (exit code != 0); WORK_DIR/done.json lists the family/label pairs checked.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).parent))

from dagrl.placement import ParallelLayout as L
from engine_helpers import make_batch
from mp_worker import BATCHING, SCENARIOS, check_batching, check_layout, hf_reference

PP2 = L(pipeline_model_parallel_size=2)
PP2_VPP2 = L(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2)
# (label, layout, engine kwargs, load the checkpoint of label): PP2 and PP2xVPP2 each continue from TP2's.
DENSE = [("tp2", L(tensor_model_parallel_size=2), {}, None), ("pp2", PP2, {}, "tp2"), ("pp2_vpp2", PP2_VPP2, {}, "tp2")]
# MoE needs SP with TP > 1 (pre-flight); EP2 runs as EP2 x DP2. The loads cross TP+SP -> PP and EP+DP -> PP x VPP
# (plain optimizer on both sides: the distributed one's format differs, see mp_worker.SCENARIOS).
MOE = [
    ("tp2_sp", L(tensor_model_parallel_size=2, sequence_parallel=True), {}, None),
    ("ep2", L(expert_model_parallel_size=2), {}, None),
    ("pp2", PP2, {}, "tp2_sp"),
    ("pp2_vpp2", PP2_VPP2, {}, "ep2"),
    ("ep2_distopt", L(expert_model_parallel_size=2), {"use_distributed_optimizer": True}, None),
    # attention TP2 x DP1 beside experts EP2 x ETP1 on the same 2 ranks, continuing from EP2 x DP2's checkpoint
    (
        "tp2_sp_ep2",
        L(
            tensor_model_parallel_size=2,
            sequence_parallel=True,
            expert_model_parallel_size=2,
            expert_tensor_parallel_size=1,
        ),
        {},
        "ep2",
    ),
]
LAYOUTS = {
    "llama": DENSE,
    "qwen2": DENSE,
    "mistral": DENSE,
    # + TP2+SP, DP2 (loads TP2), distributed optimizer on DP2 and TP2 (loads DP2's)
    "qwen3": SCENARIOS["dense"],
    "qwen3_moe": MOE,
    "mixtral": MOE[:2],  # its own checkpoint names and router: split over TP+SP and gathered over EP
}
BATCHES = {"qwen3": BATCHING["batching"], "qwen3_moe": BATCHING["batching_moe"]}  # packed/dynamic == HF


def labels(family: str) -> list[str]:
    """What check_families checks for `family`, in order."""
    return [f"{family}/{case[0]}" for case in LAYOUTS[family] + BATCHES.get(family, [])]


def check_families(work_dir: Path, families: tuple[str, ...]) -> None:
    batch = make_batch(rows=4)
    for family in families:
        model_dir = str(work_dir / family)
        reference = hf_reference(model_dir, batch)
        results: dict = {}
        if dist.get_rank() == 0:
            print(f"== {family}", flush=True)
        for label, layout, kwargs, load_from in LAYOUTS[family]:
            check_layout(
                label,
                layout,
                kwargs,
                load_from,
                model_dir,
                work_dir / "checkpoints" / family,
                reference,
                batch,
                results,
            )
        for label, layout, kwargs, max_token_len in BATCHES.get(family, []):
            check_batching(label, layout, kwargs, max_token_len, model_dir, reference, batch)
    if dist.get_rank() == 0:
        (work_dir / "done.json").write_text(json.dumps([name for family in families for name in labels(family)]))
