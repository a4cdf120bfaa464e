"""One client session through Vigil sees two backends as one catalog.

alpha is a demo backend over stdio (Vigil runs it), beta a demo backend over
HTTP (the test runs it). With `naming = "prefix"` tools and prompts are named
`<backend>__<name>`; resource URIs pass through unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import types

from harness import DemoHttp, Vigil, demo_stdio_args, free_port, http_backend, render_config, stdio_backend
from support import (
    DEMO_TOOLS,
    call_text,
    http_session,
    list_all,
    prefixed,
    stdio_session,
    text_of,
    wait_for_tools,
)

pytestmark = pytest.mark.anyio

ALL_TOOLS = prefixed("alpha", DEMO_TOOLS) | prefixed("beta", DEMO_TOOLS)


@pytest.fixture
def gateway(vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp], demo_bin: Path) -> Vigil:
    beta = demo_http("beta")
    return vigil(
        [
            stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")),
            http_backend("beta", beta.url),
        ]
    )


async def test_tools_are_listed_once_per_backend_with_prefixes(gateway: Vigil) -> None:
    async with http_session(gateway.url) as s:
        await wait_for_tools(s, ALL_TOOLS)
        tools = await list_all(s, "tools")
        names = [t.name for t in tools]
        assert len(names) == len(set(names)), f"duplicate tool names: {sorted(names)}"
        assert set(names) == ALL_TOOLS, f"unexpected tools: {sorted(set(names) ^ ALL_TOOLS)}"
        # The backend's schema travels with the renamed tool.
        echo = next(t for t in tools if t.name == "alpha__echo")
        assert "text" in echo.input_schema.get("properties", {})


async def test_tool_calls_are_routed_to_the_right_backend(gateway: Vigil) -> None:
    async with http_session(gateway.url) as s:
        await wait_for_tools(s, ALL_TOOLS)
        token = f"echo-{uuid.uuid4()}"
        assert await call_text(s, "alpha__echo", {"text": token}) == token
        assert await call_text(s, "beta__add", {"a": 2, "b": 3}) == "5"
        assert await call_text(s, "alpha__whoami") == "alpha"
        assert await call_text(s, "beta__whoami") == "beta"


async def test_tool_error_results_pass_through(gateway: Vigil) -> None:
    async with http_session(gateway.url) as s:
        await wait_for_tools(s, ALL_TOOLS)
        result = await s.call_tool("beta__fail", {"message": "broken on purpose"})
        assert result.is_error
        assert "broken on purpose" in text_of(result)


async def test_resources_pass_through_unchanged(gateway: Vigil) -> None:
    async with http_session(gateway.url) as s:
        await wait_for_tools(s, ALL_TOOLS)
        uris = {str(r.uri) for r in await list_all(s, "resources")}
        expected = {f"demo://{b}/{r}" for b in ("alpha", "beta") for r in ("readme", "counter")}
        assert expected <= uris, f"missing resources: {sorted(expected - uris)}"
        templates = {t.uri_template for t in await list_all(s, "resource_templates")}
        assert {"demo://alpha/item/{id}", "demo://beta/item/{id}"} <= templates
        assert text_of(await s.read_resource("demo://beta/readme")) == "Hello from beta"
        assert text_of(await s.read_resource("demo://alpha/readme")) == "Hello from alpha"
        assert text_of(await s.read_resource("demo://alpha/item/7")) == "item 7 from alpha"


async def test_prompts_are_prefixed_and_routed(gateway: Vigil) -> None:
    async with http_session(gateway.url) as s:
        await wait_for_tools(s, ALL_TOOLS)
        names = {p.name for p in await list_all(s, "prompts")}
        assert {"alpha__greet", "beta__greet"} <= names
        assert "greet" not in names
        alpha = await s.get_prompt("alpha__greet", {"name": "Ada"})
        assert "Hello, Ada! (from alpha)" in text_of(alpha)
        beta = await s.get_prompt("beta__greet", {"name": "Grace"})
        assert "Hello, Grace! (from beta)" in text_of(beta)


async def test_completion_is_routed_to_the_prompts_backend(gateway: Vigil, demo_bin: Path, tmp_path: Path) -> None:
    """Completing `alpha__greet`'s argument through Vigil gives what alpha itself gives."""
    argument = {"name": "name", "value": "al"}
    async with stdio_session(demo_bin, demo_stdio_args("alpha"), tmp_path / "alpha-direct.log") as direct:
        expected = await direct.complete(types.PromptReference(name="greet"), argument)
    assert expected.completion.values, "the demo backend offers no completion for greet.name"
    async with http_session(gateway.url) as s:
        await wait_for_tools(s, ALL_TOOLS)
        got = await s.complete(types.PromptReference(name="alpha__greet"), argument)
        assert got.completion.values == expected.completion.values


async def test_two_sessions_see_the_same_catalog(gateway: Vigil) -> None:
    async with http_session(gateway.url) as one, http_session(gateway.url) as two:
        await wait_for_tools(one, ALL_TOOLS)
        await wait_for_tools(two, ALL_TOOLS)
        assert await call_text(one, "alpha__whoami") == "alpha"
        assert await call_text(two, "beta__whoami") == "beta"


async def test_naming_none_serves_plain_names(vigil: Callable[..., Vigil], demo_bin: Path) -> None:
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], naming="none")
    async with http_session(gw.url) as s:
        listed = await wait_for_tools(s, set(DEMO_TOOLS))
        assert listed == set(DEMO_TOOLS)
        assert await call_text(s, "whoami") == "alpha"
        assert "greet" in {p.name for p in await list_all(s, "prompts")}


async def test_custom_separator(vigil: Callable[..., Vigil], demo_bin: Path) -> None:
    gw = vigil([stdio_backend("alpha", demo_bin, demo_stdio_args("alpha"))], separator=".")
    async with http_session(gw.url) as s:
        listed = await wait_for_tools(s, prefixed("alpha", DEMO_TOOLS, "."))
        assert listed == prefixed("alpha", DEMO_TOOLS, ".")
        assert await call_text(s, "alpha.whoami") == "alpha"


async def test_lists_are_paged_and_cursors_give_every_item(
    vigil: Callable[..., Vigil], demo_http: Callable[..., DemoHttp], demo_bin: Path
) -> None:
    beta = demo_http("beta")
    gw = vigil(
        [stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")), http_backend("beta", beta.url)],
        page_size=5,
    )
    async with http_session(gw.url) as s:
        await wait_for_tools(s, ALL_TOOLS)
        first = await s.list_tools()
        assert len(first.tools) <= 5 and first.next_cursor, f"no paging with page_size = 5: {len(first.tools)} tools"
        names = [t.name for t in await list_all(s, "tools")]
        assert len(names) == len(set(names)), f"an item came twice across pages: {sorted(names)}"
        assert set(names) == ALL_TOOLS


async def test_stdio_front_end(
    demo_http: Callable[..., DemoHttp], demo_bin: Path, vigil_bin: Path, tmp_path: Path
) -> None:
    """`vigil stdio` serves the same catalog to a client that launches it."""
    beta = demo_http("beta")
    config = tmp_path / "vigil.toml"
    backends = [stdio_backend("alpha", demo_bin, demo_stdio_args("alpha")), http_backend("beta", beta.url)]
    config.write_text(render_config({"listen": f"127.0.0.1:{free_port()}"}, backends), encoding="utf-8")
    async with stdio_session(vigil_bin, ["stdio", "--config", str(config)], tmp_path / "vigil-stdio.log") as s:
        await wait_for_tools(s, ALL_TOOLS)
        assert await call_text(s, "alpha__whoami") == "alpha"
        assert await call_text(s, "beta__add", {"a": 20, "b": 22}) == "42"
        assert text_of(await s.read_resource("demo://beta/readme")) == "Hello from beta"
