//! What differs between the running config and a newly read one: the
//! pure half of a config reload (`app::reload` carries it out).
//!
//! Backends are compared by name and whole config: an edited backend is a
//! new one under the same name. Every other key is either applied by the
//! reload or named as needing a restart ([`restart_only_changes`]).

use super::{ApiConfig, BackendConfig, Config};

/// What became of one backend entry of the new file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Same name, same config: it keeps running as it is.
    Kept,
    /// Same name, another config: replaced.
    Changed,
    /// Same name, with `[backends.update]`, and only what it runs differs
    /// (image, command, arguments, environment): rolled out as an update.
    Updated,
    /// A name the running config does not have.
    Added,
}

/// The backend lists compared.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BackendDiff {
    /// One per entry of the new list, in its order.
    pub entries: Vec<Change>,
    /// Names of running backends the new list does not have, in running
    /// order.
    pub removed: Vec<String>,
}

impl BackendDiff {
    pub fn of(running: &[&BackendConfig], next: &[BackendConfig]) -> Self {
        let entries = next
            .iter()
            .map(|cfg| match running.iter().find(|r| r.name == cfg.name) {
                Some(r) if **r == *cfg => Change::Kept,
                Some(r) if cfg.update.is_some() && only_what_runs_differs(r, cfg) => {
                    Change::Updated
                }
                Some(_) => Change::Changed,
                None => Change::Added,
            })
            .collect();
        let removed = running
            .iter()
            .filter(|r| !next.iter().any(|n| n.name == r.name))
            .map(|r| r.name.clone())
            .collect();
        Self { entries, removed }
    }
}

/// Whether `a` and `b` differ in what they run only: a stdio backend's
/// command, arguments, environment and directory, a container's image,
/// command, arguments and environment.
pub fn only_what_runs_differs(a: &BackendConfig, b: &BackendConfig) -> bool {
    a != b && *a == with_what_runs(b, a)
}

/// `cfg` running what `from` runs (everything else `cfg`'s).
pub fn with_what_runs(cfg: &BackendConfig, from: &BackendConfig) -> BackendConfig {
    use super::{RuntimeKind, Transport};
    let mut out = cfg.clone();
    if let (Transport::Stdio { .. }, Transport::Stdio { .. }) = (&out.transport, &from.transport) {
        out.transport = from.transport.clone();
    }
    if let (RuntimeKind::Container(to), RuntimeKind::Container(spec)) =
        (&mut out.runtime, &from.runtime)
    {
        to.image = spec.image.clone();
        to.command = spec.command.clone();
        to.args = spec.args.clone();
        to.env = spec.env.clone();
    }
    // What `${NAME}` references took: they follow what runs.
    out.substituted = from.substituted.clone();
    out
}

/// The keys of `next` that differ from `running` and that a running
/// gateway does not change: they take effect after a restart.
///
/// `next` is taken apart whole, so a new config key does not compile until
/// it is sorted here: applied by the reload, or compared.
pub fn restart_only_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    let Config {
        file: _,
        listen,
        naming,
        log_level,
        log_json,
        request_timeout,
        connect_timeout,
        startup_timeout,
        max_body_bytes,
        page_size,
        allowed_hosts,
        allowed_origins,
        data_dir,
        // Merged into every backend's config: applied with the backends.
        health: _,
        restart: _,
        api:
            ApiConfig {
                listen: api_listen,
                // Applied by the reload.
                tokens: _,
                allowed_hosts: api_hosts,
                allowed_origins: api_origins,
                failed_tokens,
                roles: api_roles,
            },
        freshness,
        poller,
        plugins,
        telemetry,
        limits,
        store,
        cluster,
        auth:
            super::AuthConfig {
                allow_anonymous,
                // Applied by the reload.
                keys: _,
                oauth,
            },
        // Applied by the reload.
        backends: _,
        policies: _,
        // Applied by the reload.
        audit: _,
        // Applied by the reload, but for the model.
        tool_search,
    } = next;
    let r = running;
    [
        ("listen", r.listen != *listen),
        ("naming", r.naming != *naming),
        ("log_level", r.log_level != *log_level),
        ("log_format", r.log_json != *log_json),
        ("request_timeout", r.request_timeout != *request_timeout),
        ("connect_timeout", r.connect_timeout != *connect_timeout),
        ("startup_timeout", r.startup_timeout != *startup_timeout),
        ("max_body_bytes", r.max_body_bytes != *max_body_bytes),
        ("page_size", r.page_size != *page_size),
        ("allowed_hosts", r.allowed_hosts != *allowed_hosts),
        ("allowed_origins", r.allowed_origins != *allowed_origins),
        ("data_dir", r.data_dir != *data_dir),
        ("api.listen", r.api.listen != *api_listen),
        ("api.allowed_hosts", r.api.allowed_hosts != *api_hosts),
        ("api.allowed_origins", r.api.allowed_origins != *api_origins),
        (
            "api.failed_token_limit",
            r.api.failed_tokens.limit != failed_tokens.limit,
        ),
        (
            "api.failed_token_window",
            r.api.failed_tokens.window != failed_tokens.window,
        ),
        (
            "api.failed_token_cooldown",
            r.api.failed_tokens.cooldown != failed_tokens.cooldown,
        ),
        ("api.roles", r.api.roles != *api_roles),
        ("freshness", r.freshness != *freshness),
        ("poller", r.poller != *poller),
        ("plugins", r.plugins != *plugins),
        ("telemetry", r.telemetry != *telemetry),
        ("limits", r.limits != *limits),
        ("store", r.store != *store),
        // A replica name derived from `listen` changes with it: that
        // change is `listen`'s.
        (
            "cluster",
            r.cluster != *cluster
                && (r.cluster.replica_named
                    || cluster.replica_named
                    || super::ClusterConfig {
                        replica: r.cluster.replica.clone(),
                        ..cluster.clone()
                    } != r.cluster),
        ),
        (
            "auth.allow_anonymous",
            r.auth.allow_anonymous != *allow_anonymous,
        ),
        ("auth.oauth", r.auth.oauth != *oauth),
        (
            "tool_search.semantic.model_dir",
            r.tool_search.model_dir != tool_search.model_dir,
        ),
    ]
    .into_iter()
    .filter_map(|(key, differs)| differs.then_some(key))
    .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const TOKEN: &str = "4f9c2b7e1a0d8c3f6b5e9a2d7c1f0e8b";

    fn config(text: &str) -> Config {
        Config::parse(text, Path::new("vigil.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn base(extra: &str) -> String {
        format!(
            "{extra}\n[api]\nlisten = \"127.0.0.1:8081\"\n[[api.tokens]]\nname = \"ops\"\nrole = \"operator\"\ntoken = \"{TOKEN}\"\n"
        )
    }

    #[test]
    fn backends_are_kept_changed_added_and_removed_by_name_and_config() {
        let running = config(&base(
            "[[backends]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n[[backends]]\nname = \"b\"\ntransport = \"stdio\"\ncommand = \"x\"\n[[backends]]\nname = \"c\"\ntransport = \"stdio\"\ncommand = \"x\"",
        ));
        let next = config(&base(
            "[[backends]]\nname = \"c\"\ntransport = \"stdio\"\ncommand = \"x\"\n[[backends]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"y\"\n[[backends]]\nname = \"d\"\ntransport = \"stdio\"\ncommand = \"x\"",
        ));
        let running: Vec<&BackendConfig> = running.backends.iter().collect();
        assert_eq!(
            BackendDiff::of(&running, &next.backends),
            BackendDiff {
                entries: vec![Change::Kept, Change::Changed, Change::Added],
                removed: vec!["b".into()],
            }
        );
    }

    #[test]
    fn a_backend_with_an_update_table_is_updated_when_only_what_it_runs_changed() {
        let stdio = |command: &str, timeout: &str| {
            format!(
                "[[backends]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"{command}\"\nrequest_timeout = \"{timeout}\"\n[backends.update]\nbake = \"1s\""
            )
        };
        let running = config(&base(&stdio("x", "5s")));
        let running: Vec<&BackendConfig> = running.backends.iter().collect();
        let diff = |next: &str| BackendDiff::of(&running, &config(&base(next)).backends).entries;
        assert_eq!(diff(&stdio("y", "5s")), vec![Change::Updated]);
        // Anything else changed with it: replaced, as without the table.
        assert_eq!(diff(&stdio("y", "6s")), vec![Change::Changed]);
        assert_eq!(diff(&stdio("x", "5s")), vec![Change::Kept]);
        let container = |image: &str, port: u16| {
            format!(
                "[[backends]]\nname = \"a\"\ntransport = \"http\"\nruntime = \"container\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nimage = \"{image}\"\nport = {port}\n[backends.update]"
            )
        };
        let running = config(&base(&container("i:1", 9000)));
        let running: Vec<&BackendConfig> = running.backends.iter().collect();
        let diff = |next: &str| BackendDiff::of(&running, &config(&base(next)).backends).entries;
        assert_eq!(diff(&container("i:2", 9000)), vec![Change::Updated]);
        assert_eq!(diff(&container("i:2", 9001)), vec![Change::Changed]);
    }

    #[test]
    fn an_unchanged_file_needs_nothing() {
        assert!(restart_only_changes(&config(&base("")), &config(&base(""))).is_empty());
    }

    #[test]
    fn every_top_level_key_is_compared() {
        let running = config(&base(""));
        for (line, key) in [
            ("listen = \"127.0.0.1:9999\"", "listen"),
            ("naming = \"none\"", "naming"),
            ("separator = \".\"", "naming"),
            ("log_level = \"debug\"", "log_level"),
            ("log_format = \"json\"", "log_format"),
            ("request_timeout = \"5s\"", "request_timeout"),
            ("connect_timeout = \"5s\"", "connect_timeout"),
            ("startup_timeout = \"30s\"", "startup_timeout"),
            ("max_body_bytes = 2048", "max_body_bytes"),
            ("page_size = 10", "page_size"),
            ("allowed_hosts = [\"vigil.example\"]", "allowed_hosts"),
            (
                "allowed_origins = [\"https://app.example\"]",
                "allowed_origins",
            ),
            ("[freshness]\ndebounce = \"1s\"", "freshness"),
            ("[poller]\ninterval = \"1m\"", "poller"),
            ("[plugins]\ndir = \"plugins\"", "plugins"),
            (
                "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"",
                "telemetry",
            ),
            ("[cluster]\nlease = \"20s\"", "cluster"),
            ("[cluster]\nreplica = \"vigil-b\"", "cluster"),
        ] {
            let next = config(&base(line));
            assert_eq!(restart_only_changes(&running, &next), [key], "{line}");
        }
        // The compiled-plugin cache lives in the data directory.
        let next = config(&base("data_dir = \"elsewhere\""));
        assert_eq!(
            restart_only_changes(&running, &next),
            ["data_dir", "plugins"]
        );
    }

    #[test]
    fn api_keys_but_tokens_need_a_restart() {
        let running = config(&base(""));
        for (line, key) in [
            ("listen = \"127.0.0.1:9998\"", "api.listen"),
            ("allowed_hosts = [\"vigil.example\"]", "api.allowed_hosts"),
            (
                "allowed_origins = [\"https://app.example\"]",
                "api.allowed_origins",
            ),
            ("failed_token_limit = 3", "api.failed_token_limit"),
            ("failed_token_window = \"5m\"", "api.failed_token_window"),
            (
                "failed_token_cooldown = \"5m\"",
                "api.failed_token_cooldown",
            ),
        ] {
            let text = base("").replace("listen = \"127.0.0.1:8081\"", line);
            let text = if key == "api.listen" {
                text
            } else {
                text.replace("[api]\n", "[api]\nlisten = \"127.0.0.1:8081\"\n")
            };
            assert_eq!(
                restart_only_changes(&running, &config(&text)),
                [key],
                "{line}"
            );
        }
        // A rotated secret (same count, same name) needs no restart: the
        // reload applies it.
        let rotated = base("").replace(TOKEN, "8b0e1f7c2d9a5e6b3f8c0d1a7e2b9c4f");
        assert!(restart_only_changes(&running, &config(&rotated)).is_empty());
    }

    #[test]
    fn health_and_restart_tables_go_with_the_backends() {
        let running = config(&base(""));
        let next = config(&base(
            "[health]\nunhealthy_threshold = 5\n[restart]\nbase = \"2s\"",
        ));
        assert!(restart_only_changes(&running, &next).is_empty());
    }
}
