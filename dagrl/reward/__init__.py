"""Rewards: rule scorers (`scorers`), user reward functions (`custom`) and the reward manager (`manager`).

Nothing is imported here, so pre-flight can import `dagrl.reward.custom` without torch.
"""
