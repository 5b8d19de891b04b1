"""A toy scheduler, whole in one file: a cluster kept in memory and its backend. Importing this module
(defining the backend) is all it takes for ``[scheduler] kind``, ``kind = "auto"``, the scheduler
action, its status and the alerts' words to know it; the policy, the health gate and the reconcile
loop run on it unchanged. A real one (Kubernetes) talks to its API server where this keeps a dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.config import Config
from agent.scheduler.backend import JobInfo, NodeInfo, SchedulerBackend, SchedulerError

MARK = "toy-scheduler"  # a file of this name in [agent] procfs: the toy runs this node (auto)


@dataclass
class ToyNode:
    cordoned: bool = False
    note: str = ""


@dataclass
class ToyCluster:
    """What a scheduler keeps: its nodes, the running jobs (id -> (name, user, restartable, node)),
    and what it was asked, in order. ``down``: every call fails, as a controller that is away."""

    nodes: dict[str, ToyNode] = field(default_factory=dict)
    jobs: dict[str, tuple[str, str, bool, str]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    down: bool = False

    def call(self, what: str) -> None:
        if self.down:
            raise SchedulerError(f"toy controller away ({what})")
        self.asked.append(what)

    def reset(self, node: str) -> None:
        self.nodes, self.jobs, self.asked, self.down = {node: ToyNode()}, {}, [], False


CLUSTER = ToyCluster()
NODE = "toy-node-1"


class ToyBackend(SchedulerBackend):
    kind = "toy"
    words = ("Toy Scheduler", "玩具调度器")
    order = 900

    @classmethod
    async def detect(cls, cfg: Config) -> bool:
        return (Path(cfg.agent.procfs) / MARK).exists()

    async def own_name(self) -> str:
        CLUSTER.call("whoami")
        return NODE

    async def node(self, name: str) -> NodeInfo:
        CLUSTER.call(f"get {name}")
        n = CLUSTER.nodes[name]
        return NodeInfo(name, "CORDONED" if n.cordoned else "READY", n.cordoned, n.note)

    async def jobs_on(self, node: str) -> list[JobInfo]:
        CLUSTER.call(f"jobs {node}")
        return [
            JobInfo(j, name, user, again) for j, (name, user, again, at) in CLUSTER.jobs.items() if at == node
        ]

    async def drain(self, node: str, reason: str) -> None:
        CLUSTER.call(f"cordon {node}")
        CLUSTER.nodes[node] = ToyNode(True, reason)

    async def resume(self, node: str) -> None:
        CLUSTER.call(f"uncordon {node}")
        CLUSTER.nodes[node] = ToyNode()

    async def requeue(self, job_ids: list[str]) -> None:
        CLUSTER.call(f"requeue {','.join(job_ids)}")
        for j in job_ids:
            CLUSTER.jobs.pop(j)

    async def cancel(self, job_ids: list[str]) -> None:
        CLUSTER.call(f"cancel {','.join(job_ids)}")
        for j in job_ids:
            CLUSTER.jobs.pop(j)
