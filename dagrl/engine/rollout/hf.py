"""The `hf` rollout: transformers `generate` on one full model per rank (CPU runs and tests).

It takes the actor's weights through the same bucketed HF-named stream as the vLLM rollout, so the weight
path is exercised on every CPU run. Its request level is an interruptible decode loop (hf_decode.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Iterator

import torch

from dagrl.utils.watchdog import beat
from dagrl.data.batch import Batch
from dagrl.engine.lora import LoraAdapter
from dagrl.engine.lora_peft import merged_weight, module_pairs, nbytes
from dagrl.engine.rollout import fused_experts
from dagrl.engine.rollout.hf_decode import DecodeLoop, cache_kwarg
from dagrl.engine.rollout.interface import (
    Completion,
    Request,
    SamplingSpec,
    StaleWeights,
    WeightBucket,
    refuse_in_flight,
)
from dagrl.engine.rollout.registry import RolloutSetup
from dagrl.engine.rollout.routes import RouteRecorder
from dagrl.engine.rollout.sequences import join_prompt_and_response

logger = logging.getLogger(__name__)


def _fp32_logits_hook(head: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    from dagrl.engine.logits import fp32_logits

    return fp32_logits(args[0], head.weight)


class HFRollout:
    """Samples with `model.generate`; reseeded for every call so a resumed run samples the same tokens.

    A LoRA adapter (load_adapter) is merged into the weights it adapts from a copy of their base kept on the host:
    generation then runs the very kernels it runs without LoRA, so adapter-only and merged sync (both through
    lora_peft.merged_weight) sample from bit-identical weights, and the next adapter merges into the base again.
    """

    supports_adapter = True
    adapter_merged = True  # load_adapter merges (lora_peft.merged_weight)

    def __init__(
        self,
        model_path: str,
        eos_token_ids: list[int],
        pad_token_id: int,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
        fp32_lm_head: bool = False,
        record_routes: bool = False,
        log_probs: bool = False,
    ) -> None:
        from transformers import AutoModelForCausalLM, GenerationConfig

        self.device = device
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device).eval()
        # generate fills every field dagrl leaves unset from the model's generation_config.json: its
        # repetition_penalty, no_repeat_ngram_size, ... would sample from another policy than the one the actor's
        # log-probs assume. dagrl's keys alone decide sampling (generate below sets each field it uses).
        self.model.generation_config = GenerationConfig()
        if fp32_lm_head and dtype != torch.float32:  # the logits the actor computes with the same flag
            self.model.get_output_embeddings().register_forward_hook(_fp32_logits_hook)
        self.eos_token_ids = eos_token_ids
        self.pad_token_id = pad_token_id
        # tied lm_head follows the embedding; everything else must arrive in every sync
        self._expected = {name for name, _ in self.model.named_parameters()}
        self.colocated = device.type == "cuda"  # on a GPU it shares memory with the actor
        self.needs_weights = False  # the model keeps its weights through sleep (moved to the host)
        self.version = 0
        self.requests = DecodeLoop(self.model, eos_token_ids, pad_token_id, device)
        # MoE routes of every generated batch (`routed_experts`, routes.py), for the actor's routing replay
        self.route_recorder = RouteRecorder(self.model) if record_routes else None
        self.log_probs = log_probs  # generate returns rollout_log_probs (rollout.calculate_log_probs)
        self._adapter: LoraAdapter | None = None
        self._base: dict[str, torch.Tensor] = {}  # adapted weights' base values (host), while an adapter is loaded

    # ---- request level (see interface.py) ----------------------------------------------------------
    def submit(self, requests: list[Request]) -> None:
        self.requests.submit(requests)

    def advance(self) -> list[Completion]:
        beat("decode")  # progress for the hang watchdog
        return self.requests.advance(self.version)

    def abort(self, ids: list[str] | None = None) -> list[Completion]:
        return self.requests.abort(ids)

    def in_flight(self) -> int:
        return self.requests.in_flight()

    @torch.no_grad()
    def generate(self, prompts: Batch, sampling: SamplingSpec, seed: int) -> Batch:
        """n responses per prompt, rows grouped by prompt: [p0 r0, p0 r1, ..., p1 r0, ...]."""
        from transformers import DynamicCache, GenerationConfig

        greedy = not sampling.do_sample or sampling.temperature == 0
        # per-row limits: generate to the longest, then cut each row at its own (its first tokens do not depend
        # on how long the batch runs)
        limits = (
            None
            if sampling.response_lengths is None
            else torch.tensor(sampling.response_lengths).repeat_interleave(sampling.n)
        )
        config = GenerationConfig(
            max_new_tokens=sampling.response_length if limits is None else int(limits.max()),
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy else (sampling.top_k if sampling.top_k > 0 else 0),
            eos_token_id=sampling.stop_ids(self.eos_token_ids) or None,
            pad_token_id=self.pad_token_id,
            output_logits=self.log_probs,
            return_dict_in_generate=self.log_probs,
        )
        # drop the left-padding columns no row uses: generate's cost grows with the padded width
        used = prompts["attention_mask"].bool().any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        input_ids = prompts["input_ids"][:, first:].to(self.device)
        attention_mask = prompts["attention_mask"][:, first:].to(self.device)
        cache, prefill_routes = None, []
        if sampling.n > 1:
            # prefill each prompt once and share its KV cache among its n samples (n times less prefill)
            cache = DynamicCache()
            positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
            with self._recording():
                self.model(
                    input_ids=input_ids[:, :-1],
                    attention_mask=attention_mask[:, :-1],
                    position_ids=positions[:, :-1],
                    use_cache=True,
                    **{cache_kwarg(self.model): cache},
                )
            prefill_routes = self.route_recorder.calls if self.route_recorder is not None else []
            cache.batch_repeat_interleave(sampling.n)
            input_ids = input_ids.repeat_interleave(sampling.n, dim=0)
            attention_mask = attention_mask.repeat_interleave(sampling.n, dim=0)
        with torch.random.fork_rng(devices=[]), self._recording():
            if cache is not None and self.route_recorder is not None:  # the shared prefill's routes come first
                self.route_recorder.calls = prefill_routes
            torch.manual_seed(seed)
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=config,
                **{cache_kwarg(self.model): cache},
            )
        responses = (output.sequences if self.log_probs else output)[:, input_ids.shape[1] :].cpu()
        batch = prompts.repeat_interleave(sampling.n) if sampling.n > 1 else prompts
        out = join_prompt_and_response(
            batch, responses, sampling.response_length, sampling.stop_ids(self.eos_token_ids), self.pad_token_id, limits
        )
        if self.log_probs:  # at the sampling temperature (greedy: 1), as the actor computes them
            logits = torch.stack(output.logits, dim=1).float().cpu() / (1.0 if greedy else sampling.temperature)
            picked = logits.log_softmax(-1).gather(-1, responses[:, : logits.shape[1], None]).squeeze(-1)
            padded = torch.zeros(out["response_mask"].shape, dtype=torch.float32)
            padded[:, : picked.shape[1]] = picked[:, : padded.shape[1]]
            out["rollout_log_probs"] = padded * out["response_mask"]
        if self.route_recorder is not None:
            out["routed_experts"] = self.route_recorder.routes(
                sampling.n if cache is not None else 1, first, out["input_ids"].shape[1], out["attention_mask"].cpu()
            )
        return out

    def _recording(self):
        """Records the routes of the forwards inside (routes.py); nothing without route recording."""
        return self.route_recorder.recording() if self.route_recorder is not None else contextlib.nullcontext()

    def load_adapter(self, adapter: LoraAdapter, version: int = 0) -> dict[str, float]:
        """Sample from W + scaling·B·A from now on; the previous adapter's weights go back to their base first."""
        refuse_in_flight(self.in_flight(), "load_adapter")
        start, pairs = time.perf_counter(), module_pairs(adapter)
        params = dict(self.model.named_parameters())
        for name, (a, b) in pairs.items():  # every check before the first weight changes
            if name not in params:
                raise KeyError(f"the LoRA adapter adapts {name!r}, which the rollout model does not have")
            if tuple(params[name].shape) != (b.shape[0], a.shape[1]):
                raise ValueError(
                    f"LoRA on {name}: B·A is {b.shape[0]}x{a.shape[1]}, the rollout weight {tuple(params[name].shape)}"
                )
        with torch.no_grad():
            for name in set(self._base) - set(pairs):  # adapted before, not now
                params[name].copy_(self._base.pop(name))
            for name in pairs:
                self._base.setdefault(name, params[name].detach().to("cpu", copy=True))
        self._adapter = adapter
        self._merge_adapter(params)
        self.version = version
        return {"timing_s/weight_sync": time.perf_counter() - start, "perf/weight_sync_gb": nbytes(adapter) / 1e9}

    @torch.no_grad()
    def _merge_adapter(self, params: dict[str, torch.nn.Parameter]) -> None:
        for name, (a, b) in module_pairs(self._adapter).items():
            params[name].copy_(merged_weight(self._base[name], a, b, self._adapter.scaling))

    def load_weights(self, buckets: Iterator[WeightBucket], version: int = 0) -> dict[str, float]:
        """Copy every bucket in; a name or shape the model does not have fails with that name. With an adapter
        loaded, the buckets are the base: the adapter is merged into them again."""
        refuse_in_flight(self.in_flight(), "load_weights")
        start, loaded, nbytes, fused = time.perf_counter(), set(), 0, fused_experts.Filled()
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for bucket in buckets:
                for name, tensor in bucket:
                    target = params.get(name)
                    if target is None:  # one expert's tensor of a fused MoE parameter (transformers >= 5)
                        found = fused_experts.slot(params, name)
                        if found is None:
                            raise KeyError(f"weight sync sent {name!r}, which the rollout model does not have")
                        fused_name, index, kind, target = found
                        fused.add(fused_name, index, kind)
                    else:
                        loaded.add(name)
                    if target.shape != tensor.shape:
                        raise ValueError(
                            f"weight sync: {name} has shape {tuple(tensor.shape)}, the rollout "
                            f"model expects {tuple(target.shape)}"
                        )
                    target.copy_(tensor)
                    nbytes += tensor.numel() * tensor.element_size()
        missing = self._expected - loaded - fused.complete(params) - self._tied_names()
        if missing:
            raise StaleWeights("rollout", missing)
        if self._adapter is not None:
            self._base = {name: params[name].detach().to("cpu", copy=True) for name in self._base}
            self._merge_adapter(params)
        self.version = version
        return {"timing_s/weight_sync": time.perf_counter() - start, "perf/weight_sync_gb": nbytes / 1e9}

    def _tied_names(self) -> set[str]:
        if getattr(self.model.config, "tie_word_embeddings", False):
            return {name for name, _ in self.model.named_parameters() if name.startswith("lm_head.")}
        return set()

    def sleep(self) -> None:
        if self.colocated:
            self.model.to("cpu")

    def wake_weights(self) -> None:
        if self.colocated:
            self.model.to(self.device)

    def wake_cache(self) -> None:
        """transformers allocates its KV cache per call: nothing to bring back."""


def build(setup: RolloutSetup) -> HFRollout:
    """The `hf` entry of ROLLOUT_ENGINES (registry.py): this rank's engine, in the rollout dtype."""
    return HFRollout(
        setup.model_path,
        setup.eos_token_ids,
        setup.pad_token_id,
        device=setup.device,
        dtype=getattr(torch, setup.dtype),
        fp32_lm_head=setup.cfg.actor_rollout_ref.model.fp32_lm_head,
        record_routes=setup.cfg.actor_rollout_ref.rollout.enable_rollout_routing_replay,
        log_probs=setup.cfg.actor_rollout_ref.rollout.calculate_log_probs,
    )
