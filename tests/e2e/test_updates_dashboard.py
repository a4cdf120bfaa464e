"""The dashboard's view of an update (issue 33), in headless Chromium, with
real container releases (`release_images.py`) and the official Python SDK as
the client.

A container backend holds updates whose catalog changes
(`on_catalog_change = "hold"`); both releases answer as one server name, so
`v2-changed` differs from `v1` only in its tools (`search` described
otherwise, `summarize` added), as in `test_updates.py`:

- an update started through the API shows on the open page without a
  reload: held, from → to, the strategy, who started it, and the diff
  naming the changed tool and the added one;
- the operator's "abort update" rolls it back: the card says so and why
  (aborted by the operator), v1 serves on;
- a second update is learned from the event stream; a viewer's page shows
  it held but has no buttons;
- the operator's "approve update" lets it through: the card says it
  succeeded and who approved it, and clients get the new release's tools;
- a release that exits at start is rolled back by itself: the open page
  follows it there and says why, and so does a page opened afterwards.

The page is read as text; every wait has a deadline (`browser.Page.wait`).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from browser import Page
from harness import Gateways, Vigil
from release_images import (  # noqa: F401 - fixtures
    SEARCH,
    SEARCH_CHANGED,
    ReleaseBox,
    release_box_fixture,
    releases_fixture,
)
from support import ControlApi, http_session, list_all, short, wait_for_tools
from test_updates import QUICK, start_update, update_of, wait_update

pytestmark = pytest.mark.anyio

OPERATOR = {"name": "alice", "token": "alice-operator-token-0123456789ab", "role": "operator"}
VIEWER = {"name": "watcher", "token": "viewer-token-0123456789abcdef", "role": "viewer"}


def update_view(page: Page, backend: str) -> dict[str, Any] | None:
    """The card's update section as the page shows it (None: no card yet)."""
    return page.js(
        """
        const card = document.querySelector(`.backend[data-backend="${arguments[0]}"]`);
        if (!card) return null;
        const u = card.querySelector(".update");
        const text = (css) => card.querySelector(css).innerText.trim();
        return {
            shown: u.checkVisibility(),
            id: u.dataset.updateId || null,
            title: text(".update-title"),
            outcome: text(".update-outcome"),
            from: text(".update-from"),
            to: text(".update-to"),
            meta: text(".update-meta"),
            diff: [...card.querySelectorAll(".update-diff li")].map((li) => li.innerText.trim()),
            buttons: [...card.querySelectorAll("button[data-action]")]
                .filter((b) => b.checkVisibility())
                .map((b) => ({
                    action: b.dataset.action, text: b.innerText.trim(), label: b.getAttribute("aria-label"),
                })),
        };
        """,
        backend,
    )


def update_buttons(view: dict[str, Any] | None) -> list[str]:
    return [b["action"] for b in (view or {}).get("buttons", []) if b["action"].endswith("-update")]


def open_as(page: Page, gw: Vigil, token: str, backend: str) -> None:
    """A fresh page with `token`, once the backend's card is on it."""
    page.open("about:blank")
    page.open(f"{gw.api_base}/ui#token={token}")
    page.wait(lambda: update_view(page, backend), lambda v: v is not None, f"{backend}'s card")


def wait_view(page: Page, backend: str, until: Any, what: str) -> dict[str, Any]:
    return page.wait(lambda: update_view(page, backend), lambda v: v is not None and until(v), what)


def click(page: Page, backend: str, action: str) -> None:
    [button] = page.all(f'button[data-action="{action}"][data-backend="{backend}"]')
    button.click()


async def test_the_dashboard_shows_a_held_update_and_an_operator_aborts_then_approves_it(
    vigil: Gateways, releases: dict[str, str], release_box: ReleaseBox, browser: Page
) -> None:
    box = release_box
    v1, changed = releases["v1"], releases["v2-changed"]
    gw = vigil(
        [box.config(v1, update={**QUICK, "on_catalog_change": "hold"}, server_name="held")],
        api={"tokens": [OPERATOR, VIEWER]},
    )
    api = ControlApi(gw.api_base, OPERATOR["token"])

    async def search_description() -> str | None:
        return {t.name: t.description for t in await list_all(s, "tools")}.get(box.tool("search"))

    async with http_session(gw.url) as s:
        await wait_for_tools(s, box.tools("search"))
        await api.wait_state(box.name, "running")

        # No update yet: no update section, no update buttons.
        await anyio.to_thread.run_sync(open_as, browser, gw, OPERATOR["token"], box.name)
        before = await anyio.to_thread.run_sync(update_view, browser, box.name)
        assert before is not None and not before["shown"] and update_buttons(before) == [], before

        # Started through the API: the open page shows it held, with the diff.
        first = await start_update(api, box.name, changed)
        await wait_update(api, box.name, first["id"], "held")

        def held_on_page(update_id: str) -> dict[str, Any]:
            return wait_view(
                browser,
                box.name,
                lambda v: v["shown"] and v["id"] == update_id and v["outcome"].startswith("held:")
                and update_buttons(v) == ["approve-update", "abort-update"],
                f"the card to show update {update_id} held, with approve and abort",
            )

        view = await anyio.to_thread.run_sync(held_on_page, first["id"])
        assert view["title"] == "Update in progress", view
        assert "waiting for an operator to approve or abort it" in view["outcome"], view
        assert (view["from"], view["to"]) == (v1, changed), view
        assert view["meta"].startswith("blue-green · started by alice at "), view
        assert view["diff"] == ["tools changed: search", "tools added: summarize"], view
        labels = {b["action"]: (b["text"], b["label"]) for b in view["buttons"]}
        assert labels["approve-update"] == ("approve update", f"approve update of {box.name}"), labels
        assert labels["abort-update"] == ("abort update", f"abort update of {box.name}"), labels
        await anyio.to_thread.run_sync(browser.screenshot, "dashboard-update-held")

        # Abort: the card says it was rolled back, and why; v1 serves on.
        await anyio.to_thread.run_sync(click, browser, box.name, "abort-update")

        def rolled_back_on_page() -> dict[str, Any]:
            return wait_view(
                browser,
                box.name,
                lambda v: v["id"] == first["id"] and v["outcome"] == "rolled back: aborted by alice",
                "the card to say the update was rolled back, aborted by alice",
            )

        view = await anyio.to_thread.run_sync(rolled_back_on_page)
        assert view["shown"] and view["title"] == "Last update", view
        assert update_buttons(view) == [], view
        assert " · ended at " in view["meta"], view
        done = await wait_update(api, box.name, first["id"])
        assert done["state"] == "rolled_back" and done["reason"] == "aborted by alice", short(done)
        assert await search_description() == SEARCH["description"]

        # A second update, learned from the event stream (no reload).
        second = await start_update(api, box.name, changed)
        await wait_update(api, box.name, second["id"], "held")
        await anyio.to_thread.run_sync(held_on_page, second["id"])

        # A viewer sees it held, and no button at all.
        def viewer_page() -> dict[str, Any]:
            open_as(browser, gw, VIEWER["token"], box.name)
            return wait_view(
                browser,
                box.name,
                lambda v: v["shown"] and v["id"] == second["id"] and v["outcome"].startswith("held:"),
                "the viewer's card to show the update held",
            )

        view = await anyio.to_thread.run_sync(viewer_page)
        assert view["buttons"] == [], view
        assert view["diff"] == ["tools changed: search", "tools added: summarize"], view

        # The operator's page, opened now, reads the held update at once; approve.
        await anyio.to_thread.run_sync(open_as, browser, gw, OPERATOR["token"], box.name)
        await anyio.to_thread.run_sync(held_on_page, second["id"])
        await anyio.to_thread.run_sync(click, browser, box.name, "approve-update")

        def succeeded_on_page() -> dict[str, Any]:
            return wait_view(
                browser,
                box.name,
                lambda v: v["id"] == second["id"] and v["outcome"] == "succeeded",
                "the card to say the update succeeded",
            )

        view = await anyio.to_thread.run_sync(succeeded_on_page)
        assert view["title"] == "Last update" and update_buttons(view) == [], view
        assert "approved by alice" in view["meta"], view
        assert (view["from"], view["to"]) == (v1, changed), view
        await anyio.to_thread.run_sync(browser.screenshot, "dashboard-update-succeeded")

        done = await wait_update(api, box.name, second["id"])
        assert done["state"] == "succeeded" and done["approved_by"] == "alice", short(done)
        await wait_for_tools(s, box.tools("search", "summarize"))
        assert await search_description() == SEARCH_CHANGED["description"]

    assert (await update_of(api, box.name))["id"] == second["id"]
    entries = await api.audit()
    actions = [e["action"] for e in entries if e["principal"] == "alice"]
    assert "abort_update" in actions and "approve_update" in actions, entries
    assert browser.console_errors() == [], browser.console_errors()


async def test_a_rolled_back_update_stays_on_the_card_with_its_reason_across_a_reload(
    vigil: Gateways, releases: dict[str, str], release_box: ReleaseBox, browser: Page
) -> None:
    """A release that exits at start: the open page follows the update to its
    rollback by itself (no action, no hold) and says why; a page opened
    afterwards shows the same last update."""
    box = release_box
    v1, crash = releases["v1"], releases["v2-crash"]
    gw = vigil([box.config(v1, update=QUICK)], api={"tokens": [OPERATOR]})
    api = ControlApi(gw.api_base, OPERATOR["token"])
    await api.wait_state(box.name, "running")
    await anyio.to_thread.run_sync(open_as, browser, gw, OPERATOR["token"], box.name)

    started = await start_update(api, box.name, crash)
    done = await wait_update(api, box.name, started["id"])
    assert done["state"] == "rolled_back" and done["reason"], short(done)

    def rolled_back_on_page() -> dict[str, Any]:
        return wait_view(
            browser,
            box.name,
            lambda v: v["shown"] and v["id"] == started["id"] and v["outcome"] == f"rolled back: {done['reason']}",
            "the card to say the update was rolled back, and why",
        )

    view = await anyio.to_thread.run_sync(rolled_back_on_page)
    assert view["title"] == "Last update" and update_buttons(view) == [], view
    assert (view["from"], view["to"]) == (v1, crash), view
    assert view["diff"] == [], "the release never listed: no diff"

    # A page opened now reads the last update from the backend's history.
    await anyio.to_thread.run_sync(open_as, browser, gw, OPERATOR["token"], box.name)
    again = await anyio.to_thread.run_sync(rolled_back_on_page)
    assert again == view, (again, view)
    assert browser.console_errors() == [], browser.console_errors()
