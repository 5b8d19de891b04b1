"""Bottleneck classifier: is this node compute-, data- or network-bound, and why.

``verdict.classify`` is the pure function (window + learned baselines + config -> Verdict);
``engine.Engine`` adds time (hysteresis, warm-up, checkpoint holds); ``component`` wires it into
the daemon.
"""
