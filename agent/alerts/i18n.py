"""Every word an alert uses, in English and Simplified Chinese.

Reasons and hints come from the classifier as they are; only the agent's own words are translated.
"""

from __future__ import annotations

from agent.core.vocabulary import Bucket, Cloud, Language, NoticeKind, Verdict
from agent.preemption import registry

TEXT: dict[str, tuple[str, str]] = {
    # field labels
    "node": ("Node", "节点"),
    "gpus": ("GPUs", "GPU"),
    "notice": ("Notice", "通知类型"),
    "cloud": ("Cloud", "云平台"),
    "deadline": ("Deadline", "截止时间"),
    "time_left": ("Time left", "剩余时间"),
    "verdict": ("Verdict", "瓶颈判定"),
    "since": ("Since", "开始时间"),
    "lasted": ("Lasted", "持续时长"),
    "scores": ("Scores", "评分"),
    "hint": ("Hint", "建议"),
    "reasons": ("Reasons", "依据"),
    "detail": ("Detail", "详情"),
    "trainer": ("Trainer", "训练进程"),
    "jobs_on_node": ("Jobs on the node", "节点上的作业"),
    "job_lose": ("will lose {hours} GPU-h", "将损失 {hours} GPU 时"),
    "took": ("Took", "耗时"),
    "error": ("Error", "错误"),
    "collector": ("Collector", "采集器"),
    "jobs": ("Jobs", "作业"),
    "version": ("Version", "版本"),
    "event_id": ("Event", "事件"),
    "pid": ("PID", "进程号"),
    "channel": ("Channel", "通道"),
    # values and phrases
    "no_gpus": ("none visible", "未检测到"),
    "no_deadline": ("none given: act now", "云厂商未给出，请立即处理"),
    "left_at_notice": ("{left} (when the notice arrived)", "{left}（收到通知时）"),
    "drill": ("[DRILL] ", "【演练】"),
    "resolved": ("[RESOLVED] ", "【已恢复】"),
    "reminder": ("Still active since {since}.", "仍未恢复，开始于 {since}。"),
    "digest_more": ("… and {n} more", "…… 另有 {n} 条"),
    "digest_count": ("{n} alerts", "{n} 条告警"),
    "open_link": ("Open dashboard", "查看详情"),
    "test_line": ("If you can read this, the channel works.", "收到此消息说明通道配置正确。"),
    # titles
    "t.preemption": ("{kind} in {left} on {host}", "{host} {kind}，剩余 {left}"),
    "t.preemption_now": ("{kind} now on {host}", "{host} {kind}，立即生效"),
    "t.preemption_withdrawn": ("{kind} withdrawn on {host}", "{host} {kind}通知已撤回"),
    "t.checkpoint.requested": ("Checkpoint requested on {host}", "{host} 已请求训练进程保存检查点"),
    "t.checkpoint.completed": (
        "Checkpoint completed in {took} on {host}",
        "{host} 检查点已完成，耗时 {took}",
    ),
    "t.checkpoint.missed": ("Checkpoint missed the deadline on {host}", "{host} 检查点未能在截止前完成"),
    "t.checkpoint.unreachable": ("Trainer can't be signalled on {host}", "{host} 无法通知训练进程"),
    "t.checkpoint.no-target": ("No training process to signal on {host}", "{host} 未找到可通知的训练进程"),
    "t.checkpoint.canceled": ("Checkpoint request canceled on {host}", "{host} 检查点请求已取消"),
    "t.checkpoint.other": ("Checkpoint {phase} on {host}", "{host} 检查点：{phase}"),
    "t.verdict": ("{verdict} on {host}", "{host} {verdict}"),
    "t.verdict_cleared": ("{verdict} cleared on {host}", "{host} {verdict}已解除"),
    "t.gpu.xid": ("Xid {xid} on GPU {gpu} of {host}", "{host} GPU {gpu} 出现 Xid {xid}"),
    "t.gpu.lost": ("GPU {gpu} lost on {host}", "{host} GPU {gpu} 掉卡"),
    "t.gpu.ecc": (
        "Uncorrectable ECC errors on GPU {gpu} of {host}",
        "{host} GPU {gpu} 出现不可纠正 ECC 错误",
    ),
    "t.gpu.thermal-throttle": ("GPU {gpu} thermal throttling on {host}", "{host} GPU {gpu} 过热降频"),
    "t.gpu.power-throttle": ("GPU {gpu} power throttling on {host}", "{host} GPU {gpu} 功耗封顶降频"),
    "t.gpu.pcie-degraded": ("GPU {gpu} PCIe link trained down on {host}", "{host} GPU {gpu} PCIe 链路降级"),
    "t.gpu.nvlink-down": ("GPU {gpu} NVLink links down on {host}", "{host} GPU {gpu} NVLink 链路断开"),
    "t.gpu.power-limit-low": (
        "GPU {gpu} power limit below its default on {host}",
        "{host} GPU {gpu} 功耗上限低于默认值",
    ),
    "t.gpu.row-remap-pending": (
        "GPU {gpu} of {host} waits for a reset to remap memory rows",
        "{host} GPU {gpu} 有待重置生效的显存行重映射",
    ),
    "t.gpu.ecc-corrected-rising": (
        "Corrected ECC errors rising on GPU {gpu} of {host}",
        "{host} GPU {gpu} 可纠正 ECC 错误持续增加",
    ),
    "t.gpu.nvlink-errors": (
        "NVLink replays and recoveries rising on GPU {gpu} of {host}",
        "{host} GPU {gpu} NVLink 重传与链路恢复持续增加",
    ),
    "t.gpu.unresponsive": (
        "GPU {gpu} does not answer NVML on {host}",
        "{host} GPU {gpu} 不响应 NVML 调用",
    ),
    "t.gpu.other": ("GPU {gpu} {fault} on {host}", "{host} GPU {gpu} {fault}"),
    "t.collector": (
        "Collector {name} failing for {took} on {host}",
        "{host} 采集器 {name} 已连续失败 {took}",
    ),
    "t.collector_cleared": ("Collector {name} recovered on {host}", "{host} 采集器 {name} 已恢复"),
    "t.scheduler.not-requeueable": (
        "{count} job(s) on {host} cannot be requeued: they end with the node",
        "{host} 上 {count} 个作业无法重新排队，将随节点结束",
    ),
    "t.scheduler.failing": (
        "{scheduler} does not answer the agent on {host}",
        "{host} 的 {scheduler} 未响应节点代理",
    ),
    "t.scheduler.failing_cleared": (
        "{scheduler} answers the agent again on {host}",
        "{host} 的 {scheduler} 已恢复响应",
    ),
    "t.scheduler.other": ("Scheduler: {problem} on {host}", "{host} 调度器：{problem}"),
    "t.agent.started": ("Agent started on {host}", "{host} 节点代理已启动"),
    "t.agent.stopping": ("Agent stopping on {host}", "{host} 节点代理正在停止"),
    "t.agent.other": ("Agent {phase} on {host}", "{host} 节点代理：{phase}"),
    "t.test": ("Test alert from {host}", "{host} 测试告警"),
    "t.digest": ("{n} alerts on {host}", "{host} 告警汇总：共 {n} 条"),
    "t.goodput": ("Goodput {ratio} on {host} over {period}", "{host} 有效算力占比 {ratio}（{period}）"),
    "t.job_advice": (
        "Job {job} ended on {host}: what to rent next time",
        "{host} 作业 {job} 已结束：下次租用建议",
    ),
    "binds": ("Binds", "瓶颈"),
    # the goodput digest
    "goodput": ("Goodput", "有效算力占比"),
    "gpu_hours": ("GPU-hours", "GPU 时"),
    "spent": ("Spent", "花费"),
    "wasted": ("Wasted", "浪费"),
    "top_waste": ("Most lost to", "最大损耗"),
    "bucket_line": ("{bucket}: {hours} GPU-h ({share})", "{bucket}：{hours} GPU 时（{share}）"),
}

BUCKETS: dict[str, tuple[str, str]] = {
    Bucket.PRODUCTIVE: ("productive", "有效计算"),
    Bucket.DATA_STORAGE: ("waiting on storage", "等待存储"),
    Bucket.DATA_CPU: ("waiting on data loading (CPU)", "等待数据加载（CPU）"),
    Bucket.DATA_NETWORK: ("waiting on data streamed over the network", "等待网络传输的训练数据"),
    Bucket.NETWORK: ("waiting on the network", "等待网络"),
    Bucket.SYNC_WAIT: ("waiting on other ranks", "等待其他节点同步"),
    Bucket.IDLE: ("idle with a job", "有任务但空闲"),
    Bucket.NO_JOB: ("no job", "无训练任务"),
    Bucket.CHECKPOINT: ("checkpointing", "保存检查点"),
    Bucket.LOST: ("lost to preemption", "因抢占丢失"),
    Bucket.STARTUP: ("starting up", "任务启动"),
}

NOTICE_KINDS: dict[str, tuple[str, str]] = {
    NoticeKind.SPOT_TERMINATION: ("Spot termination", "抢占式实例回收"),
    NoticeKind.SPOT_STOP: ("Spot stop", "抢占式实例停机"),
    NoticeKind.SPOT_HIBERNATE: ("Spot hibernation", "抢占式实例休眠"),
    NoticeKind.PREEMPT: ("Preemption", "实例抢占"),
    NoticeKind.REBALANCE_RECOMMENDATION: ("Rebalance recommendation", "实例再平衡建议"),
    NoticeKind.MAINTENANCE_REBOOT: ("Maintenance reboot", "计划维护：重启"),
    NoticeKind.MAINTENANCE_REDEPLOY: ("Maintenance redeploy", "计划维护：重新部署"),
    NoticeKind.MAINTENANCE_STOP: ("Maintenance stop", "计划维护：停机"),
    NoticeKind.MAINTENANCE_MIGRATE: ("Maintenance live migration", "计划维护：热迁移"),
    NoticeKind.MAINTENANCE_TERMINATE: ("Maintenance termination", "计划维护：释放实例"),
    NoticeKind.MAINTENANCE_FREEZE: ("Maintenance freeze", "计划维护：冻结"),
    NoticeKind.MAINTENANCE_RETIREMENT: ("Maintenance retirement", "计划维护：实例退役"),
    NoticeKind.MAINTENANCE_OTHER: ("Maintenance", "计划维护"),
    NoticeKind.TERMINATION: ("Termination", "实例终止"),
}

DRILL_WORDS = ("drill", "演练")  # the agent's own notices; each cloud's words are in its declaration
SCHEDULER_WORDS = ("The scheduler", "调度器")  # each backend's own words are in its declaration

VERDICTS: dict[str, tuple[str, str]] = {
    Verdict.COMPUTE: ("Compute-bound", "计算瓶颈"),
    Verdict.DATA: ("Data-bound", "数据瓶颈"),
    Verdict.NETWORK: ("Network-bound", "网络瓶颈"),
    Verdict.SYNC_WAIT: ("Waiting on sync", "同步等待"),
    Verdict.HOST: ("Host-bound", "主机瓶颈"),
    Verdict.IDLE: ("GPUs idle", "GPU 空闲"),
    Verdict.MIXED: ("Mixed bottleneck", "混合瓶颈"),
}


def _pick(pair: tuple[str, str], lang: str) -> str:
    return pair[1] if lang == Language.ZH_CN else pair[0]


def t(key: str, lang: str, **kw: object) -> str:
    return _pick(TEXT[key], lang).format(**kw)


def notice_kind(kind: str, lang: str) -> str:
    return _pick(NOTICE_KINDS[kind], lang) if kind in NOTICE_KINDS else kind


def cloud(provider: str, lang: str) -> str:
    if provider == Cloud.DRILL:
        return _pick(DRILL_WORDS, lang)
    spec = registry.find(provider)
    return _pick(spec.words, lang) if spec is not None else provider


def scheduler(words: tuple[str, str] | None, lang: str) -> str:
    """A scheduler backend's name, as its declaration gives it (the event carries it: the alerts
    import no backend), or the generic word."""
    return _pick(words or SCHEDULER_WORDS, lang)


def bucket_name(bucket: str, lang: str) -> str:
    return _pick(BUCKETS[bucket], lang) if bucket in BUCKETS else bucket


def verdict_name(verdict: str, lang: str) -> str:
    return _pick(VERDICTS[verdict], lang) if verdict in VERDICTS else verdict


def duration(seconds: float, lang: str) -> str:
    """287 -> ``4m 47s`` / ``4分47秒``; two units at most, rounded to the second."""
    s = max(0, round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    zh = lang == Language.ZH_CN
    units = ("小时", "分", "秒") if zh else ("h", "m", "s")
    parts = [(h, units[0]), (m, units[1]), (sec, units[2])]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    shown = parts[:2]
    if len(shown) == 2 and shown[1][0] == 0:
        shown = shown[:1]
    return ("" if zh else " ").join(f"{n}{u}" for n, u in shown)
