"""The scheduler action's pure parts: the parsers on text captured from the real slurmctld 22.05
(tests/scheduler/data/, written by `scontrol show node -o` / `show job -o` on tests/slurm's
cluster), the reason cleaner, the drain/resume decision, the reclaim plan and the health gate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.config.scheduler import SchedulerSection
from agent.core.events import GpuFaultEvent, PreemptionEvent
from agent.core.vocabulary import GpuFault, OnReclaim
from agent.scheduler import policy
from agent.scheduler.backend import NodeInfo, clean_reason
from agent.scheduler.backends.slurm import parse_jobs, parse_node, parse_slurmd_c, runs_on
from agent.scheduler.policy import Cause, GateInputs, Step

DATA = Path(__file__).parent / "data"


def test_parse_a_drained_node_keeps_the_reason_with_its_spaces_and_drops_the_stamp() -> None:
    n = parse_node((DATA / "show-node-drain.txt").read_text())
    assert n.name == "tnan26917x0"
    assert n.state == "ALLOCATED" and n.drained
    assert n.reason == "tna: spot-termination at 12:04:31Z x=y"


def test_parse_a_node_without_reason() -> None:
    n = parse_node((DATA / "show-node-not-responding.txt").read_text())
    assert n.state == "ALLOCATED" and not n.drained and n.reason == ""  # NOT_RESPONDING is no drain


def test_parse_jobs_name_with_spaces_requeue_flag_and_node() -> None:
    jobs = parse_jobs((DATA / "show-job.txt").read_text())
    assert [(j.info.job_id, j.info.name, j.info.user, j.state, j.info.requeueable) for j in jobs] == [
        ("1", "llama 7b", "root", "RUNNING", True),
        ("2", "wrap", "root", "RUNNING", False),
    ]
    assert all(runs_on(j, "tnan26917x0") for j in jobs)
    assert not runs_on(jobs[0], "tnan26917x")


def test_parse_slurmd_c_and_errors() -> None:
    real = (DATA / "slurmd-C.txt").read_text()  # `slurmd -C` on this box (Debian's slurm-wlm 22.05)
    assert parse_slurmd_c(real) == real.split()[0].removeprefix("NodeName=")
    assert parse_slurmd_c("NodeName=cn-17 CPUs=96 Boards=1\nUpTime=3-01:02:03\n") == "cn-17"
    assert parse_slurmd_c("garbage") is None
    try:
        parse_node("slurm_load_node error: Unable to contact slurm controller")
    except ValueError as e:
        assert "NodeName" in str(e)
    else:
        raise AssertionError("no error")


def test_reason_is_one_bounded_line_without_control_characters() -> None:
    r = clean_reason("tna: evil\n\x1b[31mred\x00\t" + "x" * 500)
    assert "\n" not in r and "\x1b" not in r and "\x00" not in r
    assert r.startswith("tna: evil [31mred x") and len(r) == 120


def _notice(kind: str = "spot-termination", withdrawn: bool = False) -> PreemptionEvent:
    now = datetime(2026, 12, 2, 12, 2, 31, tzinfo=UTC)
    return PreemptionEvent("aws", kind, "i-1", now + timedelta(seconds=120), now, withdrawn=withdrawn)


def test_causes_name_the_notice_and_its_deadline_and_the_fault() -> None:
    cfg = SchedulerSection()
    c = policy.notice_cause(_notice(), cfg)
    assert c is not None and c.reason == "tna: spot-termination at 12:04:31Z" and c.key == "notice/i-1"
    assert policy.notice_cause(_notice("rebalance-recommendation"), cfg) is not None
    assert policy.notice_cause(_notice(), SchedulerSection(drain_on_notices=["maintenance-*"])) is None
    lost = GpuFaultEvent(GpuFault.LOST, 3, "GPU-abc", "H100")
    assert policy.fault_cause(lost, cfg) == Cause("gpu/3/lost", "tna: gpu 3 (GPU-abc) lost")
    assert policy.fault_cause(GpuFaultEvent(GpuFault.XID, 1, "u", "m", xid=13), cfg) is None
    xid = GpuFaultEvent(GpuFault.XID, 1, "u", "m", xid=79)
    x79 = policy.fault_cause(xid, cfg)
    assert x79 is not None and x79.reason == "tna: xid 79 on gpu 1 (u)"
    assert x79.expires_at == xid.at.timestamp() + 120  # stands resume_after, then the gate holds
    remap = GpuFaultEvent(GpuFault.ECC, 2, "u", "m", detail="row remapping failed: the GPU needs service")
    assert policy.fault_cause(remap, cfg) is not None
    assert policy.fault_cause(lost, SchedulerSection(drain_on_lost_gpu=False)) is None


def test_a_degraded_gpu_drains_only_where_the_operator_chose_it() -> None:
    """A GPU that runs slow is a policy decision: no condition drains by default; a chosen one
    drains while it lasts (its cleared event names the same cause, which the component drops)."""
    pcie = GpuFaultEvent(GpuFault.PCIE_DEGRADED, 5, "u", "H100", detail="Gen5 x8 of Gen5 x16")
    hot = GpuFaultEvent(GpuFault.THERMAL_THROTTLE, 5, "u", "H100", detail="hw thermal slowdown")
    assert all(policy.fault_cause(ev, SchedulerSection()) is None for ev in (pcie, hot))
    chosen = SchedulerSection(drain_on_degraded=["pcie-degraded"])
    assert policy.fault_cause(pcie, chosen) == Cause(
        "gpu/5/pcie-degraded", "tna: pcie-degraded on gpu 5 (u): Gen5 x8 of Gen5 x16"
    )
    assert policy.fault_cause(hot, chosen) is None
    cleared = GpuFaultEvent(GpuFault.PCIE_DEGRADED, 5, "u", "H100", cleared=True)
    assert policy.fault_cause(cleared, chosen).key == "gpu/5/pcie-degraded"
    with pytest.raises(ValueError, match="xid: not a degraded-GPU condition"):
        SchedulerSection(drain_on_degraded=["xid"])


def _node(drained: bool, reason: str = "") -> NodeInfo:
    return NodeInfo("n", "IDLE", drained, reason)


def test_decide_owns_only_its_own_drain() -> None:
    want = [Cause("notice/x", "tna: spot-termination at 12:04:31Z")]
    assert policy.decide(_node(False), want, None, 0, 120) == policy.Decision(Step.DRAIN, want[0].reason)
    assert policy.decide(_node(True, "tna: gpu 0 lost"), want, None, 0, 120).step == Step.NOTHING
    # an operator's drain: never changed, never lifted, whatever the agent wants
    for w in (want, []):
        assert policy.decide(_node(True, "disk replace (bob)"), w, None, 999, 120).step == Step.FOREIGN
    # nothing wanted: the agent's own drain waits for the gate, then for the hold
    assert policy.decide(_node(True, "tna: x"), [], "GPU 1 missing", 999, 120).step == Step.WAIT
    assert policy.decide(_node(True, "tna: x"), [], None, 119, 120).step == Step.WAIT
    assert policy.decide(_node(True, "tna: x"), [], None, 120, 120).step == Step.RESUME
    assert policy.decide(_node(False), [], None, 999, 120).step == Step.NOTHING


def test_standing_drops_expired_causes() -> None:
    causes = {"a": Cause("a", "tna: a", 100.0), "b": Cause("b", "tna: b")}
    assert [c.key for c in policy.standing(causes, 99.0)] == ["a", "b"]
    assert [c.key for c in policy.standing(causes, 100.0)] == ["b"]


def test_reclaim_plan_leaves_non_requeueable_jobs_alone() -> None:
    jobs = [j.info for j in parse_jobs((DATA / "show-job.txt").read_text())]
    p = policy.reclaim_plan(jobs, OnReclaim.REQUEUE)
    assert [j.job_id for j in p.act] == ["1"] and [j.job_id for j in p.refused] == ["2"]
    assert policy.job_words(p.act[0]) == "job 1 `llama 7b` (root)"
    assert [j.job_id for j in policy.reclaim_plan(jobs, OnReclaim.CANCEL).act] == ["1", "2"]
    assert policy.reclaim_plan(jobs, OnReclaim.NONE) == policy.JobPlan([], [])


def test_health_gate() -> None:
    ok = GateInputs(frozenset({0, 1}), frozenset({0, 1}), None, frozenset())
    assert policy.gate(ok, 1000.0, 120) is None
    assert policy.gate(GateInputs(frozenset({0, 1}), frozenset({0}), None, frozenset()), 1000, 120) == (
        "GPU 1 missing (listed at start)"
    )
    assert (
        policy.gate(GateInputs(frozenset({0}), None, None, frozenset()), 1000, 120) == "NVML does not answer"
    )
    assert "Xid" in (policy.gate(GateInputs(frozenset(), frozenset(), 950.0, frozenset()), 1000, 120) or "")
    assert policy.gate(GateInputs(frozenset(), frozenset(), 850.0, frozenset()), 1000, 120) is None
    bad = GateInputs(frozenset(), frozenset(), None, frozenset({"gpu"}))
    assert policy.gate(bad, 1000, 120) == "collectors failing: gpu"
    assert policy.gate(GateInputs(frozenset(), None, None, frozenset(), gpu_enabled=False), 0, 1) is None


def test_the_alert_names_the_jobs_that_cannot_be_requeued_and_slurm_failing_once() -> None:
    from agent.alerts.kinds import facts, render
    from agent.alerts.scene import Scene
    from agent.core.events import SchedulerEvent
    from agent.core.vocabulary import Language, SchedulerKind, SchedulerProblem
    from agent.devtools.alert_examples import GPUS, NODE, NOW

    ev = SchedulerEvent(
        SchedulerProblem.NOT_REQUEUEABLE, "cn-17", jobs=("job 4127 `llama-7b` (alice)",), event_id="e-1"
    )
    f = facts(ev)
    assert f is not None and f.kind == "scheduler" and f.severity == "critical" and not f.sustained
    msg = render(ev, f, Scene(NODE, GPUS, UTC, NOW), Language.EN)
    assert msg.title == "1 job(s) on gpu-node-17 cannot be requeued: they end with the node"
    assert ("Jobs", "job 4127 `llama-7b` (alice)") in msg.fields
    assert ("alertname", "TrainingNodeScheduler") in msg.labels
    from agent.scheduler.backends.slurm import SlurmBackend

    slurm = {"scheduler": SchedulerKind.SLURM, "scheduler_words": SlurmBackend.words}
    failing = SchedulerEvent(
        SchedulerProblem.FAILING, "cn-17", detail="scontrol took longer than 10s", **slurm
    )
    back = SchedulerEvent(SchedulerProblem.FAILING, "cn-17", cleared=True, **slurm)
    ff, fb = facts(failing), facts(back)
    assert ff is not None and fb is not None
    assert ff.fingerprint == fb.fingerprint and ff.sustained and fb.resolved  # one alert per outage
    zh = render(failing, ff, Scene(NODE, GPUS, UTC, NOW), Language.ZH_CN)
    assert "Slurm" in zh.title and "gpu-node-17" in zh.title
    assert ("scheduler_node", "cn-17") in zh.labels and ("scheduler", "slurm") in zh.labels
    unset = render(
        SchedulerEvent(SchedulerProblem.FAILING, "cn-17"), ff, Scene(NODE, GPUS, UTC, NOW), Language.EN
    )
    assert unset.title == "The scheduler does not answer the agent on gpu-node-17"


def test_auto_finds_slurmd_by_its_process_name(tmp_path: Path) -> None:
    from agent.scheduler.backends.slurm import slurmd_runs

    for pid, comm in ((1, "systemd"), (40, "slurmstepd"), (41, "python3")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
    (tmp_path / "self").mkdir()
    assert not slurmd_runs(str(tmp_path))
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "comm").write_text("slurmd\n")
    assert slurmd_runs(str(tmp_path))
