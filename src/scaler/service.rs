//! The tonic implementation of KEDA's `ExternalScaler` service.
//!
//! Every answer is computed synchronously from the latest snapshots (no I/O,
//! no waiting), so no handler blocks. Push streams wait only on the hub's
//! change notification and on shutdown; they end when the client goes away
//! (tonic drops them) or when shutdown fires.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use futures_util::Stream;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::watch;
use tonic::{Code, Request, Response, Status};

use crate::config::ScalerConfig;
use crate::hub::Hub;
use crate::scaler::held::{self, HeldAnswers};
use crate::scaler::metadata::{self, ScalerQuery};
use crate::scaler::names;
use crate::scaler::proto::external_scaler_server::ExternalScaler;
use crate::scaler::proto::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};
use crate::scaler::query::{self, QueryError, Reading};
use crate::scaler::record;
use crate::shutdown::Shutdown;
use crate::telemetry::{GrpcLabels, MethodLabels, Telemetry};

/// The gRPC request header that marks a call as `queue-exporter ask`'s dry
/// run (`Caller::Ask`). KEDA never sends it.
pub const ASK_HEADER: &str = "x-queue-exporter-ask";

/// Who made a unary call, which decides what it leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// KEDA, or any client that does not say it is `ask`: its answers are
    /// recorded (`/scalers`, `queue_exporter_scaler_desired_replicas`) and
    /// counted (`queue_exporter_grpc_requests_total`, which
    /// `QueueExporterScalerErrors` reads).
    Keda,
    /// `queue-exporter ask` ([`ASK_HEADER`]): answered the same way, but a
    /// dry run leaves no trace: neither recorded nor counted, so trying
    /// metadata pages no one and overwrites no ScaledObject's decision.
    Ask,
}

impl Caller {
    /// The caller of `request`.
    fn of<T>(request: &Request<T>) -> Caller {
        if request.metadata().contains_key(ASK_HEADER) {
            Caller::Ask
        } else {
            Caller::Keda
        }
    }
}

/// A boxed server stream, as tonic wants for streaming responses.
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The `ExternalScaler` service: a reader of the hub.
#[derive(Debug, Clone)]
pub struct Scaler {
    /// Shared state; streams keep a clone after the RPC returns.
    inner: Arc<Inner>,
}

/// What every handler and stream needs.
#[derive(Debug)]
struct Inner {
    /// The snapshots, the only data source.
    hub: Hub,
    /// Staleness limits; a config reload replaces them.
    config: watch::Receiver<ScalerConfig>,
    /// RPC counters, durations and the open-stream gauge.
    telemetry: Arc<Telemetry>,
    /// Ends open streams.
    shutdown: Shutdown,
    /// Parsed metadata by map, so a ScaledObject's glob is compiled once,
    /// not on every request.
    parsed: QueryCache,
    /// The RPC metrics' handles by method and code.
    handles: RpcHandles,
    /// Queue positions by name per snapshot, shared by all queries.
    indexes: query::NameIndexes,
    /// The `WaitTime` answers each trigger was given lately: the replicas
    /// the HPA holds for it ([`held`]).
    held: HeldAnswers,
}

/// The request counter and duration histogram of each (method, code), so a
/// request neither builds label strings nor looks them up in the families
/// (a measurable share of a `GetMetrics` under load).
#[derive(Debug, Default)]
struct RpcHandles(std::sync::RwLock<HashMap<(&'static str, Code), RpcMetrics>>);

/// One (method, code)'s request counter and duration histogram.
type RpcMetrics = (Counter, Histogram);

impl RpcHandles {
    /// The handles for `method` and `code`, made on first use.
    fn get(&self, telemetry: &Telemetry, method: &'static str, code: Code) -> RpcMetrics {
        // A poisoned lock only means a panic elsewhere mid-insert; the map
        // of handles is still valid.
        if let Some(h) = self
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(method, code))
        {
            return h.clone();
        }
        let handles = (
            telemetry
                .grpc_requests
                .get_or_create(&GrpcLabels {
                    method: method.to_string(),
                    code: code_name(code).to_string(),
                })
                .clone(),
            telemetry
                .grpc_duration
                .get_or_create(&MethodLabels {
                    method: method.to_string(),
                })
                .clone(),
        );
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert((method, code), handles.clone());
        handles
    }
}

/// Parsed queries by metadata map. KEDA sends the same few maps over and
/// over; the source names they are checked against change only when a
/// config reload replaces the hub's sources, which empties the cache, so a
/// successful parse stays valid until then. Errors are not kept.
#[derive(Debug, Default)]
struct QueryCache {
    /// Entries by an order-independent hash of the map, and the hub
    /// generation (set of sources) they were checked against.
    entries: std::sync::Mutex<Cached>,
}

/// What [`QueryCache`] holds behind its lock.
#[derive(Debug, Default)]
struct Cached {
    /// The hub generation the entries were checked against.
    generation: u64,
    /// The entries.
    map: CacheMap,
    /// Bytes of metadata held (keys and values), bounded by
    /// [`QueryCache::MAX_BYTES`].
    bytes: usize,
}

/// Metadata maps and their queries, bucketed by [`QueryCache::hash`].
type CacheMap = HashMap<u64, Vec<(HashMap<String, String>, Arc<ScalerQuery>)>>;

impl QueryCache {
    /// Entries kept at most; beyond it the cache starts over (a bound
    /// against a client sending endless distinct maps).
    const MAX_ENTRIES: usize = 10_000;

    /// Metadata bytes kept at most: with maps of up to
    /// [`metadata::MAX_TOTAL_BYTES`] each, the entry count alone would
    /// allow hundreds of MiB.
    const MAX_BYTES: usize = 16 << 20;

    /// A hash of `meta` that does not depend on its iteration order.
    fn hash(meta: &HashMap<String, String>) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let build = BuildHasherDefault::<std::hash::DefaultHasher>::default();
        meta.iter()
            .map(|pair| build.hash_one(pair))
            .fold(meta.len() as u64, u64::wrapping_add)
    }

    /// The cached query for `meta` checked against the hub's sources of
    /// `generation`, or `parse`d and cached.
    fn get_or_parse(
        &self,
        meta: &HashMap<String, String>,
        generation: u64,
        parse: impl FnOnce() -> Result<ScalerQuery, Status>,
    ) -> Result<Arc<ScalerQuery>, Status> {
        let hash = Self::hash(meta);
        // A poisoned lock only means another handler panicked mid-insert;
        // the map is still a valid cache.
        let lookup = |cached: &Cached| {
            (cached.generation == generation)
                .then(|| cached.map.get(&hash))
                .flatten()
                .and_then(|b| b.iter().find(|(m, _)| m == meta))
                .map(|(_, q)| q.clone())
        };
        if let Some(q) = lookup(&self.entries.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(q);
        }
        let query = Arc::new(parse()?);
        let size = metadata::size_bytes(meta);
        let mut cached = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if cached.generation != generation
            || cached.map.len() >= Self::MAX_ENTRIES
            || cached.bytes + size > Self::MAX_BYTES
        {
            *cached = Cached {
                generation,
                ..Cached::default()
            };
        }
        cached.bytes += size;
        cached
            .map
            .entry(hash)
            .or_default()
            .push((meta.clone(), query.clone()));
        Ok(query)
    }
}

impl Scaler {
    /// Builds the service over `hub`; `config` follows reloads.
    pub fn new(
        hub: Hub,
        config: watch::Receiver<ScalerConfig>,
        telemetry: Arc<Telemetry>,
        shutdown: Shutdown,
    ) -> Self {
        Scaler {
            inner: Arc::new(Inner {
                hub,
                config,
                telemetry,
                shutdown,
                parsed: QueryCache::default(),
                handles: RpcHandles::default(),
                indexes: query::NameIndexes::default(),
                held: HeldAnswers::default(),
            }),
        }
    }
}

impl Inner {
    /// Validates metadata, including what the config can tell (`source`).
    fn parse(&self, meta: &HashMap<String, String>) -> Result<Arc<ScalerQuery>, Status> {
        // Read before the check, so a set installed meanwhile makes the
        // entry stale rather than wrongly current.
        let generation = self.hub.generation();
        self.parsed.get_or_parse(meta, generation, || {
            let query = metadata::parse_with(meta, &self.hub.libraries())
                .map_err(|e| Status::invalid_argument(bounded(e.to_string())))?;
            query::check_static(&query, &self.hub.snapshots()).map_err(to_status)?;
            Ok(query)
        })
    }

    /// Parses a stream's metadata and counts the opening under `method`.
    fn parse_for_stream(
        &self,
        method: &'static str,
        meta: &HashMap<String, String>,
    ) -> Result<Arc<ScalerQuery>, Status> {
        let parsed = self.parse(meta);
        let code = parsed.as_ref().map_or_else(Status::code, |_| Code::Ok);
        self.record(method, code, None);
        parsed
    }

    /// The query's value from the latest snapshots.
    fn read(&self, query: &ScalerQuery) -> Result<Reading, Status> {
        let snapshots = self.hub.snapshots();
        query::evaluate_with(
            query,
            &snapshots,
            &self.indexes,
            &self.config.borrow(),
            SystemTime::now(),
        )
        .map_err(to_status)
    }

    /// Counts one RPC by method and code, and times it if it was unary.
    fn record(&self, method: &'static str, code: Code, started: Option<Instant>) {
        let (requests, duration) = self.handles.get(&self.telemetry, method, code);
        requests.inc();
        if let Some(started) = started {
            duration.observe(started.elapsed().as_secs_f64());
        }
    }

    /// Counts a finished unary RPC (unless `ask` made it) and wraps its answer.
    fn unary<T>(
        &self,
        method: &'static str,
        caller: Caller,
        started: Instant,
        result: Result<T, Status>,
    ) -> Result<Response<T>, Status> {
        if caller == Caller::Keda {
            let code = result.as_ref().map_or_else(Status::code, |_| Code::Ok);
            self.record(method, code, Some(started));
        }
        result.map(Response::new)
    }

    /// Registers an open stream in the gauge until the returned guard drops.
    fn open_stream(&self, method: &'static str) -> OpenStream {
        let gauge = self
            .telemetry
            .scaler_streams
            .get_or_create(&MethodLabels {
                method: method.to_string(),
            })
            .clone();
        gauge.inc();
        OpenStream { gauge }
    }
}

/// Keeps `queue_exporter_scaler_streams{method}` counting one stream for as
/// long as it is alive, whichever way it ends.
#[derive(Debug)]
struct OpenStream {
    /// The method's gauge.
    gauge: Gauge,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// `namespace/name` of the ScaledObject, for logs.
fn who(r: &ScaledObjectRef) -> String {
    format!("{}/{}", r.namespace, r.name)
}

/// Maps a query failure to its gRPC status.
fn to_status(e: QueryError) -> Status {
    match e {
        QueryError::InvalidArgument(m) => Status::invalid_argument(bounded(m)),
        QueryError::NotFound(m) => Status::not_found(bounded(m)),
        QueryError::Unavailable(m) => Status::unavailable(bounded(m)),
    }
}

/// Longest error message sent, in bytes.
const MAX_MESSAGE_BYTES: usize = 1024;

/// An error message cut to [`MAX_MESSAGE_BYTES`]. Messages travel in the
/// `grpc-message` header, percent-encoded; one echoing a huge metadata value
/// overflowed HTTP/2's header limit and reached the client as a protocol
/// error instead of its real code (found by `tests/properties.rs`).
fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// The canonical gRPC code name, the `code` label.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A count rounded up for the int64 fields; the float fields carry the exact value.
fn ceil_i64(v: f64) -> i64 {
    // `as` saturates at the i64 range, which only values beyond any real queue reach.
    v.ceil() as i64
}

/// The spec KEDA turns into the HPA's metric: exactly one metric.
fn spec_for(query: &ScalerQuery) -> GetMetricSpecResponse {
    GetMetricSpecResponse {
        metric_specs: vec![MetricSpec {
            metric_name: names::metric_name(query),
            target_size: ceil_i64(query.target),
            target_size_float: query.target,
        }],
    }
}

/// Logs one decision at debug level.
fn log_decision(
    method: &'static str,
    caller: Caller,
    who: &str,
    query: &ScalerQuery,
    result: &Result<Reading, Status>,
) {
    match result {
        Ok(r) => tracing::debug!(
            method,
            ask = caller == Caller::Ask,
            scaled_object = who,
            queue = query.queue.text(),
            mode = query.mode.as_str(),
            value = r.value,
            target = query.target,
            activation = query.activation,
            active = r.is_active(query),
            model = r.wait.map(|d| d.bound.as_str()),
            backlog = r.wait.map(|d| d.inputs.backlog),
            oldest_age_seconds = r.wait.map(|d| d.inputs.oldest_age),
            arrival_rate = r.wait.map(|d| d.inputs.arrival_rate),
            service_time_seconds = r.wait.map(|d| d.inputs.service_time),
            service_time_from = r.wait.map(|d| d.inputs.service_from.as_str()),
            source = %r.source,
            matched = r.matched,
            data_age_seconds = r.data_age.as_secs_f64(),
            "scaler decision"
        ),
        Err(s) => tracing::debug!(
            method,
            ask = caller == Caller::Ask,
            scaled_object = who,
            queue = query.queue.text(),
            mode = query.mode.as_str(),
            target = query.target,
            code = code_name(s.code()),
            error = s.message(),
            "scaler decision: no value"
        ),
    }
}

#[tonic::async_trait]
impl ExternalScaler for Scaler {
    async fn is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        const METHOD: &str = "IsActive";
        let started = Instant::now();
        let caller = Caller::of(&request);
        let r = request.into_inner();
        let result = match self.inner.parse(&r.scaler_metadata) {
            Ok(query) => {
                let reading = self.inner.read(&query);
                log_decision(METHOD, caller, &who(&r), &query, &reading);
                if caller == Caller::Keda {
                    record::record(&self.inner.telemetry, METHOD, &r, &query, &reading);
                }
                reading.map(|v| IsActiveResponse {
                    result: v.is_active(&query),
                })
            }
            Err(status) => {
                if caller == Caller::Keda {
                    record::record_refused(&self.inner.telemetry, METHOD, &r, &status);
                }
                Err(status)
            }
        };
        self.inner.unary(METHOD, caller, started, result)
    }

    type StreamIsActiveStream = BoxStream<IsActiveResponse>;

    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        const METHOD: &str = "StreamIsActive";
        let r = request.into_inner();
        let query = self.inner.parse_for_stream(METHOD, &r.scaler_metadata)?;
        let state = ActiveWatch {
            _open: self.inner.open_stream(METHOD),
            changes: Changes::new(&self.inner),
            inner: self.inner.clone(),
            who: who(&r),
            query,
            last: None,
            started: false,
            last_error: None,
        };
        tracing::debug!(scaled_object = %state.who, queue = state.query.queue.text(), "StreamIsActive opened");
        let stream = futures_util::stream::unfold(state, |mut st| async move {
            let item = st.next_activation().await?;
            Some((item, st))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        const METHOD: &str = "GetMetricSpec";
        let started = Instant::now();
        let caller = Caller::of(&request);
        let result = self
            .inner
            .parse(&request.get_ref().scaler_metadata)
            .map(|q| spec_for(&q));
        self.inner.unary(METHOD, caller, started, result)
    }

    async fn get_metrics(
        &self,
        request: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        const METHOD: &str = "GetMetrics";
        let started = Instant::now();
        let caller = Caller::of(&request);
        let req = request.into_inner();
        let result = get_metrics(&self.inner, caller, &req);
        self.inner.unary(METHOD, caller, started, result)
    }

    type StreamMetricSpecStream = BoxStream<GetMetricSpecResponse>;

    async fn stream_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        const METHOD: &str = "StreamMetricSpec";
        let r = request.into_inner();
        let query = self.inner.parse_for_stream(METHOD, &r.scaler_metadata)?;
        let state = SpecWatch {
            _open: self.inner.open_stream(METHOD),
            changes: Changes::new(&self.inner),
            query,
            last: None,
        };
        let stream = futures_util::stream::unfold(state, |mut st| async move {
            let item = st.next_spec().await?;
            Some((Ok(item), st))
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// `GetMetrics`: one value, named like the spec, both fields set.
fn get_metrics(
    inner: &Inner,
    caller: Caller,
    req: &GetMetricsRequest,
) -> Result<GetMetricsResponse, Status> {
    const METHOD: &str = "GetMetrics";
    let r = req
        .scaled_object_ref
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("scaledObjectRef: required"))?;
    let query = inner.parse(&r.scaler_metadata).inspect_err(|status| {
        if caller == Caller::Keda {
            record::record_refused(&inner.telemetry, METHOD, r, status);
        }
    })?;
    let name = names::metric_name(&query);
    let asked = names::normalize_requested(&req.metric_name);
    if !asked.is_empty() && asked != name {
        return Err(Status::invalid_argument(bounded(format!(
            "metricName: {:?} is not this trigger's metric; its metadata gives {name:?} (optionally prefixed sN-)",
            req.metric_name
        ))));
    }
    let reading = inner.read(&query).map(|reading| {
        let trigger = held::Trigger {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            metric: name.clone(),
        };
        let now = SystemTime::now();
        let window = held::DEFAULT_WINDOW;
        let reaction = query.wait.map(|p| p.reaction_time).unwrap_or_default();
        let held = inner.held.held(&trigger, now, window, reaction);
        let reading = query::hold(&query, reading, held);
        // `ask`'s dry runs are no answer the HPA acted on.
        if caller == Caller::Keda && reading.wait.is_some() {
            inner.held.note(&trigger, now, reading.value, window);
        }
        reading
    });
    log_decision(METHOD, caller, &who(r), &query, &reading);
    if caller == Caller::Keda {
        record::record(&inner.telemetry, METHOD, r, &query, &reading);
    }
    let value = reading?.value;
    Ok(GetMetricsResponse {
        metric_values: vec![MetricValue {
            metric_name: name,
            metric_value: ceil_i64(value),
            metric_value_float: value,
        }],
    })
}

/// What wakes a stream: a snapshot publish after it opened, or shutdown.
struct Changes {
    /// Wakes on every snapshot publish.
    published: watch::Receiver<u64>,
    /// Ends the stream.
    shutdown: Shutdown,
}

impl Changes {
    /// Changes from this moment on.
    fn new(inner: &Inner) -> Self {
        let mut published = inner.hub.subscribe();
        published.borrow_and_update();
        Changes {
            published,
            shutdown: inner.shutdown.clone(),
        }
    }

    /// Whether shutdown has begun (the stream must end).
    fn is_shutdown(&self) -> bool {
        self.shutdown.is_shutdown()
    }

    /// Waits for the next publish; false when the stream must end.
    async fn next(&mut self) -> bool {
        tokio::select! {
            biased;
            () = self.shutdown.recv() => false,
            changed = self.published.changed() => changed.is_ok(),
        }
    }
}

/// State of one `StreamIsActive` stream.
struct ActiveWatch {
    /// Counts this stream in the gauge while it lives.
    _open: OpenStream,
    /// Wakes it, or ends it.
    changes: Changes,
    /// Handlers' shared state.
    inner: Arc<Inner>,
    /// `namespace/name`, for logs.
    who: String,
    /// The trigger.
    query: Arc<ScalerQuery>,
    /// The last known activity; `None` until a value is known. Unknown
    /// readings leave it alone, so a blip does not cause a repeated `true`.
    last: Option<bool>,
    /// Whether the opening evaluation has run.
    started: bool,
    /// The last error logged, so a lasting problem is logged once.
    last_error: Option<String>,
}

impl ActiveWatch {
    /// Waits for the next inactive→active transition (or the opening state
    /// being active); `None` ends the stream.
    async fn next_activation(&mut self) -> Option<Result<IsActiveResponse, Status>> {
        loop {
            if self.changes.is_shutdown() || (self.started && !self.changes.next().await) {
                return None;
            }
            self.started = true;
            let reading = self.inner.read(&self.query);
            match &reading {
                Ok(r) => {
                    self.last_error = None;
                    let active = r.is_active(&self.query);
                    let was = self.last.replace(active);
                    if was != Some(active) {
                        log_decision(
                            "StreamIsActive",
                            Caller::Keda,
                            &self.who,
                            &self.query,
                            &reading,
                        );
                    }
                    if active && was != Some(true) {
                        return Some(Ok(IsActiveResponse { result: true }));
                    }
                }
                // The stream stays open: the queue may appear or the source
                // recover. Log each new problem once, not on every publish.
                Err(e) if self.last_error.as_deref() != Some(e.message()) => {
                    log_decision(
                        "StreamIsActive",
                        Caller::Keda,
                        &self.who,
                        &self.query,
                        &reading,
                    );
                    self.last_error = Some(e.message().to_string());
                }
                Err(_) => {}
            }
        }
    }
}

/// State of one `StreamMetricSpec` stream.
struct SpecWatch {
    /// Counts this stream in the gauge while it lives.
    _open: OpenStream,
    /// Wakes it, or ends it.
    changes: Changes,
    /// The trigger.
    query: Arc<ScalerQuery>,
    /// The spec last sent; `None` before the first.
    last: Option<GetMetricSpecResponse>,
}

impl SpecWatch {
    /// The spec on open, then each time it differs from the last one sent;
    /// `None` ends the stream. The spec is derived from the metadata only, so
    /// today it is sent once; re-checking on every publish keeps the contract
    /// if it ever depends on the data.
    async fn next_spec(&mut self) -> Option<GetMetricSpecResponse> {
        loop {
            if self.changes.is_shutdown() || (self.last.is_some() && !self.changes.next().await) {
                return None;
            }
            let spec = spec_for(&self.query);
            if self.last.as_ref() != Some(&spec) {
                self.last = Some(spec.clone());
                return Some(spec);
            }
        }
    }
}

#[cfg(test)]
mod query_cache_tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn parse(m: &HashMap<String, String>) -> Result<ScalerQuery, Status> {
        metadata::parse_known(m).map_err(|e| Status::invalid_argument(e.to_string()))
    }

    #[test]
    fn a_map_is_parsed_once_whatever_its_order_and_errors_are_not_kept() {
        let cache = QueryCache::default();
        let a = meta(&[("queue", "jobs:*"), ("mode", "Age"), ("value", "60")]);
        let first = cache.get_or_parse(&a, 0, || parse(&a)).unwrap();
        let again = cache
            .get_or_parse(&a.clone(), 0, || panic!("parsed twice"))
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let other = meta(&[("queue", "jobs:*"), ("mode", "Age"), ("value", "61")]);
        let third = cache.get_or_parse(&other, 0, || parse(&other)).unwrap();
        assert!(!Arc::ptr_eq(&first, &third));
        let bad = meta(&[("queue", "q"), ("mode", "Depth")]);
        assert!(cache.get_or_parse(&bad, 0, || parse(&bad)).is_err());
        assert!(cache.get_or_parse(&bad, 0, || parse(&bad)).is_err());
    }

    #[test]
    fn a_new_set_of_sources_empties_the_cache() {
        let cache = QueryCache::default();
        let a = meta(&[("queue", "q"), ("source", "main")]);
        let first = cache.get_or_parse(&a, 0, || parse(&a)).unwrap();
        // After a reload the map is checked again (the source may be gone).
        let checked = std::cell::Cell::new(false);
        let again = cache
            .get_or_parse(&a, 1, || {
                checked.set(true);
                parse(&a)
            })
            .unwrap();
        assert!(checked.get() && !Arc::ptr_eq(&first, &again));
        let cached = cache.entries.lock().unwrap();
        assert_eq!((cached.generation, cached.map.len()), (1, 1));
    }

    #[test]
    fn the_cache_is_bounded_in_bytes() {
        let cache = QueryCache::default();
        let big = "q".repeat(4000);
        for i in 0..(QueryCache::MAX_BYTES / 4000 + 100) {
            let m = meta(&[("queue", &format!("{big}{i}"))]);
            cache.get_or_parse(&m, 0, || parse(&m)).unwrap();
        }
        let cached = cache.entries.lock().unwrap();
        assert!(cached.bytes <= QueryCache::MAX_BYTES, "{}", cached.bytes);
        assert!(!cached.map.is_empty());
    }
}

#[cfg(test)]
mod message_tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "\u{2ee5e}".repeat(1000);
        let cut = bounded(format!("scalerMetadata.source: no source named {long:?}"));
        assert!(cut.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…') && cut.starts_with("scalerMetadata.source"));
        assert_eq!(bounded("short".into()), "short");
    }
}
