//! Method `prometheus`: scrapes the `rabbitmq_prometheus` plugin's
//! `/metrics/detailed` endpoint on every node and merges by (vhost, queue),
//! since each node reports only the queues it leads. Works with management
//! stats disabled, and is the cheapest method.
//!
//! The text is parsed by a small line parser of our own ([`Parser`]), fed
//! chunk by chunk while the body arrives. It replaced `prom_text_format_parser`
//! for speed (issue 11, 2,000 queues): on the recorded 3.8 MB `stats: full`
//! text the general parser (after a pre-filter that kept only the lines read)
//! took 12-14 ms, its samples a `String` per name and label, and it could only
//! start once the whole body was in; this parser takes about 3.5 ms over the
//! whole text (1.5 ms for the 0.8 MB `stats: totals` one), allocates only per
//! new queue, and works during the transfer. RabbitMQ builds the whole text
//! before it sends any (curl: first byte ≈ last byte), so the parse mostly
//! adds to the fetch; measured in a running exporter at 2,000 queues, it
//! costs 3.2 ms of a 3.3 MB `full` body (5.0 ms before lines were matched to
//! the previous line's name and queue) and 1.8 ms of a 0.7 MB `totals` one
//! (2.2 ms), against 40-60 ms and 17-20 ms for RabbitMQ to answer. Finding
//! lines with `memchr`, skipping blanks by byte, trying the previous line's
//! queue again and a pre-sized foldhash index then took a 3.4 MB `full` text
//! from 2.5 to 1.6 ms (parsed in a loop), and the exporter's CPU per poll
//! from about 9.8 to 6.5 ms (`perf`, 2,000 queues).
//! Since the plugin builds its whole text before sending it (first byte ≈
//! last byte), every millisecond of the parse lands after the transfer and
//! on the poll: a read line is now first compared, as text, with the labels
//! of the queue it most likely names ([`Parser::predicted`]), and the
//! queues are put in order with the permutation that sorted the last poll
//! ([`sample::sort_remembering`]), since the plugin lists them in the same
//! order each time (issue 45).
//! RabbitMQ 3.x does not escape `"` or `\` in label values, which
//! makes lines of such queues invalid; they are skipped and counted
//! (`reason="malformed"`).

use crate::snapshot::Reason;
use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::SystemTime;

use futures_util::future::join_all;

use super::client::{self, BodySink, HttpClient};
use super::credentials::{self, Credentials};
use super::filter::QueueFilter;
use super::sample::{self, HeadTimestamp};
use crate::config::{RabbitSourceConfig, RabbitStats};
use crate::snapshot::Coverage;
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

/// The index's hasher: foldhash (randomly seeded per process) hashes a
/// queue name several times faster than std's SipHash, which was a tenth
/// of the parse at 2,000 queues.
type QuickHash = foldhash::fast::RandomState;

/// Prefix of every per-queue detailed metric.
const PREFIX: &str = "rabbitmq_detailed_queue_";

/// State of the prometheus method between polls.
#[derive(Debug, Default)]
pub struct Prometheus {
    /// Built on first use (reads the CA file).
    client: Option<HttpClient>,
    /// How many queues each node reported last time: the next parse sizes
    /// its lists for them instead of growing them by doubling.
    last_counts: Vec<usize>,
    /// The permutation that sorted the last poll's queues: the plugin
    /// lists them in the same order poll after poll, so it is tried first
    /// ([`sample::sort_remembering`]).
    order: Vec<usize>,
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
        let scrapes = join_all(urls.iter().enumerate().map(|(i, u)| {
            let expected = self.last_counts.get(i).copied().unwrap_or(0);
            scrape(&client, u, creds.as_ref(), filter, now, expected)
        }))
        .await;
        self.last_counts = scrapes
            .iter()
            .map(|s| s.as_ref().map_or(0, |node| node.queues.len()))
            .collect();

        // The plugin reports the queues of every vhost (or of those asked
        // for) whoever asks: no vhost is hidden from this method (access.rs).
        let mut out = PollOutput::new(Coverage::complete());
        let mut nodes = Vec::with_capacity(scrapes.len());
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
            nodes.push(node.queues);
        }
        let mut queues = merge_nodes(nodes);
        sample::sort_remembering(&mut queues, &mut self.order);
        out.stats = sample::stats(&queues, &config.vhosts);
        out.queues = queues;
        Ok(out)
    }
}

/// The queues of every node as one list. A queue is normally reported by the
/// one node that leads it; one that several nodes report is merged, the
/// earlier node (in `urls` order) winning field by field.
fn merge_nodes(nodes: Vec<Vec<QueueSample>>) -> Vec<QueueSample> {
    let mut nodes = nodes.into_iter();
    let mut queues = nodes.next().unwrap_or_default();
    let rest: Vec<Vec<QueueSample>> = nodes.collect();
    if rest.iter().all(Vec::is_empty) {
        return queues;
    }
    let mut at: HashMap<(Option<String>, String), usize> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| ((q.vhost().map(str::to_string), q.name.clone()), i))
        .collect();
    for q in rest.into_iter().flatten() {
        match at.entry((q.vhost().map(str::to_string), q.name.clone())) {
            Entry::Occupied(e) => merge(&mut queues[*e.get()], q),
            Entry::Vacant(e) => {
                e.insert(queues.len());
                queues.push(q);
            }
        }
    }
    queues
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
    /// Queues the filter keeps, in the order the node first named them.
    queues: Vec<QueueSample>,
    /// Lines that did not parse and were skipped.
    skipped_lines: usize,
}

/// Fetches one node's text and parses it chunk by chunk as it arrives.
async fn scrape(
    client: &HttpClient,
    url: &reqwest::Url,
    creds: Option<&Credentials>,
    filter: &QueueFilter,
    now: SystemTime,
    expected_queues: usize,
) -> Result<NodeScrape, SourceError> {
    let mut sink = ParserSink {
        parser: Parser::with_capacity(filter, expected_queues),
        url,
    };
    client
        .get_each(url, creds, &mut sink)
        .await
        .map_err(|e| e.into_source_error(url))?;
    sink.parser.finish(now).map_err(|why| malformed(url, why))
}

/// The error for a text that cannot be read.
fn malformed(url: &reqwest::Url, why: &str) -> SourceError {
    SourceError::Malformed(format!("{}: {why}", client::display_url(url)))
}

/// Feeds a body to a [`Parser`] as it arrives.
struct ParserSink<'a> {
    /// The parser.
    parser: Parser<'a>,
    /// For errors.
    url: &'a reqwest::Url,
}

impl BodySink for ParserSink<'_> {
    fn chunk(&mut self, chunk: &[u8]) -> Result<(), SourceError> {
        self.parser
            .feed(chunk)
            .map_err(|why| malformed(self.url, why))
    }
}

/// What a sample line of a read metric sets. Everything else in a scrape
/// (`queue_metrics` alone has 18 families) is skipped on its name.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    /// `messages`: ready + unacked.
    Depth,
    /// `messages_ready`.
    Ready,
    /// `messages_unacked`.
    Unacked,
    /// `consumers`.
    Consumers,
    /// `consumer_utilisation`.
    Utilisation,
    /// `head_message_timestamp`.
    Head,
    /// deliver_get = deliveries and basic.gets, in both ack modes.
    Delivered,
    /// `messages_acked_total`.
    Acked,
    /// `messages_redelivered_total`.
    Redelivered,
    /// One series per (queue, exchange): the queue's total is their sum.
    Published,
    /// `rabbitmq_identity_info` or `rabbitmq_build_info`: every
    /// `rabbitmq_prometheus` scrape has them, so that another exporter's
    /// text is not taken for a RabbitMQ node without queues.
    Identity,
}

/// The field a metric name sets, if it is one of those read.
fn field(name: &str) -> Option<Field> {
    let Some(metric) = name.strip_prefix(PREFIX) else {
        return matches!(name, "rabbitmq_identity_info" | "rabbitmq_build_info")
            .then_some(Field::Identity);
    };
    Some(match metric {
        "messages" => Field::Depth,
        "messages_ready" => Field::Ready,
        "messages_unacked" => Field::Unacked,
        "consumers" => Field::Consumers,
        "consumer_utilisation" => Field::Utilisation,
        "head_message_timestamp" => Field::Head,
        "messages_delivered_total"
        | "messages_delivered_ack_total"
        | "get_total"
        | "get_ack_total" => Field::Delivered,
        "messages_acked_total" => Field::Acked,
        "messages_redelivered_total" => Field::Redelivered,
        "exchange_messages_published_total" => Field::Published,
        _ => return None,
    })
}

/// A streaming parser of one node's text: it is fed the body's chunks as
/// they arrive and keeps only the queues' figures.
///
/// Hand-written for speed (the module comment has the measurements): it
/// looks at each line's metric name first and skips the families it does
/// not read without looking further (with 2,000 queues, 44,000 lines of
/// which 12,000 are read); a read line costs no allocation unless it names a
/// new queue or a label value has escapes. Since it parses each chunk while
/// the next is on its way, the poll ends about when the transfer does.
///
/// What it accepts, per line: the text format's sample lines (`name`,
/// optional `{label="value",…}` with `\\`, `\"` and `\n` escapes and an
/// optional trailing comma, a value that may be `NaN`, `+Inf` or `-Inf`,
/// an optional timestamp, and an OpenMetrics exemplar after ` # `, which is
/// ignored), comments including `# HELP` and `# TYPE` (skipped), and blank
/// lines. A sample line of a read metric that is not valid (RabbitMQ 3.x
/// does not escape `"` or `\` in label values) is skipped and counted.
struct Parser<'f> {
    /// Which queues are kept; asked once per queue, not per line.
    filter: &'f QueueFilter,
    /// The end of the last chunk, after its last newline.
    partial: Vec<u8>,
    /// Queue index (into `queues`) by (vhost, name); `None` for a queue the
    /// filter drops. Only a queue's first line (and lines out of the usual
    /// order) look here; see [`Parser::queue`]. Sized for the queues of the
    /// last poll, so it does not grow by rehashing.
    index: HashMap<(String, String), Option<usize>, QuickHash>,
    /// Queues kept, in the order first seen.
    queues: Vec<QueueSample>,
    /// The head message's timestamp per queue in `queues`, applied at the
    /// end (it needs `ready`, which may come later in the text).
    heads: Vec<Option<f64>>,
    /// Per queue in `queues`: whether its vhost and name need no escaping in
    /// a label value, so that its lines can be recognised as text
    /// ([`Parser::predicted`]).
    plain: Vec<bool>,
    /// Invalid sample lines of read metrics.
    skipped_lines: usize,
    /// Whether a valid identity sample was seen.
    identity: bool,
    /// The position in `queues` of the last line's queue. Every family
    /// lists the queues in the same order, so the next line's queue is
    /// usually the one after it: checked by comparing names, before any
    /// hashing (the lookup was most of a read line's cost).
    last: Option<usize>,
    /// The last sample line's metric name and what it is read as: lines
    /// of a family come together, so a line that starts with the same name
    /// needs no byte-by-byte name scan (most lines are skipped on the name).
    family: (String, Option<Field>),
}

impl<'f> Parser<'f> {
    #[cfg(test)]
    fn new(filter: &'f QueueFilter) -> Self {
        Self::with_capacity(filter, 0)
    }

    /// A parser with room for `queues` queues.
    fn with_capacity(filter: &'f QueueFilter, queues: usize) -> Self {
        Parser {
            filter,
            partial: Vec::new(),
            index: HashMap::with_capacity_and_hasher(queues, QuickHash::default()),
            queues: Vec::with_capacity(queues),
            heads: Vec::with_capacity(queues),
            plain: Vec::with_capacity(queues),
            skipped_lines: 0,
            identity: false,
            last: None,
            family: (String::new(), None),
        }
    }

    /// Parses the complete lines of `chunk` (with the rest of the previous
    /// chunk's last line); keeps its unfinished last line for the next.
    fn feed(&mut self, chunk: &[u8]) -> Result<(), &'static str> {
        let Some(last_newline) = memchr::memrchr(b'\n', chunk) else {
            self.partial.extend_from_slice(chunk);
            return Ok(());
        };
        let (complete, rest) = chunk.split_at(last_newline + 1);
        let mut complete = complete;
        if !self.partial.is_empty() {
            // The line that straddles the two chunks.
            let first_end = memchr::memchr(b'\n', complete).unwrap_or(0);
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(&complete[..first_end]);
            self.text(&line)?;
            // Its buffer serves the next straddling line.
            line.clear();
            self.partial = line;
            complete = &complete[first_end + 1..];
        }
        self.text(complete)?;
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    /// Parses whole lines; the text must be UTF-8, like the whole body.
    /// Lines are found with the `memchr` crate's vectorised search: `str::split`
    /// found them a byte word at a time and compared each match through
    /// `memcmp`, which was a third of the parse (perf, 2,000 queues).
    fn text(&mut self, bytes: &[u8]) -> Result<(), &'static str> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text")?;
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', bytes) {
            // Slicing at an ASCII byte is a char boundary.
            self.line(&text[start..end]);
            start = end + 1;
        }
        self.line(&text[start..]);
        Ok(())
    }

    /// One line.
    fn line(&mut self, line: &str) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = skip_blanks(line);
        if line.is_empty() || line.starts_with('#') {
            return;
        }
        let (known, known_field) = &self.family;
        let (name_end, field) = if !known.is_empty()
            && line.starts_with(known.as_str())
            && matches!(
                line.as_bytes().get(known.len()),
                None | Some(b'{' | b' ' | b'\t')
            ) {
            (known.len(), *known_field)
        } else {
            let name_end = line
                .bytes()
                .position(|b| !is_name_byte(b))
                .unwrap_or(line.len());
            // A name not followed by labels or a blank is another metric's
            // (or garbage), not one of ours with a bad line.
            if !matches!(
                line.as_bytes().get(name_end),
                None | Some(b'{' | b' ' | b'\t')
            ) {
                return;
            }
            let found = field(&line[..name_end]);
            self.family.0.clear();
            self.family.0.push_str(&line[..name_end]);
            self.family.1 = found;
            (name_end, found)
        };
        let Some(field) = field else {
            return;
        };
        if field != Field::Identity
            && let Some((at, value)) = self.predicted(&line[name_end..])
        {
            self.last = Some(at);
            self.set(at, field, value);
            return;
        }
        let Some(sample) = parse_sample(&line[name_end..]) else {
            self.skipped_lines += 1;
            return;
        };
        if field == Field::Identity {
            self.identity = true;
            return;
        }
        let (Some(vhost), Some(queue)) = (sample.vhost, sample.queue) else {
            return;
        };
        let Some(at) = self.queue(vhost, queue) else {
            return;
        };
        self.set(at, field, sample.value);
    }

    /// A line of the queue [`Parser::queue`] would try first, recognised
    /// as text: RabbitMQ writes every per-queue line as
    /// `{vhost="…",queue="…"} value`, so comparing the labels with the
    /// expected queue's vhost and name (two `memcmp`s) replaces reading them
    /// byte by byte, the largest part of a read line's cost. Only for
    /// queues whose names need no escaping, where the text is the name
    /// itself; anything else (other labels, another queue, a bad value)
    /// goes through [`parse_sample`] and [`Parser::queue`], with the same
    /// outcome as before. Returns the queue's position and the value.
    fn predicted(&self, rest: &str) -> Option<(usize, f64)> {
        let (next, same) = self.last.map_or((0, 0), |at| (at + 1, at));
        for at in [next, same, 0] {
            if !self.plain.get(at).copied().unwrap_or(false) {
                continue;
            }
            let q = &self.queues[at];
            let Some(after) = rest
                .strip_prefix("{vhost=\"")
                .and_then(|s| s.strip_prefix(q.vhost().unwrap_or_default()))
                .and_then(|s| s.strip_prefix("\",queue=\""))
                .and_then(|s| s.strip_prefix(q.name.as_str()))
                .and_then(|s| s.strip_prefix("\"}"))
            else {
                continue;
            };
            return parse_value(after).map(|value| (at, value));
        }
        None
    }

    /// Sets what a line of `field` says of the queue at `at`.
    fn set(&mut self, at: usize, field: Field, value: f64) {
        let q = &mut self.queues[at];
        let count = sample::count_from_f64(value);
        let add = |slot: &mut Option<u64>| {
            if let Some(v) = count {
                *slot = Some(slot.unwrap_or(0).saturating_add(v));
            }
        };
        match field {
            Field::Depth => q.depth = count,
            Field::Ready => q.ready = count,
            Field::Unacked => q.broker_mut().unacked = count,
            Field::Consumers => q.broker_mut().consumers = count,
            Field::Utilisation => {
                q.broker_mut().consumer_utilisation = value.is_finite().then_some(value)
            }
            Field::Head => self.heads[at] = Some(value),
            Field::Delivered => add(&mut q.counters_mut().delivered),
            Field::Acked => add(&mut q.counters_mut().acknowledged),
            Field::Redelivered => add(&mut q.counters_mut().redelivered),
            Field::Published => add(&mut q.counters_mut().published),
            Field::Identity => {}
        }
    }

    /// The index of the queue (vhost, name), added on first sight; `None`
    /// when the filter drops it.
    fn queue(&mut self, vhost: Cow<'_, str>, name: Cow<'_, str>) -> Option<usize> {
        // The next queue (a family's next line), the same one (a queue's
        // lines per exchange), or the first (the next family's first line).
        let (next, same) = self.last.map_or((0, 0), |at| (at + 1, at));
        for at in [next, same, 0] {
            if let Some(q) = self.queues.get(at)
                && q.name == name
                && q.vhost() == Some(vhost.as_ref())
            {
                self.last = Some(at);
                return Some(at);
            }
        }
        let at = self.lookup(vhost, name);
        if at.is_some() {
            self.last = at;
        }
        at
    }

    /// [`Parser::queue`] by the index.
    fn lookup(&mut self, vhost: Cow<'_, str>, name: Cow<'_, str>) -> Option<usize> {
        // One hash per queue: most lookups are a queue's first line, which
        // inserts it.
        match self.index.entry((vhost.into_owned(), name.into_owned())) {
            Entry::Occupied(found) => *found.get(),
            Entry::Vacant(slot) => {
                let (vhost, name) = slot.key();
                let at = self.filter.keeps(vhost, name).then(|| {
                    let mut q = QueueSample::named(name.as_str());
                    q.broker_mut().vhost = vhost.clone();
                    self.plain.push(is_plain(vhost) && is_plain(name));
                    self.queues.push(q);
                    self.heads.push(None);
                    self.queues.len() - 1
                });
                slot.insert(at);
                at
            }
        }
    }

    /// The queues, after the last chunk: the oldest message's age is worked
    /// out now that `ready` is known.
    fn finish(mut self, now: SystemTime) -> Result<NodeScrape, &'static str> {
        if !self.partial.is_empty() {
            // A text without a final newline.
            let line = std::mem::take(&mut self.partial);
            self.text(&line)?;
        }
        if !self.identity {
            return Err("no rabbitmq_identity_info: not the rabbitmq_prometheus plugin's text");
        }
        for (q, head) in self.queues.iter_mut().zip(self.heads) {
            if let Some(ts) = head {
                let head = if ts.is_nan() {
                    HeadTimestamp::NoValue
                } else {
                    HeadTimestamp::Seconds(ts)
                };
                q.oldest_age_seconds = sample::oldest_age(head, q.ready, now);
            }
        }
        Ok(NodeScrape {
            queues: self.queues,
            skipped_lines: self.skipped_lines,
        })
    }
}

/// What a sample line says, as far as it is read.
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    /// The `vhost` label, unescaped.
    vhost: Option<Cow<'a, str>>,
    /// The `queue` label, unescaped.
    queue: Option<Cow<'a, str>>,
    /// The value.
    value: f64,
}

/// A byte of a metric or label name (`[a-zA-Z0-9_:]`; the first may not be
/// a digit, which the caller's position ensures for metric names).
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

/// Parses what follows a sample line's metric name: labels, value, and an
/// optional timestamp and exemplar. `None` if the line is not valid.
fn parse_sample(rest: &str) -> Option<Sample<'_>> {
    let mut sample = Sample {
        vhost: None,
        queue: None,
        value: 0.0,
    };
    let mut rest = skip_blanks(rest);
    if let Some(labels) = rest.strip_prefix('{') {
        rest = parse_labels(labels, &mut sample)?;
    }
    sample.value = parse_value(rest)?;
    Some(sample)
}

/// What follows a sample line's labels: the value, then optionally a
/// timestamp (milliseconds in the text format, seconds in OpenMetrics)
/// and an exemplar after `#`, neither of which is used.
fn parse_value(rest: &str) -> Option<f64> {
    let (value, rest) = token(rest)?;
    let value = parse_float(value)?;
    let rest = skip_blanks(rest);
    if rest.is_empty() || rest.starts_with('#') {
        return Some(value);
    }
    let (timestamp, rest) = token(rest)?;
    parse_float(timestamp).filter(|t| t.is_finite())?;
    let rest = skip_blanks(rest);
    (rest.is_empty() || rest.starts_with('#')).then_some(value)
}

/// Whether a vhost or queue name is written as it is in a label value
/// (it holds none of the `\`, `"` and newline the format escapes).
fn is_plain(name: &str) -> bool {
    memchr::memchr3(b'\\', b'"', b'\n', name.as_bytes()).is_none()
}

/// The next whitespace-delimited word (after any whitespace) and what follows it.
fn token(s: &str) -> Option<(&str, &str)> {
    let s = skip_blanks(s);
    let end = s
        .bytes()
        .position(|b| b == b' ' || b == b'\t')
        .unwrap_or(s.len());
    (end > 0).then(|| s.split_at(end))
}

/// `s` without its leading blanks (spaces and tabs), a byte at a time:
/// `trim_start_matches([' ', '\t'])` decodes chars, a visible cost on the
/// parse's every line and label.
fn skip_blanks(s: &str) -> &str {
    let n = s
        .bytes()
        .position(|b| b != b' ' && b != b'\t')
        .unwrap_or(s.len());
    // The skipped bytes are ASCII, so `n` is a char boundary.
    &s[n..]
}

/// A sample value: a decimal number, or `NaN`, `+Inf`, `-Inf` (any case,
/// as Prometheus reads them).
fn parse_float(s: &str) -> Option<f64> {
    // Rust also takes `infinity`, as Go's ParseFloat (Prometheus's) does.
    s.parse::<f64>().ok()
}

/// Parses `name="value",…}` (after the `{`), keeping `vhost` and `queue`;
/// returns what follows the `}`.
fn parse_labels<'a>(mut s: &'a str, sample: &mut Sample<'a>) -> Option<&'a str> {
    loop {
        s = skip_blanks(s);
        if let Some(after) = s.strip_prefix('}') {
            return Some(after);
        }
        let name_end = s.bytes().position(|b| !is_name_byte(b)).unwrap_or(s.len());
        if name_end == 0 || s.as_bytes()[0].is_ascii_digit() {
            return None;
        }
        let name = &s[..name_end];
        s = skip_blanks(&s[name_end..]);
        s = skip_blanks(s.strip_prefix('=')?);
        s = s.strip_prefix('"')?;
        let (value, after) = label_value(s)?;
        match name {
            "vhost" if sample.vhost.is_none() => sample.vhost = Some(value),
            "queue" if sample.queue.is_none() => sample.queue = Some(value),
            _ => {}
        }
        s = skip_blanks(after);
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            // An unescaped `"` inside a value ends up here.
            return None;
        }
    }
}

/// A label value after its opening `"`: the value, unescaped, and what
/// follows the closing `"`. Only `\\`, `\"` and `\n` are valid escapes.
fn label_value(s: &str) -> Option<(Cow<'_, str>, &str)> {
    let bytes = s.as_bytes();
    let mut end = 0;
    let mut escaped = false;
    loop {
        match bytes.get(end)? {
            b'"' => break,
            b'\\' => {
                if !matches!(bytes.get(end + 1)?, b'\\' | b'"' | b'n') {
                    return None;
                }
                escaped = true;
                end += 2;
            }
            b'\n' => return None,
            _ => end += 1,
        }
    }
    let raw = &s[..end];
    let rest = &s[end + 1..];
    if !escaped {
        return Some((Cow::Borrowed(raw), rest));
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(match chars.next()? {
                'n' => '\n',
                other => other,
            });
        } else {
            out.push(c);
        }
    }
    Some((Cow::Owned(out), rest))
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
    let theirs = other.broker();
    let ours = into.broker_mut();
    pick(&mut ours.unacked, theirs.unacked);
    pick(&mut ours.consumers, theirs.consumers);
    pick(&mut ours.consumer_utilisation, theirs.consumer_utilisation);
    pick(&mut into.oldest_age_seconds, other.oldest_age_seconds);
    let (mut counters, theirs) = (into.counters(), other.counters());
    pick(&mut counters.published, theirs.published);
    pick(&mut counters.delivered, theirs.delivered);
    pick(&mut counters.acknowledged, theirs.acknowledged);
    pick(&mut counters.redelivered, theirs.redelivered);
    into.set_counters(counters);
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

    /// Parses `text` fed in chunks of `chunk` bytes, keeping every queue.
    fn parse_in(text: &[u8], chunk: usize) -> Result<NodeScrape, &'static str> {
        let keep_all = QueueFilter::default();
        let mut parser = Parser::new(&keep_all);
        for c in text.chunks(chunk.max(1)) {
            parser.feed(c)?;
        }
        parser.finish(now())
    }

    fn parse(text: &str) -> Result<NodeScrape, &'static str> {
        parse_in(text.as_bytes(), 7)
    }

    fn find<'a>(node: &'a NodeScrape, vhost: &str, name: &str) -> &'a QueueSample {
        node.queues
            .iter()
            .find(|q| q.vhost() == Some(vhost) && q.name == name)
            .unwrap_or_else(|| panic!("no queue {vhost}/{name}"))
    }

    #[test]
    fn parses_merges_and_sums() {
        let node = parse(TEXT).unwrap();
        assert_eq!(node.skipped_lines, 0);
        assert_eq!(node.queues.len(), 2);
        let q = find(&node, "/", "a,b=c");
        assert_eq!(
            (q.depth, q.ready, q.broker().unacked),
            (Some(7), Some(5), Some(2))
        );
        assert_eq!(q.counters().published, Some(7));
        assert_eq!(q.counters().delivered, None);
        assert_eq!(q.oldest_age_seconds, Some(100.0));
        assert_eq!(q.broker().consumers, None);
        let q = find(&node, "v w/x", "q");
        assert_eq!(q.oldest_age_seconds, Some(0.0));
        assert_eq!(q.depth, None);
    }

    #[test]
    fn families_in_any_queue_order_and_names_that_extend_others_read_right() {
        // The shortcuts (the queue after the last one; the last line's
        // name) must never put a value on the wrong queue or field.
        let text = "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"a\"} 1\n\
                    rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"b\"} 2\n\
                    rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"a\"} 3\n\
                    rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"a\"} 30\n\
                    rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"a\"} 10\n\
                    rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"b\"} 20\n\
                    rabbitmq_detailed_queue_messages_readyx{vhost=\"/\",queue=\"b\"} 99\n\
                    rabbitmq_detailed_queue_messages_unacked{vhost=\"/\",queue=\"b\"} 200\n\
                    rabbitmq_detailed_queue_messages_unacked{vhost=\"/\",queue=\"c\"} 300\n\
                    rabbitmq_detailed_queue_messages_unacked{vhost=\"/\",queue=\"a\"} 100\n\
                    rabbitmq_detailed_queue_messages 5\n\
                    rabbitmq_identity_info{rabbitmq_node=\"n\"} 1\n";
        let node = parse(text).unwrap();
        let got = |vhost, name| {
            let q = find(&node, vhost, name);
            (q.depth, q.ready, q.broker().unacked)
        };
        assert_eq!(got("/", "a"), (Some(1), Some(10), Some(100)));
        assert_eq!(got("/", "b"), (Some(2), Some(20), Some(200)));
        assert_eq!(got("v", "a"), (Some(3), Some(30), None));
        assert_eq!(got("/", "c"), (None, None, Some(300)));
        assert_eq!(node.queues.len(), 4);
    }

    #[test]
    fn any_chunking_gives_the_same_queues() {
        let whole = parse_in(TEXT.as_bytes(), TEXT.len()).unwrap().queues;
        for chunk in 1..80 {
            let node = parse_in(TEXT.as_bytes(), chunk).unwrap();
            assert_eq!(node.queues, whole, "chunks of {chunk}");
            assert_eq!(node.skipped_lines, 0);
        }
        // No final newline.
        let node = parse(TEXT.trim_end()).unwrap();
        assert_eq!(node.queues, whole);
    }

    #[test]
    fn unescaped_quotes_cost_only_their_lines() {
        let broken = TEXT.replace(
            "# TYPE rabbitmq_identity_info",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"quo\"te\"} 1\nrabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"back\\slash\"} 1\n# TYPE rabbitmq_identity_info",
        );
        let node = parse(&broken).unwrap();
        assert_eq!(node.skipped_lines, 2);
        assert_eq!(node.queues.len(), 2);
    }

    #[test]
    fn escapes_are_resolved() {
        let text = "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"a\\\"b\\\\c\"} 1\n\
                    rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"multi\\nline\"} 2\n\
                    rabbitmq_identity_info{rabbitmq_node=\"n\"} 1\n";
        let node = parse(text).unwrap();
        assert_eq!(find(&node, "/", "a\"b\\c").depth, Some(1));
        assert_eq!(find(&node, "/", "multi\nline").depth, Some(2));
        // An escape that reaches a label we do not read is checked all the same.
        let bad = "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\",x=\"\\t\"} 1\n\
                   rabbitmq_identity_info 1\n";
        let node = parse(bad).unwrap();
        assert_eq!(node.skipped_lines, 1);
        assert!(node.queues.is_empty());
    }

    /// The text of three families listing six queues of two vhosts in the
    /// given orders; the published family has two exchange lines per queue.
    fn families_in_orders(orders: [&[usize]; 3]) -> String {
        let label = |i: usize| format!("vhost=\"v{}\",queue=\"q{}\"", i % 2, i);
        let mut text = String::from("rabbitmq_identity_info 1\n");
        for &i in orders[0] {
            text += &format!(
                "rabbitmq_detailed_queue_messages_ready{{{}}} {i}\n",
                label(i)
            );
        }
        for &i in orders[1] {
            let l = label(i);
            text += &format!(
                "rabbitmq_detailed_queue_exchange_messages_published_total{{{l},exchange=\"a\"}} {i}\n"
            );
            text += &format!(
                "rabbitmq_detailed_queue_exchange_messages_published_total{{{l},exchange=\"b\"}} 100\n"
            );
        }
        for &i in orders[2] {
            text += &format!(
                "rabbitmq_detailed_queue_messages_unacked{{{}}} {}\n",
                label(i),
                10 + i
            );
        }
        text
    }

    proptest::proptest! {
        /// Lines are matched to the previous line's queue before any lookup;
        /// whatever order each family lists the queues in, every line lands
        /// on its own queue.
        #[test]
        fn each_family_may_list_the_queues_in_any_order(
            orders in proptest::array::uniform3(proptest::strategy::Strategy::prop_shuffle(
                proptest::strategy::Just((0..6).collect::<Vec<usize>>()),
            )),
            chunk in 1usize..64,
        ) {
            let text = families_in_orders([&orders[0], &orders[1], &orders[2]]);
            let node = parse_in(text.as_bytes(), chunk).unwrap();
            proptest::prop_assert_eq!(node.queues.len(), 6);
            for i in 0..6u64 {
                let q = find(&node, &format!("v{}", i % 2), &format!("q{i}"));
                proptest::prop_assert_eq!(q.ready, Some(i));
                proptest::prop_assert_eq!(q.broker().unacked, Some(10 + i));
                proptest::prop_assert_eq!(q.counters().published, Some(100 + i));
            }
        }
    }

    #[test]
    fn comments_blank_lines_and_layout_are_allowed() {
        let text = "# a free comment with {braces} and \"quotes\n\
                    #\n\
                    \n\
                    # HELP rabbitmq_detailed_queue_messages Sum of ready and unacknowledged messages\n\
                    # TYPE rabbitmq_detailed_queue_messages gauge\n\
                    rabbitmq_detailed_queue_messages{ vhost = \"v\" , queue=\"q1\", } 3\r\n\
                    rabbitmq_detailed_queue_messages\t{queue=\"q2\",vhost=\"v\"}\t4\n\
                    rabbitmq_detailed_queue_messages{queue=\"q3\",vhost=\"v\"}5\n\
                    rabbitmq_identity_info 1\n";
        let node = parse(text).unwrap();
        assert_eq!(node.skipped_lines, 0);
        assert_eq!(find(&node, "v", "q1").depth, Some(3));
        assert_eq!(find(&node, "v", "q2").depth, Some(4));
        assert_eq!(find(&node, "v", "q3").depth, Some(5));
    }

    #[test]
    fn special_values_timestamps_and_exemplars() {
        let text = "rabbitmq_detailed_queue_consumer_utilisation{vhost=\"v\",queue=\"a\"} +Inf\n\
                    rabbitmq_detailed_queue_consumers{vhost=\"v\",queue=\"a\"} NaN\n\
                    rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"a\"} 2 1700000000000\n\
                    rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"a\"} 2e0 -5\n\
                    rabbitmq_detailed_queue_consumer_utilisation{vhost=\"v\",queue=\"b\"} 0.25 # {trace_id=\"x y\"} 1 1.5\n\
                    rabbitmq_detailed_queue_messages_acked_total{vhost=\"v\",queue=\"b\"} 9 1700000000.5 # {trace_id=\"t\"} 1\n\
                    rabbitmq_detailed_queue_messages_unacked{vhost=\"v\",queue=\"b\"} -Inf\n\
                    rabbitmq_detailed_queue_head_message_timestamp{vhost=\"v\",queue=\"a\"} nan\n\
                    rabbitmq_build_info{version=\"4\"} 1\n";
        let node = parse(text).unwrap();
        assert_eq!(node.skipped_lines, 0);
        let a = find(&node, "v", "a");
        assert_eq!(a.broker().consumer_utilisation, None);
        assert_eq!(a.broker().consumers, None);
        assert_eq!((a.ready, a.depth), (Some(2), Some(2)));
        // A head without a timestamp and messages ready: age unknown.
        assert_eq!(a.oldest_age_seconds, None);
        let b = find(&node, "v", "b");
        assert_eq!(b.broker().consumer_utilisation, Some(0.25));
        assert_eq!(b.counters().acknowledged, Some(9));
        assert_eq!(b.broker().unacked, None);
    }

    #[test]
    fn invalid_lines_of_read_metrics_are_counted_others_ignored() {
        let bad = [
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"}",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"} ",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"} twelve",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"} 1 2 3",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"} 1 soon",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"v\" queue=\"q\"} 1",
            "rabbitmq_detailed_queue_messages{vhost=v,queue=\"q\"} 1",
            "rabbitmq_detailed_queue_messages{1vhost=\"v\",queue=\"q\"} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",,queue=\"q\"} 1",
        ];
        let ignored = [
            // Families not read are skipped on their name, broken or not.
            "rabbitmq_detailed_queue_messages_bytes{vhost=\"v\",queue=\"q\" 1",
            "rabbitmq_detailed_queue_messages-x 1",
            "something else entirely {",
        ];
        let mut text = String::new();
        for line in bad.iter().chain(&ignored) {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str("rabbitmq_identity_info 1\n");
        let node = parse(&text).unwrap();
        assert_eq!(node.skipped_lines, bad.len());
        assert!(node.queues.is_empty());
    }

    /// The same lines after a valid line of their queue, where each is
    /// first compared as text with that queue's labels
    /// ([`Parser::predicted`]): counted the same, the queue's figure kept.
    #[test]
    fn invalid_lines_of_a_known_queue_are_counted_too() {
        let bad = [
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"} twelve",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"} 1 soon",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"\"} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\",x=\"\\t\"} 1",
        ];
        let mut text =
            String::from("rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"q\"} 5\n");
        for line in bad {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(
            "rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"q\",exchange=\"\"} 4\n",
        );
        text.push_str("rabbitmq_identity_info 1\n");
        let node = parse(&text).unwrap();
        assert_eq!(node.skipped_lines, bad.len());
        assert_eq!(node.queues.len(), 1);
        assert_eq!(find(&node, "v", "q").depth, Some(5));
        assert_eq!(
            find(&node, "v", "q").ready,
            Some(4),
            "another label: read in full"
        );
    }

    /// A queue whose name the format escapes is never matched as text: its
    /// lines are read in full, and RabbitMQ 3.x's unescaped ones skipped.
    #[test]
    fn names_that_need_escapes_are_read_in_full() {
        let text = "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"a\\\"b\"} 1\n\
                    rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"a\\\"b\"} 2\n\
                    rabbitmq_detailed_queue_messages_unacked{vhost=\"/\",queue=\"a\"b\"} 3\n\
                    rabbitmq_identity_info 1\n";
        let node = parse(text).unwrap();
        let q = find(&node, "/", "a\"b");
        assert_eq!(
            (q.depth, q.ready, q.broker().unacked),
            (Some(1), Some(2), None)
        );
        assert_eq!(node.skipped_lines, 1);
    }

    #[test]
    fn garbage_and_foreign_text_are_errors() {
        assert!(parse("<html><body>hello</body></html>").is_err());
        assert!(parse("node_load1 0.5\n").is_err());
        assert!(parse("").is_err());
        // An identity line that does not parse does not count.
        assert!(parse("rabbitmq_identity_info{x=\"} 1\n").is_err());
        let not_utf8 = [
            TEXT.as_bytes(),
            b"rabbitmq_detailed_queue_messages{queue=\"\xff\"} 1\n",
        ]
        .concat();
        assert_eq!(parse_in(&not_utf8, 5).err(), Some("not UTF-8 text"));
    }

    #[test]
    fn the_filter_applies_while_parsing() {
        let yaml = "name: r\nvhosts: [\"/\"]\n";
        let v: serde_json::Value = serde_norway::from_str(yaml).unwrap();
        let cfg: RabbitSourceConfig = serde_json::from_value(v).unwrap();
        let filter = QueueFilter::new(&cfg);
        let mut parser = Parser::new(&filter);
        parser.feed(TEXT.as_bytes()).unwrap();
        let node = parser.finish(now()).unwrap();
        assert_eq!(node.queues.len(), 1);
        assert_eq!(node.queues[0].name, "a,b=c");
    }

    #[test]
    fn nodes_merge_field_by_field_the_first_winning() {
        let mut a = QueueSample::named("q");
        a.broker_mut().vhost = "/".into();
        a.ready = Some(1);
        let mut b = a.clone();
        b.ready = Some(2);
        b.depth = Some(5);
        let mut c = QueueSample::named("other");
        c.broker_mut().vhost = "/".into();
        let merged = merge_nodes(vec![vec![a], vec![b, c]]);
        assert_eq!(merged.len(), 2);
        assert_eq!((merged[0].ready, merged[0].depth), (Some(1), Some(5)));
        assert_eq!(merged[1].name, "other");
        assert!(merge_nodes(Vec::new()).is_empty());
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
