//! Timestamp zsets (scores are enqueue or run-at times): `ZCARD`, the oldest
//! member, one `ZCOUNT (now +inf` that splits ready from scheduled, and the
//! glue to the age histogram (its commands planned after these, its replies
//! read after these, a remeasure or a deferred measurement asked back).
//!
//! Separate from the other key types because only these zsets split by
//! time and carry a histogram; a zset whose scores are not times is
//! measured by its size alone, with hashes and sets (`hash_set`).

use redis::Value;

use super::{KeyOutcome, Plan, identity};
use crate::config::{QueueSpec, RedisSourceConfig};
use crate::snapshot::{QueueSample, QueueType};
use crate::sources::redis::cmd::cmd;
use crate::sources::redis::histogram::{Again, HistogramPlan};
use crate::sources::redis::reply;
use crate::sources::redis::tracked::{TrackedKey, Unchanged};

/// The commands that measure a timestamp zset, followed by its histogram's
/// (when one is due).
pub(super) fn plan(
    key: &TrackedKey,
    spec: &QueueSpec,
    config: &RedisSourceConfig,
    now_secs: f64,
    allowed: bool,
) -> (Vec<redis::Cmd>, HistogramPlan) {
    let k = key.key.as_slice();
    let now = spec.score_unit.score_arg(now_secs);
    let mut oldest = cmd("ZRANGE", k);
    oldest.arg(0).arg(0).arg("WITHSCORES");
    // The scheduled items; ready = ZCARD - scheduled. When everything
    // is due (the common case) Redis answers 0 from the zset's last
    // score without a scan (`zzlIsInRange`/`zslIsInRange`), which is
    // cheaper than `ZRANGE (now +inf BYSCORE LIMIT 0 1` (0.71 vs 1.00
    // µs per call on a 100-item listpack) and also counts a zset
    // holding both due and scheduled items in the same round trip.
    let mut scheduled = cmd("ZCOUNT", k);
    scheduled.arg(format!("({now}")).arg("+inf");
    let mut v = vec![cmd("ZCARD", k), oldest, scheduled];
    let histogram = key.histogram.plan_within(
        k,
        spec.score_unit,
        &config.age_buckets,
        now_secs,
        allowed,
        &mut v,
    );
    (v, histogram)
}

/// For a zset served unchanged (all due, so its ages move with time alone):
/// only its histogram's commands, when one is due.
pub(super) fn plan_unchanged(
    key: &TrackedKey,
    spec: &QueueSpec,
    config: &RedisSourceConfig,
    now_secs: f64,
    allowed: bool,
    out: &mut Vec<redis::Cmd>,
) -> HistogramPlan {
    key.histogram.plan_within(
        key.key.as_slice(),
        spec.score_unit,
        &config.age_buckets,
        now_secs,
        allowed,
        out,
    )
}

/// A timestamp zset's sample from its replies (or from what was kept while
/// it is unchanged) and what may be kept; `Err` when the histogram asks for
/// another measurement in this poll.
pub(super) fn read(
    key: &TrackedKey,
    spec: &QueueSpec,
    plan: &Plan,
    r: &[Value],
    now_secs: f64,
    age_buckets: &[std::time::Duration],
) -> Result<(QueueSample, Option<Unchanged>), KeyOutcome> {
    let mut found = None;
    let mut s = identity(key, Some(QueueType::Zset));
    // After ZCARD, the oldest item and the scheduled count (unless
    // unchanged): the histogram's replies.
    let (card, oldest, scheduled, asked) = match plan.unchanged {
        Some(Unchanged::DueZset { card, oldest }) => (Some(card), Some(oldest), Some(0), r),
        _ => (
            r.first().and_then(reply::as_u64),
            r.get(1).and_then(reply::first_score),
            r.get(2).and_then(reply::as_u64),
            r.get(3..).unwrap_or_default(),
        ),
    };
    // Kept only with nothing scheduled: scheduled items fall due
    // with time alone, with no write to tell us.
    if let (Some(card), Some(oldest), Some(0)) = (card, oldest, scheduled) {
        found = Some(Unchanged::DueZset { card, oldest });
    }
    let due = match (card, oldest, scheduled) {
        (Some(0), _, _) | (_, Some(None), _) => Some(0),
        // The zset changed between the commands: no more than it holds.
        (Some(c), Some(Some(_)), Some(sch)) => Some(c.saturating_sub(sch)),
        _ => None,
    };
    s.depth = card;
    s.ready = due;
    s.scheduled = match (card, due) {
        (Some(c), Some(d)) => Some(c.saturating_sub(d)),
        _ => None,
    };
    s.oldest_age_seconds = match (due, oldest) {
        (Some(0), _) => Some(0.0),
        (Some(_), Some(Some(score))) => {
            Some((now_secs - spec.score_unit.score_to_seconds(score)).max(0.0))
        }
        _ => None,
    };
    let age_of = |score: f64| (now_secs - spec.score_unit.score_to_seconds(score)).max(0.0);
    s.age_histogram = match key.histogram.read(
        plan.histogram,
        asked,
        due,
        s.oldest_age_seconds,
        age_buckets,
        age_of,
    ) {
        Ok(h) => h,
        Err(Again::Remeasure) => return Err(KeyOutcome::Remeasure),
        Err(Again::Deferred { newest }) => {
            return Err(KeyOutcome::Deferred {
                oldest: s.oldest_age_seconds,
                newest,
                due,
            });
        }
    };
    Ok((s, found))
}

/// The oldest member's size, from a fresh read's `ZRANGE 0 0` reply: it
/// bounds the next histogram probes' replies.
pub(super) fn oldest_member_len(r: &[Value]) -> Option<usize> {
    r.get(1).and_then(reply::first_member_len)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{NOW, counts, key, read_with, sample, scored, timestamp_zset};
    use crate::config::KeyType;
    use crate::sources::redis::tracked::KeyState;
    use redis::Value::{Array, Int};

    #[test]
    fn a_timestamp_zset_with_everything_due_is_all_ready() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(5), scored(NOW - 30.0), Int(0)],
        ));
        assert_eq!(counts(&s), (Some(5), Some(5), Some(0), Some(30.0)));
    }

    #[test]
    fn a_timestamp_zset_with_everything_scheduled_has_nothing_ready_and_age_zero() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(4), scored(NOW + 60.0), Int(4)],
        ));
        assert_eq!(counts(&s), (Some(4), Some(0), Some(4), Some(0.0)));
    }

    #[test]
    fn a_mixed_timestamp_zset_is_split_by_the_scheduled_count_in_one_round() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(10), scored(NOW - 5.0), Int(3)],
        ));
        assert_eq!(counts(&s), (Some(10), Some(7), Some(3), Some(5.0)));
    }

    #[test]
    fn a_zset_that_shrank_between_the_commands_never_reads_negative() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(2), scored(NOW - 5.0), Int(3)],
        ));
        assert_eq!(counts(&s), (Some(2), Some(0), Some(2), Some(0.0)));
    }

    #[test]
    fn an_empty_timestamp_zset_is_empty_with_age_zero() {
        let k = key(KeyState::Typed(KeyType::Zset));
        let s = sample(read_with(
            &k,
            &timestamp_zset(),
            &[Int(0), Array(vec![]), Int(0)],
        ));
        assert_eq!(counts(&s), (Some(0), Some(0), Some(0), Some(0.0)));
    }
}
