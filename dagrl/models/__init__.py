"""What dagrl knows of each model family (dagrl/models/families.py), read by pre-flight, the Megatron converter, the
planner and the presets that tools and tests build."""
