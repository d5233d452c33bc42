//! Metric names handed to KEDA and the HPA.
//!
//! KEDA prefixes our name with `s{N}-` (the trigger index) and the HPA uses it
//! in an API path, so names are path-safe (`[a-z0-9-]`), at most
//! [`MAX_LEN`] characters, and a pure function of the metadata, so every
//! replica of the exporter answers the same. Too-long names are cut and get a
//! hash of the full name, so two long names stay distinct.

use crate::scaler::metadata::{Mode, Operation, ScalerQuery};

/// Longest name returned.
pub const MAX_LEN: usize = 200;

/// Hex digits of the hash suffix on shortened names.
const HASH_HEX: usize = 16;

/// The metric name for a trigger, e.g. `queuelength-work-queue`.
pub fn metric_name(q: &ScalerQuery) -> String {
    let mut parts: Vec<String> = vec![q.mode.as_str().to_string()];
    parts.extend(q.source.iter().cloned());
    parts.extend(q.vhost.iter().cloned());
    parts.push(q.queue.text().to_string());
    if q.mode == Mode::Lag {
        parts.extend(q.group.iter().cloned());
    }
    if let Some(states) = &q.states {
        parts.extend(states.iter().map(|s| s.as_str().to_string()));
    }
    parts.extend(q.preset.map(|p| p.as_str().to_string()));
    if q.operation != Operation::Sum {
        parts.push(q.operation.as_str().to_string());
    }
    if let Some(w) = &q.wait {
        parts.push(humantime::format_duration(w.target_wait).to_string());
    }
    if q.mode.uses_window() {
        parts.push(humantime::format_duration(q.window).to_string());
    }
    shorten(&sanitize(&parts.join("-")), &parts.join("\u{1f}"))
}

/// Lower-cases and maps everything outside `[a-z0-9]` to single dashes.
pub fn sanitize(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut dash = false;
    for c in raw.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c);
        } else {
            dash = true;
        }
    }
    out
}

/// Cuts `name` to [`MAX_LEN`], ending it with a hash of `identity` when cut.
fn shorten(name: &str, identity: &str) -> String {
    if name.len() <= MAX_LEN {
        return name.to_string();
    }
    let keep = MAX_LEN - HASH_HEX - 1;
    // `name` is ASCII, so byte slicing is on char boundaries.
    let head = name.get(..keep).unwrap_or(name).trim_end_matches('-');
    format!(
        "{head}-{:0width$x}",
        fnv1a64(identity.as_bytes()),
        width = HASH_HEX
    )
}

/// FNV-1a, 64 bit: stable across builds and platforms (unlike `std`'s hasher).
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The name KEDA asked for, without the `s{N}-` prefix and lower-cased, for
/// comparison with [`metric_name`].
pub fn normalize_requested(requested: &str) -> String {
    let lower = requested.trim().to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix('s') {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest.as_bytes().get(digits) == Some(&b'-') {
            return rest[digits + 1..].to_string();
        }
    }
    lower
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaler::metadata::parse_known as parse;
    use std::collections::HashMap;

    fn name(pairs: &[(&str, &str)]) -> String {
        let meta: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        metric_name(&parse(&meta).unwrap())
    }

    fn path_safe(n: &str) -> bool {
        !n.is_empty()
            && n.len() <= MAX_LEN
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !n.starts_with('-')
            && !n.ends_with('-')
    }

    #[test]
    fn readable_and_path_safe() {
        assert_eq!(name(&[("queue", "work-queue")]), "queuelength-work-queue");
        assert_eq!(
            name(&[
                ("queue", "jobs:pending:*"),
                ("mode", "Age"),
                ("operation", "max")
            ]),
            "age-jobs-pending-max"
        );
        assert_eq!(
            name(&[
                ("queue", "Orders"),
                ("source", "rabbit"),
                ("vhost", "/"),
                ("mode", "PublishRate")
            ]),
            "publishrate-rabbit-orders-1m"
        );
        let weird = name(&[("queue", "ключ \"q\"\n\\x")]);
        assert!(path_safe(&weird), "{weird}");
    }

    #[test]
    fn deterministic_and_long_names_hashed() {
        let long = "q".repeat(500);
        let a = name(&[("queue", &long)]);
        let b = name(&[("queue", &long)]);
        assert_eq!(a, b);
        assert!(path_safe(&a), "{a}");
        assert_eq!(a.len(), MAX_LEN);
        let other = name(&[("queue", &format!("{long}x"))]);
        assert_ne!(a, other);
        assert!(path_safe(&other));
    }

    #[test]
    fn requested_names_accept_case_and_index_prefix() {
        assert_eq!(
            normalize_requested("s0-queuelength-work"),
            "queuelength-work"
        );
        assert_eq!(
            normalize_requested("S12-QueueLength-Work"),
            "queuelength-work"
        );
        assert_eq!(normalize_requested("queuelength-work"), "queuelength-work");
        assert_eq!(normalize_requested("scheduled-x"), "scheduled-x");
        assert_eq!(normalize_requested("s-x"), "s-x");
    }
}
