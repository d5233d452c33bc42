//! The `queue-exporter` binary: parses the command line and calls the library.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use queue_exporter::config::{Config, LoadOptions, LogFormat};
use queue_exporter::{app, telemetry};

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
    Once,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(command: Command, config: Config, opts: LoadOptions) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve => {
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
            for (source, reason) in &report.failures {
                eprintln!("{origin}: sources.{source}: cannot poll ({reason})");
            }
            if report.failures.is_empty() {
                println!("{origin}: ok ({} sources reachable)", config.sources.len());
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::FAILURE)
            }
        }
        Command::Once => {
            let report = app::once(&config).await;
            print!("{}", report.text);
            for (source, reason) in &report.failures {
                eprintln!("source {source}: poll failed ({reason})");
            }
            Ok(if report.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
