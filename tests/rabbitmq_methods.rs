//! The three RabbitMQ methods (management, prometheus, amqp) side by side
//! against the real broker on 127.0.0.1, in vhosts whose names hold `/` and
//! spaces; plus AMQP's own failure modes. Each test makes its own vhosts
//! through the management API and deletes them afterwards.
mod support;

use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::AMQPValue;
use queue_exporter::config::SourceConfig;
use queue_exporter::sources::Source;
use queue_exporter::sources::rabbitmq::RabbitSource;
use support::*;

/// Long enough for management stats (5 s steps) and quorum queue stats.
const SETTLE: Duration = Duration::from_secs(40);

/// Queues of the agreement test and their ready counts.
const QUEUES: [(&str, usize); 4] = [("classic", 5), ("quorum", 3), ("priority", 4), ("empty", 0)];

async fn fill(vh: &RabbitVhost) -> lapin::Connection {
    let conn = vh.connect().await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "classic", &[]).await;
    declare_queue(
        &ch,
        "quorum",
        &[("x-queue-type", AMQPValue::LongString("quorum".into()))],
    )
    .await;
    declare_queue(
        &ch,
        "priority",
        &[("x-max-priority", AMQPValue::ShortShortUInt(9))],
    )
    .await;
    declare_queue(&ch, "empty", &[]).await;
    for (q, n) in QUEUES {
        publish(&ch, q, n, BasicProperties::default().with_priority(3)).await;
    }
    conn
}

/// Two vhosts with odd names (`/` and spaces), each filled with [`QUEUES`]
/// and watched by three sources, one per method: `mgmt{i}`, `prom{i}` and
/// `amqp{i}` (which is also asked for a queue `missing`).
struct OddVhosts {
    vhosts: [RabbitVhost; 2],
    app: TestApp,
    _conns: Vec<lapin::Connection>,
}

impl OddVhosts {
    /// `tag` keeps the vhost names apart from other tests'.
    async fn start(tag: &str) -> OddVhosts {
        let pid = std::process::id();
        let vhosts = [
            RabbitVhost::create_named(&format!("qe {tag}/{pid}")).await,
            RabbitVhost::create_named(&format!("qe/two words {tag} {pid}")).await,
        ];
        let mut conns = Vec::new();
        let mut yaml = String::from("sources:\n");
        for (i, vh) in vhosts.iter().enumerate() {
            conns.push(fill(vh).await);
            let v = &vh.name;
            yaml += &format!(
                r#"  - name: mgmt{i}
    type: rabbitmq
    url: http://guest:guest@127.0.0.1:15672
    vhosts: ["{v}"]
    poll_interval: 500ms
  - name: prom{i}
    type: rabbitmq
    method: prometheus
    urls: ["http://127.0.0.1:15692"]
    vhosts: ["{v}"]
    stats: totals
    poll_interval: 500ms
  - name: amqp{i}
    type: rabbitmq
    method: amqp
    url: {url}
    queues: [classic, quorum, priority, empty, missing]
    poll_interval: 500ms
"#,
                url = vh.amqp_url(),
            );
        }
        let app = TestApp::start(&yaml).await;
        OddVhosts {
            vhosts,
            app,
            _conns: conns,
        }
    }

    /// Waits until each of `sources` reports every queue of [`QUEUES`] in
    /// vhost `vh` with its ready count; returns that scrape.
    async fn wait_ready(&self, vh: &RabbitVhost, sources: &[String]) -> Scrape {
        let v = vh.name.as_str();
        let mut last = None;
        for (queue, ready) in QUEUES {
            let want = Some(ready as f64);
            let scrape = self
                .app
                .scrape_until(
                    &format!("{queue} in {v:?}: {sources:?} say {ready}"),
                    SETTLE,
                    |scrape| {
                        sources.iter().all(|s| {
                            scrape.value(
                                "queue_messages_ready",
                                &[("source", s), ("vhost", v), ("queue", queue)],
                            ) == want
                        })
                    },
                )
                .await;
            last = Some(scrape);
        }
        last.expect("queues")
    }

    async fn stop(self) {
        self.app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_methods_agree_on_ready_counts_in_odd_vhost_names() {
    let odd = OddVhosts::start("agree").await;
    for (i, vh) in odd.vhosts.iter().enumerate() {
        let v = vh.name.as_str();
        let methods = [format!("mgmt{i}"), format!("prom{i}"), format!("amqp{i}")];
        let scrape = odd.wait_ready(vh, &methods).await;
        for (queue, ready) in QUEUES {
            let got: Vec<_> = methods
                .iter()
                .map(|s| {
                    scrape.value(
                        "queue_messages_ready",
                        &[("source", s), ("vhost", v), ("queue", queue)],
                    )
                })
                .collect();
            assert_eq!(got, [Some(ready as f64); 3], "{queue} in {v:?}");
        }
        // Depth agrees too where both methods see it.
        let [mgmt, prom, _] = &methods;
        for (queue, ready) in QUEUES {
            for s in [&prom, &mgmt] {
                assert_eq!(
                    scrape.value(
                        "queue_depth",
                        &[("source", s.as_str()), ("vhost", v), ("queue", queue)]
                    ),
                    Some(ready as f64),
                    "{s} {queue}"
                );
            }
        }
    }
    // The vhost label is the name exactly as RabbitMQ has it.
    assert!(odd.app.scrape().await.has(
        "queue_depth",
        &[("vhost", odd.vhosts[0].name.as_str()), ("queue", "classic")]
    ));
    odd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_sees_ready_messages_and_consumers_and_nothing_else() {
    let odd = OddVhosts::start("amqp-sees").await;
    for (i, vh) in odd.vhosts.iter().enumerate() {
        let v = vh.name.as_str();
        let amqp = format!("amqp{i}");
        let scrape = odd.wait_ready(vh, std::slice::from_ref(&amqp)).await;
        let labels = |q: &'static str| [("source", amqp.as_str()), ("vhost", v), ("queue", q)];
        assert_eq!(
            scrape.value("queue_consumers", &labels("classic")),
            Some(0.0)
        );
        assert_eq!(scrape.value("queue_depth", &labels("classic")), None);
        assert_eq!(
            scrape.value("queue_messages_unacked", &labels("classic")),
            None
        );
        assert_eq!(
            scrape.value(
                "queue_exporter_rabbitmq_queues",
                &[("source", amqp.as_str()), ("vhost", v)]
            ),
            Some(4.0)
        );
    }
    odd.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_counts_a_missing_queue_without_showing_it_or_going_down() {
    let odd = OddVhosts::start("amqp-missing").await;
    for (i, vh) in odd.vhosts.iter().enumerate() {
        let v = vh.name.as_str();
        let amqp = format!("amqp{i}");
        let scrape = odd.wait_ready(vh, std::slice::from_ref(&amqp)).await;
        assert_eq!(
            scrape.value(
                "queue_messages_ready",
                &[
                    ("source", amqp.as_str()),
                    ("vhost", v),
                    ("queue", "missing")
                ]
            ),
            None
        );
        let not_found = scrape
            .errors(&amqp, "not_found")
            .expect("not_found counted");
        assert!(not_found >= 1.0);
        assert_eq!(scrape.source_up(&amqp), Some(1.0));
    }
    odd.stop().await;
}

/// Builds a source from one YAML source entry (flush left or indented).
fn rabbit_source(entry: &str) -> RabbitSource {
    let (config, _dir) = load_config(&format!("sources:\n{}", indent(entry, 2)));
    match config.sources.into_iter().next() {
        Some(SourceConfig::RabbitMq(c)) => RabbitSource::new(c),
        _ => panic!("not a rabbitmq source"),
    }
}

#[tokio::test]
async fn amqp_failures_have_reasons_and_no_secrets() {
    let vh = RabbitVhost::create("amqp-fail").await;
    let port = free_port();
    let cases = [
        (
            format!("amqp://guest:wrong-s3cret@127.0.0.1:5672/{}", pct(&vh.name)),
            "auth",
            "wrong-s3cret",
        ),
        (
            // No such vhost: NOT_ALLOWED.
            "amqp://guest:guest@127.0.0.1:5672/no-such-vhost-qe".to_string(),
            "auth",
            "guest:guest",
        ),
        (
            format!("amqp://guest:an0ther-s3cret@127.0.0.1:{port}/"),
            "connect",
            "an0ther-s3cret",
        ),
    ];
    for (url, reason, secret) in cases {
        let mut source = rabbit_source(&format!(
            r#"
            - name: r
              type: rabbitmq
              method: amqp
              url: {url}
              queues: [q]
              timeout: 2s
            "#
        ));
        let e = source.poll().await.expect_err("poll must fail");
        let text = e.to_string();
        assert_eq!(e.reason().as_str(), reason, "{text}");
        assert!(!text.contains(secret), "{text}");
        assert!(!format!("{source:?}").contains(secret));
    }
    drop(vh);
}

/// A vhost with queues `a` (empty) and `b` (2 messages), and an AMQP
/// source `r` asked for those and three queues that do not exist.
async fn amqp_with_missing_queues(tag: &str) -> (RabbitVhost, lapin::Connection, RabbitSource) {
    let vh = RabbitVhost::create(tag).await;
    let conn = vh.connect().await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "a", &[]).await;
    declare_queue(&ch, "b", &[]).await;
    publish(&ch, "b", 2, BasicProperties::default()).await;
    let source = rabbit_source(&format!(
        r#"
        - name: r
          type: rabbitmq
          method: amqp
          url: {url}
          queues: [nope1, a, nope2, b, nope3]
        "#,
        url = vh.amqp_url()
    ));
    (vh, conn, source)
}

#[tokio::test]
async fn amqp_reads_the_queues_that_exist_and_counts_each_missing_one() {
    let (vh, _conn, mut source) = amqp_with_missing_queues("amqp-missing").await;
    for _ in 0..3 {
        let out = source.poll().await.expect("poll");
        let got: Vec<_> = out
            .queues
            .iter()
            .map(|q| (q.name.as_str(), q.ready))
            .collect();
        assert_eq!(got, [("a", Some(0)), ("b", Some(2))]);
        assert_eq!(
            out.partial_errors
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
            ["not_found"; 3]
        );
    }
    drop(vh);
}

#[tokio::test]
async fn amqp_reuses_one_connection_across_polls_despite_missing_queues() {
    let (vh, _conn, mut source) = amqp_with_missing_queues("amqp-reuse").await;
    for _ in 0..3 {
        source.poll().await.expect("poll");
    }
    let (_, body) = rabbit_api(
        reqwest::Method::GET,
        "/connections?columns=vhost,client_properties",
        None,
    )
    .await;
    let connections: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let ours = connections
        .iter()
        .filter(|c| c["vhost"] == vh.name.as_str())
        .filter(|c| c["client_properties"]["connection_name"] == "queue-exporter r")
        .count();
    assert!(ours <= 1, "{ours} exporter connections");
    drop(vh);
}
