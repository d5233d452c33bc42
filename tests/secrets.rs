//! Secrets never leak. Passwords given by `password_file`, in the URL, in
//! `password:`, or in an environment override reach the backends (the
//! right one logs in; a wrong one is refused), yet appear nowhere in what the
//! binary prints or serves: stdout and stderr of `serve`, `check`,
//! `check --connect` and `once`, at log level `trace` (every crate, lapin's
//! and hyper's frame logs included), in bad-config errors, in `/metrics`,
//! `/`, `/readyz`, and in gRPC error messages.
mod reliability_support;
mod scaler_common;
mod support;

use std::time::Duration;

use reliability_support::*;
use support::*;

/// Standard base64 with padding (what an `Authorization: Basic` header holds).
fn base64(s: &str) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn base64_is_right() {
    assert_eq!(base64("guest:guest"), "Z3Vlc3Q6Z3Vlc3Q=");
    assert_eq!(base64("ab"), "YWI=");
    assert_eq!(base64("abc"), "YWJj");
}

/// Asserts `secret` is in none of `outputs` (name, text).
fn assert_hidden(secret: &str, outputs: &[(String, String)]) {
    for (name, text) in outputs {
        assert!(
            !text.contains(secret),
            "the secret shows in {name}:\n{}",
            text.lines()
                .filter(|l| l.contains(secret))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Runs `serve` with `body` (one source, `source`) at log level trace (flag,
/// or RUST_LOG when `rust_log`) until that source has finished two polls
/// (so it has logged in, or been refused, twice), reading every HTTP page and
/// asking the scaler things that fail; returns everything it printed or served.
async fn serve_outputs(
    label: &str,
    source: &str,
    body: &str,
    rust_log: bool,
) -> Vec<(String, String)> {
    let (args, env): (&[&str], &[(&str, &str)]) = if rust_log {
        (&[], &[("RUST_LOG", "trace")])
    } else {
        (&["--log-level", "trace"], &[])
    };
    let mut exp = Exporter::start(body, args, env).await;
    let mut out = Vec::new();
    wait_for(
        &format!("{label}: two polls of {source}"),
        Duration::from_secs(30),
        || async { (polls(&Scrape::parse(&exp.metrics().await), source) >= 2).then_some(()) },
    )
    .await;
    for page in ["/metrics", "/", "/readyz", "/healthz"] {
        let (_, text, _) = http_get(&format!("{}{page}", exp.base), &[]).await;
        out.push((format!("{label} {page}"), text));
    }
    let mut c = scaler_common::connect(exp.grpc).await;
    for pairs in [
        &[("queue", "no-such-queue")][..],
        &[("queue", "work"), ("source", "nope")],
        &[("queue", "work"), ("mode", "Depth")],
    ] {
        let e = scaler_common::metrics(&mut c, pairs).await;
        out.push((format!("{label} gRPC {pairs:?}"), format!("{e:?}")));
    }
    let status = exp.terminate();
    assert!(
        status.success(),
        "{label}: exit {status:?}\n{}",
        exp.stderr()
    );
    out.push((format!("{label} stdout"), exp.stdout()));
    let stderr = exp.stderr();
    assert!(
        stderr.lines().count() > 20,
        "{label}: trace logging produced almost nothing:\n{stderr}"
    );
    out.push((format!("{label} stderr"), stderr));
    out
}

/// `check`, `check --connect` and `once` on `config` at log level trace.
fn command_outputs(label: &str, config: &std::path::Path) -> Vec<(String, String)> {
    let c = config.to_str().unwrap();
    let mut out = Vec::new();
    for args in [
        vec!["check", "--config", c, "--log-level", "trace"],
        vec!["check", "--connect", "--config", c, "--log-level", "trace"],
        vec!["once", "--config", c, "--log-level", "trace"],
    ] {
        let (code, stdout, stderr) = run_bin(&args, &[("RUST_LOG", "trace")]);
        let name = format!("{label} {}", args[..2].join(" "));
        out.push((format!("{name} (exit {code}) stdout"), stdout));
        out.push((format!("{name} stderr"), stderr));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_passwords_from_a_file_or_the_url_never_show() {
    let pw = secret("redis");
    let wrong = secret("wrong");
    let redis = RedisServer::start();
    redis.acl_user("qe", &pw, READ_ONLY_ACL);
    redis.run::<()>(&[b"RPUSH", b"work", b"a", b"b"]);
    let dir = tempfile::tempdir().unwrap();
    let pw_file = write_file(&dir, "pw", &format!("{pw}\n"));
    let wrong_file = write_file(&dir, "wrong", &format!("{wrong}\n"));
    let user_url = redis.url.replace("redis://", "redis://qe@");
    let source = |url: &str, file: Option<&std::path::Path>| {
        format!(
            "sources:\n  - name: main\n    type: redis\n    url: {url}\n{}    poll_interval: 200ms\n    queues: [{{ key: work }}]\n",
            file.map(|f| format!("    password_file: {}\n", f.display()))
                .unwrap_or_default()
        )
    };
    let cases = [
        ("file", source(&user_url, Some(&pw_file)), true),
        (
            "url",
            source(
                &redis.url.replace("redis://", &format!("redis://qe:{pw}@")),
                None,
            ),
            true,
        ),
        ("wrong-file", source(&user_url, Some(&wrong_file)), false),
        (
            "wrong-url",
            source(
                &redis
                    .url
                    .replace("redis://", &format!("redis://qe:{wrong}@")),
                None,
            ),
            false,
        ),
    ];
    let mut outputs = Vec::new();
    for (i, (label, body, right)) in cases.iter().enumerate() {
        let served = serve_outputs(label, "main", body, i % 2 == 1).await;
        // The right password works, the wrong one is refused as `auth`.
        let metrics = &served[0].1;
        if *right {
            assert_eq!(
                sample(metrics, "queue_depth", &[("queue", "work")]),
                Some(2.0),
                "{label}"
            );
        } else {
            assert!(
                sample(
                    metrics,
                    "queue_exporter_poll_errors_total",
                    &[("source", "main"), ("reason", "auth")]
                )
                .is_some_and(|n| n >= 1.0),
                "{label}: {metrics}"
            );
        }
        outputs.extend(served);
        let config = write_file(
            &dir,
            &format!("{label}.yaml"),
            &format!("listen: {{ grpc: null }}\n{body}"),
        );
        outputs.extend(command_outputs(label, &config));
    }
    assert_hidden(&pw, &outputs);
    assert_hidden(&wrong, &outputs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_passwords_in_every_place_never_show() {
    let pw = secret("rabbit");
    let wrong = secret("wrong");
    let vhost = RabbitVhost::create("secrets").await;
    let conn = vhost.connect().await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "work", &[]).await;
    let name = format!("qe-secret-{}", std::process::id());
    let user = RabbitUser::create(&name, &pw, "monitoring").await;
    user.permit(&vhost.name, "^$", "^$", "^$").await;
    let dir = tempfile::tempdir().unwrap();
    let pw_file = write_file(&dir, "pw", &format!("{pw}\n"));
    let vh = vhost.name.clone();
    let vh_enc = pct(&vh);
    let mgmt = |auth: &str| {
        format!(
            "sources:\n  - name: rabbit\n    type: rabbitmq\n{auth}    vhosts: [\"{vh}\"]\n    poll_interval: 300ms\n"
        )
    };
    let amqp = |p: &str| {
        format!(
            "sources:\n  - name: rabbit\n    type: rabbitmq\n    method: amqp\n    url: amqp://{name}:{p}@127.0.0.1:5672/{vh_enc}\n    queues: [work]\n    poll_interval: 300ms\n"
        )
    };
    let cases = [
        (
            "password",
            mgmt(&format!(
                "    url: http://127.0.0.1:15672\n    username: {name}\n    password: {pw}\n"
            )),
            true,
        ),
        (
            "password_file",
            mgmt(&format!(
                "    url: http://127.0.0.1:15672\n    username: {name}\n    password_file: {}\n",
                pw_file.display()
            )),
            true,
        ),
        (
            "url",
            mgmt(&format!("    url: http://{name}:{pw}@127.0.0.1:15672\n")),
            true,
        ),
        (
            "wrong-url",
            mgmt(&format!("    url: http://{name}:{wrong}@127.0.0.1:15672\n")),
            false,
        ),
        ("amqp-url", amqp(&pw), true),
        ("amqp-wrong", amqp(&wrong), false),
    ];
    let mut outputs = Vec::new();
    for (i, (label, body, right)) in cases.iter().enumerate() {
        let served = serve_outputs(label, "rabbit", body, i % 2 == 1).await;
        let metrics = &served[0].1;
        let up = sample(metrics, "queue_exporter_source_up", &[("source", "rabbit")]);
        assert_eq!(
            up,
            Some(if *right { 1.0 } else { 0.0 }),
            "{label}: {metrics}"
        );
        if !right {
            assert!(
                sample(
                    metrics,
                    "queue_exporter_poll_errors_total",
                    &[("source", "rabbit"), ("reason", "auth")]
                )
                .is_some_and(|n| n >= 1.0),
                "{label}: {metrics}"
            );
        }
        outputs.extend(served);
        let config = write_file(
            &dir,
            &format!("{label}.yaml"),
            &format!("listen: {{ grpc: null }}\n{body}"),
        );
        outputs.extend(command_outputs(label, &config));
    }
    drop(conn);
    drop(user);
    assert_hidden(&pw, &outputs);
    assert_hidden(&wrong, &outputs);
    // Nor as the HTTP basic-auth header value.
    assert_hidden(&base64(&format!("{name}:{pw}")), &outputs);
    assert_hidden(&base64(&format!("{name}:{wrong}")), &outputs);
}

#[test]
fn bad_configs_and_environment_overrides_never_echo_a_password() {
    let pw = secret("config");
    let dir = tempfile::tempdir().unwrap();
    let other = write_file(&dir, "pw", "x\n");
    let redis = |url: &str, extra: &str| {
        format!(
            "listen: {{ grpc: null }}\nsources:\n  - name: main\n    type: redis\n    url: {url}\n{extra}    queues: [{{ key: work }}]\n"
        )
    };
    let rabbit = |fields: &str| {
        format!("listen: {{ grpc: null }}\nsources:\n  - name: r\n    type: rabbitmq\n{fields}")
    };
    let bad: Vec<(&str, String)> = vec![
        (
            "another field invalid",
            redis(
                &format!("redis://qe:{pw}@127.0.0.1:1"),
                "    poll_interval: often\n",
            ),
        ),
        (
            "unknown field",
            redis(&format!("redis://qe:{pw}@127.0.0.1:1"), "    passwd: x\n"),
        ),
        (
            "not a port",
            redis(&format!("redis://qe:{pw}@127.0.0.1:notaport"), ""),
        ),
        (
            "wrong scheme",
            redis(&format!("http://qe:{pw}@127.0.0.1:1"), ""),
        ),
        (
            "url not a string",
            redis(&format!("[\"redis://qe:{pw}@127.0.0.1:1\"]"), ""),
        ),
        (
            "YAML syntax error on the line",
            redis(&format!("redis://qe:{pw}@127.0.0.1:1 : ["), ""),
        ),
        (
            "password and password_file",
            rabbit(&format!(
                "    url: http://127.0.0.1:15672\n    username: u\n    password: {pw}\n    password_file: {}\n",
                other.display()
            )),
        ),
        (
            "password not a string",
            rabbit(&format!(
                "    url: http://127.0.0.1:15672\n    username: u\n    password: [{pw}]\n"
            )),
        ),
        (
            "invalid amqp url",
            rabbit(&format!(
                "    method: amqp\n    url: amqp://u:{pw}@127.0.0.1:notaport/v\n    queues: [q]\n"
            )),
        ),
        (
            "invalid http url",
            rabbit(&format!("    url: http://u:{pw}@[::1\n")),
        ),
    ];
    let mut outputs = Vec::new();
    for (label, yaml) in &bad {
        let config = write_file(&dir, "bad.yaml", yaml);
        let c = config.to_str().unwrap();
        for args in [
            vec!["check", "--config", c],
            vec!["check", "--connect", "--config", c],
            vec!["once", "--config", c],
            vec!["--config", c, "--listen-http", "127.0.0.1:0"],
        ] {
            // (Most are refused with exit 2; see the ignored test below for
            // the one `check` lets through.)
            let (_, stdout, stderr) =
                run_bin_for(&args, &[("RUST_LOG", "trace")], Duration::from_secs(3));
            outputs.push((format!("{label} {args:?} stdout"), stdout));
            outputs.push((format!("{label} {args:?} stderr"), stderr));
        }
    }
    // Environment overrides of a source's URL: a bad one is blamed on the
    // variable, never echoing its value; a good one is used, silently.
    let good = write_file(&dir, "good.yaml", &redis("redis://127.0.0.1:1", ""));
    let var = "QUEUE_EXPORTER__SOURCES__0__URL";
    for (value, ok) in [
        (format!("http://qe:{pw}@127.0.0.1:1"), false),
        (format!("redis://qe:{pw}@127.0.0.1:notaport"), false),
        (format!("redis://qe:{pw}@127.0.0.1:1"), true),
    ] {
        for args in [
            vec!["check", "--config", good.to_str().unwrap()],
            vec!["check", "--connect", "--config", good.to_str().unwrap()],
        ] {
            let (code, stdout, stderr) =
                run_bin(&args, &[(var, value.as_str()), ("RUST_LOG", "trace")]);
            if !ok {
                assert_eq!(code, 2, "{var} {args:?}: {stderr}");
                assert!(stderr.contains(var), "{var}: {stderr}");
            } else if args.len() == 3 {
                assert_eq!(code, 0, "{var} {args:?}: {stderr}");
            }
            outputs.push((format!("{var} {args:?} stdout"), stdout));
            outputs.push((format!("{var} {args:?} stderr"), stderr));
        }
    }
    assert_hidden(&pw, &outputs);
}

#[test]
fn check_refuses_a_redis_url_that_cannot_be_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_file(
        &dir,
        "c.yaml",
        "listen: { grpc: null }\nsources:\n  - name: main\n    type: redis\n    url: redis://qe:pw@127.0.0.1:notaport\n    queues: [{ key: work }]\n",
    );
    let (code, stdout, stderr) = run_bin(&["check", "--config", config.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("sources[0].url"), "{stderr}");
}

/// Issue 36, case 6: KEDA replaces a `*FromEnv` value with the environment
/// variable's value before it calls an external scaler, and adds every
/// TriggerAuthentication parameter to the same map. `/scalers` and
/// `/api/v1/scalers` therefore show values only for the keys the scaler
/// reads (and KEDA's harmless `scalerAddress`); every other key, every
/// `*FromEnv` key and every TriggerAuthentication parameter shows as
/// `(redacted)`, whether the map was answered or refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scalers_pages_show_values_only_for_the_keys_the_scaler_reads() {
    let pw = secret("keda");
    let redis = RedisServer::start();
    redis.run::<()>(&[b"RPUSH", b"orders", b"a", b"b"]);
    let exp = Exporter::start(
        &format!(
            "sources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 200ms\n    queues: [{{ key: orders }}]\n",
            redis.url
        ),
        &[],
        &[],
    )
    .await;
    let mut c = scaler_common::connect(exp.grpc).await;
    let resolved = format!("redis://:{pw}@redis.shop:6379");
    let keda = |name: &str, extra: &[(&str, &str)]| {
        let mut pairs = vec![
            ("queue", "orders"),
            ("mode", "QueueLength"),
            ("value", "5"),
            ("scalerAddress", "queue-exporter.keda:9732"),
            // `hostFromEnv: REDIS_URL`, as KEDA sends it: resolved.
            ("hostFromEnv", resolved.as_str()),
            ("caCert", pw.as_str()),
        ];
        pairs.extend_from_slice(extra);
        queue_exporter::scaler::proto::ScaledObjectRef {
            name: name.into(),
            namespace: "shop".into(),
            scaler_metadata: scaler_common::meta(&pairs),
        }
    };
    let answered = keda("answered", &[]);
    wait_for("the answered trigger", Duration::from_secs(15), || {
        let mut c = c.clone();
        let r = answered.clone();
        async move { c.is_active(r).await.ok() }
    })
    .await;
    // TriggerAuthentication parameters: not keys this scaler reads, so the
    // map is refused, and still recorded for the page.
    let refused = keda(
        "refused",
        &[("connection", resolved.as_str()), ("password", pw.as_str())],
    );
    let e = c.is_active(refused).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    let (status, body, _) = http_get(&format!("{}/api/v1/scalers", exp.base), &[]).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let scalers = json["scalers"].as_array().unwrap();
    assert_eq!(scalers.len(), 2, "{json:#}");
    for s in scalers {
        let m = &s["metadata"];
        assert_eq!(
            (&m["queue"], &m["mode"], &m["value"]),
            (&"orders".into(), &"QueueLength".into(), &"5".into()),
            "{s:#}"
        );
        assert_eq!(m["scalerAddress"], "queue-exporter.keda:9732", "{s:#}");
        for k in ["hostFromEnv", "caCert"] {
            assert_eq!(m[k], "(redacted)", "{k}: {s:#}");
        }
    }
    let r = scalers
        .iter()
        .find(|s| s["scaledobject"] == "refused")
        .unwrap();
    for k in ["connection", "password"] {
        assert_eq!(r["metadata"][k], "(redacted)", "{k}: {r:#}");
    }
    let error = r["is_active"]["error"].as_str().unwrap();
    assert!(error.contains("\"connection\", \"password\""), "{error}");
    let (_, html, _) = http_get(&format!("{}/scalers", exp.base), &[]).await;
    assert!(html.contains("shop/refused"), "{html}");
    assert_hidden(
        &pw,
        &[
            ("/api/v1/scalers".into(), body),
            ("/scalers".into(), html),
            ("gRPC error".into(), format!("{e:?}")),
        ],
    );
}
