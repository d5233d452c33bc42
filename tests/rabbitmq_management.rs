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
            let got = sample(&app.metrics().await, name, labels);
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

fn source(name: &str, vhost: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    type: rabbitmq\n    url: http://127.0.0.1:15672\n    username: guest\n    password: guest\n    vhosts: [\"{vhost}\"]\n    poll_interval: 500ms\n{extra}"
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
            "    include: '^work\\.'\n    exclude: '\\.tmp$'\n    stats: totals\n"
        ),
        // All vhosts of the broker (no server-side filter), credentials in the URL.
        "  - name: all-vhosts\n    type: rabbitmq\n    url: http://guest:guest@127.0.0.1:15672\n    exclude: '^other\\.'\n    poll_interval: 500ms\n",
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

    let text = app.metrics().await;
    // Filtered out: absent, not 0.
    assert_eq!(
        sample(&text, "queue_depth", &q("filtered", "work.7.tmp")),
        None
    );
    assert_eq!(
        sample(&text, "queue_depth", &q("filtered", "other.3")),
        None
    );
    assert_eq!(
        sample(&text, "queue_depth", &q("all-vhosts", "other.3")),
        None
    );
    assert_eq!(
        sample(&text, "queue_depth", &q("filtered", "work.0")),
        Some(0.0)
    );
    // The fast path does not see consumers: unknown, not 0.
    assert_eq!(
        sample(&text, "queue_consumers", &q("filtered", "work.0")),
        None
    );
    assert_eq!(
        sample(&text, "queue_consumers", &q("everything", "work.0")),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
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
        sample(
            &text,
            "queue_exporter_tracked_keys",
            &[("source", "everything")]
        ),
        Some(1250.0)
    );
    // No per-queue errors on any source.
    assert!(
        text.lines()
            .filter(|l| l.starts_with("queue_exporter_poll_errors_total{source=\"everything\""))
            .all(|l| l.ends_with(" 0")),
        "{}",
        errors(&text)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_quorum_priority_dead_letters_counters_and_age() {
    let vh = RabbitVhost::create("shapes").await;
    let conn = vh.connect().await;
    let ch = confirm_channel(&conn).await;

    // A classic queue whose head message is two minutes old, and a live
    // consumer with prefetch 3 that never acks: 7 ready, 3 unacked.
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

    // A quorum queue.
    declare_queue(
        &ch,
        "qq",
        &[("x-queue-type", AMQPValue::LongString("quorum".into()))],
    )
    .await;
    publish(&ch, "qq", 4, BasicProperties::default()).await;

    // A priority queue, messages of every priority.
    declare_queue(
        &ch,
        "prio",
        &[("x-max-priority", AMQPValue::ShortShortUInt(5))],
    )
    .await;
    for p in 0..=5u8 {
        publish(&ch, "prio", 1, BasicProperties::default().with_priority(p)).await;
    }

    // A queue dead-lettering into a DLQ through the default exchange; three
    // messages rejected with requeue=false move there.
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

    // Counters: 2 published; one fetched, requeued, fetched again
    // (a redelivery) and acked: delivered 2, redelivered 1, acked 1.
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
        "sources:\n{}{}",
        source("mgmt", v, ""),
        "  - name: prom\n    type: rabbitmq\n    method: prometheus\n    url: http://127.0.0.1:15692\n    poll_interval: 500ms\n    vhosts: [\"VHOST\"]\n"
            .replace("VHOST", v),
    );
    let app = TestApp::start(&yaml).await;
    let q = |s: &'static str, queue: &'static str| [("source", s), ("vhost", v), ("queue", queue)];

    for s in ["mgmt", "prom"] {
        settle(&app, "queue_messages_ready", &q(s, "jobs"), Some(7.0)).await;
        settle(&app, "queue_messages_unacked", &q(s, "jobs"), Some(3.0)).await;
        settle(&app, "queue_depth", &q(s, "jobs"), Some(10.0)).await;
        settle(&app, "queue_consumers", &q(s, "jobs"), Some(1.0)).await;
        settle(&app, "queue_depth", &q(s, "qq"), Some(4.0)).await;
        settle(&app, "queue_messages_ready", &q(s, "qq"), Some(4.0)).await;
        settle(&app, "queue_depth", &q(s, "prio"), Some(6.0)).await;
        settle(&app, "queue_messages_ready", &q(s, "dlq"), Some(3.0)).await;
        settle(&app, "queue_depth", &q(s, "work"), Some(0.0)).await;
        settle(&app, "queue_depth", &q(s, "acked"), Some(1.0)).await;
    }

    // Management: counters from the cumulative message_stats totals.
    settle(
        &app,
        "queue_messages_published_total",
        &q("mgmt", "acked"),
        Some(2.0),
    )
    .await;
    settle(
        &app,
        "queue_messages_delivered_total",
        &q("mgmt", "acked"),
        Some(2.0),
    )
    .await;
    settle(
        &app,
        "queue_messages_redelivered_total",
        &q("mgmt", "acked"),
        Some(1.0),
    )
    .await;
    settle(
        &app,
        "queue_messages_acknowledged_total",
        &q("mgmt", "acked"),
        Some(1.0),
    )
    .await;
    settle(
        &app,
        "queue_messages_published_total",
        &q("mgmt", "jobs"),
        Some(10.0),
    )
    .await;
    settle(
        &app,
        "queue_messages_delivered_total",
        &q("mgmt", "work"),
        Some(3.0),
    )
    .await;

    let text = app.metrics().await;
    // Types and states.
    let info = |s: &'static str, queue: &'static str, t: &'static str| {
        sample(
            &text,
            "queue_info",
            &[
                ("source", s),
                ("vhost", v),
                ("queue", queue),
                ("type", t),
                ("state", "running"),
            ],
        )
    };
    assert_eq!(info("mgmt", "qq", "quorum"), Some(1.0));
    assert_eq!(info("mgmt", "jobs", "classic"), Some(1.0));
    // The oldest message's age comes from head_message_timestamp (classic queues only).
    for s in ["mgmt", "prom"] {
        let age = sample(&text, "queue_oldest_message_age_seconds", &q(s, "jobs")).expect("age");
        assert!((119.0..600.0).contains(&age), "{s}: age {age}");
        // Messages without a timestamp property: unknown.
        assert_eq!(
            sample(&text, "queue_oldest_message_age_seconds", &q(s, "prio")),
            None,
            "{s}"
        );
        // An empty classic queue: nothing waits.
        assert_eq!(
            sample(&text, "queue_oldest_message_age_seconds", &q(s, "work")),
            Some(0.0),
            "{s}"
        );
        // Quorum queues do not report it.
        assert_eq!(
            sample(&text, "queue_oldest_message_age_seconds", &q(s, "qq")),
            None,
            "{s}"
        );
        let util = sample(&text, "queue_consumer_utilisation", &q(s, "jobs")).expect("utilisation");
        assert!((0.0..=1.0).contains(&util), "{s}: {util}");
    }
    assert_eq!(
        sample(
            &text,
            "queue_exporter_rabbitmq_queues",
            &[("source", "mgmt"), ("vhost", v)]
        ),
        Some(6.0)
    );
    drop(held);
    app.stop().await;
    drop(vh);
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
        "sources:\n  - name: two\n    type: rabbitmq\n    url: http://guest:guest@127.0.0.1:15672\n    vhosts: [\"{}\", \"{gone}\"]\n    stats: totals\n    poll_interval: 300ms\n",
        vh.name
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
    let text = app.metrics().await;
    assert_eq!(
        sample(&text, "queue_exporter_source_up", &[("source", "two")]),
        Some(1.0)
    );
    assert!(
        sample(
            &text,
            "queue_exporter_poll_errors_total",
            &[("source", "two"), ("reason", "not_found")]
        )
        .is_some_and(|n| n >= 1.0),
        "{}",
        errors(&text)
    );
    assert_eq!(
        sample(
            &text,
            "queue_exporter_rabbitmq_queues",
            &[("source", "two"), ("vhost", gone.as_str())]
        ),
        None
    );
    app.stop().await;
    drop(vh);
}
