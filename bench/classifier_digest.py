"""Bit-identity check for classifier changes: the exact repr of every evaluation (vote, verdict in
force, hold, events) and the final baselines over randomized streams, as one digest.

    .venv/bin/python bench/classifier_digest.py [TREE] [OUT]   # TREE: whose agent/ (default: this one)

Run it on two checkouts (``git archive <commit> agent | tar -x -C /tmp/x``,
then ``bench/classifier_digest.py /tmp/x``): the same digest is the same verdicts, scores, reasons,
hints and baselines to the last bit; ``diff`` the two OUT files to see where they part. Streams: both
``classifier_cost`` nodes with per-GPU random phases, lost and power-only GPUs, throttling, trainers
missing, a disk appearing, checkpoints; 12 randomized mixes of the unit tests' regimes (GPU counts,
new jobs, link speeds, pegged workers).
"""

from __future__ import annotations

import hashlib
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
TREE = sys.argv[1] if len(sys.argv) > 1 else str(HERE)
# the tree's classifier; the streams from this checkout's bench node and test regimes
sys.path[:0] = [TREE, f"{HERE}/bench", f"{HERE}/tests/classifier"]

import classifier_cost as cost  # noqa: E402
import classifier_synth as synth  # noqa: E402

from agent.classifier.engine import Engine  # noqa: E402
from agent.classifier.samples import sample_from_snapshot, series  # noqa: E402
from agent.config.classifier import ClassifierSection  # noqa: E402
from agent.snapshot import NodeSnapshot  # noqa: E402


def text(ev: Any) -> str | None:
    return None if ev is None else repr((ev.wall, ev.vote, ev.current, ev.held, ev.changed, ev.events))


def settled(eng: Engine) -> str:
    getattr(eng, "settle", lambda: None)()  # learning an evaluation left for the next tick
    return repr(eng.baselines)


def with_fields(s: Any, **kw: Any) -> Any:
    """A sample with other fields (a NamedTuple now, a dataclass before)."""
    return s._replace(**kw) if hasattr(s, "_replace") else replace(s, **kw)


def bench_stream(node: cost.Node, seed: int, n: int) -> list[str | None]:
    rnd = random.Random(seed)
    short = ClassifierSection(window="20s", evaluate_every="3s", warmup="5s")
    eng = Engine(ClassifierSection() if seed % 2 else short)
    out = []
    prev = cost.parts(node, 0.0, rnd)
    for i in range(1, n):
        t = float(i)
        cur = cost.parts(node, t, rnd)
        gpu: Any = cur["gpu"]
        gpus = []
        for g in gpu.gpus:
            util, power, sm = synth.PHASES[rnd.choice(list(synth.PHASES))]
            gpus.append(
                replace(
                    g,
                    utilization=util if rnd.random() < 0.7 else rnd.random(),
                    power_watts=power * rnd.uniform(0.8, 1.2),
                    sm_active=None if seed % 3 == 0 else sm * rnd.uniform(0.5, 1.5),
                    up=rnd.random() > 0.01,
                    clocks_event_reasons=rnd.choice([0, 0, 0, 4, 0x20, 0x44]),
                )
            )
        cur = {**cur, "gpu": replace(gpu, gpus=tuple(gpus))}
        if rnd.random() < 0.05:  # the process collector missed a tick
            cur = {**cur, "processes": replace(cur["processes"], processes=())}
        rates = cost.tick_rates(prev, cur)
        snap = NodeSnapshot(seq=i, timestamp=1.7e9 + t, monotonic=t, rates=rates, parts=cur)
        prev = cur
        s = sample_from_snapshot(snap)
        if i > n // 2:  # a disk appears
            s = with_fields(s, disk_read=series({**dict(s.disk_read.items()), "zz9": rnd.random() * 1e8}))
        if i % 97 == 0:
            eng.checkpoint("requested", f"c{i}", t)
        if i % 97 == 4:
            eng.checkpoint("completed", f"c{i - 4}", t)
        out.append(text(eng.add(s)))
    return [*out, settled(eng)]


def synth_stream(seed: int, n: int) -> list[str | None]:
    rnd = random.Random(seed)
    cfg = synth.fast_cfg(confirmations=rnd.choice([1, 2, 3])) if seed % 2 else ClassifierSection(warmup="10s")
    eng = Engine(cfg)
    picks = synth.random_regimes(rnd, n)
    r = synth.Run(eng).feed(picks)
    return [*map(text, r.evaluations), settled(eng)]


def main() -> None:
    out: list[str | None] = []
    for seed in range(4):
        out += bench_stream(cost.NODES[seed % 2], seed, 400)
    for seed in range(12):
        out += synth_stream(seed, 12)
    # GpuSample.index was renamed nvml_index (a NamedTuple cannot have a field called index), and the
    # classifier's verdict record Verdict renamed Judgement (one class per name): the reprs are read
    # with the old names, so a digest stays comparable with trees from before either rename
    body = "\n".join(map(str, out)).replace("nvml_index=", "index=").replace("Judgement(", "Verdict(")
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(body)
    evaluations = sum(1 for x in out if x and x.startswith("("))
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    print(f"{len(out)} records ({evaluations} evaluations), sha256 {digest}")


if __name__ == "__main__":
    main()
