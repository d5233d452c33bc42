//! The RabbitMQ source against a local misbehaving HTTP server (slow, 500,
//! 401, 404, garbage, truncated, huge, refused) standing in for the
//! management API and the Prometheus plugin. Each failure must be a counted
//! error with its reason and `source_up` 0, never a panic, never invented
//! zeros, never a leaked password, and must leave the other sources alone.
mod support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use queue_exporter::config::SourceConfig;
use queue_exporter::sources::Source;
use queue_exporter::sources::rabbitmq::{self, RabbitSource};
use support::*;

/// The secret every source here logs in with; it must never show up.
const SECRET: &str = "hunter2-s3cret";
/// Body bound given to the sources.
const MAX_BYTES: usize = 1024 * 1024;

const PAGE: &str = include_str!("fixtures/rabbitmq/queues_page.json");
const DETAILED: &str = include_str!("fixtures/rabbitmq/detailed.prom");

/// Serves one behaviour per first path segment: `/{mode}/api/queues...` or
/// `/{mode}/metrics/detailed`.
async fn misbehave(uri: Uri) -> Response {
    let path = uri.path().trim_start_matches('/');
    let (mode, rest) = path.split_once('/').unwrap_or((path, ""));
    let query = uri.query().unwrap_or("");
    let good = || {
        if rest.starts_with("metrics") {
            DETAILED.into_response()
        } else {
            ([("content-type", "application/json")], PAGE).into_response()
        }
    };
    match mode {
        "slow" => {
            tokio::time::sleep(Duration::from_secs(20)).await;
            good()
        }
        "slowbody" => {
            let chunks = futures_util::stream::unfold(0u32, |n| async move {
                if n > 0 {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                }
                (n < 2).then(|| {
                    (
                        Ok::<_, std::io::Error>(bytes_of(&b"{\"items\":["[..])),
                        n + 1,
                    )
                })
            });
            Body::from_stream(chunks).into_response()
        }
        "error500" => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
        "unauthorized" => {
            (StatusCode::UNAUTHORIZED, "{\"error\":\"not_authorised\"}").into_response()
        }
        "notfound" => (StatusCode::NOT_FOUND, "{\"error\":\"Object Not Found\"}").into_response(),
        "garbage" => "<html><body>502 Bad Gateway {{{ \u{0} </body></html>".into_response(),
        "truncated" => "{\"items\":[{\"name\":\"a\",\"vhost\":\"/\"".into_response(),
        "wrongshape" => "{\"items\":{\"name\":\"a\"},\"page_count\":1}".into_response(),
        "huge" => vec![b' '; MAX_BYTES + 10].into_response(),
        "hugestream" => {
            let chunks = futures_util::stream::iter(
                (0..40).map(|_| Ok::<_, std::io::Error>(bytes_of(&[b'#'; 64 * 1024]))),
            );
            Body::from_stream(chunks).into_response()
        }
        // Every vhost polled: `/api/vhosts` names `priv` and `empty`
        // beside the fixture's vhosts, and `amq.direct` is listed in all
        // but `priv` (the user may not read it).
        "vhosts" | "noexchanges" | "novhosts" if rest.starts_with("api/vhosts") => {
            if mode == "novhosts" {
                return (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response();
            }
            let items = ["/", "a/b c", "priv", "empty"].map(|v| serde_json::json!({ "name": v }));
            serde_json::json!({"items": items, "page": 1, "page_count": 1})
                .to_string()
                .into_response()
        }
        "vhosts" | "noexchanges" if rest.starts_with("api/exchanges") => {
            if mode == "noexchanges" || !query.contains("amq") {
                return (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response();
            }
            let items = ["/", "a/b c", "empty"].map(|v| serde_json::json!({ "vhost": v }));
            serde_json::json!({"items": items, "page": 1, "page_count": 1})
                .to_string()
                .into_response()
        }
        "regex400" if query.contains("use_regex") => {
            (StatusCode::BAD_REQUEST, "{\"error\":\"bad_request\"}").into_response()
        }
        "paged" => {
            // Three pages cut from a list that moves: "b" shows up twice.
            let page: u32 = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("page="))
                .and_then(|p| p.parse().ok())
                .unwrap_or(1);
            let names = [["a", "b"], ["b", "c"], ["d", "e"]];
            let items: Vec<_> = names[(page as usize - 1).min(2)]
                .iter()
                .map(|n| serde_json::json!({"name": n, "vhost": "/", "messages": 1, "messages_ready": 1}))
                .collect();
            (
                [("content-type", "application/json")],
                serde_json::json!({"items": items, "page": page, "page_count": 3}).to_string(),
            )
                .into_response()
        }
        _ => good(),
    }
}

fn bytes_of(b: &[u8]) -> axum::body::Bytes {
    axum::body::Bytes::copy_from_slice(b)
}

/// Starts the misbehaving server; returns its base URL.
async fn server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().fallback(misbehave);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://127.0.0.1:{}", addr.port())
}

/// A source entry for `sources:` with the secret in the URL, a short
/// timeout and a 1 MiB bound, plus `extra` settings (YAML lines).
fn entry(name: &str, method: &str, url: &str, extra: &str) -> String {
    let url = url.replacen("http://", &format!("http://guest:{SECRET}@"), 1);
    format!(
        r#"  - name: {name}
    type: rabbitmq
    method: {method}
    url: {url}
    timeout: 400ms
    poll_interval: 200ms
    max_response_bytes: {MAX_BYTES}
{extra}"#,
        extra = indent(extra, 4)
    )
}

/// Builds a source from one entry made by [`entry`].
fn rabbit_source(entry: &str) -> RabbitSource {
    let (config, _dir) = load_config(&format!("sources:\n{entry}"));
    match config.sources.into_iter().next() {
        Some(SourceConfig::RabbitMq(c)) => RabbitSource::new(c),
        _ => panic!("not a rabbitmq source"),
    }
}

/// (mode, extra config, expected reason) for both HTTP methods.
const CASES: &[(&str, &str, &str)] = &[
    ("slow", "", "timeout"),
    ("slowbody", "", "timeout"),
    ("error500", "", "http_5xx"),
    ("unauthorized", "", "auth"),
    ("notfound", "", "http_4xx"),
    ("garbage", "", "malformed"),
    ("truncated", "", "malformed"),
    ("huge", "", "too_large"),
    ("hugestream", "", "too_large"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_has_its_reason_and_hides_the_password() {
    let base = server().await;
    let refused = format!("http://127.0.0.1:{}", free_port());
    let mut cases: Vec<(String, &str, &str, &str)> = Vec::new();
    for (mode, extra, reason) in CASES {
        for method in ["management", "prometheus"] {
            cases.push((format!("{base}/{mode}"), method, extra, reason));
        }
    }
    cases.push((format!("{base}/wrongshape"), "management", "", "malformed"));
    cases.push((refused.clone(), "management", "", "connect"));
    cases.push((refused, "prometheus", "", "connect"));
    // Every configured vhost 404s: the source is down with not_found.
    cases.push((
        format!("{base}/notfound"),
        "management",
        "vhosts: [a, b]",
        "not_found",
    ));
    for (url, method, extra, reason) in cases {
        let mut source = rabbit_source(&entry("r", method, &url, extra));
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(source.poll_timeout(), source.poll()).await;
        let e = match result {
            Ok(Err(e)) => e,
            Ok(Ok(out)) => panic!(
                "{method} {url}: poll succeeded with {} queues",
                out.queues.len()
            ),
            Err(_) => panic!("{method} {url}: poll ran past poll_timeout"),
        };
        let text = e.to_string();
        eprintln!(
            "{method} {url} -> {} ({text}) in {:?}",
            e.reason(),
            started.elapsed()
        );
        assert_eq!(e.reason().as_str(), reason, "{method} {url}: {text}");
        assert!(!text.contains(SECRET), "{method} {url}: {text}");
        assert!(!format!("{source:?}").contains(SECRET));
    }
}

/// An app with a management and a prometheus source per failure mode
/// (`mgmt-{mode}`, `prom-{mode}`), two good ones on the fixture
/// (`mgmt-good`, `prom-good`) and `prom-half`, a two-node cluster whose
/// second node fails. Returns once every failing source has counted its
/// error and both good ones are up.
async fn failing_and_good_sources() -> (TestApp, Scrape) {
    let base = server().await;
    let mut yaml = String::from("sources:\n");
    for (mode, extra, _) in CASES {
        yaml += &entry(
            &format!("mgmt-{mode}"),
            "management",
            &format!("{base}/{mode}"),
            extra,
        );
        yaml += &entry(
            &format!("prom-{mode}"),
            "prometheus",
            &format!("{base}/{mode}"),
            extra,
        );
    }
    yaml += &entry("mgmt-good", "management", &format!("{base}/fixture"), "");
    yaml += &entry("prom-good", "prometheus", &format!("{base}/fixture"), "");
    yaml += &entry(
        "prom-half",
        "prometheus",
        &base,
        &format!(r#"urls: ["{base}/fixture", "{base}/error500"]"#),
    );
    let app = TestApp::start(&yaml).await;
    let scrape = app
        .scrape_until(
            "every failing source counted",
            Duration::from_secs(20),
            |scrape| {
                let counted = CASES.iter().all(|(mode, _, reason)| {
                    ["mgmt", "prom"].iter().all(|m| {
                        scrape
                            .errors(&format!("{m}-{mode}"), reason)
                            .is_some_and(|n| n >= 1.0)
                    })
                });
                let good_up = ["mgmt-good", "prom-good"]
                    .iter()
                    .all(|s| scrape.source_up(s) == Some(1.0));
                counted && good_up
            },
        )
        .await;
    (app, scrape)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_sources_are_down_with_no_queue_series_and_no_password_shown() {
    let (app, scrape) = failing_and_good_sources().await;
    assert!(!scrape.text().contains(SECRET));
    for (mode, _, _) in CASES {
        for m in ["mgmt", "prom"] {
            let s = format!("{m}-{mode}");
            assert_eq!(scrape.source_up(&s), Some(0.0), "{s}");
            assert_eq!(scrape.value("queue_depth", &[("source", &s)]), None, "{s}");
            assert_eq!(
                scrape.value("queue_exporter_rabbitmq_queues", &[("source", &s)]),
                None,
                "{s}"
            );
        }
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_one_failing_node_is_down_as_a_whole() {
    // Otherwise that node's queues would vanish.
    let (app, scrape) = failing_and_good_sources().await;
    assert_eq!(scrape.source_up("prom-half"), Some(0.0));
    assert_eq!(
        scrape.value("queue_depth", &[("source", "prom-half")]),
        None
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_management_source_beside_failing_ones_reports_what_it_reads() {
    // What the fixture says, unknowns absent.
    let (app, scrape) = failing_and_good_sources().await;
    let m = |q: &'static str| [("source", "mgmt-good"), ("vhost", "/"), ("queue", q)];
    assert_eq!(scrape.value("queue_depth", &m("orders")), Some(12.0));
    assert_eq!(
        scrape.value("queue_messages_unacked", &m("orders")),
        Some(2.0)
    );
    assert_eq!(
        scrape.value("queue_consumer_utilisation", &m("orders")),
        Some(0.75)
    );
    assert_eq!(
        scrape.value("queue_messages_published_total", &m("orders")),
        Some(40.0)
    );
    assert_eq!(
        scrape.value("queue_messages_redelivered_total", &m("orders")),
        Some(1.0)
    );
    // A head message without a timestamp: age unknown.
    assert_eq!(
        scrape.value("queue_oldest_message_age_seconds", &m("orders")),
        None
    );
    // A quorum queue reported without figures: known type, no invented zeros.
    assert_eq!(scrape.value("queue_depth", &m("fresh-quorum")), None);
    assert_eq!(
        scrape.value("queue_messages_ready", &m("fresh-quorum")),
        None
    );
    assert_eq!(
        scrape.value(
            "queue_info",
            &[
                ("source", "mgmt-good"),
                ("queue", "fresh-quorum"),
                ("type", "quorum")
            ]
        ),
        Some(1.0)
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_prometheus_source_skips_and_counts_a_malformed_line() {
    // The fixture has a line with an unescaped quote.
    let (app, scrape) = failing_and_good_sources().await;
    let p = |q: &'static str| [("source", "prom-good"), ("vhost", "/"), ("queue", q)];
    assert_eq!(scrape.value("queue_depth", &p("orders")), Some(12.0));
    assert_eq!(scrape.value("queue_consumers", &p("orders")), Some(1.0));
    assert!(
        scrape
            .errors("prom-good", "malformed")
            .is_some_and(|n| n >= 1.0)
    );
    app.stop().await;
}

#[tokio::test]
async fn a_queue_named_oddly_and_a_string_where_a_number_belongs() {
    // Labels hold the name exactly; a non-numeric `messages` is unknown, not 0.
    let base = server().await;
    let mut source = rabbit_source(&entry("r", "management", &format!("{base}/fixture"), ""));
    let out = source.poll().await.expect("poll");
    let weird = out
        .queues
        .iter()
        .find(|q| q.name == "weird \"name\", with = signs")
        .expect("weird queue");
    assert_eq!(weird.vhost(), Some("a/b c"));
    assert_eq!(weird.depth, None);
    assert_eq!(weird.ready, Some(1));
    assert_eq!(weird.broker().state.as_deref(), Some("flow"));
    assert!(weird.counters().is_empty());
    assert_eq!(out.stats.queues_per_vhost.get("a/b c"), Some(&1));
}

/// The causes of the coverage gaps of one management poll over every
/// vhost of the fake server's `mode`, which lists the fixture's 3 queues.
async fn gap_causes(base: &str, mode: &str) -> Vec<String> {
    let mut source = rabbit_source(&entry("r", "management", &format!("{base}/{mode}"), ""));
    let out = source.poll().await.expect("poll");
    assert_eq!(out.queues.len(), 3, "{mode}");
    assert!(
        out.partial_errors.is_empty(),
        "{mode}: {:?}",
        out.partial_errors
    );
    let causes: Vec<String> = out
        .coverage
        .gaps()
        .iter()
        .map(|g| g.cause.clone())
        .collect();
    for c in &causes {
        assert!(!c.contains(SECRET), "{c}");
    }
    causes
}

#[tokio::test]
async fn over_every_vhost_a_vhost_listed_but_not_readable_is_a_gap_and_so_is_not_knowing() {
    let base = server().await;
    // `priv` is listed and has no readable `amq.direct`; `empty` has one:
    // the user may read it, it just holds no queue.
    assert_eq!(
        gap_causes(&base, "vhosts").await,
        ["user \"guest\" may not read vhost \"priv\" (no permission), so its queues are unknown"]
    );
    // Which vhosts the user may read is unknown: each listed vhost without
    // a listed queue is.
    let causes = gap_causes(&base, "noexchanges").await;
    assert_eq!(causes.len(), 2, "{causes:?}");
    for (cause, vhost) in causes.iter().zip(["empty", "priv"]) {
        assert!(
            cause.starts_with(&format!(
                "the exporter could not tell whether user \"guest\" may read vhost \"{vhost}\""
            )),
            "{cause}"
        );
    }
    // No vhost list: any vhost may be one the user may not read.
    let causes = gap_causes(&base, "novhosts").await;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert!(
        causes[0].starts_with("the exporter could not list the vhosts"),
        "{causes:?}"
    );
}

#[tokio::test]
async fn pages_of_a_moving_list_are_deduplicated() {
    let base = server().await;
    let mut source = rabbit_source(&entry("r", "management", &format!("{base}/paged"), ""));
    let out = source.poll().await.expect("poll");
    let names: Vec<_> = out.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
}

#[tokio::test]
async fn an_include_regex_the_server_rejects_is_applied_locally_instead() {
    // The server refuses the regex (Erlang's dialect).
    let base = server().await;
    let mut source = rabbit_source(&entry(
        "r",
        "management",
        &format!("{base}/regex400"),
        "include: '^ord'",
    ));
    for _ in 0..2 {
        let out = source.poll().await.expect("poll");
        let names: Vec<_> = out.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["orders"]);
    }
}

#[tokio::test]
async fn the_default_probe_needs_a_management_api_that_answers() {
    let base = server().await;
    let probe = |url: String| async move {
        let (config, _dir) = load_config(&format!(
            r#"
            sources:
              - name: r
                type: rabbitmq
                url: {url}
                username: guest
                password: guest
            "#
        ));
        match config.sources.into_iter().next() {
            Some(SourceConfig::RabbitMq(c)) => rabbitmq::probe_default(&c).await,
            _ => panic!("not rabbitmq"),
        }
    };
    assert!(
        probe("http://127.0.0.1:15672".into()).await,
        "local RabbitMQ management API"
    );
    assert!(!probe(format!("http://127.0.0.1:{}", free_port())).await);
    assert!(!probe(format!("{base}/unauthorized")).await);
    assert!(!probe(format!("{base}/slow")).await);
}
