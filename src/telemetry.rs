//! The exporter's own instrumentation: logging setup, and process-level
//! metrics that do not come from a snapshot (build info, gRPC traffic, the
//! scaler's last answer per ScaledObject in [`decisions`]).

pub mod decisions;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::config::{LogConfig, LogFormat};

/// Labels of `queue_exporter_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version.
    pub version: String,
}

/// Labels of per-RPC counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    /// The RPC name, e.g. `GetMetrics`.
    pub method: String,
    /// The gRPC status code name, e.g. `OK`, `NOT_FOUND`.
    pub code: String,
}

/// Labels keyed by RPC name only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// The RPC name.
    pub method: String,
}

/// Process-level metrics, rendered live on every scrape after the snapshot part.
#[derive(Debug)]
pub struct Telemetry {
    /// Holds every family below.
    pub registry: Registry,
    /// `queue_exporter_grpc_requests_total{method,code}`.
    pub grpc_requests: Family<GrpcLabels, Counter>,
    /// `queue_exporter_grpc_request_duration_seconds{method}`.
    pub grpc_duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
    /// `queue_exporter_scaler_streams{method}`: streams open now.
    pub scaler_streams: Family<MethodLabels, Gauge>,
    /// The scaler's last answers per ScaledObject, and their gauges.
    pub decisions: decisions::Decisions,
    /// `queue_exporter_tasks`: tokio tasks alive now, to see leaks under load.
    tasks: Gauge,
    /// `queue_exporter_open_fds`: file descriptors open now (Linux).
    open_fds: Gauge,
    /// `queue_exporter_config_reload_success`: 1 if the last config load
    /// (startup or reload) was applied, 0 if it was refused.
    config_reload_success: Gauge,
    /// `queue_exporter_config_last_reload_success_timestamp_seconds`: when
    /// a config was last applied (startup counts, as in Prometheus).
    config_reload_timestamp: Gauge,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

impl Telemetry {
    /// Registers every process-level family.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        registry.register(
            "queue_exporter_build_info",
            "Always 1; the version label tells which build is running",
            build,
        );
        let grpc_requests = Family::<GrpcLabels, Counter>::default();
        registry.register(
            "queue_exporter_grpc_requests",
            "KEDA external-scaler RPCs answered, by method and status code",
            grpc_requests.clone(),
        );
        let grpc_duration = Family::<MethodLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.0001, 4.0, 9))) as fn() -> Histogram,
        );
        registry.register(
            "queue_exporter_grpc_request_duration_seconds",
            "Time to answer a unary KEDA external-scaler RPC",
            grpc_duration.clone(),
        );
        let scaler_streams = Family::<MethodLabels, Gauge>::default();
        registry.register(
            "queue_exporter_scaler_streams",
            "KEDA push streams open now, by method",
            scaler_streams.clone(),
        );
        let decisions = decisions::Decisions::default();
        decisions.register(&mut registry);
        let tasks = Gauge::default();
        registry.register(
            "queue_exporter_tasks",
            "Async tasks alive now (poll loops, listeners, connections, streams)",
            tasks.clone(),
        );
        let open_fds = Gauge::default();
        registry.register(
            "queue_exporter_open_fds",
            "File descriptors the process has open now",
            open_fds.clone(),
        );
        let config_reload_success = Gauge::default();
        registry.register(
            "queue_exporter_config_reload_success",
            "1 if the last configuration load (startup or SIGHUP) was applied, 0 if it was refused and the previous one kept",
            config_reload_success.clone(),
        );
        let config_reload_timestamp = Gauge::default();
        registry.register(
            "queue_exporter_config_last_reload_success_timestamp_seconds",
            "Unix time the configuration was last applied (startup or SIGHUP)",
            config_reload_timestamp.clone(),
        );
        Telemetry {
            registry,
            grpc_requests,
            grpc_duration,
            scaler_streams,
            decisions,
            tasks,
            open_fds,
            config_reload_success,
            config_reload_timestamp,
        }
    }

    /// Records a configuration applied (at startup or by a reload) at `at`.
    pub fn config_applied(&self, at: std::time::SystemTime) {
        let secs = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.config_reload_success.set(1);
        self.config_reload_timestamp.set(secs);
    }

    /// Records a reload that was refused (the previous config stays).
    pub fn config_refused(&self) {
        self.config_reload_success.set(0);
    }

    /// Reads the process gauges, and drops the scaler decisions KEDA
    /// stopped asking about; called before each scrape renders them.
    pub fn refresh(&self) {
        self.decisions.sweep(std::time::SystemTime::now());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            self.tasks
                .set(i64::try_from(rt.metrics().num_alive_tasks()).unwrap_or(i64::MAX));
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds
                .set(i64::try_from(dir.count()).unwrap_or(i64::MAX));
        }
    }
}

/// Libraries that log at ERROR on every failed connection attempt (lapin's
/// I/O loop, rustls' platform verifier): the source reports the same failure
/// itself, once per outage, with its reason. Silenced unless `RUST_LOG` is set
/// (`RUST_LOG=info,lapin=debug` brings them back).
const NOISY_LIBRARIES: [&str; 2] = ["lapin=off", "rustls_platform_verifier=off"];

/// Installs the global `tracing` subscriber. `RUST_LOG` wins over `log.level`.
pub fn init_logging(config: &LogConfig) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        let level = tracing_subscriber::EnvFilter::try_new(&config.level)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        NOISY_LIBRARIES.iter().fold(level, |f, d| match d.parse() {
            Ok(directive) => f.add_directive(directive),
            Err(_) => f,
        })
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour_logs())
        .with_writer(std::io::stderr);
    // A second init (tests) is harmless; ignore it.
    let _ = match config.format {
        LogFormat::Json => builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(ListsAsArrays(tracing_subscriber::fmt::format().json()))
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Fields that hold a list, logged as [`LogList`]. `tracing` can record a
/// field only as a number, a boolean or text, so in JSON logs these are
/// turned back into arrays by `ListsAsArrays`, for log pipelines to
/// query (`kept[0]`) rather than re-parse a string.
pub const LIST_FIELDS: [&str; 4] = ["kept", "started", "stopped", "need_restart"];

/// A list of names as a log field (one of [`LIST_FIELDS`]): JSON text
/// (`["main","rabbit"]`), readable in text logs and made an array in JSON logs.
pub struct LogList<'a, T: AsRef<str>>(pub &'a [T]);

impl<T: AsRef<str>> std::fmt::Display for LogList<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `["main", "rabbit"]`: JSON, spaced as Rust's `{:?}` of a list.
        f.write_str("[")?;
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            // A string always serializes.
            f.write_str(&serde_json::to_string(item.as_ref()).unwrap_or_default())?;
        }
        f.write_str("]")
    }
}

/// The JSON event format, with each [`LIST_FIELDS`] field that holds a
/// [`LogList`] written as a JSON array instead of a string.
struct ListsAsArrays<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for ListsAsArrays<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let has_list = event
            .metadata()
            .fields()
            .iter()
            .any(|f| LIST_FIELDS.contains(&f.name()));
        if !has_list {
            return self.0.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.0.format_event(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut line),
            event,
        )?;
        let Ok(mut json) = serde_json::from_str::<serde_json::Value>(&line) else {
            return writer.write_str(&line);
        };
        if let Some(fields) = json.get_mut("fields").and_then(|f| f.as_object_mut()) {
            for name in LIST_FIELDS {
                let parsed = fields
                    .get(name)
                    .and_then(|v| v.as_str())
                    .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
                    .filter(serde_json::Value::is_array);
                if let Some(list) = parsed {
                    fields.insert(name.to_string(), list);
                }
            }
        }
        writeln!(writer, "{json}")
    }
}

/// Colour only on a terminal, and never when `NO_COLOR` is set to anything
/// (<https://no-color.org>): `kubectl logs` and CI logs show raw escapes.
fn colour_logs() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
