"""Tool search (`[tool_search]`, issue 34): `find_tool` / `call_tool` over an
index that follows health, policy and every catalog change, with real
backend processes and real clients:

- `mode = "search"`: a client lists exactly the two meta-tools; `find_tool`
  for a task in plain words finds the right tool of the right backend
  (`mcp-server-time`'s `convert_time`) in its top 3; `call_tool` calls it
  and the result is the server's, byte for byte, compared with a direct
  call (the raw wire of the differential suite); the audit has the real
  tool name and the principal;
- a backend killed with SIGKILL leaves `find_tool`'s results on the next
  search, with no `list_changed` sent to the search-mode session, and
  comes back once it recovered; a backend that adds a tool and sends
  `list_changed` is found once the catalog generation advances, and only
  that backend was re-indexed (`vigil_tool_search_reindexed_total`);
- two principals under `[[policy]]`: neither finds the other's tools,
  even by their exact names; `call_tool` of a denied tool is answered
  exactly like an unknown one;
- bad input: an empty query, a 1 MiB one, `limit = 10000`, `call_tool`
  without `tool_name`, arguments of the wrong type: each a tool error
  naming the field, and nothing reaches a backend;
- `always_listed`, a `[[policy]]` choosing passthrough for one principal,
  and a 2026-07-28 client without a session.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from harness import DemoHttp, Gateways, Procs, Vigil, demo_stdio_args, http_backend, run_vigil, stdio_backend
from reference import wire
from reference.wire import HttpWire, StdioWire, normalize
from support import (
    DEADLINE,
    ControlApi,
    forwarded_of,
    moved,
    Inbox,
    http_session,
    is_tools_list_changed,
    poll,
    poll_sync,
    write_tools_file,
)
from test_audit import calls
from test_failures import backend_pids

pytestmark = pytest.mark.anyio

ALICE_KEY = "a1ice-9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"
BOB_KEY = "b0b-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
KEYS_ENV: dict[str, str | None] = {"VIGIL_KEY_ALICE": ALICE_KEY, "VIGIL_KEY_BOB": BOB_KEY}
KEYS = {"keys": [{"name": "alice", "key_env": "VIGIL_KEY_ALICE"}, {"name": "bob", "key_env": "VIGIL_KEY_BOB"}]}
META = ["find_tool", "call_tool"]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def time_backend() -> dict[str, Any]:
    server = wire.time_server()
    return stdio_backend("time", server.command, server.args)


def demo_backend(name: str, demo_bin: Path, tools_file: Path | None = None) -> dict[str, Any]:
    return stdio_backend(name, demo_bin, demo_stdio_args(name, tools_file))


def tool(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description}


# === the raw wire ===


def result_of(frame: wire.Frame) -> dict[str, Any]:
    msg = json.loads(frame.text)
    assert "result" in msg, f"not a result: {frame.text[:800]}"
    return msg["result"]


def find(w: HttpWire, arguments: dict[str, Any]) -> dict[str, Any]:
    """`find_tool` with `arguments`: its structuredContent (it must not be an error)."""
    r = result_of(w.request("tools/call", json.dumps({"name": "find_tool", "arguments": arguments})))
    assert r.get("isError") is False, r
    assert json.loads(r["content"][0]["text"]) == r["structuredContent"], "the text is the structured content"
    return r["structuredContent"]


def found_names(w: HttpWire, query: str, **more: Any) -> list[str]:
    return [t["name"] for t in find(w, {"query": query, **more})["tools"]]


def listed(w: HttpWire) -> list[str]:
    return [t["name"] for t in result_of(w.request("tools/list"))["tools"]]


def search_gateway(vigil: Gateways, backends: list[dict[str, Any]], **extra: Any) -> Vigil:
    extra.setdefault("tool_search", {"mode": "search"})
    return vigil(backends, api={}, **extra)


async def wait_indexed(api: ControlApi, gw: Vigil, backend: str, at_least: int = 1) -> float:
    """Wait until the index counts `at_least` re-indexings of `backend`; the count."""

    async def count() -> float:
        return reindexed(await metrics(gw)).get(backend, 0.0)

    return await poll(count, lambda n: n >= at_least, f"{backend} indexed {at_least} time(s)")


async def metrics(gw: Vigil) -> str:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"{gw.api_base}/metrics")
        r.raise_for_status()
        return r.text


def reindexed(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vigil_tool_search_reindexed_total{"):
            labels, value = line.rsplit(" ", 1)
            backend = labels.split('backend="', 1)[1].split('"', 1)[0]
            out[backend] = float(value)
    return out


# === 1. search mode: list, find, call ===


def test_search_mode_lists_the_meta_tools_finds_a_real_tool_and_calls_it_byte_for_byte(
    vigil: Gateways, demo_bin: Path, procs: Any, tmp_path: Path
) -> None:
    gw = search_gateway(
        vigil,
        [time_backend(), demo_backend("demo", demo_bin)],
        auth=KEYS,
        env=KEYS_ENV,
    )
    anyio.run(lambda: ControlApi(gw.api_base).wait_state("time", "running"))
    v = HttpWire(gw.url, deadline=DEADLINE, headers=bearer(ALICE_KEY), log=tmp_path / "wire-vigil.log")
    d = StdioWire(
        wire.time_server().argv,
        cwd=tmp_path,
        stderr=tmp_path / "direct-time.stderr",
        env=wire.time_server().env,
        deadline=DEADLINE,
        log=tmp_path / "wire-direct.log",
    )
    try:
        v.initialize()
        d.initialize()
        assert listed(v) == META, "a search-mode client lists exactly the two meta-tools"
        tools = result_of(v.request("tools/list"))["tools"]
        assert tools[0]["outputSchema"]["required"] == ["tools", "generation", "bytes_saved"]
        assert "- time (2 tools)" in tools[0]["description"], tools[0]["description"]

        def ready() -> list[str]:
            return found_names(v, "convert a time from one timezone to another", limit=3)

        top3 = poll_sync(ready, lambda names: "time__convert_time" in names, "convert_time in the top 3")
        answer = find(v, {"query": "convert a time from one timezone to another", "limit": 3})
        [hit] = [t for t in answer["tools"] if t["name"] == "time__convert_time"]
        assert hit["server"] == "time" and "inputSchema" in hit, hit
        assert answer["bytes_saved"] > 0 and answer["generation"] > 0, answer
        assert top3.index("time__convert_time") < 3

        args = '{"source_timezone":"Europe/Paris","time":"16:30","target_timezone":"Asia/Tokyo"}'
        direct = d.request("tools/call", f'{{"name":"convert_time","arguments":{args}}}')
        via = v.request(
            "tools/call", f'{{"name":"call_tool","arguments":{{"tool_name":"time__convert_time","arguments":{args}}}}}'
        )
        expected = normalize(direct.text, answers="tools/call")
        got = normalize(via.text, answers="tools/call")
        diff = wire.first_difference(expected, got)
        assert diff is None, f"call_tool's result differs from the server's: {diff}"
    finally:
        v.close()
        d.close()

    async def audited() -> None:
        rows = await calls(gw)
        names = [(c["name"], c["principal"], c["backend"], c["outcome"]) for c in rows]
        assert ("time__convert_time", "key:alice", "time", "ok") in names, names
        assert ("find_tool", "key:alice", "", "ok") in names, names
        assert not [n for n in names if n[0] == "call_tool"], "call_tool is audited under the real tool name"
        # Each find_tool is recorded with its query's length and its result
        # count, never its text (no `[audit] arguments` here).
        searches = [c for c in rows if c["name"] == "find_tool"]
        query = "convert a time from one timezone to another"
        assert {"query_bytes": len(query), "results": len(answer["tools"])} in [c.get("search") for c in searches]
        assert all("arguments" not in c for c in searches), searches
        assert all("search" not in c for c in rows if c["name"] != "find_tool"), rows

    anyio.run(audited)


# === 2. freshness: health flips and new tools ===


async def test_a_killed_backend_leaves_the_results_at_once_and_comes_back_without_list_changed(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    alpha_tools = tmp_path / "alpha.json"
    write_tools_file(alpha_tools, [tool("forecast_weather", "Forecast the weather for a city")], notify=False)
    gw = search_gateway(vigil, [demo_backend("alpha", demo_bin, alpha_tools), demo_backend("beta", demo_bin)])
    api = ControlApi(gw.api_base)
    await api.wait_state("alpha", "running")
    await api.wait_state("beta", "running")
    inbox = Inbox()
    async with http_session(gw.url, message_handler=inbox) as s:

        async def names(query: str) -> list[str]:
            r = await s.call_tool("find_tool", {"query": query})
            assert not r.is_error, r
            return [t["name"] for t in (r.structured_content or {})["tools"]]

        assert [t.name for t in (await s.list_tools()).tools] == META
        assert "alpha__forecast_weather" in await names("weather forecast")
        seen = len(inbox.matching(is_tools_list_changed))
        before = await api.instance("alpha")
        [pid] = backend_pids(gw, "alpha", demo_bin)
        os.kill(pid, signal.SIGKILL)
        # Once the crash is seen, the next search no longer has it.
        await poll(lambda: names("weather forecast"), lambda n: "alpha__forecast_weather" not in n, "alpha gone")
        assert await api.wait_for(
            "alpha",
            lambda d: d["state"] == "running" and d["restart_count"] > before["restart_count"],
            "alpha restarted",
        )
        await poll(lambda: names("weather forecast"), lambda n: "alpha__forecast_weather" in n, "alpha back")
        # A search-mode session lists the meta-tools only: nothing it lists changed.
        await s.call_tool("find_tool", {"query": "anything"})
        assert len(inbox.matching(is_tools_list_changed)) == seen, "no list_changed to a search-mode session"


async def test_a_tool_added_with_list_changed_is_found_and_only_its_backend_is_reindexed(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    alpha_tools = tmp_path / "alpha.json"
    write_tools_file(alpha_tools, [tool("forecast_weather", "Forecast the weather")], notify=False)
    gw = search_gateway(vigil, [demo_backend("alpha", demo_bin, alpha_tools), demo_backend("beta", demo_bin)])
    api = ControlApi(gw.api_base)
    await api.wait_state("alpha", "running")
    await api.wait_state("beta", "running")
    await wait_indexed(api, gw, "alpha")
    await wait_indexed(api, gw, "beta")
    before = reindexed(await metrics(gw))
    async with http_session(gw.url) as s:

        async def search(query: str) -> dict[str, Any]:
            r = await s.call_tool("find_tool", {"query": query})
            return r.structured_content or {}

        first = await search("translate a sentence into French")
        assert "alpha__translate_text" not in [t["name"] for t in first["tools"]]
        write_tools_file(
            alpha_tools,
            [
                tool("forecast_weather", "Forecast the weather"),
                tool("translate_text", "Translate a sentence into another language"),
            ],
        )
        now = await poll(
            lambda: search("translate a sentence into French"),
            lambda a: (
                a["generation"] > first["generation"] and "alpha__translate_text" in [t["name"] for t in a["tools"]]
            ),
            "the new tool found at a later generation",
        )
        assert now["tools"][0]["name"] == "alpha__translate_text", now["tools"]
    after = reindexed(await metrics(gw))
    assert after["alpha"] == before["alpha"] + 1, (before, after)
    assert after.get("beta") == before.get("beta"), "beta was not re-indexed"


# === 3. policy ===


async def test_principals_never_find_each_others_tools_and_a_denied_call_is_an_unknown_one(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.json"
    write_tools_file(secret, [tool("launch_rockets", "Launch the rockets at a target")], notify=False)
    gw = search_gateway(
        vigil,
        [demo_backend("pub", demo_bin), demo_backend("ops", demo_bin, secret)],
        auth=KEYS,
        env=KEYS_ENV,
        policy=[
            {"principals": ["key:alice"], "allow": ["*"]},
            {"principals": ["key:bob"], "allow": ["pub__*"]},
        ],
    )
    api = ControlApi(gw.api_base)
    await api.wait_state("ops", "running")
    await wait_indexed(api, gw, "ops")
    async with (
        http_session(gw.url, headers=bearer(ALICE_KEY)) as alice,
        http_session(gw.url, headers=bearer(BOB_KEY)) as bob,
    ):

        async def names(s: Any, query: str, **more: Any) -> list[str]:
            r = await s.call_tool("find_tool", {"query": query, **more})
            assert not r.is_error, r
            return [t["name"] for t in (r.structured_content or {})["tools"]]

        assert "ops__launch_rockets" in await names(alice, "launch rockets")
        for query in ["launch rockets", "ops__launch_rockets", "launch_rockets", "ops", "rockets target"]:
            got = await names(bob, query, limit=20)
            assert not [n for n in got if n.startswith("ops__")], (query, got)
        hidden = await names(bob, "echo", server="ops")
        assert hidden == [], hidden
        bob_find = (await bob.list_tools()).tools[0]
        assert "ops" not in (bob_find.description or "").split("Servers:")[1], bob_find.description
        # Denied and unknown: the same error, suggestions from what bob may use.
        denied = await bob_call_error(bob, "ops__launch_rockets")
        unknown = await bob_call_error(bob, "ops__launch_rocketz")
        assert denied.error.code == unknown.error.code, (denied.error, unknown.error)
        for e, name in [(denied, "ops__launch_rockets"), (unknown, "ops__launch_rocketz")]:
            assert e.error.message.startswith(f"unknown tool '{name}'"), e.error.message
            suggestions = (e.error.data or {}).get("suggestions", [])
            assert all(n.startswith("pub__") for n in suggestions), suggestions
        # Alice may use it: her call_tool reaches it.
        r = await alice.call_tool("call_tool", {"tool_name": "ops__launch_rockets", "arguments": {"target": "moon"}})
        assert not r.is_error, r


async def bob_call_error(s: Any, name: str) -> MCPError:
    try:
        await s.call_tool("call_tool", {"tool_name": name, "arguments": {}})
    except MCPError as e:
        return e
    raise AssertionError(f"call_tool of {name} did not fail")


# === 5. bad input ===


async def test_bad_meta_tool_arguments_get_an_error_naming_the_field_and_reach_no_backend(
    vigil: Gateways, demo_bin: Path
) -> None:
    gw = search_gateway(vigil, [demo_backend("demo", demo_bin)], audit={"arguments": True})
    await ControlApi(gw.api_base).wait_state("demo", "running")
    async with http_session(gw.url) as s:
        cases = [
            ("find_tool", {"query": ""}, "`query` must not be empty"),
            ("find_tool", {"query": "x" * (1024 * 1024)}, "at most 4096 are taken"),
            ("find_tool", {"query": "echo", "limit": 10_000}, "`limit` must be between 1 and 20, not 10000"),
            ("find_tool", {"query": 5}, "`query` must be a string"),
            ("find_tool", {}, "`query` is required"),
            ("call_tool", {"arguments": {"text": "x"}}, "`tool_name` is required"),
            ("call_tool", {"tool_name": "demo__echo", "arguments": [1, 2]}, "`arguments` must be an object"),
            ("call_tool", {"tool_name": 7}, "`tool_name` must be a string"),
        ]
        for name, args, says in cases:
            r = await s.call_tool(name, args)
            assert r.is_error, (name, args, r)
            text = r.content[0].text if isinstance(r.content[0], types.TextContent) else ""
            assert says in text, (name, says, text)
    # The audit is written behind the calls: wait for every find_tool's row.
    finds = sum(1 for name, _, _ in cases if name == "find_tool")
    rows = await poll(
        lambda: calls(gw),
        lambda rows: sum(1 for c in rows if c["name"] == "find_tool") >= finds,
        f"{finds} find_tool rows",
    )
    assert not [c for c in rows if c["backend"]], f"a bad meta-tool call reached a backend: {rows}"
    # A refused find_tool is recorded with its query's length and no result;
    # with `[audit] arguments = true` its text is kept too.
    [huge] = [c for c in rows if c.get("search", {}).get("query_bytes") == 1024 * 1024]
    assert huge["search"]["results"] == 0 and huge["outcome"] == "error", huge
    assert huge["arguments"]["query"] == "x" * (1024 * 1024)


async def test_each_session_searches_its_own_listing_of_a_credential_forwarding_backend(
    vigil: Gateways, procs: Procs, tmp_path: Path
) -> None:
    """A `forward_auth` backend lists each caller's own tools (Vigil alone
    sees none): each session's `find_tool` names it with, and finds, the
    tools its own listing has, and never another caller's."""
    from test_forward_auth import ALICE, BOB, start_per_user

    _, _, backend = start_per_user(procs, tmp_path, {"Bearer alice": ["alpha", "gamma"], "Bearer bob": ["beta"]})
    gw = search_gateway(vigil, [backend])
    await ControlApi(gw.api_base).wait_state("per", "running")

    async def found(s: Any, query: str) -> list[str]:
        r = await s.call_tool("find_tool", {"query": query})
        assert not r.is_error, r
        return [t["name"] for t in (r.structured_content or {})["tools"]]

    async with (
        http_session(gw.url, headers=ALICE) as alice,
        http_session(gw.url, headers=BOB) as bob,
    ):
        assert [t.name for t in (await alice.list_tools()).tools] == META
        # find_tool's description names the backend with the tools the
        # caller's own listing has.
        for s, line in [(alice, "- per (2 tools)"), (bob, "- per (1 tool)")]:
            described = (await s.list_tools()).tools[0].description or ""
            assert described.endswith(f"Servers:\n{line}"), described
        # Each finds what its own listing has (both of alice's tools are
        # "(per user)"), ...
        mine = await found(alice, "alpha per user")
        assert mine[0] == "per__alpha" and sorted(mine) == ["per__alpha", "per__gamma"], mine
        assert await found(alice, "gamma") == ["per__gamma"]
        assert await found(bob, "beta per user") == ["per__beta"]
        # ... and never another caller's, even by its exact name.
        assert await found(bob, "per__alpha alpha gamma") == ["per__beta"]
        assert await found(alice, "beta") == []
        r = await alice.call_tool("call_tool", {"tool_name": "per__gamma", "arguments": {}})
        assert not r.is_error and "gamma for Bearer alice" in str(r.content), r


# === modes, eras, the operator's preview ===


async def test_always_listed_mode_and_a_policy_that_keeps_the_full_list(
    vigil: Gateways, demo_bin: Path, tmp_path: Path
) -> None:
    """`always_listed` lists the meta-tools and the named tools; a
    `[[policy]] tool_search = "passthrough"` principal lists every tool."""
    gw = search_gateway(
        vigil,
        [demo_backend("demo", demo_bin)],
        tool_search={"mode": "always_listed", "always_listed": ["demo__echo"]},
        auth=KEYS,
        env=KEYS_ENV,
        policy=[
            {"principals": ["key:alice"], "allow": ["*"]},
            {"principals": ["key:bob"], "allow": ["*"], "tool_search": "passthrough"},
        ],
    )
    await ControlApi(gw.api_base).wait_state("demo", "running")
    async with (
        http_session(gw.url, headers=bearer(ALICE_KEY)) as alice,
        http_session(gw.url, headers=bearer(BOB_KEY)) as bob,
    ):
        assert [t.name for t in (await alice.list_tools()).tools] == [*META, "demo__echo"]
        bob_tools = [t.name for t in (await bob.list_tools()).tools]
        assert "find_tool" not in bob_tools and "demo__echo" in bob_tools and len(bob_tools) > 3, bob_tools
        # A listed tool is called by its name; a found one too.
        assert not (await alice.call_tool("demo__echo", {"text": "hi"})).is_error
        assert not (await alice.call_tool("demo__add", {"a": 1, "b": 2})).is_error
        # bob's passthrough: find_tool is no tool of his.
        with pytest.raises(MCPError):
            await bob.call_tool("find_tool", {"query": "echo"})


async def test_a_2026_client_without_a_session_finds_and_calls(vigil: Gateways, demo_bin: Path) -> None:
    from mcp import Client

    gw = search_gateway(vigil, [demo_backend("demo", demo_bin)])
    await ControlApi(gw.api_base).wait_state("demo", "running")
    async with Client(gw.url, mode="2026-07-28") as client:
        assert [t.name for t in (await client.list_tools()).tools] == META
        found = await client.call_tool("find_tool", {"query": "add two numbers"})
        assert not found.is_error
        names = [t["name"] for t in (found.structured_content or {})["tools"]]
        assert "demo__add" in names[:3], names
        r = await client.call_tool("call_tool", {"tool_name": "demo__add", "arguments": {"a": 2, "b": 3}})
        assert not r.is_error and "5" in json.dumps(r.model_dump(mode="json")), r


# === call_tool on the raw path ===


def test_a_call_tool_goes_the_way_a_direct_call_of_its_tool_goes_and_answers_as_the_backend_did(
    vigil: Gateways, demo_http: Callable[..., DemoHttp], tmp_path: Path
) -> None:
    """To an HTTP backend, `call_tool` in its plain form is forwarded raw
    (`vigil_requests_forwarded_total{path="raw"}`), its progress with the
    client's token; the frames are the backend's, byte for byte, against
    the same calls sent to it directly. The other forms, a name the caller
    may not use and a 2026-07-28 client take the typed path, with the same
    answers."""
    web = demo_http("web")
    gw = search_gateway(
        vigil,
        [http_backend("web", web.url)],
        auth=KEYS,
        env=KEYS_ENV,
        policy=[
            {"principals": ["key:alice"], "allow": ["*"]},
            {"principals": ["key:bob"], "allow": ["web__echo"]},
        ],
    )
    anyio.run(lambda: ControlApi(gw.api_base).wait_state("web", "running"))
    v = HttpWire(gw.url, deadline=DEADLINE, headers=bearer(ALICE_KEY), log=tmp_path / "wire-vigil.log")
    d = HttpWire(web.url, deadline=DEADLINE, log=tmp_path / "wire-direct.log")

    def paths() -> dict[tuple[str, str], float]:
        return forwarded_of(anyio.run(metrics, gw))

    def call_tool(w: HttpWire, arguments: str, meta: str = "") -> list[str]:
        """`call_tool` with `arguments` (JSON as written): what came back, normalized."""
        since = w.count_received()
        w.request("tools/call", f'{{{meta}"name":"call_tool","arguments":{arguments}}}')
        return [normalize(f.text, answers="tools/call") for f in w.received()[since:]]

    def direct(name: str, arguments: str, meta: str = "") -> list[str]:
        since = d.count_received()
        d.request("tools/call", f'{{{meta}"name":"{name}","arguments":{arguments}}}')
        return [normalize(f.text, answers="tools/call") for f in d.received()[since:]]

    def same(expected: list[str], got: list[str], what: str) -> None:
        assert len(expected) == len(got), (what, expected, got)
        for e, g in zip(expected, got, strict=True):
            diff = wire.first_difference(e, g)
            assert diff is None, f"{what}: {diff}"

    try:
        v.initialize()
        d.initialize()
        echo = '{"text":"hi \\"there\\" \\u00e9"}'
        before = paths()
        same(direct("echo", echo), call_tool(v, f'{{"tool_name":"web__echo","arguments":{echo}}}'), "echo")
        same(direct("echo", echo), call_tool(v, f'{{"parameters":{echo},"tool_name":"web__echo"}}'), "parameters")
        assert moved(before, paths()) == {("tools/call", "raw"): 2}, "the plain forms go raw"

        # Progress, relayed while the call runs with the client's own token.
        before = paths()
        token = '"_meta":{"progressToken":"tok-7"},'
        since = v.count_received()
        got = call_tool(v, '{"tool_name":"web__progress","arguments":{"steps":2}}', token)
        same(direct("progress", '{"steps":2}', token), got, "progress")
        notes = [json.loads(f.text) for f in v.received()[since:] if "notifications/progress" in f.text]
        assert [n["params"]["progressToken"] for n in notes] == ["tok-7", "tok-7"], notes
        assert moved(before, paths()) == {("tools/call", "raw"): 1}

        # The name inside the arguments: typed, the same call.
        before = paths()
        inside = call_tool(v, '{"arguments":{"tool_name":"web__echo","text":"x"}}')
        same(direct("echo", '{"text":"x"}'), inside, "tool_name inside the arguments")
        assert moved(before, paths()) == {("tools/call", "typed"): 1}
    finally:
        v.close()
        d.close()

    async def bob_and_a_2026_client() -> None:
        from mcp import Client

        async with http_session(gw.url, headers=bearer(BOB_KEY)) as bob:
            before = forwarded_of(await metrics(gw))
            ok = await bob.call_tool("call_tool", {"tool_name": "web__echo", "arguments": {"text": "b"}})
            assert not ok.is_error and ok.content[0].text == "b", ok  # type: ignore[union-attr]
            denied = await bob_call_error(bob, "web__progress")
            assert denied.error.message.startswith("unknown tool 'web__progress': did you mean"), denied.error
            assert (denied.error.data or {}).get("suggestions") == ["web__echo"], denied.error.data
            assert moved(before, forwarded_of(await metrics(gw))) == {("tools/call", "raw"): 1}

        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers=bearer(ALICE_KEY), timeout=DEADLINE)
        async with Client(streamable_http_client(gw.url, http_client=http), mode="2026-07-28") as modern:
            before = forwarded_of(await metrics(gw))
            r = await modern.call_tool("call_tool", {"tool_name": "web__echo", "arguments": {"text": "m"}})
            assert not r.is_error and r.content[0].text == "m", r  # type: ignore[union-attr]
            assert moved(before, forwarded_of(await metrics(gw))) == {("tools/call", "typed"): 1}

        async def audited() -> list[tuple[str, str, str]]:
            return [(c["name"], c["principal"], c["outcome"]) for c in await calls(gw)]

        # The audit is written behind the calls: wait for the last one.
        names = await poll(audited, lambda n: n.count(("web__echo", "key:alice", "ok")) >= 4, "4 echo rows")
        assert names.count(("web__echo", "key:alice", "ok")) == 4, names
        assert ("web__progress", "key:alice", "ok") in names, names
        assert ("web__progress", "key:bob", "denied") in names, names
        assert not [n for n in names if n[0] == "call_tool"], "call_tool is audited under the real tool name"

    anyio.run(bob_and_a_2026_client)


async def test_vigil_search_shows_what_find_tool_answers_a_principal_with_scores(
    vigil: Gateways, demo_bin: Path, vigil_bin: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.json"
    write_tools_file(secret, [tool("launch_rockets", "Launch the rockets at a target")], notify=False)
    gw = search_gateway(
        vigil,
        [demo_backend("pub", demo_bin), demo_backend("ops", demo_bin, secret)],
        auth=KEYS,
        env=KEYS_ENV,
        policy=[{"principals": ["key:bob"], "allow": ["pub__*"]}],
    )
    api = ControlApi(gw.api_base)
    await api.wait_state("ops", "running")
    await wait_indexed(api, gw, "ops")
    every = run_vigil(vigil_bin, ["search", "launch rockets", "--api", gw.api_base, "--json"], tmp_path)
    assert every.returncode == 0, every.stderr
    report = json.loads(every.stdout)
    assert report["results"][0]["name"] == "ops__launch_rockets" and report["results"][0]["score"] > 0, report
    as_bob = run_vigil(
        vigil_bin, ["search", "launch rockets", "--principal", "key:bob", "--api", gw.api_base], tmp_path
    )
    assert as_bob.returncode == 0, as_bob.stderr
    assert "ops__" not in as_bob.stdout and "as key:bob (mode search)" in as_bob.stdout, as_bob.stdout
    bad = run_vigil(vigil_bin, ["search", "x", "--limit", "99", "--api", gw.api_base], tmp_path)
    assert bad.returncode != 0 and "`limit` must be between 1 and 20" in bad.stdout + bad.stderr, bad
