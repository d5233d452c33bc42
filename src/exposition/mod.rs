//! `/metrics`: encodes snapshots with `prometheus-client`, in OpenMetrics or
//! the classic Prometheus text format, and caches the snapshot part per
//! snapshot epoch so repeated scrapes do not re-encode unchanged data.
//!
//! `prometheus-client` writes OpenMetrics only. [`finish`] adapts its output
//! line by line where the two formats differ: descriptor lines (`# TYPE`,
//! `# HELP`, `# UNIT`, `# EOF`) for the classic format, and the gauge
//! histogram type that the crate lacks for OpenMetrics. Sample lines, label
//! escaping and numbers are always the crate's.

mod collector;
mod gzip;
mod labels;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use prometheus_client::registry::Registry;

use crate::hub::Hub;
use crate::telemetry::Telemetry;
pub use collector::{AGE_HISTOGRAM, SnapshotCollector};

/// Which text format a scrape gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`.
    Classic,
}

impl Format {
    /// Picks the format from an `Accept` header: OpenMetrics when asked for.
    pub fn negotiate(accept: Option<&str>) -> Format {
        if accepts(accept, |media| {
            media.eq_ignore_ascii_case("application/openmetrics-text")
        }) {
            Format::OpenMetrics
        } else {
            Format::Classic
        }
    }

    /// The `Content-Type` header value.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The encoded snapshot part of a body, for one format and hub epoch.
#[derive(Debug)]
struct EncodedPart {
    /// The text.
    text: String,
    /// The text deflated up to a sync flush, made on the first gzip scrape
    /// of this epoch; `None` inside if compression failed (served plain).
    deflated: std::sync::OnceLock<Option<gzip::Deflated>>,
}

/// True when an `Accept`-style header (`Accept`, `Accept-Encoding`) lists a
/// value for which `wanted` holds, without `q=0`.
fn accepts(header: Option<&str>, wanted: impl Fn(&str) -> bool) -> bool {
    header.is_some_and(|h| {
        h.split(',').any(|part| {
            let mut it = part.split(';');
            let value = it.next().unwrap_or("").trim();
            let q_zero = it.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f64>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            wanted(value) && !q_zero
        })
    })
}

/// True when an `Accept-Encoding` header allows gzip.
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accepts(accept_encoding, |coding| {
        coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip")
    })
}

/// An encoded snapshot part and the hub epoch it was encoded at.
type CachedPart = (u64, Arc<EncodedPart>);

/// Renders `/metrics` bodies from the hub's snapshots.
#[derive(Debug)]
pub struct Exposition {
    /// Where snapshots come from.
    hub: Hub,
    /// Process-level metrics, encoded live after the snapshot part.
    telemetry: Arc<Telemetry>,
    /// Encoded snapshot part per format (OpenMetrics, classic).
    cache: Mutex<[Option<CachedPart>; 2]>,
}

impl Exposition {
    /// A renderer over `hub`.
    pub fn new(hub: Hub, telemetry: Arc<Telemetry>) -> Self {
        Exposition {
            hub,
            telemetry,
            cache: Mutex::new([None, None]),
        }
    }

    /// The full body for one scrape.
    pub fn render(&self, format: Format) -> Result<String, EncodeError> {
        let part = self.snapshot_part(format)?;
        let live = self.live_part(format)?;
        let mut out = String::with_capacity(part.text.len() + live.len());
        out.push_str(&part.text);
        out.push_str(&live);
        Ok(out)
    }

    /// The full body for one scrape, gzip-compressed, or `None` if
    /// compression failed (serve [`Exposition::render`] instead).
    ///
    /// The snapshot part is compressed once per snapshot epoch and format;
    /// a scrape only compresses the small live part (process metrics) and
    /// appends it, so repeated scrapes cost little however many series there are.
    pub fn render_gzip(&self, format: Format) -> Result<Option<Vec<u8>>, EncodeError> {
        let part = self.snapshot_part(format)?;
        let live = self.live_part(format)?;
        Ok(part
            .deflated
            .get_or_init(|| gzip::Deflated::new(&part.text))
            .as_ref()
            .and_then(|deflated| deflated.finish(live.as_bytes())))
    }

    /// Process-level metrics (encoded on every scrape), plus `# EOF`.
    fn live_part(&self, format: Format) -> Result<String, EncodeError> {
        let mut live = String::new();
        self.telemetry.refresh();
        prometheus_client::encoding::text::encode_registry(&mut live, &self.telemetry.registry)?;
        let mut out = finish(&live, format);
        if format == Format::OpenMetrics {
            out.push_str("# EOF\n");
        }
        Ok(out)
    }

    fn snapshot_part(&self, format: Format) -> Result<Arc<EncodedPart>, EncodeError> {
        let slot = match format {
            Format::OpenMetrics => 0,
            Format::Classic => 1,
        };
        // Read the epoch before the snapshots: if a publish lands in between,
        // the newer data is cached under the older epoch and simply re-encoded
        // on the next scrape.
        let epoch = self.hub.epoch();
        if let Ok(cache) = self.cache.lock()
            && let Some((e, body)) = &cache[slot]
            && *e == epoch
        {
            return Ok(body.clone());
        }
        let body = Arc::new(EncodedPart {
            text: encode_snapshots(&self.hub, format)?,
            deflated: std::sync::OnceLock::new(),
        });
        if let Ok(mut cache) = self.cache.lock() {
            cache[slot] = Some((epoch, body.clone()));
        }
        Ok(body)
    }
}

/// Encoding failed: an encoder refused a value. Never served truncated.
#[derive(Debug, thiserror::Error)]
#[error("encoding the exposition failed")]
pub struct EncodeError(#[from] std::fmt::Error);

/// Encodes every snapshot of `hub` (no EOF marker).
pub fn encode_snapshots(hub: &Hub, format: Format) -> Result<String, EncodeError> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector {
        snapshots: hub.snapshots(),
        format,
    }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode_registry(&mut text, &registry)?;
    Ok(finish(&text, format))
}

/// Adapts `prometheus-client` OpenMetrics output (without `# EOF`) to `format`.
pub fn finish(om: &str, format: Format) -> String {
    let mut out = String::with_capacity(om.len());
    let hist_type = format!("# TYPE {AGE_HISTOGRAM} histogram");
    let hist_count = format!("{AGE_HISTOGRAM}_count");
    let hist_sum = format!("{AGE_HISTOGRAM}_sum");
    let mut pending_help: Option<&str> = None;
    for line in om.lines() {
        match format {
            Format::OpenMetrics => {
                if line == hist_type {
                    let _ = writeln!(out, "# TYPE {AGE_HISTOGRAM} gaugehistogram");
                } else if [&hist_count, &hist_sum].iter().any(|p| {
                    line.strip_prefix(p.as_str())
                        .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                }) {
                    // OpenMetrics wants `_gcount` and `_gsum` together or not at
                    // all, and the sum of ages is unknown without reading every
                    // member; the `+Inf` bucket carries the count.
                } else {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            Format::Classic => {
                if line == "# EOF" || line.starts_with("# UNIT ") {
                    continue;
                }
                if let Some(rest) = line.strip_prefix("# HELP ") {
                    pending_help = Some(rest);
                    continue;
                }
                if let Some(rest) = line.strip_prefix("# TYPE ") {
                    let (name, metric_type) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
                    let (name, metric_type) = match metric_type {
                        "counter" => (format!("{name}_total"), "counter"),
                        "unknown" => (name.to_string(), "untyped"),
                        "info" => (format!("{name}_info"), "gauge"),
                        other => (name.to_string(), other),
                    };
                    if let Some(help) = pending_help.take() {
                        let text = help.split_once(' ').map(|(_, t)| t).unwrap_or("");
                        let _ = writeln!(out, "# HELP {name} {text}");
                    }
                    let _ = writeln!(out, "# TYPE {name} {metric_type}");
                    continue;
                }
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_prefers_openmetrics_only_when_asked() {
        assert_eq!(Format::negotiate(None), Format::Classic);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Classic);
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0, text/plain")),
            Format::Classic
        );
    }

    #[test]
    fn gzip_is_accepted_unless_refused() {
        assert!(accepts_gzip(Some("gzip")));
        assert!(accepts_gzip(Some("br;q=1.0, GZIP;q=0.5, *;q=0.1")));
        assert!(!accepts_gzip(None));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(Some("gzip; q=0.000")));
    }

    #[test]
    fn classic_renames_counter_descriptors_and_drops_om_only_lines() {
        let om = "# HELP foo Foo things.\n# TYPE foo counter\nfoo_total{a=\"b\"} 1\n# HELP bar Bar.\n# TYPE bar unknown\nbar 2\n# UNIT baz seconds\n";
        let classic = finish(om, Format::Classic);
        assert_eq!(
            classic,
            "# HELP foo_total Foo things.\n# TYPE foo_total counter\nfoo_total{a=\"b\"} 1\n# HELP bar Bar.\n# TYPE bar untyped\nbar 2\n"
        );
    }

    #[test]
    fn openmetrics_retypes_the_age_histogram() {
        let om = "# HELP queue_message_age_seconds x\n# TYPE queue_message_age_seconds histogram\nqueue_message_age_seconds_sum{q=\"a\"} 0.0\nqueue_message_age_seconds_count{q=\"a\"} 3\nqueue_message_age_seconds_bucket{q=\"a\",le=\"+Inf\"} 3\n";
        let out = finish(om, Format::OpenMetrics);
        assert!(out.contains("# TYPE queue_message_age_seconds gaugehistogram\n"));
        assert!(!out.contains("_count") && !out.contains("_sum"));
        assert!(out.contains("_bucket{q=\"a\",le=\"+Inf\"} 3\n"));
    }
}
