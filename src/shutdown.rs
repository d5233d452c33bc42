//! Process-wide shutdown signal.
//!
//! One [`ShutdownTrigger`] fires once (on SIGTERM/SIGINT or from a test);
//! every task holds a [`Shutdown`] and stops when it fires. A source's poll
//! loop listens on a [`ShutdownTrigger::child`], so a config reload can stop
//! it alone. [`Signals`] turns the OS signals into shutdown and reload requests.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long tasks get to finish after the signal before the process exits anyway.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Fires the shutdown signal.
#[derive(Debug, Clone, Default)]
pub struct ShutdownTrigger {
    /// The shared token.
    token: CancellationToken,
}

/// Listens for the shutdown signal.
#[derive(Debug, Clone)]
pub struct Shutdown {
    /// The shared token.
    token: CancellationToken,
}

impl ShutdownTrigger {
    /// A new, unfired trigger.
    pub fn new() -> Self {
        Self::default()
    }

    /// A listener for this trigger.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            token: self.token.clone(),
        }
    }

    /// Fires the signal; idempotent.
    pub fn fire(&self) {
        self.token.cancel();
    }

    /// A trigger that also fires when this one does, but can be fired on its
    /// own without firing this one: a config reload stops one source's poll
    /// loop this way while the process keeps running.
    pub fn child(&self) -> ShutdownTrigger {
        ShutdownTrigger {
            token: self.token.child_token(),
        }
    }
}

impl Shutdown {
    /// Resolves once shutdown has been signalled.
    pub async fn recv(&mut self) {
        self.token.cancelled().await;
    }

    /// True once shutdown has been signalled.
    pub fn is_shutdown(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// What the operating system asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM or SIGINT: shut down.
    Terminate,
    /// SIGHUP: reload the configuration.
    Reload,
}

/// The process's signal handlers, installed once so that a signal arriving
/// while a reload is being applied is kept, not lost.
#[derive(Debug)]
pub struct Signals {
    /// SIGTERM (Kubernetes' stop signal).
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    /// SIGINT (Ctrl-C).
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    /// SIGHUP (reload).
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers. A handler that cannot be installed is logged
    /// and that signal keeps its default action.
    pub fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let install = |kind: SignalKind, name: &str| {
                signal(kind)
                    .inspect_err(|e| tracing::warn!("cannot handle {name}: {e}"))
                    .ok()
            };
            Signals {
                term: install(SignalKind::terminate(), "SIGTERM"),
                int: install(SignalKind::interrupt(), "SIGINT"),
                hup: install(SignalKind::hangup(), "SIGHUP"),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// Waits for the next signal.
    pub async fn next(&mut self) -> Signal {
        #[cfg(unix)]
        {
            /// A handler's next delivery, or never when it is missing.
            async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
                let delivered = match s {
                    Some(s) => s.recv().await.is_some(),
                    None => false,
                };
                if !delivered {
                    std::future::pending::<()>().await;
                }
            }
            tokio::select! {
                () = recv(&mut self.term) => Signal::Terminate,
                () = recv(&mut self.int) => Signal::Terminate,
                () = recv(&mut self.hup) => Signal::Reload,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Terminate
        }
    }
}
