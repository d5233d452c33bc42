//! Method `management`: pages through `/api/queues[/{vhost}]` with
//! `page_size=500` (the server's maximum), asking only for the columns it
//! uses. With `stats: totals` it takes the fast path
//! (`disable_stats=true&enable_queue_totals=true`), which skips the stats
//! database: depth, ready and unacked only.
//!
//! Each poll also says which vhosts the user may not read (`access`): a
//! configured vhost whose listing is refused, or, over every vhost, one
//! that `/api/vhosts` names but no readable vhost's listing covers.

use crate::snapshot::Reason;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use futures_util::future::join_all;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::access;
use super::client::{self, FetchError, HttpClient};
use super::credentials::{self, Credentials};
use super::filter::QueueFilter;
use super::sample::{self, HeadTimestamp};
use crate::config::{RabbitSourceConfig, RabbitStats};
use crate::snapshot::{BrokerFacts, Counters, Coverage, Gap, QueueSample};
use crate::sources::{PollOutput, SourceError};

/// Largest page the management API accepts; 501 is a 400.
pub const PAGE_SIZE: u32 = 500;
/// Vhost listings fetched at once.
const VHOSTS_IN_FLIGHT: usize = 4;
/// A `page_count` above this is not believed.
const MAX_PAGES: u64 = 100_000;

/// Columns asked for with `stats: full`.
const FULL_COLUMNS: &str = "name,vhost,type,state,messages,messages_ready,\
messages_unacknowledged,consumers,consumer_utilisation,head_message_timestamp,\
message_stats.publish,message_stats.deliver_get,message_stats.ack,message_stats.redeliver";
/// Columns asked for on the fast path; the others are not served there.
const TOTALS_COLUMNS: &str =
    "name,vhost,type,state,messages,messages_ready,messages_unacknowledged";

/// State of the management method between polls.
#[derive(Debug, Default)]
pub struct Management {
    /// Built on first use (reads the CA file); rebuilt after a config error.
    client: Option<HttpClient>,
    /// False once the server rejected `include` as a server-side regex
    /// (Erlang's regex dialect differs from Rust's); then filtering is local only.
    server_filter_broken: bool,
    /// The vhosts the last poll found the user may not read, so that a
    /// change is logged once rather than at every poll.
    unreadable: BTreeSet<String>,
}

/// What the vhosts' listings told, beyond the queues themselves.
struct Lists {
    /// The configured vhosts that answered.
    answered_vhosts: Vec<String>,
    /// Vhosts a queue was listed from: the user may read each.
    listed: HashSet<String>,
    /// The configured vhosts that refused the user.
    refused: Vec<String>,
    /// The first refusal, for a poll where no vhost answered.
    first_refusal: Option<SourceError>,
    /// The first error that fails the poll.
    first_error: Option<SourceError>,
}

/// Puts the queues of every vhost's listing in `results` onto `out` (the
/// filter's, once each: pages cut from a live list may repeat a queue),
/// counts what failed, and tells what the listings said.
fn read_lists(
    results: Vec<(Option<&str>, Listed)>,
    config: &RabbitSourceConfig,
    filter: &QueueFilter,
    out: &mut PollOutput,
) -> Lists {
    let now = SystemTime::now();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    let mut answered_vhosts = Vec::new();
    // Vhosts a queue was listed from: the user may read each.
    let mut listed: HashSet<String> = HashSet::new();
    let mut refused: Vec<String> = Vec::new();
    let mut first_refusal = None;
    let mut first_error = None;
    for (vhost, result) in results {
        match result {
            Ok(items) => {
                if let Some(v) = vhost {
                    answered_vhosts.push(v.to_string());
                }
                for item in items {
                    if !listed.contains(&item.vhost) {
                        listed.insert(item.vhost.clone());
                    }
                    if !filter.keeps(&item.vhost, &item.name) {
                        continue;
                    }
                    let key = (item.vhost.clone(), item.name.clone());
                    let q = item.into_sample(config.stats, now);
                    // Pages are cut from a live list: a queue created
                    // between two pages can show up twice.
                    match seen.get(&key) {
                        Some(&i) => out.queues[i] = q,
                        None => {
                            seen.insert(key, out.queues.len());
                            out.queues.push(q);
                        }
                    }
                }
            }
            Err(ListError::VhostNotFound(v)) => {
                tracing::debug!(source = %config.name, vhost = %v, "vhost not found");
                out.partial_errors.push(Reason::NotFound);
            }
            Err(ListError::VhostRefused(v, e)) => {
                refused.push(v);
                out.partial_errors.push(Reason::Auth);
                first_refusal.get_or_insert(e);
            }
            Err(ListError::Source(e)) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Lists {
        answered_vhosts,
        listed,
        refused,
        first_refusal,
        first_error,
    }
}

impl Management {
    /// One poll: every configured vhost (or all), every page.
    pub async fn poll(
        &mut self,
        config: &RabbitSourceConfig,
        filter: &QueueFilter,
    ) -> Result<PollOutput, SourceError> {
        let client = HttpClient::lazily(&mut self.client, config)?;
        let creds = credentials::resolve(config)?;
        let base = client::base_url(&config.url)?;
        let listings: Vec<Option<&str>> = if config.vhosts.is_empty() {
            vec![None]
        } else {
            config.vhosts.iter().map(|v| Some(v.as_str())).collect()
        };
        let server_filter = if self.server_filter_broken {
            None
        } else {
            filter.include()
        };
        let request = Request {
            client: &client,
            creds: creds.as_ref(),
            base: &base,
            stats: config.stats,
            server_filter,
            regex_rejected: AtomicBool::new(false),
        };
        let mut results: Vec<(Option<&str>, Listed)> = Vec::new();
        for chunk in listings.chunks(VHOSTS_IN_FLIGHT) {
            let lists = join_all(chunk.iter().map(|v| request.list(*v))).await;
            results.extend(chunk.iter().copied().zip(lists));
        }

        let mut out = PollOutput::new(Coverage::complete());
        let Lists {
            answered_vhosts,
            listed,
            refused,
            first_refusal,
            first_error,
        } = read_lists(results, config, filter, &mut out);
        if request.regex_rejected.load(Ordering::Relaxed) {
            tracing::warn!(
                source = %config.name,
                "the management API rejected `include` as a server-side regex; filtering locally only"
            );
            self.server_filter_broken = true;
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // Not one configured vhost answered: the source reads nothing (and
        // a wrong password is refused everywhere).
        if answered_vhosts.is_empty() && !listings.contains(&None) {
            if let Some(e) = first_refusal {
                return Err(e);
            }
            return Err(SourceError::NotFound(
                "none of the configured vhosts exists".into(),
            ));
        }
        let who = access::who(creds.as_ref());
        let gaps = if config.vhosts.is_empty() {
            let listed: HashSet<&str> = listed.iter().map(String::as_str).collect();
            request.unlisted_vhost_gaps(&who, &listed).await
        } else {
            refused
                .iter()
                .map(|v| access::unreadable_vhost(&who, v))
                .collect()
        };
        self.log_unreadable(config, &gaps);
        out.coverage = Coverage::with_gaps(gaps);
        sample::sort_by_vhost_and_name(&mut out.queues);
        out.stats = sample::stats(&out.queues, &answered_vhosts);
        Ok(out)
    }

    /// Logs what became unreadable (a warning: those queues are unknown
    /// from now on) or readable again since the last poll: a few lines
    /// each, however many vhosts a broker has.
    fn log_unreadable(&mut self, config: &RabbitSourceConfig, gaps: &[Gap]) {
        /// Lines logged per change and poll; the rest are counted.
        const SHOWN: usize = 5;
        let now: BTreeSet<String> = gaps.iter().map(|g| g.cause.clone()).collect();
        let new: Vec<&String> = now.difference(&self.unreadable).collect();
        for cause in new.iter().take(SHOWN) {
            tracing::warn!(source = %config.name, "{cause}; KEDA gets UNAVAILABLE for what it may hold");
        }
        if new.len() > SHOWN {
            tracing::warn!(source = %config.name, "and {} more vhosts are unknown", new.len() - SHOWN);
        }
        let gone: Vec<&String> = self.unreadable.difference(&now).collect();
        for cause in gone.iter().take(SHOWN) {
            tracing::info!(source = %config.name, "no longer so: {cause}");
        }
        if gone.len() > SHOWN {
            tracing::info!(source = %config.name, "and {} more are known again", gone.len() - SHOWN);
        }
        self.unreadable = now;
    }
}

/// One vhost's listing (or the all-vhosts listing).
type Listed = Result<Vec<ApiQueue>, ListError>;

/// Why one vhost's listing failed.
#[derive(Debug)]
enum ListError {
    /// The vhost does not exist (404 on `/api/queues/{vhost}`).
    VhostNotFound(String),
    /// The user may not read the vhost (401 or 403 on
    /// `/api/queues/{vhost}`), and the error if no vhost answers.
    VhostRefused(String, SourceError),
    /// Anything else; fails the poll.
    Source(SourceError),
}

/// What every page request of one poll shares.
struct Request<'a> {
    /// The HTTP client.
    client: &'a HttpClient,
    /// Basic auth, if any.
    creds: Option<&'a Credentials>,
    /// Management base URL without user info.
    base: &'a reqwest::Url,
    /// Which columns, and whether to take the fast path.
    stats: RabbitStats,
    /// `include`, sent as `name=…&use_regex=true`.
    server_filter: Option<&'a str>,
    /// Set when the server answered 400 to the regex (the listing is then
    /// fetched again without it).
    regex_rejected: AtomicBool,
}

impl Request<'_> {
    /// Every page of one listing.
    async fn list(&self, vhost: Option<&str>) -> Listed {
        let mut items = Vec::new();
        let mut page = 1u64;
        let mut server_filter = self.server_filter;
        loop {
            let url = self.page_url(vhost, page, server_filter);
            let body = match self.client.get(&url, self.creds).await {
                Ok(b) => b,
                Err(FetchError::Status(404)) if vhost.is_some() => {
                    return Err(ListError::VhostNotFound(vhost.unwrap_or_default().into()));
                }
                Err(e @ FetchError::Status(401 | 403)) if let Some(v) = vhost => {
                    return Err(ListError::VhostRefused(v.into(), e.into_source_error(&url)));
                }
                Err(FetchError::Status(400)) if page == 1 && server_filter.is_some() => {
                    self.regex_rejected.store(true, Ordering::Relaxed);
                    server_filter = None;
                    continue;
                }
                // The list shrank between two pages: what we have is complete.
                Err(FetchError::Status(400)) if page > 1 => break,
                Err(e) => return Err(ListError::Source(e.into_source_error(&url))),
            };
            if !take_page(&body, &url, page, &mut items).map_err(ListError::Source)? {
                break;
            }
            page += 1;
        }
        Ok(items)
    }

    /// Every item of the paged listing at `path` (asking for `params`),
    /// which takes no vhost and no name filter.
    async fn all<T: DeserializeOwned>(
        &self,
        path: &[&str],
        params: &[(&str, &str)],
    ) -> Result<Vec<T>, SourceError> {
        let mut items = Vec::new();
        let mut page = 1u64;
        loop {
            let mut url = client::join(self.base, path);
            url.query_pairs_mut()
                .append_pair("page", &page.to_string())
                .append_pair("page_size", &PAGE_SIZE.to_string())
                .extend_pairs(params);
            let body = match self.client.get(&url, self.creds).await {
                Ok(b) => b,
                // The list shrank between two pages: what we have is complete.
                Err(FetchError::Status(400)) if page > 1 => break,
                Err(e) => return Err(e.into_source_error(&url)),
            };
            if !take_page(&body, &url, page, &mut items)? {
                break;
            }
            page += 1;
        }
        Ok(items)
    }

    /// The vhosts the user can see listed (`/api/vhosts`) but may not
    /// read, when every vhost is polled, as gaps. `listed`: the vhosts a
    /// queue was listed from, which the user may read. One request, and a
    /// second only when some listed vhost had no queue listed.
    async fn unlisted_vhost_gaps(&self, who: &str, listed: &HashSet<&str>) -> Vec<Gap> {
        let visible: Vec<Named> = match self
            .all(
                &["api", "vhosts"],
                &[("columns", "name"), ("disable_stats", "true")],
            )
            .await
        {
            Ok(v) => v,
            Err(e) => return vec![access::vhosts_unlisted(who, &e.to_string())],
        };
        let visible: Vec<String> = visible.into_iter().map(|v| v.name).collect();
        let unproven = access::unproven(&visible, listed);
        if unproven.is_empty() {
            return Vec::new();
        }
        // Every vhost has `amq.direct`, listed only where the user may read.
        let readable = self
            .all::<InVhost>(
                &["api", "exchanges"],
                &[
                    ("columns", "vhost"),
                    ("name", "^amq\\.direct$"),
                    ("use_regex", "true"),
                    ("disable_stats", "true"),
                ],
            )
            .await
            .map(|found| {
                found
                    .into_iter()
                    .map(|e| e.vhost)
                    .collect::<HashSet<String>>()
            })
            .map_err(|e| e.to_string());
        access::vhost_gaps(who, &unproven, readable.as_ref().map_err(String::as_str))
    }

    fn page_url(
        &self,
        vhost: Option<&str>,
        page: u64,
        server_filter: Option<&str>,
    ) -> reqwest::Url {
        let mut url = match vhost {
            Some(v) => client::join(self.base, &["api", "queues", v]),
            None => client::join(self.base, &["api", "queues"]),
        };
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("page", &page.to_string());
            q.append_pair("page_size", &PAGE_SIZE.to_string());
            match self.stats {
                RabbitStats::Full => {
                    q.append_pair("columns", FULL_COLUMNS);
                }
                RabbitStats::Totals => {
                    q.append_pair("disable_stats", "true");
                    q.append_pair("enable_queue_totals", "true");
                    q.append_pair("columns", TOTALS_COLUMNS);
                }
            }
            if let Some(re) = server_filter {
                q.append_pair("name", re);
                q.append_pair("use_regex", "true");
            }
        }
        url
    }
}

/// Adds the items of `body`, page `page` of a listing from `url`, to
/// `items`; true if more pages follow.
fn take_page<T: DeserializeOwned>(
    body: &[u8],
    url: &reqwest::Url,
    page: u64,
    items: &mut Vec<T>,
) -> Result<bool, SourceError> {
    let listing = parse_listing(body)
        .map_err(|e| SourceError::Malformed(format!("{}: {e}", client::display_url(url))))?;
    match listing {
        // A server without pagination support sends everything at once.
        Listing::All(all) => {
            items.extend(all);
            Ok(false)
        }
        Listing::Page(p) => {
            items.extend(p.items);
            if p.page_count > MAX_PAGES {
                return Err(SourceError::Malformed(format!(
                    "page_count {} from {}",
                    p.page_count,
                    client::display_url(url)
                )));
            }
            Ok(page < p.page_count)
        }
    }
}

/// Parses one response: a page object, or a plain array from a server that
/// ignores pagination.
fn parse_listing<T: DeserializeOwned>(body: &[u8]) -> Result<Listing<T>, serde_json::Error> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        serde_json::from_slice(body).map(Listing::All)
    } else {
        serde_json::from_slice(body).map(Listing::Page)
    }
}

/// One response of a listing (`/api/queues`, `/api/vhosts`, `/api/exchanges`).
#[derive(Debug)]
enum Listing<T> {
    /// A paginated answer.
    Page(Page<T>),
    /// A plain array (servers that ignore pagination).
    All(Vec<T>),
}

/// A page of a listing.
#[derive(Debug, Deserialize)]
struct Page<T> {
    /// The items on this page.
    items: Vec<T>,
    /// How many pages the listing has.
    page_count: u64,
}

/// A vhost in `/api/vhosts`.
#[derive(Debug, Deserialize)]
struct Named {
    /// Its name.
    name: String,
}

/// An exchange in `/api/exchanges`, by the vhost it is in.
#[derive(Debug, Deserialize)]
struct InVhost {
    /// The exchange's vhost.
    vhost: String,
}

/// One queue as the management API reports it. Every figure is optional:
/// a field RabbitMQ did not send (or sent in an unexpected shape) is unknown.
#[derive(Debug, Deserialize)]
struct ApiQueue {
    /// Queue name.
    name: String,
    /// Its vhost.
    vhost: String,
    /// `classic`, `quorum` or `stream`.
    #[serde(default, rename = "type", deserialize_with = "lenient_string")]
    queue_type: Option<String>,
    /// `running`, `idle`, `flow`, `down`, `minority`...
    #[serde(default, deserialize_with = "lenient_string")]
    state: Option<String>,
    /// Ready + unacked.
    #[serde(default, deserialize_with = "lenient_count")]
    messages: Option<u64>,
    /// Ready for delivery.
    #[serde(default, deserialize_with = "lenient_count")]
    messages_ready: Option<u64>,
    /// Delivered, not yet acknowledged.
    #[serde(default, deserialize_with = "lenient_count")]
    messages_unacknowledged: Option<u64>,
    /// Attached consumers.
    #[serde(default, deserialize_with = "lenient_count")]
    consumers: Option<u64>,
    /// Fraction of time the queue could deliver immediately.
    #[serde(default, deserialize_with = "lenient_f64")]
    consumer_utilisation: Option<f64>,
    /// Unix seconds of the head message's timestamp, `null` when none.
    #[serde(default = "absent", deserialize_with = "head_timestamp")]
    head_message_timestamp: HeadTimestamp,
    /// Cumulative totals (and rates, which we ignore).
    #[serde(default, deserialize_with = "lenient_stats")]
    message_stats: Option<MessageStats>,
}

/// The cumulative `message_stats` totals used for counters.
#[derive(Debug, Default, Deserialize)]
struct MessageStats {
    /// Messages published into the queue.
    #[serde(default, deserialize_with = "lenient_count")]
    publish: Option<u64>,
    /// Messages delivered or fetched (acked or not).
    #[serde(default, deserialize_with = "lenient_count")]
    deliver_get: Option<u64>,
    /// Messages acknowledged.
    #[serde(default, deserialize_with = "lenient_count")]
    ack: Option<u64>,
    /// Messages delivered again.
    #[serde(default, deserialize_with = "lenient_count")]
    redeliver: Option<u64>,
}

impl ApiQueue {
    fn into_sample(self, stats: RabbitStats, now: SystemTime) -> QueueSample {
        let counters = self
            .message_stats
            .map(|m| Counters {
                published: m.publish,
                delivered: m.deliver_get,
                acknowledged: m.ack,
                redelivered: m.redeliver,
            })
            .unwrap_or_default();
        let head = match stats {
            RabbitStats::Full => self.head_message_timestamp,
            RabbitStats::Totals => HeadTimestamp::Absent,
        };
        let mut q = QueueSample {
            oldest_age_seconds: sample::oldest_age(head, self.messages_ready, now),
            queue_type: self.queue_type.as_deref().map(sample::queue_type),
            depth: self.messages,
            ready: self.messages_ready,
            broker: Some(Box::new(BrokerFacts {
                vhost: self.vhost,
                state: self.state,
                unacked: self.messages_unacknowledged,
                consumers: self.consumers,
                consumer_utilisation: self.consumer_utilisation.filter(|u| u.is_finite()),
                service_time: None,
            })),
            name: self.name,
            ..QueueSample::default()
        };
        q.set_counters(counters);
        q
    }
}

fn absent() -> HeadTimestamp {
    HeadTimestamp::Absent
}

fn head_timestamp<'de, D: Deserializer<'de>>(d: D) -> Result<HeadTimestamp, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n
            .as_f64()
            .map_or(HeadTimestamp::NoValue, HeadTimestamp::Seconds),
        _ => HeadTimestamp::NoValue,
    })
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s),
        _ => None,
    })
}

fn lenient_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().and_then(sample::count_from_f64)),
        _ => None,
    })
}

fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n.as_f64(),
        _ => None,
    })
}

/// `message_stats` is an object, but an empty one may come as `[]`.
fn lenient_stats<'de, D: Deserializer<'de>>(d: D) -> Result<Option<MessageStats>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        v @ serde_json::Value::Object(_) => serde_json::from_value(v).ok(),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_with_missing_and_odd_fields_parses_to_unknowns() {
        let body = r#"{"items":[
            {"name":"q1","vhost":"/","type":"classic","state":"running","messages":3,
             "messages_ready":2,"messages_unacknowledged":1,"consumers":1,
             "consumer_utilisation":0.5,"head_message_timestamp":null,
             "message_stats":{"publish":10,"deliver_get":7,"ack":"x"}},
            {"name":"qq","vhost":"v","type":"quorum","message_stats":[]},
            {"name":"e","vhost":"v","type":"classic","messages":0,"messages_ready":0,
             "head_message_timestamp":null}
        ],"page":1,"page_count":1,"page_size":500,"total_count":3}"#;
        let Listing::<ApiQueue>::Page(p) = parse_listing(body.as_bytes()).unwrap() else {
            panic!("not a page")
        };
        let now = SystemTime::now();
        let q: Vec<_> = p
            .items
            .into_iter()
            .map(|i| i.into_sample(RabbitStats::Full, now))
            .collect();
        assert_eq!(q[0].depth, Some(3));
        assert_eq!(q[0].broker().unacked, Some(1));
        assert_eq!(q[0].broker().consumer_utilisation, Some(0.5));
        assert_eq!(q[0].counters().published, Some(10));
        assert_eq!(q[0].counters().acknowledged, None);
        // Head message without a timestamp property: age unknown.
        assert_eq!(q[0].oldest_age_seconds, None);
        assert_eq!(q[0].vhost(), Some("/"));
        // Quorum queue before its first stats emission: nothing known, no zeros.
        assert_eq!(q[1].depth, None);
        assert_eq!(q[1].ready, None);
        assert!(q[1].counters().is_empty());
        assert_eq!(q[1].queue_type.as_ref().map(|k| k.as_str()), Some("quorum"));
        // Empty classic queue: age 0.
        assert_eq!(q[2].oldest_age_seconds, Some(0.0));
    }

    #[test]
    fn plain_arrays_and_garbage() {
        assert!(matches!(
            parse_listing::<ApiQueue>(br#" [{"name":"a","vhost":"/"}]"#),
            Ok(Listing::All(_))
        ));
        assert!(parse_listing::<ApiQueue>(br#"{"items":"nope"}"#).is_err());
        assert!(parse_listing::<ApiQueue>(b"<html>").is_err());
    }
}
