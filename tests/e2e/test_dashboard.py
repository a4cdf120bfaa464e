"""The dashboard (`/ui`) in headless Chromium, live from `GET /api/v1/events`.

- The proof of the whole product: a backend runs as a container; the test
  kills it through the engine; Vigil restarts it by itself; the `discord`
  notifier plugin's alert reaches a local receiver; and the open dashboard
  shows the backend go running → offline → restarting → running without a
  reload. A screenshot is kept (see `browser.ARTIFACTS`).
- A viewer's dashboard has no mutating buttons and the API refuses the
  viewer's actions; an operator's restart button restarts the backend.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from browser import Page
from containers import Box, Engine
from harness import Gateways, demo_stdio_args, stdio_backend
from support import ControlApi, Receiver, find_run, plugin_dir, plugins_by_name, poll

pytestmark = pytest.mark.anyio

VIEWER = {"name": "watcher", "token": "viewer-token-0123456789abcdef", "role": "viewer"}
OPERATOR = {"name": "oncall", "token": "operator-token-0123456789abcdef", "role": "operator"}

#: What the dashboard must show after the kill, in order.
SEEN_CYCLE = ["running", "offline", "restarting", "starting", "running"]


def card_state(page: Page, backend: str) -> str | None:
    found = page.all(f'[data-backend="{backend}"] .state[data-state]')
    return found[0].get_attribute("data-state") if found else None


def timeline(page: Page, backend: str) -> list[dict[str, Any]]:
    """The backend's timeline as the page shows it, oldest first."""
    items = page.js(
        """
        const list = document.querySelector(`[data-backend="${arguments[0]}"] .timeline`);
        if (!list) return [];
        return [...list.querySelectorAll('[data-to]')].map((el) => ({
            from: el.dataset.from, to: el.dataset.to, at: Number(el.dataset.at),
        }));
        """,
        backend,
    )
    # Sorted by time; equal times keep the page's order, which is
    # chronological when the page lists oldest first and reversed otherwise.
    if len(items) > 1 and items[0]["at"] > items[-1]["at"]:
        items.reverse()
    return sorted(items, key=lambda t: t["at"])


def path_of(items: list[dict[str, Any]]) -> list[str]:
    return [items[0]["from"], *[t["to"] for t in items]] if items else []


def discord_manifest(url: str) -> str:
    return (
        '[http]\nallowed_hosts = ["127.0.0.1:*"]\n[limits]\ndeadline = "3s"\n'
        f'[config]\nurl = "{url}"\n[filter]\nmin_severity = "info"\n'
    )


async def test_a_killed_container_is_restarted_alerted_and_shown_live(
    vigil: Gateways, engine: Engine, box: Box, built_plugins: Path, browser: Page, tmp_path: Path
) -> None:
    rx = Receiver()
    try:
        d = plugin_dir(tmp_path, built_plugins, ["discord"])
        (d / "discord.toml").write_text(discord_manifest(f"http://127.0.0.1:{rx.port}/discord"))
        # A 2 s backoff keeps `restarting` on screen long enough to see.
        gw = vigil(
            [box.config()],
            api={"tokens": [VIEWER, OPERATOR]},
            plugins={"dir": str(d)},
            restart={"base": "2s", "jitter": 0.0},
        )
        api = ControlApi(gw.api_base, OPERATOR["token"])
        await api.wait_state(box.name, "running")
        await poll(lambda: plugins_by_name(api), lambda p: p.get("discord", {}).get("state") == "active", "discord")

        def open_dashboard() -> None:
            browser.open(f"{gw.api_base}/ui#token={OPERATOR['token']}")
            browser.wait(lambda: card_state(browser, box.name), lambda s: s == "running", "the card to say running")
            # Survives only as long as the page is not reloaded.
            browser.js("window.__vigilProof = 'no reload';")

        await anyio.to_thread.run_sync(open_dashboard)
        before = len(await anyio.to_thread.run_sync(timeline, browser, box.name))

        await anyio.to_thread.run_sync(engine.kill, box.container)

        def seen_cycle() -> list[dict[str, Any]]:
            return browser.wait(
                lambda: timeline(browser, box.name),
                lambda items: (
                    find_run([{"from": t["from"], "to": t["to"]} for t in items[max(before - 1, 0) :]], SEEN_CYCLE)
                    is not None
                    and card_state(browser, box.name) == "running"
                ),
                f"the dashboard to show {' → '.join(SEEN_CYCLE)}",
            )

        items = await anyio.to_thread.run_sync(seen_cycle)
        assert browser.js("return window.__vigilProof;") == "no reload", "the page was reloaded"
        shot = await anyio.to_thread.run_sync(browser.screenshot, "dashboard-container-restart")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert not browser.console_errors(), browser.console_errors()

        # Vigil restarted it by itself, and says so in the API too.
        detail = await api.instance(box.name)
        assert detail["restart_count"] >= 1 and detail["state"] == "running", detail
        assert "offline" in path_of(items)

        # The Discord-shaped alert for the kill reached the receiver.
        def offline_alerts() -> list[Any]:
            return [b for b, _ in rx.on("/discord") if "offline" in json.dumps(b)]

        [alert, *_] = await poll(lambda: anyio.to_thread.run_sync(offline_alerts), bool, "the Discord alert")
        [embed] = alert["embeds"]
        assert box.name in embed["title"] and "offline" in embed["title"], embed
        assert "137" in embed["description"] or "SIGKILL" in embed["description"], embed
    finally:
        rx.close()


async def test_viewers_see_no_actions_and_an_operators_restart_works(
    vigil: Gateways, demo_bin: Path, browser: Page
) -> None:
    gw = vigil(
        [stdio_backend("demo", demo_bin, demo_stdio_args("demo"))],
        api={"tokens": [VIEWER, OPERATOR]},
        restart={"base": "200ms", "jitter": 0.0},
    )
    viewer = ControlApi(gw.api_base, VIEWER["token"])
    operator = viewer.as_token(OPERATOR["token"])
    await viewer.wait_state("demo", "running")

    def viewer_page() -> int:
        browser.open(f"{gw.api_base}/ui#token={VIEWER['token']}")
        browser.wait(lambda: card_state(browser, "demo"), lambda s: s == "running", "the viewer's card")
        return len(browser.all("button[data-action]"))

    assert await anyio.to_thread.run_sync(viewer_page) == 0, "a viewer must get no action buttons"
    refused = await viewer.act("demo", "restart")
    assert refused.status_code == 403, refused.text

    before = (await operator.instance("demo"))["restart_count"]

    def operator_restart() -> None:
        browser.open("about:blank")  # a fresh page with the other token
        browser.open(f"{gw.api_base}/ui#token={OPERATOR['token']}")
        browser.wait(lambda: card_state(browser, "demo"), lambda s: s == "running", "the operator's card")
        [button] = browser.all('button[data-action="restart"][data-backend="demo"]')
        button.click()

    await anyio.to_thread.run_sync(operator_restart)
    after = await operator.wait_for("demo", lambda d: d["restart_count"] > before, "restarted from the dashboard")
    await operator.wait_state("demo", "running")
    entries = await operator.audit()
    assert [e for e in entries if e["principal"] == OPERATOR["name"] and e["action"] == "restart"], entries
    assert after["restart_count"] == before + 1, after

    # The page shows the restart it asked for, live.
    def restarted_on_page() -> list[dict[str, Any]]:
        return browser.wait(
            lambda: timeline(browser, "demo"),
            lambda items: any(t["to"] == "restarting" for t in items) and card_state(browser, "demo") == "running",
            "the restart on the page",
        )

    await anyio.to_thread.run_sync(restarted_on_page)
    await anyio.to_thread.run_sync(browser.screenshot, "dashboard-operator-restart")
