use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;

fn t(s: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
}

fn policy() -> RestartPolicy {
    RestartPolicy {
        base: Duration::from_secs(1),
        max: Duration::from_secs(60),
        multiplier: 2.0,
        jitter: 0.0,
        max_restarts: 3,
        healthy_reset: Duration::from_secs(30),
        quarantine_reprobe: None,
    }
}

fn machine() -> Machine {
    let mut m = Machine::new("b", policy(), 2, true, t(0));
    m.step(Input::Up, t(0), 0.0).unwrap();
    m
}

fn states(step: &Step) -> Vec<(HealthState, HealthState)> {
    step.transitions.iter().map(|t| (t.from, t.to)).collect()
}

use HealthState::*;

#[test]
fn a_killed_backend_goes_offline_then_restarting_then_running() {
    let mut m = machine();
    let s = m
        .step(
            Input::Exited("killed by signal 9 (SIGKILL)".into()),
            t(5),
            0.0,
        )
        .unwrap();
    assert_eq!(states(&s), [(Running, Offline), (Offline, Restarting)]);
    assert_eq!(s.action, Some(Action::RestartAfter(Duration::from_secs(1))));
    assert!(s.transitions[0].reason.contains("SIGKILL"));
    assert_eq!(m.next_retry_at, Some(t(6)));
    assert_eq!(m.restart_count, 1);
    let s = m.step(Input::Starting, t(6), 0.0).unwrap();
    assert_eq!(states(&s), [(Restarting, Starting)]);
    let s = m.step(Input::Up, t(6), 0.0).unwrap();
    assert_eq!(states(&s), [(Starting, Running)]);
    assert_eq!(m.next_retry_at, None);
}

#[test]
fn start_failures_back_off_and_end_in_quarantine() {
    // base 1s ×2, max_restarts 3: restart after 1s, 2s, then quarantine.
    let mut m = Machine::new("b", policy(), 2, true, t(0));
    let s1 = m
        .step(Input::StartFailed("exit 1".into()), t(0), 0.0)
        .unwrap();
    assert_eq!(
        s1.action,
        Some(Action::RestartAfter(Duration::from_secs(1)))
    );
    m.step(Input::Starting, t(1), 0.0).unwrap();
    let s2 = m
        .step(Input::StartFailed("exit 1".into()), t(1), 0.0)
        .unwrap();
    assert_eq!(
        s2.action,
        Some(Action::RestartAfter(Duration::from_secs(2)))
    );
    m.step(Input::Starting, t(3), 0.0).unwrap();
    let s3 = m
        .step(Input::StartFailed("exit 1".into()), t(3), 0.0)
        .unwrap();
    assert_eq!(states(&s3), [(Starting, Quarantined)]);
    assert_eq!(s3.action, Some(Action::Stop));
    assert_eq!(m.restart_count, 2, "no restart after quarantine");
    assert!(
        m.quarantine_reason
            .as_deref()
            .unwrap()
            .contains("3 consecutive failures")
    );
}

#[test]
fn release_leaves_quarantine_for_restarting_and_resets_failures() {
    let mut m = machine();
    m.step(
        Input::OperatorQuarantine {
            principal: "ops".into(),
            reason: Some("broken".into()),
        },
        t(1),
        0.0,
    )
    .unwrap();
    assert_eq!(m.state, Quarantined);
    let s = m
        .step(
            Input::OperatorRelease {
                principal: "ops".into(),
            },
            t(2),
            0.0,
        )
        .unwrap();
    assert_eq!(states(&s), [(Quarantined, Restarting)]);
    assert_eq!(s.action, Some(Action::RestartAfter(Duration::ZERO)));
    assert_eq!(
        (m.consecutive_failures, m.quarantine_reason.clone()),
        (0, None)
    );
    assert!(
        m.step(
            Input::OperatorRelease {
                principal: "ops".into()
            },
            t(3),
            0.0
        )
        .is_err(),
        "only a quarantined backend can be released"
    );
}

#[test]
fn probes_degrade_first_and_go_offline_at_the_threshold() {
    let mut m = machine();
    let s = m
        .step(Input::ProbeFailed("timeout after 1s".into()), t(1), 0.0)
        .unwrap();
    assert_eq!(states(&s), [(Running, Degraded)]);
    assert_eq!(s.action, None);
    let s = m
        .step(Input::ProbeFailed("timeout after 1s".into()), t(2), 0.0)
        .unwrap();
    assert_eq!(states(&s), [(Degraded, Offline), (Offline, Restarting)]);
    assert!(
        s.transitions[0]
            .reason
            .contains("2 consecutive probes failed")
    );
}

#[test]
fn a_good_probe_resets_the_probe_streak_and_slowness_only_degrades() {
    let mut m = machine();
    m.step(Input::ProbeFailed("x".into()), t(1), 0.0).unwrap();
    let s = m
        .step(Input::ProbeOk { degraded: None }, t(2), 0.0)
        .unwrap();
    assert_eq!(states(&s), [(Degraded, Running)]);
    let s = m.step(Input::ProbeFailed("x".into()), t(3), 0.0).unwrap();
    assert_eq!(states(&s), [(Running, Degraded)], "streak was reset");
    let s = m
        .step(
            Input::ProbeOk {
                degraded: Some("429 Too Many Requests".into()),
            },
            t(4),
            0.0,
        )
        .unwrap();
    assert_eq!(s.action, None, "degraded is never a restart");
    assert_eq!(m.state, Degraded);
}

#[test]
fn infrastructure_failures_are_unknown_and_never_restart() {
    let mut m = machine();
    let s = m
        .step(
            Input::InfraFailed("engine socket unreachable".into()),
            t(1),
            0.0,
        )
        .unwrap();
    assert_eq!(states(&s), [(Running, Unknown)]);
    assert_eq!(s.action, None);
    assert_eq!(m.restart_count, 0);
    let s = m
        .step(Input::ProbeOk { degraded: None }, t(2), 0.0)
        .unwrap();
    assert_eq!(states(&s), [(Unknown, Running)]);
}

#[test]
fn flapping_is_bounded_until_uptime_resets_the_count() {
    // up/down every 5 s, healthy_reset 30 s: failures keep counting → quarantine after 3.
    let mut m = machine();
    let mut restarts = 0;
    for i in 0..10u64 {
        let s = m
            .step(Input::Exited("crashed".into()), t(i * 5), 0.0)
            .unwrap();
        if matches!(s.action, Some(Action::RestartAfter(_))) {
            restarts += 1;
            m.step(Input::Starting, t(i * 5 + 1), 0.0).unwrap();
            m.step(Input::Up, t(i * 5 + 1), 0.0).unwrap();
            m.step(Input::Uptime(Duration::from_secs(4)), t(i * 5 + 4), 0.0)
                .unwrap();
        } else {
            break;
        }
    }
    assert_eq!(restarts, 2);
    assert_eq!(m.state, Quarantined);

    // The same flaps with 30 s of uptime in between never quarantine.
    let mut m = machine();
    for i in 0..10u64 {
        let s = m
            .step(Input::Exited("crashed".into()), t(i * 40), 0.0)
            .unwrap();
        assert!(
            matches!(s.action, Some(Action::RestartAfter(_))),
            "flap {i}"
        );
        m.step(Input::Starting, t(i * 40 + 1), 0.0).unwrap();
        m.step(Input::Up, t(i * 40 + 1), 0.0).unwrap();
        m.step(Input::Uptime(Duration::from_secs(31)), t(i * 40 + 32), 0.0)
            .unwrap();
    }
    assert_eq!(m.consecutive_failures, 0);
}

#[test]
fn remote_backends_are_retried_never_restarted_or_quarantined() {
    let mut m = Machine::new("r", policy(), 2, false, t(0));
    m.step(Input::Up, t(0), 0.0).unwrap();
    for i in 1..10u64 {
        let s = m
            .step(Input::Exited("connection closed".into()), t(i), 0.0)
            .unwrap();
        assert!(matches!(s.action, Some(Action::RetryAfter(_))));
        assert_eq!(m.state, Offline);
        m.step(Input::Starting, t(i), 0.0).unwrap();
    }
    assert_eq!(m.restart_count, 0);
    assert!(
        m.step(
            Input::OperatorRestart {
                principal: "ops".into()
            },
            t(20),
            0.0
        )
        .is_err()
    );
}

#[test]
fn quarantine_reprobe_retries_on_a_long_backoff_and_success_leaves_it() {
    let mut p = policy();
    p.max_restarts = 1;
    p.quarantine_reprobe = Some(Duration::from_secs(600));
    let mut m = Machine::new("b", p, 2, true, t(0));
    let s = m
        .step(Input::StartFailed("boom".into()), t(0), 0.0)
        .unwrap();
    assert_eq!(m.state, Quarantined);
    assert_eq!(s.action, Some(Action::RetryAfter(Duration::from_secs(600))));
    m.step(Input::Starting, t(600), 0.0).unwrap();
    assert_eq!(
        m.state, Quarantined,
        "a re-probe does not leave quarantine by starting"
    );
    let s = m
        .step(Input::StartFailed("boom".into()), t(600), 0.0)
        .unwrap();
    assert_eq!(s.action, Some(Action::RetryAfter(Duration::from_secs(600))));
    assert_eq!(m.state, Quarantined);
    m.step(Input::Starting, t(1200), 0.0).unwrap();
    let s = m.step(Input::Up, t(1200), 0.0).unwrap();
    assert_eq!(states(&s), [(Quarantined, Running)]);
    assert_eq!(m.quarantine_reason, None);
}

#[test]
fn restored_quarantine_holds() {
    let mut m = Machine::new("b", policy(), 2, true, t(0));
    m.restore(Quarantined, 7, 3, Some("5 consecutive failures".into()));
    assert_eq!((m.state, m.restart_count), (Quarantined, 7));
    let s = m.step(Input::Starting, t(1), 0.0).unwrap();
    assert!(s.transitions.is_empty());
}

#[test]
fn a_new_version_is_updating_until_promoted_and_a_failure_stops_it() {
    let mut m = Machine::new("b", policy(), 2, true, t(0));
    m.begin_update("update to v2 started".into(), 4);
    assert_eq!((m.state, m.restart_count), (Updating, 4));
    // Probes judge a live instance only: an updating one is not.
    let s = m
        .step(Input::ProbeFailed("slow".into()), t(1), 0.0)
        .unwrap();
    assert_eq!((states(&s), s.action), (vec![], None));
    let s = m
        .step(Input::Promoted("updated to v2".into()), t(2), 0.0)
        .unwrap();
    assert_eq!(states(&s), vec![(Updating, Running)]);
    assert_eq!(m.reason, "updated to v2");
    // Only an updating machine is promoted.
    assert!(m.step(Input::Promoted("again".into()), t(3), 0.0).is_err());

    let mut m = Machine::new("b", policy(), 2, true, t(0));
    m.begin_update("update to v2 started".into(), 0);
    let s = m
        .step(Input::Exited("exited with code 3".into()), t(1), 0.0)
        .unwrap();
    assert_eq!(
        (states(&s), s.action, m.restart_count),
        (vec![(Updating, Offline)], Some(Action::Stop), 0)
    );
}

#[test]
fn a_promotion_leaves_quarantine_behind() {
    let mut m = Machine::new("b", policy(), 2, true, t(0));
    m.restore(Quarantined, 3, 3, Some("3 consecutive failures".into()));
    m.begin_update("update to v2 started".into(), 3);
    m.step(Input::Promoted("updated to v2".into()), t(1), 0.0)
        .unwrap();
    assert_eq!(
        (m.state, m.quarantine_reason.clone(), m.consecutive_failures),
        (Running, None, 0)
    );
}
