use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("vigil.toml"))
}

fn err(text: &str) -> String {
    parse(text)
        .expect_err("config should be refused")
        .to_string()
}

#[test]
fn defaults_apply() {
    let c = parse("").unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(
        c.naming,
        Naming::Prefix {
            separator: "__".into()
        }
    );
    assert_eq!(c.request_timeout, Duration::from_secs(60));
    assert!(c.backends.is_empty());
}

#[test]
fn full_backend_tables_parse() {
    let c = parse(
        r#"
        naming = "none"
        [[backends]]
        name = "files"
        transport = "stdio"
        command = "srv"
        args = ["--flag"]
        env = { KEY = "value" }
        [[backends]]
        name = "remote"
        transport = "http"
        url = "http://127.0.0.1:3902/mcp"
        headers = { Authorization = "Bearer x" }
        request_timeout = "5s"
        [[backends]]
        name = "off"
        transport = "stdio"
        command = "x"
        enabled = false
        "#,
    )
    .unwrap();
    assert_eq!(c.naming, Naming::None);
    assert_eq!(c.backends.len(), 2, "disabled backends are dropped");
    assert!(
        matches!(&c.backends[0].transport, Transport::Stdio { command, .. } if command == "srv")
    );
    assert_eq!(
        c.request_timeout_for(&c.backends[1]),
        Duration::from_secs(5)
    );
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let e = err("listen = \"127.0.0.1:1\"\nlisen = \"x\"\n");
    assert!(e.starts_with("vigil.toml:2:"), "{e}");
    assert!(e.contains("lisen"), "{e}");
    assert!(e.contains("fix its spelling"), "{e}");
}

#[test]
fn duplicate_backend_name_is_refused() {
    let e = err(r#"
        [[backends]]
        name = "a"
        transport = "stdio"
        command = "x"
        [[backends]]
        name = "a"
        transport = "stdio"
        command = "y"
        "#);
    assert!(
        e.contains("backends[1].name: duplicate backend name `a`"),
        "{e}"
    );
}

#[test]
fn missing_command_and_url_are_all_reported() {
    let e = err(r#"
        [[backends]]
        name = "a"
        transport = "stdio"
        [[backends]]
        name = "b"
        transport = "http"
        "#);
    assert!(e.contains("backends[0].command: missing"), "{e}");
    assert!(e.contains("backends[1].url: missing"), "{e}");
}

#[test]
fn bad_values_say_how_to_fix() {
    let e = err("naming = \"weird\"\nrequest_timeout = \"soon\"\nlisten = \"nowhere\"\n");
    assert!(
        e.contains("naming: unknown value `weird`: use \"prefix\" or \"none\""),
        "{e}"
    );
    assert!(
        e.contains("request_timeout: `soon` is not a duration"),
        "{e}"
    );
    assert!(e.contains("listen: `nowhere` is not an address"), "{e}");
}

#[test]
fn roots_are_absolute_paths_or_file_uris() {
    let backend = |roots: &str| {
        format!(
            "[[backends]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"fs\"\nroots = {roots}\n"
        )
    };
    let c = parse(&backend(r#"["/srv/docs", "file:///srv/my%20notes"]"#)).unwrap();
    assert_eq!(
        c.backends[0].roots,
        ["file:///srv/docs", "file:///srv/my%20notes"]
    );
    let e = err(&backend(r#"["docs", "https://example.com/x"]"#));
    assert!(
        e.contains("backends[0].roots[0]: `docs` is neither an absolute path nor a file:// URI")
            && e.contains("backends[0].roots[1]: `https://example.com/x` is neither"),
        "{e}"
    );
}

#[test]
fn keys_of_the_other_transport_are_refused() {
    let e = err(r#"
        [[backends]]
        name = "a"
        transport = "http"
        url = "http://x/mcp"
        command = "y"
        "#);
    assert!(
        e.contains("backends[0].command: only applies to transport = \"stdio\""),
        "{e}"
    );
}

#[test]
fn transport_managed_headers_are_refused() {
    let e = err(r#"
        [[backends]]
        name = "a"
        transport = "http"
        url = "http://x/mcp"
        headers = { "Mcp-Session-Id" = "abc" }
        "#);
    assert!(
        e.contains("backends[0].headers.Mcp-Session-Id: is set by the MCP transport itself"),
        "{e}"
    );
}

fn with_env(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    with_env_at(text, Path::new("vigil.toml"), vars)
}

/// `text` as the config file `path`, with `vars` as the whole environment.
pub(super) fn with_env_at(
    text: &str,
    path: &Path,
    vars: &[(&str, &str)],
) -> Result<Config, ConfigError> {
    let raw: raw::RawConfig = toml::from_str(text).unwrap();
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_raw_with_env(raw, path, &move |k| {
        vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
}

#[test]
fn freshness_debounce_defaults_to_the_health_interval() {
    let c = with_env("[health]\ninterval = \"7s\"\ntimeout = \"1s\"", &[]).unwrap();
    assert_eq!(c.freshness.debounce, Duration::from_secs(7));
    let c = with_env("[freshness]\ndebounce = \"250ms\"", &[]).unwrap();
    assert_eq!(c.freshness.debounce, Duration::from_millis(250));
}

#[test]
fn poller_interval_comes_from_the_file_or_the_environment() {
    let c = with_env("", &[]).unwrap();
    assert_eq!(c.poller.interval, Duration::from_secs(300));
    assert_eq!(c.poller.concurrency, 4);
    let c = with_env("[poller]\ninterval = \"1m\"\nconcurrency = 2", &[]).unwrap();
    assert_eq!(c.poller.interval, Duration::from_secs(60));
    assert_eq!(c.poller.concurrency, 2);
    let c = with_env("[poller]\ninterval = \"1m\"", &[(POLL_INTERVAL_ENV, "2s")]).unwrap();
    assert_eq!(c.poller.interval, Duration::from_secs(2));
}

#[test]
fn bad_freshness_and_poller_values_are_refused() {
    let e = with_env("[freshness]\ndebounce = \"soon\"", &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("freshness.debounce"), "{e}");
    let e = with_env("[poller]\nconcurrency = 0", &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("poller.concurrency: must be at least 1"), "{e}");
    let e = with_env("", &[(POLL_INTERVAL_ENV, "often")])
        .unwrap_err()
        .to_string();
    assert!(e.contains(POLL_INTERVAL_ENV), "{e}");
}

#[test]
fn durations_longer_than_a_year_are_refused() {
    for text in [
        "connect_timeout = \"500000000000y\"",
        "[health]\ninterval = \"500000000000y\"",
        "[freshness]\ndebounce = \"2y\"",
        "[poller]\ninterval = \"400days\"",
    ] {
        let e = with_env(text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("is too long: durations are at most 365 days"),
            "{text}: {e}"
        );
    }
    assert!(with_env("[restart]\nquarantine_reprobe = \"365days\"", &[]).is_ok());
}

#[test]
fn forward_auth_parses_with_its_idle_limit() {
    let c = parse(
        r#"
        [[backends]]
        name = "per-user"
        transport = "http"
        url = "http://127.0.0.1:3902/mcp"
        forward_auth = true
        session_idle = "2m"
        [[backends]]
        name = "plain"
        transport = "http"
        url = "http://127.0.0.1:3903/mcp"
        "#,
    )
    .unwrap();
    assert!(c.backends[0].forward_auth);
    assert_eq!(c.backends[0].session_idle, Duration::from_secs(120));
    assert!(!c.backends[1].forward_auth);
    assert_eq!(c.backends[1].session_idle, Duration::from_secs(600));
}

#[test]
fn forward_auth_mistakes_are_refused_with_the_key() {
    let e = err(r#"
        [[backends]]
        name = "p"
        transport = "http"
        url = "http://127.0.0.1:3902/mcp"
        forward_auth = true
        headers = { authorization = "Bearer shared" }
        "#);
    assert!(
        e.contains("backends[0].headers.authorization")
            && e.contains("conflicts with forward_auth"),
        "{e}"
    );
    let e = err(r#"
        [[backends]]
        name = "s"
        transport = "stdio"
        command = "x"
        forward_auth = true
        "#);
    assert!(e.contains("backends[0].forward_auth"), "{e}");
    let e = err(r#"
        [[backends]]
        name = "p"
        transport = "http"
        url = "http://127.0.0.1:3902/mcp"
        session_idle = "1m"
        "#);
    assert!(
        e.contains("backends[0].session_idle") && e.contains("only applies with forward_auth"),
        "{e}"
    );
    let e = err(r#"
        [[backends]]
        name = "p"
        transport = "http"
        url = "http://127.0.0.1:3902/mcp"
        forward_auth = true
        session_idle = "0s"
        "#);
    assert!(e.contains("longer than zero"), "{e}");
}

#[test]
fn probe_plugins_parse_with_their_arguments() {
    let c = parse(
        r#"
        [plugins]
        dir = "plugins"
        [[backends]]
        name = "api"
        transport = "http"
        url = "http://127.0.0.1:3902/mcp"
        probes = [{ plugin = "http-readiness", url = "http://127.0.0.1:9/healthz", every = "10s", degraded_ms = 200, strict = true }]
        "#,
    )
    .unwrap();
    assert_eq!(c.plugins.dir.as_deref(), Some(Path::new("plugins")));
    assert_eq!(c.plugins.cache, c.data_dir.join("plugin-cache"));
    assert_eq!(c.plugins.max_file_bytes, 64 << 20);
    let p = &c.backends[0].probes[0];
    assert_eq!(p.plugin, "http-readiness");
    assert_eq!(p.every, Some(Duration::from_secs(10)));
    assert_eq!(p.args["url"], "http://127.0.0.1:9/healthz");
    assert_eq!(p.args["degraded_ms"], "200");
    assert_eq!(p.args["strict"], "true");
    assert!(!p.args.contains_key("plugin") && !p.args.contains_key("every"));
}

#[test]
fn the_plugin_file_cap_is_set_and_bounded() {
    let with = |n: u64| {
        format!(
            "[plugins]\ndir = \"plugins\"\nmax_file_bytes = {n}\n[[backends]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n"
        )
    };
    assert_eq!(
        parse(&with(128 << 20)).unwrap().plugins.max_file_bytes,
        128 << 20
    );
    let e = err(&with(10));
    assert!(
        e.contains("plugins.max_file_bytes: must be at least 1024"),
        "{e}"
    );
    let e = err(&with(2 << 30));
    assert!(
        e.contains("plugins.max_file_bytes: must be at most 1073741824"),
        "{e}"
    );
}

#[test]
fn probe_plugin_mistakes_are_refused_with_their_keys() {
    let e = err(r#"
        [[backends]]
        name = "a"
        transport = "stdio"
        command = "x"
        probes = [{ plugin = "p" }]
        "#);
    assert!(
        e.contains("backends[0].probes") && e.contains("[plugins] dir"),
        "{e}"
    );
    let e = err(r#"
        [plugins]
        dir = "plugins"
        [[backends]]
        name = "a"
        transport = "stdio"
        command = "x"
        probes = [{ every = "1s" }, { plugin = "p", every = "soon" }, { plugin = "q", nested = { a = 1 } }]
        "#);
    assert!(e.contains("backends[0].probes[0].plugin: missing"), "{e}");
    assert!(e.contains("backends[0].probes[1].every"), "{e}");
    assert!(e.contains("backends[0].probes[2].nested"), "{e}");
}

#[test]
fn telemetry_is_off_by_default_and_checks_its_endpoint() {
    let c = parse("").unwrap();
    assert_eq!(c.telemetry.otlp_endpoint, None);
    let c = parse("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/\"\n").unwrap();
    assert_eq!(
        c.telemetry.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318")
    );
    assert_eq!(c.telemetry.service_name, "vigil");
    let e = err("[telemetry]\notlp_endpoint = \"127.0.0.1:4318\"\n");
    assert!(
        e.contains("telemetry.otlp_endpoint") && e.contains("http://127.0.0.1:4318"),
        "{e}"
    );
    let e = err("[telemetry]\nendpoint = \"http://x\"\n");
    assert!(e.contains("endpoint"), "{e}");
}

#[test]
fn limits_default_and_override() {
    let c = parse("").unwrap();
    assert_eq!(c.limits.list, ListLimits::default());
    assert_eq!(c.limits.list.pages, 1_000);
    assert_eq!(c.limits.max_sessions, 2_048);
    assert_eq!(c.limits.mcp.connections, 4_096);
    assert_eq!(c.limits.api.connections, 256);
    assert_eq!(c.limits.mcp.read_timeout, Duration::from_secs(10));
    let c = parse(
        r#"
        [limits]
        list_pages = 5
        list_items = 10
        list_bytes = 2048
        max_sessions = 3
        connections = 7
        api_connections = 2
        write_timeout = "1s"
        "#,
    )
    .unwrap();
    assert_eq!(
        c.limits.list,
        ListLimits {
            pages: 5,
            items: 10,
            bytes: 2048
        }
    );
    assert_eq!(
        (
            c.limits.max_sessions,
            c.limits.mcp.connections,
            c.limits.api.connections
        ),
        (3, 7, 2)
    );
    assert_eq!(c.limits.api.write_timeout, Duration::from_secs(1));
}

#[test]
fn limits_refuse_zero_and_tiny_values_naming_each_key() {
    let e =
        err("[limits]\nlist_pages = 0\nlist_bytes = 10\nmax_sessions = 0\nidle_timeout = \"0s\"\n");
    for want in [
        "limits.list_pages: must be at least 1",
        "limits.list_bytes: must be at least 1024",
        "limits.max_sessions: must be at least 1",
        "limits.idle_timeout: must be longer than 0s",
    ] {
        assert!(e.contains(want), "{want} in {e}");
    }
}

#[test]
fn the_store_is_required_unless_made_optional() {
    let c = parse("").unwrap();
    assert!(
        !c.store.optional,
        "a store that cannot be opened refuses the start by default"
    );
    let c = parse("data_dir = \"state\"\n[store]\noptional = true\n").unwrap();
    assert!(c.store.optional);
    assert_eq!(c.data_dir, Path::new("state"), "data_dir stays top level");

    let e = err("[store]\noptinal = true\n");
    assert!(e.starts_with("vigil.toml:2:"), "{e}");
    assert!(
        e.contains("optinal") && e.contains("fix its spelling"),
        "{e}"
    );
    let e = err("[store]\noptional = \"yes\"\n");
    assert!(e.starts_with("vigil.toml:2:") && e.contains("bool"), "{e}");
    let e = err("[store]\ndata_dir = \"state\"\n");
    assert!(e.contains("data_dir"), "data_dir is a top-level key: {e}");
}

/// `url_env` names a variable; set and non-empty it selects PostgreSQL,
/// else the embedded store. A bad URL is a problem naming the key and the
/// variable, never the URL (it may hold a password).
#[test]
fn the_store_url_comes_from_the_variable_url_env_names() {
    let parse_env = |text: &str, value: Option<&str>| {
        let value = value.map(str::to_owned);
        Config::parse_with_env(text, Path::new("vigil.toml"), &move |k| {
            (k == "VIGIL_STORE_URL").then(|| value.clone()).flatten()
        })
    };
    let text = "[store]\nurl_env = \"VIGIL_STORE_URL\"\n";
    let c = parse_env(text, Some("postgres://vigil:pw@db.internal:6432/vigil")).unwrap();
    let url = c.store.url.as_ref().expect("PostgreSQL chosen");
    assert_eq!(url.var, "VIGIL_STORE_URL");
    assert_eq!(url.config.get_dbname(), Some("vigil"));
    assert_eq!(url.config.get_ports(), [6432]);
    assert!(
        !format!("{c:?}").contains("pw@"),
        "Debug never shows the URL"
    );

    for unset in [None, Some(""), Some("  ")] {
        let c = parse_env(text, unset).unwrap();
        assert_eq!(c.store.url, None, "{unset:?}: the embedded store");
        assert_eq!(c.store.url_env.as_deref(), Some("VIGIL_STORE_URL"));
    }
    assert_eq!(parse("").unwrap().store.url_env, None);

    for (value, want) in [
        (
            "postgres://vigil:s3cret@db:notaport/vigil",
            "does not hold a PostgreSQL URL",
        ),
        (
            "postgres://vigil:s3cret@db/vigil?sslmode=require",
            "asks for TLS",
        ),
    ] {
        let e = parse_env(text, Some(value)).unwrap_err().to_string();
        assert!(
            e.contains("store.url_env") && e.contains("`VIGIL_STORE_URL`") && e.contains(want),
            "{e}"
        );
        assert!(!e.contains("s3cret"), "never the URL: {e}");
    }
    let e = err("[store]\nurl_env = \"\"\n");
    assert!(e.contains("store.url_env: must not be empty"), "{e}");
}

// === [api] ===

const STRONG: &str = "4f9c2b7e1a0d8c3f6b5e9a2d7c1f0e8b";

fn api_with(keys: &str, listen: &str) -> String {
    format!(
        "[api]\nlisten = \"{listen}\"\n{keys}\n[[api.tokens]]\nname = \"ops\"\nrole = \"operator\"\ntoken = \"{STRONG}\"\n"
    )
}

#[test]
fn api_defaults_answer_loopback_names_and_the_listen_address() {
    let c = parse("").unwrap();
    assert_eq!(
        c.api.allowed_hosts,
        ["localhost", "127.0.0.1", "::1", "[::1]"]
    );
    assert!(c.api.allowed_origins.is_empty());
    assert_eq!(c.api.failed_tokens, FailedTokens::default());
    assert_eq!(c.api.failed_tokens.limit, 10);
    let c = parse(&api_with("", "10.1.2.3:8081")).unwrap();
    assert_eq!(c.api.allowed_hosts.last().unwrap(), "10.1.2.3");
    let c = parse(&api_with("", "[2001:db8::5]:8081")).unwrap();
    assert_eq!(c.api.allowed_hosts.last().unwrap(), "[2001:db8::5]");
}

#[test]
fn an_api_on_every_address_must_name_its_hosts() {
    let e = err(&api_with("", "0.0.0.0:8081"));
    assert!(
        e.contains("api.allowed_hosts: missing") && e.contains("accepts every address"),
        "{e}"
    );
    let c = parse(&api_with(
        "allowed_hosts = [\"vigil.example.com\"]",
        "0.0.0.0:8081",
    ))
    .unwrap();
    assert_eq!(c.api.allowed_hosts, ["vigil.example.com"]);
    assert!(parse(&api_with("allowed_hosts = [\"*\"]", "0.0.0.0:8081")).is_ok());
}

#[test]
fn api_host_origin_and_throttle_mistakes_name_their_keys() {
    let e = err(&api_with(
        "allowed_hosts = [\"http://vigil.example\"]\nallowed_origins = [\"vigil.example\", \"https://ok.example\"]\nfailed_token_limit = 0\nfailed_token_window = \"soon\"\nfailed_token_cooldown = \"0s\"",
        "127.0.0.1:8081",
    ));
    for key in [
        "api.allowed_hosts[0]: `http://vigil.example` is not a host",
        "api.allowed_origins[0]: `vigil.example` needs a scheme",
        "api.failed_token_limit: must be at least 1",
        "api.failed_token_window: `soon` is not a duration",
        "api.failed_token_cooldown: must be longer than 0s",
    ] {
        assert!(e.contains(key), "{key} in {e}");
    }
    assert!(!e.contains("allowed_origins[1]"), "{e}");
    let c = parse(&api_with(
        "allowed_origins = [\"*\"]\nfailed_token_limit = 3\nfailed_token_cooldown = \"5s\"",
        "127.0.0.1:8081",
    ))
    .unwrap();
    assert_eq!(c.api.allowed_origins, ["*"]);
    assert_eq!(
        (c.api.failed_tokens.limit, c.api.failed_tokens.cooldown),
        (3, Duration::from_secs(5))
    );
}

#[test]
fn weak_tokens_are_refused_naming_the_key_never_the_secret() {
    let token = |secret: &str| {
        format!("[[api.tokens]]\nname = \"ops\"\nrole = \"operator\"\ntoken = \"{secret}\"\n")
    };
    let e = err(&token("zzzzzzzzzzzzzzzzzzzz"));
    assert!(
        e.contains("api.tokens[0].token: is one character repeated"),
        "{e}"
    );
    assert!(!e.contains("zzzz"), "{e}");
    let e = err(&token("changemechangeme"));
    assert!(
        e.contains("api.tokens[0].token: has too little entropy")
            && e.contains("openssl rand -hex 32"),
        "{e}"
    );
    // The same rule for a secret from the environment.
    let raw: raw::RawConfig = toml::from_str(
        "[[api.tokens]]\nname = \"ops\"\nrole = \"operator\"\ntoken_env = \"OPS_TOKEN\"\n",
    )
    .unwrap();
    let e = Config::from_raw_with_env(raw, Path::new("vigil.toml"), &|_| Some("short".into()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "api.tokens[0].token_env: the secret in `OPS_TOKEN` is too short (5 characters)"
        ),
        "{e}"
    );
    assert!(parse(&token(STRONG)).is_ok());
}

#[test]
fn backend_values_expand_references_from_the_environment() {
    let c = with_env(
        r#"
        [[backends]]
        name = "files"
        transport = "stdio"
        command = "${BIN_DIR}/server"
        args = ["--token", "${TOKEN}", "--price=$5"]
        env = { API_KEY = "${TOKEN}", MODE = "${MODE:-fast}", LITERAL = "$${TOKEN}" }
        cwd = "${HOME}/work"
        [[backends]]
        name = "remote"
        transport = "http"
        url = "${BASE:-https://api.example.com}/mcp?key=${TOKEN}"
        headers = { Authorization = "Bearer ${TOKEN}" }
        "#,
        &[
            ("TOKEN", "s3cret"),
            ("BIN_DIR", "/opt/bin"),
            ("HOME", "/home/me"),
        ],
    )
    .unwrap();
    let Transport::Stdio {
        command,
        args,
        env,
        cwd,
    } = &c.backends[0].transport
    else {
        panic!("stdio expected")
    };
    assert_eq!(command, "/opt/bin/server");
    assert_eq!(args, &["--token", "s3cret", "--price=$5"]);
    assert_eq!(env["API_KEY"], "s3cret");
    assert_eq!(env["MODE"], "fast");
    assert_eq!(
        env["LITERAL"], "${TOKEN}",
        "a double dollar writes a literal reference"
    );
    assert_eq!(cwd.as_deref(), Some(Path::new("/home/me/work")));
    let Transport::Http { url, headers, .. } = &c.backends[1].transport else {
        panic!("http expected")
    };
    assert_eq!(url, "https://api.example.com/mcp?key=s3cret");
    assert_eq!(headers["Authorization"], "Bearer s3cret");
    assert_eq!(
        c.backends[0].substituted,
        ["/opt/bin", "s3cret", "s3cret", "/home/me"],
        "values taken from the environment are kept to be masked; defaults are not"
    );
    assert_eq!(c.backends[1].substituted, ["s3cret", "s3cret"]);
}

#[test]
fn an_unset_variable_is_refused_naming_the_key_and_the_variable() {
    let e = with_env(
        r#"
        [[backends]]
        name = "files"
        transport = "stdio"
        command = "srv"
        env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}" }
        [[backends]]
        name = "remote"
        transport = "http"
        url = "${BASE}/mcp"
        headers = { Authorization = "Bearer ${API_TOKEN}" }
        "#,
        &[],
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        [
            "vigil.toml: backends[0].env.GITHUB_PERSONAL_ACCESS_TOKEN: environment variable `GITHUB_TOKEN` is not set (referenced as `${GITHUB_TOKEN}`): set it in Vigil's environment, or give a default like `${GITHUB_TOKEN:-value}`",
            "vigil.toml: backends[1].url: environment variable `BASE` is not set (referenced as `${BASE}`): set it in Vigil's environment, or give a default like `${BASE:-value}`",
            "vigil.toml: backends[1].headers.Authorization: environment variable `API_TOKEN` is not set (referenced as `${API_TOKEN}`): set it in Vigil's environment, or give a default like `${API_TOKEN:-value}`",
        ]
        .join("\n")
    );
}

#[test]
fn other_reference_syntax_is_refused_with_the_fix() {
    let e = with_env(
        r#"
        [[backends]]
        name = "files"
        transport = "stdio"
        command = "srv"
        env = { KEY = "${env:KEY}", OPEN = "${KEY" }
        "#,
        &[("KEY", "v")],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(
            "backends[0].env.KEY: `${env:KEY}` is not a variable reference: write `${NAME}`"
        ),
        "{e}"
    );
    assert!(
        e.contains("backends[0].env.OPEN: `${` is not closed by `}`"),
        "{e}"
    );
}

#[test]
fn a_disabled_backend_needs_no_variables_but_correct_syntax() {
    let c = with_env(
        r#"
        [[backends]]
        name = "later"
        transport = "http"
        enabled = false
        url = "${BASE}/mcp"
        headers = { Authorization = "Bearer ${NOT_SET_YET}" }
        "#,
        &[],
    )
    .unwrap();
    assert!(c.backends.is_empty());
    let e = with_env(
        r#"
        [[backends]]
        name = "later"
        transport = "stdio"
        enabled = false
        command = "srv"
        env = { KEY = "${input:key}" }
        "#,
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("backends[0].env.KEY: `${input:key}` is not a variable reference"),
        "{e}"
    );
}

#[test]
fn values_without_references_are_unchanged() {
    let c = with_env(
        r#"
        [[backends]]
        name = "files"
        transport = "stdio"
        command = "srv"
        args = ["$HOME", "a$b", "{x}", "$"]
        "#,
        &[],
    )
    .unwrap();
    let Transport::Stdio { args, .. } = &c.backends[0].transport else {
        panic!("stdio expected")
    };
    assert_eq!(args, &["$HOME", "a$b", "{x}", "$"]);
}

#[test]
fn a_wildcard_origin_or_host_is_accepted_and_a_bad_entry_named() {
    let c = parse("allowed_origins = [\"*\"]\nallowed_hosts = [\"*\"]\n").unwrap();
    assert_eq!(c.allowed_origins, ["*"]);
    let e = err("allowed_origins = [\"example.com\"]\nallowed_hosts = [\"http://x/\"]\n");
    assert!(
        e.contains(
            "allowed_origins[0]: `example.com` needs a scheme, like \"https://example.com\""
        ),
        "{e}"
    );
    assert!(
        e.contains("allowed_hosts[0]: `http://x/` is not a host"),
        "{e}"
    );
}

#[test]
fn protocol_picks_the_era_per_backend() {
    let c = parse(
        r#"
        [[backends]]
        name = "a"
        transport = "stdio"
        command = "x"
        [[backends]]
        name = "b"
        transport = "http"
        url = "http://127.0.0.1:3902/mcp"
        protocol = "2026-07-28"
        [[backends]]
        name = "c"
        transport = "stdio"
        command = "x"
        protocol = "2025-06-18"
        "#,
    )
    .unwrap();
    use rmcp::model::ProtocolVersion;
    assert_eq!(c.backends[0].protocol, Protocol::Auto);
    assert_eq!(
        c.backends[1].protocol,
        Protocol::Modern(ProtocolVersion::V_2026_07_28)
    );
    assert_eq!(
        c.backends[2].protocol,
        Protocol::Handshake(ProtocolVersion::V_2025_06_18)
    );
}

#[test]
fn unknown_protocol_names_the_key_and_the_choices() {
    let e = err(r#"
        [[backends]]
        name = "a"
        transport = "stdio"
        command = "x"
        protocol = "2025-13-01"
        "#);
    assert!(e.contains("backends[0].protocol"), "{e}");
    assert!(e.contains("`2025-13-01`"), "{e}");
    assert!(
        e.contains("\"auto\"") && e.contains("\"2026-07-28\"") && e.contains("\"2025-11-25\""),
        "{e}"
    );
}

#[test]
fn share_is_a_stdio_choice_with_its_idle_time_and_a_cap() {
    let c = parse(
        r#"
        [limits]
        max_instances = 5
        [[backends]]
        name = "mem"
        transport = "stdio"
        command = "x"
        share = "session"
        session_idle = "2m"
        [[backends]]
        name = "who"
        transport = "stdio"
        command = "x"
        share = "principal"
        [[backends]]
        name = "all"
        transport = "stdio"
        command = "x"
        "#,
    )
    .unwrap();
    assert_eq!(c.limits.max_instances, 5);
    assert_eq!(c.backends[0].share, Share::Session);
    assert_eq!(c.backends[0].session_idle, Duration::from_secs(120));
    assert_eq!(c.backends[1].share, Share::Principal);
    assert_eq!(c.backends[2].share, Share::All);
    assert_eq!(parse("").unwrap().limits.max_instances, 64);

    let e = err(r#"
        [[backends]]
        name = "h"
        transport = "http"
        url = "http://127.0.0.1:3902/mcp"
        share = "session"
        "#);
    assert!(
        e.contains("backends[0].share") && e.contains("stdio backends only"),
        "{e}"
    );
    let e = err(r#"
        [[backends]]
        name = "s"
        transport = "stdio"
        command = "x"
        share = "client"
        "#);
    assert!(
        e.contains("backends[0].share") && e.contains("\"principal\""),
        "{e}"
    );
    let e = err(r#"
        [[backends]]
        name = "s"
        transport = "stdio"
        command = "x"
        session_idle = "1m"
        "#);
    assert!(
        e.contains("backends[0].session_idle") && e.contains("share = \"session\""),
        "{e}"
    );
    let e = err("[limits]\nmax_instances = 0\n");
    assert!(e.contains("limits.max_instances"), "{e}");
}
