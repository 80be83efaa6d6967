"""Multi-turn agentic rollouts: tools, interactions, the hermes prompt format and the turn loop."""
