use std::sync::Arc;

use serde_json::json;

use super::testutil::{entry, prefix};
use super::*;

#[test]
fn prefix_naming_routes_back_to_the_original_name() {
    let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
    let (ea, eb) = (entry(&["echo"]), entry(&["echo", "add"]));
    let c = Catalog::build(&prefix(), [(&a, &ea), (&b, &eb)]);
    let names: Vec<_> = c.tools.iter().map(|t| t.key().to_owned()).collect();
    assert_eq!(names, ["a__echo", "b__echo", "b__add"]);
    assert_eq!(
        c.route_tool("b__add"),
        Some(&Route {
            backend: b.clone(),
            name: "add".into()
        })
    );
    assert_eq!(c.route_tool("add"), None);
    assert!(c.conflicts.is_empty());
}

#[test]
fn none_naming_keeps_the_first_and_reports_the_conflict() {
    let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
    let (ea, eb) = (entry(&["echo"]), entry(&["echo", "add"]));
    let c = Catalog::build(&Naming::None, [(&a, &ea), (&b, &eb)]);
    assert_eq!(c.tools.len(), 2);
    assert_eq!(c.route_tool("echo").unwrap().backend, a);
    assert_eq!(
        c.conflicts,
        vec![Conflict {
            kind: "tool",
            name: "echo".into(),
            kept: a,
            hidden: b
        }]
    );
}

#[test]
fn diff_sees_schema_changes_not_only_names() {
    let a: Arc<str> = "a".into();
    let old = Catalog::build(&prefix(), [(&a, &entry(&["echo"]))]);
    let mut changed = entry(&["echo"]);
    changed.tools[0] = Entry::from_json(
        EntryKind::Tool,
        json!({"name": "echo", "description": "new", "inputSchema": {"type": "object"}}),
    )
    .unwrap();
    let new = Catalog::build(&prefix(), [(&a, &changed)]);
    assert_eq!(
        new.diff(&old),
        Changes {
            tools: true,
            resources: false,
            prompts: false
        }
    );
    assert!(
        !Catalog::build(&prefix(), [(&a, &entry(&["echo"]))])
            .diff(&old)
            .any()
    );
}

#[test]
fn uris_route_exactly_then_by_longest_template_prefix() {
    let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
    let mut ea = BackendCatalog::default();
    let entry = |kind, v| Entry::from_json(kind, v).unwrap();
    ea.resources.push(entry(
        EntryKind::Resource,
        json!({"uri": "demo://a/readme", "name": "readme"}),
    ));
    ea.templates.push(entry(
        EntryKind::Template,
        json!({"uriTemplate": "demo://{x}", "name": "any"}),
    ));
    let mut eb = BackendCatalog::default();
    eb.templates.push(entry(
        EntryKind::Template,
        json!({"uriTemplate": "demo://b/item/{id}", "name": "item"}),
    ));
    eb.prompts
        .push(entry(EntryKind::Prompt, json!({"name": "greet"})));
    let c = Catalog::build(&prefix(), [(&a, &ea), (&b, &eb)]);
    assert_eq!(c.route_uri("demo://a/readme"), Some(&a));
    assert_eq!(c.route_uri("demo://b/item/7"), Some(&b));
    assert_eq!(c.route_uri("demo://zzz"), Some(&a));
    assert_eq!(c.route_uri("file:///x"), None);
    assert_eq!(c.route_prompt("b__greet").unwrap().name, "greet");
}

#[test]
fn hidden_backends_names_are_known_but_not_routed() {
    let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
    let (ea, eb) = (entry(&["echo"]), entry(&["add"]));
    let c = Catalog::build(&Naming::None, [(&a, &ea)]).with_hidden(&Naming::None, [(&b, &eb)]);
    assert_eq!(c.route_tool("add"), None);
    assert_eq!(c.hidden_owner("add"), Some(&b));
    assert_eq!(c.hidden_owner("echo"), None, "a shown name is never hidden");
    assert_eq!(c.tools.len(), 1);
}

#[test]
fn a_sessions_own_entries_replace_the_shared_ones_in_place() {
    let (a, per, c): (Arc<str>, Arc<str>, Arc<str>) = ("a".into(), "per".into(), "c".into());
    let shared = Catalog::from_sources(
        &prefix(),
        vec![
            (a.clone(), Arc::new(entry(&["x"]))),
            (per.clone(), Arc::new(entry(&[]))),
            (c.clone(), Arc::new(entry(&["y"]))),
        ],
    )
    .with_hidden(&prefix(), [(&"down".into(), &entry(&["gone"]))]);
    let mine = Arc::new(entry(&["alpha"]));
    let view = shared.with_own(&prefix(), |n, _| (n == "per").then(|| mine.clone()));
    let names: Vec<_> = view.tools.iter().map(|t| t.key().to_owned()).collect();
    assert_eq!(names, ["a__x", "per__alpha", "c__y"], "file order is kept");
    assert_eq!(
        view.route_tool("per__alpha").map(|r| &*r.backend),
        Some("per")
    );
    assert_eq!(
        view.hidden_owner("down__gone").map(|b| &**b),
        Some("down"),
        "names of backends that are down stay recognised"
    );
    assert!(view.diff(&shared).tools);
    assert!(
        shared.route_tool("per__alpha").is_none(),
        "the shared catalog is untouched"
    );
    // A backend the shared catalog does not show (down) is not shown to
    // the session either, whatever it listed before.
    let without = Catalog::from_sources(&prefix(), vec![(a.clone(), Arc::new(entry(&["x"])))]);
    let view = without.with_own(&prefix(), |n, _| (n == "per").then(|| mine.clone()));
    assert!(view.route_tool("per__alpha").is_none());
}

#[test]
fn a_sessions_extras_add_to_the_shared_listing_and_change_nothing_in_it() {
    let shared = entry(&["echo", "add"]);
    let own = entry(&["add", "made_for_me"]);
    let merged = shared.with_extras(&own);
    let names: Vec<_> = merged.tools.iter().map(|t| t.key().to_owned()).collect();
    assert_eq!(names, ["echo", "add", "made_for_me"]);
    assert_eq!(shared.with_extras(&entry(&[])), shared, "nothing extra");
    assert_eq!(entry(&[]).with_extras(&shared), shared, "everything extra");
}
