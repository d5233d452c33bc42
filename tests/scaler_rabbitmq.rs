//! The scaler over the RabbitMQ source, against the real broker on
//! 127.0.0.1 (AMQP 5672, management API 15672, guest/guest). Each test makes
//! its own vhosts and deletes them afterwards.
mod reliability_support;
mod scaler_common;
mod support;

use std::time::Duration;

use reliability_support::RabbitUser;
use scaler_common::*;
use support::*;
use tonic::Code;

/// A management API request as guest that must succeed.
async fn api(method: reqwest::Method, path: &str, body: Option<serde_json::Value>) {
    let (status, text) = rabbit_api(method.clone(), path, body).await;
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {text}"
    );
}

/// Makes `count` fresh vhosts `qe-scaler-{tag}-{pid}-{i}` (guest has full
/// permissions), each with a durable queue `queue`; deleted on drop.
async fn setup(tag: &str, count: usize, queue: &str) -> Vec<RabbitVhost> {
    let mut vhosts = Vec::new();
    for i in 0..count {
        let vh =
            RabbitVhost::create_named(&format!("qe-scaler-{tag}-{}-{i}", std::process::id())).await;
        api(
            reqwest::Method::PUT,
            &format!("/queues/{}/{}", pct(&vh.name), pct(queue)),
            Some(serde_json::json!({"durable": true, "auto_delete": false})),
        )
        .await;
        vhosts.push(vh);
    }
    vhosts
}

/// Publishes `n` messages to `queue` through the default exchange.
async fn publish(vhost: &str, queue: &str, n: usize) {
    for i in 0..n {
        api(
            reqwest::Method::POST,
            &format!("/exchanges/{}/amq.default/publish", pct(vhost)),
            Some(serde_json::json!({
                "properties": {},
                "routing_key": queue,
                "payload": format!("job {i}"),
                "payload_encoding": "string"
            })),
        )
        .await;
    }
}

/// The management API refreshes queue stats every 5 s by default.
const STATS_WAIT: Duration = Duration::from_secs(30);

/// Two vhosts `a` and `b` with a queue `orders` holding 20 and 7 messages,
/// and a scaler that has seen both.
struct Orders {
    vhosts: Vec<RabbitVhost>,
    /// The name of vhost `a`.
    a: String,
    app: TestApp,
    c: Client,
}

impl Orders {
    async fn start(tag: &str) -> Orders {
        let vhosts = setup(tag, 2, "orders").await;
        publish(&vhosts[0].name, "orders", 20).await;
        publish(&vhosts[1].name, "orders", 7).await;
        let app = TestApp::start(&rabbit_config(&vhosts, "500ms")).await;
        let c = client(&app).await;
        for (vh, n) in [(&vhosts[0], 20.0), (&vhosts[1], 7.0)] {
            let in_vhost = [("queue", "orders"), ("vhost", vh.name.as_str())];
            wait_value_for(&c, &in_vhost, n, STATS_WAIT).await;
        }
        let a = vhosts[0].name.clone();
        Orders { vhosts, a, app, c }
    }

    async fn stop(self) {
        self.app.stop().await;
        drop(self.vhosts);
    }
}

#[tokio::test]
async fn twenty_messages_with_target_five_scale_to_four_replicas() {
    let mut o = Orders::start("len").await;
    let in_a = [("queue", "orders"), ("vhost", o.a.as_str()), ("value", "5")];
    let (name, ti, tf) = spec(&mut o.c, &in_a).await.unwrap();
    assert!(name.starts_with("queuelength-qe-scaler-len-"), "{name}");
    assert_eq!((ti, tf), (5, 5.0));
    let (int, float) = metrics(&mut o.c, &in_a).await.unwrap();
    assert_eq!((int, float), (20, 20.0));
    assert_eq!(keda_replicas(keda_value(int, float), tf), 4);
    assert!(active(&mut o.c, &in_a).await.unwrap());
    o.stop().await;
}

#[tokio::test]
async fn the_same_queue_name_in_two_vhosts_needs_vhost() {
    let mut o = Orders::start("twice").await;
    let e = metrics(&mut o.c, &[("queue", "orders")]).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().starts_with("scalerMetadata.vhost"),
        "{}",
        e.message()
    );
    o.stop().await;
}

#[tokio::test]
async fn ready_and_unacked_are_real_numbers_from_rabbitmq() {
    // Nothing consumed.
    let mut o = Orders::start("modes").await;
    let a = o.a.as_str();
    let mode = |m: &'static str| [("queue", "orders"), ("vhost", a), ("mode", m)];
    assert_eq!(metrics(&mut o.c, &mode("Ready")).await.unwrap().1, 20.0);
    assert_eq!(metrics(&mut o.c, &mode("Unacked")).await.unwrap().1, 0.0);
    o.stop().await;
}

#[tokio::test]
async fn a_glob_across_the_vhosts_of_one_source_aggregates() {
    let mut o = Orders::start("glob").await;
    assert_eq!(
        metrics(&mut o.c, &[("queue", "ord*"), ("operation", "max")])
            .await
            .unwrap()
            .1,
        20.0
    );
    o.stop().await;
}

#[tokio::test]
async fn an_unknown_queue_in_a_vhost_is_not_found() {
    let mut o = Orders::start("unknown").await;
    assert_eq!(
        metrics(&mut o.c, &[("queue", "nope"), ("vhost", o.a.as_str())])
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    o.stop().await;
}

#[tokio::test]
async fn rabbitmq_publish_rate_over_a_window() {
    let vhosts = setup("rate", 1, "events").await;
    let v = vhosts[0].name.clone();
    let app = TestApp::start(&rabbit_config(&vhosts, "1s")).await;
    let mut c = client(&app).await;
    wait_value_for(&c, &[("queue", "events")], 0.0, STATS_WAIT).await;

    // ~10 messages per second, kept up while the rate is read: RabbitMQ's
    // statistics move in 5 s steps and lag further on a loaded machine, so
    // the windowed rate is read until it settles near the true rate.
    let started = std::time::Instant::now();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let publisher = {
        let (v, sent) = (v.clone(), sent.clone());
        tokio::spawn(async move {
            loop {
                publish(&v, "events", 2).await;
                sent.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let trigger = [
        ("queue", "events"),
        ("mode", "PublishRate"),
        ("window", "10s"),
        ("value", "5"),
    ];
    // Until RabbitMQ's statistics show the first publishes the rate is
    // UNAVAILABLE (its counter in fewer than two polls), never a made-up 0;
    // then it must settle in a wide band around the true rate (stats steps,
    // not precision). 45 s: the old fixed 16 s wait plus its 30 s of reads.
    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    let (answer, true_rate) = loop {
        let answer = metrics(&mut c, &trigger).await;
        let n = sent.load(std::sync::atomic::Ordering::Relaxed);
        let true_rate = n as f64 / started.elapsed().as_secs_f64();
        let settled = match &answer {
            Ok((_, rate)) => *rate > true_rate * 0.3 && *rate < true_rate * 2.0,
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                false
            }
        };
        if settled || std::time::Instant::now() > deadline {
            break (answer, true_rate);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    publisher.abort();
    let rate = match answer {
        Ok((_, rate)) => rate,
        Err(e) => panic!("no publish rate after 45 s, sent {true_rate}/s: {e:?}"),
    };
    assert!(
        rate > true_rate * 0.3 && rate < true_rate * 2.0,
        "publish rate {rate}/s, sent {true_rate}/s"
    );
    app.stop().await;
    drop(vhosts);
}

/// Issue 36, case 5: a user tagged `monitoring`, with access to vhost `pub`
/// (read everything, configure and write nothing) and none to `priv`.
/// `pub` holds `jobs.a` (3 messages) and `jobs.b` (1), `priv` holds `jobs.a`
/// (9): 13 wait under `jobs.*`, of which this user can list 4.
struct HiddenVhost {
    /// `qe-t4pub-{pid}`, readable.
    public: RabbitVhost,
    /// `qe-t4priv-{pid}`, listed to the user but not readable.
    private: RabbitVhost,
    /// The monitoring user.
    user: RabbitUser,
}

/// The monitoring user's password.
const MONITOR_PASSWORD: &str = "t4-monitor-pass";

impl HiddenVhost {
    async fn create() -> HiddenVhost {
        let pid = std::process::id();
        let public = RabbitVhost::create_named(&format!("qe-t4pub-{pid}")).await;
        let private = RabbitVhost::create_named(&format!("qe-t4priv-{pid}")).await;
        for (vh, queue, n) in [
            (&public, "jobs.a", 3),
            (&public, "jobs.b", 1),
            (&private, "jobs.a", 9),
        ] {
            api(
                reqwest::Method::PUT,
                &format!("/queues/{}/{}", pct(&vh.name), pct(queue)),
                Some(serde_json::json!({"durable": true, "auto_delete": false})),
            )
            .await;
            publish(&vh.name, queue, n).await;
        }
        let user =
            RabbitUser::create(&format!("qe-t4mon-{pid}"), MONITOR_PASSWORD, "monitoring").await;
        user.permit(&public.name, "^$", "^$", ".*").await;
        HiddenVhost {
            public,
            private,
            user,
        }
    }

    /// One source of each method, all logging in as the monitoring user:
    /// `all` (management, every vhost), `listed` (management, both vhosts
    /// configured), `prom` (the prometheus plugin, both vhosts), and the
    /// AMQP method on each vhost (`amqp-pub`, `amqp-priv`: one vhost each).
    fn config(&self) -> String {
        let (user, pw) = (&self.user.name, MONITOR_PASSWORD);
        let (public, private) = (&self.public.name, &self.private.name);
        format!(
            r#"
            listen: {{ grpc: 127.0.0.1:0 }}
            sources:
              - name: all
                type: rabbitmq
                url: http://127.0.0.1:15672
                username: {user}
                password: {pw}
                poll_interval: 500ms
              - name: listed
                type: rabbitmq
                url: http://127.0.0.1:15672
                username: {user}
                password: {pw}
                vhosts: ["{public}", "{private}"]
                poll_interval: 500ms
              - name: prom
                type: rabbitmq
                method: prometheus
                url: http://127.0.0.1:15692
                vhosts: ["{public}", "{private}"]
                poll_interval: 500ms
              - name: amqp-pub
                type: rabbitmq
                method: amqp
                url: amqp://{user}:{pw}@127.0.0.1:5672/{public_enc}
                queues: [jobs.a, jobs.b]
                poll_interval: 500ms
              - name: amqp-priv
                type: rabbitmq
                method: amqp
                url: amqp://{user}:{pw}@127.0.0.1:5672/{private_enc}
                queues: [jobs.a]
                poll_interval: 500ms
            "#,
            public_enc = pct(public),
            private_enc = pct(private),
        )
    }
}

/// `GetMetrics` must be `UNAVAILABLE`; returns its message.
async fn unavailable(c: &mut Client, pairs: &[(&str, &str)]) -> String {
    match metrics(c, pairs).await {
        Err(e) if e.code() == Code::Unavailable => e.message().to_string(),
        other => panic!("{pairs:?}: want UNAVAILABLE, got {other:?}"),
    }
}

#[tokio::test]
async fn a_vhost_the_user_may_not_read_is_unavailable_never_a_smaller_sum() {
    let h = HiddenVhost::create().await;
    let (public, private) = (h.public.name.as_str(), h.private.name.as_str());
    let app = TestApp::start(&h.config()).await;
    let mut c = client(&app).await;
    let from = |source: &'static str, rest: &[(&'static str, &'static str)]| {
        let mut pairs = vec![("source", source), ("queue", "jobs.*")];
        pairs.extend_from_slice(rest);
        pairs
    };
    // The truth, from the plugin that reads every vhost (statistics lag up
    // to 5 s): 13 under jobs.*, 4 in the readable vhost, 9 in the other.
    wait_value_for(&c, &from("prom", &[]), 13.0, STATS_WAIT).await;
    for source in ["all", "prom"] {
        let mut pairs = from(source, &[]);
        pairs.push(("vhost", public));
        wait_value_for(&c, &pairs, 4.0, STATS_WAIT).await;
    }
    let mut in_private = from("prom", &[]);
    in_private.push(("vhost", private));
    assert_eq!(metrics(&mut c, &in_private).await.unwrap().1, 9.0);

    // Management over every vhost: RabbitMQ lists `priv` to this user but
    // not its queues. Anything `priv` may hold is unknown: jobs.* (it
    // answered 4 before), jobs.a (3), and everything asked in `priv`.
    let why = format!(
        "user \"{}\" may not read vhost \"{private}\" (no permission), so its queues are unknown",
        h.user.name
    );
    let m = unavailable(&mut c, &from("all", &[])).await;
    assert!(
        m.contains("may not read vhost") && m.contains("(no permission)"),
        "{m}"
    );
    let m = unavailable(&mut c, &[("source", "all"), ("queue", "jobs.a")]).await;
    assert!(m.contains("may not read vhost"), "{m}");
    let mut pairs = from("all", &[]);
    pairs.push(("vhost", private));
    let m = unavailable(&mut c, &pairs).await;
    assert!(m.contains(&why), "{m}");
    let e = active(&mut c, &from("all", &[])).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert_eq!(
        metrics(
            &mut c,
            &[("source", "all"), ("queue", "jobs.a"), ("vhost", public)]
        )
        .await
        .unwrap()
        .1,
        3.0
    );

    // Management over both vhosts, configured: `priv`'s listing is refused
    // (counted as `auth`), `pub` is still read, and jobs.* names `priv`.
    let mut pairs = from("listed", &[]);
    pairs.push(("vhost", public));
    wait_value_for(&c, &pairs, 4.0, STATS_WAIT).await;
    let m = unavailable(&mut c, &from("listed", &[])).await;
    assert!(m.contains(&why), "{m}");

    // AMQP reads one vhost per source: `pub`'s source answers (mode Ready:
    // a passive declare has no depth), `priv`'s cannot open its vhost and
    // is down, so it answers nothing.
    let ready = [("mode", "Ready")];
    wait_value_for(&c, &from("amqp-pub", &ready), 4.0, STATS_WAIT).await;
    let mut pairs = from("amqp-pub", &ready);
    pairs.push(("vhost", public));
    assert_eq!(metrics(&mut c, &pairs).await.unwrap().1, 4.0);
    unavailable(&mut c, &from("amqp-priv", &ready)).await;

    // /metrics: the management sources show `pub`'s queues and nothing of
    // `priv`; the plugin shows both.
    let s = app.scrape().await;
    for source in ["all", "listed"] {
        let depth = |vhost: &str, queue: &str| {
            s.value(
                "queue_depth",
                &[("source", source), ("vhost", vhost), ("queue", queue)],
            )
        };
        assert_eq!(depth(public, "jobs.a"), Some(3.0), "{source}\n{s}");
        assert_eq!(depth(public, "jobs.b"), Some(1.0), "{source}\n{s}");
        assert!(
            !s.text()
                .lines()
                .any(|l| l.contains(&format!("source=\"{source}\""))
                    && l.contains(&format!("vhost=\"{private}\""))),
            "{source} shows something of {private}:\n{s}"
        );
        assert_eq!(
            s.value("queue_exporter_source_up", &[("source", source)]),
            Some(1.0)
        );
        // The gap shows on /metrics too: `priv` refused (for `all`, any
        // other test's vhost on this broker the user may not read, too).
        let gaps = |cause: &str| {
            s.value(
                "queue_exporter_coverage_gaps",
                &[("source", source), ("cause", cause)],
            )
        };
        assert!(gaps("refused").is_some_and(|n| n >= 1.0), "{source}\n{s}");
        assert_eq!(gaps("max_keys"), Some(0.0), "{source}\n{s}");
    }
    let listed = [("source", "listed"), ("cause", "refused")];
    assert_eq!(s.value("queue_exporter_coverage_gaps", &listed), Some(1.0));
    // A source that is down vouches for nothing: no gap series at all.
    assert!(
        !s.text().contains("coverage_gaps{source=\"amqp-priv\""),
        "{s}"
    );
    assert_eq!(
        s.value(
            "queue_exporter_coverage_gaps",
            &[("source", "prom"), ("cause", "refused")]
        ),
        Some(0.0)
    );
    assert_eq!(
        s.value(
            "queue_depth",
            &[("source", "prom"), ("vhost", private), ("queue", "jobs.a")]
        ),
        Some(9.0)
    );
    // A vhost nobody configured is not an error; a configured one the user
    // may not read is counted at every poll.
    let auth = |source: &str| {
        s.value(
            "queue_exporter_poll_errors_total",
            &[("source", source), ("reason", "auth")],
        )
    };
    assert_eq!(auth("all"), Some(0.0), "{s}");
    assert!(auth("listed").is_some_and(|n| n >= 1.0), "{s}");
    assert!(auth("amqp-priv").is_some_and(|n| n >= 1.0), "{s}");
    assert_eq!(
        s.value("queue_exporter_source_up", &[("source", "amqp-priv")]),
        Some(0.0)
    );

    app.stop().await;
    drop(h);
}
