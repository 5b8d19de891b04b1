"""One list per thing: each declared cloud (and chat channel) is seen by every reader, and the
vocabulary names exactly the declared ones. A failure names the reader that misses the piece."""

from __future__ import annotations

import pytest
from declarations import channel_gaps, cloud_gaps, scheduler_gaps

from agent.alerts.services import channel_types
from agent.core.vocabulary import ChannelType, Cloud, SchedulerKind
from agent.preemption import registry
from agent.scheduler import backend


@pytest.mark.parametrize("spec", registry.clouds(), ids=lambda s: s.name)
def test_every_reader_sees_the_cloud(spec):
    assert cloud_gaps(spec) == []


def test_the_vocabulary_names_the_declared_clouds():
    built_in = {s.name for s in registry.clouds() if s.provider.__module__.startswith("agent.")}
    words = {c for c in Cloud if c is not Cloud.DRILL}
    assert words - built_in == set(), "a Cloud member with no agent/preemption/clouds/<cloud>.py"
    assert built_in - words == set(), "a declared cloud that agent/core/vocabulary.py's Cloud lacks"
    assert len(built_in) == 5 and all(isinstance(s.name, Cloud) for s in registry.clouds())


def test_detection_keeps_the_declared_order_and_evidence():
    from agent.preemption.detect import classify
    from agent.preemption.dmi import Dmi

    # AWS's rule reads two files; the evidence names both, as it did before the declarations
    found = classify(Dmi(sys_vendor="Amazon EC2", bios_version="4.11.amazon"))
    assert (found.provider, found.evidence) == (
        Cloud.AWS,
        "DMI sys_vendor='Amazon EC2' bios_version='4.11.amazon'",
    )
    assert classify(Dmi(sys_vendor="Microsoft Corporation")).provider == "none"  # Hyper-V, not Azure


@pytest.mark.parametrize("cls", channel_types().values(), ids=lambda c: c.type)
def test_every_reader_sees_the_channel(cls):
    assert channel_gaps(cls) == []


def test_the_vocabulary_names_the_declared_channels():
    assert set(ChannelType) == set(channel_types()), "a ChannelType with no agent/alerts/services module"


def test_a_channel_that_forgets_a_piece_is_refused_when_defined():
    from agent.alerts.services.base import Channel

    with pytest.raises(TypeError, match=r"channel Half \(slack\) does not declare rates, example_url, judge"):

        class Half(Channel):
            type = ChannelType.SLACK
            styles = ()

            def build(self, msg):
                raise NotImplementedError

    assert channel_types()[ChannelType.SLACK].__name__ == "Slack"  # the refused class replaced nothing


@pytest.mark.parametrize("cls", backend.backends(), ids=lambda c: c.kind)
def test_every_reader_sees_the_scheduler_backend(cls):
    assert scheduler_gaps(cls) == []


def test_the_vocabulary_names_the_declared_scheduler_backends():
    built_in = {c.kind for c in backend.backends() if c.__module__.startswith("agent.")}
    words = set(SchedulerKind) - {SchedulerKind.NONE, SchedulerKind.AUTO}
    assert built_in == words == {SchedulerKind.SLURM}, "a SchedulerKind with no backends/<kind>.py, or back"
