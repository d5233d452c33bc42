//! The RabbitMQ source's `management` method against the real broker on
//! 127.0.0.1 (management API 15672, AMQP 5672, guest/guest). Each test makes
//! its own vhost through the API and deletes it afterwards. Management stats
//! lag by up to `collect_statistics_interval` (5 s): every check waits for
//! the value to settle instead of sleeping.
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use lapin::BasicProperties;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use support::*;

/// Long enough for management stats (5 s steps) and quorum queue stats.
const SETTLE: Duration = Duration::from_secs(40);

/// Waits until the sample `name{labels}` equals `want`, logging each new value.
async fn settle(app: &TestApp, name: &str, labels: &[(&str, &str)], want: Option<f64>) {
    let last = std::cell::RefCell::new(None::<Option<f64>>);
    let last = &last;
    wait_for(
        &format!("{name}{labels:?} == {want:?}"),
        SETTLE,
        || async move {
            let got = app.scrape().await.value(name, labels);
            let mut seen = last.borrow_mut();
            if *seen != Some(got) {
                eprintln!("{name}{labels:?} = {got:?}");
                *seen = Some(got);
            }
            (got == want).then_some(())
        },
    )
    .await;
}

/// A management source entry for `sources:` over one vhost, with `extra`
/// settings (YAML lines, flush left or indented).
fn source(name: &str, vhost: &str, extra: &str) -> String {
    format!(
        r#"  - name: {name}
    type: rabbitmq
    url: http://127.0.0.1:15672
    username: guest
    password: guest
    vhosts: ["{vhost}"]
    poll_interval: 500ms
{extra}"#,
        extra = indent(extra, 4)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_past_500_with_include_and_exclude() {
    let vh = RabbitVhost::create("paging").await;
    let conn = vh.connect().await;
    let ch = confirm_channel(&conn).await;
    for i in 0..1200 {
        declare_queue(&ch, &format!("work.{i}"), &[]).await;
    }
    for i in 0..30 {
        declare_queue(&ch, &format!("work.{i}.tmp"), &[]).await;
    }
    for i in 0..20 {
        declare_queue(&ch, &format!("other.{i}"), &[]).await;
    }
    publish(&ch, "work.1199", 3, BasicProperties::default()).await;
    publish(&ch, "work.7.tmp", 2, BasicProperties::default()).await;

    let v = vh.name.as_str();
    let yaml = format!(
        "sources:\n{}{}{}",
        // Everything in the vhost, full stats: 1,250 queues over 3 pages.
        source("everything", v, ""),
        // include is also sent to the server as a regex; fast path.
        source(
            "filtered",
            v,
            r#"
            include: '^work\.'
            exclude: '\.tmp$'
            stats: totals
            "#
        ),
        // All vhosts of the broker (no server-side filter), credentials in the URL.
        r#"  - name: all-vhosts
    type: rabbitmq
    url: http://guest:guest@127.0.0.1:15672
    exclude: '^other\.'
    poll_interval: 500ms
"#,
    );
    let app = TestApp::start(&yaml).await;

    let per_vhost = "queue_exporter_rabbitmq_queues";
    settle(
        &app,
        per_vhost,
        &[("source", "everything"), ("vhost", v)],
        Some(1250.0),
    )
    .await;
    settle(
        &app,
        per_vhost,
        &[("source", "filtered"), ("vhost", v)],
        Some(1200.0),
    )
    .await;
    settle(
        &app,
        per_vhost,
        &[("source", "all-vhosts"), ("vhost", v)],
        Some(1230.0),
    )
    .await;
    for s in ["everything", "filtered", "all-vhosts"] {
        settle(
            &app,
            "queue_exporter_source_up",
            &[("source", s)],
            Some(1.0),
        )
        .await;
    }

    let q = |s: &'static str, queue: &'static str| [("source", s), ("vhost", v), ("queue", queue)];
    // The last page holds real numbers.
    settle(
        &app,
        "queue_depth",
        &q("everything", "work.1199"),
        Some(3.0),
    )
    .await;
    settle(&app, "queue_depth", &q("filtered", "work.1199"), Some(3.0)).await;
    settle(
        &app,
        "queue_messages_ready",
        &q("all-vhosts", "work.1199"),
        Some(3.0),
    )
    .await;
    settle(
        &app,
        "queue_depth",
        &q("everything", "work.7.tmp"),
        Some(2.0),
    )
    .await;

    let scrape = app.scrape().await;
    let depth = |s: &'static str, queue: &'static str| scrape.value("queue_depth", &q(s, queue));
    let consumers =
        |s: &'static str, queue: &'static str| scrape.value("queue_consumers", &q(s, queue));
    // Filtered out: absent, not 0.
    assert_eq!(depth("filtered", "work.7.tmp"), None);
    assert_eq!(depth("filtered", "other.3"), None);
    assert_eq!(depth("all-vhosts", "other.3"), None);
    assert_eq!(depth("filtered", "work.0"), Some(0.0));
    // The fast path does not see consumers: unknown, not 0.
    assert_eq!(consumers("filtered", "work.0"), None);
    assert_eq!(consumers("everything", "work.0"), Some(0.0));
    assert_eq!(
        scrape.value(
            "queue_info",
            &[
                ("source", "filtered"),
                ("queue", "work.0"),
                ("type", "classic")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        scrape.value("queue_exporter_tracked_keys", &[("source", "everything")]),
        Some(1250.0)
    );
    // No per-queue errors on any source.
    assert!(
        scrape
            .text()
            .lines()
            .filter(|l| l.starts_with("queue_exporter_poll_errors_total{source=\"everything\""))
            .all(|l| l.ends_with(" 0")),
        "{}",
        errors(scrape.text())
    );
    app.stop().await;
    drop(vh);
}

/// The poll error lines of an exposition, for assertion messages.
fn errors(text: &str) -> String {
    text.lines()
        .filter(|l| l.starts_with("queue_exporter_poll_errors_total"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One vhost holding a queue of every shape, watched by a management
/// source `mgmt` and a Prometheus-plugin source `prom`:
///
/// - `jobs`: classic, 10 messages whose head is two minutes old, and a live
///   consumer with prefetch 3 that never acks: 7 ready, 3 unacked;
/// - `qq`: a quorum queue with 4 messages;
/// - `prio`: a priority queue with one message of every priority 0..=5,
///   none with a timestamp;
/// - `work`: dead-letters into `dlq` through the default exchange; three
///   messages rejected with requeue=false moved there;
/// - `acked`: 2 published; one fetched, requeued, fetched again (a
///   redelivery) and acked: delivered 2, redelivered 1, acked 1.
struct Shapes {
    vh: RabbitVhost,
    app: TestApp,
    /// The consumer's unacked deliveries, held for the test's length, with
    /// the consumer, the channels and the connection (closing a channel
    /// would requeue them).
    _held: Vec<lapin::message::Delivery>,
    _consumer: lapin::Consumer,
    _channels: [lapin::Channel; 3],
    _conn: lapin::Connection,
}

impl Shapes {
    async fn start(tag: &str) -> Shapes {
        let vh = RabbitVhost::create(tag).await;
        let conn = vh.connect().await;
        let ch = confirm_channel(&conn).await;

        declare_queue(&ch, "jobs", &[]).await;
        let two_minutes_ago = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            - 120;
        publish(
            &ch,
            "jobs",
            10,
            BasicProperties::default().with_timestamp(two_minutes_ago),
        )
        .await;
        let consumer_ch = conn.create_channel().await.unwrap();
        consumer_ch
            .basic_qos(3, BasicQosOptions::default())
            .await
            .unwrap();
        let mut consumer = consumer_ch
            .basic_consume(
                "jobs".into(),
                "holder".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(consumer.next().await.unwrap().unwrap());
        }

        declare_queue(
            &ch,
            "qq",
            &[("x-queue-type", AMQPValue::LongString("quorum".into()))],
        )
        .await;
        publish(&ch, "qq", 4, BasicProperties::default()).await;

        declare_queue(
            &ch,
            "prio",
            &[("x-max-priority", AMQPValue::ShortShortUInt(5))],
        )
        .await;
        for p in 0..=5u8 {
            publish(&ch, "prio", 1, BasicProperties::default().with_priority(p)).await;
        }

        declare_queue(&ch, "dlq", &[]).await;
        let dlx = [
            ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
            (
                "x-dead-letter-routing-key",
                AMQPValue::LongString("dlq".into()),
            ),
        ];
        declare_queue(&ch, "work", &dlx).await;
        publish(&ch, "work", 3, BasicProperties::default()).await;
        let getter = conn.create_channel().await.unwrap();
        for _ in 0..3 {
            let m = getter
                .basic_get("work".into(), BasicGetOptions::default())
                .await
                .unwrap()
                .expect("a message");
            m.delivery
                .acker
                .nack(BasicNackOptions {
                    requeue: false,
                    multiple: false,
                })
                .await
                .unwrap();
        }

        declare_queue(&ch, "acked", &[]).await;
        publish(&ch, "acked", 2, BasicProperties::default()).await;
        let m = getter
            .basic_get("acked".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .unwrap();
        m.delivery
            .acker
            .nack(BasicNackOptions {
                requeue: true,
                multiple: false,
            })
            .await
            .unwrap();
        let m = getter
            .basic_get("acked".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .unwrap();
        assert!(m.delivery.redelivered);
        m.delivery
            .acker
            .ack(BasicAckOptions::default())
            .await
            .unwrap();

        let v = vh.name.as_str();
        let yaml = format!(
            r#"sources:
{mgmt}  - name: prom
    type: rabbitmq
    method: prometheus
    url: http://127.0.0.1:15692
    poll_interval: 500ms
    vhosts: ["{v}"]
"#,
            mgmt = source("mgmt", v, ""),
        );
        let app = TestApp::start(&yaml).await;
        Shapes {
            vh,
            app,
            _held: held,
            _consumer: consumer,
            _channels: [ch, consumer_ch, getter],
            _conn: conn,
        }
    }

    /// The labels of `queue` in this vhost as source `s` reports it.
    fn q<'a>(&'a self, s: &'a str, queue: &'a str) -> [(&'a str, &'a str); 3] {
        [
            ("source", s),
            ("vhost", self.vh.name.as_str()),
            ("queue", queue),
        ]
    }

    /// Waits until `name` of `queue` from source `s` is `want`.
    async fn settle(&self, name: &str, s: &str, queue: &str, want: f64) {
        settle(&self.app, name, &self.q(s, queue), Some(want)).await;
    }

    async fn stop(self) {
        self.app.stop().await;
        drop(self.vh);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_holding_unacked_messages_splits_ready_from_unacked() {
    let shapes = Shapes::start("unacked").await;
    for s in ["mgmt", "prom"] {
        shapes.settle("queue_messages_ready", s, "jobs", 7.0).await;
        shapes
            .settle("queue_messages_unacked", s, "jobs", 3.0)
            .await;
        shapes.settle("queue_depth", s, "jobs", 10.0).await;
        shapes.settle("queue_consumers", s, "jobs", 1.0).await;
    }
    let scrape = shapes
        .app
        .scrape_until("utilisation reported", SETTLE, |scrape| {
            ["mgmt", "prom"].iter().all(|s| {
                scrape
                    .value("queue_consumer_utilisation", &shapes.q(s, "jobs"))
                    .is_some()
            })
        })
        .await;
    for s in ["mgmt", "prom"] {
        let util = scrape
            .value("queue_consumer_utilisation", &shapes.q(s, "jobs"))
            .expect("utilisation");
        assert!((0.0..=1.0).contains(&util), "{s}: {util}");
    }
    shapes.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_and_priority_queues_report_their_depth_and_type() {
    let shapes = Shapes::start("quorum").await;
    for s in ["mgmt", "prom"] {
        shapes.settle("queue_depth", s, "qq", 4.0).await;
        shapes.settle("queue_messages_ready", s, "qq", 4.0).await;
        shapes.settle("queue_depth", s, "prio", 6.0).await;
    }
    // Types and states. RabbitMQ reports a new quorum queue's `state` only
    // once its first statistics are out (a few seconds); until then the
    // label is absent, as it should be.
    shapes.settle("queue_depth", "mgmt", "jobs", 10.0).await;
    let vhost = shapes.vh.name.clone();
    let info = |scrape: &Scrape, queue: &str, t: &str| {
        scrape.value(
            "queue_info",
            &[
                ("source", "mgmt"),
                ("vhost", vhost.as_str()),
                ("queue", queue),
                ("type", t),
                ("state", "running"),
            ],
        )
    };
    let scrape = shapes
        .app
        .until("both queues' type and state", SETTLE, |s| {
            info(s, "qq", "quorum").is_some() && info(s, "jobs", "classic").is_some()
        })
        .await;
    assert_eq!(info(&scrape, "qq", "quorum"), Some(1.0));
    assert_eq!(info(&scrape, "jobs", "classic"), Some(1.0));
    shapes.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_messages_move_to_the_dead_letter_queue() {
    let shapes = Shapes::start("dead-letters").await;
    for s in ["mgmt", "prom"] {
        shapes.settle("queue_messages_ready", s, "dlq", 3.0).await;
        shapes.settle("queue_depth", s, "work", 0.0).await;
    }
    shapes
        .settle("queue_messages_delivered_total", "mgmt", "work", 3.0)
        .await;
    shapes.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_counters_come_from_the_cumulative_message_stats() {
    let shapes = Shapes::start("counters").await;
    for s in ["mgmt", "prom"] {
        shapes.settle("queue_depth", s, "acked", 1.0).await;
    }
    for (name, want) in [
        ("queue_messages_published_total", 2.0),
        ("queue_messages_delivered_total", 2.0),
        ("queue_messages_redelivered_total", 1.0),
        ("queue_messages_acknowledged_total", 1.0),
    ] {
        shapes.settle(name, "mgmt", "acked", want).await;
    }
    shapes
        .settle("queue_messages_published_total", "mgmt", "jobs", 10.0)
        .await;
    shapes.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_message_age_comes_from_the_head_message_timestamp() {
    // Classic queues only.
    let shapes = Shapes::start("age").await;
    for s in ["mgmt", "prom"] {
        shapes.settle("queue_depth", s, "jobs", 10.0).await;
        shapes.settle("queue_depth", s, "prio", 6.0).await;
        shapes.settle("queue_depth", s, "work", 0.0).await;
        shapes.settle("queue_depth", s, "qq", 4.0).await;
    }
    // RabbitMQ publishes a queue's head timestamp with its detailed
    // statistics, which may come a few seconds after its depth: until then
    // the age is unknown (absent), so wait for the whole picture.
    let age = |scrape: &Scrape, s: &str, queue: &str| {
        scrape.value("queue_oldest_message_age_seconds", &shapes.q(s, queue))
    };
    let picture = |scrape: &Scrape, s: &str| {
        (
            age(scrape, s, "jobs").map(|a| (119.0..600.0).contains(&a)),
            age(scrape, s, "prio"),
            age(scrape, s, "work"),
            age(scrape, s, "qq"),
        )
    };
    // Two-minute-old head; messages without a timestamp property: unknown;
    // an empty classic queue: nothing waits; quorum queues do not report it.
    let want = (Some(true), None, Some(0.0), None);
    let scrape = shapes
        .app
        .until("the age of every queue reported", SETTLE, |scrape| {
            ["mgmt", "prom"].iter().all(|s| picture(scrape, s) == want)
        })
        .await;
    for s in ["mgmt", "prom"] {
        assert_eq!(picture(&scrape, s), want, "{s}");
    }
    shapes.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_queue_of_the_vhost_is_counted() {
    let shapes = Shapes::start("count").await;
    for (queue, depth) in [
        ("jobs", 10.0),
        ("qq", 4.0),
        ("prio", 6.0),
        ("dlq", 3.0),
        ("work", 0.0),
        ("acked", 1.0),
    ] {
        shapes.settle("queue_depth", "mgmt", queue, depth).await;
    }
    assert_eq!(
        shapes.app.scrape().await.value(
            "queue_exporter_rabbitmq_queues",
            &[("source", "mgmt"), ("vhost", shapes.vh.name.as_str())]
        ),
        Some(6.0)
    );
    shapes.stop().await;
}

#[tokio::test]
async fn a_missing_vhost_is_counted_and_the_others_still_reported() {
    let vh = RabbitVhost::create("one-of-two").await;
    let conn = vh.connect().await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "here", &[]).await;
    publish(&ch, "here", 2, BasicProperties::default()).await;
    let gone = format!("qe-never-created-{}", std::process::id());
    let yaml = format!(
        r#"
        sources:
          - name: two
            type: rabbitmq
            url: http://guest:guest@127.0.0.1:15672
            vhosts: ["{here}", "{gone}"]
            stats: totals
            poll_interval: 300ms
        "#,
        here = vh.name
    );
    let app = TestApp::start(&yaml).await;
    let v = vh.name.as_str();
    settle(
        &app,
        "queue_depth",
        &[("source", "two"), ("vhost", v), ("queue", "here")],
        Some(2.0),
    )
    .await;
    let scrape = app.scrape().await;
    assert_eq!(scrape.source_up("two"), Some(1.0));
    assert!(
        scrape.errors("two", "not_found").is_some_and(|n| n >= 1.0),
        "{}",
        errors(scrape.text())
    );
    assert_eq!(
        scrape.value(
            "queue_exporter_rabbitmq_queues",
            &[("source", "two"), ("vhost", gone.as_str())]
        ),
        None
    );
    app.stop().await;
    drop(vh);
}
