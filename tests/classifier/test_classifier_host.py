"""The host side named (issue 48): launch overhead, checkpoint stalls and pageable copies, each with
its own remedy; one cause against the GPUs' work is that cause, never ``mixed``; a compute verdict
names the second cause that still costs a share worth acting on. Synthetic snapshots
(classifier_synth), on the pure classifier and its engine."""

from __future__ import annotations

import random
import re

import pytest
from classifier_synth import COMPUTE, CPU, NETWORK, STORAGE, Regime, like, run

from agent.classifier.cause import cause
from agent.classifier.published import pressures
from agent.config.classifier import ClassifierSection
from agent.core.vocabulary import Bucket, VerdictReason
from agent.ledger.assign import BUCKETS, LedgerReading, Split, Tick, assign

LAUNCH = Regime(("small",), busy=(1.0,), workers=0, cores=1.0, world_size=1)
# a synchronous save every 10 s that holds the GPUs 3 s, writing 100 MB/s meanwhile (300 MB a save)
SAVE = Regime(("work",) * 7 + ("starved",) * 3, write_starved=100e6, cores=1.0, busy=(1.0,), busy_work=(0.3,))
COPY = Regime(("work", "starved"), pcie_starved=3e9, busy=(1.0,), workers=0, cores=1.0, trainer_read=0.0)


def minute() -> ClassifierSection:
    """The defaults' window and evaluations, without the warm-up and the publishing delay."""
    return ClassifierSection(warmup="0s", sustain="0s")


def last(r):
    return r.evaluations[-1].current


def settled(r) -> list[str]:
    """The verdicts from the first one on."""
    labels = r.verdicts()
    first = next(i for i, v in enumerate(labels) if v is not None)
    return labels[first:]


def test_a_single_process_launching_small_kernels_is_launch_bound_not_waiting_for_a_peer() -> None:
    v = last(run(like(LAUNCH, seconds=40)))
    assert v.label == "host/launch", (v.label, v.reasons)
    assert cause(v) == VerdictReason.LAUNCH
    text = " ".join(v.reasons)
    assert "no collective to wait in" in text and "WORLD_SIZE unset" in text, v.reasons
    assert "busy 100% of a core" in text, v.reasons
    assert "CUDA graphs" in v.hint and "slow rank" not in v.hint
    # the same GPUs as a rank of a job of several: a collective waits for a peer
    assert last(run(like(LAUNCH, seconds=40, world_size=8))).label == "sync-wait"
    # its environment unread (another user's process, the agent not root): nothing is assumed
    assert last(run(like(LAUNCH, seconds=40, world_size=None))).label == "sync-wait"
    # a host that is not pegged has no peer either: kernels too small to fill the GPUs, the same remedy
    idle_host = last(run(like(LAUNCH, seconds=40, busy=(0.1,))))
    assert idle_host.label == "host/launch", idle_host.reasons
    assert "kernels too small to fill the GPUs" in " ".join(idle_host.reasons)


def test_a_synchronous_checkpoint_is_named_with_how_long_how_often_and_its_share() -> None:
    r = run(like(SAVE, seconds=150), cfg=minute())
    labels = settled(r)
    # judged over the minute's window, a save every 10 s never flips the verdict from window to window
    assert set(labels) == {"host/checkpoint"}, labels
    v = last(r)
    assert cause(v) == VerdictReason.CHECKPOINT_SAVE
    text = " ".join(v.reasons)
    held = re.search(r"checkpoint saves held the GPUs (\d+)% of the time: (\d) began in the last 59 s", text)
    assert held and 29 <= int(held[1]) <= 32 and int(held[2]) in (5, 6), v.reasons
    assert re.search(r"each ~3\.[01] s \(300 MB written\), one every ~10 s", text), v.reasons
    assert "async_save" in v.hint and "AsyncCheckpointIO" in v.hint
    # not data/cpu: the trainer is busy serializing its state, not decoding input
    assert "num_workers" not in v.hint


def test_a_short_save_under_compute_is_its_second_cause_not_healthy() -> None:
    # 2 s of every 12 s: compute, but the save's share is worth acting on
    r = run(like(SAVE, phases=("work",) * 10 + ("starved",) * 2, seconds=150), cfg=minute())
    v = last(r)
    assert v.label == "compute", (v.label, v.reasons)
    work = round(v.features.working_share * 100)
    assert any("host/checkpoint still costs 17% of the time" in x for x in v.reasons), v.reasons
    assert v.hint.startswith(f"The GPUs do real work {work}% of the time, but host/checkpoint costs 17%")
    assert "async_save" in v.hint and "Healthy" not in v.hint


def test_pageable_copies_are_not_blamed_on_the_data_loader() -> None:
    v = last(run(like(COPY, seconds=40)))
    assert v.label == "host/pageable-copy", (v.label, v.reasons)
    assert cause(v) == VerdictReason.PAGEABLE_COPY
    assert "pin_memory=True" in v.hint and "non_blocking=True" in v.hint and "num_workers" not in v.hint
    rate = re.search(r"the GPUs received (\S+) GB/s each over PCIe while they starved", " ".join(v.reasons))
    assert rate and 2.8 <= float(rate[1]) <= 3.0, v.reasons
    # the same busy main process with no copies in flight is the input pipeline decoding
    decoding = last(run(like(COPY, pcie_starved=0.0, seconds=40)))
    assert decoding.label == "data/cpu" and "num_workers" in decoding.hint, decoding.label
    # copies that come with input read from a slow device are the device's
    reading = last(run(like(STORAGE, pcie_starved=3e9, seconds=40)))
    assert reading.label == "data/storage", reading.label


@pytest.mark.parametrize("seed", range(6))
def test_work_against_one_cause_is_that_cause_never_mixed(seed: int) -> None:
    """GPUs working 30-70% of the time and losing the rest to one cause, drawn: the cause is named
    and held, and no evaluation after the first verdict reads mixed."""
    rnd = random.Random(seed)
    for base, label in ((STORAGE, "data/storage"), (CPU, "data/cpu"), (NETWORK, "network")):
        # one phase a 1 s sample: cycles of 3-10 s whose work share lies in 30-70%
        cycle, work = rnd.choice([(c, w) for c in range(3, 11) for w in range(1, c) if 0.3 <= w / c <= 0.7])
        lost = "spin" if base is NETWORK else "starved"
        phases = ("work",) * work + (lost,) * (cycle - work)
        r = run(like(base, phases=phases, seconds=150, gpus=rnd.choice((1, 2, 8))), cfg=minute())
        labels = settled(r)
        assert "mixed" not in labels and labels[-1] == label, (label, phases, labels)
        assert labels.count(label) >= 0.9 * len(labels), (label, phases, labels)


def test_a_compute_job_names_a_second_cause_worth_acting_on_and_is_healthy_without_one() -> None:
    # main-process decode 20% of the time: compute, with the cause and its remedy
    decoding = like(
        CPU, phases=("work",) * 4 + ("starved",), cores=1.0, workers=0, busy=(1.0,), busy_work=(0.2,)
    )
    r = run(like(decoding, seconds=150), cfg=minute())
    v = last(r)
    assert v.label == "compute", (v.label, v.reasons)
    lost = round(v.detail.by_class["data"] * 100)
    assert 15 <= lost <= 25 and f"data/cpu still costs {lost}% of the time:" in v.reasons, v.reasons
    assert "num_workers" in v.hint and "Healthy" not in v.hint
    healthy = last(run(like(COMPUTE, seconds=150), cfg=minute()))
    assert healthy.label == "compute" and healthy.hint.startswith("Healthy"), healthy.hint


def test_the_ledger_books_each_shape_to_its_bucket_and_the_seconds_add_up() -> None:
    gpu = LedgerReading("GPU-0", True, 0.5, 0.1, 100.0, 400.0, True)
    for regime, bucket in ((SAVE, Bucket.CHECKPOINT), (COPY, Bucket.HOST_COPY), (LAUNCH, Bucket.HOST_LAUNCH)):
        r = run(like(regime, seconds=150), cfg=minute())
        tick = Tick(seconds=1.0, gpus=(gpu,), job=True, pressures=pressures(r.evaluations[-1].vote.features))
        # one GPU's second: a tenth working, the rest waiting as the shape waits
        split = Split(0.1, 0.9, 0.0) if regime is LAUNCH else Split(0.1, 0.0, 0.9)
        booked = dict(zip(BUCKETS, assign(tick, [split]), strict=True))
        assert sum(booked.values()) == pytest.approx(1.0)
        assert booked[Bucket.PRODUCTIVE] == pytest.approx(0.1)
        assert booked[bucket] >= 0.8, (bucket, booked)


def test_a_save_is_priced_and_given_the_interval_its_reclaim_risk_asks_for() -> None:
    from agent.classifier.shapes.checkpoint import save_lines
    from agent.ledger.savecost import save_cost

    v = last(run(like(SAVE, seconds=150), cfg=minute()))
    h = v.features.host
    asked: list[tuple] = []

    def view(seconds: float, share: float, period: float | None):
        asked.append((seconds, share, period))
        return save_cost(260.0, "CNY", (4 * 3600.0, "config"), 4.0, seconds, share, period)

    lines = save_lines(h, view)
    assert asked == [(h.save_seconds, h.save_share, h.save_period)]
    money = re.search(r"the saves cost ~(\S+) CNY an hour", lines[0])
    assert money and float(money[1]) == pytest.approx(260.0 * h.save_share, abs=0.01), lines
    # Young/Daly: sqrt(2 x 3 s x 4 h) = 294 s
    assert re.search(
        r"at one reclaim every ~4\.0 h \(config\) a 3\.[01] s save is best made every ~5 min", lines[1]
    )
    assert "(now every ~10 s)" in lines[1]
    # without a price or a known interruption rate, nothing is made up
    bare = save_lines(h, lambda s, sh, p: save_cost(None, "CNY", (None, ""), 4.0, s, sh, p))
    assert bare == []


def test_bytes_through_pipes_and_sockets_are_no_save() -> None:
    """A pool's worker returns each batch through a pipe (wchar, not write_bytes) while the training
    process waits for it: the input pipeline, not a checkpoint (the lab's synchronous-map job read
    host/checkpoint when saves were told by wchar)."""
    pool = like(SAVE, phases=("work", "starved", "starved"), pipe_write=100e6, cores=2.0, busy=(1.0, 1.0))
    v = last(run(like(pool, seconds=150), cfg=minute()))
    assert v.label == "data/cpu", (v.label, v.reasons)
    assert v.features.host.stalls == 0


# what tna_client in the trainer says (agent.sources.trainer): evaluation every 10 s, 4 s of it, on
# GPUs that look the same throughout (forward passes read as work from outside)
EVALUATING = Regime(("work",) * 10, cores=1.0, busy=(1.0,), told=("",) * 6 + ("evaluation",) * 4)


def test_an_evaluation_the_trainer_tells_is_named_and_booked_as_evaluation_not_as_work() -> None:
    r = run(like(EVALUATING, seconds=150), cfg=minute())
    labels = settled(r)
    assert set(labels) == {"host/evaluation"}, labels
    v = last(r)
    assert cause(v) == VerdictReason.EVALUATION
    text = " ".join(v.reasons)
    held = re.search(r"evaluation held the training (\d+)% of the time \(from the trainer\)", text)
    assert held and 38 <= int(held[1]) <= 42, v.reasons
    assert re.search(r"each ~4\.0 s, one every ~10 s", text), v.reasons
    assert "val_check_interval" in v.hint and "eval_steps" in v.hint
    # the same GPUs with no client in the trainer: compute, healthy (nothing outside tells evaluation)
    blind = last(run(like(EVALUATING, told=None, seconds=150), cfg=minute()))
    assert blind.label == "compute" and blind.hint.startswith("Healthy"), blind.reasons
    # an evaluation of 1.5 s in 12 s is compute's second cause, with its remedy
    short = like(EVALUATING, phases=("work",) * 24, told=("",) * 21 + ("evaluation",) * 3, seconds=150)
    s = last(run(short, cfg=minute()))
    assert s.label == "compute", s.reasons
    cost = next(x for x in s.reasons if "host/evaluation still costs" in x)
    assert 10 <= int(re.search(r"costs (\d+)%", cost)[1]) <= 16, s.reasons
    assert any("evaluation held the training" in x and "(from the trainer)" in x for x in s.reasons), (
        s.reasons
    )
    assert "val_check_interval" in s.hint


def test_the_trainers_saves_replace_the_ones_told_from_outside() -> None:
    # the SAVE job, with the trainer telling its saves: one tick more each (its span includes the
    # serialization before the first byte is written), and the reasons say where they come from
    told = like(SAVE, seconds=150, told=("",) * 6 + ("checkpoint",) * 4)
    v = last(run(told, cfg=minute()))
    assert v.label == "host/checkpoint", (v.label, v.reasons)
    text = " ".join(v.reasons)
    held = re.search(r"checkpoint saves held the training (\d+)% of the time \(from the trainer\)", text)
    assert held and 38 <= int(held[1]) <= 42, v.reasons
    assert "async_save" in v.hint


def test_the_ledger_books_what_the_trainer_told_first_and_the_seconds_add_up() -> None:
    gpu = LedgerReading("GPU-0", True, 0.9, 0.8, 300.0, 400.0, True)
    r = run(like(EVALUATING, seconds=150), cfg=minute())
    p = pressures(r.evaluations[-1].vote.features)
    # evaluation is booked from the trainer's spans tick by tick, not from the window's pressure
    assert Bucket.EVALUATION not in dict(p.host_starved) | dict(p.host_spin)
    for saving, evaluating in ((0.0, 0.4), (0.3, 0.0), (0.25, 0.5), (0.0, 0.0), (0.9, 0.9)):
        tick = Tick(seconds=2.0, gpus=(gpu, gpu), job=True, pressures=p, saving=saving, evaluating=evaluating)
        booked = dict(zip(BUCKETS, assign(tick, [Split(0.8, 0.0, 0.2)] * 2), strict=True))
        assert sum(booked.values()) == pytest.approx(4.0)
        assert booked[Bucket.CHECKPOINT] == pytest.approx(4.0 * saving)
        assert booked[Bucket.EVALUATION] == pytest.approx(4.0 * min(evaluating, 1.0 - saving))
        left = 4.0 * (1.0 - saving - min(evaluating, 1.0 - saving))
        assert booked[Bucket.PRODUCTIVE] == pytest.approx(0.8 * left)
