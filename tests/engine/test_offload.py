"""HostOffload keeps a store's storages in one exact-size host arena (no power-of-two rounding) and round-trips
them bit-exactly, views included; fault_in touches every byte from several threads."""

import torch

from dagrl.engine.megatron import offload
from dagrl.engine.megatron.offload import HostOffload, fault_in


def aligned(size: int) -> int:
    return -(-size // offload._ALIGN) * offload._ALIGN


def test_round_trip_through_one_exact_size_arena():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1000, generator=g)
    b = torch.randn(37, generator=g).to(torch.bfloat16)
    view = a[10:20]  # shares a's storage: tracked once
    store = HostOffload("test")
    store.track([a, b, view])
    before = a.clone(), b.clone()
    store.offload()
    assert a.untyped_storage().nbytes() == 0 and b.untyped_storage().nbytes() == 0  # the device side is freed
    assert store._arena.numel() == aligned(4000) + aligned(74)  # 4,608 bytes, not rounded up to 8,192
    assert store._slots[1].data_ptr() - store._arena.data_ptr() == aligned(4000)  # b's slot starts aligned
    store.onload()
    assert torch.equal(a, before[0]) and torch.equal(b, before[1]) and torch.equal(view, before[0][10:20])
    arena = store._arena
    a.mul_(3)  # a second cycle reuses the arena and carries the new values
    store.offload()
    store.onload()
    assert store._arena is arena and torch.equal(a, before[0] * 3)


def test_a_storage_tracked_later_gets_a_new_arena_holding_every_storage():
    a, b = torch.arange(300, dtype=torch.float32), torch.arange(5000, dtype=torch.int64)
    store = HostOffload("test")
    store.track([a])
    store.offload()
    store.onload()
    first = store._arena
    store.track([b])
    store.offload()
    assert store._arena is not first and store._arena.numel() == aligned(1200) + aligned(40000)
    assert store.nbytes == 1200 + 40000
    store.onload()
    assert torch.equal(a, torch.arange(300, dtype=torch.float32)) and torch.equal(b, torch.arange(5000))


def test_fault_in_zeroes_every_chunk_from_several_threads(monkeypatch):
    monkeypatch.setattr(offload, "_FAULT_CHUNK", 1000)  # 10 chunks, the last one short
    touched = []
    zero = torch.Tensor.zero_
    monkeypatch.setattr(torch.Tensor, "zero_", lambda self: touched.append(self.numel()) or zero(self))
    tensor = torch.full((9500,), 7, dtype=torch.uint8)
    fault_in(tensor, threads=4)
    assert int(tensor.max()) == 0 and sorted(touched) == [500] + [1000] * 9
