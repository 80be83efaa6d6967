"""A custom reward with signal for random tiny models: longer responses score higher."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
    return scale * (len(solution_str) % 7) / 6.0
