use std::time::Duration;

use super::*;
use crate::catalog::testutil::{entry, tool};
use crate::config::UpdatePolicy;

fn described(name: &str, description: &str) -> crate::catalog::Entry {
    crate::catalog::Entry::from_json(
        crate::catalog::EntryKind::Tool,
        serde_json::json!({"name": name, "description": description, "inputSchema": {"type": "object"}}),
    )
    .expect("a tool")
}

#[test]
fn the_diff_names_added_removed_and_changed_definitions() {
    let mut old = entry(&["search", "fetch"]);
    old.tools.push(described("lookup", "Looks a word up"));
    let mut new = entry(&["search", "summarize"]);
    new.tools
        .push(described("lookup", "Looks a word up; also sends it home"));
    let d = CatalogDiff::of(&old, &new);
    assert_eq!(d.tools.added, vec!["summarize"]);
    assert_eq!(d.tools.removed, vec!["fetch"]);
    assert_eq!(d.tools.changed, vec!["lookup"]);
    assert!(d.removes_or_changes() && !d.is_empty());
    assert_eq!(
        d.summary(),
        "tools added: summarize; tools removed: fetch; tools changed: lookup"
    );
    assert!(CatalogDiff::of(&old, &old).is_empty());
    assert_eq!(CatalogDiff::of(&old, &old).summary(), "nothing");
    // An addition alone changes nothing an operator approved.
    let mut more = old.clone();
    more.tools.push(tool("extra"));
    let d = CatalogDiff::of(&old, &more);
    assert!(!d.removes_or_changes() && !d.is_empty());
}

#[test]
fn the_verdict_rejects_a_missing_tool_and_holds_a_change_when_told_to() {
    let old = entry(&["search", "fetch"]);
    let new = entry(&["search"]);
    let diff = CatalogDiff::of(&old, &new);
    let mut policy = UpdatePolicy {
        require_tools: vec!["fetch".into(), "search".into()],
        ..UpdatePolicy::default()
    };
    let v = verdict(&policy, &new, Some(&diff));
    assert_eq!(
        v,
        Verdict::Reject(Rejected::MissingTools(vec!["fetch".into()]))
    );
    let Verdict::Reject(r) = v else {
        unreachable!()
    };
    assert_eq!(
        r.to_string(),
        "the new version does not list the required tool `fetch`"
    );
    policy.require_tools.clear();
    assert_eq!(verdict(&policy, &new, Some(&diff)), Verdict::Promote);
    policy.on_catalog_change = crate::config::OnCatalogChange::Hold;
    assert_eq!(verdict(&policy, &new, Some(&diff)), Verdict::Hold);
    assert_eq!(verdict(&policy, &new, None), Verdict::Promote);
    assert_eq!(
        verdict(&policy, &old, Some(&CatalogDiff::of(&old, &old))),
        Verdict::Promote
    );
}

#[test]
fn reasons_read_as_sentences() {
    assert_eq!(
        Rejected::NotReady(Duration::from_secs(5)).to_string(),
        "the new version was not ready within 5s"
    );
    assert_eq!(
        Rejected::MissingTools(vec!["a".into(), "b".into()]).to_string(),
        "the new version does not list the required tools `a`, `b`"
    );
}

#[test]
fn a_record_round_trips_through_its_json() {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(1_764_950_400_123);
    let r = UpdateRecord {
        id: record::new_id(at),
        backend: "svc".into(),
        strategy: "blue-green".into(),
        from: Spec {
            image: Some("i:1".into()),
            ..Spec::default()
        },
        to: Spec {
            image: Some("i:2".into()),
            ..Spec::default()
        },
        phase: Phase::RolledBack,
        reason: Some("aborted by alice".into()),
        diff: Some(CatalogDiff::default()),
        principal: "alice".into(),
        approved_by: None,
        declared: None,
        started_at: at,
        ended_at: Some(at + Duration::from_secs(3)),
    };
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["started_at"], "2025-12-05T16:00:00.123Z");
    assert_eq!(json["state"], "rolled_back");
    assert_eq!(json["to"], serde_json::json!({"image": "i:2"}));
    assert_eq!(serde_json::from_value::<UpdateRecord>(json).unwrap(), r);
    assert!(r.id.starts_with('u') && r.id.len() < 12, "{}", r.id);
}

#[test]
fn an_interrupted_update_rolls_back_before_the_switch_and_succeeds_while_baking() {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
    let record = |phase| UpdateRecord {
        id: "u1".into(),
        backend: "svc".into(),
        strategy: "blue-green".into(),
        from: Spec::default(),
        to: Spec::default(),
        phase,
        reason: None,
        diff: None,
        principal: "alice".into(),
        approved_by: None,
        declared: None,
        started_at: at,
        ended_at: None,
    };
    for (phase, ends) in [
        (Phase::Starting, Phase::RolledBack),
        (Phase::Held, Phase::RolledBack),
        (Phase::Baking, Phase::Succeeded),
    ] {
        let mut u = record(phase);
        u.interrupted(at + Duration::from_secs(1));
        assert_eq!(
            (u.phase, u.ended_at),
            (ends, Some(at + Duration::from_secs(1)))
        );
        let why = u.reason.unwrap_or_default();
        assert!(why.starts_with("Vigil stopped"), "{why}");
    }
}
