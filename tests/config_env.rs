//! Environment overrides of one source's fields
//! (`QUEUE_EXPORTER__SOURCES__<index or NAME>__<FIELD>`), through the real
//! binary: `check --connect` and `serve` reach a password-protected Redis
//! and a RabbitMQ user whose passwords come only from the environment; the
//! passwords never show in any output (at log level trace); a bad override
//! is one line naming the variable; a SIGHUP reload reads the same
//! environment again and keeps the source running.
mod reliability_support;
mod support;

use std::time::Duration;

use reliability_support::*;
use support::*;

/// Asserts `secret` is in none of `outputs` (name, text).
fn assert_hidden(secret: &str, outputs: &[(String, String)]) {
    for (name, text) in outputs {
        assert!(
            !text.contains(secret),
            "the password shows in {name}:\n{}",
            text.lines()
                .filter(|l| l.contains(secret))
                .take(3)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// A config whose Redis source `main` points at a dead port without a
/// password, and whose RabbitMQ source `orders-eu` has no password: only
/// the environment makes them work.
fn config(user: &str, vhost: &str) -> String {
    format!(
        r#"sources:
  - name: main
    type: redis
    url: redis://127.0.0.1:{dead}
    poll_interval: 1s
    queues: [{{ key: work }}]
  - name: orders-eu
    type: rabbitmq
    url: http://127.0.0.1:15672
    username: {user}
    vhosts: ["{vhost}"]
    poll_interval: 1s
"#,
        dead = free_port()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_from_source_overrides_reach_the_backends_and_never_show() {
    let redis_pw = secret("redis-env");
    let rabbit_pw = secret("rabbit-env");
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let _: () = redis::cmd("RPUSH")
        .arg("work")
        .arg(&["a", "b", "c"])
        .query(&mut conn)
        .unwrap();
    // From now on only the password opens it.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", redis_pw.as_str()])
        .query(&mut conn)
        .unwrap();
    let (vhost, _amqp, _ch) = RabbitVhost::with_queue("config-env", "orders").await;
    let user_name = format!("qe-env-{}", std::process::id());
    let user = RabbitUser::create(&user_name, &rabbit_pw, "monitoring").await;
    user.permit(&vhost.name, "^$", "^$", "^$").await;

    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "config.yaml", &config(&user_name, &vhost.name));
    let path = path.to_str().unwrap();
    let redis_url = format!("redis://:{redis_pw}@127.0.0.1:{}", redis.port);
    let mut outputs = Vec::new();

    // Without the overrides, neither source is reachable.
    let (code, stdout, stderr) = run_bin(&["check", "--connect", "--config", path], &[]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("cannot poll source main"), "{stderr}");
    assert!(stderr.contains("cannot poll source orders-eu"), "{stderr}");

    // By index and by name (ORDERS_EU for `orders-eu`); the RabbitMQ
    // password is text even where it could read as something else.
    for redis_var in [
        "QUEUE_EXPORTER__SOURCES__0__URL",
        "QUEUE_EXPORTER__SOURCES__MAIN__URL",
    ] {
        let env = [
            (redis_var, redis_url.as_str()),
            (
                "QUEUE_EXPORTER__SOURCES__ORDERS_EU__PASSWORD",
                rabbit_pw.as_str(),
            ),
        ];
        for args in [
            vec!["check", "--config", path, "--log-level", "trace"],
            vec![
                "check",
                "--connect",
                "--config",
                path,
                "--log-level",
                "trace",
            ],
            vec!["once", "--config", path, "--log-level", "trace"],
        ] {
            let (code, stdout, stderr) = run_bin(&args, &env);
            assert_eq!(code, 0, "{redis_var} {args:?}: {stdout}{stderr}");
            if args[0] == "once" {
                assert!(
                    stdout.contains(r#"queue_depth{source="main",queue="work"} 3"#),
                    "{stdout}"
                );
                assert!(stdout.contains(r#"queue="orders""#), "{stdout}");
            }
            outputs.push((format!("{redis_var} {args:?} stdout"), stdout));
            outputs.push((format!("{redis_var} {args:?} stderr"), stderr));
        }
    }

    // A wrong password from the environment fails like one from the file,
    // without echoing it.
    let wrong = secret("wrong");
    let (code, stdout, stderr) = run_bin(
        &["check", "--connect", "--config", path],
        &[
            ("QUEUE_EXPORTER__SOURCES__MAIN__URL", &redis_url),
            ("QUEUE_EXPORTER__SOURCES__1__PASSWORD", &wrong),
        ],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("cannot poll source orders-eu (auth)"),
        "{stderr}"
    );
    assert_hidden(
        &wrong,
        &[
            ("wrong stdout".into(), stdout),
            ("wrong stderr".into(), stderr),
        ],
    );

    // `serve` at trace level: both sources up with the right values; then
    // a SIGHUP reads the same environment and keeps both running.
    let body = std::fs::read_to_string(path).unwrap();
    let mut exp = Exporter::start(
        &body,
        &["--log-level", "trace"],
        &[
            ("QUEUE_EXPORTER__SOURCES__MAIN__URL", &redis_url),
            ("QUEUE_EXPORTER__SOURCES__MAIN__POLL_INTERVAL", "100ms"),
            ("QUEUE_EXPORTER__SOURCES__ORDERS_EU__PASSWORD", &rabbit_pw),
        ],
    )
    .await;
    let up = poll_until(Duration::from_secs(20), || async {
        let text = exp.metrics().await;
        (sample(
            &text,
            "queue_depth",
            &[("source", "main"), ("queue", "work")],
        ) == Some(3.0)
            && sample(
                &text,
                "queue_exporter_source_up",
                &[("source", "orders-eu")],
            ) == Some(1.0))
        .then_some(text)
    })
    .await
    .unwrap_or_else(|| panic!("sources never up; stderr:\n{}", exp.stderr()));
    outputs.push(("serve /metrics".into(), up));
    let status = std::process::Command::new("kill")
        .args(["-HUP", &exp.pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let reloaded = poll_until(Duration::from_secs(20), || async {
        exp.stderr()
            .lines()
            .find(|l| l.contains("config reloaded from"))
            .map(str::to_string)
    })
    .await
    .unwrap_or_else(|| panic!("no reload; stderr:\n{}", exp.stderr()));
    assert!(
        reloaded.contains(r#"kept=["main", "orders-eu"]"#),
        "{reloaded}"
    );
    for page in ["/metrics", "/", "/readyz"] {
        let (_, text, _) = http_get(&format!("{}{page}", exp.base), &[]).await;
        outputs.push((format!("serve {page}"), text));
    }
    assert!(exp.terminate().success());
    outputs.push(("serve stdout".into(), exp.stdout()));
    outputs.push(("serve stderr".into(), exp.stderr()));
    assert!(
        exp.stderr().lines().count() > 20,
        "trace logging produced almost nothing"
    );
    assert_hidden(&redis_pw, &outputs);
    assert_hidden(&rabbit_pw, &outputs);
}

#[test]
fn a_bad_source_override_is_one_line_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(
        &dir,
        "config.yaml",
        "listen: { grpc: null }\nsources:\n  - name: main\n    type: redis\n    queues: [{ key: work }]\n",
    );
    let path = path.to_str().unwrap();
    let cases = [
        (
            "QUEUE_EXPORTER__SOURCES__MAIN__MAX_KEYS",
            "0",
            "environment variable QUEUE_EXPORTER__SOURCES__MAIN__MAX_KEYS: sources[0].max_keys: must be greater than 0",
        ),
        (
            "QUEUE_EXPORTER__SOURCES__1__URL",
            "redis://x",
            "environment variable QUEUE_EXPORTER__SOURCES__1__URL: sources[1]: no source at this index; sources by index (name): 0 (MAIN)",
        ),
        (
            "QUEUE_EXPORTER__SOURCES__0__URL",
            "http://qe:hunter2@127.0.0.1:1",
            "environment variable QUEUE_EXPORTER__SOURCES__0__URL: sources[0].url: must start with redis://",
        ),
    ];
    for (var, value, want) in cases {
        let (code, stdout, stderr) = run_bin(&["check", "--config", path], &[(var, value)]);
        assert_eq!(code, 2, "{var}: {stdout}{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{var}: {stderr}");
        assert!(stderr.starts_with(want), "{var}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
}

/// Issue 45: an environment value may be a secret, so a bad one is named
/// by its variable and what is wrong with it, and never echoed, whichever
/// field it sets (a source's or a top-level one) and whatever parses it.
#[test]
fn a_bad_override_never_echoes_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(
        &dir,
        "config.yaml",
        "listen: { grpc: null }\nsources:\n  - name: main\n    type: redis\n    queues: [{ key: work, score: timestamp }]\n",
    );
    let path = path.to_str().unwrap();
    let value = "s3cr3tvalue";
    let cases = [
        (
            "QUEUE_EXPORTER__SOURCES__0__POLL_INTERVAL",
            // As docs/configuration.md shows it.
            "sources[0].poll_interval: invalid duration (the value, not shown)",
        ),
        (
            "QUEUE_EXPORTER__SOURCES__MAIN__MAX_KEYS",
            "sources[0].max_keys: invalid type",
        ),
        (
            "QUEUE_EXPORTER__SOURCES__MAIN__QUEUES__0__SCORE",
            "sources[0].queues[0].score: unknown variant",
        ),
        ("QUEUE_EXPORTER__LOG__FORMAT", "log.format: unknown variant"),
        ("QUEUE_EXPORTER__LISTEN__HTTP", "listen.http: "),
        (
            "QUEUE_EXPORTER__SCALER__MAX_STALENESS",
            "scaler.max_staleness: invalid duration",
        ),
    ];
    for (var, want) in cases {
        for args in [
            vec!["check", "--config", path],
            vec!["serve", "--config", path, "--listen-http", "127.0.0.1:0"],
        ] {
            let (code, stdout, stderr) =
                run_bin_for(&args, &[(var, value)], Duration::from_secs(20));
            assert_eq!(code, 2, "{var} {args:?}: {stdout}{stderr}");
            assert_eq!(stderr.lines().count(), 1, "{var}: {stderr}");
            assert!(
                stderr.starts_with(&format!("environment variable {var}: {want}")),
                "{var} {args:?}: names the variable, the field and what is wrong: {stderr}"
            );
            assert!(
                !stderr.contains(value) && !stdout.contains(value),
                "{var} {args:?}: the value is echoed: {stderr}"
            );
        }
    }
}

/// Issue 40, item 1: a container with no config file can turn the gRPC
/// listener off from the environment. `off` is the documented spelling;
/// `none`, `null`, `~` and the empty text (what people try, since YAML's
/// `null` cannot be written there) say the same; anything else that is not
/// an address is one line naming the variable, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_listener_is_turned_off_from_the_environment() {
    let body = format!(
        "sources:\n  - name: main\n    type: redis\n    url: redis://127.0.0.1:{}\n    queues: [{{ key: work }}]\n",
        free_port()
    );
    // The file asks for a gRPC listener on `exp.grpc`; the variable wins.
    let mut exp = Exporter::start(&body, &[], &[("QUEUE_EXPORTER__LISTEN__GRPC", "off")]).await;
    // `/healthz` answers only after both listeners were bound.
    assert!(
        std::net::TcpStream::connect(exp.grpc).is_err(),
        "something listens on the gRPC port; stderr:\n{}",
        exp.stderr()
    );
    let stderr = exp.stderr();
    assert!(stderr.contains("serving /metrics"), "{stderr}");
    assert!(
        !stderr.contains("serving the KEDA external scaler"),
        "{stderr}"
    );
    assert!(exp.terminate().success());

    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "config.yaml", &body);
    let path = path.to_str().unwrap();
    for off in ["OFF", "none", "null", "~", ""] {
        let (code, stdout, stderr) = run_bin(
            &["check", "--config", path],
            &[("QUEUE_EXPORTER__LISTEN__GRPC", off)],
        );
        assert_eq!(code, 0, "{off:?}: {stdout}{stderr}");
    }
    let (code, _, stderr) = run_bin(
        &["check", "--config", path],
        &[("QUEUE_EXPORTER__LISTEN__GRPC", "nowhere")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        // An environment value is never echoed (issue 45).
        "environment variable QUEUE_EXPORTER__LISTEN__GRPC: listen.grpc: invalid socket address (the value, not shown) (host:port, or off to disable the listener)"
    );
}

/// Issue 40, item 2: a Redis source takes `password:` (from the file or
/// `…__PASSWORD`), so the password stays out of the URL; it reaches a
/// `requirepass` server and shows in no output at log level trace. Beside
/// a URL that carries a password, or beside `password_file`, it is one
/// config error line, exit 2.
#[test]
fn a_redis_password_field_keeps_the_password_out_of_the_url() {
    let pw = secret("redis-field");
    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"work", b"a", b"b"]);
    redis.run::<()>(&[b"CONFIG", b"SET", b"requirepass", pw.as_bytes()]);
    let dir = tempfile::tempdir().unwrap();
    let entry = |extra: &str| {
        format!(
            "listen: {{ grpc: off }}\nsources:\n  - name: main\n    type: redis\n    url: redis://127.0.0.1:{}\n{extra}    queues: [{{ key: work }}]\n",
            redis.port
        )
    };
    let in_file = write_file(
        &dir,
        "in-file.yaml",
        &entry(&format!("    password: {pw}\n")),
    );
    let bare = write_file(&dir, "bare.yaml", &entry(""));
    let pw_file = write_file(&dir, "pw", &pw);
    let both = write_file(
        &dir,
        "both.yaml",
        &entry(&format!(
            "    password: {pw}\n    password_file: {}\n",
            pw_file.display()
        )),
    );
    let env = [("QUEUE_EXPORTER__SOURCES__MAIN__PASSWORD", pw.as_str())];
    let mut outputs = Vec::new();

    // Without it, Redis refuses.
    let (code, stdout, stderr) = run_bin(&["once", "--config", bare.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("(auth)"), "{stderr}");

    for (file, env) in [(&in_file, &[][..]), (&bare, &env[..])] {
        let file = file.to_str().unwrap();
        for args in [
            vec![
                "check",
                "--connect",
                "--config",
                file,
                "--log-level",
                "trace",
            ],
            vec!["once", "--config", file, "--log-level", "trace"],
        ] {
            let (code, stdout, stderr) = run_bin(&args, env);
            assert_eq!(code, 0, "{args:?} {env:?}: {stdout}{stderr}");
            if args[0] == "once" {
                assert!(
                    stdout.contains(r#"queue_depth{source="main",queue="work"} 2"#),
                    "{stdout}"
                );
            }
            outputs.push((format!("{args:?} stdout"), stdout));
            outputs.push((format!("{args:?} stderr"), stderr));
        }
    }

    // A wrong one is an auth failure, not echoed.
    let wrong = secret("wrong");
    let (code, stdout, stderr) = run_bin(
        &["check", "--connect", "--config", bare.to_str().unwrap()],
        &[("QUEUE_EXPORTER__SOURCES__MAIN__PASSWORD", &wrong)],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("cannot poll source main (auth)"),
        "{stderr}"
    );
    outputs.push(("wrong stderr".into(), stderr.replace(&wrong, "")));
    assert!(!stderr.contains(&wrong), "{stderr}");

    // In one place only.
    let url_with_pw = format!("redis://:{pw}@127.0.0.1:{}", redis.port);
    let url_too = [("QUEUE_EXPORTER__SOURCES__MAIN__URL", url_with_pw.as_str())];
    for (file, env, want) in [
        (
            &in_file,
            &url_too[..],
            "sources[0].password: the url carries a password too; give it in one place (remove it from the url)",
        ),
        (
            &both,
            &[][..],
            "sources[0].password_file: set password or password_file, not both",
        ),
    ] {
        let (code, stdout, stderr) = run_bin(&["check", "--config", file.to_str().unwrap()], env);
        assert_eq!(code, 2, "{stdout}{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.trim_end().ends_with(want), "{stderr}");
        outputs.push(("conflict stderr".into(), stderr));
    }
    assert!(
        outputs.iter().any(|(_, t)| t.lines().count() > 20),
        "trace logging produced almost nothing"
    );
    assert_hidden(&pw, &outputs);
}
