"""Config reload: backends added, removed or edited in the config file take effect without a restart,
and so does a rotated control-API token.

Vigil watches its config file (and reloads on SIGHUP). The observer is one
SDK session that stays open through every reload: it hears `list_changed`,
sees the new backend's tools and calls them, and loses the removed one's.
A broken edit is refused and the running config stays in force.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
from pathlib import Path
from typing import Any

import pytest

from harness import Gateways, Vigil, demo_stdio_args, render_config, stdio_backend
from support import (
    DEMO_TOOLS,
    ControlApi,
    Inbox,
    call_error,
    call_text,
    http_session,
    is_tools_list_changed,
    poll,
    prefixed,
    tool_names,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio


def top_of(config: Path) -> str:
    """The config file without its `[[backends]]` tables."""
    text = config.read_text(encoding="utf-8")
    return text.split("\n[[backends]]", 1)[0]


def rewrite(config: Path, text: str) -> None:
    """Replace the file the way editors do: write a new one, rename it over."""
    tmp = config.with_name(config.name + ".new")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, config)


def with_backends(top: str, backends: list[dict[str, Any]]) -> str:
    return top.rstrip("\n") + "\n" + render_config({}, backends)


async def log_line(gw: Vigil, text: str, count: int = 1) -> None:
    async def lines() -> int:
        return gw.proc.stderr().count(text)

    await poll(lines, lambda n: n >= count, f"{count}× {text!r} in vigil's log")


async def test_backends_are_added_and_removed_by_editing_the_config(vigil: Gateways, demo_bin: Path) -> None:
    alpha = stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))
    beta = stdio_backend("beta", demo_bin, demo_stdio_args("beta"))
    gw = vigil([alpha], api={})
    top = top_of(gw.config_path)
    api = ControlApi(gw.api_base)
    inbox = Inbox()
    async with http_session(gw.url, message_handler=inbox) as session:
        await wait_for_tools(session, prefixed("alpha", DEMO_TOOLS))
        seen = len(inbox.matching(is_tools_list_changed))

        # Added.
        rewrite(gw.config_path, with_backends(top, [alpha, beta]))
        await inbox.wait_for(is_tools_list_changed, "list_changed for beta", count=seen + 1)
        await wait_for_tools(session, prefixed("beta", DEMO_TOOLS) | prefixed("alpha", DEMO_TOOLS))
        assert await call_text(session, "beta__echo", {"text": "new"}) == "new"
        assert {i["name"] for i in await api.instances()} == {"alpha", "beta"}

        # A broken edit is refused; both keep serving.
        rewrite(gw.config_path, with_backends(top, [alpha, beta]) + "\n[[backends]]\nname = \n")
        await log_line(gw, "config reload refused")
        assert "the running config stays in force" in gw.proc.stderr()
        assert await call_text(session, "beta__echo", {"text": "still"}) == "still"
        assert await call_text(session, "alpha__echo", {"text": "still"}) == "still"

        # Removed.
        seen = len(inbox.matching(is_tools_list_changed))
        rewrite(gw.config_path, with_backends(top, [beta]))
        await inbox.wait_for(is_tools_list_changed, "list_changed for alpha's removal", count=seen + 1)
        listed = await wait_for_tools(session, prefixed("beta", DEMO_TOOLS), absent=prefixed("alpha", DEMO_TOOLS))
        assert not listed & prefixed("alpha", DEMO_TOOLS)
        err = await call_error(session, "alpha__echo", {"text": "gone"})
        assert "alpha__echo" in str(err), err
        assert {i["name"] for i in await api.instances()} == {"beta"}


async def test_an_edited_backend_is_replaced_and_sighup_reloads(vigil: Gateways, demo_bin: Path) -> None:
    alpha = stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))
    gw = vigil([alpha], api={})
    api = ControlApi(gw.api_base)
    top = top_of(gw.config_path)
    async with http_session(gw.url) as session:
        await wait_for_tools(session, prefixed("alpha", DEMO_TOOLS))
        assert await call_text(session, "alpha__whoami", {}) == "alpha"
        # The instance serving `alpha` has an id of its own, which the API
        # takes as it takes the backend's name.
        first = (await api.instance("alpha"))["instance"]
        assert re.fullmatch(r"alpha\.i[0-9]+", first), first
        assert (await api.instance(first))["instance"] == first

        # Same name, other server identity: the backend is replaced.
        edited = stdio_backend("alpha", demo_bin, demo_stdio_args("alpha-v2"))
        rewrite(gw.config_path, with_backends(top, [edited]))

        async def whoami() -> str:
            return await call_text(session, "alpha__whoami", {})

        await poll(whoami, lambda name: name == "alpha-v2", "alpha answering as the edited server")
        # By name: the new instance; the old instance's id names nothing live.
        second = (await api.instance("alpha"))["instance"]
        assert second != first and re.fullmatch(r"alpha\.i[0-9]+", second), (first, second)
        assert (await api.instance(second))["name"] == "alpha"
        gone = await api.request("GET", f"/api/v1/health/instances/{first}")
        assert gone.status_code == 404, (gone.status_code, gone.text)

        # SIGHUP reloads too (nothing changed: nothing added or removed).
        before = gw.proc.stderr().count("config reloaded")
        os.kill(gw.proc.pid, signal.SIGHUP)
        await log_line(gw, "config reloaded", before + 1)
        assert "cause=SIGHUP" in gw.proc.stderr() or 'cause="SIGHUP"' in gw.proc.stderr()
        assert prefixed("alpha", DEMO_TOOLS) <= await tool_names(session)


async def test_a_rotated_api_token_is_in_force_at_once(vigil: Gateways, demo_bin: Path) -> None:
    """Editing a token's secret (same name, same count) refuses the old one and accepts the new one, no restart;
    keys a running Vigil cannot change (`log_format`, `startup_timeout`) are named as needing one."""
    old, new = secrets.token_hex(32), secrets.token_hex(32)
    ops = {"name": "ops", "token": old, "role": "operator"}
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], api={"tokens": [ops]})
    with_old, with_new = ControlApi(gw.api_base, old), ControlApi(gw.api_base, new)
    await with_old.wait_state("alpha", "running")
    assert (await with_new.request("GET", "/api/v1/health/instances")).status_code == 401

    text = gw.config_path.read_text(encoding="utf-8")
    assert text.count(old) == 1, text
    reloaded = gw.proc.stderr().count("config reloaded")
    rewrite(gw.config_path, 'log_format = "human"\nstartup_timeout = "20s"\n' + text.replace(old, new))
    await log_line(gw, "config reloaded", reloaded + 1)

    refused = await with_old.request("GET", "/api/v1/health/instances")
    assert refused.status_code == 401, f"the old secret still works: HTTP {refused.status_code} {refused.text[:300]}"
    assert refused.json()["error"] == {"code": "unauthorized", "message": "unknown token"}
    assert {i["name"] for i in await with_new.instances()} == {"alpha"}
    report = await with_new.act_ok("alpha", "restart")
    assert report["name"] == "alpha"
    [entry] = [e for e in await with_new.audit() if e["action"] == "restart"]
    assert entry["principal"] == "ops", entry

    log = gw.proc.stderr()
    [applied] = [line for line in log.splitlines() if "config reloaded" in line][reloaded:]
    assert "api.tokens" in applied, applied
    [restart] = [line for line in log.splitlines() if "take effect only after a restart" in line]
    assert "startup_timeout" in restart and "log_format" not in restart, restart  # "human" is the running format
    assert old not in log and new not in log, "a secret reached the log"

    # A changed log format is named too, and the tokens are not "changed" again.
    rewrite(gw.config_path, 'log_format = "json"\n' + text.replace(old, new))
    await log_line(gw, "config reloaded", reloaded + 2)
    lines = gw.proc.stderr().splitlines()
    [again] = [line for line in lines if "config reloaded" in line][reloaded + 1 :]
    assert "api.tokens" not in again, again
    last = [line for line in lines if "take effect only after a restart" in line][-1]
    assert "log_format" in last, last
    assert (await with_new.request("GET", "/api/v1/health/instances")).status_code == 200
