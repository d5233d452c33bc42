//! Measures what each RabbitMQ method costs at 2,000 queues on this machine
//! (time and response size), for the method table in `docs/rabbitmq.md`.
//! Not a test: it asserts nothing about time. Run it with
//!
//! ```text
//! cargo test --release --test rabbitmq_cost -- --ignored --nocapture
//! ```
mod support;

use std::time::{Duration, Instant};

use lapin::BasicProperties;
use queue_exporter::config::SourceConfig;
use queue_exporter::sources::Source;
use queue_exporter::sources::rabbitmq::RabbitSource;
use support::*;

/// Queues in the measured vhost.
const QUEUES: usize = 2000;
/// Repetitions of each measurement.
const RUNS: usize = 7;

/// min / median / max of the durations, in milliseconds.
fn spread(mut d: Vec<Duration>) -> String {
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    format!(
        "{:.0} / {:.0} / {:.0} ms",
        ms(d[0]),
        ms(d[d.len() / 2]),
        ms(d[d.len() - 1])
    )
}

/// GETs `url` `RUNS` times (after one warm-up); returns timing and body size.
async fn measure_get(client: &reqwest::Client, urls: &[String]) -> (String, usize) {
    let mut times = Vec::new();
    let mut size = 0;
    for run in 0..=RUNS {
        let started = Instant::now();
        size = 0;
        for url in urls {
            let body = client
                .get(url)
                .basic_auth("guest", Some("guest"))
                .send()
                .await
                .expect("GET")
                .bytes()
                .await
                .expect("body");
            size += body.len();
        }
        if run > 0 {
            times.push(started.elapsed());
        }
    }
    (spread(times), size)
}

/// Polls a source `RUNS` times (after one warm-up); returns timing and queues seen.
/// `entry` is one YAML source entry, flush left or indented.
async fn measure_source(entry: &str) -> (String, usize) {
    let (config, _dir) = load_config(&format!("sources:\n{}", indent(entry, 2)));
    let Some(SourceConfig::RabbitMq(c)) = config.sources.into_iter().next() else {
        panic!("not rabbitmq")
    };
    let mut source = RabbitSource::new(c);
    let mut times = Vec::new();
    let mut seen = 0;
    for run in 0..=RUNS {
        let started = Instant::now();
        let out = source.poll().await.expect("poll");
        if run > 0 {
            times.push(started.elapsed());
        }
        seen = out.queues.len();
    }
    (spread(times), seen)
}

fn kb(n: usize) -> String {
    if n >= 1024 * 1024 {
        format!("{:.2} MB", n as f64 / 1e6)
    } else {
        format!("{:.0} KB", n as f64 / 1e3)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, not a test: run with --ignored --nocapture (ideally --release)"]
async fn cost_of_each_method_at_2000_queues() {
    let vh = RabbitVhost::create("cost").await;
    let conn = vh.connect().await;
    let ch = confirm_channel(&conn).await;
    let names: Vec<String> = (0..QUEUES).map(|i| format!("job.{i:04}")).collect();
    for n in &names {
        declare_queue(&ch, n, &[]).await;
        publish(&ch, n, 1, BasicProperties::default()).await;
    }
    let v = pct(&vh.name);
    let api = RABBIT_API;
    // Wait until the stats database has every queue with its message.
    wait_for("stats for every queue", Duration::from_secs(60), || async {
        let (_, body) = rabbit_api(
            reqwest::Method::GET,
            &format!("/queues/{v}?page=1&page_size=500&columns=messages&disable_stats=false&name=job.1999"),
            None,
        )
        .await;
        body.contains("\"messages\":1").then_some(())
    })
    .await;

    let client = reqwest::Client::new();
    let pages = |query: &str| -> Vec<String> {
        (1..=QUEUES.div_ceil(500))
            .map(|p| format!("{api}/queues/{v}?page={p}&page_size=500&{query}"))
            .collect()
    };
    let full_cols = "columns=name,vhost,type,state,messages,messages_ready,messages_unacknowledged,\
consumers,consumer_utilisation,head_message_timestamp,message_stats.publish,message_stats.deliver_get,\
message_stats.ack,message_stats.redeliver";
    let fast = "disable_stats=true&enable_queue_totals=true&columns=name,vhost,type,state,messages,messages_ready,messages_unacknowledged";
    let prom = "http://127.0.0.1:15692/metrics/detailed";
    let vhost_q = format!("vhost={v}");
    let rows: Vec<(&str, String, usize)> = vec![
        {
            let (t, s) = measure_get(&client, &[format!("{api}/queues/{v}")]).await;
            (
                "management: full `/api/queues/{vhost}`, unpaged (what not to do)",
                t,
                s,
            )
        },
        {
            let (t, s) = measure_get(&client, &pages(full_cols)).await;
            (
                "management: 4 pages of 500 with `columns` (`stats: full`)",
                t,
                s,
            )
        },
        {
            let (t, s) = measure_get(&client, &pages(fast)).await;
            (
                "management: 4 pages with `columns` + `disable_stats` (`stats: totals`)",
                t,
                s,
            )
        },
        {
            let url =
                format!("{prom}?family=queue_coarse_metrics&family=queue_consumer_count&{vhost_q}");
            let (t, s) = measure_get(&client, &[url]).await;
            (
                "prometheus: coarse + consumer_count (`stats: totals`)",
                t,
                s,
            )
        },
        {
            let url = format!(
                "{prom}?family=queue_coarse_metrics&family=queue_metrics&family=queue_delivery_metrics&family=queue_exchange_metrics&{vhost_q}"
            );
            let (t, s) = measure_get(&client, &[url]).await;
            (
                "prometheus: coarse + queue_metrics + delivery + exchange (`stats: full`)",
                t,
                s,
            )
        },
    ];
    println!("\nRaw requests, {QUEUES} queues, min / median / max of {RUNS} runs:\n");
    println!("| request | time | size |\n|---|---|---|");
    for (what, t, s) in &rows {
        println!("| {what} | {t} | {} |", kb(*s));
    }

    let mgmt = |stats: &str| {
        format!(
            r#"
            - name: m
              type: rabbitmq
              url: http://guest:guest@127.0.0.1:15672
              vhosts: ["{vhost}"]
              stats: {stats}
              timeout: 30s
            "#,
            vhost = vh.name
        )
    };
    let promsrc = |stats: &str| {
        format!(
            r#"
            - name: p
              type: rabbitmq
              method: prometheus
              url: http://127.0.0.1:15692
              vhosts: ["{vhost}"]
              stats: {stats}
              timeout: 30s
            "#,
            vhost = vh.name
        )
    };
    let amqp = format!(
        r#"
        - name: a
          type: rabbitmq
          method: amqp
          url: {url}
          timeout: 30s
          queues: [{queues}]
        "#,
        url = vh.amqp_url(),
        queues = names.join(", ")
    );
    let polls = [
        ("management, `stats: full`", mgmt("full")),
        ("management, `stats: totals`", mgmt("totals")),
        ("prometheus, `stats: totals`", promsrc("totals")),
        ("prometheus, `stats: full`", promsrc("full")),
        ("amqp, 2,000 passive declares on 8 channels", amqp),
    ];
    println!("\nWhole source polls (request + parse + snapshot), min / median / max of {RUNS}:\n");
    println!("| method | poll time | queues seen |\n|---|---|---|");
    for (what, entry) in polls {
        let (t, seen) = measure_source(&entry).await;
        println!("| {what} | {t} | {seen} |");
    }
    drop(vh);
}
