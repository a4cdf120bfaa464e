//! How a routed call ended: [`Ended`], the one account every call path
//! gives of a `tools/call`, `resources/read`, `prompts/get` it forwarded.
//!
//! The audit's outcome, the backend's call statistics (the health model's
//! application signal), the metrics and the trace span are all read off
//! it, by the rules here, never off an error's text. A call path that
//! answers an error says which kind of end it is when it makes the error
//! ([`CallError`]), so nothing downstream has to guess.

use rmcp::ErrorData as McpError;
use serde_json::Value;

use crate::audit::Outcome;

/// How a forwarded call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The backend's result (an input-required result too: the backend
    /// took the call and asks something of the client).
    Answered,
    /// A `tools/call` result that says `isError: true`.
    ToolFailed,
    /// An error: the backend's own, a timeout, a cancellation, an answer
    /// too large or not one at all.
    Failed,
    /// The backend is not serving, or the connection to it was lost
    /// during the call.
    Unavailable,
}

impl Ended {
    /// The end of a call that got `result` from its backend (`call`: it
    /// was a `tools/call`, whose result may say the tool failed). A result
    /// that is no JSON object is no answer.
    pub fn of_result(result: &Value, call: bool) -> Ended {
        match result {
            Value::Object(m) if call && m.get("isError") == Some(&Value::Bool(true)) => {
                Ended::ToolFailed
            }
            Value::Object(_) => Ended::Answered,
            _ => Ended::Failed,
        }
    }

    /// The end of a call path's `result`.
    pub fn of(result: &Result<Value, CallError>, call: bool) -> Ended {
        match result {
            Ok(v) => Ended::of_result(v, call),
            Err(e) => e.ended,
        }
    }

    /// What the call audit records.
    pub fn audit(self) -> Outcome {
        match self {
            Ended::Answered => Outcome::Ok,
            Ended::ToolFailed | Ended::Failed => Outcome::Error,
            Ended::Unavailable => Outcome::Unavailable,
        }
    }

    /// Whether the backend's application signal counts it a success.
    pub fn ok(self) -> bool {
        self == Ended::Answered
    }

    /// How the trace span of a `tools/call` ends: `Ok`, or what went wrong.
    pub fn trace(self) -> Result<(), &'static str> {
        match self {
            Ended::Answered => Ok(()),
            Ended::ToolFailed => Err("the tool answered isError"),
            Ended::Failed => Err("the call failed"),
            Ended::Unavailable => Err("the backend is unavailable"),
        }
    }
}

/// An error a call path answers a client with, and which end it is.
#[derive(Debug, Clone)]
pub struct CallError {
    pub ended: Ended,
    pub error: McpError,
}

impl CallError {
    /// `error` says the backend is not serving or was lost.
    pub fn unavailable(error: McpError) -> Self {
        CallError {
            ended: Ended::Unavailable,
            error,
        }
    }

    /// `error` is any other failure of the call.
    pub fn failed(error: McpError) -> Self {
        CallError {
            ended: Ended::Failed,
            error,
        }
    }

    /// The same end, with its error replaced (masked, or made clearer).
    pub fn map(self, f: impl FnOnce(McpError) -> McpError) -> Self {
        CallError {
            ended: self.ended,
            error: f(self.error),
        }
    }
}

/// An error made without saying its kind is a failure, never
/// "unavailable": that is said only where it is known.
impl From<McpError> for CallError {
    fn from(error: McpError) -> Self {
        CallError::failed(error)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_result_ends_by_what_it_says() {
        assert_eq!(
            Ended::of_result(&json!({"content": []}), true),
            Ended::Answered
        );
        let failed = json!({"content": [], "isError": true});
        assert_eq!(Ended::of_result(&failed, true), Ended::ToolFailed);
        // Only a tool call's result says a tool failed.
        assert_eq!(Ended::of_result(&failed, false), Ended::Answered);
        assert_eq!(
            Ended::of_result(&json!({"isError": "yes"}), true),
            Ended::Answered
        );
        assert_eq!(Ended::of_result(&json!([1]), true), Ended::Failed);
        let asks = json!({"resultType": "input_required", "inputRequests": {}});
        assert_eq!(Ended::of_result(&asks, true), Ended::Answered);
    }

    #[test]
    fn each_end_feeds_the_audit_stats_and_trace_by_one_rule() {
        let cases = [
            (Ended::Answered, Outcome::Ok, true),
            (Ended::ToolFailed, Outcome::Error, false),
            (Ended::Failed, Outcome::Error, false),
            (Ended::Unavailable, Outcome::Unavailable, false),
        ];
        for (ended, audit, ok) in cases {
            assert_eq!(ended.audit(), audit, "{ended:?}");
            assert_eq!(ended.ok(), ok, "{ended:?}");
            assert_eq!(ended.trace().is_ok(), ok, "{ended:?}");
        }
    }

    #[test]
    fn an_error_is_unavailable_only_when_made_so() {
        let e = McpError::internal_error("backend 'x' is unavailable (offline)", None);
        // The text says unavailable; the kind was not given: a failure.
        assert_eq!(CallError::from(e.clone()).ended, Ended::Failed);
        let made = CallError::unavailable(e);
        assert_eq!(Ended::of(&Err(made), true), Ended::Unavailable);
    }
}
