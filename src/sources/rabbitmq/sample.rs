//! Turning what RabbitMQ reports into [`QueueSample`] fields, shared by the
//! three methods: queue types, the oldest message's age, and per-vhost counts.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::snapshot::{QueueSample, QueueType, SourceStats};

/// The `type` label for a RabbitMQ queue type (`classic`, `quorum`, `stream`).
pub fn queue_type(t: &str) -> QueueType {
    match t {
        "stream" => QueueType::Stream,
        other => QueueType::Other(other.to_string()),
    }
}

/// What RabbitMQ said about the head message's timestamp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HeadTimestamp {
    /// The field was not reported (quorum and stream queues, `stats: totals`).
    Absent,
    /// Reported without a value: the queue is empty, or its head message has
    /// no `timestamp` property.
    NoValue,
    /// Unix seconds of the head message's `timestamp` property.
    Seconds(f64),
}

/// Age of the oldest waiting message: `now − timestamp` when RabbitMQ reports
/// one; 0 when it reports the field and nothing is ready (an empty queue has
/// no waiting message); unknown otherwise, including a head message without a
/// timestamp property.
pub fn oldest_age(head: HeadTimestamp, ready: Option<u64>, now: SystemTime) -> Option<f64> {
    match head {
        HeadTimestamp::Seconds(ts) if ts.is_finite() && ts > 0.0 => {
            Some((crate::time::unix_seconds(now) - ts).max(0.0))
        }
        HeadTimestamp::Seconds(_) | HeadTimestamp::NoValue if ready == Some(0) => Some(0.0),
        _ => None,
    }
}

/// A count from a number that may arrive as a float (`3`, `3.0`); `None`
/// for negatives, fractions, NaN and infinities.
pub fn count_from_f64(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= u64::MAX as f64).then_some(v as u64)
}

/// The order of a snapshot's queues: by vhost, then name.
fn key(q: &QueueSample) -> (Option<&str>, &str) {
    (q.vhost(), q.name.as_str())
}

/// Sorts queues by [`key`]. A list already in order (the management API
/// answers sorted by name) is only checked. Otherwise the order is found on
/// indices and applied by following its cycles, so each 300-byte sample
/// moves about once instead of the `log n` times a sort of the samples
/// themselves moves it: at 2,000 queues from `rabbitmq_prometheus` (which
/// lists queues unsorted), sorting the samples was about a seventh of a
/// poll's CPU time (`perf`), most of it copying.
pub fn sort_by_vhost_and_name(queues: &mut [QueueSample]) {
    if queues.is_sorted_by(|a, b| key(a) <= key(b)) {
        return;
    }
    let mut order: Vec<usize> = (0..queues.len()).collect();
    order.sort_by(|&a, &b| key(&queues[a]).cmp(&key(&queues[b])));
    apply(queues, order);
}

/// Puts `queues` in the order `order` gives: `order[k]` is where position
/// k's sample is now. Walking a cycle swaps each sample into place; a
/// visited position is marked `usize::MAX`.
fn apply(queues: &mut [QueueSample], mut order: Vec<usize>) {
    for start in 0..order.len() {
        let mut at = start;
        loop {
            let from = std::mem::replace(&mut order[at], usize::MAX);
            if from == usize::MAX || from == start {
                break;
            }
            queues.swap(at, from);
            at = from;
        }
    }
}

/// [`sort_by_vhost_and_name`] for a backend that lists its queues in the
/// same unsorted order poll after poll, as the Prometheus plugin does:
/// `order`, the permutation that sorted the last poll's list, is tried
/// first and checked in one pass (names are unique, so a permutation that
/// puts them in strictly increasing order is the sort); only a list it
/// does not sort is sorted anew, and `order` updated. At 2,000 queues the
/// check is 2,000 comparisons where the sort made about 22,000.
pub fn sort_remembering(queues: &mut [QueueSample], order: &mut Vec<usize>) {
    let sorts = order.len() == queues.len()
        && order
            .windows(2)
            .all(|w| key(&queues[w[0]]) < key(&queues[w[1]]));
    if !sorts {
        order.clear();
        order.extend(0..queues.len());
        order.sort_by(|&a, &b| key(&queues[a]).cmp(&key(&queues[b])));
    }
    apply(queues, order.clone());
}

/// Source-wide stats for a finished poll: tracked queues, and queues per
/// vhost (`known_vhosts` get an entry even when they hold no queue). The
/// queues are counted by runs of one vhost (a sorted list is one run per
/// vhost), so a vhost's name is copied once, not once per queue.
pub fn stats(queues: &[QueueSample], known_vhosts: &[String]) -> SourceStats {
    let mut per_vhost: BTreeMap<String, u64> =
        known_vhosts.iter().map(|v| (v.clone(), 0)).collect();
    let mut add = |vhost: &str, n: u64| match per_vhost.get_mut(vhost) {
        Some(count) => *count += n,
        None => {
            per_vhost.insert(vhost.to_string(), n);
        }
    };
    let mut run: Option<(&str, u64)> = None;
    for v in queues.iter().filter_map(QueueSample::vhost) {
        if let Some((current, n)) = &mut run
            && *current == v
        {
            *n += 1;
            continue;
        }
        if let Some((current, n)) = run.take() {
            add(current, n);
        }
        run = Some((v, 1));
    }
    if let Some((current, n)) = run {
        add(current, n);
    }
    SourceStats {
        tracked_keys: queues.len() as u64,
        queues_per_vhost: per_vhost,
        ..SourceStats::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn age_is_known_only_when_rabbitmq_says_so() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let age = |h, r| oldest_age(h, r, now);
        assert_eq!(age(HeadTimestamp::Seconds(990.0), Some(3)), Some(10.0));
        assert_eq!(age(HeadTimestamp::Seconds(2000.0), Some(3)), Some(0.0));
        assert_eq!(age(HeadTimestamp::NoValue, Some(0)), Some(0.0));
        assert_eq!(age(HeadTimestamp::NoValue, Some(2)), None);
        assert_eq!(age(HeadTimestamp::Absent, Some(0)), None);
        assert_eq!(age(HeadTimestamp::Seconds(f64::NAN), Some(0)), Some(0.0));
        assert_eq!(age(HeadTimestamp::Seconds(f64::NAN), None), None);
    }

    #[test]
    fn counts_reject_non_integers() {
        assert_eq!(count_from_f64(3.0), Some(3));
        assert_eq!(count_from_f64(-1.0), None);
        assert_eq!(count_from_f64(1.5), None);
        assert_eq!(count_from_f64(f64::NAN), None);
    }

    /// 121 queues over three vhosts and none, and the order they sort to.
    fn unsorted_queues() -> (Vec<QueueSample>, Vec<QueueSample>) {
        let sample = |vhost: Option<&str>, name: &str, depth: u64| {
            let mut q = QueueSample::named(name);
            if let Some(v) = vhost {
                q.broker_mut().vhost = v.to_string();
            }
            q.depth = Some(depth);
            q
        };
        let mut all = vec![sample(None, "z", 0)];
        for (i, v) in ["b", "a", "c"].iter().enumerate() {
            for n in 0..40 {
                all.push(sample(Some(v), &format!("q.{n}"), (i * 100 + n) as u64));
            }
        }
        let mut want = all.clone();
        want.sort_by(|a, b| (a.vhost(), &a.name).cmp(&(b.vhost(), &b.name)));
        (all, want)
    }

    #[test]
    fn queues_are_sorted_by_vhost_then_name_whatever_the_order_they_came_in() {
        let (all, want) = unsorted_queues();
        let mut reversed = want.clone();
        reversed.reverse();
        let mut rotated = want.clone();
        rotated.rotate_left(37);
        for mut queues in [reversed, rotated, want.clone(), all] {
            sort_by_vhost_and_name(&mut queues);
            assert_eq!(queues, want);
        }
        for mut tiny in [vec![], vec![QueueSample::named("a")]] {
            let before = tiny.clone();
            sort_by_vhost_and_name(&mut tiny);
            assert_eq!(tiny, before);
        }
    }

    /// The remembered order sorts a list in last poll's order with one
    /// check, and a list in another order is sorted anew.
    #[test]
    fn a_remembered_order_sorts_the_same_as_a_sort() {
        let mut want: Vec<QueueSample> = (0..40)
            .map(|i| {
                let mut q = QueueSample::named(format!("q{i:02}"));
                q.broker_mut().vhost = format!("v{}", i % 3);
                q
            })
            .collect();
        sort_by_vhost_and_name(&mut want);
        let mut shuffled = want.clone();
        shuffled.reverse();
        shuffled.rotate_left(7);
        let mut other = want.clone();
        other.rotate_left(11);
        let mut order = Vec::new();
        for input in [&shuffled, &shuffled, &other, &want, &shuffled] {
            let mut queues = input.clone();
            sort_remembering(&mut queues, &mut order);
            assert_eq!(queues, want);
        }
        let mut fewer = shuffled[..20].to_vec();
        sort_remembering(&mut fewer, &mut order);
        assert!(fewer.is_sorted_by(|a, b| key(a) < key(b)));
    }

    proptest::proptest! {
        #[test]
        fn any_shuffle_of_the_queues_sorts_to_the_same_order(
            mut queues in proptest::strategy::Strategy::prop_shuffle(
                proptest::strategy::Just(unsorted_queues().0),
            )
        ) {
            sort_by_vhost_and_name(&mut queues);
            proptest::prop_assert_eq!(queues, unsorted_queues().1);
        }
    }

    #[test]
    fn stats_count_per_vhost() {
        let mut a = QueueSample::named("a");
        a.broker_mut().vhost = "v1".into();
        let s = stats(&[a.clone(), a], &["v1".into(), "v2".into()]);
        assert_eq!(s.tracked_keys, 2);
        assert_eq!(s.queues_per_vhost.get("v1"), Some(&2));
        assert_eq!(s.queues_per_vhost.get("v2"), Some(&0));
        assert_eq!(queue_type("stream"), QueueType::Stream);
        assert_eq!(queue_type("quorum").as_str(), "quorum");
    }
}
