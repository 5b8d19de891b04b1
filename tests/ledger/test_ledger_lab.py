"""The goodput ledger on the scenario lab (``make lab``): the real agent watches the synthetic trainer
really doing each work pattern (throttled disk, one-core cgroup, shaped network, spin-waits, a drill),
and each scenario's GPU-seconds land in the bucket its work pattern calls for. Needs root, like the
classifier's lab. The table per scenario goes to bench/out/goodput_lab.txt (and stdout with -s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import REPO, AgentProcess
from labagent import LabAgent, lab_agent

from agent.core.vocabulary import Bucket
from lab.harness import SCENARIOS, Lab

pytestmark = [pytest.mark.lab, pytest.mark.root, pytest.mark.slow]
OUT = REPO / "bench" / "out" / "goodput_lab.txt"
WAITING = (Bucket.DATA_STORAGE, Bucket.DATA_CPU, Bucket.NETWORK, Bucket.SYNC_WAIT, Bucket.IDLE)
# the waiting bucket each scenario's wait must mostly land in
EXPECTED_WAIT = {
    "data/storage": Bucket.DATA_STORAGE,
    "data/cpu": Bucket.DATA_CPU,
    "network": Bucket.NETWORK,
    "sync-wait": Bucket.SYNC_WAIT,
}


class Session(LabAgent):
    def __init__(self, lab: Lab, agent: AgentProcess) -> None:
        super().__init__(lab, agent)
        self.rows: dict[str, dict[str, float]] = {}
        self.classifier: dict[str, str] = {}  # scenario -> evaluations the classifier got right

    def totals(self) -> dict[str, float]:
        return self.call("GET", "/goodput")["totals"]


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Iterator[Session]:
    goodput = {"goodput": {"resolution": "1s", "settle": "1h", "poll": "500ms"}}
    with lab_agent(tmp_path_factory.mktemp("goodput-lab"), Session, goodput) as s:
        yield s


def table(rows: dict[str, dict[str, float]], classifier: dict[str, str]) -> str:
    cols = [str(b) for b in Bucket]
    head = f"{'scenario':<14} {'GPU-s':>7} " + " ".join(f"{c[:12]:>12}" for c in cols) + "  classifier right"
    out = [head]
    for name, r in rows.items():
        total = sum(r.values()) or 1.0
        shares = " ".join(f"{r.get(c, 0) / total:>12.1%}" for c in cols)
        out.append(f"{name:<14} {total:>7.1f} {shares}  {classifier.get(name, '')}")
    return "\n".join(out)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_lab_scenario_lands_in_its_buckets(session: Session, name: str) -> None:
    sc = SCENARIOS[name]
    before = session.totals()
    res = session.lab.run(sc, session.history, session.drill)
    after = session.totals()
    session.classifier[name] = f"{res.right}/{res.scored}"
    delta = {b: after[b] - before[b] for b in after}
    session.rows[name] = delta
    print(f"\n{table({name: delta}, session.classifier)}")
    total = sum(delta.values())
    assert total > 0
    job = total - delta[Bucket.NO_JOB]
    waiting = {b: delta[b] for b in WAITING}
    if name == "idle":
        assert delta[Bucket.NO_JOB] >= 0.9 * total, delta
    elif name == "compute":
        assert delta[Bucket.PRODUCTIVE] >= 0.7 * job, delta
    elif name in EXPECTED_WAIT:
        if res.accuracy < 0.5:
            # the waits are split by the classifier's pressures: where it misreads the scenario, so
            # does the ledger, and that is the classifier's bug to show (its own lab test fails too)
            pytest.xfail(f"the classifier called {name} right in {res.right} of {res.scored} evaluations")
        want = EXPECTED_WAIT[name]
        assert max(waiting, key=waiting.get) == want, delta
        assert waiting[want] >= 0.5 * sum(waiting.values()), delta
    elif name == "checkpoints":
        assert delta[Bucket.CHECKPOINT] > 0, delta
        assert delta[Bucket.PRODUCTIVE] > delta[Bucket.CHECKPOINT], delta
    elif name == "regime change":
        for b in (Bucket.PRODUCTIVE, Bucket.DATA_STORAGE, Bucket.NETWORK):
            assert delta[b] > 0, (b, delta)


def test_lab_table(session: Session) -> None:
    if len(session.rows) < len(SCENARIOS):
        pytest.skip("runs after the scenarios (run the whole file)")
    text = "\n".join(
        [
            "goodput ledger on the scenario lab (share of each scenario's GPU-seconds)",
            *session.lab.describe(),
            "",
            table(session.rows, session.classifier),
        ]
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text + "\n")
    print("\n" + text)
