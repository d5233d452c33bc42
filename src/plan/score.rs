//! The scoring: what a replay's jobs and pods come to. The share of jobs
//! started within `targetWait`, wait percentiles and the worker time paid
//! for, over the scored stretch only: a lead-in (the cold start from zero
//! replicas, whose wait no trigger can shorten) and the stretches with no
//! reading are left out.

use crate::plan::replay::{Run, Traffic};

/// What is scored of a replay.
#[derive(Debug, Clone, Default)]
pub struct Scoring {
    /// A job is on time when it starts within this.
    pub target_wait: f64,
    /// Jobs arriving before this, and worker time before it, are not scored.
    pub from: f64,
    /// Stretches (from, to) left out too: the jobs arriving in them and
    /// the worker time in them.
    pub left_out: Vec<(f64, f64)>,
    /// Workers per replica: a pod's time is this many workers' time.
    pub workers_per_replica: usize,
}

/// A replay's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    /// Jobs scored.
    pub jobs: usize,
    /// Of those, how many started.
    pub started: usize,
    /// Percent of the scored jobs started within `target_wait` (100 with no job).
    pub within_pct: f64,
    /// Median wait.
    pub p50_wait: Option<f64>,
    /// 99th percentile wait.
    pub p99_wait: Option<f64>,
    /// Longest wait.
    pub max_wait: Option<f64>,
    /// Worker-seconds paid for (pods running, or starting, times workers).
    pub worker_s: f64,
}

impl Score {
    /// The `p`th percentile of the sorted `waits`: the ceil(p·n/100)-th
    /// smallest (bench.py's `pct`).
    fn percentile(waits: &[f64], p: f64) -> Option<f64> {
        if waits.is_empty() {
            return None;
        }
        let n = waits.len();
        let k = ((p * n as f64 / 100.0).ceil() as usize).clamp(1, n);
        waits.get(k - 1).copied()
    }
}

/// How much of (a, b) lies in the stretches `out`.
fn overlap(out: &[(f64, f64)], a: f64, b: f64) -> f64 {
    out.iter()
        .map(|&(x, y)| (b.min(y) - a.max(x)).max(0.0))
        .sum()
}

/// Scores `run`, a replay of `traffic`.
pub fn score(run: &Run, traffic: &Traffic, scoring: &Scoring) -> Score {
    let from = scoring.from;
    let mut worker_s: f64 = run
        .pods
        .iter()
        .map(|(c, s)| (s - c.max(from)).max(0.0))
        .sum::<f64>();
    if !scoring.left_out.is_empty() {
        let out: f64 = run
            .pods
            .iter()
            .map(|&(c, s)| overlap(&scoring.left_out, c.max(from), s))
            .sum();
        worker_s -= out;
    }
    worker_s *= scoring.workers_per_replica as f64;
    let first = traffic.arrivals.partition_point(|&a| a < from);
    // Waits are in arrival order (FIFO), so the scored ones are a tail.
    let tail = run.waits.get(first..).unwrap_or_default();
    let arrivals = traffic.arrivals.get(first..).unwrap_or_default();
    let kept = |i: &usize| {
        let a = arrivals.get(*i).copied().unwrap_or(f64::NAN);
        !scoring.left_out.iter().any(|&(x, y)| x <= a && a < y)
    };
    let mut waits: Vec<f64> = if scoring.left_out.is_empty() {
        tail.to_vec()
    } else {
        (0..tail.len()).filter(kept).map(|i| tail[i]).collect()
    };
    let jobs = (0..arrivals.len()).filter(kept).count();
    waits.sort_by(f64::total_cmp);
    let within = waits.iter().filter(|&&x| x <= scoring.target_wait).count();
    Score {
        jobs,
        started: waits.len(),
        within_pct: if jobs > 0 {
            100.0 * within as f64 / jobs as f64
        } else {
            100.0
        },
        p50_wait: Score::percentile(&waits, 50.0),
        p99_wait: Score::percentile(&waits, 99.0),
        max_wait: waits.last().copied(),
        worker_s,
    }
}

/// Several draws of the same trace's jobs as one score, as `plan
/// --draws` shows a candidate: the lowest share on time and the longest
/// waits any draw gave (the recommendation must hold in each), the mean
/// worker time (what it costs on average), the first draw's jobs. `None`
/// for no draw.
pub fn worst_of(draws: &[Score]) -> Option<Score> {
    let first = draws.first()?;
    let highest = |f: fn(&Score) -> Option<f64>| {
        draws
            .iter()
            .filter_map(f)
            .fold(None, |m: Option<f64>, w| Some(m.map_or(w, |m| m.max(w))))
    };
    Some(Score {
        jobs: first.jobs,
        started: first.started,
        within_pct: draws
            .iter()
            .map(|s| s.within_pct)
            .fold(f64::INFINITY, f64::min),
        p50_wait: highest(|s| s.p50_wait),
        p99_wait: highest(|s| s.p99_wait),
        max_wait: highest(|s| s.max_wait),
        worker_s: draws.iter().map(|s| s.worker_s).sum::<f64>() / draws.len() as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(within_pct: f64, p99: f64, worker_s: f64) -> Score {
        Score {
            jobs: 100,
            started: 100,
            within_pct,
            p50_wait: Some(p99 / 10.0),
            p99_wait: Some(p99),
            max_wait: Some(2.0 * p99),
            worker_s,
        }
    }

    #[test]
    fn one_draw_is_its_own_score() {
        let s = scored(99.5, 12.0, 3600.0);
        assert_eq!(worst_of(std::slice::from_ref(&s)), Some(s));
        assert_eq!(worst_of(&[]), None);
    }

    #[test]
    fn draws_show_the_lowest_share_on_time_the_longest_waits_and_the_mean_worker_time() {
        let s = worst_of(&[
            scored(99.5, 12.0, 3000.0),
            scored(97.0, 30.0, 4000.0),
            scored(99.9, 8.0, 3500.0),
        ])
        .unwrap();
        assert_eq!(s.within_pct, 97.0);
        assert_eq!(s.p99_wait, Some(30.0));
        assert_eq!(s.max_wait, Some(60.0));
        assert_eq!(s.p50_wait, Some(3.0));
        assert_eq!(s.worker_s, 3500.0);
    }
}
