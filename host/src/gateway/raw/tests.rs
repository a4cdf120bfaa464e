//! The raw executor's pieces that need no backend: the headers it sends a
//! 2026-07-28 backend, the statuses and framing of its answers, and what
//! it reads of a client's cancellation. The executor as a whole runs
//! against real backends in `tests/e2e/test_raw_path.py` and
//! `test_modern_raw_path.py`.

use super::*;

fn client_headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, http::HeaderValue::from_str(v).unwrap());
    }
    h
}

#[test]
fn a_stateless_call_carries_the_headers_a_direct_client_sends() {
    let client = client_headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "files__read"),
        ("mcp-param-region", "eu"),
        ("mcp-param-region", "us"),
        ("authorization", "Bearer secret"),
        ("cookie", "a=b"),
    ]);
    let out = standard_headers(&client, RawMethod::ToolsCall, "read");
    assert_eq!(out["mcp-method"], "tools/call");
    // The backend's name, not the one the client used.
    assert_eq!(out["mcp-name"], "read");
    assert_eq!(out["mcp-protocol-version"], "2026-07-28");
    let params: Vec<_> = out.get_all("mcp-param-region").iter().collect();
    assert_eq!(params, ["eu", "us"]);
    // Nothing else of the client's: its credentials are not the backend's.
    assert!(out.get("authorization").is_none() && out.get("cookie").is_none());
    assert_eq!(out.len(), 5, "{out:?}");
}

#[test]
fn a_name_that_cannot_travel_bare_is_wrapped_and_completion_names_none() {
    let out = standard_headers(
        &http::HeaderMap::new(),
        RawMethod::ResourcesRead,
        "file:///ü",
    );
    let name = out["mcp-name"].to_str().unwrap();
    assert!(name.starts_with("=?base64?"), "{name}");
    assert_eq!(
        crate::dataplane::headers::decode(name).as_deref(),
        Some("file:///ü")
    );
    let out = standard_headers(&http::HeaderMap::new(), RawMethod::Complete, "greet");
    assert_eq!(out["mcp-method"], "completion/complete");
    assert!(out.get("mcp-name").is_none());
}

#[test]
fn errors_to_a_modern_client_get_the_status_rmcp_gives_them() {
    for code in [
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        ErrorCode::HEADER_MISMATCH,
    ] {
        assert_eq!(
            modern_status(code),
            http::StatusCode::BAD_REQUEST,
            "{code:?}"
        );
    }
    assert_eq!(
        modern_status(ErrorCode::METHOD_NOT_FOUND),
        http::StatusCode::NOT_FOUND
    );
    for code in [ErrorCode::INVALID_PARAMS, ErrorCode::INTERNAL_ERROR] {
        assert_eq!(modern_status(code), http::StatusCode::OK, "{code:?}");
    }
}

async fn body_of(r: Response) -> (http::StatusCode, Option<String>, String) {
    let status = r.status();
    let kind = r
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    (status, kind, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn an_answer_alone_is_json_and_with_notifications_an_sse_stream() {
    let answer = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_owned();
    let (status, kind, body) = body_of(answer_response(
        vec![answer.clone()],
        http::StatusCode::NOT_FOUND,
    ))
    .await;
    assert_eq!(
        (status, kind.as_deref(), body.as_str()),
        (
            http::StatusCode::NOT_FOUND,
            Some("application/json"),
            answer.as_str()
        )
    );
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
    let (status, kind, body) = body_of(answer_response(
        with_last(vec![progress.to_owned()], answer.clone()),
        http::StatusCode::OK,
    ))
    .await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(kind.as_deref(), Some("text/event-stream"));
    assert_eq!(
        body,
        format!("event: message\ndata: {progress}\n\nevent: message\ndata: {answer}\n\n")
    );
}

#[test]
fn a_message_on_several_lines_is_one_event() {
    assert_eq!(
        sse_event("{\n\"a\": 1\n}"),
        "event: message\ndata: {\ndata: \"a\": 1\ndata: }\n\n"
    );
}

#[test]
fn a_cancellation_names_its_request_as_written() {
    let note = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c-7","reason":"x"}}"#;
    assert_eq!(cancelled_request(note).as_deref(), Some(r#""c-7""#));
    let numeric =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;
    assert_eq!(cancelled_request(numeric).as_deref(), Some("7"));
    // Anything else is not one.
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
    assert_eq!(cancelled_request(call), None);
    assert_eq!(cancelled_request("not json"), None);
}

#[test]
fn both_answer_formats_must_be_accepted_and_the_body_length_known() {
    let both = client_headers(&[("accept", "application/json, text/event-stream")]);
    assert!(accepts_both(&both));
    assert!(!accepts_both(&client_headers(&[(
        "accept",
        "application/json"
    )])));
    assert!(!accepts_both(&http::HeaderMap::new()));
    assert!(large(&http::HeaderMap::new()), "no length: not read raw");
    assert!(!large(&client_headers(&[("content-length", "120")])));
    let over = (MAX_RAW_BODY + 1).to_string();
    assert!(large(&client_headers(&[("content-length", &over)])));
}

#[test]
fn a_call_whose_task_failed_is_answered_with_its_own_id() {
    let m = task_failed(r#""c-1""#);
    let v: serde_json::Value = serde_json::from_str(&m[0]).unwrap();
    assert_eq!(v["id"], "c-1");
    assert_eq!(v["error"]["code"], -32603);
}
