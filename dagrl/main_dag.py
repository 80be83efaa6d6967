"""`python3 -m dagrl.main_dag key=value ...`: compose conf/, check it, train.

A bad override fails before Hydra composes (an unknown key naming the closest valid one, see config/load.py); with
plain key=value arguments that early composition is the job's config (Hydra's main, which would compose it again,
runs only for its flags and hydra.* overrides: 0.2 s of every launch). Every other configuration problem is found
by the pre-flight checks before any model is built (one line per independent problem). Both exit with code 2.
Ctrl-C exits with code 130 and one line, after a checkpoint where a step was under way (utils/preemption.py).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
import warnings
from typing import Callable

from dagrl.utils.preemption import INTERRUPTED, StopRequest, outcome  # the standard library only

NOT_STARTED = "Ctrl-C before the run started: stopped, nothing to save"


def _not_started(signum: int, frame) -> None:
    os.write(2, f"dagrl: {NOT_STARTED}\n".encode())
    os._exit(INTERRUPTED)


# Ctrl-C during the imports below (half a second), unless this process was started ignoring it (a script's
# background job): one line, no traceback; main() goes back to KeyboardInterrupt
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _not_started)

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from dagrl.config.errors import ConfigError, RunError  # noqa: E402
from dagrl.config.load import CONF_DIR, CONFIG_NAME, compose, to_plain  # noqa: E402

_STARTED = time.perf_counter()  # after Hydra's import: this process's start-up is reported from here
logger = logging.getLogger("dagrl")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def setup_logging() -> None:
    level = os.environ.get("DAGRL_LOG_LEVEL", "INFO").upper()
    if level not in LOG_LEVELS:
        raise ConfigError("DAGRL_LOG_LEVEL", f"environment variable DAGRL_LOG_LEVEL={os.environ['DAGRL_LOG_LEVEL']!r} "
                                             f"is not one of: {', '.join(LOG_LEVELS)}; set one of them or unset it")
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(level=level, format=f"%(asctime)s [rank{rank}] %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if not sys.stderr.isatty():  # no "Loading weights" bars (transformers, the hub) in log files: 1,000-char lines
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is imported
    # Megatron logs every config object at INFO; keep its warnings only unless debugging.
    logging.getLogger("megatron").setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    if level != "DEBUG":  # "Apex/TransformerEngine not installed" fallbacks are expected on CPU
        warnings.filterwarnings("ignore", category=UserWarning, module=r"megatron\.")
        # what Megatron's checkpoint loading calls in torch.distributed.checkpoint (on every resume): not the user's
        warnings.filterwarnings("ignore", "`load_state_dict` is deprecated", FutureWarning, r"megatron\.core\.")
        warnings.filterwarnings("ignore", "Please use DTensor instead", FutureWarning, r"torch\.distributed\.")


def fail(message: str, code: int) -> None:
    """One line on stderr (one per problem when pre-flight found several), no traceback; exit 2 for bad input, 1
    for a stopped or failed run."""
    for line in message.splitlines() or [message]:
        print(f"dagrl: error: {line}", file=sys.stderr)
    sys.exit(code)


def train_process(cfg_data: dict) -> tuple[int, str]:
    """Validate and train in this process (one rank of a torchrun or Ray job, or the whole job).

    Returns (exit code, one-line message): 2 for bad input, 1 for a run stopped on purpose, 130 after Ctrl-C, 0 when
    done."""
    from dagrl.config.tree import Cfg
    from dagrl.config.validate import preflight

    cfg = Cfg(cfg_data)
    StopRequest(cfg.trainer, (signal.SIGINT,))  # Ctrl-C before the trainer's own handler: nothing to save yet
    try:
        composed = time.perf_counter()
        shape = preflight(cfg)
        checked = time.perf_counter()
        from dagrl.config.launch_env import check_rendezvous_env
        check_rendezvous_env()  # here, not in pre-flight: dagrl.plan and the tests validate a launch by WORLD_SIZE
        from dagrl.placement.bridge import global_rank
        from dagrl.trainer.loop import Trainer
        from dagrl.utils import watchdog

        trainer = cfg.trainer
        watchdog.install(trainer.hang_timeout_s, trainer.hang_startup_timeout_s, trainer.default_local_dir,
                         global_rank())
        def joined() -> None:  # what a launch costs before the Trainer's own start-up ("ready in N s")
            if global_rank() == 0:
                logger.info("start-up: %.1f s composing the config, %.1f s of pre-flight, %.1f s importing the trainer "
                            "and joining the process group",
                            composed - _STARTED, checked - composed, time.perf_counter() - checked)

        if shape.two_pools:
            run_pool(cfg, shape, joined)
        else:
            from dagrl.utils.dist import destroy_process_groups, init_process_group

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
    return (f"sys.exit({code}) was called{where} during the run, which did not finish; a node, pipeline, tool or "
            f"interaction function must return or raise an exception, never exit the trainer: remove that call")


def run_pool(cfg, shape, joined: Callable[[], None]) -> None:
    """This process's part of a run with separate rollout and training pools (trainer/pools.py); `joined` once the
    pools' process groups exist."""
    from dagrl.placement.bridge import init_pools
    from dagrl.trainer.loop import Trainer
    from dagrl.trainer.rollout_pool import serve

    from dagrl.utils.dist import destroy_process_groups

    bridge = init_pools(shape.placement, timeout_s=cfg.actor_rollout_ref.nccl_timeout)
    joined()

    def work() -> bool:  # the trainer, and the groups its engines hold, go when it returns
        trainer = Trainer(cfg, shape, bridge)
        trainer.fit() if shape.pool == "train" else serve(trainer, bridge)
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


def run(cfg_data: dict) -> None:
    """The CLI's job: train here, or (trainer.launcher=ray) validate here and train on Ray workers."""
    if cfg_data["trainer"]["launcher"] == "ray" and os.environ.get("DAGRL_LAUNCHER") != "ray":
        from dagrl.config.tree import Cfg
        from dagrl.config.validate import placement, planned_world_size, preflight

        cfg = Cfg(cfg_data)
        from dagrl.launch.ray_cluster import WorkerFailed, check_ray_address, launch

        try:  # every input check before a single worker starts
            preflight(cfg, world_size=planned_world_size(cfg))
            # a bounded wait, not ray.init's minutes of retries; nodes as launch() counts them (a pool's machines)
            nodes = max(pool.size // pool.per_node for pool in placement(cfg).pools)
            check_ray_address(cfg.trainer.ray_address, nnodes=nodes)
        except ConfigError as error:
            fail(str(error), 2)

        try:
            launch(cfg_data)
        except WorkerFailed as error:
            fail(str(error), error.exit_code)
        except KeyboardInterrupt:  # the workers do not get the terminal's Ctrl-C (Ray blocks it): launch() killed them
            from dagrl.utils.preemption import resume_advice
            interrupted(f"Ctrl-C: the Ray workers were stopped without a checkpoint; "
                        f"{resume_advice(cfg.trainer, 'intact')}")
        return
    code, message = train_process(cfg_data)
    if code == INTERRUPTED:
        interrupted(message)
    if code:
        fail(message, code)


def interrupted(message: str) -> None:
    """Ctrl-C: the line saying where the run stopped and how it resumes (from one process only), exit 130."""
    if message:
        print(f"dagrl: {message}", file=sys.stderr)
    sys.exit(INTERRUPTED)


def record_config_reads() -> None:
    """For the dead-key test: DAGRL_RECORD_CONFIG_READS=<file> writes every config key the run read."""
    path = os.environ.get("DAGRL_RECORD_CONFIG_READS")
    if path:
        import json

        from dagrl.config.tree import READ_KEYS
        with open(path, "w", encoding="utf-8") as out:
            json.dump(sorted(READ_KEYS), out)


@hydra.main(config_path=str(CONF_DIR), config_name=CONFIG_NAME, version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    run(to_plain(cfg))


# Hydra's flags that take the next argument as their value (--cfg job); every other argument is an override.
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir",
               "-cd", "--experimental-rerun"}
# Left to Hydra: help and info compose nothing, and a multirun expands its sweeps itself.
HYDRA_ONLY_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--version", "--multirun", "-m"}


# Hydra's flags that take no value; together with VALUE_FLAGS, the only arguments that may start with '-'.
PLAIN_FLAGS = {"--resolve", "--run", "-r", "--shell-completion", "-sc"}
CONFIG_NAME_FLAGS = {"--config-name", "-cn"}
CONFIG_PATH_FLAGS = {"--config-path", "-cp"}
CONFIG_DIR_FLAGS = {"--config-dir", "-cd"}
# torchrun's own options: written after `-m dagrl.main_dag` they reach dagrl instead of torchrun
TORCHRUN_FLAGS = {f"--{name}" for base in ("nproc_per_node", "node_rank", "master_addr", "master_port", "rdzv_backend",
                                              "rdzv_endpoint", "rdzv_id", "rdzv_conf", "max_restarts", "nnodes",
                                              "standalone", "monitor_interval")
                  for name in (base, base.replace("_", "-"))}


def check_flags(argv: list[str]) -> None:
    """Arguments with a leading '-' that Hydra would answer with its usage text or a multi-line error: an override
    written as an option (--data.train_batch_size=8), and verl's --config-name/--config-path (dagrl has one
    primary config, conf/dagrl.yaml)."""
    from dagrl.config.load import CONFIG_NAME

    for index, arg in enumerate(argv):
        name, has_value, value = arg.partition("=")
        follows_flag = index > 0 and argv[index - 1] in VALUE_FLAGS  # --cfg job: the flag's value
        if name in TORCHRUN_FLAGS and not follows_flag:
            raise ConfigError(name, f"'{arg}' is torchrun's option, written after the module, so torchrun passed it "
                                    f"on to dagrl: put it before the module: torchrun {arg} -m dagrl.main_dag "
                                    f"key=value ...")
        if arg.startswith("-") and name not in VALUE_FLAGS | PLAIN_FLAGS | HYDRA_ONLY_FLAGS and not follows_flag:
            bare = arg.lstrip("-")
            fix = f"write {bare}" if "=" in bare else f"write {bare}=<value>" if bare else "drop it"
            raise ConfigError(name, f"'{arg}' is not an option of python3 -m dagrl.main_dag: config keys are set as "
                                    f"key=value without dashes; {fix}")
        if not has_value and name in VALUE_FLAGS:
            value = argv[index + 1] if index + 1 < len(argv) else ""
        if name in CONFIG_NAME_FLAGS and value.removesuffix(".yaml") != CONFIG_NAME:
            raise ConfigError(name, f"{name}={value}: dagrl has one primary config, conf/{CONFIG_NAME}.yaml "
                                    f"(verl's ppo_trainer/ppo_megatron_trainer keys are its sections); drop {name} and "
                                    f"set keys as overrides (dag=ppo for the PPO graph)")
        if name in CONFIG_DIR_FLAGS and not os.path.isdir(os.path.expanduser(value)):
            what = "a file" if os.path.isfile(os.path.expanduser(value)) else "no directory"
            raise ConfigError(name, f"{name}={value} is {what}: --config-dir takes a directory of config group "
                                    f"options (e.g. one holding dag/my_graph.yaml, chosen with dag=my_graph); a config "
                                    f"file's keys are set as key=value overrides")
        if name in CONFIG_PATH_FLAGS:
            raise ConfigError(name, f"{name}={value}: dagrl composes its own conf/ directory; drop {name} and set "
                                    f"keys as key=value overrides (--config-dir adds a directory of group options)")


def early_override_check(argv: list[str]) -> dict | None:
    """Compose the config as Hydra will, so that a bad override fails in one line (ConfigError) instead of in
    Hydra's multi-line message or traceback: an unknown key names the closest valid one. Returns the composed
    config when it is the whole job's: every argument an override, none of Hydra's own (hydra.*); else None."""
    check_flags(argv)
    overrides, flag_value = [], False
    for arg in argv:
        if not flag_value and not arg.startswith("-"):
            overrides.append(arg)
        flag_value = arg in VALUE_FLAGS
    if overrides and not HYDRA_ONLY_FLAGS & {arg.split("=", 1)[0] for arg in argv}:
        cfg_data = compose(overrides)
        if len(overrides) == len(argv) and not any(arg.lstrip("+~").startswith("hydra") for arg in overrides):
            return cfg_data
    return None


def main() -> None:
    if signal.getsignal(signal.SIGINT) is _not_started:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            setup_logging()
            cfg_data = early_override_check(sys.argv[1:])
        except ConfigError as error:
            fail(str(error), 2)
        if cfg_data is None:  # flags (--cfg job, --config-dir, ...) or hydra.* overrides: Hydra's own main
            hydra_main()
        else:  # composed already, as Hydra's main would (conf/dagrl.yaml: no run dir, no chdir, no Hydra logging)
            run(cfg_data)
    except KeyboardInterrupt:  # before train_process took Ctrl-C over (composing, pre-flight of a Ray launch)
        interrupted(NOT_STARTED)


if __name__ == "__main__":
    main()
