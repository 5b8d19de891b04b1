"""The words the agent's parts exchange, defined once.

Events, the ledger, the classifier, alerts, config validation and the simulators spell these values;
each is written here only. The members are ``StrEnum``s: they compare equal to, format and serialize
as their plain strings (the control socket's JSON, the request file, the ledger, the metric labels).
"""

from __future__ import annotations

from enum import StrEnum


class Cloud(StrEnum):
    """Who sent a notice; ``drill`` is the agent's own synthetic one. Each other member is a cloud
    declared in ``agent/preemption/clouds/<cloud>.py`` (``agent.preemption.registry``)."""

    ALIBABA = "alibaba"
    AWS = "aws"
    GCP = "gcp"
    AZURE = "azure"
    TENCENT = "tencent"
    DRILL = "drill"


class Setting(StrEnum):
    """Config values that name no member of the vocabulary they stand in for."""

    AUTO = "auto"  # the agent finds out ([preemption] provider: from DMI; [cost] market: from the cloud)
    NONE = "none"  # nothing of the kind ([preemption] provider: watch no metadata service)


class Market(StrEnum):
    """How the node is bought (``InstanceIdentityEvent.market``, ``training_node_market``)."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"


class RequestOutcome(StrEnum):
    """One metadata request (``training_node_metadata_requests_total{outcome}``)."""

    OK = "ok"
    NOT_FOUND = "not_found"  # an answer: the path has nothing now (no notice)
    UNAUTHORIZED = "unauthorized"
    CLIENT_ERROR = "client_error"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    CONNECTION_ERROR = "connection_error"
    BAD_BODY = "bad_body"
    TOKEN_ERROR = "token_error"


ANSWERED = frozenset({RequestOutcome.OK, RequestOutcome.NOT_FOUND})  # the service is up


class Cadence(StrEnum):
    """How often a metadata source is read (``Source.cadence``)."""

    FAST = "fast"  # every [preemption] poll_interval: spot notices
    SLOW = "slow"  # every [preemption] maintenance_interval: maintenance announced hours ahead


class NoticeKind(StrEnum):
    """A cloud notice, normalized across providers (``PreemptionEvent.kind``)."""

    SPOT_TERMINATION = "spot-termination"
    SPOT_STOP = "spot-stop"
    SPOT_HIBERNATE = "spot-hibernate"
    PREEMPT = "preempt"
    TERMINATION = "termination"  # Azure "Terminate": a user- or platform-initiated delete, not spot
    REBALANCE_RECOMMENDATION = "rebalance-recommendation"
    MAINTENANCE_REBOOT = "maintenance-reboot"
    MAINTENANCE_REDEPLOY = "maintenance-redeploy"
    MAINTENANCE_STOP = "maintenance-stop"
    MAINTENANCE_MIGRATE = "maintenance-migrate"
    MAINTENANCE_TERMINATE = "maintenance-terminate"
    MAINTENANCE_FREEZE = "maintenance-freeze"
    MAINTENANCE_RETIREMENT = "maintenance-retirement"
    MAINTENANCE_OTHER = "maintenance-other"

    @property
    def is_spot(self) -> bool:
        return self in SPOT_KINDS


SPOT_KINDS = frozenset(
    {NoticeKind.SPOT_TERMINATION, NoticeKind.SPOT_STOP, NoticeKind.SPOT_HIBERNATE, NoticeKind.PREEMPT}
)


class CheckpointPhase(StrEnum):
    """``CheckpointEvent.phase``: what the checkpoint handshake just did."""

    REQUESTED = "requested"  # the trainers were signalled; an ack is awaited
    COMPLETED = "completed"  # acknowledged before the deadline
    MISSED = "missed"  # no ack (or a late one) by the deadline
    UNREACHABLE = "unreachable"  # targets that could not safely be signalled; request file only
    NO_TARGET = "no-target"  # no training process found; request file only
    ESCALATED = "escalated"  # the final SIGTERM before the deadline went out
    CANCELED = "canceled"  # the cloud withdrew the notice (or a drill stopped waiting)


# the phases after which no ack is awaited (the classifier ends its checkpoint hold)
CHECKPOINT_ENDS = frozenset(
    {
        CheckpointPhase.COMPLETED,
        CheckpointPhase.MISSED,
        CheckpointPhase.CANCELED,
        CheckpointPhase.UNREACHABLE,
        CheckpointPhase.NO_TARGET,
    }
)
# the phases that mean the checkpoint did not (or could not) happen: an operator must know
CHECKPOINT_FAILURES = frozenset(
    {CheckpointPhase.MISSED, CheckpointPhase.UNREACHABLE, CheckpointPhase.NO_TARGET}
)


class EpisodeState(StrEnum):
    """Where one notice's episode stands in the checkpoint ledger (also the request file's ``state``)."""

    SCHEDULED = "scheduled"  # waiting for deadline - checkpoint_budget
    ACTING = "acting"  # signals being sent
    REQUESTED = "requested"  # waiting for the ack
    COMPLETED = "completed"
    MISSED = "missed"
    CANCELED = "canceled"
    DRY_RUN = "dry-run"


OPEN_STATES = frozenset({EpisodeState.SCHEDULED, EpisodeState.ACTING, EpisodeState.REQUESTED})


class Verdict(StrEnum):
    """The classifier's bottleneck verdict."""

    COMPUTE = "compute"
    DATA = "data"
    NETWORK = "network"
    SYNC_WAIT = "sync-wait"
    HOST = "host"  # the GPUs wait on the training process itself: launches, saves, copies
    IDLE = "idle"
    MIXED = "mixed"  # not scored: no class clearly won


SCORED_VERDICTS = tuple(v for v in Verdict if v is not Verdict.MIXED)
QUIET_VERDICTS = frozenset({Verdict.COMPUTE, Verdict.IDLE})  # the healthy states: worth a note, not a page


class DataSubReason(StrEnum):
    """What a ``data`` verdict waits on."""

    STORAGE = "storage"
    CPU = "cpu"
    NETWORK_INPUT = "network-input"  # streamed over the NIC (object storage, FUSE mounts): not a collective


class HostSubReason(StrEnum):
    """What a ``host`` verdict waits on: the training process itself, each a shape declared in
    ``agent/classifier/shapes/<shape>.py``."""

    LAUNCH = "launch"  # the host cannot launch kernels fast enough (no collective to wait in)
    CHECKPOINT = "checkpoint"  # a synchronous save holds the GPUs
    PAGEABLE_COPY = "pageable-copy"  # host-to-device copies from pageable memory
    EVALUATION = "evaluation"  # the trainer's evaluation loop (told by tna_client)


class TrainerSpan(StrEnum):
    """A pause the training process tells the agent of (``tna_client.spans``)."""

    CHECKPOINT = "checkpoint"
    EVALUATION = "evaluation"
    DATA = "data"  # the wait for the next batch between steps


class VerdictReason(StrEnum):
    """The top line of a verdict's reasons in one stable word (``training_node_verdict_info``'s
    ``reason``, the fleet's straggler alert): a few values, so the series do not churn."""

    STORAGE = "storage"  # data: reads at their ceiling
    CPU = "cpu"  # data: the input pipeline's cores
    NETWORK_INPUT = "network-input"  # data: input streamed over the NIC at its ceiling
    LINK = "link"  # network: a NIC or RDMA port at its ceiling while the GPUs wait
    CONGESTION = "congestion"  # network: RDMA congestion signals while the GPUs wait
    PEER = "peer"  # sync-wait: a collective waits for another node
    GPU = "gpu"  # compute: the GPUs are the limit
    DEGRADED_GPU = "degraded-gpu"  # compute or sync-wait: one GPU works while its peers wait for it
    NO_JOB = "no-job"  # idle: no training process
    NO_WORK = "no-work"  # idle: a training process, but neither GPUs nor inputs busy
    LAUNCH = "launch"  # host: kernels too small or launched too slowly, one process, no collective
    CHECKPOINT_SAVE = "checkpoint-save"  # host: the GPUs idle while the trainer saves
    PAGEABLE_COPY = "pageable-copy"  # host: the GPUs idle while pageable memory is copied to them
    EVALUATION = "evaluation"  # host: the trainer's evaluation loop holds the training
    UNCLEAR = "unclear"  # mixed: no class clearly won


class GpuFault(StrEnum):
    """``GpuFaultEvent.fault``."""

    XID = "xid"
    LOST = "lost"
    ECC = "ecc"
    THERMAL_THROTTLE = "thermal-throttle"
    POWER_THROTTLE = "power-throttle"
    PCIE_DEGRADED = "pcie-degraded"  # the PCIe link trained below its max generation or width
    NVLINK_DOWN = "nvlink-down"  # fewer NVLink links active than present
    POWER_LIMIT_LOW = "power-limit-low"  # the enforced power limit below the default
    ECC_CORRECTED_RISING = "ecc-corrected-rising"  # corrected ECC errors faster than [gpu]'s rate
    NVLINK_ERRORS = "nvlink-errors"  # NVLink replays and recoveries faster than [gpu]'s rate
    ROW_REMAP_PENDING = "row-remap-pending"  # retired memory rows wait for a GPU reset to be remapped
    UNRESPONSIVE = "unresponsive"  # an NVML call for the GPU has not returned (a wedged driver)


class AgentPhase(StrEnum):
    """``AgentLifecycleEvent.phase``."""

    STARTED = "started"
    STOPPING = "stopping"


class DeliveryOutcome(StrEnum):
    """What happened to one checkpoint signal (``SignalDelivery.outcome``, the drill report)."""

    SIGNALLED = "signalled"
    NO_HANDLER = "no-handler"  # not sent: it would have killed the job
    IGNORED = "ignored"  # not sent: the process ignores it, so it would have done nothing
    GONE = "gone"  # exited before it could be signalled
    REUSED = "reused"  # the pid now belongs to another process: not sent
    DENIED = "denied"  # EPERM
    UNKNOWN = "unknown"  # its signal masks could not be read: not sent
    DRY_RUN = "dry-run"  # everything checked, nothing sent


class DiscoverKind(StrEnum):
    """How a ``[trainer] discover`` entry finds the training processes (``KIND`` or ``KIND:ARG``)."""

    NVML = "nvml"  # the GPUs' compute processes
    PIDFILE = "pidfile"
    CMDLINE = "cmdline"  # a regex over /proc/<pid>/cmdline
    CGROUP = "cgroup"
    SYSTEMD_UNIT = "systemd-unit"


class HandlerState(StrEnum):
    """What sending the checkpoint signal to a target would do (``targets[].handler`` in the status)."""

    HANDLER = "handler"  # it catches the signal
    NO_HANDLER = "no-handler"  # the default action would kill it
    IGNORED = "ignored"  # it ignores the signal: sending it would do nothing
    HARMLESS = "harmless"  # the signal's default action kills no process
    UNKNOWN = "unknown"  # its signal masks could not be read
    UNCHECKED = "unchecked"  # not looked at: the final SIGTERM is meant to end the process


# the targets that can take the signal; the two after them cannot, however it is sent
SIGNAL_READY = frozenset({HandlerState.HANDLER, HandlerState.HARMLESS})
UNSIGNALABLE = frozenset({HandlerState.NO_HANDLER, HandlerState.IGNORED})


class DrillVerdict(StrEnum):
    """The drill report's ``verdict``: would the measured checkpoint beat the notice."""

    SAFE = "safe"
    WOULD_LOSE_WORK = "would lose work"
    DRY_RUN = "dry run"  # nothing sent, nothing measured


# the targets that did not get the signal and must watch the request file instead
UNREACHABLE_OUTCOMES = frozenset(
    {DeliveryOutcome.NO_HANDLER, DeliveryOutcome.IGNORED, DeliveryOutcome.UNKNOWN, DeliveryOutcome.DENIED}
)


class Severity(StrEnum):
    """How bad an alert is, worst first (``[[alerts.webhooks]] severities``, the ``severity`` label)."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


SEVERITIES = tuple(Severity)  # worst first


class AlertKind(StrEnum):
    """What an alert is about (``[[alerts.webhooks]] events``, ``Message.kind``)."""

    PREEMPTION = "preemption"
    CHECKPOINT = "checkpoint"
    VERDICT = "verdict"
    GPU_FAULT = "gpu_fault"
    COLLECTOR_FAILING = "collector_failing"
    AGENT = "agent"
    GOODPUT = "goodput"
    SCHEDULER = "scheduler"


class ChannelType(StrEnum):
    """A chat or webhook service an alert channel talks to (``[[alerts.webhooks]] type``); each one
    is declared in ``agent/alerts/services/<service>.py``."""

    DINGTALK = "dingtalk"
    FEISHU = "feishu"
    WECOM = "wecom"
    SLACK = "slack"
    WEBHOOK = "webhook"


class Style(StrEnum):
    """How a channel lays a message out (``[[alerts.webhooks]] style``; which ones a service takes is
    its ``styles``, declared in ``agent/alerts/services/<service>.py``)."""

    MARKDOWN = "markdown"
    CARD = "card"  # DingTalk actionCard, Feishu interactive card
    TEXT = "text"
    BLOCKS = "blocks"  # Slack Block Kit
    ALERTMANAGER = "alertmanager"  # Alertmanager's webhook payload


class Language(StrEnum):
    """The languages alerts are written in (``[alerts] language``)."""

    EN = "en"
    ZH_CN = "zh-CN"


class LogFormat(StrEnum):
    """``[agent] log_format``."""

    JSON = "json"
    CONSOLE = "console"
    AUTO = "auto"  # console on a terminal, JSON otherwise


class TcpStatus(StrEnum):
    """``[http] tcp_status``: what /api/v1/status serves on the TCP port."""

    REDACTED = "redacted"  # the network view (an allowlist of fields)
    OFF = "off"


class Bucket(StrEnum):
    """Where the goodput ledger books a GPU-second (docs/goodput.md)."""

    PRODUCTIVE = "productive"
    DATA_STORAGE = "data-storage"
    DATA_CPU = "data-cpu"
    DATA_NETWORK = "data-network"  # input streamed over the NIC (DataSubReason.NETWORK_INPUT)
    NETWORK = "network"
    SYNC_WAIT = "sync-wait"
    IDLE = "idle"
    NO_JOB = "no-job"
    CHECKPOINT = "checkpoint"  # the agent's checkpoints and the trainer's own synchronous saves
    HOST_LAUNCH = "host-launch"  # the host could not launch kernels fast enough
    HOST_COPY = "host-copy"  # copies from pageable host memory held the GPUs
    EVALUATION = "evaluation"  # the trainer's evaluation loop, as tna_client told it
    LOST = "lost-to-preemption"
    STARTUP = "startup"


# [scheduler]: kind, on_reclaim, and training_node_scheduler_actions_total{action, outcome}
class SchedulerKind(StrEnum):
    NONE = "none"
    SLURM = "slurm"
    AUTO = "auto"  # Slurm when scontrol is on PATH and slurmd runs on this node


class OnReclaim(StrEnum):
    REQUEUE = "requeue"
    NONE = "none"
    CANCEL = "cancel"


class SchedulerAction(StrEnum):
    DRAIN = "drain"
    RESUME = "resume"
    REQUEUE = "requeue"
    CANCEL = "cancel"


class ActionOutcome(StrEnum):
    OK = "ok"
    FAILED = "failed"  # scontrol failed, timed out or slurmctld did not answer (retried)
    DRY_RUN = "dry-run"  # said, not done ([scheduler] dry_run or a drill)
    REFUSED = "refused"  # a job that is not requeueable, left alone
    FOREIGN = "foreign"  # the node carries a drain the agent did not set: left untouched


class SchedulerProblem(StrEnum):
    """``SchedulerEvent.problem``: what an operator must hear from the scheduler action."""

    NOT_REQUEUEABLE = "not-requeueable"  # jobs that end with the node: named, left alone
    FAILING = "failing"  # Slurm does not do what the agent asks (scontrol missing, slow, failing)
