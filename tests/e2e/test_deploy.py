"""Vigil as users deploy it: the container image (deploy/Containerfile,
built by scripts/vigil-image.sh in the setup step) and the Kubernetes
manifests (deploy/kubernetes).

- the manifests validate offline against the Kubernetes schemas
  (PyPI's kubernetes-validate, strict: unknown fields are errors), and
  what they promise matches what Vigil reads: the ports of its config,
  the probe paths it answers, the Secret keys its config names, a config
  `vigil check` accepts;
- a replica started from the image joins a cluster of replicas on
  PostgreSQL and serves: its probes answer without a token and whatever
  the Host, it adopts a session another replica opened, and its data
  directory is its user's.
"""

from __future__ import annotations

import io
import os
import tarfile
import tomllib
import uuid
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from cluster import Replicas, pg_url, postgres, replicas  # noqa: F401 - fixtures
from containers import Engine
from harness import REPO, free_port, http_backend, render_config, run_vigil
from support import DEADLINE, ControlApi, call_text, http_session, poll, wait_for_tools

pytestmark = pytest.mark.anyio

MANIFESTS = REPO / "deploy" / "kubernetes" / "vigil.yaml"
IMAGE = os.environ.get("VIGIL_IMAGE", "localhost/vigil:test")


def documents() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d}


def test_the_manifests_validate_against_the_kubernetes_schemas() -> None:
    docs = documents()
    assert set(docs) >= {"Secret", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"}, set(docs)
    version = kubernetes_validate.latest_version()
    for kind, doc in docs.items():
        kubernetes_validate.validate(doc, version, strict=True)
    # The validation can fail: a misspelt field is refused.
    broken = yaml.safe_load(yaml.safe_dump(docs["Deployment"]))
    broken["spec"]["replica"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)
    deployment = docs["Deployment"]["spec"]
    assert deployment["replicas"] == 3
    assert "sessionAffinity" not in docs["Service"]["spec"], "no affinity needed"


def test_the_manifests_match_what_vigil_reads(vigil_bin: Path, tmp_path: Path) -> None:
    docs = documents()
    config_text = docs["ConfigMap"]["data"]["vigil.toml"]
    config = tomllib.loads(config_text)
    container = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["mcp"] == int(config["listen"].rsplit(":", 1)[1]), (ports, config["listen"])
    assert ports["api"] == int(config["api"]["listen"].rsplit(":", 1)[1]), (ports, config["api"])
    probes = {name: container[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {p["port"] for p in probes.values()} == {"mcp"}
    assert {p["path"] for p in probes.values()} == {"/healthz", "/readyz"}
    # Every variable the config reads is a key of the Secret, and no more.
    wanted = (
        {config["store"]["url_env"], config["cluster"]["key_env"]}
        | {t["token_env"] for t in config["api"]["tokens"] if "token_env" in t}
        | {k["key_env"] for k in config["auth"]["keys"]}
    )
    assert set(docs["Secret"]["stringData"]) == wanted
    assert container["envFrom"] == [{"secretRef": {"name": docs["Secret"]["metadata"]["name"]}}]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert container["args"][-1] == f"{mount['mountPath']}/vigil.toml"
    # Vigil accepts the config, with the Secret's variables set.
    path = tmp_path / "vigil.toml"
    path.write_text(config_text)
    env = {
        config["store"]["url_env"]: "postgres://vigil:pw@127.0.0.1:5432/vigil",
        config["cluster"]["key_env"]: "0" * 64,
        **{t["token_env"]: uuid.uuid4().hex + uuid.uuid4().hex for t in config["api"]["tokens"]},
        **{k["key_env"]: uuid.uuid4().hex + uuid.uuid4().hex for k in config["auth"]["keys"]},
    }
    checked = run_vigil(vigil_bin, ["check", "--config", str(path)], tmp_path, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_the_probe_paths_answer_without_a_token_and_any_host(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
) -> None:
    backend = demo_http("alpha")
    gw = replicas.start("vigil-a", [http_backend("alpha", backend.url)])
    async with httpx.AsyncClient(timeout=DEADLINE) as http:
        for path, body in (("/healthz", "ok"), ("/readyz", "ready")):
            r = await http.get(f"{gw.base}{path}", headers={"Host": "10.1.2.3:8080"})
            assert r.status_code == 200 and r.text.strip() == body, (path, r.status_code, r.text)
        # /mcp itself still checks the Host.
        r = await http.post(gw.url, headers={"Host": "10.1.2.3:8080"}, json={})
        assert r.status_code == 403, r.text


def data_owner(engine: Engine, container: str) -> int:
    resp = engine.request("GET", f"/containers/{container}/archive?path=/data")
    assert resp.status_code == 200, resp.text[:300]
    with tarfile.open(fileobj=io.BytesIO(resp.content)) as tar:
        return next(m for m in tar.getmembers() if m.name.rstrip("/") == "data").uid


async def test_a_replica_from_the_image_joins_the_cluster_and_serves(
    replicas: Replicas,  # noqa: F811
    demo_http: Any,
    engine: Engine,
    tmp_path: Path,
) -> None:
    image = engine.request("GET", f"/images/{IMAGE}/json")
    assert image.status_code == 200, f"{IMAGE} is not built: run scripts/test.sh (its container-engine step builds it)"
    backend = demo_http("alpha")
    backends = [http_backend("alpha", backend.url)]
    a = replicas.start("vigil-a", backends)
    port, api_port = free_port(), free_port()
    home = tmp_path / "boxed"
    home.mkdir()
    top = {
        "listen": f"127.0.0.1:{port}",
        "data_dir": "/data",
        "freshness": {"debounce": "100ms"},
        "store": {"url_env": "VIGIL_STORE_URL"},
        "cluster": {"replica": "vigil-box", "key_env": "VIGIL_CLUSTER_KEY", "lease": "3s"},
        "api": {"listen": f"127.0.0.1:{api_port}"},
    }
    (home / "vigil.toml").write_text(render_config(top, backends))
    os.chmod(home / "vigil.toml", 0o644)
    name = f"vigil-image-{uuid.uuid4().hex[:8]}"
    body = {
        "Image": IMAGE,
        "Env": [f"VIGIL_STORE_URL={replicas.pg_url}", f"VIGIL_CLUSTER_KEY={replicas.key}", "RUST_LOG=info,vigil=debug"],
        "HostConfig": {"NetworkMode": "host", "Binds": [f"{home}:/etc/vigil:ro"]},
    }
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(engine.socket)), timeout=DEADLINE) as c:
        created = c.post(f"http://engine/containers/create?name={name}", json=body)
        assert created.status_code == 201, created.text
        try:
            started = c.post(f"http://engine/containers/{name}/start")
            assert started.status_code == 204, started.text
            boxed = f"http://127.0.0.1:{port}"

            async def ready() -> int:
                async with httpx.AsyncClient(timeout=2) as http:
                    return (await http.get(f"{boxed}/readyz")).status_code

            await poll(ready, lambda s: s == 200, "the replica in the image to be ready")
            await ControlApi(f"http://127.0.0.1:{api_port}").wait_state("alpha", "running")
            # A session opened on a is served by the boxed replica.
            async with httpx.AsyncClient(timeout=DEADLINE) as http:
                init = {
                    "jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
                }
                headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
                opened = await http.post(a.url, json=init, headers=headers)
                session = opened.headers["mcp-session-id"]
                on = {**headers, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
                call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "alpha__echo", "arguments": {"text": "boxed"}}}
                answered = await http.post(f"{boxed}/mcp", json=call, headers=on)
                assert answered.status_code == 200 and "boxed" in answered.text, answered.text
            async with http_session(f"{boxed}/mcp") as s:
                await wait_for_tools(s, {"alpha__echo"})
                assert await call_text(s, "alpha__echo", {"text": "hi"}) == "hi"
            assert data_owner(engine, name) == 10001, "the data directory is Vigil's user's"
        finally:
            logs = c.get(f"http://engine/containers/{name}/logs?stdout=1&stderr=1")
            (tmp_path / "boxed.log").write_bytes(logs.content)
            c.delete(f"http://engine/containers/{name}?force=true")
