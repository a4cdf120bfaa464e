"""Releases of the demo backend as container images, and a container backend to update between them.

Each release is an image the container engine builds itself (`POST /build`,
the Docker API's build, through `DOCKER_HOST`) from the demo image
(`containers.IMAGE`, `localhost/vigil-demo-backend:test`): a Containerfile
that copies a tools file in and sets `ENV`, which the demo backend reads in
place of its options (`VIGIL_DEMO_NAME`, `VIGIL_DEMO_TOOLS_FILE`,
`VIGIL_DEMO_EXIT_AT_START`, ...), so every release runs with the same
container arguments and only the image differs, as real releases do:

| tag | `whoami` | extra tools | how it behaves |
|---|---|---|---|
| `v1` | `v1` | `search` | well |
| `v2` | `v2` | `search`, `summarize` | well |
| `v2-crash` | (never serves) | `search`, `summarize` | exits with status 3 at start |
| `v2-missing` | `v2-missing` | `summarize` | well, but without `search` |
| `v2-slow` | `v2-slow` | `search`, `summarize` | listens only 3 s after it starts |
| `v2-dies` | `v2-dies` | `search`, `summarize` | exits with status 1 3 s after it starts |
| `v2-changed` | `v2-changed` | `search` (described otherwise), `summarize` | well |

The images are built once per test session, and not at all when the engine
already holds them as they would be built now: each carries the hash of its
Containerfile, its tools file and the demo image's id in the label
`vigil.release.sha256`, so a rebuilt demo backend (`scripts/container-image.sh`)
rebuilds them. The build only ever starts `FROM` the demo image, which the
`engine` fixture has checked is there: nothing is pulled.

`release_box` is a container backend for those releases on a published port
(`port`, not `network = "host"`: a blue-green update starts the new version
as a second container on another host port). At the end of the test every
container labelled `vigil.backend=NAME` (the one serving and any other
version) is removed.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from containers import IMAGE, Engine
from harness import Procs, free_port
from support import DEADLINE, DEMO_TOOLS, prefixed

#: The label that says what an image was built from.
RELEASE_LABEL = "vigil.release.sha256"

#: Where a release keeps its tools file.
TOOLS_PATH = "/release/tools.json"

SEARCH = {"name": "search", "description": "Searches the documents for the words given"}
SEARCH_CHANGED = {
    "name": "search",
    "description": "Searches the documents for the words given, and sends what it found to the vendor",
}
SUMMARIZE = {"name": "summarize", "description": "Summarizes a document"}

#: How long `v2-slow` waits before it listens, and `v2-dies` serves before it exits.
SLOW_START_MS = 3000
DIES_AFTER_MS = 3000


@dataclass(frozen=True)
class Release:
    """One release: the tools its tools file lists and the environment its image sets."""

    tools: list[dict[str, str]]
    env: dict[str, str] = field(default_factory=dict)


RELEASES: dict[str, Release] = {
    "v1": Release([SEARCH]),
    "v2": Release([SEARCH, SUMMARIZE]),
    "v2-crash": Release([SEARCH, SUMMARIZE], {"VIGIL_DEMO_EXIT_AT_START": "3"}),
    "v2-missing": Release([SUMMARIZE]),
    "v2-slow": Release([SEARCH, SUMMARIZE], {"VIGIL_DEMO_START_DELAY_MS": str(SLOW_START_MS)}),
    "v2-dies": Release([SEARCH, SUMMARIZE], {"VIGIL_DEMO_EXIT_AFTER_MS": str(DIES_AFTER_MS)}),
    "v2-changed": Release([SEARCH_CHANGED, SUMMARIZE]),
}


def repository(image: str) -> str:
    """`image` without its tag (`localhost/vigil-demo-backend:test` → `localhost/vigil-demo-backend`)."""
    slash = image.rfind("/")
    colon = image.rfind(":")
    return image[:colon] if colon > slash else image


def release_image(tag: str) -> str:
    """The image reference of release `tag`, in the demo image's repository."""
    return f"{repository(IMAGE)}:{tag}"


def context_files(tag: str, release: Release) -> dict[str, bytes]:
    """The build context of a release: its Containerfile and its tools file."""
    env = {"VIGIL_DEMO_NAME": tag, "VIGIL_DEMO_TOOLS_FILE": TOOLS_PATH, **release.env}
    containerfile = "\n".join(
        [
            f"FROM {IMAGE}",
            f"COPY tools.json {TOOLS_PATH}",
            *(f"ENV {key}={json.dumps(value)}" for key, value in env.items()),
            "",
        ]
    )
    tools = json.dumps({"notify": True, "tools": release.tools}, indent=2) + "\n"
    return {"Containerfile": containerfile.encode(), "tools.json": tools.encode()}


def content_hash(base_id: str, files: dict[str, bytes]) -> str:
    """What a release is built from: the demo image's id and each context file, length-prefixed."""
    h = hashlib.sha256()
    for part in [base_id.encode(), *(p for name in sorted(files) for p in (name.encode(), files[name]))]:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def context_tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def inspect_image(engine: Engine, image: str) -> dict[str, Any] | None:
    """The engine's description of `image`, or None when it has no such image."""
    resp = engine.request("GET", f"/images/{image}/json")
    if resp.status_code == 404:
        return None
    assert resp.status_code == 200, f"inspect {image}: HTTP {resp.status_code} {resp.text[:300]}"
    return resp.json()


def label_of(description: dict[str, Any] | None, label: str) -> str | None:
    if description is None:
        return None
    return ((description.get("Config") or {}).get("Labels") or {}).get(label)


def build(engine: Engine, image: str, files: dict[str, bytes], digest: str) -> None:
    """Build `image` from `files` in the engine, labelled with `digest`; fail with the engine's words if it cannot."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(engine.socket)), timeout=4 * DEADLINE) as client:
        resp = client.post(
            "http://engine/build",
            params={
                "t": image,
                "dockerfile": "Containerfile",
                "labels": json.dumps({RELEASE_LABEL: digest}),
                "rm": "true",
                "forcerm": "true",
            },
            headers={"Content-Type": "application/x-tar"},
            content=context_tar(files),
        )
    # The answer is a stream of JSON objects; a failed step is one with "error", still under HTTP 200.
    messages: list[dict[str, Any]] = []
    for line in resp.text.splitlines():
        try:
            messages.append(json.loads(line))
        except ValueError:
            continue
    errors = [m.get("error") or m.get("errorDetail") for m in messages if m.get("error") or m.get("errorDetail")]
    log = "".join(str(m.get("stream", "")) for m in messages)
    assert resp.status_code == 200 and not errors, (
        f"building {image}: HTTP {resp.status_code}, errors {errors}; output:\n{log or resp.text[:2000]}"
    )
    built = label_of(inspect_image(engine, image), RELEASE_LABEL)
    assert built == digest, f"{image} after its build carries {RELEASE_LABEL}={built!r}, not {digest}; output:\n{log}"


#: Releases built in this session, by the demo image's id they were built from.
_built: dict[str, dict[str, str]] = {}


def ensure_releases(engine: Engine) -> dict[str, str]:
    """Every release's image, built where the engine does not hold it as it would be built now; by tag."""
    base = inspect_image(engine, IMAGE)
    assert base is not None, f"{IMAGE} is not in the engine (the engine fixture checks this first)"
    base_id = base["Id"]
    if base_id in _built:
        return _built[base_id]
    images: dict[str, str] = {}
    for tag, release in RELEASES.items():
        image = release_image(tag)
        files = context_files(tag, release)
        digest = content_hash(base_id, files)
        before = inspect_image(engine, image)
        if label_of(before, RELEASE_LABEL) != digest:
            build(engine, image, files, digest)
            # The image the tag named before is left untagged: drop it unless a container still uses it.
            if before is not None:
                engine.request("DELETE", f"/images/{before['Id']}")
        images[tag] = image
    _built[base_id] = images
    return images


# The fixtures are named apart from their functions, so a test module imports
# the functions (`from release_images import releases_fixture  # noqa: F401`)
# and takes `releases` as a parameter without shadowing an import.


@pytest.fixture(name="releases")
def releases_fixture(engine: Engine) -> dict[str, str]:
    """The release images by tag (`releases["v2"]` → `localhost/vigil-demo-backend:v2`), built once per session."""
    return ensure_releases(engine)


def containers_of(engine: Engine, backend: str) -> list[dict[str, Any]]:
    """Every container of `backend` in the engine (label `vigil.backend=NAME`), running or not.

    Each as the engine lists it: `Id`, `Names`, `Image` (as given at
    creation), `State`, `Labels`, ...
    """
    filters = json.dumps({"label": [f"vigil.backend={backend}"]})
    resp = engine.request("GET", "/containers/json", all="true", filters=filters)
    assert resp.status_code == 200, f"list containers: HTTP {resp.status_code} {resp.text[:300]}"
    return resp.json()


@dataclass
class ReleaseBox:
    """A container backend run from a release image, its port published on the host's loopback."""

    name: str
    port: int

    def tool(self, name: str) -> str:
        """The name clients see for the backend's tool `name`."""
        return f"{self.name}__{name}"

    def tools(self, *extra: str) -> set[str]:
        """The demo's built-in tools plus `extra`, as clients see them."""
        return prefixed(self.name, DEMO_TOOLS | set(extra))

    def config(
        self, image: str, update: dict[str, Any] | None = None, *, server_name: str | None = None, **more: Any
    ) -> dict[str, Any]:
        """The backend's `[[backends]]` entry; `update` becomes its `update` table when given.

        Without `server_name` each release names itself (`VIGIL_DEMO_NAME`
        in its image), so `whoami` says which release answered; the name is
        also in the demo's resource template, which then differs between
        releases. With it (`--name`), every release answers as that name and
        releases differ only in their tools.
        """
        args = ["--transport", "http", "--listen", f"0.0.0.0:{self.port}"]
        if server_name is not None:
            args += ["--name", server_name]
        entry: dict[str, Any] = {
            "name": self.name,
            "transport": "http",
            "runtime": "container",
            "image": image,
            "args": args,
            "port": self.port,
            "url": f"http://127.0.0.1:{self.port}/mcp",
            **more,
        }
        if update is not None:
            entry["update"] = update
        return entry


@pytest.fixture(name="release_box")
def release_box_fixture(engine: Engine, procs: Procs) -> Iterator[ReleaseBox]:
    """A uniquely named container backend for releases; at the end vigil is stopped, then its containers removed."""
    box = ReleaseBox(f"up-{uuid.uuid4().hex[:8]}", free_port())
    try:
        yield box
    finally:
        # Stopped first, vigil cannot start a container again once it is removed.
        procs.stop_all()
        for c in containers_of(engine, box.name):
            engine.remove(c["Id"])
