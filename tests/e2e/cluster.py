"""Several Vigil replicas on one PostgreSQL: the server, and the replicas.

- `postgres` (session): Debian's PostgreSQL server, started by the tests in
  a directory of their own under /tmp on a free port (`initdb` and
  `postgres` refuse root: as root they run as Debian's `postgres` user).
  The server binaries come from `scripts/test.sh`'s `postgres-env` step
  (`VIGIL_PG_BINDIR`); without them the tests fail in CI and are skipped
  elsewhere.
- `pg_url`: a fresh, empty database per test on it.
- `replicas`: starts `vigil serve` replicas sharing one database and one
  cluster key, each with its own config file, ports and data directory.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness import Procs, Vigil, free_port, render_config, wait_api, wait_http

SETUP = "run scripts/test.sh (its postgres-env step installs Debian's postgresql)"


def pg_bindir() -> Path:
    """`VIGIL_PG_BINDIR`, else the newest /usr/lib/postgresql/N/bin."""
    if d := os.environ.get("VIGIL_PG_BINDIR"):
        return Path(d)
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not dirs:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not installed: {SETUP}", pytrace=False)
        pytest.skip(f"PostgreSQL is not installed: {SETUP}")
    return Path(dirs[-1])


def _as_postgres() -> dict[str, Any]:
    """`initdb` and `postgres` refuse uid 0: as root, Debian's `postgres` user."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


@dataclass
class Postgres:
    bindir: Path
    #: Short, under /tmp: the server's unix socket lives here (107 bytes at most).
    root: Path
    port: int
    proc: subprocess.Popen[bytes]

    def url(self, db: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def psql(self, sql: str, db: str = "postgres") -> str:
        """Runs `sql`; its rows as `a|b` lines."""
        out = subprocess.run(
            [self.bindir / "psql", "-X", "-tA", "-v", "ON_ERROR_STOP=1",
             "-h", str(self.root), "-p", str(self.port), "-U", "postgres", "-d", db, "-c", sql],
            check=True, capture_output=True, text=True, timeout=60)
        return out.stdout.strip()

    def stop(self) -> None:
        """A fast shutdown (SIGINT): connections are ended, the data kept."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def start(self) -> None:
        """Starts the server again on the same data and port."""
        self.proc = _spawn(self.bindir, self.root, self.port)


def _spawn(bindir: Path, root: Path, port: int) -> subprocess.Popen[bytes]:
    log = open(root / "postgres.log", "ab")
    proc = subprocess.Popen(
        [bindir / "postgres", "-D", root / "data", "-p", str(port), "-k", root,
         "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
         "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
         "-c", "max_connections=300"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **_as_postgres())
    deadline = time.monotonic() + 60
    while subprocess.run([bindir / "pg_isready", "-q", "-h", str(root), "-p", str(port)]).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("postgres did not start:\n" + (root / "postgres.log").read_text())
        time.sleep(0.05)
    return proc


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    bindir = pg_bindir()
    # Not pytest's tmp dir: it is 0700 root, which `postgres` cannot enter.
    root = Path(tempfile.mkdtemp(prefix="vigil-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    subprocess.run(
        [bindir / "initdb", "-D", root / "data", "-U", "postgres", "--auth=trust",
         "--no-sync", "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions"],
        check=True, capture_output=True, **_as_postgres())
    port = free_port()
    pg = Postgres(bindir, root, port, _spawn(bindir, root, port))
    try:
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(postgres: Postgres) -> str:
    name = "t_" + uuid.uuid4().hex[:12]
    postgres.psql(f"CREATE DATABASE {name}")
    return postgres.url(name)


def new_key() -> str:
    return secrets.token_hex(32)


@dataclass
class Replicas:
    """`vigil serve` replicas sharing `pg_url` and one cluster key."""

    procs: Procs
    vigil_bin: Path
    dir: Path
    pg_url: str
    key: str = field(default_factory=new_key)
    started: dict[str, Vigil] = field(default_factory=dict)

    def start(
        self,
        name: str,
        backends: list[dict[str, Any]],
        *,
        lease: str = "3s",
        previous_key: str | None = None,
        key: str | None = None,
        **extra: Any,
    ) -> Vigil:
        """Replica `name` (its `[cluster] replica`), serving `backends`."""
        home = self.dir / name
        home.mkdir(exist_ok=True)
        port, api_port = free_port(), free_port()
        cluster: dict[str, Any] = {"replica": name, "key_env": "VIGIL_CLUSTER_KEY", "lease": lease}
        env = {"VIGIL_STORE_URL": self.pg_url, "VIGIL_CLUSTER_KEY": key or self.key}
        if previous_key is not None:
            cluster["previous_key_env"] = "VIGIL_CLUSTER_KEY_OLD"
            env["VIGIL_CLUSTER_KEY_OLD"] = previous_key
        extra.setdefault("freshness", {"debounce": "100ms"})
        top = {
            "listen": f"127.0.0.1:{port}",
            **extra,
            "store": {"url_env": "VIGIL_STORE_URL"},
            "cluster": cluster,
            "api": {"listen": f"127.0.0.1:{api_port}", **extra.pop("api", {})},
        }
        config = home / "vigil.toml"
        config.write_text(render_config(top, backends), encoding="utf-8")
        proc = self.procs.start(f"vigil-{name}", [self.vigil_bin, "serve", "--config", config], env=env)
        gw = Vigil(port, proc, config, api_port)
        wait_http(gw.url, proc, f"replica {name}")
        wait_api(gw.api_base, proc)
        self.started[name] = gw
        return gw

    def kill(self, name: str) -> None:
        """SIGKILL: the replica dies without a word (no lease released)."""
        gw = self.started[name]
        os.kill(gw.proc.pid, signal.SIGKILL)
        gw.proc.popen.wait(30)


@pytest.fixture
def replicas(procs: Procs, vigil_bin: Path, tmp_path: Path, pg_url: str) -> Replicas:
    return Replicas(procs, vigil_bin, tmp_path, pg_url)



def nginx_bin() -> Path:
    """`VIGIL_NGINX`, else Debian's /usr/sbin/nginx."""
    path = Path(os.environ.get("VIGIL_NGINX", "/usr/sbin/nginx"))
    if not path.exists():
        message = f"nginx is not installed at {path}: run scripts/test.sh (its nginx-env step installs Debian's nginx)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


@dataclass
class Nginx:
    """Debian's nginx, round-robin over replicas, no affinity."""

    port: int
    dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def upstreams(self, method: str) -> list[str]:
        """The upstream (`127.0.0.1:PORT`) of each logged request of `method`, in order."""
        log = self.dir / "access.log"
        if not log.exists():
            return []
        out = []
        for line in log.read_text().splitlines():
            m, _, upstream = line.partition(" ")
            if m == method:
                out.append(upstream.split(",")[-1].strip())
        return out


def start_nginx(procs: Procs, home: Path, upstreams: list[int]) -> Nginx:
    """An nginx in `home` proxying `/` to `upstreams` (ports on 127.0.0.1) round-robin.

    Streams are not buffered (SSE passes as it comes); a connection refused
    by a dead replica sends the request to the next one (a request already
    sent to a replica that dies is not retried: its client sees the error).
    """
    home.mkdir(exist_ok=True)
    port = free_port()
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;" for p in upstreams)
    user = "user root root;" if os.geteuid() == 0 else ""
    conf = home / "nginx.conf"
    conf.write_text(
        f"""{user}
worker_processes 1;
daemon off;
pid {home}/nginx.pid;
error_log {home}/error.log info;
events {{ worker_connections 1024; }}
http {{
  log_format upstream '$request_method $upstream_addr $status';
  access_log {home}/access.log upstream;
  client_body_temp_path {home}/body;
  proxy_temp_path {home}/proxy;
  fastcgi_temp_path {home}/fastcgi;
  uwsgi_temp_path {home}/uwsgi;
  scgi_temp_path {home}/scgi;
  upstream vigil {{
{servers}
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://vigil;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 1h;
      proxy_connect_timeout 2s;
      proxy_next_upstream error timeout;
    }}
  }}
}}
""",
        encoding="utf-8",
    )
    proc = procs.start("nginx", [nginx_bin(), "-c", conf, "-p", home])
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if not proc.alive():
                pytest.fail(f"nginx exited: {proc.stderr()}\n{(home / 'error.log').read_text() if (home / 'error.log').exists() else ''}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail("nginx did not listen", pytrace=False)
            time.sleep(0.05)
    return Nginx(port, home)
