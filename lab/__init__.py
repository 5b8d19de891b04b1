"""The scenario lab: a synthetic trainer that really does each work pattern (O_DIRECT reads under a
throttled cgroup, CPU-burning data-loader workers on one core, gradient exchange over a shaped veth
into another network namespace) while the real agent watches it through its normal collectors, and
the fake NVML shows the GPU state each phase would have. See docs/classifier.md, "The lab".

Nothing here imports the classifier: the lab only produces load and ground truth, and scores the
agent's evaluations against it.
"""
