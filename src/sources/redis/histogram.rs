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
//!
//! Once a small zset has been measured, later measurements *probe* instead
//! of counting: `ZRANGE k now now-b BYSCORE REV LIMIT o m` asks for a few
//! members around the bucket's last count `c` (offset `o = c-w-1`, `m =
//! 2w+2`), walking from the newest item. Redis skips the `o` newest items
//! without parsing their scores and parses at most `m` scores, so when the
//! count moved by at most `w` the reply's length gives it exactly, at about
//! a fifth of a ZCOUNT's cost on a 100-item listpack (measured with
//! `INFO commandstats` in `scripts/bench`). A probe whose answer falls
//! outside its window is measured again with ZCOUNT in the same poll, and
//! the key counts with ZCOUNT at its next measurement too (queues that churn
//! faster than the window stop paying for probes that miss). Large zsets
//! (skiplists) keep ZCOUNT, which is O(log n) there while an offset is a walk.
//!
//! Leading buckets that were empty at the last look (younger than the newest
//! due item) are not asked at all: one read of the newest due item checks
//! them together, and if an item arrived in them the key is measured again
//! in the same poll. In the benchmark this drops two of seven commands per
//! measurement; a queue with steady inflow has no such buckets and does not
//! read the newest item.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::cmd::cmd;
use super::reply;
use crate::snapshot::AgeHistogram;
use crate::time::TimeUnit;

/// What polls have learned about one key's histogram.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramState {
    /// The ages seen by a recent poll: lets a measurement skip buckets
    /// whose answer is implied.
    hint: Option<Hint>,
    /// The last measurement, served until the next one.
    last: Option<Arc<AgeHistogram>>,
    /// Unix seconds at which the key is measured again; 0 before the first.
    next_at: f64,
    /// Measurements left that count with ZCOUNT instead of probing, after a
    /// probe missed (see the module comment).
    count_instead: u8,
    /// Bytes of the oldest member at the last poll: a probe returns up to
    /// `m` members, so large members narrow its window.
    member_len: usize,
}

/// Ages seen by a poll, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Hint {
    /// Age of the oldest due item.
    oldest: f64,
    /// Age of the newest due item, when this very poll read it (a first
    /// measurement's first round); buckets below it hold nothing.
    newest: Option<f64>,
    /// Unix seconds of the poll.
    at: f64,
}

/// Zsets whose last due count is at most this are probed; larger ones are
/// skiplists (Redis turns a zset into one past 128 members by default),
/// where ZCOUNT is O(log n) but a probe's offset is a walk.
const PROBE_MAX_ITEMS: u64 = 256;

/// A probe's offset and count for a bucket whose last count was `c`, with
/// `w` members of slack on each side.
fn probe_window(c: u64, w: u64) -> (u64, u64) {
    let offset = c.saturating_sub(w + 1);
    (offset, c - offset + w + 1)
}

/// The exact count a probe's reply of `len` members gives, or `None` when
/// the count lies outside the window.
fn probe_count(offset: u64, limit: u64, len: u64) -> Option<u64> {
    (len < limit && (offset == 0 || len > 0)).then_some(offset + len)
}

/// What one poll asks for a key's histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistogramPlan {
    /// Whether this poll measures the histogram (it is due) or serves the last one.
    pub measure: bool,
    /// How many buckets after the `young` ones were asked (ZCOUNT or probe);
    /// the rest are implied.
    pub queried: usize,
    /// Bit `i` set: bucket `i` was asked with a probe, not a ZCOUNT.
    pub probes: u64,
    /// The probes' slack `w` (see [`probe_window`]).
    pub window: u8,
    /// Whether the newest due item was read (the first reply).
    pub newest: bool,
    /// Leading buckets expected to be empty (younger than the newest due
    /// item at the last look): not asked; the newest item's age checks them.
    pub young: usize,
    /// A first measurement: this round only reads the newest due item, and
    /// the buckets are asked in a second round that knows both ends.
    pub deferred: bool,
}

/// Why a key's histogram needs another round in the same poll.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Again {
    /// Skipped buckets turned out to matter, or a probe missed: measure
    /// again without skipping or probing.
    Remeasure,
    /// A first measurement: ask the buckets knowing the newest due item's age.
    Deferred {
        /// Age of the newest due item, if one was read.
        newest: Option<f64>,
    },
}

/// A histogram whose every bucket holds all `due` items.
pub fn uniform(buckets: &[Duration], due: u64) -> AgeHistogram {
    AgeHistogram {
        buckets: buckets.iter().map(|b| (b.as_secs_f64(), due)).collect(),
        count: due,
    }
}

/// A fraction in (0, 1], spread evenly over keys and stable for a key.
pub fn phase(key: &[u8]) -> f64 {
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
        unit: TimeUnit,
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
        let now = unit.score_arg(now_secs);
        // The newest due item (one cheap command, walking from the newest
        // end): its age checks every bucket below it at once.
        let newest_cmd = |out: &mut Vec<redis::Cmd>| {
            let mut c = cmd("ZRANGE", key);
            c.arg(&now)
                .arg("-inf")
                .arg("BYSCORE")
                .arg("REV")
                .arg("LIMIT")
                .arg(0)
                .arg(1)
                .arg("WITHSCORES");
            out.push(c);
        };
        let mut plan = HistogramPlan {
            measure: true,
            window: self.window(),
            ..HistogramPlan::default()
        };
        if self.last.is_none() && self.hint.is_none() && self.count_instead == 0 {
            // Nothing known yet: counting every bucket would walk the whole
            // zset for each; first learn where the due items lie.
            newest_cmd(out);
            plan.newest = true;
            plan.deferred = true;
            return plan;
        }
        // Ages now, predicted from the hint's.
        let shift = |at: f64| (now_secs - at).max(0.0);
        let oldest = self.hint.map(|h| h.oldest + shift(h.at));
        let newest = self.hint.and_then(|h| h.newest.map(|n| n + shift(h.at)));
        // Leading buckets that held nothing at the last look (younger than
        // the newest due item): not asked, checked by the newest item's age.
        // Not after a miss, which measures every bucket.
        let young = if self.count_instead > 0 {
            0
        } else {
            buckets
                .iter()
                .enumerate()
                .take_while(|(i, b)| {
                    let secs = b.as_secs_f64();
                    !oldest.is_some_and(|o| secs >= o)
                        && (newest.is_some_and(|n| secs < n)
                            || self.last_count(buckets, *i) == Some(0))
                })
                .count()
        };
        if young > 0 {
            newest_cmd(out);
            plan.newest = true;
            plan.young = young;
        }
        let last = self.probe_basis(buckets);
        for (i, b) in buckets.iter().enumerate().skip(young) {
            let secs = b.as_secs_f64();
            if oldest.is_some_and(|o| secs >= o) {
                break;
            }
            let predicted = last.map(|last| last.buckets[i].1);
            let bound = unit.score_arg(now_secs - secs);
            match predicted {
                Some(predicted) if i < 64 => {
                    let (offset, limit) = probe_window(predicted, u64::from(plan.window));
                    let mut c = cmd("ZRANGE", key);
                    c.arg(&now)
                        .arg(bound)
                        .arg("BYSCORE")
                        .arg("REV")
                        .arg("LIMIT")
                        .arg(offset)
                        .arg(limit);
                    out.push(c);
                    plan.probes |= 1 << i;
                }
                _ => {
                    let mut c = cmd("ZCOUNT", key);
                    c.arg("-inf").arg(format!("({bound}"));
                    out.push(c);
                }
            }
            plan.queried += 1;
        }
        plan
    }

    /// The last measurement, if it had these very buckets.
    fn last_for(&self, buckets: &[Duration]) -> Option<&AgeHistogram> {
        self.last.as_deref().filter(|h| {
            h.buckets.len() == buckets.len()
                && h.buckets
                    .iter()
                    .zip(buckets)
                    .all(|((s, _), b)| *s == b.as_secs_f64())
        })
    }

    /// The last measurement, when this one may probe around its counts.
    fn probe_basis(&self, buckets: &[Duration]) -> Option<&AgeHistogram> {
        self.last_for(buckets)
            .filter(|h| self.count_instead == 0 && h.count <= PROBE_MAX_ITEMS)
    }

    /// Bucket `i`'s count at the last measurement, if it had these buckets.
    fn last_count(&self, buckets: &[Duration], i: usize) -> Option<u64> {
        self.last_for(buckets)
            .and_then(|h| h.buckets.get(i))
            .map(|b| b.1)
    }

    /// A probe's slack: members returned are at most `2w+2` of about
    /// `member_len` bytes each, so keep a reply within a few hundred bytes.
    fn window(&self) -> u8 {
        match self.member_len {
            0..=64 => 3,
            65..=256 => 1,
            _ => 0,
        }
    }

    /// The histogram from this poll's replies to the plan's commands, given
    /// the poll's `due` count and `oldest` due age; `age_of` turns a score
    /// into an age. Pure.
    pub fn read(
        &self,
        plan: HistogramPlan,
        replies: &[Value],
        due: Option<u64>,
        oldest: Option<f64>,
        buckets: &[Duration],
        age_of: impl Fn(f64) -> f64,
    ) -> Result<Option<Arc<AgeHistogram>>, Again> {
        let Some(due) = due else { return Ok(None) };
        if buckets.is_empty() {
            return Ok(None);
        }
        // Every due item is younger than the smallest bound (or there are
        // none): each bucket holds them all, known without a query.
        if due == 0 || oldest.is_some_and(|o| o <= buckets[0].as_secs_f64()) {
            return Ok(Some(self.uniform(buckets, due)));
        }
        if !plan.measure {
            return Ok(self.last.clone());
        }
        let (newest, asked) = if plan.newest {
            let Some((newest, asked)) = replies.split_first() else {
                return Ok(None);
            };
            (reply::first_score(newest).flatten().map(&age_of), asked)
        } else {
            (None, replies)
        };
        if plan.deferred {
            return Err(Again::Deferred { newest });
        }
        let Some(asked) = asked.get(..plan.queried) else {
            return Ok(None);
        };
        let mut older = Vec::with_capacity(buckets.len());
        if plan.young > 0 {
            // Empty when the newest due item is older than their largest bound.
            let bound = buckets[plan.young - 1].as_secs_f64();
            match newest {
                Some(n) if n > bound => older.resize(plan.young, due),
                _ => return Err(Again::Remeasure),
            }
        }
        for (j, r) in asked.iter().enumerate() {
            let i = plan.young + j;
            if plan.probes & (1 << i) == 0 {
                match reply::as_u64(r) {
                    Some(n) => older.push(n),
                    None => return Ok(None),
                }
                continue;
            }
            // A probe reads the bucket itself; the rest of `due` is older.
            let Some(predicted) = self.predicted(i) else {
                return Err(Again::Remeasure);
            };
            let (offset, limit) = probe_window(predicted, u64::from(plan.window));
            let Some(len) = reply::as_array(r).map(|a| a.len() as u64) else {
                return Ok(None);
            };
            match probe_count(offset, limit, len) {
                Some(n) => older.push(due.saturating_sub(n)),
                None => return Err(Again::Remeasure),
            }
        }
        if older.len() < buckets.len() {
            let first_skipped = buckets[older.len()].as_secs_f64();
            match oldest {
                Some(o) if o <= first_skipped => older.resize(buckets.len(), 0),
                _ => return Err(Again::Remeasure),
            }
        }
        Ok(Some(Arc::new(AgeHistogram {
            buckets: buckets
                .iter()
                .map(|b| b.as_secs_f64())
                .zip(older.iter().map(|o| due.saturating_sub(*o)))
                // Commands run one after another; keep the series monotonic.
                .scan(0u64, |floor, (b, c)| {
                    *floor = (*floor).max(c);
                    Some((b, *floor))
                })
                .collect(),
            count: due,
        })))
    }

    /// The histogram of `due` items all in every bucket: the last one when
    /// it is that already (an idle or empty queue allocates nothing).
    fn uniform(&self, buckets: &[Duration], due: u64) -> Arc<AgeHistogram> {
        match &self.last {
            Some(last)
                if self.last_for(buckets).is_some()
                    && last.count == due
                    && last.buckets.iter().all(|&(_, c)| c == due) =>
            {
                last.clone()
            }
            _ => Arc::new(uniform(buckets, due)),
        }
    }

    /// The count bucket `i`'s probe was centred on: the last measurement's.
    fn predicted(&self, i: usize) -> Option<u64> {
        self.last.as_ref()?.buckets.get(i).map(|b| b.1)
    }

    /// Learns a first measurement's ages from its first round, so the
    /// second round skips the buckets they imply.
    pub fn defer(&mut self, oldest: Option<f64>, newest: Option<f64>, now_secs: f64) {
        self.hint = oldest.map(|oldest| Hint {
            oldest,
            newest,
            at: now_secs,
        });
    }

    /// Records a poll's outcome: the oldest age as the next hint, the
    /// histogram served, and, after a measurement, when to measure next. A
    /// key's first measurement schedules the next one at a point in the
    /// interval picked by its name's hash, so later polls each measure an
    /// even share of keys.
    #[allow(clippy::too_many_arguments)] // one call site, each value distinct
    pub fn record(
        &mut self,
        key: &[u8],
        plan: HistogramPlan,
        oldest: Option<f64>,
        member_len: Option<usize>,
        histogram: Option<Arc<AgeHistogram>>,
        interval: Duration,
        now_secs: f64,
    ) {
        self.hint = oldest.map(|oldest| Hint {
            oldest,
            newest: None,
            at: now_secs,
        });
        if let Some(len) = member_len {
            self.member_len = len;
        }
        if plan.measure && histogram.is_some() {
            let share = if self.next_at == 0.0 { phase(key) } else { 1.0 };
            self.next_at = now_secs + interval.as_secs_f64() * share;
            self.count_instead = self.count_instead.saturating_sub(1);
        }
        self.last = histogram;
    }

    /// Forgets the hint and stops probing for this measurement and the
    /// next, so the next plan asks every bucket with ZCOUNT.
    pub fn forget_hint(&mut self) {
        self.hint = None;
        self.count_instead = 2;
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

    fn args(c: &redis::Cmd) -> Vec<String> {
        c.args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            })
            .collect()
    }

    /// Ages are scores subtracted from 1000 s.
    fn age(score: f64) -> f64 {
        1000.0 - score
    }

    /// `state.read` with the test buckets and clock.
    fn read(
        state: &HistogramState,
        plan: HistogramPlan,
        replies: &[Value],
        due: Option<u64>,
        oldest: Option<f64>,
    ) -> Result<Option<Arc<AgeHistogram>>, Again> {
        state.read(plan, replies, due, oldest, &buckets(), age)
    }

    /// A `ZRANGE .. WITHSCORES` reply of one member with `score`.
    fn newest(score: f64) -> Value {
        Value::Array(vec![
            Value::BulkString(b"m".to_vec()),
            Value::BulkString(score.to_string().into_bytes()),
        ])
    }

    fn members(n: usize) -> Value {
        Value::Array(vec![Value::BulkString(b"m".to_vec()); n])
    }

    /// A state whose last measurement counted `counts` per bucket of `due`.
    fn measured(counts: [u64; 3], due: u64) -> HistogramState {
        let mut state = HistogramState::default();
        let h = AgeHistogram {
            buckets: buckets()
                .iter()
                .map(|b| b.as_secs_f64())
                .zip(counts)
                .collect(),
            count: due,
        };
        let plan = HistogramPlan {
            measure: true,
            ..HistogramPlan::default()
        };
        state.record(
            b"k",
            plan,
            None,
            Some(10),
            Some(Arc::new(h)),
            Duration::ZERO,
            1000.0,
        );
        state
    }

    #[test]
    fn a_first_measurement_first_locates_the_newest_due_item() {
        let state = HistogramState::default();
        let mut cmds = Vec::new();
        let plan = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        assert!(plan.measure && plan.deferred);
        assert_eq!(cmds.len(), 1);
        assert_eq!(
            args(&cmds[0]),
            [
                "ZRANGE",
                "k",
                "1000.000",
                "-inf",
                "BYSCORE",
                "REV",
                "LIMIT",
                "0",
                "1",
                "WITHSCORES"
            ]
        );
        assert_eq!(
            read(&state, plan, &[newest(985.0)], Some(10), Some(400.0)),
            Err(Again::Deferred { newest: Some(15.0) })
        );
    }

    #[test]
    fn the_second_round_checks_young_buckets_by_the_newest_item_and_counts_the_rest_from_the_old_side()
     {
        let mut state = HistogramState::default();
        state.defer(Some(200.0), Some(15.0), 1000.0);
        let mut cmds = Vec::new();
        let plan = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        // 10 s is younger than the newest due item: not asked, the newest
        // item is read again instead. 60 s is counted; 300 s is above the
        // oldest item's age, so it holds all.
        assert_eq!(
            (plan.newest, plan.young, plan.queried, plan.probes),
            (true, 1, 1, 0)
        );
        assert_eq!(cmds.len(), 2);
        assert_eq!(args(&cmds[0])[..3], ["ZRANGE", "k", "1000.000"]);
        assert_eq!(args(&cmds[1]), ["ZCOUNT", "k", "-inf", "(940.000"]);
        let read = |newest_score: f64| {
            read(
                &state,
                plan,
                &[newest(newest_score), Value::Int(8)],
                Some(10),
                Some(200.0),
            )
        };
        let h = read(985.0).unwrap().unwrap();
        assert_eq!(h.buckets, vec![(10.0, 0), (60.0, 2), (300.0, 10)]);
        // An item younger than 10 s arrived: the skip does not hold.
        assert_eq!(read(995.0), Err(Again::Remeasure));
    }

    #[test]
    fn buckets_are_due_minus_the_older_items_and_stay_monotonic() {
        let state = HistogramState::default();
        let plan = HistogramPlan {
            measure: true,
            queried: 3,
            ..HistogramPlan::default()
        };
        let replies = [Value::Int(8), Value::Int(9), Value::Int(2)];
        let h = read(&state, plan, &replies, Some(10), Some(400.0))
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
            ..HistogramPlan::default()
        };
        let replies = [Value::Int(4)];
        let h = read(&state, plan, &replies, Some(10), Some(50.0))
            .unwrap()
            .unwrap();
        assert_eq!(h.buckets, vec![(10.0, 6), (60.0, 10), (300.0, 10)]);
        // The oldest item is older than the first skipped bound: unknown.
        assert_eq!(
            read(&state, plan, &replies, Some(10), Some(70.0)),
            Err(Again::Remeasure)
        );
    }

    #[test]
    fn young_or_empty_queues_are_exact_without_a_query() {
        let state = HistogramState::default();
        let none = HistogramPlan::default();
        assert_eq!(
            read(&state, none, &[], Some(0), None).unwrap(),
            Some(Arc::new(uniform(&buckets(), 0)))
        );
        assert_eq!(
            read(&state, none, &[], Some(3), Some(2.0)).unwrap(),
            Some(Arc::new(uniform(&buckets(), 3)))
        );
    }

    #[test]
    fn between_measurements_the_last_one_is_served() {
        let mut state = HistogramState::default();
        let measured = Arc::new(uniform(&buckets(), 7));
        let plan = HistogramPlan {
            measure: true,
            ..HistogramPlan::default()
        };
        state.record(
            b"k",
            plan,
            Some(500.0),
            Some(8),
            Some(measured.clone()),
            Duration::from_secs(15),
            1000.0,
        );
        let mut cmds = Vec::new();
        let next = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.5, &mut cmds);
        assert!(!next.measure && cmds.is_empty());
        // Served as it was: the very same histogram, not a copy.
        let served = read(&state, next, &[], Some(9), Some(520.0)).unwrap();
        assert!(served.is_some_and(|h| Arc::ptr_eq(&h, &measured)));
        // Due again within one interval.
        assert!(
            state
                .plan(b"k", TimeUnit::Seconds, &buckets(), 1015.0, &mut cmds)
                .measure
        );
    }

    #[test]
    fn a_measured_small_zset_is_probed_around_its_last_counts() {
        let state = measured([0, 2, 20], 30);
        let mut cmds = Vec::new();
        let plan = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        // The 10 s bucket was empty: checked by the newest due item, not asked.
        assert_eq!(
            (
                plan.newest,
                plan.young,
                plan.queried,
                plan.probes,
                plan.window
            ),
            (true, 1, 2, 0b110, 3)
        );
        assert_eq!(args(&cmds[0])[9], "WITHSCORES");
        // Newest first, due items only, from the bucket's bound; the window
        // starts w+1 below the last count and holds 2w+2 members.
        assert_eq!(
            args(&cmds[2]),
            [
                "ZRANGE", "k", "1000.000", "700.000", "BYSCORE", "REV", "LIMIT", "16", "8"
            ]
        );
        // Counts below the window's start begin at offset 0.
        assert_eq!(args(&cmds[1])[7..], ["0", "6"]);
    }

    #[test]
    fn with_no_empty_young_bucket_the_newest_item_is_not_read() {
        let state = measured([1, 2, 20], 30);
        let mut cmds = Vec::new();
        let plan = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        assert_eq!(
            (plan.newest, plan.young, plan.queried, plan.probes),
            (false, 0, 3, 0b111)
        );
        assert_eq!(cmds.len(), 3);
        let h = read(
            &state,
            plan,
            &[members(1), members(3), members(7)],
            Some(31),
            Some(400.0),
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.buckets, vec![(10.0, 1), (60.0, 3), (300.0, 23)]);
    }

    #[test]
    fn a_probe_inside_its_window_is_exact() {
        let state = measured([0, 2, 20], 30);
        let mut cmds = Vec::new();
        let plan = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        // 10 s: the newest item is 15 s old; 3 of 6 → 3; offset 16 + 7 of 8 → 23.
        let h = read(
            &state,
            plan,
            &[newest(985.0), members(3), members(7)],
            Some(31),
            Some(400.0),
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.buckets, vec![(10.0, 0), (60.0, 3), (300.0, 23)]);
        assert_eq!(h.count, 31);
    }

    #[test]
    fn a_probe_outside_its_window_remeasures_with_zcount_next_time_too() {
        let mut state = measured([0, 2, 20], 30);
        let mut cmds = Vec::new();
        let plan = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        // A full window (8 of 8) says only "24 or more"; an empty one with
        // an offset says only "16 or fewer".
        for third in [members(8), members(0)] {
            assert_eq!(
                read(
                    &state,
                    plan,
                    &[newest(985.0), members(3), third],
                    Some(31),
                    Some(400.0)
                ),
                Err(Again::Remeasure)
            );
        }
        state.forget_hint();
        let mut again = Vec::new();
        let plan = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut again);
        assert_eq!((plan.probes, plan.newest), (0, false));
        assert!(again.iter().all(|c| args(c)[0] == "ZCOUNT"));
    }

    #[test]
    fn large_members_narrow_the_window_and_large_zsets_are_counted() {
        let mut state = measured([0, 2, 20], 30);
        state.member_len = 1000;
        let mut cmds = Vec::new();
        let plan = state.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        assert_eq!(plan.window, 0);
        assert_eq!(args(&cmds[2])[7..], ["19", "2"]);
        let big = measured([0, 2, 20], PROBE_MAX_ITEMS + 1);
        let mut cmds = Vec::new();
        let plan = big.plan(b"k", TimeUnit::Seconds, &buckets(), 1000.0, &mut cmds);
        assert_eq!(plan.probes, 0);
    }
}
