"""The vLLM rollout's request level on a GPU (run by test_vllm_rollout.py; vLLM only, no Megatron).

usage: torchrun --nproc-per-node 1 vllm_requests_worker.py WORK_DIR
On vllm_worker.py's peaked random Qwen3 (real weights loaded, then synced from the HF model as the trainer does):
greedy requests reproduce the batch-level `generate`; a sync while requests are in flight is refused; requests
aborted after a few steps and re-submitted as continuations after a sync (same weights) finish with the tokens of
the uninterrupted run, tagged with both versions; an aborted request's partial output is what it had generated;
log-probs come back for every token. Writes WORK_DIR/result.json; a failed check raises.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dagrl.engine.rollout.interface import Request, SamplingSpec, run_to_completion
from dagrl.engine.rollout.vllm_io import prompt_token_ids
from tests.gpu.vllm_worker import EOS, PAD, make_model, prompts_batch

RESPONSE = 24


def main(work: Path) -> None:
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec
    from dagrl.utils.dist import init_process_group

    init_process_group()
    model_dir = work / "model"
    make_model(model_dir)
    rollout = VLLMRollout(
        VLLMRolloutSpec(
            model_path=str(model_dir),
            gpu_memory_utilization=0.3,
            max_model_len=256,
            load_format="dummy",
            enforce_eager=True,
        ),
        [EOS],
        PAD,
    )
    from safetensors.torch import load_file

    weights = [(name, tensor.cuda()) for name, tensor in load_file(str(model_dir / "model.safetensors")).items()]
    rollout.load_weights(iter([weights]), version=0)
    greedy = SamplingSpec(do_sample=False, response_length=RESPONSE)
    prompts = prompts_batch()
    batch = rollout.generate(prompts, greedy, seed=0)
    requests = [Request(f"q{row}", tuple(ids), greedy, seed=row) for row, ids in enumerate(prompt_token_ids(prompts))]
    result: dict = {}

    start = time.perf_counter()
    straight = run_to_completion(rollout, requests)
    result["request_level_s"] = time.perf_counter() - start
    same = [
        list(done.token_ids) == batch["responses"][row, : int(batch["response_mask"][row].sum())].tolist()
        for row, done in enumerate(straight)
    ]
    result["greedy_equal_to_generate"] = sum(same) / len(same)
    assert all(
        len(done.log_probs) == len(done.token_ids) and all(lp <= 0 for lp in done.log_probs) for done in straight
    )

    rollout.submit(requests)
    finished = [completion for _ in range(3) for completion in rollout.advance()]
    try:
        rollout.load_weights(iter([weights]), version=1)
        raise AssertionError("load_weights with requests in flight was accepted")
    except RuntimeError as error:
        assert "in flight" in str(error)
    partial = rollout.abort()
    assert partial and rollout.in_flight() == 0
    result["aborted_after_3_steps"] = len(partial)
    result["partial_lengths"] = sorted({len(c.token_ids) for c in partial})
    rollout.load_weights(iter([weights]), version=1)
    resumed = run_to_completion(rollout, [c.continuation() for c in partial])
    by_id = {c.id: c for c in finished + resumed}
    result["continued_equal_to_straight"] = sum(by_id[d.id].token_ids == d.token_ids for d in straight) / len(straight)
    for carried in resumed:
        prefix = len(next(p for p in partial if p.id == carried.id).token_ids)
        assert carried.versions == (0,) * prefix + (1,) * (len(carried.token_ids) - prefix), carried.versions
    result["log_prob_gap_continued"] = max(
        abs(a - b) for d in straight for a, b in zip(by_id[d.id].log_probs, d.log_probs)
    )
    print("RESULT", json.dumps(result))
    (work / "result.json").write_text(json.dumps(result))
    assert result["greedy_equal_to_generate"] == 1.0 and result["continued_equal_to_straight"] >= 0.875


if __name__ == "__main__":
    main(Path(sys.argv[1]))
