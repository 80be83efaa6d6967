"""Megatron-Core engines. Heavy imports (megatron, transformers) happen when an engine is built, not here."""

from dagrl.engine.megatron.preflight import check_layout

__all__ = ["check_layout", "MegatronActorEngine"]


def __getattr__(name: str):
    if name == "MegatronActorEngine":
        from dagrl.engine.megatron.actor import MegatronActorEngine

        return MegatronActorEngine
    raise AttributeError(name)
