"""The `vllm` rollout: one in-process vLLM engine per rollout-TP group, colocated with the Megatron actor.

vLLM runs inside the trainer's own torchrun processes (`distributed_executor_backend="external_launcher"`,
no engine subprocess), reusing the job's process group: consecutive ranks form one rollout-TP group, exactly the
rollout layout the trainer shards prompts by. Weights arrive as full HF-named tensors from the actor's
`export_weights()` stream. The first sync passes them through the model's `load_weights` (vLLM narrows them to its
TP shard) and records what it copied; later syncs replay those copies (load_plan.py). With
rollout.quantization=fp8 the engine has FP8 layers and each sync quantizes on the way in (fp8.py, fp8_vllm.py).
Measured (vLLM 0.26.0, 2 x H200): the in-process load of full HF-named GPU tensors runs at ~700 GB/s (8.8 GB in
12.6 ms), and sleep(level=1) frees ~42 GiB per GPU at gpu_memory_utilization=0.3 for the trainer to use.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from dagrl.utils.watchdog import beat
from dagrl.data.batch import Batch
from dagrl.engine.lora import LoraAdapter
from dagrl.engine.rollout.interface import (
    Completion,
    Progress,
    Request,
    SamplingSpec,
    StaleWeights,
    WeightBucket,
    refuse_in_flight,
)
from dagrl.engine.rollout import routes
from dagrl.engine.rollout.load_plan import WeightLoadPlan
from dagrl.engine.rollout.registry import RolloutSetup
from dagrl.engine.rollout.vllm_io import (
    prompt_token_ids,
    record_progress,
    request_params,
    single_request_params,
    unpack_outputs,
)
from dagrl.config.model_dir import read_hf_config
from dagrl.engine.rollout import fp8, fp8_vllm, vllm_lora
from dagrl.engine.rollout.vllm_start import ProcessRngGuard, external_launcher_env, inspect_model_in_process
from dagrl.engine.rollout.weight_manifest import WeightManifest

logger = logging.getLogger(__name__)


@dataclass
class VLLMRolloutSpec:
    model_path: str
    tensor_parallel_size: int = 1
    dtype: str = "bfloat16"
    seed: int = 0
    gpu_memory_utilization: float = 0.5
    max_model_len: int = 1024
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    enforce_eager: bool = True
    free_cache_engine: bool = True
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    load_format: str = "dummy"
    calculate_log_probs: bool = False
    record_routes: bool = False  # each token's MoE routes (enable_return_routed_experts) for the actor's replay
    fp32_lm_head: bool = False  # logits in fp32 (vLLM's hf_overrides.head_dtype), as the actor computes them
    # > 0: built with one LoRA adapter slot of this rank (adapter-only sync); it then sleeps keeping its weights
    lora_rank: int = 0
    cache_root: str | None = None  # VLLM_CACHE_ROOT for this engine; None = the environment's (or ~/.cache/vllm)
    quantization: str | None = None  # fp8: FP8 layers; each sync sends FP8 weights + scales (fp8.py)
    fp8_scales: str = "block"  # their scale layout, resolved (block | tensor; preflight/fp8.py's scale_layout)
    kv_cache_dtype: str = "auto"  # fp8, fp8_e4m3: the KV cache in FP8
    bucket_bytes: int = 512 << 20  # an FP8 sync's buckets, counted in the bytes it sends
    engine_kwargs: dict[str, Any] = field(default_factory=dict)


def _reported_name(param_name: str) -> str:
    return param_name.replace(".routed_experts.", ".")


def _free_gib() -> str:
    free, total = torch.cuda.mem_get_info()
    return f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free"


class VLLMRollout:
    """Generates with vLLM; sleeps between rollouts so training gets the GPU memory back."""

    colocated = True  # shares its GPU with the actor: the rollout node offloads the actor around it
    # the engine kind takes adapters: vllm_spec builds it with an adapter slot whenever adapter-only sync is set
    # (pre-flight reads this class attribute before any engine exists)
    supports_adapter = True
    adapter_merged = False  # vLLM's LoRA kernels apply the adapter beside the base matmul

    def __init__(
        self, spec: VLLMRolloutSpec, eos_token_ids: list[int], pad_token_id: int, manifest: WeightManifest | None = None
    ) -> None:
        try:
            from vllm import LLM
        except ImportError as err:
            raise RuntimeError(
                f"actor_rollout_ref.rollout.name=vllm needs vLLM: pip install 'dagrl[gpu]' ({err})"
            ) from err
        if not torch.cuda.is_available():
            raise RuntimeError("actor_rollout_ref.rollout.name=vllm needs a CUDA GPU: use rollout.name=hf on CPU")
        # in-process engine: no engine-core subprocess, so load_weights can take this process's GPU tensors
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if spec.cache_root:  # read when the engine inspects the model class and compiles (vLLM's envs are lazy)
            os.environ["VLLM_CACHE_ROOT"] = spec.cache_root
            # and the Triton kernels it JIT-compiles, kept in ~/.triton otherwise: a SmolLM2 engine's warm-up took 28 s
            # the first time on an H100 machine and 4 s after, with vLLM's own cache empty both times
            os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(spec.cache_root, "triton"))
            logger.info("vLLM cache: %s (Triton's: %s)", spec.cache_root, os.environ["TRITON_CACHE_DIR"])
        for name, value in fp8.engine_env(spec.quantization, spec.fp8_scales).items():
            os.environ.setdefault(name, value)  # a value the user exported wins
        self.spec = spec
        self.eos_token_ids, self.pad_token_id = eos_token_ids, pad_token_id
        self._manifest = manifest  # None: read at the first sync (a dummy-load run may never sync)
        kwargs = dict(
            model=spec.model_path,
            tensor_parallel_size=spec.tensor_parallel_size,
            dtype=spec.dtype,
            seed=spec.seed,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            max_model_len=spec.max_model_len,
            max_num_batched_tokens=spec.max_num_batched_tokens,
            max_num_seqs=spec.max_num_seqs,
            enforce_eager=spec.enforce_eager,
            enable_chunked_prefill=spec.enable_chunked_prefill,
            enable_prefix_caching=spec.enable_prefix_caching,
            load_format=spec.load_format,
            distributed_executor_backend="external_launcher",
            enable_sleep_mode=True,
            skip_tokenizer_init=True,
            logprobs_mode="processed_logprobs",
        )  # log-probs after temperature, like the actor's
        if spec.fp32_lm_head:
            kwargs["hf_overrides"] = {"head_dtype": "float32"}
        if spec.record_routes:
            kwargs["enable_return_routed_experts"] = True
        hf_config = read_hf_config(spec.model_path) if spec.quantization == "fp8" else None
        overrides = kwargs.get("hf_overrides", {})
        kwargs.update(fp8.engine_kwargs(spec.quantization, spec.kv_cache_dtype, overrides, spec.fp8_scales, hf_config))
        if spec.lora_rank:
            kwargs.update(vllm_lora.lora_engine_kwargs(spec.lora_rank))
        user = dict(spec.engine_kwargs)  # rollout.engine_kwargs.vllm: passed through, and wins
        if isinstance(user.get("hf_overrides"), dict) and "hf_overrides" in kwargs:
            user["hf_overrides"] = {**kwargs["hf_overrides"], **user["hf_overrides"]}
        kwargs.update(user)
        start = time.perf_counter()
        try:
            with (
                ProcessRngGuard(),
                inspect_model_in_process(),
                external_launcher_env(),
                fp8_vllm.in_place_processing(spec.quantization, spec.fp8_scales),
            ):
                self.llm = LLM(**kwargs)
        except (torch.cuda.OutOfMemoryError, ValueError) as err:
            if isinstance(err, ValueError) and not any(w in str(err).lower() for w in ("memory", "cache", "kv")):
                raise
            raise RuntimeError(
                f"vLLM could not start with actor_rollout_ref.rollout.gpu_memory_utilization="
                f"{spec.gpu_memory_utilization} ({_free_gib()} on this GPU): lower it, or offload "
                f"more of the actor (actor.megatron.*_offload) — {err}"
            ) from err
        logger.info("vLLM engine up in %.1f s (TP=%d)", time.perf_counter() - start, spec.tensor_parallel_size)
        self.model = self.llm.llm_engine.model_executor.driver_worker.worker.get_model()
        self.fp8 = fp8_vllm.Fp8Layers(self.model, spec.fp8_scales) if spec.quantization else None
        # vLLM's FusedMoE keeps expert weights in a `routed_experts` submodule, but its loaders report them under
        # the layer's name (experts.w13_weight): compare under the reported names.
        self._vllm_params = {_reported_name(name) for name, _ in self.model.named_parameters()}
        # the first sync records what vLLM's loader does per tensor; later syncs replay it as batched copies
        self.load_plan: WeightLoadPlan | None = WeightLoadPlan(self.model, _reported_name)
        self.asleep = False
        self.weights_discarded = spec.load_format == "dummy"  # random until the first sync
        self._cache_filled = False  # KV blocks computed since the last sleep (which clears the prefix cache)
        self.version = 0
        self._progress: dict[str, Progress] = {}  # the request level's requests in flight, by id
        self.adapter = vllm_lora.AdapterSlot(self.llm.llm_engine, spec.model_path) if spec.lora_rank else None
        self._base_layer = vllm_lora.base_layer_names(self.model) if spec.lora_rank else None

    # ---- memory choreography -------------------------------------------------------------------
    def sleep(self) -> None:
        """Free the engine's GPU memory. Weights are discarded (the actor holds them and reloads every wake), except
        with an adapter slot: the frozen base (and the adapter) then wait on the host, and a sync sends the adapter
        alone."""
        if not self.spec.free_cache_engine or self.asleep:
            return
        level = 1 if self.adapter is not None else 2
        self.llm.sleep(level=level)  # (vLLM clears the prefix cache when it sleeps)
        self.asleep, self._cache_filled = True, False
        self.weights_discarded = self.weights_discarded or level == 2

    def wake_weights(self) -> None:
        if self.asleep:
            self._wake(["weights"])

    def wake_cache(self) -> None:
        if self.asleep:
            self._wake(["kv_cache"])
            self.asleep = False

    def _wake(self, tags: list[str]) -> None:
        try:
            self.llm.wake_up(tags=tags)
        except torch.cuda.OutOfMemoryError as err:
            raise RuntimeError(
                f"vLLM could not wake its {tags[0]} ({_free_gib()}): lower actor_rollout_ref."
                f"rollout.gpu_memory_utilization={self.spec.gpu_memory_utilization} or offload more "
                f"of the actor"
            ) from err

    @property
    def manifest(self) -> WeightManifest:
        if self._manifest is None:
            self._manifest = WeightManifest(self.spec.model_path)
        return self._manifest

    @property
    def needs_weights(self) -> bool:
        return self.weights_discarded

    # ---- weights -------------------------------------------------------------------------------
    def load_weights(self, buckets: Iterator[WeightBucket], version: int = 0) -> dict[str, float]:
        """Load every bucket as it arrives (the whole model is never held twice); fail on any stale tensor."""
        refuse_in_flight(len(self._progress), "load_weights")
        torch.cuda.synchronize()
        start, nbytes, loaded = time.perf_counter(), 0, set()
        if self.fp8 is not None:  # FP8 weights + scales, re-bucketed by the bytes they take
            buckets = self.fp8.incoming(buckets, self.spec.bucket_bytes)
        for bucket in buckets:
            for name, tensor in bucket:
                self.manifest.check(name, tensor)
                nbytes += tensor.numel() * tensor.element_size()
            if self._base_layer is not None:  # LoRA-wrapped layers keep their weight one level down
                bucket = [(self._base_layer(name), tensor) for name, tensor in bucket]
            if self.load_plan is None:
                loaded |= set(self.model.load_weights(bucket))
            else:
                loaded |= self.load_plan.load(bucket)
        if self.load_plan is not None:
            self.load_plan.end_sync()
        if self.fp8 is not None:  # what vLLM's FP8 layers do after loading: once per sync
            self.fp8.after_sync()
        missing = self._vllm_params - loaded
        if missing:
            raise StaleWeights("vLLM", missing)
        if self._cache_filled:  # cached KV blocks were computed with the old weights (a pass over every block)
            self.llm.reset_prefix_cache()
            self._cache_filled = False
        torch.cuda.synchronize()
        self.weights_discarded = False
        self.version = version
        seconds = time.perf_counter() - start
        return {"timing_s/weight_sync": seconds, "perf/weight_sync_gb": nbytes / 1e9}

    def load_adapter(self, adapter: LoraAdapter, version: int = 0) -> dict[str, float]:
        """Serve `adapter` over the base weights from now on (adapter-only sync: megabytes, not the model)."""
        if self.adapter is None:
            raise RuntimeError(
                "load_adapter on a vLLM engine built without a LoRA slot: adapter-only sync needs "
                "actor_rollout_ref.model.lora.rank > 0 with lora.merge=false when the engine starts"
            )
        refuse_in_flight(len(self._progress), "load_adapter")
        if self.weights_discarded:
            raise RuntimeError("vLLM has no base weights: sync them (load_weights) before the first adapter")
        metrics = self.adapter.load(adapter)
        if self._cache_filled:  # cached KV blocks were computed with the old adapter
            self.llm.reset_prefix_cache()
            self._cache_filled = False
        self.version = version
        return metrics

    # ---- generation ----------------------------------------------------------------------------
    def generate(self, prompts: Batch, sampling: SamplingSpec, seed: int) -> Batch:
        from vllm import SamplingParams

        if self.weights_discarded:
            raise RuntimeError("vLLM has no current weights: sync the actor's weights before generating")
        with_log_probs = self.spec.calculate_log_probs
        params = [
            SamplingParams(**p.as_kwargs())
            for p in request_params(sampling, len(prompts), seed, self.eos_token_ids, with_log_probs)
        ]
        requests = [{"prompt_token_ids": ids} for ids in prompt_token_ids(prompts)]
        self._cache_filled = True
        outputs = self.llm.generate(requests, params, use_tqdm=False, **vllm_lora.request_kwargs(self.adapter))
        batch = unpack_outputs(prompts, outputs, sampling, self.eos_token_ids, self.pad_token_id, with_log_probs)
        if self.spec.record_routes:
            batch["routed_experts"] = routes.place(
                [c.routed_experts for o in outputs for c in sorted(o.outputs, key=lambda c: c.index)],
                batch["attention_mask"],
            )
        return batch

    # ---- request level (see interface.py): vLLM's engine API, one step per advance --------------------------
    def submit(self, requests: list[Request]) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if self.weights_discarded:
            raise RuntimeError("vLLM has no current weights: sync the actor's weights before submitting")
        engine = self.llm.llm_engine
        for request in requests:
            if request.id in self._progress:
                raise ValueError(f"request {request.id!r} is already in flight")
            params = SamplingParams(
                **single_request_params(request, self.eos_token_ids).as_kwargs(), output_kind=RequestOutputKind.DELTA
            )  # each step's new tokens only
            prompt = {"prompt_token_ids": list(request.prompt_ids + request.prefix_ids)}
            engine.add_request(request.id, prompt, params, **vllm_lora.request_kwargs(self.adapter))
            self._progress[request.id] = Progress(request)
        self._cache_filled = True

    def advance(self) -> list[Completion]:
        beat("decode")  # progress for the hang watchdog
        finished = []
        for output in self.llm.llm_engine.step():
            progress = self._progress.get(output.request_id)
            if progress is None:  # a request of the batch level, or one aborted in this step
                continue
            reason = record_progress(progress, output, self.version)
            if reason is not None:
                finished.append(progress.completion(reason))
                del self._progress[output.request_id]
        return finished

    def abort(self, ids: list[str] | None = None) -> list[Completion]:
        ids = list(self._progress) if ids is None else [i for i in ids if i in self._progress]
        if ids:
            self.llm.llm_engine.abort_request(ids)
        return [self._progress.pop(i).completion("abort") for i in ids]

    def in_flight(self) -> int:
        return len(self._progress)


def build(setup: RolloutSetup) -> VLLMRollout:
    """The `vllm` entry of ROLLOUT_ENGINES (registry.py): this rank's engine of its rollout-TP group."""
    return VLLMRollout(vllm_spec(setup), setup.eos_token_ids, setup.pad_token_id)


def vllm_spec(setup: RolloutSetup) -> VLLMRolloutSpec:
    """The engine's settings from actor_rollout_ref.rollout and the run's geometry."""
    rollout, shape = setup.cfg.actor_rollout_ref.rollout, setup.shape
    return VLLMRolloutSpec(
        model_path=setup.model_path,
        tensor_parallel_size=shape.rollout_tp,
        dtype=setup.dtype,
        seed=rollout.seed,
        gpu_memory_utilization=rollout.gpu_memory_utilization,
        max_model_len=shape.max_model_len,
        max_num_batched_tokens=rollout.max_num_batched_tokens,
        max_num_seqs=rollout.max_num_seqs,
        # a rollout pool of its own never sleeps: no actor wants its memory back
        enforce_eager=rollout.enforce_eager,
        free_cache_engine=rollout.free_cache_engine and shape.pool != "rollout",
        enable_chunked_prefill=rollout.enable_chunked_prefill,
        enable_prefix_caching=rollout.enable_prefix_caching,
        load_format=rollout.load_format,
        calculate_log_probs=rollout.calculate_log_probs,
        record_routes=rollout.enable_rollout_routing_replay,
        fp32_lm_head=setup.cfg.actor_rollout_ref.model.fp32_lm_head,
        lora_rank=vllm_lora.adapter_rank(setup.cfg),
        cache_root=vllm_cache_root(setup.cfg),
        quantization=rollout.quantization,
        fp8_scales=fp8.resolved_layout(rollout.fp8_scales, rollout.quantization, setup.model_path, shape.rollout_tp),
        kv_cache_dtype=rollout.kv_cache_dtype,
        bucket_bytes=int(rollout.update_weights_bucket_megabytes) << 20,
        engine_kwargs=rollout.engine_kwargs.vllm.to_dict(),
    )


def vllm_cache_root(cfg: Any) -> str | None:
    """rollout.cache_dir as an absolute path (vLLM's cache root for the engine), or None: vLLM's own
    ($VLLM_CACHE_ROOT, else ~/.cache/vllm). A machine-wide cache keeps new runs on that machine warm; a directory
    beside the checkpoints keeps a resume on another machine warm (SmolLM2 on one H100: engine up in 7.9 s instead of
    33.3 s), at the cost of compiling once per run and one copy per rank in the run directory."""
    configured = cfg.actor_rollout_ref.rollout.cache_dir
    return os.path.abspath(os.path.expanduser(configured)) if configured else None
