"""Features -> a 0-1 score per class, and the decision rule with its exit band (pure).

- compute   = share of GPU samples doing real work, less half the starved share the input pipeline
              explains: a pipeline at its ceiling that starves the GPUs half the time limits the job
              (they would work twice as much if it kept up), and a bare working share would tie it.
              Compute in force holds on its bare working share (the exit band), so a short starved
              blip inside a compute run outvotes it no sooner than before
- data      = share starved x max(storage pressure, trainer CPU pressure, input streamed over a
              link); the largest names the sub-reason
- network   = (share spinning + share starved that the input pipeline does not explain)
              x network pressure while waiting
- sync-wait = share spinning x (1 - network pressure while spinning)
- host      = the strongest host-side shape (agent/classifier/shapes): the share it explains (spinning
              for launch overhead, starved for saves and pageable copies, the whole time for the
              trainer's evaluation, by which every other class's share is scaled down) x its
              pressure. Spinning with no collective to wait in is the host's, not a peer's: network
              and sync-wait take only the spin the host shapes leave, and the pipeline's scores only
              the starvation
- idle      = share starved, less what any pressure explains; with no training process at all it is
              the only waiting class that can score

``mixed`` is not scored: it is what the decision says when no class clearly wins.

A window in which the GPUs spin more than they work vetoes ``compute`` outright, whatever the scores
and the exit band say: a spin-waiting node is never called compute-bound.
"""

from __future__ import annotations

from typing import NamedTuple

from agent.classifier.features import Features
from agent.classifier.shapes import SHAPES
from agent.config.classifier import ClassifierSection
from agent.core.vocabulary import SCORED_VERDICTS, DataSubReason, Verdict

CLASSES = SCORED_VERDICTS
EXPLAINED_WEIGHT = 0.5  # how much of the starvation the pipeline explains counts against compute


class Scores(NamedTuple):
    by_class: dict[str, float]
    data_storage: float
    data_cpu: float
    compute_vetoed: bool = False  # the GPUs spun more than they worked
    data_network: float = 0.0  # input streamed over a link (network-input)
    working: float = 0.0  # the bare working share: what compute in force holds on
    host_sub: str | None = None  # the host shape that scored highest (a HostSubReason)
    host_shapes: dict[str, float] = {}  # each host shape's score

    @property
    def sub_reason(self) -> DataSubReason:
        # ties go to storage, then CPU (the ledger's data bucket follows the same order)
        if self.data_storage >= max(self.data_cpu, self.data_network):
            return DataSubReason.STORAGE
        return DataSubReason.CPU if self.data_cpu >= self.data_network else DataSubReason.NETWORK_INPUT


_EXPLAINS: dict[str, str] = {}


def _explains() -> dict[str, str]:
    """Each declared shape's share by its name, kept ready: ``score`` runs at every evaluation, and a
    ``HostSubReason(k)`` lookup per shape cost as much as the rest of it."""
    if len(_EXPLAINS) != len(SHAPES):
        _EXPLAINS.clear()
        _EXPLAINS.update({str(k): sh.explains for k, sh in SHAPES.items()})
    return _EXPLAINS


def score(f: Features) -> Scores:
    if f.gpus == 0:
        zero: dict[str, float] = dict.fromkeys(CLASSES, 0.0)
        if f.samples and f.trainers == 0:
            zero[Verdict.IDLE] = 1.0
        return Scores(zero, 0.0, 0.0, compute_vetoed=True)
    held = f.host_pressures if f.trainers != 0 else ()  # (shape, pressure), every shape
    explains = _explains()
    # a shape of the whole time (the trainer's evaluation) takes its share of whatever the GPUs did
    whole = 0.0
    for k, p in held:
        if p > whole and explains[k] == "time":
            whole = p
    rest = 1.0 - min(1.0, whole)
    starved = f.starved_share * rest
    spin = f.spin_share * rest
    working = f.working_share * rest
    pipeline = max(f.storage_pressure, f.cpu_pressure, f.input_pressure)
    host_shapes: dict[str, float] = {}
    host_starved = 0.0
    if f.trainers == 0:
        # no training process: whatever the disks or NICs do, it is not a job waiting on them
        storage = cpu = streamed = network = sync = host = 0.0
        idle = starved
    else:
        claim = {"spinning": 0.0, "starved": 0.0, "time": 0.0}
        share = {"spinning": spin, "starved": starved, "time": 1.0}
        for k, p in held:
            e = explains[k]
            v = host_shapes[k] = share[e] * p
            if p > claim[e]:
                claim[e] = p
            if e == "starved" and v > host_starved:
                host_starved = v
        # what the host explains is no longer the pipeline's or a peer's to explain
        fed = 1.0 - claim["starved"]
        peer = 1.0 - claim["spinning"]
        storage = starved * f.storage_pressure * fed
        cpu = starved * f.cpu_pressure * fed
        streamed = starved * f.input_pressure * fed
        network = (spin * peer + starved * (1.0 - max(pipeline, claim["starved"]))) * f.network_pressure
        sync = spin * peer * (1.0 - f.network_pressure_spin)
        host = max(host_shapes.values(), default=0.0)
        idle = starved * (1.0 - max(pipeline, f.network_pressure, claim["starved"]))
    by_class = {
        Verdict.COMPUTE: max(0.0, working - EXPLAINED_WEIGHT * max(storage, cpu, streamed, host_starved)),
        Verdict.DATA: max(storage, cpu, streamed),
        Verdict.NETWORK: network,
        Verdict.SYNC_WAIT: sync,
        Verdict.HOST: host,
        Verdict.IDLE: idle,
    }
    return Scores(
        {k: round(min(1.0, max(0.0, v)), 4) for k, v in by_class.items()},
        storage,
        cpu,
        compute_vetoed=f.spin_share > f.working_share,
        data_network=streamed,
        working=working,
        host_sub=max(host_shapes, key=host_shapes.__getitem__) if host > 0 else None,
        host_shapes=host_shapes,
    )


def decide(scores: Scores, current: str | None, cfg: ClassifierSection) -> str:
    """The class this evaluation votes for.

    The current verdict keeps the vote while it scores at least ``exit_score`` and nobody leads it by
    ``margin``; a new class needs ``enter_score`` and a ``margin`` lead over the runner-up; else
    ``mixed``.
    """
    eligible = scores.by_class
    if scores.compute_vetoed:
        eligible = {k: v for k, v in eligible.items() if k != Verdict.COMPUTE}
    ranked = sorted(eligible.items(), key=lambda kv: kv[1], reverse=True)
    best, top = ranked[0]
    second = ranked[1][1]
    # one cause holding a share worth naming outvotes compute in force as it outvotes a new job's
    # first window: the confirmations are the hysteresis (a save every 10-20 s first seen once in a
    # job's first window, then held compute in force at 35% of the time, 2026-12-06)
    cause = dominant_cause(scores, cfg)
    if current in eligible and cause in (None, current):
        held = scores.working if current == Verdict.COMPUTE else eligible[current]
        if held >= cfg.exit_score and top - held < cfg.margin:
            return current
    if cause is not None:
        return cause
    if top >= cfg.enter_score and top - second >= cfg.margin:
        return best
    return Verdict.MIXED


CAUSES = (Verdict.DATA, Verdict.NETWORK, Verdict.SYNC_WAIT, Verdict.HOST)  # what GPU time is lost to


def dominant_cause(scores: Scores, cfg: ClassifierSection) -> str | None:
    """One cause that holds at least ``cause_floor`` of the time, ahead of every other cause and the
    unexplained wait by ``margin``: the GPUs work the rest, and work is no cause to compete with.
    A job half working and half reading from a slow device is storage-bound; ``mixed`` is for
    causes that compete (until 2026-12-06 it read "mixed: data 0.47, compute 0.29")."""
    by = scores.by_class
    best = max(CAUSES, key=by.__getitem__)
    top = by[best]
    if top < cfg.cause_floor:
        return None
    rest = max([by[c] for c in CAUSES if c != best] + [by[Verdict.IDLE]])
    return best if top - rest >= cfg.margin else None


def second_cause(scores: Scores, at: float) -> str | None:
    """Under a ``compute`` verdict, the cause that still costs at least ``at`` of the time."""
    by = scores.by_class
    best = max(CAUSES, key=by.__getitem__)
    return best if by[best] >= at else None
