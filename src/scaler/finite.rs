//! Every value KEDA receives is a finite number from 0 to [`MAX_VALUE`].
//!
//! KEDA turns the float it receives into integer milli-units (an `int64`),
//! so an infinite or huge value wraps to a negative one or saturates, and
//! the HPA scales on that. Such a value comes only from a corrupt input (a
//! zset score of `-inf`, a job stamp of 1e300 ms), never from a real queue:
//! [`input`] refuses one where the scaler reads it, naming the queue and
//! the input, and `query::evaluate_with` checks every reading it produces
//! with [`answer`], so no path can skip the rule. Either refusal is
//! `UNAVAILABLE`. A leaf: it imports nothing of the crate.

/// Largest value sent to KEDA, and largest input the scaler computes with:
/// a trillion (items, seconds, items per second or replicas), far beyond
/// any real queue (a trillion seconds is 31,700 years), and a thousand
/// times inside KEDA's milli-unit `int64` (9.2e18).
pub const MAX_VALUE: f64 = 1e12;

/// What is wrong with `v` for KEDA, or `None` when it is fine.
fn problem(v: f64) -> Option<String> {
    if v.is_nan() {
        Some("NaN, not a number".into())
    } else if v.is_infinite() {
        Some(format!("{v}, not a finite number"))
    } else if v < 0.0 {
        Some(format!("{v}, below 0"))
    } else if v > MAX_VALUE {
        Some(format!("{v:e}, beyond the cap of {MAX_VALUE:e}"))
    } else {
        None
    }
}

/// `v`, an input read from the snapshot, or the `UNAVAILABLE` message
/// naming it (`what`, such as `Age of queue "q" in source main`).
pub fn input(v: f64, what: impl FnOnce() -> String) -> Result<f64, String> {
    match problem(v) {
        None => Ok(v),
        Some(p) => Err(format!(
            "{} is {p}: the source read a corrupt value (a zset score of -inf or +inf, \
             or a job stamp far from any real time), and the scaler sends KEDA only \
             finite values from 0 to {MAX_VALUE:e}",
            what()
        )),
    }
}

/// `v`, an answer's value, or what is wrong with it, for an `UNAVAILABLE`
/// message that names the query (`what`, such as `Age of "q" in source main`).
pub fn answer(v: f64, what: impl FnOnce() -> String) -> Result<f64, String> {
    match problem(v) {
        None => Ok(v),
        Some(p) => Err(format!(
            "{} is {p}: the scaler sends KEDA only finite values from 0 to {MAX_VALUE:e} \
             (KEDA turns them into int64 milli-units)",
            what()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_values_from_0_to_the_cap_pass_and_others_are_named() {
        for v in [0.0, 1.5, MAX_VALUE] {
            assert_eq!(input(v, || "x".into()), Ok(v));
        }
        for (v, says) in [
            (f64::INFINITY, "x is inf, not a finite number"),
            (f64::NEG_INFINITY, "x is -inf, not a finite number"),
            (f64::NAN, "x is NaN"),
            (-1.0, "x is -1, below 0"),
            (1e297, "x is 1e297, beyond the cap of 1e12"),
        ] {
            let e = input(v, || "x".into()).unwrap_err();
            assert!(e.starts_with(says), "{e}");
            let e = answer(v, || "x".into()).unwrap_err();
            assert!(e.starts_with(says), "{e}");
        }
    }
}
