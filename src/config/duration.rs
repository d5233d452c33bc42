//! Durations as the config writes them: always with a unit (`250ms`, `1s`,
//! `2m`, `1h30m`), so a bare number is an error rather than a guess.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Parses `250ms`, `1s`, `2m`, `1h30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|_| format!("invalid duration {s:?}"))
}

pub(crate) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    duration_from_value(&v).map_err(serde::de::Error::custom)
}

pub(crate) fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    if v.is_null() {
        return Ok(None);
    }
    duration_from_value(&v)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

pub(crate) fn de_durations<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
    let v = Vec::<serde_json::Value>::deserialize(d)?;
    v.iter()
        .map(duration_from_value)
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
}

/// How long a measured service time is trusted with nothing newly
/// measured (`service_time_max_age`, both source kinds): workers may have
/// changed since (a new release, a slower dependency), so after this the
/// queue's service time is unknown, never the old figure.
pub fn default_service_time_max_age() -> Duration {
    Duration::from_secs(600)
}

fn duration_from_value(v: &serde_json::Value) -> Result<Duration, String> {
    match v {
        serde_json::Value::String(s) => parse_duration(s),
        other => Err(format!(
            "invalid duration {other}: write it with a unit, like 250ms, 1s or 2m"
        )),
    }
}

/// What a duration field may hold: whether `0s` means something, and the
/// largest value that makes sense. Checked at load, so every duration the
/// exporter computes with (`timeout` × 8, 3 × `poll_interval`, a deadline
/// `grace` from now) stays far from `Duration`'s and `Instant`'s limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Whether `0s` is meaningful (it is for `age_histogram_interval`:
    /// measure on every poll).
    pub zero_ok: bool,
    /// The largest accepted value.
    pub max: Duration,
    /// `max` as the config writes it, for the message.
    pub max_text: &'static str,
}

impl Bounds {
    /// Non-zero, at most one hour: timeouts, poll intervals, `shutdown_grace`.
    pub const HOUR: Bounds = Bounds {
        zero_ok: false,
        max: Duration::from_secs(3600),
        max_text: "1h",
    };
    /// Non-zero, at most one day: `discovery_interval`, `max_staleness`.
    pub const DAY: Bounds = Bounds {
        zero_ok: false,
        max: Duration::from_secs(86_400),
        max_text: "24h",
    };
    /// Zero allowed, at most one day: `age_histogram_interval`.
    pub const DAY_OR_ZERO: Bounds = Bounds {
        zero_ok: true,
        ..Bounds::DAY
    };
    /// Non-zero, at most a year: ages (`age_buckets`, Celery's
    /// `visibility_timeout`).
    pub const YEAR: Bounds = Bounds {
        zero_ok: false,
        max: Duration::from_secs(366 * 86_400),
        max_text: "366d",
    };

    /// The one-line problem with `d`, if any.
    pub fn check(&self, d: Duration) -> Result<(), String> {
        if d.is_zero() && !self.zero_ok {
            Err("must be greater than 0".into())
        } else if d > self.max {
            Err(format!("at most {}", self.max_text))
        } else {
            Ok(())
        }
    }
}
