//! One test per row of the rule (see the module doc), each from a request
//! that goes raw, changed in the one fact the row reads.

use std::collections::HashMap;

use super::*;

const MODERN_CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"web__echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}}}"#;
const SESSION_CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"web__echo","arguments":{"text":"hi"}}}"#;

/// A generation: names to routes, backends to what is known of them.
#[derive(Default)]
struct Gen {
    routes: HashMap<(Target, String), Route>,
    backends: HashMap<String, Serving>,
}

impl Generation for Gen {
    fn route(&self, target: Target, name: &str) -> Option<Route> {
        self.routes.get(&(target, name.to_owned())).cloned()
    }
    fn serving(&self, backend: &str) -> Option<Serving> {
        self.backends.get(backend).copied()
    }
}

/// `web__echo` (tool), `web__greet` (prompt) and `demo://web/readme`
/// route to `web`, an HTTP backend serving in `era`.
fn generation(era: Era) -> Gen {
    let mut g = Gen::default();
    let route = |name: Option<&str>| Route {
        backend: "web".into(),
        name: name.map(Into::into),
    };
    g.routes
        .insert((Target::Tool, "web__echo".into()), route(Some("echo")));
    g.routes
        .insert((Target::Prompt, "web__greet".into()), route(Some("greet")));
    g.routes
        .insert((Target::Uri, "demo://web/readme".into()), route(None));
    g.backends.insert(
        "web".into(),
        Serving {
            advertisable: true,
            http: true,
            forwards_auth: false,
            era: Some(era),
            stateless: era == Era::Modern,
        },
    );
    g
}

fn serving(g: &mut Gen, change: impl FnOnce(&mut Serving)) {
    change(g.backends.get_mut("web").unwrap());
}

fn rev(text: &str) -> Header {
    Header::Known(Revision::parse(text).unwrap())
}

fn modern_http() -> Http {
    Http {
        revision: rev("2026-07-28"),
        accepts_both: true,
        standard_headers_agree: true,
    }
}

fn session_http() -> Http {
    Http {
        revision: rev("2025-11-25"),
        accepts_both: true,
        standard_headers_agree: false,
    }
}

const PLAIN: Client = Client::Session { plain: true };

fn decided(http: Http, client: Client, body: &str, g: &Gen) -> Plan {
    plan(&http, client, Request::parse(body).as_ref(), g)
}

fn raw(via: Via, name: Option<&str>) -> Plan {
    Plan::Raw {
        route: Route {
            backend: "web".into(),
            name: name.map(Into::into),
        },
        via,
    }
}

#[test]
fn the_baselines_go_raw() {
    let g = generation(Era::Handshake);
    assert_eq!(
        decided(session_http(), PLAIN, SESSION_CALL, &g),
        raw(Via::Lane, Some("echo"))
    );
    let g = generation(Era::Modern);
    assert_eq!(
        decided(modern_http(), Client::Sessionless, MODERN_CALL, &g),
        raw(Via::Stateless, Some("echo"))
    );
}

#[test]
fn row_who_a_session_must_have_finished_the_handshake() {
    let g = generation(Era::Handshake);
    let plan = decided(session_http(), Client::UnknownSession, SESSION_CALL, &g);
    assert_eq!(plan, Plan::Typed(Why::NoSession));
    // A handshake-era request without a session is rmcp's (initialize, or
    // its error).
    let mut http = session_http();
    http.revision = Header::Absent;
    let plan = decided(http, Client::Sessionless, SESSION_CALL, &g);
    assert_eq!(plan, Plan::Typed(Why::NoSession));
}

#[test]
fn row_revision_a_session_speaks_a_handshake_era_revision() {
    let g = generation(Era::Handshake);
    let mut http = session_http();
    http.revision = Header::Absent;
    assert_eq!(
        decided(http, PLAIN, SESSION_CALL, &g),
        raw(Via::Lane, Some("echo"))
    );
    for header in [rev("2026-07-28"), Header::Unknown] {
        http.revision = header;
        let plan = decided(http, PLAIN, SESSION_CALL, &g);
        assert_eq!(plan, Plan::Typed(Why::Revision), "{header:?}");
    }
}

#[test]
fn row_revision_a_sessionless_request_speaks_2026_07_28() {
    let g = generation(Era::Modern);
    for header in [rev("2025-11-25"), Header::Unknown] {
        let mut http = modern_http();
        http.revision = header;
        let plan = decided(http, Client::Sessionless, MODERN_CALL, &g);
        assert_eq!(plan, Plan::Typed(Why::Revision), "{header:?}");
    }
}

#[test]
fn row_revision_the_meta_names_the_headers_revision() {
    let g = generation(Era::Modern);
    let cases = [
        MODERN_CALL.replace(
            r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","#,
            "",
        ),
        MODERN_CALL.replace(
            r#"protocolVersion":"2026-07-28""#,
            r#"protocolVersion":"2025-11-25""#,
        ),
        MODERN_CALL.replace(
            r#"protocolVersion":"2026-07-28""#,
            r#"protocolVersion":"2026-07-29""#,
        ),
        MODERN_CALL.replace(
            r#"protocolVersion":"2026-07-28""#,
            r#"protocolVersion":20260728"#,
        ),
    ];
    for body in cases {
        let plan = decided(modern_http(), Client::Sessionless, &body, &g);
        assert_eq!(plan, Plan::Typed(Why::MetaRevision), "{body}");
    }
}

#[test]
fn row_answers_both_formats_are_accepted() {
    let mut http = session_http();
    http.accepts_both = false;
    let g = generation(Era::Handshake);
    assert_eq!(
        decided(http, PLAIN, SESSION_CALL, &g),
        Plan::Typed(Why::Accept)
    );
    let mut http = modern_http();
    http.accepts_both = false;
    let g = generation(Era::Modern);
    assert_eq!(
        decided(http, Client::Sessionless, MODERN_CALL, &g),
        Plan::Typed(Why::Accept)
    );
}

#[test]
fn row_client_a_session_with_capabilities_or_a_level_is_typed() {
    let g = generation(Era::Handshake);
    let plan = decided(
        session_http(),
        Client::Session { plain: false },
        SESSION_CALL,
        &g,
    );
    assert_eq!(plan, Plan::Typed(Why::SessionCapabilities));
}

#[test]
fn row_message_what_the_envelope_cannot_read_is_typed() {
    let g = generation(Era::Modern);
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    assert_eq!(
        decided(modern_http(), Client::Sessionless, list, &g),
        Plan::Typed(Why::Unreadable)
    );
    let g = generation(Era::Handshake);
    let task =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"web__echo","task":{}}}"#;
    assert_eq!(
        decided(session_http(), PLAIN, task, &g),
        Plan::Typed(Why::Unreadable)
    );
}

#[test]
fn row_metadata_a_session_request_carries_none_of_2026_07_28() {
    let g = generation(Era::Handshake);
    let with = |params: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"web__echo",{params}}}}}"#
        )
    };
    for body in [
        with(r#""_meta":{"io.modelcontextprotocol/clientInfo":{}}"#),
        with(r#""requestState":"abc""#),
        with(r#""inputResponses":{}"#),
    ] {
        let plan = decided(session_http(), PLAIN, &body, &g);
        assert_eq!(plan, Plan::Typed(Why::HopMeta), "{body}");
    }
    // The caller's own `_meta` and a progress token are no hop metadata.
    let own = with(r#""_meta":{"trace":"x","progressToken":"t"}"#);
    assert_eq!(
        decided(session_http(), PLAIN, &own, &g),
        raw(Via::Lane, Some("echo"))
    );
}

#[test]
fn row_metadata_standard_headers_must_agree() {
    let mut http = modern_http();
    http.standard_headers_agree = false;
    let g = generation(Era::Modern);
    assert_eq!(
        decided(http, Client::Sessionless, MODERN_CALL, &g),
        Plan::Typed(Why::StandardHeaders)
    );
}

#[test]
fn row_metadata_a_retry_with_vigils_state_resumes_a_bridged_call() {
    let g = generation(Era::Modern);
    let retry = |state: &str| {
        MODERN_CALL.replace(
            r#""arguments""#,
            &format!(r#""requestState":"{state}","inputResponses":{{"vigil":{{}}}},"arguments""#),
        )
    };
    let ours = retry("vigil1.AAAA");
    assert_eq!(
        decided(modern_http(), Client::Sessionless, &ours, &g),
        Plan::Typed(Why::Bridged)
    );
    // A backend's own state passes untouched, raw.
    let theirs = retry("opaque-backend-state");
    assert_eq!(
        decided(modern_http(), Client::Sessionless, &theirs, &g),
        raw(Via::Stateless, Some("echo"))
    );
}

#[test]
fn row_metadata_a_retargeted_call_tool_goes_raw_on_a_lane_only() {
    fn retargeted(body: &str) -> Request<'_> {
        let mut r = Request::parse(body).unwrap();
        r.retargeted = true;
        r
    }
    let g = generation(Era::Handshake);
    assert_eq!(
        plan(&session_http(), PLAIN, Some(&retargeted(SESSION_CALL)), &g),
        raw(Via::Lane, Some("echo"))
    );
    let g = generation(Era::Modern);
    assert_eq!(
        plan(
            &modern_http(),
            Client::Sessionless,
            Some(&retargeted(MODERN_CALL)),
            &g
        ),
        Plan::Typed(Why::Retargeted)
    );
}

#[test]
fn row_route_unrouted_names_are_typed() {
    let g = generation(Era::Modern);
    let body = MODERN_CALL.replace("web__echo", "web__nope");
    assert_eq!(
        decided(modern_http(), Client::Sessionless, &body, &g),
        Plan::Typed(Why::Unrouted)
    );
    // A route to a backend the generation does not hold.
    let mut g = generation(Era::Modern);
    g.backends.clear();
    assert_eq!(
        decided(modern_http(), Client::Sessionless, MODERN_CALL, &g),
        Plan::Typed(Why::Unrouted)
    );
}

#[test]
fn row_route_the_backend_must_be_serving_http_with_shared_credentials() {
    type Change = fn(&mut Serving);
    let cases: [(Change, Why); 3] = [
        (|s| s.advertisable = false, Why::NotServing),
        (|s| s.http = false, Why::Stdio),
        (|s| s.forwards_auth = true, Why::ForwardsAuth),
    ];
    for (change, why) in cases {
        let mut g = generation(Era::Handshake);
        serving(&mut g, change);
        assert_eq!(
            decided(session_http(), PLAIN, SESSION_CALL, &g),
            Plan::Typed(why)
        );
        let mut g = generation(Era::Modern);
        serving(&mut g, change);
        assert_eq!(
            decided(modern_http(), Client::Sessionless, MODERN_CALL, &g),
            Plan::Typed(why)
        );
    }
}

#[test]
fn row_backends_era_a_lane_needs_a_session() {
    let g = generation(Era::Modern);
    assert_eq!(
        decided(session_http(), PLAIN, SESSION_CALL, &g),
        Plan::Typed(Why::NoLane)
    );
}

#[test]
fn row_backends_era_stateless_needs_a_backend_that_answers_2026_07_28() {
    // Handshake era only: Vigil bridges the eras on the typed path.
    let g = generation(Era::Handshake);
    assert_eq!(
        decided(modern_http(), Client::Sessionless, MODERN_CALL, &g),
        Plan::Typed(Why::Bridge)
    );
    // Both eras, its modern door open: raw.
    let mut g = generation(Era::Handshake);
    serving(&mut g, |s| s.stateless = true);
    assert_eq!(
        decided(modern_http(), Client::Sessionless, MODERN_CALL, &g),
        raw(Via::Stateless, Some("echo"))
    );
}

#[test]
fn reads_and_prompts_route_by_their_own_target() {
    let g = generation(Era::Modern);
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
    let read = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{{"uri":"demo://web/readme",{meta}}}}}"#
    );
    assert_eq!(
        decided(modern_http(), Client::Sessionless, &read, &g),
        raw(Via::Stateless, None)
    );
    let prompt = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{{"name":"web__greet",{meta}}}}}"#
    );
    assert_eq!(
        decided(modern_http(), Client::Sessionless, &prompt, &g),
        raw(Via::Stateless, Some("greet"))
    );
    // A prompt's name is no tool's.
    let crossed = prompt.replace("web__greet", "web__echo");
    assert_eq!(
        decided(modern_http(), Client::Sessionless, &crossed, &g),
        Plan::Typed(Why::Unrouted)
    );
}
