"""Cloud preemption and maintenance notices: one module per cloud (alibaba, aws, gcp, azure, tencent)
turning its metadata service's answers into :class:`agent.core.events.PreemptionEvent`, the watcher
component that polls them, DMI-based cloud detection, and the metadata simulator."""
