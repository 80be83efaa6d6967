"""Megatron-Core engines. `MegatronEngine` holds what every Megatron model shares: building from an HF directory,
DDP and the optimizer (optim.py), offload, micro-batches, the forward-backward schedule, metric reduction and
checkpoints. The actor (actor.py) adds log-probs on vocab-parallel logits and the weight export; the critic
(critic.py) adds a value head."""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any, Iterator

import torch
import torch.distributed as dist

from dagrl.data.batch import Batch
from dagrl.engine.base import MegatronEngineSpec
from dagrl.utils.watchdog import beat
from dagrl.engine.megatron import checkpoint, compat, moe_dispatch, optim
from dagrl.engine.megatron.offload import HostOffload
from dagrl.engine.megatron import packing
from dagrl.engine.megatron.sequences import MicroBatch, pack_spec, plan_micro_batches


class MegatronEngine:
    """A Megatron GPTModel initialised from an HF directory; trainable when `spec.optim` is set.

    Subclasses say what the last pipeline stage makes of the model's output through `head` functions
    `(micro_batch, output) -> ...` passed to `_forward_rows` (forward only) and `_train` (one optimizer step).
    Every method is collective over all ranks of the job: call it on every rank with this rank's data."""

    role = "model"  # metric prefix of the optimizer step's metrics (actor/grad_norm, critic/lr, ...)

    def __init__(self, spec: MegatronEngineSpec) -> None:
        from transformers import AutoConfig

        from dagrl.engine.megatron.hf_config import transformer_config
        from dagrl.engine.megatron.parallel import init_model_parallel, local_device
        from dagrl.engine.megatron.preflight import check_layout

        compat.check_version()
        self.spec = spec
        self.hf_config = AutoConfig.from_pretrained(spec.model_path)
        # Packed rows go in as THD on GPU with TransformerEngine, else as one row with a block-diagonal mask.
        self._thd = spec.remove_padding and torch.cuda.is_available() and compat.transformer_engine_available()
        if spec.layout.context_parallel_size > 1 and not self._thd:
            raise ValueError(
                "actor_rollout_ref.actor.megatron.context_parallel_size>1 needs packed sequences on GPU "
                "with TransformerEngine (THD attention): set actor_rollout_ref.model.use_remove_padding"
                "=true and run on GPUs with transformer_engine installed, or set it to 1"
            )
        if spec.layout.context_parallel_size > 1 and spec.param_dtype != torch.bfloat16:
            raise ValueError(
                "actor_rollout_ref.actor.megatron.context_parallel_size>1 runs TransformerEngine's THD "
                "attention, which has no fp32 kernel: set actor_rollout_ref.actor.megatron.param_dtype"
                "=bfloat16"
            )
        if spec.param_dtype == torch.float16:
            raise ValueError("param_dtype float16 is not supported (no loss scaling): use bfloat16 or float32")
        world_size = dist.get_world_size() if dist.is_initialized() else 1
        check_layout(self.hf_config, spec.layout, world_size)
        init_model_parallel(spec.layout, spec.seed)
        self.device = local_device()
        on_gpu = self.device.type == "cuda"
        self.tf_config = transformer_config(
            self.hf_config,
            spec.layout,
            spec.param_dtype,
            on_gpu=on_gpu,
            gradient_checkpointing=spec.gradient_checkpointing,
            overrides=spec.override_transformer_config,
        )
        self.tf_config.moe_enable_routing_replay = spec.router_replay
        if spec.remove_padding and not self._thd:
            # The fused causal softmax kernel ignores a given mask; the packed rows' block-diagonal one must apply.
            self.tf_config.masked_softmax_fusion = False
        self.modules = self._build_modules(on_gpu)  # unwrapped GPTModels, one per virtual pipeline chunk
        self._dispatchers = moe_dispatch.moe_dispatchers(self.modules)  # released after each schedule (_run)
        optim.set_trainable(self.modules, spec, self.hf_config.num_hidden_layers)
        if spec.lora is not None:  # before DDP: the frozen base gets no grad buffer and no optimizer state
            from dagrl.engine.megatron.lora import apply_lora

            apply_lora(self.modules, spec.lora, self.tf_config, spec.seed, keep=self._trained_beside_adapters())
        if spec.optim is not None:
            optim.recompute_reaches_frozen_inputs(self.modules, self.tf_config)
        self.routing = None
        if spec.router_replay:
            from dagrl.engine.megatron.router_replay import RouterReplayHooks

            self.routing = RouterReplayHooks(self.modules, self.tf_config, self.hf_config.num_hidden_layers)
        self._micro: MicroBatch | None = None  # the micro-batch being forwarded (read by forward hooks)
        if spec.remove_padding and not self._thd:
            for module in self.modules:
                if getattr(module, "rotary_pos_emb", None) is not None:
                    module.rotary_pos_emb.register_forward_hook(self._restart_rotary_positions)
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.model = optim.wrap(self.modules, self.tf_config, spec, self.device)
        if spec.optim is not None:
            self.optimizer, self.scheduler = optim.build_optimizer(spec, self.model)
        self._build_offloaders()
        self._offload_idle_state()

    # ---- construction --------------------------------------------------------------------------
    def _build_modules(self, on_gpu: bool) -> list[torch.nn.Module]:
        from dagrl.engine.megatron.hf_config import build_gpt_chunks
        from dagrl.engine.megatron.weights import import_hf_weights

        modules = build_gpt_chunks(self.hf_config, self.tf_config, on_gpu)
        for module in modules:
            module.to(self.device)
        if self.spec.fp32_lm_head:
            from dagrl.engine.megatron.lm_head import use_fp32_lm_head

            use_fp32_lm_head(modules)
        if self.spec.dist_checkpoint_path:  # a pre-converted Megatron checkpoint (config still from model_path)
            checkpoint.load_model_weights(modules, self.spec.dist_checkpoint_path, self.spec.use_distributed_optimizer)
        else:
            import_hf_weights(modules, self.hf_config, self.spec.model_path)
        return modules

    def _trained_beside_adapters(self) -> list[torch.nn.Module]:
        """What LoRA leaves trainable besides its adapters: the modules with no pre-trained weights (none here)."""
        return []

    def _build_offloaders(self) -> None:
        self.param_store, self.grad_store, self.optim_store = (
            HostOffload("params"),
            HostOffload("grads"),
            HostOffload("optimizer"),
        )
        # a LoRA run's frozen base: copied to the host once, later offloads only free it
        self.base_store = HostOffload("frozen base", frozen=True)
        if self.spec.lora is not None:
            self.base_store.track(p for m in self.modules for p in m.parameters() if not p.requires_grad)
        if self.optimizer is None:
            self.param_store.track(p for m in self.modules for p in m.parameters())
            return
        for ddp in self.model:
            for buffer in compat.ddp_buffers(ddp):
                # Params live in the buffer only with the distributed optimizer; otherwise they are their own.
                if buffer.param_data is not None:
                    self.param_store.track([buffer.param_data])
                self.grad_store.track([buffer.grad_data])
        self.param_store.track((p for m in self.modules for p in m.parameters()), exclude=self.base_store.data_ptrs())
        self.track_optimizer_state()

    def track_optimizer_state(self) -> None:
        """(Re)collect the optimizer's own tensors (main params, Adam moments); a checkpoint load replaces them."""
        if self.optim_store.offloaded:
            raise RuntimeError("optimizer state must be on the device to be re-tracked")
        self.optim_store = HostOffload("optimizer")
        taken = self.param_store.data_ptrs() | self.grad_store.data_ptrs()
        for torch_optimizer in compat.torch_optimizers(self.optimizer):
            for group in torch_optimizer.param_groups:
                self.optim_store.track(group["params"], exclude=taken)
            for state in torch_optimizer.state.values():
                self.optim_store.track((v for v in state.values() if torch.is_tensor(v) and v.dim() > 0), exclude=taken)

    # ---- offload -------------------------------------------------------------------------------
    def offload_params(self) -> None:
        self.param_store.offload()
        self.base_store.offload()

    def onload_params(self) -> None:
        self.param_store.onload()
        self.base_store.onload()

    def offload_grads(self) -> None:
        self.grad_store.offload()

    def onload_grads(self) -> None:
        self.grad_store.onload()

    def offload_optimizer(self) -> None:
        self.optim_store.offload()

    def onload_optimizer(self) -> None:
        self.optim_store.onload()

    def _offload_idle_state(self) -> None:
        if self.spec.param_offload:
            self.offload_params()
        if self.spec.grad_offload:
            self.offload_grads()
        if self.spec.optimizer_offload:
            self.offload_optimizer()

    @contextlib.contextmanager
    def _resident(self, params: bool = True, grads: bool = False, optimizer: bool = False) -> Iterator[None]:
        """Bring what a phase needs onto the device, and put back what the spec offloads between phases."""
        if params:
            self.onload_params()
        if grads:
            self.onload_grads()
        if optimizer:
            self.onload_optimizer()
        try:
            yield
        finally:
            self._offload_idle_state()

    # ---- forward -------------------------------------------------------------------------------
    def _micro_batches(self, batch: Batch, micro_batch_size: int, max_token_len: int | None) -> list[MicroBatch]:
        """This rank's micro-batches (see `plan_micro_batches`); PP stages exchange shapes when they vary."""
        micro_batches, variable = plan_micro_batches(
            batch,
            micro_batch_size,
            max_token_len,
            device=self.device,
            pack=pack_spec(self._thd, self.tf_config.sequence_parallel) if self.spec.remove_padding else None,
            seq_multiple=self.tf_config.tensor_model_parallel_size if self.tf_config.sequence_parallel else 1,
        )
        self.tf_config.variable_seq_lengths = variable  # read by Megatron's p2p exchange at each call
        return micro_batches

    def _restart_rotary_positions(self, module: torch.nn.Module, args: tuple, output: Any) -> Any:
        """Rotary-embedding hook for packed rows without THD: the angles of each token's position within its own
        sequence (Megatron computes them for 0..T-1 of the whole row)."""
        micro = self._micro
        if micro is None or micro.attention_mask is None:
            return output
        if not torch.is_tensor(output):
            raise NotImplementedError("use_remove_padding without TransformerEngine supports plain RoPE only")
        return output[micro.position_ids[0]]

    def _forward_step(
        self, head: Any, data_iterator: Iterator[MicroBatch], model: torch.nn.Module
    ) -> tuple[torch.Tensor, Any]:
        micro = next(data_iterator)
        beat("micro-batch")  # progress for the hang watchdog
        self._micro = micro  # read by forward hooks during this forward
        if self.routing is not None:
            self.routing.set_micro_batch(micro)
        output = model(
            micro.tokens, micro.position_ids, micro.attention_mask, packed_seq_params=micro.packed_seq_params
        )
        return output, partial(head, micro)

    def _run(self, micro_batches: list[MicroBatch], forward_only: bool, head: Any) -> list[dict[str, Any]]:
        """Megatron's schedule for this layout; `head(micro, output) -> (loss, outputs)` runs on the last stage."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        iterators = [iter(micro_batches) for _ in self.model]
        try:
            return get_forward_backward_func()(
                forward_step_func=partial(self._forward_step, head),
                data_iterator=iterators if len(iterators) > 1 else iterators[0],
                model=self.model,
                num_microbatches=len(micro_batches),
                seq_length=micro_batches[0].seq_length,
                micro_batch_size=micro_batches[0].tokens.shape[0],
                forward_only=forward_only,
            )
        finally:
            moe_dispatch.release_dispatch_graphs(self._dispatchers)

    def _context_parallel_rows(self, micro: MicroBatch, values: torch.Tensor) -> torch.Tensor:
        """[rows, R] per-token results computed at this rank's logits -> the whole rows on every CP rank."""
        if micro.held is None:
            return values
        return packing.context_parallel_sum(values * micro.held.to(values.dtype))

    @contextlib.contextmanager
    def _routes(self, routing: Any, batch: Batch) -> Iterator[None]:
        """One pass's routing replay / recording (`RoutingPass`, engine/megatron/router_replay.py)."""
        if self.routing is None:
            if routing is not None and (routing.replay or routing.record):
                raise ValueError("routing replay on an engine built without it (spec.router_replay=False)")
            yield
            return
        self.routing.begin(routing)
        yield
        self.routing.finish(batch, self.device)

    @torch.no_grad()
    def _forward_rows(
        self,
        batch: Batch,
        micro_batch_size: int,
        head: Any,
        names: list[str],
        max_token_len: int | None = None,
        routing: Any = None,
    ) -> dict[str, torch.Tensor]:
        """Forward only. `head(micro, output)` returns {name: [rows, R] tensor} per micro-batch on the last stage;
        every rank gets the float32 [B, R] results in the batch's row order, on the device of
        `batch["responses"]`."""
        from megatron.core import parallel_state as ps

        def collect(micro: MicroBatch, output: torch.Tensor) -> Any:
            return torch.zeros((), device=self.device), head(micro, output)

        with self._resident(params=True):
            for module in self.model:
                module.eval()
            micro_batches = self._micro_batches(batch, micro_batch_size, max_token_len)
            with self._routes(routing, batch):
                outputs = self._run(micro_batches, True, collect)
        shape = (len(batch), batch["responses"].shape[1])
        rows = {name: torch.zeros(shape, dtype=torch.float32, device=self.device) for name in names}
        if ps.is_pipeline_last_stage(ignore_virtual=True):
            for micro, out in zip(micro_batches, outputs):
                for name, tensor in rows.items():
                    tensor[micro.index.to(self.device)] = out[name].float()
        if ps.get_pipeline_model_parallel_world_size() > 1:
            for tensor in rows.values():
                dist.broadcast(
                    tensor, src=ps.get_pipeline_model_parallel_last_rank(), group=ps.get_pipeline_model_parallel_group()
                )
        return {name: tensor.to(batch["responses"].device) for name, tensor in rows.items()}

    # ---- training ------------------------------------------------------------------------------
    def _train(
        self, batch: Batch, micro_batch_size: int, head: Any, max_token_len: int | None = None, routing: Any = None
    ) -> dict[str, float]:
        """One optimizer step whose gradient is that of the sum of `head(micro, output)[0]` over all
        micro-batches and DP ranks; the head's metrics are summed the same way. Empty micro-batches (which keep
        DP ranks in step) contribute nothing and never reach the head."""
        from megatron.core import parallel_state as ps

        if self.optimizer is None:
            raise RuntimeError("train_step on a frozen engine (spec.optim is None)")
        with self._resident(params=True, grads=True, optimizer=True):
            for module in self.model:
                module.train()
                module.zero_grad_buffer()
            self.optimizer.zero_grad()
            micro_batches = self._micro_batches(batch, micro_batch_size, max_token_len)
            # Megatron's schedule divides each loss by the number of micro-batches (and multiplies it by CP) and
            # DDP averages over DP x CP: scale so that the applied gradient is that of the plain sum. (Under CP
            # every CP rank computes the whole loss, its backward reaching only its own tokens.)
            scale = len(micro_batches) * ps.get_data_parallel_world_size()

            def scaled(micro: MicroBatch, output: torch.Tensor) -> Any:
                if micro.rows == 0:
                    return output.sum() * 0.0, {}
                loss, metrics = head(micro, output)
                # Kept on the device: a host copy here would stall the CPU on every micro-batch's forward.
                metrics = {
                    k: torch.as_tensor(v, dtype=torch.float64, device=self.device).detach() for k, v in metrics.items()
                }
                return loss * scale, metrics

            with self._routes(routing, batch):
                outputs = self._run(micro_batches, False, scaled)
            metrics = self._reduce_metrics(outputs)
            lr = self.optimizer.param_groups[0]["lr"]
            grad_norm, stepped = optim.optimizer_step(self.optimizer, self.scheduler)
        metrics.update(
            {
                f"{self.role}/grad_norm": grad_norm,
                f"{self.role}/lr": lr,
                f"{self.role}/skipped_steps": 0.0 if stepped else 1.0,
            }
        )
        return metrics

    def _reduce_metrics(self, outputs: list[dict[str, torch.Tensor]]) -> dict[str, float]:
        """Sum over micro-batches (last PP stage), share with every PP stage, sum over DP."""
        from megatron.core import parallel_state as ps

        outputs = [out for out in outputs if out]  # empty micro-batches report nothing
        names = sorted(outputs[0]) if outputs else None
        if ps.get_pipeline_model_parallel_world_size() > 1:
            box = [names]
            dist.broadcast_object_list(
                box, src=ps.get_pipeline_model_parallel_last_rank(), group=ps.get_pipeline_model_parallel_group()
            )
            names = box[0]
        totals = torch.zeros(len(names), dtype=torch.float64, device=self.device)
        for out in outputs:
            totals += torch.stack([out[name] for name in names])
        if ps.get_pipeline_model_parallel_world_size() > 1:
            dist.broadcast(
                totals, src=ps.get_pipeline_model_parallel_last_rank(), group=ps.get_pipeline_model_parallel_group()
            )
        if ps.get_data_parallel_world_size() > 1:
            dist.all_reduce(totals, group=ps.get_data_parallel_group())
        return {name: float(value) for name, value in zip(names, totals.tolist())}

    # ---- checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self, path: str) -> None:
        with self._resident(params=True, optimizer=True):
            checkpoint.save(self, path)

    def state_is_finite(self) -> bool:
        with self._resident(params=True, optimizer=True):
            return checkpoint.state_is_finite(self)

    def load_checkpoint(self, path: str) -> None:
        # Grads too: the optimizer state is re-tracked after loading, which needs every storage's address.
        with self._resident(params=True, grads=True, optimizer=True):
            checkpoint.load(self, path)
