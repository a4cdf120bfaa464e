"""A backend's configured `roots`: what Vigil answers a `roots/list` that
no client asks through a call of its own.

server-filesystem asks its client for roots right after `initialized` and
narrows the directories it allows to them. Through Vigil that request comes
on the shared session, outside any client's call, so with nothing
configured the server kept the directory of its command line. With
`roots = [ROOT/docs]` it is narrowed as it is by a client that answers
those roots directly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import types

from harness import Gateways, stdio_backend
from reference import wire
from support import call_text, http_session, poll, stdio_session, wait_for_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "fs-root"
    (r / "docs").mkdir(parents=True)
    (r / "docs" / "a.md").write_text("# a\n")
    (r / "secret.txt").write_text("not for this client\n")
    return r


async def test_configured_roots_narrow_a_stdio_server_as_a_client_would(
    vigil: Gateways, root: Path, tmp_path: Path
) -> None:
    server = wire.filesystem(root)
    docs = root / "docs"

    async def answer_docs(_ctx: object) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=docs.as_uri())])

    async with stdio_session(
        Path(server.command), server.args, tmp_path / "direct.log", list_roots_callback=answer_docs
    ) as s:
        direct = await poll(
            lambda: call_text(s, "list_allowed_directories"),
            lambda text: str(docs) in text,
            "the server narrowed to the client's roots",
        )

    gw = vigil([{**stdio_backend(server.name, server.command, server.args), "roots": [str(docs)]}])
    async with http_session(gw.url) as s:
        await wait_for_tools(s, {"filesystem__list_allowed_directories"})
        via = await poll(
            lambda: call_text(s, "filesystem__list_allowed_directories"),
            lambda text: str(docs) in text,
            "the server narrowed to the configured roots",
        )
    assert via == direct, f"through Vigil {via!r}, directly {direct!r}"
    assert str(root) + "\n" not in via and not via.rstrip().endswith(str(root)), via
