use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::catalog::{BackendCatalog, Entry, EntryKind};
use crate::config::{Naming, parse_rate};

fn entry(config: &str) -> PolicyConfig {
    #[derive(serde::Deserialize)]
    struct E {
        principals: Vec<String>,
        allow: Vec<String>,
        #[serde(default)]
        deny: Vec<String>,
        rate: Option<String>,
        rate_per_tool: Option<String>,
        issuer: Option<String>,
    }
    let e: E = toml::from_str(config).unwrap();
    PolicyConfig {
        principals: e.principals,
        allow: e.allow,
        deny: e.deny,
        rate: e.rate.map(|r| parse_rate(&r).unwrap()),
        rate_per_tool: e.rate_per_tool.map(|r| parse_rate(&r).unwrap()),
        issuer: e.issuer.map(|i| match i.as_str() {
            "*" => PolicyIssuer::Any,
            _ => PolicyIssuer::Is(i),
        }),
        tool_search: None,
    }
}

fn catalog() -> Arc<Catalog> {
    let files: Arc<str> = "files".into();
    let remote: Arc<str> = "remote".into();
    let tool = |n: &str| {
        Entry::from_json(
            EntryKind::Tool,
            json!({"name": n, "inputSchema": {"type": "object"}}),
        )
        .unwrap()
    };
    let resource = |v| Entry::from_json(EntryKind::Resource, v).unwrap();
    let f = BackendCatalog {
        tools: vec![tool("read"), tool("read_secret"), tool("write")],
        resources: vec![
            resource(json!({"uri": "file:///docs/a.md", "name": "a"})),
            resource(json!({"uri": "file:///etc/passwd", "name": "p"})),
        ],
        ..Default::default()
    };
    let r = BackendCatalog {
        tools: vec![tool("search"), tool("delete")],
        ..Default::default()
    };
    let naming = Naming::Prefix {
        separator: "__".into(),
    };
    Arc::new(Catalog::build(&naming, [(&files, &f), (&remote, &r)]))
}

fn policies() -> Policies {
    Policies::new(vec![
        entry(
            r#"principals = ["group:ops", "key:ci-bot"]
                 allow = ["*"]"#,
        ),
        entry(
            r#"principals = ["*"]
                 allow = ["files__read*", "remote__search", "file:///docs/*"]
                 deny = ["files__read_secret"]
                 rate = "3/min"
                 rate_per_tool = "2/min""#,
        ),
    ])
}

fn tools(c: &Catalog) -> Vec<String> {
    c.tools.iter().map(|t| t.key().to_owned()).collect()
}

fn alice() -> Principal {
    Principal::subject("http://idp", "alice", ["dev"], ["mcp"])
}

#[test]
fn the_first_entry_naming_the_caller_decides_what_it_sees() {
    let p = policies();
    let base = catalog();
    let ops = Principal::subject("http://idp", "olga", ["ops"], ["mcp"]);
    assert!(
        Arc::ptr_eq(&p.view(&ops, base.clone()), &base),
        "allow * is the base itself"
    );
    assert!(Arc::ptr_eq(
        &p.view(&Principal::key("ci-bot"), base.clone()),
        &base
    ));
    let v = p.view(&alice(), base.clone());
    assert_eq!(tools(&v), ["files__read", "remote__search"]);
    let uris: Vec<&str> = v.resources.iter().map(|r| r.key()).collect();
    assert_eq!(uris, ["file:///docs/a.md"]);
    assert!(
        v.route_tool("files__write").is_none(),
        "no route to what is taken out"
    );
    assert!(
        Arc::ptr_eq(&v, &p.view(&Principal::key("other"), base.clone())),
        "callers under one entry share one view"
    );
}

#[test]
fn a_caller_no_entry_names_sees_nothing_and_no_policies_mean_everything() {
    let only_ops = Policies::new(vec![entry(
        r#"principals = ["group:ops"]
                                              allow = ["*"]"#,
    )]);
    let v = only_ops.view(&alice(), catalog());
    assert!(v.tools.is_empty() && v.resources.is_empty());
    assert_eq!(
        only_ops.admit(&alice(), Kind::Tool, "files__read"),
        Err(Refused::Denied)
    );
    let none = Policies::new(Vec::new());
    assert!(!none.configured());
    let base = catalog();
    assert!(Arc::ptr_eq(&none.view(&alice(), base.clone()), &base));
    assert_eq!(none.admit(&alice(), Kind::Tool, "files__write"), Ok(()));
}

#[test]
fn calls_are_denied_like_the_view_and_rated_per_principal_and_tool() {
    let p = policies();
    let a = alice();
    assert_eq!(
        p.admit(&a, Kind::Tool, "files__read_secret"),
        Err(Refused::Denied)
    );
    assert_eq!(
        p.admit(&a, Kind::Tool, "files__write"),
        Err(Refused::Denied)
    );
    assert_eq!(
        p.admit(&a, Kind::Resource, "file:///etc/passwd"),
        Err(Refused::Denied)
    );
    assert_eq!(p.admit(&a, Kind::Tool, "files__read"), Ok(()));
    assert_eq!(p.admit(&a, Kind::Tool, "files__read"), Ok(()));
    match p.admit(&a, Kind::Tool, "files__read") {
        Err(Refused::RateLimited {
            per_tool: true,
            policy: 1,
            retry_after,
            rate,
        }) => {
            assert_eq!(rate.to_string(), "2/min");
            assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(30));
        }
        other => panic!("{other:?}"),
    }
    // The per-principal rate (3/min) ran out with that third call.
    match p.admit(&a, Kind::Tool, "remote__search") {
        Err(Refused::RateLimited {
            per_tool: false, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let bob = Principal::subject("http://idp", "bob", ["dev"], ["mcp"]);
    assert_eq!(
        p.admit(&bob, Kind::Tool, "remote__search"),
        Ok(()),
        "bob has his own bucket"
    );
}

#[test]
fn the_same_subject_of_two_issuers_is_two_callers() {
    let a = "https://a.example";
    let b = "https://b.example";
    let p = Policies::new(vec![
        entry(&format!(
            r#"principals = ["sub:alice"]
               issuer = "{a}"
               allow = ["files__*"]
               rate = "1/min""#
        )),
        entry(&format!(
            r#"principals = ["sub:alice"]
               issuer = "{b}"
               allow = ["remote__*"]
               rate = "1/min""#
        )),
        entry(
            r#"principals = ["group:ops"]
               issuer = "*"
               allow = ["remote__search"]"#,
        ),
    ]);
    let alice_a = Principal::subject(a, "alice", [], []);
    let alice_b = Principal::subject(b, "alice", [], []);
    // Each is named by her own issuer's entry, and sees its tools only.
    assert_eq!(
        p.admit(&alice_a, Kind::Tool, "remote__search"),
        Err(Refused::Denied)
    );
    assert_eq!(
        p.admit(&alice_b, Kind::Tool, "files__read"),
        Err(Refused::Denied)
    );
    // Each has her own bucket: one call a minute each.
    assert_eq!(p.admit(&alice_a, Kind::Tool, "files__read"), Ok(()));
    assert_eq!(p.admit(&alice_b, Kind::Tool, "remote__search"), Ok(()));
    assert!(matches!(
        p.admit(&alice_a, Kind::Tool, "files__read"),
        Err(Refused::RateLimited { .. })
    ));
    // An entry for any issuer names the group in every one of them.
    let ops_b = Principal::subject(b, "carol", ["ops"], []);
    assert_eq!(p.admit(&ops_b, Kind::Tool, "remote__search"), Ok(()));
    // A key is no issuer's subject.
    assert_eq!(
        p.admit(&Principal::key("alice"), Kind::Tool, "files__read"),
        Err(Refused::Denied)
    );
}

#[test]
fn a_reload_keeps_the_buckets_of_unchanged_entries_and_resets_changed_ones() {
    let p = policies();
    let a = alice();
    for _ in 0..2 {
        p.admit(&a, Kind::Tool, "files__read").unwrap();
    }
    assert!(
        p.next(vec![
            entry(
                r#"principals = ["group:ops", "key:ci-bot"]
                 allow = ["*"]"#
            ),
            entry(
                r#"principals = ["*"]
                 allow = ["files__read*", "remote__search", "file:///docs/*"]
                 deny = ["files__read_secret"]
                 rate = "3/min"
                 rate_per_tool = "2/min""#
            ),
        ])
        .is_none()
    );
    assert!(
        p.admit(&a, Kind::Tool, "files__read").is_err(),
        "same set: same buckets"
    );
    let kept_second = p
        .next(vec![
            entry(
                r#"principals = ["group:ops"]
                 allow = ["*"]"#,
            ),
            entry(
                r#"principals = ["*"]
                 allow = ["files__read*", "remote__search", "file:///docs/*"]
                 deny = ["files__read_secret"]
                 rate = "3/min"
                 rate_per_tool = "2/min""#,
            ),
        ])
        .expect("a changed set");
    assert!(
        kept_second.admit(&a, Kind::Tool, "files__read").is_err(),
        "an unchanged entry keeps its buckets"
    );
    let kept_first = p
        .next(vec![
            entry(
                r#"principals = ["group:ops", "key:ci-bot"]
                 allow = ["*"]"#,
            ),
            entry(
                r#"principals = ["*"]
                 allow = ["files__*"]
                 rate_per_tool = "2/min""#,
            ),
        ])
        .expect("a changed set");
    assert!(
        kept_first.admit(&a, Kind::Tool, "files__read").is_ok(),
        "a changed entry starts full"
    );
    let p = p
        .next(vec![entry(
            r#"principals = ["*"]
                                   allow = ["files__*"]
                                   rate_per_tool = "2/min""#,
        )])
        .expect("a changed set");
    assert_eq!(
        p.admit(&a, Kind::Tool, "files__read"),
        Ok(()),
        "a new entry starts full"
    );
    assert_eq!(
        tools(&p.view(&a, catalog())),
        ["files__read", "files__read_secret", "files__write"]
    );
}

/// Buckets kept elsewhere (what a shared store would be): each caller may
/// make `allowed` calls per rate, then waits `wait`; records what it was
/// asked to make.
struct Counted {
    allowed: usize,
    wait: Duration,
    made: Mutex<Vec<(usize, bool, String)>>,
}

struct CountedLimits {
    allowed: usize,
    wait: Duration,
    taken: Mutex<Vec<String>>,
}

impl<K: std::fmt::Debug + Send + Sync + 'static> rate::RateLimits<K> for CountedLimits {
    fn take(&self, key: &K) -> Result<(), Duration> {
        let mut taken = self.taken.lock().unwrap();
        let key = format!("{key:?}");
        if taken.iter().filter(|k| **k == key).count() >= self.allowed {
            return Err(self.wait);
        }
        taken.push(key);
        Ok(())
    }
}

impl Counted {
    fn limits(&self, entry: rate::Entry<'_>, rate: Rate, per_tool: bool) -> CountedLimits {
        self.made
            .lock()
            .unwrap()
            .push((entry.index, per_tool, rate.to_string()));
        CountedLimits {
            allowed: self.allowed,
            wait: self.wait,
            taken: Mutex::default(),
        }
    }
}

impl Rates for Arc<Counted> {
    fn per_caller(&self, e: rate::Entry<'_>, r: Rate) -> Box<dyn RateLimits<CallerKey>> {
        Box::new(self.limits(e, r, false))
    }
    fn per_tool(&self, e: rate::Entry<'_>, r: Rate) -> Box<dyn RateLimits<rate::ToolKey>> {
        Box::new(self.limits(e, r, true))
    }
}

#[test]
fn rates_are_asked_of_the_seam_per_caller_and_issuer() {
    let rates = Arc::new(Counted {
        allowed: 1,
        wait: Duration::from_secs(7),
        made: Mutex::default(),
    });
    let p = Policies::with_rates(
        vec![entry(
            r#"principals = ["*"]
               allow = ["*"]
               rate = "5/min"
               rate_per_tool = "4/min""#,
        )],
        Arc::new(rates.clone()),
    );
    assert_eq!(
        *rates.made.lock().unwrap(),
        [(0, false, "5/min".into()), (0, true, "4/min".into())]
    );
    let of = |issuer| Principal::subject(issuer, "alice", [], []);
    let (a, b) = (of("https://a.example"), of("https://b.example"));
    assert_eq!(p.admit(&a, Kind::Tool, "files__read"), Ok(()));
    // The seam's answer is the decision, with its wait.
    assert_eq!(
        p.admit(&a, Kind::Tool, "remote__search"),
        Err(Refused::RateLimited {
            rate: parse_rate("5/min").unwrap(),
            per_tool: false,
            policy: 0,
            retry_after: Duration::from_secs(7),
        })
    );
    // The same subject of another issuer is another key.
    assert_eq!(p.admit(&b, Kind::Tool, "files__read"), Ok(()));
    // A reload that keeps the entry asks for nothing new; an edit does.
    let before = rates.made.lock().unwrap().len();
    assert!(
        p.next(vec![
            entry(
                r#"principals = ["*"]
               allow = ["*"]
               rate = "5/min"
               rate_per_tool = "4/min""#
            ),
            entry(
                r#"principals = ["key:x"]
               allow = ["*"]
               rate = "1/s""#
            ),
        ])
        .is_some()
    );
    assert_eq!(
        rates.made.lock().unwrap()[before..],
        [(1, false, "1/s".into())]
    );
}
