"""What each pool runs and when: the graph's two parts, and the steps whose weights are pushed and validated (the
colocated trainer validates by the same schedule, so that two pools at K = 0 repeat it exactly)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.dag.graph import Graph


def split_graph(graph: Graph) -> tuple[Graph, Graph]:
    """(the rollout pool's nodes, the training pool's): before the reshard node, and from it on."""
    cut = graph.reshard
    return Graph(graph.nodes[:cut]), Graph(graph.nodes[cut:])


@dataclass(frozen=True)
class Schedule:
    """Which versions the training pool pushes and validates, known to both pools from the config alone."""

    start: int
    total: int
    trigger: int
    test_freq: int
    validates: bool  # val_files given
    val_before_train: bool
    start_validated: bool | None = None  # a resumed run: whether the run that saved its start step validated it

    def validated(self, version: int) -> bool:
        """Whether the weights after step `version` are validated: every test_freq steps and after the last, and
        before training (val_before_train) unless a resumed run's start step was validated already — as the
        checkpoint says (a finished run that is extended validated its last step under its own total), or, for a
        checkpoint that predates the record, as this schedule would have."""
        if not self.validates:
            return False
        periodic = self.test_freq > 0 and (version % self.test_freq == 0 or version == self.total)
        if version == self.start:
            if self.start_validated is False and periodic and self.start > 0:
                return True  # its validation was cut by a stop signal (trainer/validation.py): it runs now
            already = self.start_validated if self.start_validated is not None else self.start > 0 and periodic
            return self.val_before_train and not already
        return periodic

    def pushed(self, version: int) -> bool:
        return version == self.start or version % self.trigger == 0 or self.validated(version)

    @classmethod
    def of(cls, cfg, start: int, total: int, start_validated: bool | None = None) -> "Schedule":
        trainer = cfg.trainer
        return cls(
            start,
            total,
            cfg.async_training.trigger_parameter_sync_step,
            trainer.test_freq,
            bool(cfg.data.val_files),
            bool(trainer.val_before_train),
            start_validated,
        )
