// A Vigil probe plugin in C: the `probe` world of vigil:plugin@0.1.0,
// through the bindings `wit-bindgen c` generates (probe.h / probe.c in the
// build directory, see build.sh).
//
// Its verdict comes from the config key `mode`, like the Rust test fixture
// tests/plugins/good-probe:
//
//   mode                 status
//   absent / "healthy"   healthy, after a successful MCP ping of the target
//                        (unhealthy("ping failed") if the ping errors)
//   "degraded"           degraded("told to degrade")
//   "unhealthy"          unhealthy("told to fail")
//   "unknown"            unknown("told to be unknown")
//   anything else        unknown("unknown mode \"...\"")
//
// `detail` is "c-probe ok for <target name>" when healthy, "c-probe mode
// <mode> for <target name>" otherwise; `latency-ms` is the ping's round trip
// when one was made. One line is logged at info level per check.
//
// Memory, per the canonical ABI: what an import returns (the config list,
// the target's name, an error) belongs to us and is freed here; what `check`
// returns is freed by the generated post-return function with free(), so
// every string in the report must come from malloc, never a literal.

// clock_gettime is POSIX, not ISO C.
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe.h"

#define PING_TIMEOUT_MS 1000

// A heap copy of a printf-style string, as a WIT string.
static probe_string_t heap_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        abort();
    }
    // +1 for vsnprintf's NUL, which the WIT string does not include.
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        abort();
    }
    va_start(ap, fmt);
    vsnprintf(buf, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return (probe_string_t){.ptr = (uint8_t *)buf, .len = (size_t)n};
}

static bool str_is(const probe_string_t *s, const char *lit) {
    size_t n = strlen(lit);
    return s->len == n && memcmp(s->ptr, lit, n) == 0;
}

// WIT strings are not NUL-terminated: print them with "%.*s".
#define STR_ARG(s) (int)(s).len, (const char *)(s).ptr

static uint32_t elapsed_ms(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)(now.tv_sec - start->tv_sec) * 1000 +
                 (now.tv_nsec - start->tv_nsec) / 1000000;
    return ms < 0 ? 0 : (uint32_t)ms;
}

// Why the ping failed, as a heap string (for the detail).
static probe_string_t describe_mcp_error(const vigil_plugin_target_mcp_error_t *e) {
    switch (e->tag) {
    case VIGIL_PLUGIN_TARGET_MCP_ERROR_TIMEOUT:
        return heap_printf("timeout after %u ms", PING_TIMEOUT_MS);
    case VIGIL_PLUGIN_TARGET_MCP_ERROR_UNAVAILABLE:
        return heap_printf("unavailable: %.*s", STR_ARG(e->val.unavailable));
    case VIGIL_PLUGIN_TARGET_MCP_ERROR_RPC:
        return heap_printf("rpc error %lld: %.*s", (long long)e->val.rpc.code,
                           STR_ARG(e->val.rpc.message));
    case VIGIL_PLUGIN_TARGET_MCP_ERROR_TRANSPORT:
        return heap_printf("transport: %.*s", STR_ARG(e->val.transport));
    default:
        return heap_printf("mcp error %d", (int)e->tag);
    }
}

void exports_vigil_plugin_prober_check(exports_vigil_plugin_prober_report_t *ret) {
    // Both lists and strings from imports are ours to free below.
    probe_list_tuple2_string_string_t config;
    vigil_plugin_host_config(&config);
    probe_string_t name;
    vigil_plugin_target_name(&name);

    // `mode` points into `config`, so it is used before config is freed.
    probe_string_t mode = {.ptr = (uint8_t *)"healthy", .len = 7};
    for (size_t i = 0; i < config.len; i++) {
        if (str_is(&config.ptr[i].f0, "mode")) {
            mode = config.ptr[i].f1;
        }
    }

    // host.log borrows its message: our own buffer, freed right after.
    probe_string_t line = heap_printf("c-probe checking %.*s (mode %.*s)", STR_ARG(name),
                                      STR_ARG(mode));
    vigil_plugin_host_log(VIGIL_PLUGIN_HOST_LEVEL_INFO, &line);
    probe_string_free(&line);

    ret->latency_ms.is_some = false;
    ret->detail.is_some = true;
    vigil_plugin_types_status_t *status = &ret->status;

    if (str_is(&mode, "healthy")) {
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        vigil_plugin_target_mcp_error_t err;
        bool ok = vigil_plugin_target_ping(PING_TIMEOUT_MS, &err);
        ret->latency_ms.is_some = true;
        ret->latency_ms.val = elapsed_ms(&start);
        if (ok) {
            status->tag = VIGIL_PLUGIN_TYPES_STATUS_HEALTHY;
            ret->detail.val = heap_printf("c-probe ok for %.*s", STR_ARG(name));
        } else {
            status->tag = VIGIL_PLUGIN_TYPES_STATUS_UNHEALTHY;
            status->val.unhealthy = heap_printf("ping failed");
            probe_string_t why = describe_mcp_error(&err);
            ret->detail.val =
                heap_printf("c-probe ping of %.*s failed: %.*s", STR_ARG(name), STR_ARG(why));
            probe_string_free(&why);
            // The error's strings were allocated for us by the import.
            vigil_plugin_target_mcp_error_free(&err);
        }
    } else {
        if (str_is(&mode, "degraded")) {
            status->tag = VIGIL_PLUGIN_TYPES_STATUS_DEGRADED;
            status->val.degraded = heap_printf("told to degrade");
        } else if (str_is(&mode, "unhealthy")) {
            status->tag = VIGIL_PLUGIN_TYPES_STATUS_UNHEALTHY;
            status->val.unhealthy = heap_printf("told to fail");
        } else if (str_is(&mode, "unknown")) {
            status->tag = VIGIL_PLUGIN_TYPES_STATUS_UNKNOWN;
            status->val.unknown = heap_printf("told to be unknown");
        } else {
            status->tag = VIGIL_PLUGIN_TYPES_STATUS_UNKNOWN;
            status->val.unknown = heap_printf("unknown mode \"%.*s\"", STR_ARG(mode));
        }
        ret->detail.val =
            heap_printf("c-probe mode %.*s for %.*s", STR_ARG(mode), STR_ARG(name));
    }

    probe_list_tuple2_string_string_free(&config);
    probe_string_free(&name);
}
