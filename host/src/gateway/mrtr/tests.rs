use super::*;

fn binding(principal: &str) -> Binding {
    Binding {
        principal: crate::auth::Principal::key(principal).caller().clone(),
        method: "tools/call",
        name: "ask".into(),
    }
}

fn elicit() -> ServerRequest {
    let params: ElicitRequestParams = serde_json::from_value(serde_json::json!({
        "mode": "form",
        "message": "your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
    }))
    .expect("elicitation params");
    ServerRequest::ElicitRequest(ElicitRequest::new(params))
}

fn accept() -> InputResponses {
    let mut r = InputResponses::new();
    r.insert(
        INPUT_KEY.into(),
        serde_json::json!({"action": "accept", "content": {"name": "Ada"}}),
    );
    r
}

/// A parked question: the state to resume it and the backend side's answer.
async fn parked(
    m: &Mrtr,
    b: &Binding,
    ttl: Duration,
) -> (
    String,
    oneshot::Receiver<Result<ClientResult, McpError>>,
    mpsc::Sender<Event>,
) {
    let (tx, rx) = mpsc::channel(4);
    let (reply, answer) = oneshot::channel();
    tx.send(Event::Ask {
        request: elicit(),
        reply,
    })
    .await
    .unwrap_or_else(|_| panic!("queued"));
    match m.next(rx, b, ttl).await {
        Next::InputRequired(q) => {
            let r = q.result;
            let asked = r.input_requests.expect("a question");
            assert!(matches!(
                asked.get(INPUT_KEY),
                Some(InputRequest::Elicitation(_))
            ));
            // `tx` goes back to the test: the call is still running.
            (r.request_state.expect("a state"), answer, tx)
        }
        _ => panic!("expected an input-required result"),
    }
}

#[tokio::test]
async fn a_genuine_state_resumes_once_and_the_answer_reaches_the_backend() {
    let m = Mrtr::with_key([7; 32]);
    let b = binding("alice");
    let (state, answer, _call) = parked(&m, &b, Duration::from_secs(60)).await;
    assert!(state.starts_with(PREFIX));
    assert!(m.resume(&state, Some(&accept()), &b).is_ok());
    match answer.await {
        Ok(Ok(ClientResult::ElicitResult(r))) => assert_eq!(r.action, ElicitationAction::Accept),
        _ => panic!("the backend gets the client's elicitation answer"),
    }
    assert_eq!(
        m.resume(&state, Some(&accept()), &b).err(),
        Some(Refused::Replayed)
    );
}

#[tokio::test]
async fn altered_foreign_and_rebound_states_are_refused_as_forged() {
    let m = Mrtr::with_key([7; 32]);
    let b = binding("alice");
    let (state, _answer, _call) = parked(&m, &b, Duration::from_secs(60)).await;
    // One hex digit of the call number changed.
    let mut altered = state.clone().into_bytes();
    let at = PREFIX.len() + 15;
    altered[at] = if altered[at] == b'0' { b'1' } else { b'0' };
    let altered = String::from_utf8(altered).expect("ascii");
    assert_eq!(
        m.resume(&altered, Some(&accept()), &b).err(),
        Some(Refused::Forged)
    );
    // Sealed with another key.
    let other = Mrtr::with_key([8; 32]);
    let (foreign, _a, _c) = parked(&other, &b, Duration::from_secs(60)).await;
    assert_eq!(
        m.resume(&foreign, Some(&accept()), &b).err(),
        Some(Refused::Forged)
    );
    // Genuine, but brought by someone else.
    assert_eq!(
        m.resume(&state, Some(&accept()), &binding("mallory")).err(),
        Some(Refused::Forged)
    );
    // The same id from another issuer is someone else too.
    let of = |issuer| Binding {
        principal: crate::auth::Principal::subject(issuer, "alice", [], [])
            .caller()
            .clone(),
        ..b.clone()
    };
    let (hers, _a2, _c2) = parked(&m, &of("https://a.example"), Duration::from_secs(60)).await;
    assert_eq!(
        m.resume(&hers, Some(&accept()), &of("https://b.example"))
            .err(),
        Some(Refused::Forged)
    );
    assert!(
        m.resume(&hers, Some(&accept()), &of("https://a.example"))
            .is_ok()
    );
    assert_eq!(m.resume("vigil1.zz", None, &b).err(), Some(Refused::Forged));
    // Still resumable by its owner after all that.
    assert!(m.resume(&state, Some(&accept()), &b).is_ok());
}

#[test]
fn an_expired_state_is_refused() {
    let m = Mrtr::with_key([7; 32]);
    let b = binding("alice");
    // Genuine, but its expiry is already past.
    let state = m.seal(1, now_ms().saturating_sub(1), &b);
    assert_eq!(
        m.resume(&state, Some(&accept()), &b).err(),
        Some(Refused::Expired)
    );
}

#[tokio::test]
async fn a_retry_without_a_usable_answer_leaves_the_call_waiting() {
    let m = Mrtr::with_key([7; 32]);
    let b = binding("alice");
    let (state, _answer, _call) = parked(&m, &b, Duration::from_secs(60)).await;
    assert!(matches!(
        m.resume(&state, None, &b),
        Err(Refused::BadAnswer(_))
    ));
    let mut wrong = InputResponses::new();
    wrong.insert(INPUT_KEY.into(), serde_json::json!({"action": "perhaps"}));
    assert!(matches!(
        m.resume(&state, Some(&wrong), &b),
        Err(Refused::BadAnswer(_))
    ));
    assert!(m.resume(&state, Some(&accept()), &b).is_ok());
}

/// A backend's `-32042` (2025-11-25 only) reaches a 2026-07-28 client as
/// an input-required result with the URL elicitations; its state names no
/// parked call: the retry is the call made again. Another error stays one.
#[tokio::test]
async fn a_url_elicitation_error_becomes_a_question_whose_retry_calls_again() {
    let m = Mrtr::with_key([7; 32]);
    let b = binding("alice");
    let url = serde_json::json!({
        "mode": "url",
        "message": "sign in",
        "url": "https://example.com/auth",
        "elicitationId": "e-1"
    });
    let error = McpError::new(
        ErrorCode(URL_ELICITATION_REQUIRED),
        "sign in first",
        Some(serde_json::json!({"elicitations": [url]})),
    );
    let (tx, rx) = mpsc::channel(1);
    tx.send(Event::Done {
        result: Err(crate::backend::BackendError::Mcp(error)),
        recovered: false,
    })
    .await
    .unwrap_or_else(|_| panic!("queued"));
    let Next::InputRequired(Question { result: r, .. }) =
        m.next(rx, &b, Duration::from_secs(60)).await
    else {
        panic!("expected an input-required result");
    };
    let asked = r.input_requests.expect("the elicitations");
    match asked.get("vigil-url-0") {
        Some(InputRequest::Elicitation(e)) => assert!(matches!(
            &e.params,
            ElicitRequestParams::UrlElicitationParams { url, .. } if url == "https://example.com/auth"
        )),
        other => panic!("a URL elicitation, not {other:?}"),
    }
    let state = r.request_state.expect("a state");
    assert!(matches!(m.resume(&state, None, &b), Ok(Resumed::Again)));
    assert!(matches!(
        m.resume(&state, None, &binding("mallory")),
        Err(Refused::Forged)
    ));

    let (tx, rx) = mpsc::channel(1);
    let other = McpError::invalid_params("no", None);
    tx.send(Event::Done {
        result: Err(crate::backend::BackendError::Mcp(other)),
        recovered: false,
    })
    .await
    .unwrap_or_else(|_| panic!("queued"));
    assert!(matches!(
        m.next(rx, &b, Duration::from_secs(60)).await,
        Next::Done { result: Err(_), .. }
    ));
}

#[tokio::test]
async fn a_question_leaves_with_the_backends_own_params() {
    let (m, b) = (Mrtr::with_key([7; 32]), binding("alice"));
    let (tx, rx) = mpsc::channel(4);
    let (reply, _answer) = oneshot::channel();
    let written = serde_json::from_str::<serde_json::Value>(
        r#"{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"temperature":0.7,"maxTokens":10,"x-extra":{"b":1,"a":2}}"#,
    )
    .unwrap();
    let request = ServerRequest::CustomRequest(CustomRequest::new(
        "sampling/createMessage",
        Some(written.clone()),
    ));
    tx.send(Event::Ask { request, reply })
        .await
        .unwrap_or_else(|_| panic!("queued"));
    let Next::InputRequired(q) = m.next(rx, &b, Duration::from_secs(60)).await else {
        panic!("expected an input-required result");
    };
    // Read for its kind: a sampling question.
    let asked = q.result.input_requests.as_ref().expect("a question");
    assert!(matches!(
        asked.get(INPUT_KEY),
        Some(InputRequest::CreateMessage(_))
    ));
    let json = q.into_json();
    let params = &json["inputRequests"][INPUT_KEY]["params"];
    assert_eq!(
        params.to_string(),
        written.to_string(),
        "as the backend wrote it"
    );
    assert_eq!(
        json["inputRequests"][INPUT_KEY]["method"],
        "sampling/createMessage"
    );
    assert!(json["requestState"].is_string());
}

/// A store sharing `m`'s key (what replicas of one cluster do) whose calls
/// are parked on replica `id`.
fn replica(id: &str) -> Mrtr {
    let table = LocalParked::new(ReplicaId::new(id).unwrap(), MAX_PARKED);
    Mrtr::with_table([7; 32], Box::new(table))
}

#[tokio::test]
async fn a_state_carries_its_replica_and_only_that_replica_resumes_it() {
    let (here, there) = (replica("here"), replica("there"));
    let b = binding("alice");
    let (state, answer, _call) = parked(&there, &b, Duration::from_secs(60)).await;
    assert!(
        state.contains(".there."),
        "the hint is in the state: {state}"
    );
    // Genuine (same key), parked elsewhere: refused, saying where and
    // what to do; nothing reaches the call.
    let refused = here.resume(&state, Some(&accept()), &b).err();
    assert_eq!(
        refused,
        Some(Refused::Elsewhere {
            replica: ReplicaId::new("there").unwrap()
        })
    );
    let told = McpError::from(refused.unwrap());
    assert!(
        told.message.contains("replica `there`") && told.message.contains("call again without it"),
        "{}",
        told.message
    );
    // Its own replica resumes it.
    assert!(there.resume(&state, Some(&accept()), &b).is_ok());
    assert!(matches!(
        answer.await,
        Ok(Ok(ClientResult::ElicitResult(_)))
    ));
}

#[tokio::test]
async fn a_state_whose_hint_was_changed_is_forged() {
    let (here, there) = (replica("here"), replica("there"));
    let b = binding("alice");
    let (state, _answer, _call) = parked(&there, &b, Duration::from_secs(60)).await;
    for (from, to) in [
        (".there.", ".here."),
        (".there.", ".there2."),
        (".there.", ".."),
    ] {
        let tampered = state.replacen(from, to, 1);
        assert_eq!(
            here.resume(&tampered, Some(&accept()), &b).err(),
            Some(Refused::Forged),
            "{tampered}"
        );
    }
    assert!(there.resume(&state, Some(&accept()), &b).is_ok());
}

#[test]
fn a_state_that_names_no_call_is_made_again_on_any_replica() {
    let (here, there) = (replica("here"), replica("there"));
    let b = binding("alice");
    let state = there.seal(AGAIN, now_ms() + 60_000, &b);
    assert!(matches!(here.resume(&state, None, &b), Ok(Resumed::Again)));
}

/// A retry routed from another replica, as it crosses the store (JSON
/// both ways): the answer reaches the parked call, the backend's result
/// comes back as the round; the same retry again, or one by another
/// caller, is refused there as it would be here.
#[tokio::test]
async fn a_routed_retry_resumes_the_parked_call_and_brings_back_its_result() {
    use crate::cluster::retry::{Forwarded, Retry};
    let (m, b) = (Mrtr::with_key([7; 32]), binding("alice"));
    let (state, answer, tx) = parked(&m, &b, Duration::from_secs(60)).await;
    let through = |r: &Retry| -> Retry {
        serde_json::from_str(&serde_json::to_string(r).unwrap()).expect("a retry reads back")
    };
    let retry = routed::retry(&state, Some(&accept()), &b, Duration::from_secs(60));
    let backend = tokio::spawn(async move {
        let got = answer.await.expect("answered").expect("an answer");
        assert!(matches!(got, ClientResult::ElicitResult(_)), "{got:?}");
        let result = ServerResult::CustomResult(CustomResult(serde_json::json!({
            "content": [{"type": "text", "text": "hi Ada"}], "z": 1, "a": 2
        })));
        tx.send(Event::Done {
            result: Ok(result),
            recovered: false,
        })
        .await
        .unwrap_or_else(|_| panic!("sent"));
    });
    let forwarded = m.carry_out(through(&retry)).await;
    backend.await.expect("the backend side");
    let back: Forwarded =
        serde_json::from_str(&serde_json::to_string(&forwarded).unwrap()).expect("reads back");
    let Ok(Ok((Ok(ServerResult::CustomResult(CustomResult(v))), false))) = routed::round(back)
    else {
        panic!("the backend's result");
    };
    assert_eq!(
        serde_json::to_string(&v).unwrap(),
        r#"{"content":[{"type":"text","text":"hi Ada"}],"z":1,"a":2}"#,
        "as the backend wrote it"
    );

    let again = m.carry_out(through(&retry)).await;
    assert!(
        matches!(&again, Forwarded::Failed(e) if e.message.contains("already used")),
        "{again:?}"
    );
    let mallory = routed::retry(
        &state,
        Some(&accept()),
        &binding("mallory"),
        Duration::from_secs(60),
    );
    let forged = m.carry_out(mallory).await;
    assert!(
        matches!(&forged, Forwarded::Failed(e) if e.message.contains("not issued by this gateway")),
        "{forged:?}"
    );
}
