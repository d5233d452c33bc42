//! Process-wide shutdown signal.
//!
//! One [`ShutdownTrigger`] fires once (on SIGTERM/SIGINT or from a test);
//! every task holds a [`Shutdown`] and stops when it fires.

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

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn os_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
