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

fn duration_from_value(v: &serde_json::Value) -> Result<Duration, String> {
    match v {
        serde_json::Value::String(s) => parse_duration(s),
        other => Err(format!(
            "invalid duration {other}: write it with a unit, like 250ms, 1s or 2m"
        )),
    }
}
