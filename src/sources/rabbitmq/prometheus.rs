//! Method `prometheus`: scrapes the `rabbitmq_prometheus` plugin's
//! `/metrics/detailed` endpoint on every node and merges by (vhost, queue),
//! since each node reports only the queues it leads. Works with management
//! stats disabled, and is the cheapest method.
//!
//! The text is parsed with `prom_text_format_parser`. RabbitMQ 3.x does not
//! escape `"` or `\` in label values, which makes lines of such queues
//! invalid; when the whole text does not parse, it is parsed line by line and
//! the invalid lines are skipped and counted (`reason="malformed"`).

use crate::snapshot::Reason;
use std::collections::HashMap;
use std::time::SystemTime;

use futures_util::future::join_all;

use super::client::{self, HttpClient};
use super::credentials::{self, Credentials};
use super::filter::QueueFilter;
use super::sample::{self, HeadTimestamp};
use crate::config::{RabbitSourceConfig, RabbitStats};
use crate::snapshot::QueueSample;
use crate::sources::{PollOutput, SourceError};

/// Families asked for with `stats: totals`: depth, ready, unacked, consumers.
const TOTALS_FAMILIES: &[&str] = &["queue_coarse_metrics", "queue_consumer_count"];
/// Families asked for with `stats: full`; `queue_metrics` includes the
/// consumer count, utilisation and head message timestamp.
const FULL_FAMILIES: &[&str] = &[
    "queue_coarse_metrics",
    "queue_metrics",
    "queue_delivery_metrics",
    "queue_exchange_metrics",
];

/// Prefix of every per-queue detailed metric.
const PREFIX: &str = "rabbitmq_detailed_queue_";

/// State of the prometheus method between polls.
#[derive(Debug, Default)]
pub struct Prometheus {
    /// Built on first use (reads the CA file).
    client: Option<HttpClient>,
}

impl Prometheus {
    /// One poll: every node, merged. Any node failing fails the poll, since
    /// its queues would otherwise silently vanish.
    pub async fn poll(
        &mut self,
        config: &RabbitSourceConfig,
        filter: &QueueFilter,
    ) -> Result<PollOutput, SourceError> {
        let client = HttpClient::lazily(&mut self.client, config)?;
        let creds = credentials::resolve(config)?;
        let nodes: Vec<&str> = if config.urls.is_empty() {
            vec![config.url.as_str()]
        } else {
            config.urls.iter().map(String::as_str).collect()
        };
        let urls = nodes
            .iter()
            .map(|n| endpoint(n, config))
            .collect::<Result<Vec<_>, _>>()?;
        let now = SystemTime::now();
        let scrapes = join_all(urls.iter().map(|u| scrape(&client, u, creds.as_ref(), now))).await;

        let mut merged: HashMap<(String, String), QueueSample> = HashMap::new();
        let mut out = PollOutput::default();
        for scrape in scrapes {
            let node = scrape?;
            if node.skipped_lines > 0 {
                tracing::debug!(
                    source = %config.name,
                    lines = node.skipped_lines,
                    "skipped invalid lines (queue names with quotes or backslashes?)"
                );
                out.partial_errors.push(Reason::Malformed);
            }
            for (key, q) in node.queues {
                if !filter.keeps(&key.0, &key.1) {
                    continue;
                }
                match merged.get_mut(&key) {
                    Some(existing) => merge(existing, q),
                    None => {
                        merged.insert(key, q);
                    }
                }
            }
        }
        let mut queues: Vec<QueueSample> = merged.into_values().collect();
        queues.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        out.stats = sample::stats(&queues, &config.vhosts);
        out.queues = queues;
        Ok(out)
    }
}

/// `{node}/metrics/detailed?family=…&vhost=…`. A node URL that already ends
/// in `/metrics` or `/metrics/detailed` is accepted too.
fn endpoint(node: &str, config: &RabbitSourceConfig) -> Result<reqwest::Url, SourceError> {
    let base = client::base_url(node)?;
    let path = base.path().trim_end_matches('/').to_string();
    let mut url = if path.ends_with("/metrics/detailed") {
        base
    } else if path.ends_with("/metrics") {
        client::join(&base, &["detailed"])
    } else {
        client::join(&base, &["metrics", "detailed"])
    };
    {
        let mut q = url.query_pairs_mut();
        let families = match config.stats {
            RabbitStats::Full => FULL_FAMILIES,
            RabbitStats::Totals => TOTALS_FAMILIES,
        };
        for f in families {
            q.append_pair("family", f);
        }
        for v in &config.vhosts {
            q.append_pair("vhost", v);
        }
    }
    Ok(url)
}

/// What one node reported.
#[derive(Debug, Default)]
struct NodeScrape {
    /// Queues by (vhost, name).
    queues: HashMap<(String, String), QueueSample>,
    /// Lines that did not parse and were skipped.
    skipped_lines: usize,
}

async fn scrape(
    client: &HttpClient,
    url: &reqwest::Url,
    creds: Option<&Credentials>,
    now: SystemTime,
) -> Result<NodeScrape, SourceError> {
    let body = client
        .get(url, creds)
        .await
        .map_err(|e| e.into_source_error(url))?;
    let text = std::str::from_utf8(&body).map_err(|_| {
        SourceError::Malformed(format!("{}: not UTF-8 text", client::display_url(url)))
    })?;
    parse(text, now)
        .map_err(|why| SourceError::Malformed(format!("{}: {why}", client::display_url(url))))
}

/// One parsed sample: metric name, labels, value.
type Line = (String, Vec<(String, String)>, f64);

/// Metric names read from a scrape, after [`PREFIX`]; the rest is dropped
/// before parsing (`queue_metrics` alone has 18 families).
const READ: &[&str] = &[
    "messages",
    "messages_ready",
    "messages_unacked",
    "consumers",
    "consumer_utilisation",
    "head_message_timestamp",
    "messages_delivered_total",
    "messages_delivered_ack_total",
    "get_total",
    "get_ack_total",
    "messages_acked_total",
    "messages_redelivered_total",
    "exchange_messages_published_total",
];

/// Metrics every `rabbitmq_prometheus` scrape has, checked so that another
/// exporter's text is not taken for a RabbitMQ node without queues.
const IDENTITY: &[&str] = &["rabbitmq_identity_info", "rabbitmq_build_info"];

fn is_read(name: &str) -> bool {
    name.strip_prefix(PREFIX).is_some_and(|m| READ.contains(&m)) || IDENTITY.contains(&name)
}

/// Keeps only the lines of the families in [`READ`] (with their `# HELP` and
/// `# TYPE` lines), so the parser handles a fraction of a large scrape. Lines
/// are picked by the metric name that starts them; the parser does the rest.
fn select(text: &str) -> String {
    let mut kept = String::with_capacity(text.len() / 3);
    for line in text.lines() {
        let name = match line.strip_prefix('#') {
            Some(comment) => comment.split_whitespace().nth(1),
            None => line.split(['{', ' ', '\t']).next(),
        };
        if name.is_some_and(is_read) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// Parses one node's text into queues.
fn parse(text: &str, now: SystemTime) -> Result<NodeScrape, String> {
    let text = select(text);
    let (lines, skipped) = match prom_text_format_parser::Scrape::parse(&text) {
        Ok(scrape) => (flatten(scrape), 0),
        Err(_) => parse_line_by_line(&text),
    };
    if !lines
        .iter()
        .any(|(name, _, _)| IDENTITY.contains(&name.as_str()))
    {
        return Err("no rabbitmq_identity_info: not the rabbitmq_prometheus plugin's text".into());
    }
    let mut node = NodeScrape {
        skipped_lines: skipped,
        ..NodeScrape::default()
    };
    let mut heads: HashMap<(String, String), f64> = HashMap::new();
    for (name, labels, value) in lines {
        let Some(field) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let label = |k: &str| {
            labels
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let (Some(vhost), Some(queue)) = (label("vhost"), label("queue")) else {
            continue;
        };
        let key = (vhost, queue);
        if field == "head_message_timestamp" {
            heads.insert(key.clone(), value);
        }
        let q = node.queues.entry(key).or_insert_with_key(|(v, n)| {
            let mut q = QueueSample::named(n.clone());
            q.vhost = Some(v.clone());
            q
        });
        apply(q, field, value);
    }
    for (key, ts) in heads {
        if let Some(q) = node.queues.get_mut(&key) {
            let head = if ts.is_nan() {
                HeadTimestamp::NoValue
            } else {
                HeadTimestamp::Seconds(ts)
            };
            q.oldest_age_seconds = sample::oldest_age(head, q.ready, now);
        }
    }
    Ok(node)
}

/// Sets the field `metric` (the name after [`PREFIX`]) of `q`.
fn apply(q: &mut QueueSample, metric: &str, value: f64) {
    let count = sample::count_from_f64(value);
    let add = |slot: &mut Option<u64>| {
        if let Some(v) = count {
            *slot = Some(slot.unwrap_or(0) + v);
        }
    };
    match metric {
        "messages" => q.depth = count,
        "messages_ready" => q.ready = count,
        "messages_unacked" => q.unacked = count,
        "consumers" => q.consumers = count,
        "consumer_utilisation" => q.consumer_utilisation = value.is_finite().then_some(value),
        // deliver_get = deliveries and basic.gets, in both ack modes.
        "messages_delivered_total"
        | "messages_delivered_ack_total"
        | "get_total"
        | "get_ack_total" => add(&mut q.counters.delivered),
        "messages_acked_total" => add(&mut q.counters.acknowledged),
        "messages_redelivered_total" => add(&mut q.counters.redelivered),
        // One series per (queue, exchange): the queue's total is their sum.
        "exchange_messages_published_total" => add(&mut q.counters.published),
        _ => {}
    }
}

/// Combines what two nodes said about one queue (normally only one does):
/// a figure known on either side is kept.
fn merge(into: &mut QueueSample, other: QueueSample) {
    fn pick<T>(a: &mut Option<T>, b: Option<T>) {
        if a.is_none() {
            *a = b;
        }
    }
    pick(&mut into.depth, other.depth);
    pick(&mut into.ready, other.ready);
    pick(&mut into.unacked, other.unacked);
    pick(&mut into.consumers, other.consumers);
    pick(&mut into.consumer_utilisation, other.consumer_utilisation);
    pick(&mut into.oldest_age_seconds, other.oldest_age_seconds);
    pick(&mut into.counters.published, other.counters.published);
    pick(&mut into.counters.delivered, other.counters.delivered);
    pick(&mut into.counters.acknowledged, other.counters.acknowledged);
    pick(&mut into.counters.redelivered, other.counters.redelivered);
}

fn flatten(scrape: prom_text_format_parser::Scrape) -> Vec<Line> {
    let mut lines = Vec::new();
    for metric in scrape.metrics {
        for s in metric.samples {
            let Ok(value) = s.value.value.parse::<f64>() else {
                continue;
            };
            let labels = s
                .labels
                .iter()
                .map(|l| (l.key.clone(), unescape(&l.value)))
                .collect();
            lines.push((metric.name.clone(), labels, value));
        }
    }
    lines
}

/// The slow path for text that does not parse as a whole: each sample line
/// is parsed on its own, so one bad line costs one line. Returns the samples
/// and the number of lines skipped.
fn parse_line_by_line(text: &str) -> (Vec<Line>, usize) {
    let mut lines = Vec::new();
    let mut skipped = 0;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match prom_text_format_parser::Scrape::parse(&format!("{line}\n")) {
            Ok(scrape) => lines.extend(flatten(scrape)),
            Err(_) => skipped += 1,
        }
    }
    (lines, skipped)
}

/// Resolves the text format's label value escapes (`\\`, `\"`, `\n`); the
/// parser checks them but leaves them in place.
fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE rabbitmq_detailed_queue_messages_ready gauge
# HELP rabbitmq_detailed_queue_messages_ready Messages ready to be delivered to consumers
rabbitmq_detailed_queue_messages_ready{vhost="/",queue="a,b=c"} 5
rabbitmq_detailed_queue_messages_ready{vhost="v w/x",queue="q"} 0
# TYPE rabbitmq_detailed_queue_messages_unacked gauge
rabbitmq_detailed_queue_messages_unacked{vhost="/",queue="a,b=c"} 2
# TYPE rabbitmq_detailed_queue_messages gauge
rabbitmq_detailed_queue_messages{vhost="/",queue="a,b=c"} 7
# TYPE rabbitmq_detailed_queue_head_message_timestamp gauge
rabbitmq_detailed_queue_head_message_timestamp{vhost="/",queue="a,b=c"} 900
rabbitmq_detailed_queue_head_message_timestamp{vhost="v w/x",queue="q"} NaN
# TYPE rabbitmq_detailed_queue_exchange_messages_published_total counter
rabbitmq_detailed_queue_exchange_messages_published_total{vhost="/",exchange="",queue="a,b=c"} 3
rabbitmq_detailed_queue_exchange_messages_published_total{vhost="/",exchange="x",queue="a,b=c"} 4
# TYPE rabbitmq_identity_info untyped
rabbitmq_identity_info{rabbitmq_node="rabbit@localhost"} 1
"#;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000)
    }

    #[test]
    fn parses_merges_and_sums() {
        let node = parse(TEXT, now()).unwrap();
        assert_eq!(node.skipped_lines, 0);
        let q = &node.queues[&("/".to_string(), "a,b=c".to_string())];
        assert_eq!((q.depth, q.ready, q.unacked), (Some(7), Some(5), Some(2)));
        assert_eq!(q.counters.published, Some(7));
        assert_eq!(q.counters.delivered, None);
        assert_eq!(q.oldest_age_seconds, Some(100.0));
        assert_eq!(q.consumers, None);
        let q = &node.queues[&("v w/x".to_string(), "q".to_string())];
        assert_eq!(q.oldest_age_seconds, Some(0.0));
        assert_eq!(q.depth, None);
    }

    #[test]
    fn unescaped_quotes_cost_only_their_lines() {
        let broken = TEXT.replace(
            "# TYPE rabbitmq_identity_info",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"quo\"te\"} 1\nrabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"back\\slash\"} 1\n# TYPE rabbitmq_identity_info",
        );
        let node = parse(&broken, now()).unwrap();
        assert_eq!(node.skipped_lines, 2);
        assert_eq!(node.queues.len(), 2);
    }

    #[test]
    fn escapes_are_resolved() {
        let text = "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"a\\\"b\\\\c\"} 1\n\
                    rabbitmq_identity_info{rabbitmq_node=\"n\"} 1\n";
        let node = parse(text, now()).unwrap();
        assert!(
            node.queues
                .contains_key(&("/".to_string(), "a\"b\\c".to_string()))
        );
    }

    #[test]
    fn garbage_and_foreign_text_are_errors() {
        assert!(parse("<html><body>hello</body></html>", now()).is_err());
        assert!(parse("node_load1 0.5\n", now()).is_err());
        assert!(parse("", now()).is_err());
    }

    #[test]
    fn endpoints() {
        let c = |url: &str| {
            let yaml = format!("name: r\nmethod: prometheus\nurl: {url}\nvhosts: [\"/\"]\n");
            let v: serde_json::Value = serde_norway::from_str(&yaml).unwrap();
            let cfg: RabbitSourceConfig = serde_json::from_value(v).unwrap();
            endpoint(&cfg.url, &cfg).unwrap().to_string()
        };
        let want = "http://h:15692/metrics/detailed?family=queue_coarse_metrics&family=queue_metrics\
&family=queue_delivery_metrics&family=queue_exchange_metrics&vhost=%2F";
        assert_eq!(c("http://h:15692"), want);
        assert_eq!(c("http://h:15692/metrics"), want);
        assert_eq!(c("http://h:15692/metrics/detailed"), want);
    }
}
