"""One process of a run: its logging, then pre-flight and training as one rank of a torchrun or Ray job (or the
whole job), reporting how it ended as (exit code, one line). `dagrl.main_dag` (the command line) and the Ray
workers (dagrl/launch/ray_cluster.py) both run it."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import warnings
from typing import Callable

from dagrl.config.errors import ConfigError, RunError
from dagrl.trainer import run_dir
from dagrl.utils.preemption import StopRequest, outcome

STARTED = time.perf_counter()  # imported after Hydra: this process's start-up is reported from here
logger = logging.getLogger("dagrl")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def setup_logging() -> None:
    level = os.environ.get("DAGRL_LOG_LEVEL", "INFO").upper()
    if level not in LOG_LEVELS:
        raise ConfigError(
            "DAGRL_LOG_LEVEL",
            f"environment variable DAGRL_LOG_LEVEL={os.environ['DAGRL_LOG_LEVEL']!r} "
            f"is not one of: {', '.join(LOG_LEVELS)}; set one of them or unset it",
        )
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(
        level=level, format=f"%(asctime)s [rank{rank}] %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    if not sys.stderr.isatty():  # no "Loading weights" bars (transformers, the hub) in log files: 1,000-char lines
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is imported
    # Megatron logs every config object at INFO; keep its warnings only unless debugging.
    logging.getLogger("megatron").setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    if level != "DEBUG":  # "Apex/TransformerEngine not installed" fallbacks are expected on CPU
        warnings.filterwarnings("ignore", category=UserWarning, module=r"megatron\.")
        # what Megatron's checkpoint loading calls in torch.distributed.checkpoint (on every resume): not the user's
        warnings.filterwarnings("ignore", "`load_state_dict` is deprecated", FutureWarning, r"megatron\.core\.")
        warnings.filterwarnings("ignore", "Please use DTensor instead", FutureWarning, r"torch\.distributed\.")


def train_process(cfg_data: dict) -> tuple[int, str]:
    """Validate and train in this process (one rank of a torchrun or Ray job, or the whole job).

    Returns (exit code, one-line message): 2 for bad input, 1 for a run stopped on purpose, 130 after Ctrl-C, 0 when
    done."""
    from dagrl.config.tree import Cfg
    from dagrl.config.validate import preflight

    cfg = Cfg(cfg_data)
    StopRequest(cfg.trainer, (signal.SIGINT,))  # Ctrl-C before the trainer's own handler: nothing to save yet
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # Ray's workers block it; their driver passes it on
    held = None  # the run directory this process locked
    try:
        composed = time.perf_counter()
        shape = preflight(cfg)
        run_dir.resolve(cfg_data)  # absolute from here: a later os.chdir (a scorer's) must not move the run's files
        checked = time.perf_counter()
        from dagrl.placement.bridge import global_rank

        if global_rank() == 0:  # before anything is written into it; the other ranks write only after rank 0 did
            held = cfg.trainer.default_local_dir
            run_dir.take(held)
        from dagrl.config.launch_env import apply_determinism, check_rendezvous_env

        check_rendezvous_env()  # here, not in pre-flight: dagrl.plan and the tests validate a launch by WORLD_SIZE
        from dagrl.launch.start_checks import check_start, joining

        check_start(cfg)
        apply_determinism(cfg.actor_rollout_ref.actor.megatron.use_deterministic_algorithms)
        from dagrl.trainer.loop import Trainer
        from dagrl.utils import watchdog

        trainer = cfg.trainer
        watchdog.install(
            trainer.hang_timeout_s, trainer.hang_startup_timeout_s, trainer.default_local_dir, global_rank()
        )

        def joined() -> None:  # what a launch costs before the Trainer's own start-up ("ready in N s")
            if global_rank() == 0:
                logger.info(
                    "start-up: %.1f s composing the config, %.1f s of pre-flight, %.1f s importing the trainer "
                    "and joining the process group",
                    composed - STARTED,
                    checked - composed,
                    time.perf_counter() - checked,
                )

        if shape.two_pools:
            run_pool(cfg, shape, joined)
        else:
            from dagrl.utils.dist import destroy_process_groups, init_process_group

            with joining(cfg.actor_rollout_ref.nccl_timeout):
                init_process_group(timeout_s=cfg.actor_rollout_ref.nccl_timeout)
            joined()
            Trainer(cfg, shape).fit()
            destroy_process_groups()  # with the watchdog still on: a stuck destroy is a hang like any other
    except (ConfigError, RunError) as error:  # bad input found late (a data row), a failing scorer
        logger.debug("stopping", exc_info=error)  # DAGRL_LOG_LEVEL=DEBUG shows the traceback
        return (2 if isinstance(error, ConfigError) else 1), str(error)
    except SystemExit as error:  # dagrl never exits from here: user code did, and sys.exit(0) would read as success
        logger.debug("stopping", exc_info=error)
        return 1, exit_message(error)
    finally:
        from dagrl.utils import watchdog

        watchdog.stop()
        from dagrl.utils.preemption import received

        if held is not None:  # only what this process took: the finally must not fail where the run never got there
            run_dir.release(held, stopped=received())
        record_config_reads()
    return outcome()


def exit_message(error: SystemExit) -> str:
    """One line naming where user code (a node, pipeline, tool or interaction function) called sys.exit: the
    innermost frame of the traceback (sys.exit itself is C code), or, where a library replaced sys.exit with a
    Python function (wandb's exit hook does once a run started; Megatron imports wandb), that function's caller."""
    calls, tb = [], error.__traceback__
    while tb is not None:
        calls.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    replaced = getattr(sys.exit, "__code__", None)
    hooked = next((i for i, (f, _) in enumerate(calls) if f.f_code is replaced), None)
    frame, line = calls[hooked - 1] if hooked else calls[-1] if calls else (None, 0)
    where = f" at {frame.f_code.co_filename}:{line} (in {frame.f_code.co_name})" if frame is not None else ""
    code = "" if error.code is None else repr(error.code)
    return (
        f"sys.exit({code}) was called{where} during the run, which did not finish; a node, pipeline, tool or "
        f"interaction function must return or raise an exception, never exit the trainer: remove that call"
    )


def run_pool(cfg, shape, joined: Callable[[], None]) -> None:
    """This process's part of a run with separate rollout and training pools (dagrl/trainer/pools/); `joined` once
    the pools' process groups exist."""
    from dagrl.placement.bridge import init_pools
    from dagrl.trainer.pools.rollout import RolloutPool
    from dagrl.trainer.pools.training import TrainingPool
    from dagrl.utils.dist import destroy_process_groups

    bridge = init_pools(shape.placement, timeout_s=cfg.actor_rollout_ref.nccl_timeout)
    joined()

    def work() -> bool:  # the pool's process, and the groups its engines hold, go when it returns
        training = shape.pool == "train"
        part = TrainingPool(cfg, shape, bridge) if training else RolloutPool(cfg, shape, bridge)
        # with the other pool killed, a stop signal stops the wait at once (Bridge.check_peers_alive); the callback
        # holds the stop request, not the part: the bridge outlives the part, whose engines hold process groups
        stop = part.stop
        bridge.stop_signal = lambda: stop.signal
        part.fit() if training else part.serve()
        return bridge.finish()

    try:
        finished = work()
    except BaseException as error:  # the other pool stops too, with this message, instead of waiting for us
        bridge.fail(str(error).splitlines()[0] if str(error) else type(error).__name__)
        raise
    finally:
        bridge.close()
    if finished:  # every process of both pools is past its last message: the groups may go (see train_process)
        destroy_process_groups(release=bridge.release)


def record_config_reads() -> None:
    """For the dead-key test: DAGRL_RECORD_CONFIG_READS=<file> writes every config key the run read."""
    path = os.environ.get("DAGRL_RECORD_CONFIG_READS")
    if path:
        import json

        from dagrl.config.tree import READ_KEYS

        with open(path, "w", encoding="utf-8") as out:
            json.dump(sorted(READ_KEYS), out)
