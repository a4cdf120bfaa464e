"""`share`: one stdio process per client session or per caller.

A stdio server keeps its state per process. Shared by every client (`share
= "all"`, the default) one client's state is every client's: the demo
backend's counter, server-memory's graph, server-filesystem's roots. With
`share = "session"` each client session gets a process of its own, started
on its first use of the backend and stopped with the session; each is an
instance with its own id (`NAME.sN`) in the control API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from harness import Gateways, demo_pids, demo_stdio_args, stdio_backend
from reference import wire
from support import ControlApi, call_error, call_text, http_session, poll, stdio_session, wait_for_tools

pytestmark = pytest.mark.anyio


def demo(demo_bin: Path, share: str, **extra: Any) -> dict[str, Any]:
    return {**stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")), "share": share, **extra}


async def own_instances(api: ControlApi, backend: str) -> list[dict[str, Any]]:
    return [i for i in await api.instances() if i["name"].startswith(f"{backend}.")]


@pytest.mark.parametrize("share", ["all", "session"])
async def test_a_counter_is_per_session_only_with_share_session(
    vigil: Gateways, demo_bin: Path, share: str
) -> None:
    gw = vigil([demo(demo_bin, share)])
    async with http_session(gw.url) as a, http_session(gw.url) as b:
        await wait_for_tools(a, {"alpha__bump"})
        assert await call_text(a, "alpha__bump") == "1"
        assert await call_text(a, "alpha__bump") == "2"
        seen_by_b = await call_text(b, "alpha__bump")
    # Shared, b counts on from a; per session, b's process starts at 1.
    assert seen_by_b == ("3" if share == "all" else "1"), seen_by_b


async def test_each_session_instance_has_an_id_in_the_control_api_and_ends_with_its_session(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = vigil([demo(demo_bin, "session")])
    api = ControlApi(gw.api_base)
    shared = demo_pids(gw.proc.pid, "alpha", demo_bin)
    assert len(shared) == 1, f"the configured backend's own process: {shared}"
    assert await own_instances(api, "alpha") == [], "nothing starts before a client uses the backend"
    async with http_session(gw.url) as s:
        await wait_for_tools(s, {"alpha__whoami"})
        assert await own_instances(api, "alpha") == [], "a listing starts no instance"
        assert await call_text(s, "alpha__whoami") == "alpha"
        [mine] = await own_instances(api, "alpha")
        assert mine["state"] == "running" and mine["runtime"] == "process", mine
        detail = await api.instance(mine["name"])
        assert detail["name"] == mine["name"]
        assert len(demo_pids(gw.proc.pid, "alpha", demo_bin)) == 2
        # Supervised like any other: a crash is restarted and the session
        # is served again by its own instance.
        with pytest.raises(Exception):
            await call_text(s, "alpha__crash", {"code": 3})
        await api.wait_for(mine["name"], lambda d: d["restart_count"] >= 1 and d["state"] == "running", "restarted")
        assert await call_text(s, "alpha__bump") == "1", "a new process of its own"
    await poll(
        lambda: own_instances(api, "alpha"),
        lambda live: live == [],
        "the instance ended with its session",
    )
    await poll(
        lambda: anyio.to_thread.run_sync(lambda: demo_pids(gw.proc.pid, "alpha", demo_bin)),
        lambda pids: pids == shared,
        "only the configured backend's process is left",
    )


async def test_a_hundred_sessions_leave_no_process_and_the_cap_refuses_the_next(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = vigil([demo(demo_bin, "session")], limits={"max_instances": 3})
    shared = demo_pids(gw.proc.pid, "alpha", demo_bin)
    for n in range(100):
        async with http_session(gw.url) as s:
            assert await call_text(s, "alpha__bump") == "1", f"session {n} got a process of its own"
    await poll(
        lambda: anyio.to_thread.run_sync(lambda: demo_pids(gw.proc.pid, "alpha", demo_bin)),
        lambda pids: pids == shared,
        "every session's process ended",
    )
    async with (
        http_session(gw.url) as a,
        http_session(gw.url) as b,
        http_session(gw.url) as c,
        http_session(gw.url) as d,
    ):
        for s in (a, b, c):
            assert await call_text(s, "alpha__bump") == "1"
        err = await call_error(d, "alpha__bump")
        assert "limits.max_instances" in err.error.message and "3" in err.error.message, err.error.message
        assert len(demo_pids(gw.proc.pid, "alpha", demo_bin)) == 4


async def test_a_session_filesystem_server_is_narrowed_to_its_own_clients_roots(
    vigil: Gateways, tmp_path: Path
) -> None:
    """Differential: server-filesystem narrows to the roots of the client that
    runs it; through Vigil with `share = "session"` each client gets the
    answer it gets directly, whatever the other client's roots."""
    root = tmp_path / "fs-root"
    for d in ("docs", "src"):
        (root / d).mkdir(parents=True)
    server = wire.filesystem(root)

    def roots_of(path: Path) -> Any:
        async def answer(_ctx: object) -> types.ListRootsResult:
            return types.ListRootsResult(roots=[types.Root(uri=path.as_uri())])

        return answer

    direct: dict[str, str] = {}
    for d in ("docs", "src"):
        async with stdio_session(
            Path(server.command), server.args, tmp_path / "direct.log", list_roots_callback=roots_of(root / d)
        ) as s:
            direct[d] = await poll(
                lambda s=s: call_text(s, "list_allowed_directories"),
                lambda text, d=d: str(root / d) in text,
                f"directly narrowed to {d}",
            )
    gw = vigil([{**stdio_backend(server.name, server.command, server.args), "share": "session"}])
    async with (
        http_session(gw.url, list_roots_callback=roots_of(root / "docs")) as docs,
        http_session(gw.url, list_roots_callback=roots_of(root / "src")) as src,
    ):
        await wait_for_tools(docs, {"filesystem__list_allowed_directories"})
        via = {
            "docs": await poll(
                lambda: call_text(docs, "filesystem__list_allowed_directories"),
                lambda text: str(root / "docs") in text,
                "narrowed to docs",
            ),
            "src": await poll(
                lambda: call_text(src, "filesystem__list_allowed_directories"),
                lambda text: str(root / "src") in text,
                "narrowed to src",
            ),
        }
    assert via == direct, f"through Vigil {json.dumps(via)}, directly {json.dumps(direct)}"



async def test_an_instance_unused_for_session_idle_stops_and_the_next_call_starts_another(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = vigil([demo(demo_bin, "session", session_idle="1s")])
    api = ControlApi(gw.api_base)
    shared = demo_pids(gw.proc.pid, "alpha", demo_bin)
    async with http_session(gw.url) as s:
        assert await call_text(s, "alpha__bump") == "1"
        [first] = await own_instances(api, "alpha")
        await poll(
            lambda: own_instances(api, "alpha"),
            lambda live: live == [],
            "the idle instance stopped while its session stays open",
        )
        await poll(
            lambda: anyio.to_thread.run_sync(lambda: demo_pids(gw.proc.pid, "alpha", demo_bin)),
            lambda pids: pids == shared,
            "its process ended",
        )
        assert await call_text(s, "alpha__bump") == "1", "a new process of its own, started afresh"
        [second] = await own_instances(api, "alpha")
        assert second["name"] == first["name"], "the same session, the same id"
