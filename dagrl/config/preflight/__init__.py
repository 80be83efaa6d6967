"""The rules between keys, each in the module of the section (or topic) that owns it: data, batches, actor, optim,
rollout, critic, algorithm, async_training, reward, distillation, trainer, profiler, checkpoints, graph, layout.
A key's own type, range and choices are its declaration's (dagrl/config/schema/); the checks over every key (finite
numbers, path values, inert keys) and the model directory's files are dagrl/config's own modules.
`dagrl.config.validate.preflight` runs them all in one order."""
