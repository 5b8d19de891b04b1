"""The demo's input-bound phase: why the agent exists, before the spot handshake.

The toy trainer turns into a ``num_workers=0`` job (it decodes every batch in its own process, real
CPU work) while the demo shows its fake GPUs starved. Nothing tells the agent: its classifier must
find ``data`` (``cpu``) from what it measures (the trainer's schedstat, the GPUs' utilization, power
and SM activity), and ``compute`` again once the trainer is fed by workers again. The screen shows
the verdict as the agent states it: its reasons and its hint.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agent.core.vocabulary import DataSubReason, Verdict
from agent.devtools.demo_screen import DemoFailed, Pace, Screen, telemetry_line

Status = Callable[[], Awaitable[dict[str, Any]]]
Advice = Callable[[float], Awaitable[dict[str, Any]]]  # the agent's advice over the last N seconds
ADVICE_FROM = 2.0  # seconds of a phase booked before its advice is asked (the ledger's slots are 1 s)
# The demo's prices per instance-hour, written into its agent's config ([cost] for the node of four
# fake H100s, [advice] prices for three Alibaba candidates): made up for the story, no cloud's price.
DEMO_NODE_PRICE = 260.0
DEMO_PRICES = {"ecs.gn7e-c16g1.16xlarge": 104.0, "ecs.gn8v-4x.12xlarge": 86.0, "ecs.gn8is-4x.16xlarge": 52.0}


def classifier_config(pace: Pace) -> str:
    """The demo agent's [classifier]: a window of seconds (a node's default is a minute), evaluated
    every second, two confirmations, so that each verdict turns while one watches."""
    return (
        f'[classifier]\nwindow = "{pace.window:g}s"\nevaluate_every = "1s"\nconfirmations = 2\n'
        'warmup = "2s"\nmin_window_fill = 0.5\n'
    )


def advice_config() -> str:
    """The demo agent's [cost] and [advice]: its made-up prices, and ledger slots of a second so
    that the advice can be asked about the last seconds (a phase) rather than the whole run."""
    prices = ", ".join(f'"{k}" = {v}' for k, v in DEMO_PRICES.items())
    return (
        f'[goodput]\nresolution = "1s"\n[cost]\ninstance_hour_price = {DEMO_NODE_PRICE}\n'
        f"[advice]\nprices = {{ {prices} }}\n"
    )


def tell_trainer(mode_file: Path, decode: bool) -> None:
    """The demo trainer's --mode-file: it decodes every batch itself while the file says so."""
    tmp = mode_file.with_suffix(".tmp")
    tmp.write_text("decode" if decode else "train")
    os.replace(tmp, mode_file)  # the trainer never reads half a word


async def input_bound(
    screen: Screen, pace: Pace, status: Status, decode: Callable[[bool], None], advice: Advice | None = None
) -> None:
    """``decode(True)`` makes the trainer input-bound (and the GPUs starved), ``decode(False)`` undoes it;
    ``advice`` (the agent's over the last window) is shown in each phase."""
    s = screen
    await until(s, pace, status, Verdict.COMPUTE, "while it trains")
    s.say("demo", "now the job turns input-bound: the trainer decodes every batch itself (num_workers=0)")
    s.say("demo", "nobody tells the agent; the GPUs just starve while the trainer's CPU works")
    decode(True)
    switched = time.monotonic()
    await until(s, pace, status, Verdict.DATA, "while the trainer decodes", DataSubReason.CPU)
    named = time.monotonic()  # the agent has seen the phase: every second from here on is in it
    # the verdict turns while the window still holds the last seconds of training: its reasons read
    # plainer once the window holds only the input-bound job
    await asyncio.sleep(max(0.0, switched + pace.window + 1.0 - time.monotonic()))
    cl = await until(s, pace, status, Verdict.DATA, "while the trainer decodes", DataSubReason.CPU)
    for line in cl["lines"]:
        if not line.startswith("GPU health"):
            s.say("agent", line)
    if advice is not None:
        await show_advice(s, pace, advice, "input", named)
    await asyncio.sleep(pace.data_seconds)  # time to read it
    s.say("demo", "then the input is fixed (more workers, or cheaper decoding): batches are ready in time")
    decode(False)
    cl = await until(s, pace, status, Verdict.COMPUTE, "once the trainer is fed again")
    named = time.monotonic()
    s.say("agent", cl["lines"][0])
    if advice is not None:
        await show_advice(s, pace, advice, "gpu", named)


async def show_advice(s: Screen, pace: Pace, advice: Advice, binds: str, named: float) -> None:
    """The agent's instance advice over the phase, from ``named`` (when the agent's verdict named it,
    monotonic) and at most a window back, once it sees what binds it (at most ``verdict_wait``; the
    demo goes on without it). A window back from now may reach the seconds of the switch: under load
    it booked 2 s of work and 2 s of pageable copies into an input-bound phase, and no cheaper card
    did as well."""
    await asyncio.sleep(max(0.0, named + ADVICE_FROM - time.monotonic()))
    deadline = time.monotonic() + pace.verdict_wait

    async def ask() -> dict[str, Any]:
        return await advice(min(pace.window, time.monotonic() - named))

    a = await ask()
    while a.get("binds") != binds and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        a = await ask()
    for line in a.get("lines") or []:
        s.say("agent", f"advice: {line}")


async def until(
    s: Screen, pace: Pace, status: Status, want: str, when: str, sub: str | None = None
) -> dict[str, Any]:
    """The classifier's status once its verdict is ``want`` (``sub``), showing the node meanwhile;
    DemoFailed after ``pace.verdict_wait``."""
    start = time.monotonic()
    shown = 0.0
    cl: dict[str, Any] = {}
    while True:
        st = await status()
        cl = st.get("classifier") or {}
        if cl.get("verdict") == want and (sub is None or cl.get("sub_reason") == sub):
            return cl
        now = time.monotonic()
        if now - start > pace.verdict_wait:
            said = (cl.get("lines") or ["no verdict"])[0]
            raise DemoFailed(
                f"the agent did not call the node {want}{'/' + sub if sub else ''} {when} within "
                f"{pace.verdict_wait:.0f} s ({said}; the last window voted {cl.get('vote')})"
            )
        if now - shown >= 2.0:
            shown = now
            s.say("node", telemetry_line(st))
        await asyncio.sleep(0.25)
