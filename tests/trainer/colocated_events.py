"""`python tests/trainer/colocated_events.py EVENTS_FILE OVERRIDES...`: dagrl.main_dag with the hf rollout marked as
sharing its device with the actor, recording the order of the rollout engine's sleep/wake calls, the actor's (and
reference's) offloads and its checkpoint load into EVENTS_FILE (one name a line). On a CPU the hf rollout's sleep
and wake move nothing; the offloads copy to host buffers and back."""

import sys

from dagrl.engine.megatron.engine import MegatronEngine
from dagrl.engine.rollout.hf import HFRollout

events_file = sys.argv.pop(1)


def record(name: str, method):
    def wrapped(self, *args, **kwargs):
        with open(events_file, "a") as stream:
            stream.write(f"{name}\n")
        return method(self, *args, **kwargs)

    return wrapped


real_init = HFRollout.__init__


def colocated_init(self, *args, **kwargs):
    real_init(self, *args, **kwargs)
    self.colocated = True


HFRollout.__init__ = colocated_init
for name in ("sleep", "wake_weights", "wake_cache"):
    setattr(HFRollout, name, record(name, getattr(HFRollout, name)))
for name in ("load_checkpoint", "offload_params", "offload_grads", "offload_optimizer"):
    setattr(MegatronEngine, name, record(name, getattr(MegatronEngine, name)))

from dagrl.main_dag import main  # noqa: E402 - after the recording patches above

main()
