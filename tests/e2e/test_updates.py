"""Updates of a backend to a new version (`[backends.update]`, issue 33),
with real container releases (`release_images.py`: images built FROM the
demo image, each naming itself, so `whoami` says which release answered)
and the official Python SDK as the client:

- blue-green v1 → v2 while a client calls in a loop: no call fails, the
  client hears `list_changed` and sees v2's new tool, the v1 container is
  gone, the history says who started it and that it ended in v2;
- a client's resource subscription moves to the new version;
- a release that exits at start is rolled back: no call fails, the history
  and the `webhook` notifier say why;
- a release without a tool `require_tools` names is rolled back naming it
  (`vigil update --wait` exits 1 with the reason);
- `on_catalog_change = "hold"`: a release that changes a tool waits as
  `held` with the diff; aborted, v1 goes on serving; approved
  (`vigil update --approve`), it serves;
- a quarantined backend is released by a successful update;
- a process backend with an `update` table is updated by editing its
  command line in the config and reloading; an image update of it is
  refused, pointing at the config;
- `strategy = "recreate"`: calls in the gap get the "unavailable" error at
  once, then the new release serves; one that exits at start is rolled
  back to v1;
- a release that dies while it bakes is rolled back to the v1 container,
  which ran all along;
- Vigil killed (SIGKILL) during an update and started again: exactly one
  version runs, and the store says which (before the switch: the old one,
  the update rolled back; while baking: the new one, kept over the
  configured image).

Container backends here publish their port (`port`), as blue-green needs:
the new version runs beside the old on another host port. Each test's
backend (and so its containers, labelled `vigil.backend=NAME`) is named
uniquely and removed at the end whatever happened. Like
`test_health_container.py`, the container tests need `DOCKER_HOST` and the
demo image (see `containers.py`); without them they fail, they are not
skipped.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from containers import Engine
from harness import Gateways, Vigil, demo_stdio_args, render_config, run_vigil, stdio_backend
from release_images import (  # noqa: F401 - fixtures
    SEARCH,
    SEARCH_CHANGED,
    ReleaseBox,
    containers_of,
    release_box_fixture,
    releases_fixture,
)
from support import (
    DEADLINE,
    ControlApi,
    Inbox,
    Receiver,
    announced,
    call_text,
    http_session,
    is_tools_list_changed,
    list_all,
    plugin_dir,
    plugins_by_name,
    poll,
    short,
    text_of,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio

OPERATOR = {"name": "alice", "token": "alice-operator-token-0123456789ab", "role": "operator"}

#: An update's final states.
FINAL = ("succeeded", "rolled_back")

#: Short enough for a test, long enough for a container to start.
QUICK = {"ready_timeout": "20s", "drain": "2s", "bake": "2s"}

#: What a call of the calling loop may take before it counts as failed: it
#: catches a call left hanging, it does not measure.
CALL_TIMEOUT = 10.0
#: Pause between the calling loop's calls.
CALL_PAUSE = 0.05

#: A call while a recreated backend is down is answered at once with an
#: error; one left waiting for the new release (which listens 3 s after it
#: starts) would not be. This bound only turns a hang into a failure.
GAP_ANSWER_BOUND = 5.0

EMPTY_DIFF = {"added": [], "removed": [], "changed": []}


# === the update API ===


async def start_update(api: ControlApi, backend: str, image: str) -> dict[str, Any]:
    """`POST .../update {"image"}`, which must be accepted (202); the update it started."""
    resp = await api.act(backend, "update", {"image": image})
    assert resp.status_code == 202, f"update {backend} to {image}: HTTP {resp.status_code} {resp.text[:500]}"
    update = resp.json()["update"]
    assert update["backend"] == backend and update["to"]["image"] == image, short(update)
    return update


async def update_of(api: ControlApi, backend: str) -> dict[str, Any] | None:
    """`GET .../update`: the update in progress, else the last one, else None."""
    return (await api.get_json(f"/api/v1/health/instances/{backend}/update"))["update"]


async def wait_update(api: ControlApi, backend: str, update_id: int, *states: str) -> dict[str, Any]:
    """Poll update `update_id` of `backend` until its state is one of `states` (default: a final one)."""
    wanted = states or FINAL
    return await poll(
        lambda: update_of(api, backend),
        lambda u: u is not None and u["id"] == update_id and u["state"] in wanted,
        f"{backend}'s update {update_id} to be {' or '.join(wanted)}",
    )


def transitions_between(detail: dict[str, Any], frm: str, to: str) -> list[dict[str, Any]]:
    return [t for t in detail["transitions"] if (t["from"], t["to"]) == (frm, to)]


# === the client ===


@dataclass
class Calls:
    """What the calling loop got: each answer's text, in order, and each failure."""

    answers: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    async def answered(self) -> list[str]:
        return self.answers


@asynccontextmanager
async def calling(session: ClientSession, tool: str) -> AsyncIterator[Calls]:
    """Calls `tool` in a loop while the block runs; a call in flight at the end is let finish.

    A JSON-RPC error, an `isError` result or no answer within
    `CALL_TIMEOUT` is a failure. The loop stops between calls, never inside
    one (the SDK client fails its teardown when an answer arrives after it).
    """
    calls = Calls()
    stop = anyio.Event()

    async def loop() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    result = await session.call_tool(tool, {})
            except TimeoutError:
                calls.failures.append(f"call {n}: no answer within {CALL_TIMEOUT}s")
            except MCPError as err:
                calls.failures.append(f"call {n}: {err}")
            except Exception as exc:  # noqa: BLE001 - a broken connection fails the call too
                calls.failures.append(f"call {n}: {exc!r}")
            else:
                if result.is_error:
                    calls.failures.append(f"call {n}: error result {text_of(result)!r}")
                else:
                    calls.answers.append(text_of(result))
            await anyio.sleep(CALL_PAUSE)

    async with anyio.create_task_group() as tg:
        tg.start_soon(loop)
        try:
            yield calls
        finally:
            stop.set()


async def whoami(session: ClientSession, box: ReleaseBox) -> str:
    return await call_text(session, box.tool("whoami"))


async def serving(engine: Engine, backend: str) -> list[dict[str, Any]]:
    """The running containers of `backend`, as the engine lists them."""
    found = await anyio.to_thread.run_sync(containers_of, engine, backend)
    return [c for c in found if c["State"] == "running"]


# === notifier ===


def webhook_manifest(url: str) -> str:
    """The `webhook` notifier posting every transition to `url`."""
    return (
        '[http]\nallowed_hosts = ["127.0.0.1:*"]\n[limits]\ndeadline = "3s"\n'
        f'[config]\nurl = "{url}"\n[filter]\nmin_severity = "info"\nrate = 60\n'
    )


# === config edits ===


def edit_backends(gw: Vigil, backends: list[dict[str, Any]]) -> None:
    """Replace the `[[backends]]` of `gw`'s config file the way editors do (new file, renamed over)."""
    top = gw.config_path.read_text(encoding="utf-8").split("\n[[backends]]", 1)[0]
    tmp = gw.config_path.with_name(gw.config_path.name + ".new")
    tmp.write_text(top.rstrip("\n") + "\n" + render_config({}, backends), encoding="utf-8")
    os.replace(tmp, gw.config_path)


# === 1. blue-green ===


async def test_blue_green_update_fails_no_call_announces_the_new_tool_removes_v1_and_records_it(
    vigil: Gateways, engine: Engine, releases: dict[str, str], release_box: ReleaseBox
) -> None:
    box = release_box
    v1, v2 = releases["v1"], releases["v2"]
    gw = vigil([box.config(v1, update=QUICK)], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    inbox = Inbox()
    async with http_session(gw.url, message_handler=inbox) as s:
        await wait_for_tools(s, box.tools("search"), absent={box.tool("summarize")})
        await api.wait_state(box.name, "running")
        assert await whoami(s, box) == "v1"
        assert await update_of(api, box.name) is None, "no update before the first"
        seen = len(inbox.matching(is_tools_list_changed))

        async with calling(s, box.tool("whoami")) as calls:
            started = await start_update(api, box.name, v2)
            assert started["state"] == "starting" and started["strategy"] == "blue-green", short(started)
            assert started["from"]["image"] == v1 and started["principal"] == "alice", short(started)
            await announced(s, inbox, seen, lambda names: box.tool("summarize") in names, "with summarize")
            done = await wait_update(api, box.name, started["id"])
            await poll(calls.answered, lambda a: a[-1:] == ["v2"], "calls answered by v2")

        assert calls.failures == [], f"calls failed during a blue-green update: {calls.failures[:5]}"
        assert calls.answers[0] == "v1", calls.answers[:5]
        assert done["state"] == "succeeded" and done["reason"] is None, short(done)
        assert done["diff"]["tools"] == {"added": ["summarize"], "removed": [], "changed": []}, short(done["diff"])
        assert done["ended_at"] is not None, short(done)
        assert await call_text(s, box.tool("summarize"), {"doc": "a"}) == 'summarize: {"doc":"a"}'

    left = await poll(
        lambda: anyio.to_thread.run_sync(containers_of, engine, box.name),
        lambda cs: not [c for c in cs if c["Image"] == v1],
        f"no container of {v1} left for {box.name}",
    )
    assert [c["Image"] for c in left if c["State"] == "running"] == [v2], short(left)

    detail = await api.instance(box.name)
    assert detail["state"] == "running", short(detail)
    [began] = transitions_between(detail, "running", "updating")
    assert began["reason"] == f"update to {v2} started by alice", began
    [ended] = transitions_between(detail, "updating", "running")
    assert ended["reason"] == f"updated to {v2}", ended


async def test_a_clients_resource_subscription_moves_to_the_new_version(
    vigil: Gateways, releases: dict[str, str], release_box: ReleaseBox
) -> None:
    """The new version is another server that knows nothing of the
    client's subscription: at the switch Vigil subscribes it, tells the
    client the resource may have changed, and relays its updates."""
    box = release_box
    gw = vigil([box.config(releases["v1"], update=QUICK, server_name="rel")], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    uri = "demo://rel/counter"
    inbox = Inbox()

    def updates() -> list[Any]:
        return inbox.matching(lambda m: getattr(getattr(m, "params", None), "uri", None) == uri)

    async with http_session(gw.url, message_handler=inbox) as s:
        await wait_for_tools(s, box.tools("search"))
        await api.wait_state(box.name, "running")
        await s.subscribe_resource(uri)
        assert await call_text(s, box.tool("bump")) == "1"
        await inbox.wait_for(lambda m: len(updates()) >= 1, "v1's update of the counter")
        started = await start_update(api, box.name, releases["v2"])
        await wait_update(api, box.name, started["id"], "baking", "succeeded")
        await inbox.wait_for(lambda m: len(updates()) >= 2, "the counter reported changed at the switch")
        seen = len(updates())
        # v2 counts from zero (v1 would say 2): its own update, relayed.
        assert await call_text(s, box.tool("bump")) == "1"
        await inbox.wait_for(lambda m: len(updates()) > seen, "v2's update of the counter")
        done = await wait_update(api, box.name, started["id"])
        assert done["state"] == "succeeded", short(done)


# === 2. crash at start ===


async def test_a_release_that_crashes_at_start_is_rolled_back_failing_no_call_alerted_and_explained(
    vigil: Gateways, releases: dict[str, str], release_box: ReleaseBox, built_plugins: Path, tmp_path: Path
) -> None:
    box = release_box
    v1, crash = releases["v1"], releases["v2-crash"]
    rx = Receiver()
    try:
        d = plugin_dir(tmp_path, built_plugins, ["webhook"])
        (d / "webhook.toml").write_text(webhook_manifest(f"http://127.0.0.1:{rx.port}/alerts"))
        gw = vigil([box.config(v1, update=QUICK)], api={"tokens": [OPERATOR]}, plugins={"dir": str(d)})
        api = ControlApi(gw.api_base, OPERATOR["token"])
        await poll(
            lambda: plugins_by_name(api),
            lambda p: p.get("webhook", {}).get("state") == "active",
            "the webhook notifier loaded",
        )
        async with http_session(gw.url) as s:
            await wait_for_tools(s, box.tools("search"))
            await api.wait_state(box.name, "running")
            async with calling(s, box.tool("whoami")) as calls:
                started = await start_update(api, box.name, crash)
                done = await wait_update(api, box.name, started["id"])
            assert calls.failures == [], f"calls failed while a release crashed at start: {calls.failures[:5]}"
            assert calls.answers and set(calls.answers) == {"v1"}, sorted(set(calls.answers))
            assert done["state"] == "rolled_back", short(done)
            why = done["reason"]
            assert why and re.search(r"\b3\b", why), f"the reason should give the exit status 3: {why!r}"
            assert await whoami(s, box) == "v1"

        detail = await api.instance(box.name)
        assert detail["state"] == "running", short(detail)
        [began] = transitions_between(detail, "running", "updating")
        assert began["reason"] == f"update to {crash} started by alice", began
        [ended] = transitions_between(detail, "updating", "running")
        assert ended["reason"] == f"update to {crash} rolled back: {why}", ended

        def rollback_alerts() -> list[Any]:
            return [
                b
                for b, _ in rx.on("/alerts")
                if isinstance(b, dict)
                and b.get("backend") == box.name
                and (b.get("from"), b.get("to")) == ("updating", "running")
            ]

        [alert, *_] = await poll(lambda: anyio.to_thread.run_sync(rollback_alerts), bool, "the rollback alert")
        assert "rolled back" in alert["reason"] and why in alert["reason"], alert
    finally:
        rx.close()


# === 3. a required tool missing ===


async def test_a_release_without_a_required_tool_is_rolled_back_naming_it(
    vigil: Gateways, vigil_bin: Path, releases: dict[str, str], release_box: ReleaseBox, tmp_path: Path
) -> None:
    box = release_box
    v1, missing = releases["v1"], releases["v2-missing"]
    gw = vigil([box.config(v1, update={**QUICK, "require_tools": ["search"]})], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    async with http_session(gw.url) as s:
        await wait_for_tools(s, box.tools("search"))
        await api.wait_state(box.name, "running")

        cli = ["update", box.name, "--image", missing, "--wait", "--api", gw.api_base, "--token", OPERATOR["token"]]
        waited = await anyio.to_thread.run_sync(lambda: run_vigil(vigil_bin, cli, tmp_path))
        assert waited.returncode == 1, f"exit {waited.returncode}\n{waited.stdout}\n{waited.stderr}"
        assert "search" in waited.stdout + waited.stderr, (
            f"the reason should name search:\n{waited.stdout}\n{waited.stderr}"
        )

        done = await update_of(api, box.name)
        assert done is not None and done["state"] == "rolled_back", short(done)
        assert done["to"]["image"] == missing, short(done)
        assert "search" in (done["reason"] or ""), f"the reason should name search: {done['reason']!r}"
        assert await whoami(s, box) == "v1"
        assert box.tool("search") in {t.name for t in await list_all(s, "tools")}

        # The audit has who started it, and how it ended.
        audit = [e for e in await api.audit() if e["target"] == box.name]
        assert [(e["action"], e["principal"]) for e in audit] == [("update", "alice"), ("update_ended", "alice")], audit
        assert f"{done['id']} from {v1} to {missing}: rolled_back: {done['reason']}" in audit[1]["outcome"], audit


# === 4. on_catalog_change = "hold" ===


async def test_a_changed_tool_holds_the_update_until_an_operator_aborts_or_approves_it(
    vigil: Gateways, vigil_bin: Path, releases: dict[str, str], release_box: ReleaseBox, tmp_path: Path
) -> None:
    """Both releases answer as one server name, so they differ only in their tools:
    `search` described otherwise, `summarize` added."""
    box = release_box
    v1, changed = releases["v1"], releases["v2-changed"]
    gw = vigil(
        [box.config(v1, update={**QUICK, "on_catalog_change": "hold"}, server_name="held")],
        api={"tokens": [OPERATOR]},
    )
    api = ControlApi(gw.api_base, OPERATOR["token"])
    inbox = Inbox()

    async def search_description() -> str | None:
        return {t.name: t.description for t in await list_all(s, "tools")}.get(box.tool("search"))

    async with http_session(gw.url, message_handler=inbox) as s:
        await wait_for_tools(s, box.tools("search"))
        await api.wait_state(box.name, "running")
        assert await search_description() == SEARCH["description"]

        # Held, with the diff; v1 serves meanwhile, and no second update starts.
        first = await start_update(api, box.name, changed)
        held = await wait_update(api, box.name, first["id"], "held", *FINAL)
        assert held["state"] == "held", short(held)
        assert held["diff"]["tools"] == {"added": ["summarize"], "removed": [], "changed": ["search"]}, short(
            held["diff"]
        )
        assert held["diff"]["prompts"] == EMPTY_DIFF and held["diff"]["resource_templates"] == EMPTY_DIFF, short(
            held["diff"]
        )
        # The history (and so the notifiers) says it is held, and why.
        detail = await api.get_json(f"/api/v1/health/instances/{box.name}")
        assert detail["update"] == {"id": first["id"], "state": "held"}, short(detail)
        [said] = transitions_between(detail, "updating", "updating")
        assert said["reason"] == (
            f"update to {changed} held for an operator's approval: tools added: summarize; tools changed: search"
        ), short(said)
        assert await search_description() == SEARCH["description"]
        assert box.tool("summarize") not in {t.name for t in await list_all(s, "tools")}
        assert await call_text(s, box.tool("search"), {"q": "x"}) == 'search: {"q":"x"}'
        again = await api.act(box.name, "update", {"image": changed})
        assert again.status_code == 409, f"a second update while one is held: HTTP {again.status_code} {again.text}"

        # Aborted: rolled back, v1 serves.
        aborted = await api.act_ok(box.name, "update/abort")
        assert aborted["update"]["id"] == first["id"], short(aborted)
        done = await wait_update(api, box.name, first["id"])
        assert done["state"] == "rolled_back" and "aborted by alice" in (done["reason"] or ""), short(done)
        assert await search_description() == SEARCH["description"]
        assert await call_text(s, box.tool("search"), {"q": "y"}) == 'search: {"q":"y"}'
        nothing = await api.act(box.name, "update/abort")
        assert nothing.status_code == 409, f"abort with no update running: HTTP {nothing.status_code} {nothing.text}"

        # Held again, approved with `vigil update --approve`: the changed release serves.
        second = await start_update(api, box.name, changed)
        held = await wait_update(api, box.name, second["id"], "held", *FINAL)
        assert held["state"] == "held", short(held)
        seen = len(inbox.matching(is_tools_list_changed))
        cli = ["update", box.name, "--approve", "--api", gw.api_base, "--token", OPERATOR["token"]]
        approved = await anyio.to_thread.run_sync(lambda: run_vigil(vigil_bin, cli, tmp_path))
        assert approved.returncode == 0, f"exit {approved.returncode}\n{approved.stdout}\n{approved.stderr}"
        done = await wait_update(api, box.name, second["id"])
        assert done["state"] == "succeeded", short(done)
        await announced(s, inbox, seen, lambda names: box.tool("summarize") in names, "with summarize")
        assert await search_description() == SEARCH_CHANGED["description"]
        nothing = await api.act(box.name, "update/approve")
        assert nothing.status_code == 409, f"approve with nothing held: HTTP {nothing.status_code} {nothing.text}"


# === 6. quarantine ===


async def test_a_successful_update_releases_a_quarantined_backend(
    vigil: Gateways, vigil_bin: Path, releases: dict[str, str], release_box: ReleaseBox, tmp_path: Path
) -> None:
    box = release_box
    v1, v2 = releases["v1"], releases["v2"]
    gw = vigil([box.config(v1, update=QUICK)], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    async with http_session(gw.url) as s:
        await wait_for_tools(s, box.tools("search"))
        await api.wait_state(box.name, "running")
        await api.act_ok(box.name, "quarantine", {"reason": "v1 misbehaves; v2 fixes it"})
        await api.wait_state(box.name, "quarantined")
        await wait_for_tools(s, set(), absent=box.tools("search"))

        flags = ["--api", gw.api_base, "--token", OPERATOR["token"]]
        waited = await anyio.to_thread.run_sync(
            lambda: run_vigil(vigil_bin, ["update", box.name, "--image", v2, "--wait", *flags], tmp_path)
        )
        assert waited.returncode == 0, f"exit {waited.returncode}\n{waited.stdout}\n{waited.stderr}"
        shown = await anyio.to_thread.run_sync(lambda: run_vigil(vigil_bin, ["update", box.name, *flags], tmp_path))
        assert shown.returncode == 0 and "succeeded" in shown.stdout, f"{shown.stdout}\n{shown.stderr}"

        detail = await api.wait_state(box.name, "running", "quarantined")
        assert detail["state"] == "running", short(detail)
        await wait_for_tools(s, box.tools("search", "summarize"))
        assert await whoami(s, box) == "v2"


# === 7. a process backend ===


async def test_a_process_backend_is_updated_by_editing_its_command_line_and_reloading(
    vigil: Gateways, demo_bin: Path
) -> None:
    old_args, new_args = demo_stdio_args("alpha"), demo_stdio_args("alpha-v2")
    alpha = {**stdio_backend("alpha", demo_bin, old_args), "update": QUICK}
    gw = vigil([alpha], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    async with http_session(gw.url) as s:
        await wait_for_tools(s, {"alpha__whoami"})
        await api.wait_state("alpha", "running")
        assert await call_text(s, "alpha__whoami") == "alpha"

        edit_backends(gw, [{**stdio_backend("alpha", demo_bin, new_args), "update": QUICK}])
        os.kill(gw.proc.pid, signal.SIGHUP)
        await poll(lambda: call_text(s, "alpha__whoami"), lambda name: name == "alpha-v2", "the new process serving")

        started = await poll(lambda: update_of(api, "alpha"), lambda u: u is not None, "the update's record")
        done = await wait_update(api, "alpha", started["id"])
        assert done["state"] == "succeeded", short(done)
        assert done["from"] == {"command": str(demo_bin), "args": old_args}, short(done)
        assert done["to"] == {"command": str(demo_bin), "args": new_args}, short(done)
        assert await call_text(s, "alpha__whoami") == "alpha-v2"
        audit = [e for e in await api.audit() if e["target"] == "alpha"]
        assert [(e["action"], e["principal"]) for e in audit] == [
            ("update", "config reload"),
            ("update_ended", "config reload"),
        ], audit
        assert f"update {done['id']} from {demo_bin} " in audit[1]["outcome"], audit
        assert ": succeeded" in audit[1]["outcome"], audit


async def test_an_image_update_of_a_process_backend_is_refused_naming_the_config(
    vigil: Gateways, demo_bin: Path
) -> None:
    alpha = {**stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")), "update": QUICK}
    gw = vigil([alpha], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    await api.wait_state("alpha", "running")
    refused = await api.act("alpha", "update", {"image": "localhost/vigil-demo-backend:v2"})
    assert refused.status_code == 400, f"HTTP {refused.status_code} {refused.text}"
    message = refused.json()["error"]["message"]
    assert "command" in message and "config" in message, message
    assert await update_of(api, "alpha") is None, "nothing started"


# === 9. recreate ===


async def whoami_or_error(session: ClientSession, box: ReleaseBox) -> str | MCPError:
    """What a `whoami` call gets: the answer, or the JSON-RPC error; no answer within `GAP_ANSWER_BOUND` fails."""
    try:
        with anyio.fail_after(GAP_ANSWER_BOUND):
            result = await session.call_tool(box.tool("whoami"), {})
    except MCPError as err:
        return err
    except TimeoutError:
        raise AssertionError(
            f"a call got no answer within {GAP_ANSWER_BOUND}s: it must not wait for a release"
        ) from None
    assert not result.is_error, text_of(result)
    return text_of(result)


async def test_recreate_answers_calls_in_the_gap_with_unavailable_then_serves_the_new_release(
    vigil: Gateways, releases: dict[str, str], release_box: ReleaseBox
) -> None:
    box = release_box
    v1, slow = releases["v1"], releases["v2-slow"]
    gw = vigil([box.config(v1, update={**QUICK, "strategy": "recreate"})], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    async with http_session(gw.url) as s:
        await wait_for_tools(s, box.tools("search"))
        await api.wait_state(box.name, "running")
        assert await whoami(s, box) == "v1"

        started = await start_update(api, box.name, slow)
        assert started["strategy"] == "recreate", short(started)
        outcomes: list[str | MCPError] = []
        with anyio.move_on_after(DEADLINE):
            while outcomes[-1:] != ["v2-slow"]:
                outcomes.append(await whoami_or_error(s, box))
                await anyio.sleep(CALL_PAUSE)
        assert outcomes[-1:] == ["v2-slow"], f"v2-slow never answered: {short(outcomes[-10:])}"
        errors = [o for o in outcomes if isinstance(o, MCPError)]
        assert errors, f"no call fell in the gap between v1 and v2-slow: {short(outcomes)}"
        assert all("unavailable" in str(e).lower() for e in errors), short([str(e) for e in errors])
        first_error = outcomes.index(errors[0])
        assert set(outcomes[:first_error]) <= {"v1"}, short(outcomes)

        done = await wait_update(api, box.name, started["id"])
        assert done["state"] == "succeeded", short(done)
        assert await whoami(s, box) == "v2-slow"


async def test_recreate_rolls_a_release_that_crashes_at_start_back_to_v1(
    vigil: Gateways, releases: dict[str, str], release_box: ReleaseBox
) -> None:
    box = release_box
    v1, crash = releases["v1"], releases["v2-crash"]
    gw = vigil([box.config(v1, update={**QUICK, "strategy": "recreate"})], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    async with http_session(gw.url) as s:
        await wait_for_tools(s, box.tools("search"))
        await api.wait_state(box.name, "running")

        started = await start_update(api, box.name, crash)
        done = await wait_update(api, box.name, started["id"])
        assert done["state"] == "rolled_back" and done["reason"], short(done)
        await poll(lambda: whoami(s, box), lambda name: name == "v1", "v1 serving again")
        assert (await api.wait_state(box.name, "running"))["state"] == "running"


# === 10. bake ===


async def test_a_release_that_dies_while_baking_is_rolled_back_to_the_v1_container_that_kept_running(
    vigil: Gateways, engine: Engine, releases: dict[str, str], release_box: ReleaseBox
) -> None:
    """v2-dies serves, then exits 3 s after its start, within the 10 s bake."""
    box = release_box
    v1, dies = releases["v1"], releases["v2-dies"]
    gw = vigil([box.config(v1, update={**QUICK, "bake": "10s"})], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    async with http_session(gw.url) as s:
        await wait_for_tools(s, box.tools("search"))
        await api.wait_state(box.name, "running")
        [old] = await serving(engine, box.name)
        assert old["Image"] == v1, short(old)

        async with calling(s, box.tool("whoami")) as calls:
            started = await start_update(api, box.name, dies)
            await poll(calls.answered, lambda a: "v2-dies" in a, "calls answered by v2-dies (promoted)")
            done = await wait_update(api, box.name, started["id"])
            await poll(calls.answered, lambda a: a[-1:] == ["v1"], "calls answered by v1 again")

        assert done["state"] == "rolled_back", short(done)
        assert re.search(r"exit|crash", done["reason"] or "", re.IGNORECASE), (
            f"the reason should say v2-dies exited: {done['reason']!r}"
        )
        running = await serving(engine, box.name)
        assert [c["Id"] for c in running] == [old["Id"]], f"the v1 container should serve on: {short(running)}"
        assert await whoami(s, box) == "v1"


# === 8. SIGKILL of Vigil during an update ===


async def after_restart(
    again: Vigil, engine: Engine, box: ReleaseBox, started: dict[str, Any]
) -> tuple[ControlApi, dict[str, Any], dict[str, Any]]:
    """Once `again` (a restarted Vigil) serves the backend: its API, the one container running, and the update's record."""
    api = ControlApi(again.api_base, OPERATOR["token"])
    await api.wait_state(box.name, "running")
    [running] = await poll(lambda: serving(engine, box.name), lambda cs: len(cs) == 1, "exactly one container of the backend")
    done = await update_of(api, box.name)
    assert done is not None and done["id"] == started["id"], short(done)
    return api, running, done


async def test_a_vigil_killed_before_the_switch_runs_the_old_version_and_records_the_rollback(
    vigil: Gateways, engine: Engine, releases: dict[str, str], release_box: ReleaseBox
) -> None:
    box = release_box
    v1, slow = releases["v1"], releases["v2-slow"]
    gw = vigil([box.config(v1, update=QUICK)], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    await api.wait_state(box.name, "running")
    started = await start_update(api, box.name, slow)
    # Both containers run: v1 serving, v2-slow starting (it listens 3 s on).
    both = await poll(lambda: serving(engine, box.name), lambda cs: len(cs) == 2, "the candidate container running beside v1")
    assert sorted(c["Image"] for c in both) == sorted([v1, slow]), short(both)
    assert (await update_of(api, box.name))["state"] == "starting"

    again = vigil.kill_and_serve_again(gw)
    _, running, done = await after_restart(again, engine, box, started)
    assert running["Image"] == v1, short(running)
    assert done["state"] == "rolled_back" and "stopped during the update" in (done["reason"] or ""), short(done)
    async with http_session(again.url) as s:
        await wait_for_tools(s, box.tools("search"))
        assert await whoami(s, box) == "v1"


async def test_a_vigil_killed_while_the_new_version_bakes_runs_the_new_version_and_records_it(
    vigil: Gateways, engine: Engine, releases: dict[str, str], release_box: ReleaseBox
) -> None:
    box = release_box
    v1, v2 = releases["v1"], releases["v2"]
    gw = vigil([box.config(v1, update={**QUICK, "bake": "5m"})], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    await api.wait_state(box.name, "running")
    started = await start_update(api, box.name, v2)
    await wait_update(api, box.name, started["id"], "baking")
    assert sorted(c["Image"] for c in await serving(engine, box.name)) == sorted([v1, v2])

    again = vigil.kill_and_serve_again(gw)
    _, running, done = await after_restart(again, engine, box, started)
    assert running["Image"] == v2, short(running)
    assert done["state"] == "succeeded" and "baking" in (done["reason"] or ""), short(done)
    async with http_session(again.url) as s:
        await wait_for_tools(s, box.tools("search", "summarize"))
        assert await whoami(s, box) == "v2"
    # The config still names v1: the image the update put in its place
    # stays, across a restart, until the file names another.
    again2 = vigil.serve_again(again)
    async with http_session(again2.url) as s:
        await wait_for_tools(s, box.tools("search", "summarize"))
        assert await whoami(s, box) == "v2"


async def test_a_vigil_stopped_while_an_update_is_held_ends_it_and_stops_at_once(
    vigil: Gateways, engine: Engine, releases: dict[str, str], release_box: ReleaseBox
) -> None:
    box = release_box
    v1, changed = releases["v1"], releases["v2-changed"]
    gw = vigil(
        [box.config(v1, update={**QUICK, "on_catalog_change": "hold"}, server_name="held")],
        api={"tokens": [OPERATOR]},
    )
    api = ControlApi(gw.api_base, OPERATOR["token"])
    await api.wait_state(box.name, "running")
    started = await start_update(api, box.name, changed)
    await wait_update(api, box.name, started["id"], "held")

    # A held update waits for nobody at shutdown: Vigil exits cleanly,
    # within its grace period, and has stopped both versions.
    assert gw.proc.terminate() == 0, gw.proc.stderr()[-2000:]
    assert "grace period over" not in gw.proc.stderr()
    assert await serving(engine, box.name) == []

    again = vigil.serve_again(gw)
    _, running, done = await after_restart(again, engine, box, started)
    assert done["state"] == "rolled_back" and "stopped during the update" in (done["reason"] or ""), short(done)
    assert running["Image"] == v1, short(running)
