//! A trigger's `mode`: what is measured per queue ([`Mode`]), named in
//! metadata, messages and the metric names KEDA is given. Its own file so
//! the key declarations ([`crate::scaler::keys`]), which say the modes each
//! key applies to, and the parser ([`crate::scaler::metadata`]) share it.

use std::fmt;

/// What is measured per queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Total items held (`queue_depth`); the default.
    QueueLength,
    /// Items a worker could take now.
    Ready,
    /// Items delivered but not acknowledged (RabbitMQ).
    Unacked,
    /// Items waiting for a future due time (timestamp zsets).
    Scheduled,
    /// Age of the oldest waiting item, in seconds.
    Age,
    /// Messages published per second, averaged over `window`.
    PublishRate,
    /// Messages delivered per second, averaged over `window`.
    DeliverRate,
    /// Entries a stream consumer group has not read yet.
    Lag,
    /// Replicas that start jobs within `targetWait` (the model in
    /// [`crate::scaler::wait`]).
    WaitTime,
}

impl Mode {
    /// Every mode, in documentation order.
    pub const ALL: [Mode; 9] = [
        Mode::QueueLength,
        Mode::Ready,
        Mode::Unacked,
        Mode::Scheduled,
        Mode::Age,
        Mode::PublishRate,
        Mode::DeliverRate,
        Mode::Lag,
        Mode::WaitTime,
    ];

    /// The spelling used in metadata and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::QueueLength => "QueueLength",
            Mode::Ready => "Ready",
            Mode::Unacked => "Unacked",
            Mode::Scheduled => "Scheduled",
            Mode::Age => "Age",
            Mode::PublishRate => "PublishRate",
            Mode::DeliverRate => "DeliverRate",
            Mode::Lag => "Lag",
            Mode::WaitTime => "WaitTime",
        }
    }

    /// True for the modes computed from counter history over `window`.
    pub fn is_rate(self) -> bool {
        matches!(self, Mode::PublishRate | Mode::DeliverRate)
    }

    /// True for the modes that average a rate over `window`: the rate
    /// modes, and WaitTime for its arrival rate.
    pub fn uses_window(self) -> bool {
        self.is_rate() || self == Mode::WaitTime
    }

    /// Parses a mode name, ignoring case.
    pub(crate) fn parse(s: &str) -> Option<Mode> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
