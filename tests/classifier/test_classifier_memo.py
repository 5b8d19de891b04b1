"""The engine's memo (tallies made as samples arrive, the window's GPU counts kept as it slides, the
running sums, the baselines gathered per tick) gives exactly the straightforward computation's vote:
the pure ``classify`` on the engine's window, everything recomputed from the samples, compared with
``==`` (features, scores, reasons and hint, to the last bit), on randomized streams."""

from __future__ import annotations

import math
import random

import pytest
from classifier_synth import fast_cfg, random_regimes, snapshot

from agent.classifier.baselines import learn
from agent.classifier.engine import Engine
from agent.classifier.features import window_means
from agent.classifier.samples import Sample, sample_from_snapshot, series
from agent.classifier.verdict import classify
from agent.config.classifier import ClassifierSection


def jitter(s: Sample, rnd: random.Random, t: int) -> Sample:
    """Each GPU on its own: another utilization, power, SM reading, now and then lost; a disk that
    appears half way (a new epoch of the running sums)."""
    gpus = tuple(
        g._replace(
            util=g.util if rnd.random() < 0.6 else rnd.random(),
            power=(g.power or 0.0) * rnd.uniform(0.8, 1.2),
            sm=None if g.sm is None else min(1.0, g.sm * rnd.uniform(0.5, 1.5)),
            up=rnd.random() > 0.02,
            throttle=rnd.choice([0, 0, 0, 4, 0x20]),
        )
        for g in s.gpus
    )
    disks = {**dict(s.disk_read.items()), **({"vdb": rnd.random() * 1e8} if t > 150 else {})}
    return s._replace(gpus=gpus, disk_read=series(disks))


@pytest.mark.parametrize("seed", range(6))
def test_the_engines_vote_is_the_pure_functions_to_the_bit(seed: int) -> None:
    rnd = random.Random(seed)
    cfg = fast_cfg(confirmations=rnd.choice([1, 2, 3])) if seed % 2 else ClassifierSection(warmup="10s")
    eng = Engine(cfg)
    t = checked = 0
    for r in random_regimes(rnd, 8):
        for k in range(r.seconds):
            t += 1
            s = jitter(sample_from_snapshot(snapshot(t, float(t), r, r.phases[k % len(r.phases)])), rnd, t)
            if t % 53 == 0:
                eng.checkpoint("requested", f"c{t}", float(t))
            if t % 53 == 3:
                eng.checkpoint("completed", f"c{t - 3}", float(t))
            eng.settle()  # what the last evaluation left for this tick: learned first thing in add
            baselines, current = eng.baselines, eng.current.verdict if eng.current else None
            stamps = dict(eng.learned_at)
            ev = eng.add(s)
            if ev is None:
                continue
            window = eng.window()
            # the running sums' means are the one memo kept as given: sums of prefix sums round
            # differently from a plain sum (checked close here), and the vote is pinned on them
            sums = eng.sums.means(len(window))
            plain = window_means(window)
            if sums is not None:
                for got, want in zip(sums, plain, strict=True):
                    assert got.keys() == want.keys()
                    assert all(math.isclose(got[k], want[k], rel_tol=1e-9, abs_tol=1e-6) for k in got)
            pure = classify(window, baselines, eng.cfg, current, family_means=sums)
            assert pure == ev.vote, (seed, t)
            parts = [p for p, at in eng.learned_at.items() if stamps.get(p) != at]
            if parts:
                eng.settle()
                assert eng.baselines == learn(window, baselines, parts), (seed, t, parts)
            checked += 1
    assert checked >= 25


def test_busiest_ranks_as_the_plain_sort_by_pressure() -> None:
    """``busiest`` ranks by utilization and works out only the kept rows' pressure: the same rows,
    in the same order (ties in input order), as every row's pressure sorted plainly."""
    from agent.classifier.loads import Load, busiest
    from agent.classifier.ramp import ramp

    def plain(caps, share, r, keep):
        rows = []
        for kind, name, rate, cap, source in caps:
            util = rate / cap / share if cap and share > 0 else None
            p = ramp(util, r) if util is not None else 0.0
            rows.append((p, util or 0.0, rate, kind, name, cap, source, util))
        rows.sort(key=lambda x: x[:3], reverse=True)  # stable: ties keep their order
        return tuple(Load(k, n, rate, cap, src, u, share, p) for p, _, rate, k, n, cap, src, u in rows[:keep])

    rnd = random.Random(1)
    for _ in range(3000):
        caps = [
            (
                rnd.choice(["disk", "nfs"]),
                f"d{i}",
                rnd.choice([0.0, 0.0, 1e6, 5e6, rnd.random() * 1e8]),
                rnd.choice([None, 0.0, 1e7, 2e8, rnd.random() * 1e8]),
                rnd.choice(["learned", "link", "unknown"]),
            )
            for i in range(rnd.randint(0, 12))
        ]
        share = rnd.choice([0.0, 0.5, rnd.random()])
        r = rnd.choice([(0.7, 0.9), (0.5, 0.5), (0.0, 1.0)])
        keep = rnd.choice([1, 2, 3])
        assert busiest(caps, share, r, keep) == plain(caps, share, r, keep)
