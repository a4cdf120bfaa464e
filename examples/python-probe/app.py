"""python-probe: a Vigil probe plugin written in Python.

It implements the `probe` world of `vigil:plugin@0.1.0` (wit/plugin.wit) and
behaves like the Rust `good-probe` test fixture, to show that the plugin
contract does not depend on the guest language. The verdict comes from the
config key `mode`:

| `mode`             | status                                              |
|--------------------|-----------------------------------------------------|
| absent / `healthy` | MCP `ping` of the target: healthy, or               |
|                    | unhealthy("ping failed: ...")                       |
| `degraded`         | degraded("told to degrade")                         |
| `unhealthy`        | unhealthy("told to fail")                           |
| `unknown`          | unknown("told to be unknown")                       |
| anything else      | unknown('unknown mode "..."')                       |

`detail` is "python-probe ok for <target name>" when healthy,
"python-probe mode <mode> for <target name>" otherwise. It logs one line at
info level per check.

Build with `build.sh` next to this file (componentize-py); the generated
bindings (`wit_world`, `componentize_py_types`) exist only at build time.
"""

import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, target
from wit_world.imports.vigil_plugin_types import (
    Report,
    Status_Degraded,
    Status_Healthy,
    Status_Unhealthy,
    Status_Unknown,
)

# Milliseconds the MCP ping may take. Vigil also bounds it by what is left of
# the probe's deadline (`[limits] deadline` in the manifest), so the deadline
# must be longer than this, or a slow ping becomes a restart (see README.md).
PING_TIMEOUT_MS = 1000


def describe(error) -> str:
    """Text for a `target.mcp-error`."""
    if isinstance(error, target.McpError_Timeout):
        # Vigil cuts the timeout to what is left of the deadline, so it may
        # have been shorter than asked.
        return f"no answer within {PING_TIMEOUT_MS} ms (or the deadline, if sooner)"
    if isinstance(error, target.McpError_Unavailable):
        return f"unavailable: {error.value}"
    if isinstance(error, target.McpError_Rpc):
        return f"rpc error {error.value.code}: {error.value.message}"
    if isinstance(error, target.McpError_Transport):
        return f"transport: {error.value}"
    return repr(error)


class Prober(exports.Prober):
    """The `vigil:plugin/prober` export. Vigil makes a fresh instance for
    every call, so nothing is kept between checks."""

    def check(self) -> Report:
        mode = dict(host.config()).get("mode", "healthy")
        name = target.name()
        latency_ms = None

        if mode == "healthy":
            start = time.monotonic_ns()
            try:
                target.ping(PING_TIMEOUT_MS)
            except Err as e:
                status = Status_Unhealthy(f"ping failed: {describe(e.value)}")
            else:
                latency_ms = (time.monotonic_ns() - start) // 1_000_000
                status = Status_Healthy()
        elif mode == "degraded":
            status = Status_Degraded("told to degrade")
        elif mode == "unhealthy":
            status = Status_Unhealthy("told to fail")
        elif mode == "unknown":
            status = Status_Unknown("told to be unknown")
        else:
            status = Status_Unknown(f'unknown mode "{mode}"')

        if isinstance(status, Status_Healthy):
            detail = f"python-probe ok for {name}"
        else:
            detail = f"python-probe mode {mode} for {name}"

        # One info line per check, like good-probe: the verdict and its reason.
        reason = getattr(status, "value", None)
        verdict = type(status).__name__.removeprefix("Status_").lower()
        host.log(
            host.Level.INFO,
            f"python-probe checked {name} (mode {mode}): {verdict}"
            + (f" ({reason})" if reason else ""),
        )
        return Report(status=status, latency_ms=latency_ms, detail=detail)
