use tokio::io::AsyncReadExt;

use super::*;

fn id(n: i64) -> RequestId {
    RequestId::Number(n)
}

#[test]
fn an_expected_result_is_kept_as_written_and_rmcp_gets_an_empty_one() {
    let wire = Wire::new(1 << 20);
    wire.expect(id(7));
    let text = r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"a","execution":{"taskSupport":"forbidden"},"inputSchema":{"type":"object","properties":{"z":{},"a":{}}}}],"x":0.7}}"#;
    let replaced = wire.incoming(text).expect("replaced");
    assert_eq!(replaced, r#"{"jsonrpc":"2.0","id":7,"result":{}}"#);
    let Some(Answer::Got(v)) = wire.take_answer(&id(7)) else {
        panic!("no answer kept")
    };
    // Same members, same order, same number text.
    assert_eq!(
        serde_json::to_string(&v).unwrap(),
        r#"{"tools":[{"name":"a","execution":{"taskSupport":"forbidden"},"inputSchema":{"type":"object","properties":{"z":{},"a":{}}}}],"x":0.7}"#
    );
    assert_eq!(wire.take_answer(&id(7)), None, "taken once");
}

#[test]
fn a_result_rmcp_decodes_too_is_kept_and_passed_on_as_written() {
    let wire = Wire::new(1 << 20);
    wire.expect_decoded(id(4));
    let text = r#"{"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"a","inputSchema":{"x-mcp-header":"A"}}]}}"#;
    assert_eq!(wire.incoming(text), None, "rmcp reads the tools too");
    let Some(Answer::Got(v)) = wire.take_answer(&id(4)) else {
        panic!("no answer kept")
    };
    assert_eq!(v["tools"][0]["name"], "a");
    assert!(wire.decoded.lock().unwrap().is_empty());
}

#[test]
fn results_nobody_expects_and_errors_pass_untouched() {
    let wire = Wire::new(1 << 20);
    wire.expect(id(1));
    assert_eq!(
        wire.incoming(r#"{"jsonrpc":"2.0","id":2,"result":{"a":1}}"#),
        None
    );
    assert_eq!(
        wire.incoming(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"result"}}"#),
        None
    );
    assert_eq!(wire.take_answer(&id(1)), Some(Answer::Waiting));
}

#[test]
fn a_result_over_the_limit_is_not_kept_but_reported() {
    let wire = Wire::new(10);
    wire.expect(RequestId::String("r-1".into()));
    let text = r#"{"jsonrpc":"2.0","id":"r-1","result":{"text":"0123456789"}}"#;
    assert!(wire.incoming(text).is_some());
    assert_eq!(
        wire.take_answer(&RequestId::String("r-1".into())),
        Some(Answer::TooLarge(r#"{"text":"0123456789"}"#.len()))
    );
}

#[test]
fn the_guard_forgets_an_answer_nobody_took() {
    let wire = Wire::new(100);
    wire.expect(id(3));
    drop(wire.guard(id(3)));
    assert_eq!(wire.take_answer(&id(3)), None);
    assert!(wire.answers.lock().unwrap().is_empty());
}

#[test]
fn the_params_of_a_relayed_ask_are_kept_for_its_handler() {
    let wire = Wire::new(100);
    let text = r#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"messages":[],"temperature":0.7,"maxTokens":10}}"#;
    assert_eq!(wire.incoming(text), None, "rmcp still dispatches it");
    let params = wire.take_ask(&id(5)).expect("kept");
    assert_eq!(
        params.to_string(),
        r#"{"messages":[],"temperature":0.7,"maxTokens":10}"#
    );
    assert_eq!(wire.take_ask(&id(5)), None);
    // Other methods are not kept.
    wire.incoming(r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#);
    assert_eq!(wire.take_ask(&id(6)), None);
}

#[test]
fn asks_nobody_takes_are_bounded() {
    let wire = Wire::new(100);
    for n in 0..(MAX_ASKS as i64 + 10) {
        wire.incoming(&format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"roots/list"}}"#
        ));
    }
    assert_eq!(wire.asks.lock().unwrap().len(), MAX_ASKS);
    assert_eq!(wire.take_ask(&id(0)), None, "the oldest went first");
    assert_eq!(wire.take_ask(&id(MAX_ASKS as i64 + 9)), Some(Value::Null));
}

#[test]
fn progress_params_are_kept_by_token_in_arrival_order() {
    let wire = Wire::new(100);
    let a1 = r#"{"method":"notifications/progress","params":{"progress":1,"total":3,"progressToken":"a"},"jsonrpc":"2.0"}"#;
    let b1 = r#"{"method":"notifications/progress","params":{"progressToken":"b","progress":0.5}}"#;
    let a2 = r#"{"method":"notifications/progress","params":{"progress":2,"total":3,"progressToken":"a"}}"#;
    for text in [a1, b1, a2] {
        assert_eq!(wire.incoming(text), None, "rmcp still decodes it");
    }
    let token = |t: &str| Value::String(t.into());
    // Another request's progress may be decoded first.
    assert_eq!(
        wire.take_progress(&token("b")).unwrap().to_string(),
        r#"{"progressToken":"b","progress":0.5}"#
    );
    assert_eq!(
        wire.take_progress(&token("a")).unwrap().to_string(),
        r#"{"progress":1,"total":3,"progressToken":"a"}"#
    );
    assert_eq!(
        wire.take_progress(&token("a")).unwrap().to_string(),
        r#"{"progress":2,"total":3,"progressToken":"a"}"#
    );
    assert_eq!(wire.take_progress(&token("a")), None);
}

#[test]
fn progress_nobody_takes_is_bounded() {
    let wire = Wire::new(100);
    for n in 0..(MAX_PROGRESS + 5) {
        wire.incoming(&format!(
            r#"{{"method":"notifications/progress","params":{{"progressToken":{n},"progress":1}}}}"#
        ));
    }
    assert_eq!(wire.progress.lock().unwrap().len(), MAX_PROGRESS);
    assert_eq!(
        wire.take_progress(&Value::from(0)),
        None,
        "the oldest went first"
    );
    assert!(wire.take_progress(&Value::from(MAX_PROGRESS + 4)).is_some());
}

async fn read_all(input: Vec<&'static [u8]>, wire: Arc<Wire>) -> Vec<u8> {
    let mut builder = tokio_test_reader(input);
    let mut r = WireRead::new(&mut builder, wire);
    let mut out = Vec::new();
    r.read_to_end(&mut out).await.unwrap();
    out
}

/// A reader yielding `chunks` one read at a time.
fn tokio_test_reader(chunks: Vec<&'static [u8]>) -> impl AsyncRead + Unpin {
    let stream = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
    );
    tokio_util::io::StreamReader::new(stream)
}

#[tokio::test]
async fn lines_split_across_reads_are_seen_whole_and_replaced() {
    let wire = Wire::new(1 << 20);
    wire.expect(id(1));
    let out = read_all(
        vec![
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":1,\"res",
            b"ult\":{\"b\":1,\"a\":2}}\n{\"partial\"",
            b":true}",
        ],
        wire.clone(),
    )
    .await;
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"partial\":true}"
    );
    let Some(Answer::Got(v)) = wire.take_answer(&id(1)) else {
        panic!("kept")
    };
    assert_eq!(v.to_string(), r#"{"b":1,"a":2}"#);
}

#[tokio::test]
async fn invalid_utf8_passes_through() {
    let wire = Wire::new(1 << 20);
    wire.expect(id(1));
    let out = read_all(vec![b"\xff\xfe result\n"], wire).await;
    assert_eq!(out, b"\xff\xfe result\n");
}
