//! The rules every call path applies around a routed call, in one place:
//! whether the caller may make it ([`admit`]: `[[policy]]` names and rates,
//! with the refusal audited) and what its end feeds ([`settle`]: the audit,
//! the backend's application signal, the metrics and the trace span). The typed handlers
//! (`session.rs`) and the raw path (`raw/`) both call these.

use std::time::Duration;

use crate::dataplane::outcome::Ended;

use rmcp::ErrorData as McpError;
use rmcp::model::ErrorCode;
use serde_json::json;

use crate::audit::{Outcome, PendingCall};
use crate::auth::Principal;
use crate::backend::Backend;
use crate::catalog::Kind;
use crate::policy::{Policies, Refused};

/// Whether `who` may call `name` now: the one policy decision. A name it
/// may not use gets exactly the error of an unknown one (`unknown`); a call
/// over a rate gets an error that says which and when to retry. A refusal
/// is recorded in the audit (`audit`, the call's record so far, comes back
/// when the call may go ahead).
pub(super) fn admit(
    policies: &Policies,
    who: &Principal,
    kind: Kind,
    name: &str,
    unknown: fn(&str) -> McpError,
    audit: PendingCall,
) -> Result<PendingCall, McpError> {
    let (refused, outcome) = match policies.admit(who, kind, name) {
        Ok(()) => return Ok(audit),
        Err(Refused::Denied) => (unknown(name), Outcome::Denied),
        Err(Refused::RateLimited {
            rate,
            per_tool,
            policy,
            retry_after,
        }) => (
            rate_limited(who, name, rate, per_tool, policy, retry_after),
            Outcome::RateLimited,
        ),
    };
    audit.refused("", outcome);
    Err(refused)
}

/// A `tools/call` that ended: its trace span and how long it took.
pub(super) struct ToolCall {
    pub span: tracing::Span,
    pub took: Duration,
}

/// A routed call to `backend` (`b`, when at hand) ended as `ended`: the one
/// place its end is told to the audit and, for a `tools/call` (`call`), to
/// its trace span, the backend's application signal (the health model's
/// call statistics) and the call metrics. Every call path ends here, with
/// how it ended said by the path that knows, never read back from text.
pub(super) fn settle(
    audit: PendingCall,
    backend: &str,
    b: Option<&Backend>,
    ended: Ended,
    call: Option<ToolCall>,
) {
    if let Some(call) = call {
        end_tool_call_span(&call.span, ended.trace());
        if let Some(b) = b {
            b.stats.record(ended.ok(), call.took);
            b.call_metrics.record(ended.ok(), call.took);
        }
    }
    audit.finish(backend, ended.audit());
}

/// The span of one `tools/call` to `backend`'s `tool`, exported when
/// `[telemetry]` is on (see `crate::telemetry`). At trace level, so that
/// otherwise (logs at info) it is disabled at its call site and costs the
/// call path nothing.
pub(super) fn tool_call_span(backend: &str, tool: &str) -> tracing::Span {
    tracing::trace_span!(
        target: crate::telemetry::TOOL_CALL,
        "tools/call",
        otel.kind = "client",
        backend = %backend,
        tool = %tool,
        otel.status_code = tracing::field::Empty,
        error = tracing::field::Empty,
    )
}

/// Ends a [`tool_call_span`]: `Ok` or what went wrong.
fn end_tool_call_span(span: &tracing::Span, result: Result<(), &str>) {
    match result {
        Ok(()) => {
            span.record("otel.status_code", "OK");
        }
        Err(why) => {
            span.record("error", why);
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// A call over a `[[policy]]` rate: what was limited, by which entry, and
/// `data.retryAfterSeconds` (whole seconds, at least 1) for a client or a
/// model to act on.
fn rate_limited(
    who: &Principal,
    name: &str,
    rate: crate::config::Rate,
    per_tool: bool,
    policy: usize,
    retry_after: Duration,
) -> McpError {
    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    let secs = secs.max(1);
    let (what, key) = if per_tool {
        (format!("calls of `{name}`"), "rate_per_tool")
    } else {
        ("calls".to_owned(), "rate")
    };
    McpError::new(
        ErrorCode(-32029),
        format!(
            "rate limited: {who} may make {rate} {what} (policy[{policy}].{key}); retry in {secs} s"
        ),
        Some(json!({
            "reason": "rate_limited",
            "principal": who.id(),
            "limit": rate.to_string(),
            "scope": if per_tool { "tool" } else { "principal" },
            "policy": policy,
            "retryAfterSeconds": secs,
        })),
    )
}

/// A call the raw path admitted (and began auditing) before it handed the
/// request to the typed path, which then neither admits nor audits it a
/// second time: a rate is spent and a call recorded once. Travels in the
/// HTTP request's extensions.
#[derive(Clone)]
pub(super) struct Admitted(std::sync::Arc<std::sync::Mutex<Option<PendingCall>>>);

impl Admitted {
    pub(super) fn new(audit: PendingCall) -> Self {
        Self(std::sync::Arc::new(std::sync::Mutex::new(Some(audit))))
    }

    /// The admitted call's audit record, if this request carries one.
    pub(super) fn take(extensions: &rmcp::model::Extensions) -> Option<PendingCall> {
        extensions
            .get::<http::request::Parts>()?
            .extensions
            .get::<Admitted>()?
            .0
            .lock()
            .ok()?
            .take()
    }
}
