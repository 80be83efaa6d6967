"""The weights and numerics check at the run's own layout.

The actor's weights go to the rollout through a real sync (the comparison with the checkpoint rides along), the
rollout answers PROMPTS greedily with its log-probs, and the actor and HF transformers score the same tokens. The
reference is HF in float32; the floor of a dtype is the gap HF itself shows in it, measured the same way (bf16
against fp32; for float32, fp32 against fp64). A pair whose mean per-token gap exceeds FACTOR x its floor is a
finding: the side's hidden states are then compared with the reference's stage by stage to name the first stage
that parts, with the parameters behind it. An FP8 rollout's pairs are held to the FP8 floor (doctor/fp8.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from dagrl.doctor import fp8, probe as probes
from dagrl.doctor.stages import OUTPUT_STAGE, StageGap, actor_stages, compare, first_divergent, stage_tensors
from dagrl.doctor.weights import WeightCheck
from dagrl.engine.rollout.interface import StaleWeights

logger = logging.getLogger(__name__)

FACTOR = 4.0  # a gap within 4x the floor is that dtype's rounding; past it, something maps differently
# the relative rounding of one value in each dtype: a stage gap below FACTOR x this is never a finding
RESOLUTION = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-8}
FLOOR_DTYPE = {torch.float32: torch.float64, torch.bfloat16: torch.bfloat16}  # HF in this, against HF fp32
NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float64: "fp64"}


@dataclass(frozen=True)
class PairGap:
    """Per-token |log-prob a - log-prob b| over the probe's response tokens, against the pair's floor."""

    key: str  # metric name: actor_vs_hf, rollout_vs_hf, rollout_vs_actor
    pair: str
    mean: float
    max: float
    floor: float
    factor: float = FACTOR  # a finding past this many floors (fp8.FACTOR for an FP8 rollout's pairs)
    held_to: str | None = None  # the floor's name, said in the report when a run has more than one kind

    @property
    def exceeds(self) -> bool:
        return self.mean > self.factor * self.floor

    @property
    def ratio(self) -> float:
        return self.mean / self.floor if self.floor > 0 else float("inf") if self.mean > 0 else 0.0


@dataclass
class Divergence:
    """Where a side parts from the reference: the first stage past its floor (None: every hidden state within
    it, so the output layer), the parameters behind it, and every stage's gap."""

    side: str
    stage: StageGap | None
    tensors: list[str]
    gaps: list[StageGap]

    @property
    def where(self) -> str:
        return self.stage.stage if self.stage is not None else OUTPUT_STAGE


@dataclass
class Diagnosis:
    floors: dict[str, float]  # dtype name (or fp8) -> mean per-token gap of HF in it against HF fp32
    pairs: list[PairGap]
    weights: WeightCheck
    divergences: list[Divergence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # the whole check, on rank 0
    loading_s: float = 0.0  # of which loading the HF references from disk
    stale: list[str] = field(default_factory=list)  # rollout tensors the sync left unfilled (then nothing is scored)

    @property
    def ok(self) -> bool:
        return not self.stale and self.weights.exact and not any(p.exceeds for p in self.pairs)


def gap(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    diff = (a.double() - b.double()).abs()
    return float(diff.mean()), float(diff.max())


def _same_on_every_rank(value):
    """Rank 0's `value` on every rank (the engines must score identical tokens)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def diagnose(
    actor,
    rollout,
    tokenizer,
    model_path: str,
    rollout_dtype: torch.dtype,
    bucket_bytes: int,
    prompt_tokens: int = 16,
    response_tokens: int = 16,
    fp8_layout: str | None = None,
) -> Diagnosis:
    """Collective: every rank of the run calls it with its own engines; every rank gets the same Diagnosis.
    `fp8_layout`: the FP8 rollout's resolved scale layout (None: the rollout holds the weights as sent)."""
    from dagrl.engine.rollout.hf import HFRollout

    started, loading = time.perf_counter(), [0.0]

    def load(dtype: torch.dtype, quantized: bool = False):
        """HF in `dtype`; `quantized`: with the FP8 rollout's weights (the sync's round trip of the export's)."""
        begun = time.perf_counter()
        model = probes.load_hf(model_path, dtype, actor.device)
        if quantized:
            fp8.round_trip_model(model, model_path, fp8_layout, actor.spec.param_dtype)
        loading[0] += time.perf_counter() - begun
        return model

    rank = dist.get_rank() if dist.is_initialized() else 0
    tied = bool(getattr(actor.hf_config, "tie_word_embeddings", False))
    weights = WeightCheck(model_path, tied, compare=rank == 0, fp8_layout=fp8_layout)
    try:
        rollout.load_weights(weights.tee(actor.export_weights(bucket_bytes)))
    except StaleWeights as stale:  # a mapping finding: the rollout keeps its start-up tensors, nothing to score
        diagnosis = Diagnosis({}, [], _same_on_every_rank(weights), stale=stale.names)
        diagnosis.seconds = time.perf_counter() - started
        return diagnosis
    probe = _same_on_every_rank(probes.generate(rollout, probes.prompt_ids(tokenizer, prompt_tokens), response_tokens))
    actor_dtype = actor.spec.param_dtype
    actor_lp, _ = actor.compute_log_prob(
        probe.batch(), micro_batch_size=len(probe.input_ids), temperature=1.0, with_entropy=False
    )
    actor_lp = actor_lp.cpu()
    device = actor.device
    reference = load(torch.float32)
    ref_lp, _ = probes.hf_log_probs(reference, probe)
    floors = {}
    quantized = fp8_layout is not None
    for dtype in dict.fromkeys((actor_dtype,) if quantized else (actor_dtype, rollout_dtype)):
        model = load(FLOOR_DTYPE[dtype])
        floors[NAMES[dtype]] = gap(probes.hf_log_probs(model, probe)[0], ref_lp)[0]
        del model
    if quantized:  # in the rollout's own dtype: the FP8 rounding, not the dtype's, sets this floor
        model = load(rollout_dtype, quantized=True)
        floors[fp8.NAME] = gap(probes.hf_log_probs(model, probe)[0], ref_lp)[0]
        del model
    actor_floor = NAMES[actor_dtype]
    rollout_floor = fp8.NAME if quantized else NAMES[rollout_dtype]
    rollout_name = f"{NAMES[rollout_dtype]}, fp8 {fp8_layout} scales" if quantized else NAMES[rollout_dtype]
    rollout_factor = fp8.FACTOR if quantized else FACTOR

    def named(floor: str) -> str | None:  # the report names each pair's floor when the run has two kinds
        return floor if quantized else None

    pairs = [
        PairGap(
            "actor_vs_hf",
            f"actor ({actor_floor}) vs HF fp32",
            *gap(actor_lp, ref_lp),
            floors[actor_floor],
            held_to=named(actor_floor),
        ),
        PairGap(
            "rollout_vs_hf",
            f"rollout ({rollout_name}) vs HF fp32",
            *gap(probe.rollout_log_probs, ref_lp),
            floors[rollout_floor],
            rollout_factor,
            named(rollout_floor),
        ),
        PairGap(
            "rollout_vs_actor",
            "rollout vs actor",
            *gap(probe.rollout_log_probs, actor_lp),
            floors[actor_floor] + floors[rollout_floor],
            rollout_factor,
            named(f"{actor_floor} + {rollout_floor}"),
        ),
    ]
    pairs = _same_on_every_rank(pairs)  # one verdict on every rank
    diagnosis = Diagnosis(floors, pairs, _same_on_every_rank(weights))
    sides = {"actor": (actor_lp, actor_dtype), "rollout": (probe.rollout_log_probs, rollout_dtype)}
    for side, pair in zip(sides, pairs):
        if not pair.exceeds:
            continue
        if side == "actor" and actor.spec.layout.context_parallel_size > 1:
            diagnosis.notes.append("the actor's stages are not compared under context parallelism")
            continue
        if side == "rollout" and not isinstance(rollout, HFRollout):
            # vLLM's layers need its own forward context (and return the residual apart): not run from here
            diagnosis.notes.append(
                f"the {type(rollout).__name__}'s hidden states are not compared: read the export lines above"
            )
            continue
        lp, dtype = sides[side]
        row = _same_on_every_rank(int((lp - ref_lp).abs().mean(dim=1).argmax()))  # the prompt showing it most
        _, ref_stages = probes.hf_log_probs(reference, probe, row)
        fp8_side = quantized and side == "rollout"  # its floor model: the FP8 round trip's
        floor_model = load(dtype, quantized=True) if fp8_side else load(FLOOR_DTYPE[dtype])
        _, floor_stages = probes.hf_log_probs(floor_model, probe, row)
        del floor_model
        if side == "actor":
            got = actor_stages(actor, probe, row)
        else:  # an HF model in this process, run the reference's way
            _, got = probes.hf_log_probs(rollout.model, probe, row)
        gaps = compare(got, ref_stages, floor_stages)
        first = first_divergent(gaps, pair.factor, pair.factor * RESOLUTION[dtype])
        where = first.stage if first is not None else OUTPUT_STAGE
        tensors = stage_tensors(actor, where) if side == "actor" else []
        if dist.is_initialized() and side == "actor":  # the parameters live on the ranks that hold the stage
            everyone: list = [None] * dist.get_world_size()
            dist.all_gather_object(everyone, tensors)
            tensors = list(dict.fromkeys(t for part in everyone for t in part))
        diagnosis.divergences.append(Divergence(side, first, tensors, gaps))
    del reference
    diagnosis.seconds, diagnosis.loading_s = time.perf_counter() - started, loading[0]
    if device.type == "cuda":  # the references' blocks back to the driver: a colocated vLLM wakes into them next
        torch.cuda.empty_cache()
    return diagnosis
