"""Replays a rollout model's weight loading as recorded tensor copies.

vLLM's `model.load_weights` walks its module tree for every tensor (name mapping, stacked-parameter lookup, one
`weight_loader` call each). At 1.7B that Python work took longer than the all-gather and the copies together.
The first time a tensor name arrives it goes through `load_weights` alone, under a torch-function mode that watches
every call. If all that loading did was copy views of the incoming tensor into views of parameters (and fill
parameter views with constants), those steps are recorded as view geometry. A later tensor of the same name,
shape, stride and dtype replays them: one batched copy per bucket instead of the loader. A name whose loading did
anything else (a temporary, an in-place op on something other than a parameter, a copy that is not a view of the
tensor, a parameter loaded behind the recorder's back) keeps going through `load_weights` every time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from dagrl.engine.rollout.interface import WeightBucket

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _View:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # storage offset: absolute for a parameter view, relative to the tensor's own for a source view

    @staticmethod
    def of(tensor: torch.Tensor, base_offset: int = 0) -> "_View":
        return _View(tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset() - base_offset)

    def span(self) -> tuple[int, int]:
        """[first, last] storage elements the view touches (non-negative strides only)."""
        last = self.offset + sum((size - 1) * stride for size, stride in zip(self.shape, self.stride))
        return self.offset, last


@dataclass(frozen=True)
class _Copy:
    param: torch.Tensor
    dst: _View
    src: _View


@dataclass(frozen=True)
class _Fill:
    param: torch.Tensor
    dst: _View
    value: float


@dataclass(frozen=True)
class _TensorPlan:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    steps: tuple[_Copy | _Fill, ...]
    loaded: frozenset[str]  # the parameter names `load_weights` reported for this tensor


_HARMLESS_IN_PLACE = {"requires_grad_"}


def _in_place(func: Callable) -> bool:
    name = getattr(func, "__name__", "")
    if name in _HARMLESS_IN_PLACE:
        return False
    return (
        (name.endswith("_") and not name.startswith("_"))
        or name.startswith("__i")
        or name in ("__setitem__", "__set__", "__delitem__")
    )


class _Recorder(TorchFunctionMode):
    """Watches one tensor's loading; `steps` is None once anything it cannot replay happened."""

    def __init__(self, tensor: torch.Tensor, params: dict[int, torch.Tensor]) -> None:
        super().__init__()
        self.tensor, self.params = tensor, params
        self.source_storage = tensor.untyped_storage().data_ptr()
        self.steps: list[_Copy | _Fill] | None = []
        self.why = ""

    def _fail(self, why: str) -> None:
        if self.steps is not None:
            self.steps, self.why = None, why

    def _param_view(self, dst: Any) -> tuple[torch.Tensor, _View] | None:
        if not isinstance(dst, torch.Tensor) or any(s < 0 for s in dst.stride()):
            return None
        param = self.params.get(dst.untyped_storage().data_ptr())
        return None if param is None else (param, _View.of(dst))

    def _source_view(self, src: Any) -> _View | None:
        tensor = self.tensor
        if not isinstance(src, torch.Tensor) or src.untyped_storage().data_ptr() != self.source_storage:
            return None
        view = _View.of(src, tensor.storage_offset())
        first, last = view.span()
        if any(s < 0 for s in view.stride) or first < 0 or last >= tensor.numel():
            return None  # outside the tensor itself (a sibling view of a shared buffer)
        return view

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.steps is not None:
            self._watch(func, args, kwargs)
        return func(*args, **kwargs)

    def _watch(self, func: Callable, args: tuple, kwargs: dict) -> None:
        name = getattr(func, "__name__", str(func))
        if "out" in kwargs:
            self._fail(f"{name}(out=...)")
        elif func is torch.Tensor.copy_:
            target, source = self._param_view(args[0]), self._source_view(args[1])
            if target is None or source is None:
                self._fail("a copy that is not tensor view -> parameter view")
            else:
                self.steps.append(_Copy(target[0], target[1], source))
        elif func in (torch.Tensor.fill_, torch.Tensor.zero_):
            target = self._param_view(args[0])
            value = 0 if func is torch.Tensor.zero_ else args[1]
            if target is None or not isinstance(value, (int, float)):
                self._fail("a fill that is not a constant into a parameter view")
            else:
                self.steps.append(_Fill(target[0], target[1], float(value)))
        elif _in_place(func):
            self._fail(f"in-place {name}")


class WeightLoadPlan:
    """Loads HF-named tensors into `model` (anything with vLLM's `load_weights(iterable) -> set of names`)."""

    def __init__(self, model: torch.nn.Module, param_name: Callable[[str], str] = lambda name: name) -> None:
        self.model, self.param_name = model, param_name
        self.plans: dict[str, _TensorPlan] = {}
        self.unplannable: dict[str, str] = {}  # name -> why it goes through load_weights every time
        self.stats = {"replayed": 0, "loader": 0}
        self._recorded = False  # a tensor was recorded since the last end_sync

    def _param_index(self) -> tuple[dict[int, torch.Tensor], dict[str, int]]:
        """Parameters by storage address (to recognise a copy's target), and their ids by reported name."""
        named = list(self.model.named_parameters())
        return (
            {param.untyped_storage().data_ptr(): param for _, param in named},
            {self.param_name(name): id(param) for name, param in named},
        )

    def _loaded_names(self, names: Any) -> set[str]:
        return {self.param_name(name) for name in names}

    @torch.no_grad()
    def load(self, bucket: WeightBucket) -> set[str]:
        """Load one bucket; returns the model parameter names it wrote (as `load_weights` reports them)."""
        loaded: set[str] = set()
        through_loader: WeightBucket = []
        pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        index: tuple[dict[int, torch.Tensor], dict[str, int]] | None = None
        for name, tensor in bucket:
            plan = self.plans.get(name)
            if plan is not None and (plan.shape, plan.stride, plan.dtype) == (
                tuple(tensor.shape),
                tensor.stride(),
                tensor.dtype,
            ):
                self._replay(plan, tensor, pending)
                loaded |= plan.loaded
                self.stats["replayed"] += 1
            elif name in self.unplannable or plan is not None:
                through_loader.append((name, tensor))
            else:  # first sight: load it alone while recording
                index = index or self._param_index()
                loaded |= self._record(name, tensor, *index)
                self.stats["loader"] += 1
        _copy_all(pending)
        if through_loader:
            loaded |= self._loaded_names(self.model.load_weights(through_loader))
            self.stats["loader"] += len(through_loader)
        if index is not None:
            if self._overlapping():  # replayed copies must not depend on their order
                self.unplannable.update({name: "copies into overlapping memory" for name in self.plans})
                self.plans.clear()
            self._recorded = True
        return loaded

    def summary(self) -> str:
        example = next(iter(self.unplannable.items()), ("", ""))
        return (
            f"weight sync plan: {len(self.plans)} tensors replay as copies, {len(self.unplannable)} go through "
            f"the model's loader" + f" (e.g. {example[0]}: {example[1]})" * bool(example[0])
        )

    def end_sync(self) -> None:
        """Called after a sync's last bucket: logs the plan once when this sync recorded any tensor."""
        if self._recorded:
            self._recorded = False
            logger.info(self.summary())

    def _record(
        self, name: str, tensor: torch.Tensor, storages: dict[int, torch.Tensor], param_ids: dict[str, int]
    ) -> set[str]:
        recorder = _Recorder(tensor, storages)
        with recorder:
            loaded = self._loaded_names(self.model.load_weights([(name, tensor)]))
        steps, why = recorder.steps, recorder.why
        if steps is not None:
            written = {id(step.param) for step in steps}
            unseen = [n for n in loaded if param_ids.get(n) not in written]
            if unseen or not tensor.is_contiguous():
                steps, why = None, f"{unseen[0]} loaded behind the recorder" if unseen else "a non-contiguous tensor"
        if steps is None:
            self.unplannable[name] = why
            return loaded
        self.plans[name] = _TensorPlan(
            tuple(tensor.shape), tensor.stride(), tensor.dtype, tuple(steps), frozenset(loaded)
        )
        return loaded

    def _overlapping(self) -> bool:
        spans: dict[int, list[tuple[int, int]]] = {}
        for plan in self.plans.values():
            for step in plan.steps:
                if isinstance(step, _Copy):
                    spans.setdefault(id(step.param), []).append(step.dst.span())
        for intervals in spans.values():
            intervals.sort()
            if any(b[0] <= a[1] for a, b in zip(intervals, intervals[1:])):
                return True
        return False

    @staticmethod
    def _replay(plan: _TensorPlan, tensor: torch.Tensor, pending: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        base = tensor.storage_offset()
        for step in plan.steps:
            dst = step.param.data.as_strided(step.dst.shape, step.dst.stride, step.dst.offset)
            if isinstance(step, _Fill):
                _copy_all(pending)  # keep the recorded order around a fill
                dst.fill_(step.value)
            else:
                pending.append((dst, tensor.as_strided(step.src.shape, step.src.stride, base + step.src.offset)))


def _copy_all(pending: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Batched copies (their targets never overlap); a dtype change (an fp32 head) copies on its own."""
    same = [(dst, src) for dst, src in pending if dst.dtype == src.dtype and dst.device == src.device]
    if same:
        torch._foreach_copy_([dst for dst, _ in same], [src for _, src in same])
    for dst, src in pending:
        if dst.dtype != src.dtype or dst.device != src.device:
            dst.copy_(src)
    pending.clear()
