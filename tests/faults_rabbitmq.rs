//! RabbitMQ faults through a local TCP proxy (written here, in tokio) that
//! can pass traffic, hold every answer back, drop connections, cut answers
//! in the middle, or swallow everything. The exporter binary runs as a child
//! process; the management API (15672) and AMQP (5672) of the local
//! RabbitMQ sit behind the proxy. Every fault must be a counted error with
//! `source_up 0` and no queue series, and the source must come back with
//! honest, current figures once the path heals.
mod reliability_support;
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reliability_support::*;
use support::*;

const REASONS: [&str; 10] = [
    "connect",
    "auth",
    "timeout",
    "backend",
    "malformed",
    "http_4xx",
    "http_5xx",
    "too_large",
    "not_found",
    "config",
];

/// One scrape: (when, source_up, depth or ready of the watched queue).
type Seen = (Instant, Option<f64>, Option<f64>);

/// Scrapes every 50 ms, recording `source_up` and `metric` for the queue.
fn record(
    exp: &Exporter,
    source: &'static str,
    metric: &'static str,
) -> (Arc<Mutex<Vec<Seen>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let url = format!("{}/metrics", exp.base);
    let s = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let at = Instant::now();
            // Failures are not recorded: the process may be stopping.
            let Ok(resp) = reqwest::get(&url).await else {
                return;
            };
            let Ok(body) = resp.text().await else {
                return;
            };
            s.lock().unwrap().push((
                at,
                sample(&body, "queue_exporter_source_up", &[("source", source)]),
                sample(&body, metric, &[("source", source), ("queue", "work")]),
            ));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    (seen, task)
}

/// Error counts of `source` by reason.
async fn errors(exp: &Exporter, source: &str) -> Vec<(&'static str, f64)> {
    let body = exp.metrics().await;
    REASONS
        .iter()
        .map(|r| {
            (
                *r,
                sample(
                    &body,
                    "queue_exporter_poll_errors_total",
                    &[("source", source), ("reason", r)],
                )
                .unwrap_or(0.0),
            )
        })
        .collect()
}

/// Error counts of `source` by reason, from a blocking scrape (for panic messages).
fn errors_now(exp: &Exporter, source: &str) -> String {
    let url = format!("{}/metrics", exp.base);
    let source = source.to_string();
    std::thread::spawn(move || {
        let body = std::process::Command::new("curl")
            .args(["-s", &url])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        body.lines()
            .filter(|l| l.contains(&format!("source=\"{source}\"")) && !l.ends_with(" 0"))
            .map(str::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    })
    .join()
    .unwrap()
}

/// Sets `mode`, waits until the source is down, and returns which reasons
/// grew meanwhile (and how long detection took).
async fn break_with(
    exp: &Exporter,
    proxy: &Proxy,
    source: &str,
    mode: ProxyMode,
) -> (Vec<&'static str>, Duration) {
    let before = errors(exp, source).await;
    let t = Instant::now();
    proxy.set(mode);
    poll_until(Duration::from_secs(20), || async {
        (exp.value("queue_exporter_source_up", &[("source", source)])
            .await
            == Some(0.0))
        .then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("{source} not down with {mode:?}; stderr:\n{}", exp.stderr()));
    let took = t.elapsed();
    // Let the reason settle on a couple of failed polls.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after = errors(exp, source).await;
    let grew = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| a.1 > b.1)
        .map(|(b, _)| b.0)
        .collect();
    (grew, took)
}

/// Sets `Pass` and waits until the queue shows `want`; returns how long it took.
async fn heal(
    exp: &Exporter,
    proxy: &Proxy,
    source: &str,
    metric: &str,
    want: f64,
    within: Duration,
) -> Duration {
    let t = Instant::now();
    proxy.set(ProxyMode::Pass);
    poll_until(within, || async {
        let body = exp.metrics().await;
        (sample(&body, "queue_exporter_source_up", &[("source", source)]) == Some(1.0)
            && sample(&body, metric, &[("source", source), ("queue", "work")]) == Some(want))
        .then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "{source}: {metric} {want} not back within {within:?}; errors {:?}; stderr:\n{}",
            errors_now(exp, source),
            exp.stderr()
        )
    });
    t.elapsed()
}

/// Checks the recorded scrapes: down means no series; values are real ones.
fn check_honest(seen: &[Seen], allowed: &[f64]) {
    assert!(seen.len() > 20, "only {} scrapes", seen.len());
    for (_, up, v) in seen {
        if *up != Some(1.0) {
            assert_eq!(*v, None, "a value while down");
        }
        if let Some(v) = v {
            assert!(allowed.contains(v), "made-up value {v}");
        }
    }
    let downs = seen.iter().filter(|s| s.1 == Some(0.0)).count();
    assert!(downs > 0, "never seen down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_through_a_failing_proxy_is_down_with_a_reason_and_recovers_honestly() {
    let vhost = RabbitVhost::create("proxy-mgmt").await;
    let conn = vhost.connect().await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "work", &[]).await;
    publish(&ch, "work", 3, lapin::BasicProperties::default()).await;
    let proxy = Proxy::start("127.0.0.1:15672").await;
    let exp = Exporter::start(
        &format!(
            "sources:\n  - name: rabbit\n    type: rabbitmq\n    url: http://127.0.0.1:{}\n    username: guest\n    password: guest\n    vhosts: [\"{}\"]\n    poll_interval: 500ms\n    timeout: 1s\n",
            proxy.port, vhost.name
        ),
        &[],
        &[],
    )
    .await;
    // Management statistics lag up to 5 s behind the queue.
    let t = Instant::now();
    poll_until(Duration::from_secs(20), || async {
        (exp.value("queue_depth", &[("source", "rabbit"), ("queue", "work")])
            .await
            == Some(3.0))
        .then_some(())
    })
    .await
    .expect("depth 3 through the proxy");
    eprintln!("first depth after {:?}", t.elapsed());
    let (seen, recorder) = record(&exp, "rabbit", "queue_depth");

    let mut report = Vec::new();
    for (mode, reasons) in [
        // Connection closed at once: the request never got an answer.
        (ProxyMode::Drop, &["backend"][..]),
        // The answer cut after 300 bytes: headers, then half a body.
        (ProxyMode::Cut(300), &["backend"]),
        // Every answer held back longer than the 1 s timeout.
        (ProxyMode::Slow(Duration::from_millis(1500)), &["timeout"]),
        // Nothing ever comes back.
        (ProxyMode::BlackHole, &["timeout"]),
    ] {
        let (grew, detected) = break_with(&exp, &proxy, "rabbit", mode).await;
        assert_eq!(grew, reasons, "{mode:?}");
        let back = heal(
            &exp,
            &proxy,
            "rabbit",
            "queue_depth",
            3.0,
            Duration::from_secs(10),
        )
        .await;
        report.push(format!(
            "{mode:?}: {grew:?} after {detected:?}, back in {back:?}"
        ));
        assert!(
            back < Duration::from_secs(3),
            "{mode:?}: back after {back:?}"
        );
    }

    // The queue changes while the path is broken: once healed, the new
    // figure is shown (after RabbitMQ's next statistics emission), never
    // the old one as if current.
    proxy.set(ProxyMode::BlackHole);
    publish(&ch, "work", 2, lapin::BasicProperties::default()).await;
    poll_until(Duration::from_secs(20), || async {
        (exp.value("queue_exporter_source_up", &[("source", "rabbit")])
            .await
            == Some(0.0))
        .then_some(())
    })
    .await
    .expect("down");
    let back = heal(
        &exp,
        &proxy,
        "rabbit",
        "queue_depth",
        5.0,
        Duration::from_secs(20),
    )
    .await;
    report.push(format!(
        "changed while down: 5 shown {back:?} after healing"
    ));
    recorder.abort();
    let seen = seen.lock().unwrap().clone();
    eprintln!("{}", report.join("\n"));
    check_honest(&seen, &[3.0, 5.0]);
    // Through it all the proxy carried real connections.
    assert!(proxy.accepted() > 10);
    drop(conn);
}

/// A queue `work` with 3 ready messages in a fresh vhost, the proxy in
/// front of AMQP (5672), and an exporter reading it with method `amqp`.
async fn amqp_setup(
    tag: &str,
) -> (
    RabbitVhost,
    lapin::Connection,
    lapin::Channel,
    Proxy,
    Exporter,
) {
    let vhost = RabbitVhost::create(tag).await;
    let conn = vhost.connect().await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, "work", &[]).await;
    publish(&ch, "work", 3, lapin::BasicProperties::default()).await;
    let proxy = Proxy::start("127.0.0.1:5672").await;
    let exp = Exporter::start(
        &format!(
            "sources:\n  - name: amqp\n    type: rabbitmq\n    method: amqp\n    url: amqp://guest:guest@127.0.0.1:{}/{}\n    queues: [work]\n    poll_interval: 300ms\n    timeout: 1s\n",
            proxy.port,
            pct(&vhost.name)
        ),
        &[],
        &[],
    )
    .await;
    poll_until(Duration::from_secs(20), || async {
        (exp.value(
            "queue_messages_ready",
            &[("source", "amqp"), ("queue", "work")],
        )
        .await
            == Some(3.0))
        .then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("ready 3 over AMQP; stderr:\n{}", exp.stderr()));
    (vhost, conn, ch, proxy, exp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_through_a_failing_proxy_is_down_with_a_reason_and_shows_nothing_stale() {
    let (_vhost, conn, _ch, proxy, exp) = amqp_setup("proxy-amqp").await;
    let (seen, recorder) = record(&exp, "amqp", "queue_messages_ready");
    let mut report = Vec::new();
    for mode in [
        // The connection is cut (as by a broker restart) and new ones are closed at once.
        ProxyMode::Drop,
        // New connections cut in the middle of the handshake.
        ProxyMode::Cut(40),
        // Connections accepted, never answered: the open connection is lost
        // first, then new handshakes hang.
        ProxyMode::BlackHole,
    ] {
        let (grew, detected) = break_with(&exp, &proxy, "amqp", mode).await;
        assert_eq!(grew, ["connect"], "{mode:?}");
        report.push(format!("{mode:?}: {grew:?} after {detected:?}"));
        proxy.set(ProxyMode::Pass);
        // Recovery is checked (with its bug) by the ignored test below. Give
        // the source a few seconds so the next fault usually starts from a
        // healthy source; if it is stuck, the next fault still counts
        // `connect` and shows nothing, which is what this test checks.
        if mode != ProxyMode::BlackHole {
            poll_until(Duration::from_secs(5), || async {
                (exp.value("queue_exporter_source_up", &[("source", "amqp")])
                    .await
                    == Some(1.0))
                .then_some(())
            })
            .await;
        }
    }
    recorder.abort();
    let seen = seen.lock().unwrap().clone();
    eprintln!("{}", report.join("\n"));
    check_honest(&seen, &[3.0]);
    drop(conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "bug: the amqp source waits on lapin's auto-recovery: ~11 s after a black-holed path heals, and now and then it stays down for minutes (lapin stuck 'reconnecting')"]
async fn amqp_recovers_within_2s_of_the_path_healing() {
    let (_vhost, conn, ch, proxy, exp) = amqp_setup("proxy-amqp-heal").await;
    let mut want = 3.0;
    let mut report = Vec::new();
    for mode in [ProxyMode::Drop, ProxyMode::Cut(40), ProxyMode::BlackHole].repeat(3) {
        break_with(&exp, &proxy, "amqp", mode).await;
        // A message arrives while the exporter cannot see: shown at once after.
        publish(&ch, "work", 1, lapin::BasicProperties::default()).await;
        want += 1.0;
        let back = heal(
            &exp,
            &proxy,
            "amqp",
            "queue_messages_ready",
            want,
            Duration::from_secs(60),
        )
        .await;
        report.push(format!("{mode:?}: back in {back:?}"));
        eprintln!("{}", report.last().unwrap());
        assert!(back < Duration::from_secs(2), "{report:?}");
    }
    drop(conn);
}
