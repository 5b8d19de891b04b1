"""The provider class for each cloud name accepted by ``[preemption] provider``."""

from __future__ import annotations

from agent.preemption.alibaba import AlibabaProvider
from agent.preemption.aws import AwsProvider
from agent.preemption.azure import AzureProvider
from agent.preemption.gcp import GcpProvider
from agent.preemption.provider import Provider
from agent.preemption.tencent import TencentProvider

PROVIDERS: dict[str, type[Provider]] = {
    cls.name: cls for cls in (AlibabaProvider, AwsProvider, GcpProvider, AzureProvider, TencentProvider)
}
