"""Cloud preemption and maintenance notices: one module per cloud (``clouds/``: alibaba, aws, gcp,
azure, tencent, each declared once in ``registry``) turning its metadata service's answers into
:class:`agent.core.events.PreemptionEvent`, the watcher component that polls them, and DMI-based
cloud detection."""
