//! Time units and "now in unix seconds": the one place where the timestamps
//! backends keep (zset scores, list items, job-hash fields, message
//! properties) become the unix seconds the snapshot holds. A leaf module:
//! it uses nothing else in the crate, so config, sources and readers can all
//! share it.

use std::time::SystemTime;

use serde::Deserialize;

/// Unix seconds of `at`, with sub-second precision; 0 for a time before the
/// epoch (a clock set before 1970), which every caller treats as "very old".
pub fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The unit of a timestamp as a backend keeps it.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Unix seconds (may be fractional).
    Seconds,
    /// Unix milliseconds (BullMQ's `timestamp`).
    Milliseconds,
    /// Unix microseconds.
    Microseconds,
    /// Unix nanoseconds (asynq's `pending_since`).
    Nanoseconds,
    /// RFC 3339 / ISO 8601 text (RQ's `enqueued_at`).
    Rfc3339,
    /// Guess from the magnitude (s, ms, µs, ns) or parse RFC 3339 text.
    #[default]
    Auto,
}

impl TimeUnit {
    /// Whether values in this unit are numbers of one fixed scale, as zset
    /// scores must be: a score range is built from "now" before any score
    /// is read, so neither text nor a guessed scale can serve.
    pub fn is_fixed_number(self) -> bool {
        matches!(
            self,
            TimeUnit::Seconds
                | TimeUnit::Milliseconds
                | TimeUnit::Microseconds
                | TimeUnit::Nanoseconds
        )
    }

    /// Units per second, for the fixed-scale units (a divisor: dividing
    /// by 1e3 is exact where multiplying by 1e-3 is not).
    fn per_second(self) -> Option<f64> {
        match self {
            TimeUnit::Seconds => Some(1.0),
            TimeUnit::Milliseconds => Some(1e3),
            TimeUnit::Microseconds => Some(1e6),
            TimeUnit::Nanoseconds => Some(1e9),
            TimeUnit::Rfc3339 | TimeUnit::Auto => None,
        }
    }

    /// Unix seconds of a number in this unit; `None` for a negative or
    /// non-finite number, or for `Rfc3339` (text only).
    pub fn number_to_seconds(self, n: f64) -> Option<f64> {
        if !n.is_finite() || n < 0.0 {
            return None;
        }
        if let Some(per_second) = self.per_second() {
            return Some(n / per_second);
        }
        match self {
            TimeUnit::Rfc3339 => None,
            // Unix seconds stay below 1e11 until the year 5138; each further
            // factor of 1000 is the next finer unit.
            _ if n < 1e11 => Some(n),
            _ if n < 1e14 => Some(n / 1e3),
            _ if n < 1e17 => Some(n / 1e6),
            _ => Some(n / 1e9),
        }
    }

    /// Unix seconds of a text stamp: a number in this unit, or RFC 3339 text
    /// for `Rfc3339` and `Auto`. Surrounding spaces and quotes are ignored.
    pub fn text_to_seconds(self, s: &str) -> Option<f64> {
        let s = s.trim().trim_matches('"');
        if self != TimeUnit::Rfc3339
            && let Ok(n) = s.parse::<f64>()
        {
            return self.number_to_seconds(n);
        }
        match self {
            TimeUnit::Rfc3339 | TimeUnit::Auto => chrono::DateTime::parse_from_rfc3339(s)
                .ok()
                .map(|t| t.timestamp_micros() as f64 / 1e6),
            _ => None,
        }
    }

    /// Unix seconds of a zset score in this unit. Unlike
    /// [`number_to_seconds`](Self::number_to_seconds) any number is taken,
    /// as Redis takes it: a score range must agree with Redis on every item.
    /// The unit is fixed-scale (checked at load); see `score_arg`.
    pub fn score_to_seconds(self, score: f64) -> f64 {
        score / self.per_second().unwrap_or(1.0)
    }

    /// `unix_seconds` written as a zset score in this unit, for `ZCOUNT` and
    /// `ZRANGE BYSCORE` bounds: milliseconds and finer are whole numbers,
    /// seconds keep three decimals. Redis parses bounds with `strtod`, whose
    /// slow exact path for 17-digit floats dominated the server's time in
    /// benchmarks; short decimals avoid it.
    ///
    /// Only fixed-scale units are scores: the config refuses the others for
    /// `score_unit` at load (`is_fixed_number`), so the seconds fallback for
    /// them is never sent.
    pub fn score_arg(self, unix_seconds: f64) -> String {
        match self.per_second() {
            Some(per_second) if per_second > 1.0 => format!("{:.0}", unix_seconds * per_second),
            _ => format!("{unix_seconds:.3}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn unix_seconds_keep_fractions_and_clamp_before_the_epoch() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(unix_seconds(t), 1.5);
        let before = SystemTime::UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(unix_seconds(before), 0.0);
    }

    #[test]
    fn fixed_units_scale_numbers() {
        assert_eq!(TimeUnit::Seconds.number_to_seconds(12.5), Some(12.5));
        assert_eq!(TimeUnit::Milliseconds.number_to_seconds(1500.0), Some(1.5));
        assert_eq!(TimeUnit::Microseconds.number_to_seconds(2e6), Some(2.0));
        assert_eq!(TimeUnit::Nanoseconds.number_to_seconds(3e9), Some(3.0));
        assert_eq!(TimeUnit::Rfc3339.number_to_seconds(3.0), None);
    }

    #[test]
    fn auto_guesses_the_scale_from_the_magnitude() {
        let s = 1_700_000_000.0;
        for factor in [1.0, 1e3, 1e6, 1e9] {
            let got = TimeUnit::Auto.number_to_seconds(s * factor).unwrap();
            assert!((got - s).abs() < 1e-3, "{factor}: {got}");
        }
    }

    #[test]
    fn bad_numbers_are_unknown_not_zero() {
        for unit in [TimeUnit::Seconds, TimeUnit::Auto, TimeUnit::Nanoseconds] {
            assert_eq!(unit.number_to_seconds(f64::NAN), None);
            assert_eq!(unit.number_to_seconds(f64::INFINITY), None);
            assert_eq!(unit.number_to_seconds(-1.0), None);
        }
    }

    #[test]
    fn text_is_a_number_or_rfc3339() {
        assert_eq!(
            TimeUnit::Auto.text_to_seconds(" \"1700000000\" "),
            Some(1.7e9)
        );
        assert_eq!(
            TimeUnit::Auto.text_to_seconds("1970-01-01T00:00:10.5Z"),
            Some(10.5)
        );
        assert_eq!(TimeUnit::Rfc3339.text_to_seconds("10"), None);
        assert_eq!(
            TimeUnit::Seconds.text_to_seconds("1970-01-01T00:00:10Z"),
            None
        );
        assert_eq!(TimeUnit::Auto.text_to_seconds("yesterday"), None);
    }

    #[test]
    fn score_args_are_written_in_the_unit() {
        assert_eq!(TimeUnit::Seconds.score_arg(1.25), "1.250");
        assert_eq!(TimeUnit::Milliseconds.score_arg(1.25), "1250");
        assert_eq!(TimeUnit::Microseconds.score_arg(1.5), "1500000");
        assert_eq!(TimeUnit::Nanoseconds.score_arg(2.0), "2000000000");
    }

    #[test]
    fn scores_round_trip_through_their_unit() {
        assert_eq!(TimeUnit::Milliseconds.score_to_seconds(1250.0), 1.25);
        assert_eq!(TimeUnit::Seconds.score_to_seconds(-3.0), -3.0);
    }

    #[test]
    fn only_fixed_scales_can_be_scores() {
        assert!(TimeUnit::Milliseconds.is_fixed_number());
        assert!(!TimeUnit::Auto.is_fixed_number() && !TimeUnit::Rfc3339.is_fixed_number());
    }
}
