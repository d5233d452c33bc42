//! The `queue-exporter` binary: parses the command line and calls the library.

#![forbid(unsafe_code)]
// Outside tests, a failure is an error value or a proven-impossible case
// with a comment and an `allow`, never an unwrap, expect or panic.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use queue_exporter::config::{Config, LoadOptions, LogFormat};
use queue_exporter::{app, telemetry};

/// jemalloc instead of glibc malloc, tuned in [`tune_allocator`]. With
/// glibc, each poll's and scrape's transient buffers (pipelined replies,
/// 6 MB of encoded `/metrics` text at 10,000 queues) were left fragmented
/// over the tokio workers' arenas and mostly never returned: RSS grew for
/// minutes (10,000 Redis keys: 49 to 103 MB in 2 minutes). Measured, same
/// binary otherwise, 10,000 Redis keys: glibc 91 MB median and rising,
/// mimalloc 79 MB (36 MB only with environment variables it has no safe
/// API for), jemalloc as tuned here 32 MB and flat (issue 11, target 7).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Makes jemalloc return freed pages to the OS at once instead of after its
/// default 10 s decay. The exporter's memory is mostly transient and comes
/// back every poll (every second by default), so with a decay the freed
/// pages of one poll were still held when the next poll allocated anew:
/// 64 MB instead of 32 MB at 10,000 Redis keys. The cost is CPU: returning
/// pages at once made a poll of 10,000 keys ~25% slower (72 vs 57 ms, on a
/// loaded 2-core machine). `_RJEM_MALLOC_CONF` in the environment wins, e.g.
/// `dirty_decay_ms:1000,muzzy_decay_ms:0` trades memory back (49 MB). Must
/// run before other threads start (arenas made later take the defaults
/// set here).
fn tune_allocator() {
    use tikv_jemalloc_ctl::{Access, AsName};
    if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
        return;
    }
    for name in [
        &b"arenas.dirty_decay_ms\0"[..],
        b"arenas.muzzy_decay_ms\0",
        b"arena.0.dirty_decay_ms\0",
        b"arena.0.muzzy_decay_ms\0",
    ] {
        // Best effort: jemalloc works as before if a setting is refused.
        let _ = name.name().write(0isize);
    }
}

/// Work-queue metrics for Prometheus and a KEDA external scaler.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// YAML config file; without one, watches the local Redis (and RabbitMQ if it answers).
    #[arg(long, short, global = true, env = "QUEUE_EXPORTER_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides listen.http.
    #[arg(long, global = true)]
    listen_http: Option<SocketAddr>,
    /// Overrides log.format.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    /// Overrides log.level (a tracing filter such as `debug`).
    #[arg(long, global = true)]
    log_level: Option<String>,
    /// What to do; default: serve.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve /metrics and the gRPC scaler (the default).
    Serve,
    /// Validate the config; with --connect, also poll every source once.
    Check {
        /// Also connect to every source.
        #[arg(long)]
        connect: bool,
    },
    /// Discover and poll once, print the exposition to stdout, and exit.
    Once {
        /// Also measure the age histograms of timestamp zsets
        /// (`queue_message_age_seconds`), which most of a first poll's
        /// Redis work goes to; without it their series are absent.
        #[arg(long)]
        histograms: bool,
    },
    /// Look at a Redis once (read-only) and print, as YAML, the config zero
    /// config would use: one `- preset:` entry per queue library found, and
    /// the plain keys (those sharing a prefix as one pattern).
    Discover {
        /// The Redis to look at.
        #[arg(long, conflicts_with = "source")]
        url: Option<String>,
        /// File holding the password (with --url).
        #[arg(long, requires = "url")]
        password_file: Option<PathBuf>,
        /// The `type: redis` source of --config to look at (its connection
        /// settings; its queues are ignored).
        #[arg(long)]
        source: Option<String>,
    },
    /// Read a password from standard input (one line) and print its bcrypt
    /// hash, for `web.basic_auth_users`.
    HashPassword {
        /// bcrypt cost (4 to 31); each step doubles the time of a check.
        #[arg(long, default_value_t = 10)]
        cost: u32,
    },
    /// Ask a running exporter's KEDA scaler what KEDA would hear for one
    /// trigger's metadata (IsActive, GetMetricSpec, GetMetrics), e.g.
    /// `ask queue=jobs mode=QueueLength value=10`.
    Ask {
        /// The scaler's gRPC address (plain HTTP/2).
        #[arg(long, default_value = "127.0.0.1:9732")]
        grpc: String,
        /// Trigger metadata, as `key=value` arguments.
        #[arg(required = true)]
        metadata: Vec<String>,
    },
    /// Replay a queue's recorded traffic through KEDA and the HPA, and say
    /// what each trigger (the ScaledObject's own, WaitTime, a sweep of
    /// QueueLength values) would have cost and how late jobs would have
    /// started; recommends the cheapest on time, as trigger YAML.
    // Boxed: its many flags would make every variant as large.
    Plan(Box<queue_exporter::plan::command::Options>),
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    // Needs no config.
    if let Some(Command::HashPassword { cost }) = cli.command {
        return match queue_exporter::http::auth::hash_password_from(std::io::stdin().lock(), cost) {
            Ok(hash) => {
                println!("{hash}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hash-password: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Some(Command::Ask { grpc, metadata }) = &cli.command {
        return ask(grpc, metadata);
    }
    if let Some(Command::Plan(options)) = &cli.command {
        return plan(options);
    }
    if let Some(Command::Discover {
        url,
        password_file,
        source,
    }) = &cli.command
    {
        return discover(&cli, url.as_deref(), password_file, source.as_deref());
    }
    let opts = LoadOptions {
        file: cli.config.clone(),
        listen_http: cli.listen_http,
        log_format: cli.log_format,
        log_level: cli.log_level.clone(),
    };
    let config = match Config::load(&opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // The `- preset:` entries, resolved against their libraries: refused
    // as any config error is, whatever the command (`once` included).
    if let Err(e) = app::check_presets(&config) {
        eprintln!("{}: {e}", config.origin);
        return ExitCode::from(2);
    }
    telemetry::init_logging(&config.log);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(
        cli.command.unwrap_or(Command::Serve),
        config,
        opts,
    )) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", once_each(&e));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes on one line, each cause printed once: many errors
/// already say their source in their own text (`cannot listen on ADDR:
/// Address already in use`), which `{:#}` would repeat after it.
fn once_each(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line
}

/// `discover`: the Redis of `--url` (or of source `--source` in
/// `--config`) looked at once; the YAML on stdout. Exit 2 on bad
/// arguments or config, 1 if Redis could not be read.
fn discover(
    cli: &Cli,
    url: Option<&str>,
    password_file: &Option<PathBuf>,
    source: Option<&str>,
) -> ExitCode {
    use queue_exporter::config::{RedisSourceConfig, RedisUrl, SourceConfig};
    let config = match (url, source) {
        (Some(url), _) => match RedisUrl::parse(url) {
            Ok(url) => {
                let mut c = RedisSourceConfig::named("redis");
                c.url = url;
                c.password_file = password_file.clone();
                c
            }
            Err(e) => {
                eprintln!("discover: --url: {e}");
                return ExitCode::from(2);
            }
        },
        (None, Some(name)) => {
            let opts = LoadOptions {
                file: cli.config.clone(),
                ..LoadOptions::default()
            };
            let config = match Config::load(&opts) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = app::check_presets(&config) {
                eprintln!("{}: {e}", config.origin);
                return ExitCode::from(2);
            }
            match config.sources.iter().find(|s| s.name() == name) {
                Some(SourceConfig::Redis(r)) => r.clone(),
                Some(_) => {
                    eprintln!(
                        "{}: discover: --source {name}: not a type: redis source",
                        config.origin
                    );
                    return ExitCode::from(2);
                }
                None => {
                    eprintln!(
                        "{}: discover: --source {name}: no such source",
                        config.origin
                    );
                    return ExitCode::from(2);
                }
            }
        }
        (None, None) => {
            eprintln!("discover: give --url URL, or --config FILE --source NAME");
            return ExitCode::from(2);
        }
    };
    let yaml = tokio::runtime::Runtime::new()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(queue_exporter::discover::discover(config))
                .map_err(|e| e.to_string())
        });
    match yaml {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("discover: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `ask`: prints the scaler's three answers, each with its own status; exit
/// 1 if any was an error (what KEDA would get) or the scaler could not be
/// reached, 2 if the arguments are not `key=value`.
fn ask(grpc: &str, metadata: &[String]) -> ExitCode {
    use queue_exporter::scaler::ask;
    let metadata = match ask::parse_metadata(metadata) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("ask: {e}");
            return ExitCode::from(2);
        }
    };
    let answers = tokio::runtime::Runtime::new()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(ask::ask(grpc, metadata))
                .map_err(|e| e.to_string())
        });
    match answers {
        Ok(answers) => {
            print!("{}", answers.text);
            if answers.failed == 0 {
                ExitCode::SUCCESS
            } else {
                // The statuses are on stdout, beside the answers; this
                // only says why the exit code is 1.
                eprintln!(
                    "ask: {} of the calls answered an error, as KEDA would hear it",
                    answers.failed
                );
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("ask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `plan`: the table (or JSON) on stdout; exit 2 with one line naming the
/// input when an input is wrong.
fn plan(options: &queue_exporter::plan::command::Options) -> ExitCode {
    use queue_exporter::plan::{command, report};
    match command::run(options) {
        Ok(plan) => {
            if options.json {
                println!("{}", report::json(&plan, options.price_per_replica_hour));
            } else {
                print!(
                    "{}",
                    report::text(&plan, options.price_per_replica_hour, options.percentile)
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("plan: {e}");
            ExitCode::from(2)
        }
    }
}

async fn dispatch(command: Command, config: Config, opts: LoadOptions) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve => {
            // Unusable TLS files and the like: one line naming the config
            // file and the field, exit 2, as `check` says it.
            if let Err(e) = app::preflight(&config) {
                eprintln!("{}: {e}", config.origin);
                return Ok(ExitCode::from(2));
            }
            // `opts` again on SIGHUP: the same file, env and flags.
            app::run(config, opts).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { connect } => {
            let origin = config.origin.clone();
            if let Err(e) = app::preflight(&config) {
                eprintln!("{origin}: {e}");
                return Ok(ExitCode::from(2));
            }
            if !connect {
                println!("{origin}: ok ({} sources)", config.sources.len());
                return Ok(ExitCode::SUCCESS);
            }
            let report = app::once(&config).await;
            for f in &report.failures {
                // The cause on the summary line itself; the path as every
                // config error writes it.
                match f.index {
                    Some(i) => eprintln!(
                        "{origin}: sources[{i}]: cannot poll source {} ({}): {}",
                        f.name, f.reason, f.cause
                    ),
                    None => eprintln!("{origin}: {}: {}", f.name, f.cause),
                }
            }
            if report.failures.is_empty() {
                println!("{origin}: ok ({} sources reachable)", config.sources.len());
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::FAILURE)
            }
        }
        Command::HashPassword { .. }
        | Command::Ask { .. }
        | Command::Discover { .. }
        | Command::Plan(_) => Err(anyhow::anyhow!(
            "this command is handled before the config is loaded"
        )),
        Command::Once { histograms } => {
            let config = if histograms {
                config
            } else {
                config.without_age_histograms()
            };
            let report = app::once(&config).await;
            print!("{}", report.text);
            for f in &report.failures {
                eprintln!("source {}: poll failed ({}): {}", f.name, f.reason, f.cause);
            }
            Ok(if report.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
