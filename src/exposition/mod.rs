//! `/metrics`: encodes snapshots with `prometheus-client`, in OpenMetrics or
//! the classic Prometheus text format, and caches the snapshot part per
//! snapshot epoch so repeated scrapes do not re-encode unchanged data.
//!
//! One scrape per epoch encodes (and one deflates); scrapes that arrive
//! meanwhile are served the previous epoch's part, at most one poll older,
//! instead of encoding the same data again or waiting. Measured reason: with
//! 4,000 queues and 10 concurrent scrapers, every new snapshot made all of
//! them encode 2.5 MB at once, which set the p99 (227 ms). Bodies are the
//! cached bytes plus the small live part, sent without copying the cache.
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

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
    /// The text; taken out once deflated when no plain scrape of this
    /// format came lately (Prometheus asks for gzip), so the cache holds
    /// the ~20× smaller deflated blocks instead of both between scrapes
    /// (6.1 MB of text at 10,000 queues).
    text: Mutex<Option<Bytes>>,
    /// The text deflated up to a sync flush, made on the first gzip scrape
    /// of this epoch; `None` inside if compression failed (served plain).
    deflated: std::sync::OnceLock<Option<gzip::Deflated>>,
    /// Set by the scrape that deflates, so others do not wait for it.
    deflating: AtomicBool,
}

/// A body: the cached snapshot part and the live part, in that order.
#[derive(Debug)]
pub struct Body {
    /// The snapshot part, shared with the cache.
    pub cached: Bytes,
    /// The process metrics (and `# EOF`), made for this scrape.
    pub live: Bytes,
}

impl Body {
    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.cached.len() + self.live.len()
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body as one buffer (copies; for tests and `once`).
    pub fn to_vec(&self) -> Vec<u8> {
        [self.cached.as_ref(), self.live.as_ref()].concat()
    }
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

/// The cache of one format.
#[derive(Debug, Default)]
struct Slot {
    /// The newest encoded part.
    part: Option<CachedPart>,
    /// A scrape is encoding a newer epoch right now.
    encoding: bool,
    /// The newest part whose gzip is made, served while another deflates.
    gzipped: Option<Arc<EncodedPart>>,
}

/// Renders `/metrics` bodies from the hub's snapshots.
#[derive(Debug)]
pub struct Exposition {
    /// Where snapshots come from.
    hub: Hub,
    /// Process-level metrics, encoded live after the snapshot part.
    telemetry: Arc<Telemetry>,
    /// Encoded snapshot part per format (OpenMetrics, classic).
    cache: Mutex<[Slot; 2]>,
    /// Length of the last encoded part per format: the next encode's
    /// allocation, so a 6 MB text is not grown by doubling (up to 12 MB
    /// allocated, and kept with the cached part).
    last_len: [AtomicUsize; 2],
    /// When the last plain (uncompressed) scrape per format came, as
    /// seconds since `started`; `u64::MAX` before the first. Decides
    /// whether a deflated part keeps its text.
    last_plain: [AtomicU64; 2],
    /// The clock of `last_plain`.
    started: Instant,
}

/// How long after a plain scrape deflated parts keep their text, so
/// alternating plain and gzip scrapers do not encode twice per snapshot.
const KEEP_TEXT_AFTER_PLAIN: Duration = Duration::from_secs(300);

impl EncodedPart {
    /// A part holding `text`, not yet deflated.
    fn new(text: String) -> Self {
        EncodedPart {
            text: Mutex::new(Some(Bytes::from(text))),
            deflated: std::sync::OnceLock::new(),
            deflating: AtomicBool::new(false),
        }
    }

    /// A part for gzip scrapes alone: deflated as it was encoded, no text.
    fn deflated_only(deflated: Option<gzip::Deflated>) -> Self {
        EncodedPart {
            text: Mutex::new(None),
            deflated: std::sync::OnceLock::from(deflated),
            deflating: AtomicBool::new(true),
        }
    }

    /// The text, unless it was dropped after deflating.
    fn text(&self) -> Option<Bytes> {
        // A poisoned lock still holds a valid `Option`.
        self.text.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Drops the text (the deflated blocks serve gzip scrapes alone).
    fn drop_text(&self) {
        self.text.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Exposition {
    /// A renderer over `hub`.
    pub fn new(hub: Hub, telemetry: Arc<Telemetry>) -> Self {
        Exposition {
            hub,
            telemetry,
            cache: Mutex::new([Slot::default(), Slot::default()]),
            last_len: [AtomicUsize::new(0), AtomicUsize::new(0)],
            last_plain: [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)],
            started: Instant::now(),
        }
    }

    /// True when a plain scrape of `format` came within [`KEEP_TEXT_AFTER_PLAIN`].
    fn plain_lately(&self, format: Format) -> bool {
        let last = self.last_plain[slot_of(format)].load(Ordering::Relaxed);
        last != u64::MAX
            && self.started.elapsed().as_secs().saturating_sub(last)
                <= KEEP_TEXT_AFTER_PLAIN.as_secs()
    }

    /// The full body for one scrape.
    pub fn render(&self, format: Format) -> Result<Body, EncodeError> {
        self.last_plain[slot_of(format)].store(self.started.elapsed().as_secs(), Ordering::Relaxed);
        let cached = match self.snapshot_part(format, true)?.text() {
            Some(text) => text,
            // Dropped by a gzip scrape between our lookup and now; encoding
            // once more is rare (only right after gzip-only scraping).
            None => self
                .encode_part(format, self.hub.epoch(), true)?
                .text()
                .unwrap_or_default(),
        };
        let live = self.live_part(format)?;
        Ok(Body {
            cached,
            live: Bytes::from(live),
        })
    }

    /// The full body as text (copies; for `once` and tests).
    pub fn render_text(&self, format: Format) -> Result<String, EncodeError> {
        let body = self.render(format)?;
        // Both parts are `String`s made by the encoder, so UTF-8.
        Ok(String::from_utf8_lossy(&body.to_vec()).into_owned())
    }

    /// The full body for one scrape, gzip-compressed, or `None` if
    /// compression failed (serve [`Exposition::render`] instead).
    ///
    /// The snapshot part is compressed once per snapshot epoch and format;
    /// a scrape only compresses the small live part (process metrics) and
    /// appends it, so repeated scrapes cost little however many series there are.
    pub fn render_gzip(&self, format: Format) -> Result<Option<Vec<u8>>, EncodeError> {
        let part = self.gzip_part(format)?;
        let live = self.live_part(format)?;
        let deflated = part
            .deflated
            // The text is only dropped after this is set, so it is here.
            .get_or_init(|| part.text().and_then(|text| gzip::Deflated::new(&text)));
        if deflated.is_some() && !self.plain_lately(format) {
            part.drop_text();
        }
        Ok(deflated
            .as_ref()
            .and_then(|deflated| deflated.finish(live.as_bytes())))
    }

    /// The part a gzip scrape deflates or reuses: the newest, unless another
    /// scrape is deflating it and an older one is ready.
    fn gzip_part(&self, format: Format) -> Result<Arc<EncodedPart>, EncodeError> {
        let part = self.snapshot_part(format, false)?;
        let slot = slot_of(format);
        if part.deflated.get().is_some() || !part.deflating.swap(true, Ordering::AcqRel) {
            // Ready, or this scrape deflates it (in `render_gzip`).
            if let Ok(mut cache) = self.cache.lock() {
                cache[slot].gzipped = Some(part.clone());
            }
            return Ok(part);
        }
        let ready = self
            .cache
            .lock()
            .ok()
            .and_then(|cache| cache[slot].gzipped.clone())
            .filter(|p| p.deflated.get().is_some());
        Ok(ready.unwrap_or(part))
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

    /// The snapshot part for this scrape: cached for the current epoch,
    /// the previous one while another scrape encodes, or encoded here.
    /// With `need_text`, a cached part whose text was dropped counts as
    /// missing.
    fn snapshot_part(
        &self,
        format: Format,
        need_text: bool,
    ) -> Result<Arc<EncodedPart>, EncodeError> {
        let slot = slot_of(format);
        // Read the epoch before the snapshots: if a publish lands in between,
        // the newer data is cached under the older epoch and simply re-encoded
        // on the next scrape.
        let epoch = self.hub.epoch();
        // Decide under the cache lock, act after releasing it: encoding
        // takes the lock again to store its part, and a std mutex held
        // across that call deadlocked the scrape, then every later one
        // (each on a blocking thread, until the pool of 512 was full).
        let leader = match self.cache.lock() {
            Ok(mut cache) => {
                let s = &mut cache[slot];
                match &s.part {
                    Some((e, part))
                        if (*e == epoch || s.encoding) && (!need_text || part.text().is_some()) =>
                    {
                        return Ok(part.clone());
                    }
                    // Another scrape encodes this epoch, but its part would
                    // come too late for us: encode our own (rare: the first
                    // scrapes of a process, or a plain scrape just after
                    // gzip-only scraping dropped the text; see `render`).
                    _ if s.encoding => false,
                    _ => {
                        s.encoding = true;
                        true
                    }
                }
            }
            // A poisoned lock: encode without the one-encoder flag.
            Err(_) => true,
        };
        if !leader {
            return self.encode_part(format, epoch, need_text);
        }
        let guard = Encoding {
            cache: &self.cache,
            slot,
        };
        let part = self.encode_part(format, epoch, need_text);
        drop(guard);
        part
    }

    /// Encodes the snapshot part of `epoch` and caches it unless a newer
    /// one is cached. Without `need_text`, and with no plain scrape of
    /// `format` lately, the text is deflated while it is encoded and never
    /// held whole.
    fn encode_part(
        &self,
        format: Format,
        epoch: u64,
        need_text: bool,
    ) -> Result<Arc<EncodedPart>, EncodeError> {
        let slot = slot_of(format);
        let part = if need_text || self.plain_lately(format) {
            let hint = self.last_len[slot].load(Ordering::Relaxed);
            let text = encode_snapshots(&self.hub, format, hint)?;
            self.last_len[slot].store(text.len(), Ordering::Relaxed);
            Arc::new(EncodedPart::new(text))
        } else {
            let (deflated, len) = encode_snapshots_deflated(&self.hub, format)?;
            self.last_len[slot].store(len, Ordering::Relaxed);
            Arc::new(EncodedPart::deflated_only(deflated))
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let s = &mut cache[slot];
        if s.part.as_ref().is_none_or(|(e, _)| *e <= epoch) {
            s.part = Some((epoch, part.clone()));
        }
        Ok(part)
    }
}

/// Clears a slot's `encoding` flag when the encode ends, even by a panic,
/// so scrapes never keep getting an old part.
struct Encoding<'a> {
    /// The cache.
    cache: &'a Mutex<[Slot; 2]>,
    /// The slot being encoded.
    slot: usize,
}

impl Drop for Encoding<'_> {
    fn drop(&mut self) {
        // A poisoned lock still holds a valid cache.
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache[self.slot].encoding = false;
    }
}

/// The cache slot of a format.
fn slot_of(format: Format) -> usize {
    match format {
        Format::OpenMetrics => 0,
        Format::Classic => 1,
    }
}

/// Encoding failed: an encoder refused a value. Never served truncated.
#[derive(Debug, thiserror::Error)]
#[error("encoding the exposition failed")]
pub struct EncodeError(#[from] std::fmt::Error);

/// Encodes every snapshot of `hub` (no EOF marker). `size_hint` is the
/// expected length (the previous encode's), so the text is allocated once
/// at about its final size instead of doubling its way there.
pub fn encode_snapshots(
    hub: &Hub,
    format: Format,
    size_hint: usize,
) -> Result<String, EncodeError> {
    let mut out = Finisher::new(format, size_hint + size_hint / 32);
    encode_into(hub, format, &mut out)?;
    let mut text = out.into_text();
    // A hint that was too large (queues went away) would otherwise stay
    // allocated with the cached part until the next encode.
    if text.capacity() - text.len() > text.len() / 16 + 4096 {
        text.shrink_to_fit();
    }
    Ok(text)
}

/// Encodes every snapshot of `hub` like [`encode_snapshots`], deflating
/// the text as it is written; returns the deflated part (`None` if the
/// compressor failed) and the text's length.
pub fn encode_snapshots_deflated(
    hub: &Hub,
    format: Format,
) -> Result<(Option<gzip::Deflated>, usize), EncodeError> {
    let mut out = Finisher::new(format, SPILL_AT + SPILL_AT / 4);
    out.stream = Some(gzip::DeflateStream::new(SPILL_AT));
    encode_into(hub, format, &mut out)?;
    Ok(out.into_deflated())
}

/// Registers `hub`'s snapshots as one collector and encodes them into `out`.
fn encode_into(hub: &Hub, format: Format, out: &mut Finisher) -> Result<(), EncodeError> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector {
        snapshots: hub.snapshots(),
        format,
    }));
    prometheus_client::encoding::text::encode_registry(out, &registry)?;
    Ok(())
}

/// Text held before it is fed to a [`gzip::DeflateStream`]: large enough
/// that the compressor works on whole runs of lines, small beside the text.
const SPILL_AT: usize = 64 * 1024;

/// Adapts `prometheus-client` OpenMetrics output (without `# EOF`) to `format`.
pub fn finish(om: &str, format: Format) -> String {
    let mut out = Finisher::new(format, om.len());
    // Writing to a `String` cannot fail.
    let _ = out.write_str(om);
    out.into_text()
}

/// Adapts `prometheus-client` OpenMetrics output to a format while it is
/// written, line by line, so an encode holds only the finished text and
/// one line, never the whole OpenMetrics text besides (which doubled the
/// peak memory of a scrape: 6 MB of text at 10,000 queues).
///
/// What differs between the formats: descriptor lines (`# TYPE`, `# HELP`,
/// `# UNIT`, `# EOF`) for the classic format, and the gauge histogram type
/// that the crate lacks for OpenMetrics. Sample lines, label escaping and
/// numbers are always the crate's.
struct Finisher {
    /// The target format.
    format: Format,
    /// The finished text (with `stream`, only what was not yet deflated).
    out: String,
    /// Where finished text goes once `out` holds [`SPILL_AT`] bytes, for an
    /// encode that only gzip scrapes need.
    stream: Option<gzip::DeflateStream>,
    /// The line being written, until its newline.
    line: String,
    /// A classic `# HELP` line's text, held until its `# TYPE` line names
    /// the metric as the classic format spells it.
    pending_help: Option<String>,
    /// `# TYPE queue_message_age_seconds histogram`.
    hist_type: String,
    /// The age histogram's `_count` sample name.
    hist_count: String,
    /// The age histogram's `_sum` sample name.
    hist_sum: String,
}

impl Finisher {
    /// An empty text with room for `capacity` bytes.
    fn new(format: Format, capacity: usize) -> Self {
        Finisher {
            format,
            out: String::with_capacity(capacity),
            stream: None,
            line: String::with_capacity(256),
            pending_help: None,
            hist_type: format!("# TYPE {AGE_HISTOGRAM} histogram"),
            hist_count: format!("{AGE_HISTOGRAM}_count"),
            hist_sum: format!("{AGE_HISTOGRAM}_sum"),
        }
    }

    /// The finished text; a last line without a newline is finished too.
    fn into_text(mut self) -> String {
        self.end_line();
        self.out
    }

    /// The finished text deflated (`None` if the compressor failed), and
    /// its length; for a finisher made with a `stream`.
    fn into_deflated(mut self) -> (Option<gzip::Deflated>, usize) {
        self.end_line();
        let mut stream = self
            .stream
            .take()
            .unwrap_or_else(|| gzip::DeflateStream::new(self.out.len() / 16 + 64));
        let written = stream.write(self.out.as_bytes());
        let len = stream.len();
        (written.and_then(|()| stream.finish()), len)
    }

    /// Finishes a last line that has no newline.
    fn end_line(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.push_line(&line);
        }
    }

    /// Feeds the finished text to the stream once there is enough of it.
    fn spill(&mut self) {
        if let Some(stream) = &mut self.stream
            && self.out.len() >= SPILL_AT
        {
            // A failed compressor remembers it and `into_deflated` says so.
            let _ = stream.write(self.out.as_bytes());
            self.out.clear();
        }
    }

    /// Converts one complete line (without its newline) into `out`.
    fn push_line(&mut self, line: &str) {
        let out = &mut self.out;
        match self.format {
            Format::OpenMetrics => {
                if line == self.hist_type {
                    let _ = writeln!(out, "# TYPE {AGE_HISTOGRAM} gaugehistogram");
                } else if [&self.hist_count, &self.hist_sum].iter().any(|p| {
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
                    return;
                }
                if let Some(rest) = line.strip_prefix("# HELP ") {
                    self.pending_help = Some(rest.to_string());
                    return;
                }
                if let Some(rest) = line.strip_prefix("# TYPE ") {
                    let (name, metric_type) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
                    let (name, metric_type) = match metric_type {
                        "counter" => (format!("{name}_total"), "counter"),
                        "unknown" => (name.to_string(), "untyped"),
                        "info" => (format!("{name}_info"), "gauge"),
                        other => (name.to_string(), other),
                    };
                    if let Some(help) = self.pending_help.take() {
                        let text = help.split_once(' ').map(|(_, t)| t).unwrap_or("");
                        let _ = writeln!(out, "# HELP {name} {text}");
                    }
                    let _ = writeln!(out, "# TYPE {name} {metric_type}");
                    return;
                }
                out.push_str(line);
                out.push('\n');
            }
        }
    }
}

impl std::fmt::Write for Finisher {
    fn write_str(&mut self, mut s: &str) -> std::fmt::Result {
        while let Some(nl) = s.find('\n') {
            let (head, rest) = s.split_at(nl);
            if self.line.is_empty() {
                self.push_line(head);
            } else {
                self.line.push_str(head);
                let line = std::mem::take(&mut self.line);
                self.push_line(&line);
                // Keep the line buffer's allocation for the next line.
                self.line = line;
                self.line.clear();
            }
            s = &rest[1..];
        }
        self.line.push_str(s);
        self.spill();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{HubBuilder, SnapshotPublisher};
    use crate::snapshot::{AnyName, Snapshot, SourceKind};
    use gzip::tests::gunzip;

    /// The test source's poll interval.
    const INTERVAL: Duration = Duration::from_secs(1);

    /// An exposition over one Redis source `s`, and its publisher (each
    /// publish is a new snapshot epoch).
    fn one_source() -> (Exposition, SnapshotPublisher) {
        let mut builder = HubBuilder::default();
        let publisher = builder.add_source("s", SourceKind::Redis, INTERVAL, Arc::new(AnyName));
        (
            Exposition::new(builder.build(), Arc::new(Telemetry::new())),
            publisher,
        )
    }

    #[test]
    fn while_one_scrape_encodes_a_new_snapshot_others_get_the_previous_part() {
        let (exposition, publisher) = one_source();
        let first = exposition.snapshot_part(Format::Classic, true).unwrap();
        let again = exposition.snapshot_part(Format::Classic, true).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "one encode per snapshot");

        publisher.publish(Snapshot::initial("s", SourceKind::Redis, INTERVAL));
        // Another scrape is encoding the new snapshot: this one does not wait.
        exposition.cache.lock().unwrap()[1].encoding = true;
        let during = exposition.snapshot_part(Format::Classic, true).unwrap();
        assert!(Arc::ptr_eq(&first, &during));
        exposition.cache.lock().unwrap()[1].encoding = false;
        let after = exposition.snapshot_part(Format::Classic, true).unwrap();
        assert!(!Arc::ptr_eq(&first, &after), "the new snapshot is encoded");
        // The other format has its own slot.
        let om = exposition.snapshot_part(Format::OpenMetrics, true).unwrap();
        assert!(!Arc::ptr_eq(&om, &after));
    }

    #[test]
    fn a_scrape_while_the_first_encode_runs_encodes_its_own_without_deadlock() {
        let (exposition, publisher) = one_source();
        publisher.publish(Snapshot::initial("s", SourceKind::Redis, INTERVAL));
        // The first encode of the process is under way: nothing is cached yet.
        exposition.cache.lock().unwrap()[1].encoding = true;
        let exposition = Arc::new(exposition);
        let (done, finished) = std::sync::mpsc::channel();
        let scraper = exposition.clone();
        std::thread::spawn(move || {
            let plain = scraper.render_text(Format::Classic).map(|t| t.len());
            let gzip = scraper.render_gzip(Format::Classic).map(|g| g.is_some());
            let _ = done.send((plain, gzip));
        });
        // Before the fix this scrape held the cache lock while encoding,
        // which takes it again: it never returned, nor did any after it.
        let (plain, gzip) = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("a scrape during another's encode returned");
        assert!(plain.unwrap() > 0);
        assert!(gzip.unwrap());
        // The other scrape still owns the flag, and the cache still answers.
        assert!(exposition.cache.lock().unwrap()[1].encoding);
    }

    #[test]
    fn gzip_only_scraping_keeps_the_deflated_part_without_its_text() {
        let (exposition, publisher) = one_source();
        publisher.publish(Snapshot::initial("s", SourceKind::Redis, INTERVAL));

        // Prometheus asks for gzip: after deflating, only the blocks stay.
        let gz = gunzip(&exposition.render_gzip(Format::Classic).unwrap().unwrap());
        let part = exposition.cache.lock().unwrap()[1].part.clone().unwrap().1;
        assert!(part.deflated.get().is_some() && part.text().is_none());
        // A second gzip scrape of the same snapshot reuses the blocks.
        let again = gunzip(&exposition.render_gzip(Format::Classic).unwrap().unwrap());
        assert_eq!(strip_live(&again), strip_live(&gz));

        // A plain scrape of the same snapshot encodes the text again, the
        // same text, and from then on deflated parts keep it.
        let plain = exposition.render_text(Format::Classic).unwrap();
        assert_eq!(strip_live(&plain), strip_live(&gz));
        assert!(plain.contains("queue_exporter_source_up"), "{plain}");
        exposition.render_gzip(Format::Classic).unwrap().unwrap();
        let part = exposition.cache.lock().unwrap()[1].part.clone().unwrap().1;
        assert!(part.deflated.get().is_some() && part.text().is_some());
    }

    #[test]
    fn a_part_deflated_while_encoding_reads_the_same_as_the_plain_text() {
        // Enough queues that the text spills into the compressor many times,
        // with names that need escaping, in both formats.
        let (exposition, publisher) = one_source();
        let mut snapshot = Snapshot::initial("s", SourceKind::Redis, INTERVAL);
        snapshot.up = true;
        snapshot.polled = true;
        snapshot.queues = Arc::new(
            (0..3000)
                .map(|i| crate::snapshot::QueueSample {
                    depth: Some(i),
                    ready: Some(i / 2),
                    oldest_age_seconds: Some(i as f64 / 8.0),
                    ..crate::snapshot::QueueSample::named(format!("q\"{i}\n\\{i}"))
                })
                .collect(),
        );
        publisher.publish(snapshot);
        for format in [Format::Classic, Format::OpenMetrics] {
            let gz = gunzip(&exposition.render_gzip(format).unwrap().unwrap());
            let part = exposition.cache.lock().unwrap()[slot_of(format)]
                .part
                .clone()
                .unwrap()
                .1;
            assert!(part.text().is_none(), "gzip-only: no text was kept");
            assert!(gz.len() > 4 * SPILL_AT, "spilled: {} bytes", gz.len());
            let plain = encode_snapshots(&exposition.hub, format, 0).unwrap();
            assert_eq!(strip_live(&gz), plain);
            assert_eq!(
                exposition.last_len[slot_of(format)].load(Ordering::Relaxed),
                plain.len()
            );
        }
    }

    /// The snapshot part of a body: what comes before the live process
    /// metrics (those differ per scrape; `build_info` is registered first).
    fn strip_live(body: &str) -> String {
        let cut = body.find("# HELP queue_exporter_build_info").unwrap();
        body[..cut].to_string()
    }

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
