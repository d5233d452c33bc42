//! The age histogram of a timestamp zset (`queue_message_age_seconds`):
//! its per-key state, which commands a poll adds for it, how their replies
//! become buckets, and when the key is measured next.
//!
//! Buckets are counted from the old side: `ZCOUNT k -inf (now-b` is the
//! number of due items older than `b`, and the bucket is `due` minus that.
//! Redis scans a small (listpack) zset from its oldest item up to the end of
//! the range, so this reads only the items older than `b`. Buckets at or
//! above the oldest item's (predicted) age equal `due` and are not asked;
//! the prediction is checked against the poll's own oldest item.
//!
//! Each key is measured every `age_histogram_interval`, staggered by a hash
//! of its name; between measurements the last one is served as it was.

use std::time::Duration;

use redis::Value;

use super::commands::cmd;
use super::reply;
use crate::config::ScoreUnit;
use crate::snapshot::AgeHistogram;

/// What polls have learned about one key's histogram.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramState {
    /// `(oldest age, when)` from the last poll, in seconds: lets the next
    /// measurement skip bucket ZCOUNTs whose answer is implied.
    hint: Option<(f64, f64)>,
    /// The last measurement, served until the next one.
    last: Option<AgeHistogram>,
    /// Unix seconds at which the key is measured again; 0 before the first.
    next_at: f64,
}

/// What one poll asks for a key's histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistogramPlan {
    /// Whether this poll measures the histogram (it is due) or serves the last one.
    pub measure: bool,
    /// How many leading buckets were asked with ZCOUNT; the rest are implied.
    pub queried: usize,
}

/// Skipped buckets turned out to matter: measure again without skipping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remeasure;

/// A score bound with millisecond precision. Redis parses bounds with
/// `strtod`, whose slow exact path for 17-digit floats dominated the
/// server's time in benchmarks; short decimals avoid it.
pub fn score_arg(unit: ScoreUnit, unix_seconds: f64) -> String {
    match unit {
        ScoreUnit::Seconds => format!("{unix_seconds:.3}"),
        ScoreUnit::Milliseconds => format!("{:.0}", unix_seconds * 1000.0),
    }
}

/// A histogram whose every bucket holds all `due` items.
pub fn uniform(buckets: &[Duration], due: u64) -> AgeHistogram {
    AgeHistogram {
        buckets: buckets.iter().map(|b| (b.as_secs_f64(), due)).collect(),
        count: due,
    }
}

/// A fraction in (0, 1], spread evenly over keys and stable for a key.
fn phase(key: &[u8]) -> f64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() % 1024 + 1) as f64 / 1024.0
}

impl HistogramState {
    /// Adds this poll's bucket ZCOUNTs for `key` to `out`, if it is due.
    pub fn plan(
        &self,
        key: &[u8],
        unit: ScoreUnit,
        buckets: &[Duration],
        now_secs: f64,
        out: &mut Vec<redis::Cmd>,
    ) -> HistogramPlan {
        let measure = !buckets.is_empty() && (self.last.is_none() || now_secs >= self.next_at);
        if !measure {
            return HistogramPlan::default();
        }
        // Every waiting item is at most as old as the oldest one, so buckets
        // at or above its predicted age equal the due count.
        let predicted = self.hint.map(|(age, at)| age + (now_secs - at).max(0.0));
        let mut queried = 0;
        for b in buckets {
            let secs = b.as_secs_f64();
            if predicted.is_some_and(|p| secs >= p) {
                break;
            }
            let mut c = cmd("ZCOUNT", key);
            c.arg("-inf")
                .arg(format!("({}", score_arg(unit, now_secs - secs)));
            out.push(c);
            queried += 1;
        }
        HistogramPlan {
            measure: true,
            queried,
        }
    }

    /// The histogram from this poll's replies to the plan's ZCOUNTs, given
    /// the poll's `due` count and `oldest` due age. Pure.
    pub fn read(
        &self,
        plan: HistogramPlan,
        replies: &[Value],
        due: Option<u64>,
        oldest: Option<f64>,
        buckets: &[Duration],
    ) -> Result<Option<AgeHistogram>, Remeasure> {
        let Some(due) = due else { return Ok(None) };
        if buckets.is_empty() {
            return Ok(None);
        }
        // Every due item is younger than the smallest bound (or there are
        // none): each bucket holds them all, known without a query.
        if due == 0 || oldest.is_some_and(|o| o <= buckets[0].as_secs_f64()) {
            return Ok(Some(uniform(buckets, due)));
        }
        if !plan.measure {
            return Ok(self.last.clone());
        }
        let Some(mut older) = replies
            .get(..plan.queried)
            .and_then(|c| c.iter().map(reply::as_u64).collect::<Option<Vec<u64>>>())
        else {
            return Ok(None);
        };
        if older.len() < buckets.len() {
            let first_skipped = buckets[older.len()].as_secs_f64();
            match oldest {
                Some(o) if o <= first_skipped => older.resize(buckets.len(), 0),
                _ => return Err(Remeasure),
            }
        }
        Ok(Some(AgeHistogram {
            buckets: buckets
                .iter()
                .map(|b| b.as_secs_f64())
                .zip(older.iter().map(|o| due.saturating_sub(*o)))
                // ZCOUNTs run one after another; keep the series monotonic.
                .scan(0u64, |floor, (b, c)| {
                    *floor = (*floor).max(c);
                    Some((b, *floor))
                })
                .collect(),
            count: due,
        }))
    }

    /// Records a poll's outcome: the oldest age as the next hint, the
    /// histogram served, and, after a measurement, when to measure next. A
    /// key's first measurement schedules the next one at a point in the
    /// interval picked by its name's hash, so later polls each measure an
    /// even share of keys.
    pub fn record(
        &mut self,
        key: &[u8],
        plan: HistogramPlan,
        oldest: Option<f64>,
        histogram: Option<AgeHistogram>,
        interval: Duration,
        now_secs: f64,
    ) {
        self.hint = oldest.map(|a| (a, now_secs));
        if plan.measure && histogram.is_some() {
            let share = if self.next_at == 0.0 { phase(key) } else { 1.0 };
            self.next_at = now_secs + interval.as_secs_f64() * share;
        }
        self.last = histogram;
    }

    /// Forgets the hint, so the next measurement asks every bucket.
    pub fn forget_hint(&mut self) {
        self.hint = None;
    }

    /// Forgets the hint and the last measurement (the value is unknown).
    pub fn forget_values(&mut self) {
        self.hint = None;
        self.last = None;
    }

    /// Forgets everything: the key is a different thing now.
    pub fn reset(&mut self) {
        *self = HistogramState::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets() -> Vec<Duration> {
        [10, 60, 300].into_iter().map(Duration::from_secs).collect()
    }

    #[test]
    fn a_first_measurement_asks_every_bucket_from_the_old_side() {
        let mut cmds = Vec::new();
        let plan =
            HistogramState::default().plan(b"k", ScoreUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        assert_eq!(
            plan,
            HistogramPlan {
                measure: true,
                queried: 3
            }
        );
        let args: Vec<Vec<u8>> = cmds[0]
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(b.to_vec()),
                _ => None,
            })
            .collect();
        assert_eq!(
            args,
            [
                b"ZCOUNT".to_vec(),
                b"k".to_vec(),
                b"-inf".to_vec(),
                b"(990.000".to_vec()
            ]
        );
    }

    #[test]
    fn buckets_are_due_minus_the_older_items_and_stay_monotonic() {
        let state = HistogramState::default();
        let plan = HistogramPlan {
            measure: true,
            queried: 3,
        };
        let older = [Value::Int(8), Value::Int(9), Value::Int(2)];
        let h = state
            .read(plan, &older, Some(10), Some(400.0), &buckets())
            .unwrap()
            .unwrap();
        // 10 - 8 = 2; 10 - 9 = 1 → kept at 2 (monotonic); 10 - 2 = 8.
        assert_eq!(h.buckets, vec![(10.0, 2), (60.0, 2), (300.0, 8)]);
        assert_eq!(h.count, 10);
    }

    #[test]
    fn a_skipped_bucket_is_implied_or_triggers_a_remeasure() {
        let state = HistogramState::default();
        let plan = HistogramPlan {
            measure: true,
            queried: 1,
        };
        let h = state
            .read(plan, &[Value::Int(4)], Some(10), Some(50.0), &buckets())
            .unwrap()
            .unwrap();
        assert_eq!(h.buckets, vec![(10.0, 6), (60.0, 10), (300.0, 10)]);
        // The oldest item is older than the first skipped bound: unknown.
        assert_eq!(
            state.read(plan, &[Value::Int(4)], Some(10), Some(70.0), &buckets()),
            Err(Remeasure)
        );
    }

    #[test]
    fn young_or_empty_queues_are_exact_without_a_query() {
        let state = HistogramState::default();
        let none = HistogramPlan::default();
        assert_eq!(
            state.read(none, &[], Some(0), None, &buckets()).unwrap(),
            Some(uniform(&buckets(), 0))
        );
        assert_eq!(
            state
                .read(none, &[], Some(3), Some(2.0), &buckets())
                .unwrap(),
            Some(uniform(&buckets(), 3))
        );
    }

    #[test]
    fn between_measurements_the_last_one_is_served() {
        let mut state = HistogramState::default();
        let measured = uniform(&buckets(), 7);
        let plan = HistogramPlan {
            measure: true,
            queried: 0,
        };
        state.record(
            b"k",
            plan,
            Some(500.0),
            Some(measured.clone()),
            Duration::from_secs(15),
            1000.0,
        );
        let mut cmds = Vec::new();
        let next = state.plan(b"k", ScoreUnit::Seconds, &buckets(), 1000.5, &mut cmds);
        assert!(!next.measure && cmds.is_empty());
        assert_eq!(
            state
                .read(next, &[], Some(9), Some(520.0), &buckets())
                .unwrap(),
            Some(measured)
        );
        // Due again within one interval.
        assert!(
            state
                .plan(b"k", ScoreUnit::Seconds, &buckets(), 1015.0, &mut cmds)
                .measure
        );
    }
}
