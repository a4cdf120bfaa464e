"""Catalog freshness: every live session learns of catalog changes without reconnecting.

Health changes, a backend's own re-listing and the capability poller all end
in one catalog snapshot; changes reach sessions through the debouncer (first
change at once, bursts coalesced per `[freshness] debounce`), and each
session is told only what it has not seen. Observers are Python SDK sessions
that record every notification they receive.

Counting "at most N notifications" needs a quiet period after the last
expected one: the tests wait one debounce window plus a margin before
counting, and never assert on how long anything took.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession

from harness import DemoHttp, Gateways, Procs, Vigil, demo_stdio_args, free_port, http_backend, stdio_backend
from support import (
    DEMO_TOOLS,
    ControlApi,
    Inbox,
    call_error,
    call_text,
    http_session,
    is_tools_list_changed,
    is_unavailable,
    list_all,
    prefixed,
    tool_names,
    wait_for_tools,
    write_tools_file,
)

pytestmark = pytest.mark.anyio

#: Quick reconnects of remote backends, so recovery does not wait on backoff.
QUICK_RESTART = {"base": "100ms", "max": "300ms", "jitter": 0.0}
#: How often at most a backend that keeps changing its lists is heard
#: inside the debounce window (`freshness/debounce.rs`, CONTENT_GAP).
CONTENT_GAP_SECONDS = 1.0


@asynccontextmanager
async def observers(url: str, n: int) -> AsyncIterator[list[tuple[ClientSession, Inbox]]]:
    """`n` SDK sessions on `url`, each recording its notifications."""
    async with AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            inbox = Inbox()
            session = await stack.enter_async_context(http_session(url, message_handler=inbox))
            out.append((session, inbox))
        yield out


def changes(inbox: Inbox) -> int:
    return len(inbox.matching(is_tools_list_changed))


async def quiet(seconds: float) -> None:
    """Lets a debounce window (and its trailing delivery) pass before counting."""
    await anyio.sleep(seconds)


async def test_session_opened_while_a_backend_is_down_hears_of_its_recovery(
    vigil: Gateways, demo_http: Callable[..., DemoHttp]
) -> None:
    port = free_port()
    gw = vigil(
        [http_backend("beta", f"http://127.0.0.1:{port}/mcp")],
        health={"interval": "500ms", "timeout": "400ms"},
        restart=QUICK_RESTART,
        freshness={"debounce": "300ms"},
        startup_timeout="1s",
    )
    async with observers(gw.url, 1) as [(session, inbox)]:
        assert not (await tool_names(session)) & prefixed("beta", DEMO_TOOLS)
        assert changes(inbox) == 0

        demo_http("beta", port=port)

        await inbox.wait_for(is_tools_list_changed, "tools/list_changed after beta recovered")
        assert prefixed("beta", DEMO_TOOLS) <= await tool_names(session)
        assert await call_text(session, "beta__echo", {"text": "back"}) == "back"


async def test_a_failed_backend_leaves_every_session_with_one_notification(
    vigil: Gateways, demo_http: Callable[..., DemoHttp], demo_bin: Path
) -> None:
    beta = demo_http("beta")
    # Long enough that five failures noticed on a busy machine fall in one window.
    window = 2.0
    gw = vigil(
        [http_backend("beta", beta.url), stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))],
        restart={"base": "30s"},  # beta stays down for the whole test
        freshness={"debounce": f"{window}s"},
    )
    async with observers(gw.url, 3) as sessions:
        for session, _ in sessions:
            await wait_for_tools(session, prefixed("beta", DEMO_TOOLS))
        before = [changes(inbox) for _, inbox in sessions]

        beta.proc.kill()

        for (session, inbox), seen in zip(sessions, before, strict=True):
            await inbox.wait_for(is_tools_list_changed, "tools/list_changed after beta failed", count=seen + 1)
            listed = await tool_names(session)
            assert not listed & prefixed("beta", DEMO_TOOLS), sorted(listed)
            assert prefixed("alpha", DEMO_TOOLS) <= listed
            err = await call_error(session, "beta__echo", {"text": "x"})
            assert is_unavailable(err, "beta"), err
        await quiet(window * 3)
        after = [changes(inbox) - seen for (_, inbox), seen in zip(sessions, before, strict=True)]
        assert after == [1, 1, 1], f"notifications per session after the failure: {after}"


async def test_five_backends_failing_together_make_at_most_two_notifications(
    vigil: Gateways, procs: Procs, demo_bin: Path
) -> None:
    """Five endpoints of one backend process: killing it takes them all down at once.

    Each supervisor notices on its own, so the five failures reach the
    gateway a few milliseconds apart: the first is delivered at once (the
    leading edge), the others within the window are coalesced into one
    trailing delivery. Five failures, at most two notifications per session.
    """
    port = free_port()
    host = procs.start(
        "demo-five",
        [demo_bin, "--transport", "http", "--listen", f"127.0.0.1:{port}", "--endpoints", "5", "--name", "five"],
    )
    from harness import wait_http

    wait_http(f"http://127.0.0.1:{port}/mcp/4", host, "the five endpoints")
    # Long enough that five failures noticed on a busy machine fall in one window.
    window = 2.0
    gw = vigil(
        [http_backend(f"b{i}", f"http://127.0.0.1:{port}/mcp/{i}") for i in range(5)],
        restart={"base": "30s"},
        freshness={"debounce": f"{window}s"},
    )
    async with observers(gw.url, 2) as sessions:
        for session, _ in sessions:
            await wait_for_tools(session, set().union(*(prefixed(f"b{i}", DEMO_TOOLS) for i in range(5))))
        before = [changes(inbox) for _, inbox in sessions]

        host.kill()

        for session, _ in sessions:
            await wait_for_tools(session, set(), absent=prefixed("b0", DEMO_TOOLS) | prefixed("b4", DEMO_TOOLS))
        await quiet(window * 3)
        after = [changes(inbox) - seen for (_, inbox), seen in zip(sessions, before, strict=True)]
        assert all(1 <= n <= 2 for n in after), f"notifications per session when five backends failed together: {after}"


async def test_twenty_changes_in_one_window_are_heard_at_most_once_a_second(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    """A backend that changes its tools 20 times within a debounce window
    is heard at once, then at most once per second while it goes on
    (CONTENT_GAP), and its last change always: never 20 notifications."""
    tools_file = tmp_path / "alpha-tools.json"
    write_tools_file(tools_file, [], notify=True)
    window = 3.0
    gw = vigil(
        [stdio_backend("alpha", demo_bin, demo_stdio_args("alpha", tools_file))],
        freshness={"debounce": f"{window}s"},
    )
    async with observers(gw.url, 2) as sessions:
        for session, _ in sessions:
            await wait_for_tools(session, prefixed("alpha", DEMO_TOOLS))
        await quiet(window)  # start-up changes are out of the window
        before = [changes(inbox) for _, inbox in sessions]

        # alpha flaps its tool set 20 times (each with its own list_changed).
        began = time.monotonic()
        for i in range(20):
            write_tools_file(tools_file, [{"name": f"flap_{i}"}], notify=True)
            await anyio.sleep(0.05)

        final = "alpha__flap_19"
        for session, _ in sessions:
            await wait_for_tools(session, {final}, absent={"alpha__flap_0", "alpha__flap_18"})
        lasted = time.monotonic() - began
        await quiet(window + 1)
        after = [changes(inbox) - seen for (_, inbox), seen in zip(sessions, before, strict=True)]
        # The leading one, one per second of flapping, the trailing one.
        most = 2 + int(lasted / CONTENT_GAP_SECONDS)
        assert all(1 <= n <= most for n in after), f"notifications per session for 20 changes in {lasted:.1f}s: {after}"
        assert await call_text(sessions[0][0], final, {"n": 1}) == 'flap_19: {"n":1}'


async def test_identical_relisting_and_degraded_send_nothing(vigil: Gateways, demo_bin: Path, tmp_path: Path) -> None:
    tools_file = tmp_path / "alpha-tools.json"
    write_tools_file(tools_file, [{"name": "steady"}], notify=True)
    gw = vigil(
        [stdio_backend("alpha", demo_bin, demo_stdio_args("alpha", tools_file))],
        # Every probe also calls `fail`, whose error result makes alpha degraded.
        health={"interval": "300ms", "timeout": "300ms"},
        freshness={"debounce": "100ms"},
        api={},
    )
    api = ControlApi(gw.api_base)
    async with observers(gw.url, 1) as [(session, inbox)]:
        await wait_for_tools(session, {"alpha__steady"})
        await quiet(0.5)
        before = changes(inbox)

        # The same tools again, announced: Vigil re-lists and finds nothing new.
        for _ in range(3):
            write_tools_file(tools_file, [{"name": "steady"}], notify=True)
            await anyio.sleep(0.3)
        await quiet(1.0)
        assert changes(inbox) == before, "an identical re-listing was announced"

        # Running → degraded (frozen backend: the probe times out once) → running.
        [pid] = [p for p in _demo_pids(gw, demo_bin)]
        os.kill(pid, signal.SIGSTOP)
        try:
            await api.wait_state("alpha", "degraded")
        finally:
            os.kill(pid, signal.SIGCONT)
        await api.wait_state("alpha", "running")
        await quiet(0.5)
        assert changes(inbox) == before, "running ⇄ degraded changed nothing a client sees"


def _demo_pids(gw: Vigil, demo_bin: Path) -> list[int]:
    from harness import demo_pids

    return demo_pids(gw.proc.pid, "alpha", demo_bin)


async def test_the_poller_notices_a_silent_redeploy(
    vigil: Gateways, demo_http: Callable[..., DemoHttp], tmp_path: Path
) -> None:
    """beta changes its tools without list_changed; the poller finds it within its interval."""
    tools_file = tmp_path / "beta-tools.json"
    write_tools_file(tools_file, [{"name": "old_tool"}], notify=False)
    beta = demo_http("beta", tools_file=tools_file)
    gw = vigil([http_backend("beta", beta.url)], env={"VIGIL_POLL_INTERVAL": "1s"})
    async with observers(gw.url, 1) as [(session, inbox)]:
        await wait_for_tools(session, {"beta__old_tool"})
        before = changes(inbox)

        write_tools_file(tools_file, [{"name": "new_tool"}], notify=False)

        await inbox.wait_for(is_tools_list_changed, "tools/list_changed found by the poller", count=before + 1)
        listed = await tool_names(session)
        assert "beta__new_tool" in listed and "beta__old_tool" not in listed, sorted(listed)
        assert await call_text(session, "beta__new_tool", {"n": 2}) == 'new_tool: {"n":2}'
        err = await call_error(session, "beta__old_tool", {})
        assert "old_tool" in str(err), err


async def test_a_redeployed_backend_is_relisted_and_old_sessions_recover(
    vigil: Gateways, demo_http: Callable[..., DemoHttp], tmp_path: Path
) -> None:
    """beta is replaced on the same port by one with other tools and sends no notification.

    Polling is off: the re-listing must come from Vigil noticing that beta
    forgot its session (re-initialize, then list again).
    """
    old_tools, new_tools = tmp_path / "old.json", tmp_path / "new.json"
    write_tools_file(old_tools, [{"name": "old_tool"}], notify=False)
    write_tools_file(new_tools, [{"name": "new_tool"}], notify=False)
    beta = demo_http("beta", tools_file=old_tools)
    gw = vigil(
        [http_backend("beta", beta.url)],
        restart=QUICK_RESTART,
        poller={"interval": "0s"},
    )
    async with observers(gw.url, 1) as [(session, _inbox)]:
        await wait_for_tools(session, {"beta__old_tool"})
        # The session's own backend session exists once it has called beta.
        assert await call_text(session, "beta__echo", {"text": "before"}) == "before"

        beta.proc.kill()
        demo_http("beta", port=beta.port, tools_file=new_tools)

        await wait_for_tools(session, {"beta__new_tool"}, absent={"beta__old_tool"})
        # Same client session: its backend session died with the old process;
        # Vigil re-initializes it and the call succeeds.
        assert await call_text(session, "beta__echo", {"text": "after"}) == "after"
        assert await call_text(session, "beta__new_tool", {"n": 3}) == 'new_tool: {"n":3}'


async def test_invalid_arguments_after_a_recovery_say_the_tools_schema_changed(
    vigil: Gateways, demo_http: Callable[..., DemoHttp], tmp_path: Path
) -> None:
    """beta is redeployed on the same port with a new schema for `greet` and says nothing.

    The session's next call with the old arguments re-initializes its
    backend session; beta refuses the arguments (-32602). The error the
    client sees says the schema changed, and Vigil has listed beta again by
    then: the new schema is what tools/list shows, and a call made to it works.
    """
    old_tools, new_tools = tmp_path / "old.json", tmp_path / "new.json"
    write_tools_file(old_tools, [{"name": "greet", "required": ["name"]}], notify=False)
    write_tools_file(new_tools, [{"name": "greet", "required": ["first", "last"]}], notify=False)
    beta = demo_http("beta", tools_file=old_tools)
    gw = vigil([http_backend("beta", beta.url)], restart=QUICK_RESTART, poller={"interval": "0s"})
    async with observers(gw.url, 1) as [(session, _inbox)]:
        assert await call_text(session, "beta__greet", {"name": "Ada"}) == 'greet: {"name":"Ada"}'

        beta.proc.kill()
        demo_http("beta", port=beta.port, tools_file=new_tools)

        err = await call_error(session, "beta__greet", {"name": "Ada"})
        assert "schema changed" in str(err) and "tools/list" in str(err), err
        tools = {t.name: t for t in await list_all(session, "tools")}
        assert tools["beta__greet"].input_schema.get("required") == ["first", "last"], tools["beta__greet"]
        args = {"first": "Ada", "last": "Lovelace"}
        assert await call_text(session, "beta__greet", args) == 'greet: {"first":"Ada","last":"Lovelace"}'
