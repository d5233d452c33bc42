//! `plan --trace FILE`: a queue's recorded traffic as CSV, for users
//! without Prometheus. One row per step:
//!
//! ```text
//! time,arrivals_per_second,service_seconds
//! 2026-11-30T00:00:00Z,4.2,1.8
//! 1764460815,3.9,1.7
//! ```
//!
//! `time` is RFC 3339 or unix seconds, strictly increasing; a row holds
//! from its time to the next row's. `arrivals_per_second` is the mean
//! rate of jobs entering the queue over the row, `service_seconds` the
//! mean time a worker spends on one (it may be empty when no job
//! arrives). A row with an empty field, or a step more than 1.5 times
//! the trace's usual one, is a gap: no traffic is replayed there and it
//! is left out of the scores, named with its time range. Lines starting
//! with `#` and blank lines are skipped.

use crate::plan::replay::{Service, Traffic};

/// The header a trace starts with.
pub const HEADER: &str = "time,arrivals_per_second,service_seconds";

/// A trace that cannot be read: where and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("{file}: cannot read: {problem}")]
    Read {
        /// The file.
        file: String,
        /// The OS error.
        problem: String,
    },
    /// A line is not a row of the trace.
    #[error("{file}: line {line}: {problem}")]
    Row {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// The file holds no row with traffic.
    #[error("{file}: {problem}")]
    Empty {
        /// The file.
        file: String,
        /// What is missing.
        problem: String,
    },
}

/// One step of recorded traffic, seconds from the trace's start.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When it starts.
    pub from: f64,
    /// When it ends (the next row's time, or one usual step later).
    pub to: f64,
    /// Jobs per second arriving.
    pub rate: f64,
    /// Mean service time of those jobs, seconds.
    pub service: f64,
}

/// A trace: the steps with traffic and the stretches without.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    /// Unix seconds of the first row.
    pub start: f64,
    /// The usual step between rows (the median), seconds.
    pub step: f64,
    /// The rows with both figures, in order.
    pub steps: Vec<Step>,
    /// Stretches (from, to) with no figures, seconds from the start.
    pub gaps: Vec<(f64, f64)>,
    /// Seconds from the start to the end of the last row.
    pub length: f64,
}

/// A row as read: its time and its two figures, `None` when empty.
struct Row {
    time: f64,
    rate: Option<f64>,
    service: Option<f64>,
}

/// Reads the trace in `path`.
pub fn read(path: &str) -> Result<Trace, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|e| TraceError::Read {
        file: path.to_owned(),
        problem: e.to_string(),
    })?;
    parse(path, &text)
}

/// Parses a trace's text; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Trace, TraceError> {
    let bad = |line: usize, problem: String| TraceError::Row {
        file: file.to_owned(),
        line,
        problem,
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut header = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !header {
            if line.replace(' ', "") != HEADER {
                return Err(bad(
                    i + 1,
                    format!("the header must be {HEADER:?}, found {line:?}"),
                ));
            }
            header = true;
            continue;
        }
        let row = parse_row(line).map_err(|p| bad(i + 1, p))?;
        if let Some(prev) = rows.last()
            && row.time <= prev.time
        {
            return Err(bad(
                i + 1,
                format!("time {} is not after the row before's", raw_time(line)),
            ));
        }
        rows.push(row);
    }
    assemble(file, rows)
}

/// The time field of a line, for messages.
fn raw_time(line: &str) -> &str {
    line.split(',').next().unwrap_or("").trim()
}

/// One data line: `time,rate,service`.
fn parse_row(text: &str) -> Result<Row, String> {
    let fields: Vec<&str> = text.split(',').map(str::trim).collect();
    let [time, rate, service] = fields[..] else {
        return Err(format!(
            "expected 3 fields (time, arrivals per second, service seconds), found {}",
            fields.len()
        ));
    };
    let time = parse_time(time)?;
    let number = |name: &str, s: &str| -> Result<Option<f64>, String> {
        if s.is_empty() {
            return Ok(None);
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
            _ => Err(format!("{name}: {s:?} is not a number of 0 or more")),
        }
    };
    let rate = number("arrivals_per_second", rate)?;
    let service = number("service_seconds", service)?;
    if rate.is_some_and(|r| r > 0.0) && service == Some(0.0) {
        return Err("service_seconds: 0 while jobs arrive".to_owned());
    }
    Ok(Row {
        time,
        rate,
        service,
    })
}

/// RFC 3339 or unix seconds, as unix seconds.
pub fn parse_time(s: &str) -> Result<f64, String> {
    if let Ok(t) = s.parse::<f64>()
        && t.is_finite()
        && t >= 0.0
    {
        return Ok(t);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis() as f64 / 1000.0)
        .map_err(|_| format!("time: {s:?} is neither RFC 3339 nor unix seconds"))
}

/// A trace from (unix seconds, arrivals per second, service seconds)
/// rows in time order, `None` where a figure is unknown; `origin` names
/// where they came from in errors.
pub fn from_rows(
    origin: &str,
    rows: &[(f64, Option<f64>, Option<f64>)],
) -> Result<Trace, TraceError> {
    let rows = rows
        .iter()
        .map(|&(time, rate, service)| Row {
            time,
            rate,
            service,
        })
        .collect();
    assemble(origin, rows)
}

/// The rows as steps and gaps.
fn assemble(file: &str, rows: Vec<Row>) -> Result<Trace, TraceError> {
    let Some(first) = rows.first() else {
        return Err(TraceError::Empty {
            file: file.to_owned(),
            problem: "no rows after the header".to_owned(),
        });
    };
    let start = first.time;
    let mut diffs: Vec<f64> = rows.windows(2).map(|w| w[1].time - w[0].time).collect();
    diffs.sort_by(f64::total_cmp);
    let step = diffs.get(diffs.len() / 2).copied().unwrap_or(1.0);
    let mut trace = Trace {
        start,
        step,
        ..Trace::default()
    };
    for (i, row) in rows.iter().enumerate() {
        let from = row.time - start;
        let next = rows.get(i + 1).map_or(from + step, |n| n.time - start);
        let to = if next - from > 1.5 * step {
            from + step
        } else {
            next
        };
        match (row.rate, row.service) {
            (Some(rate), Some(service)) => trace.steps.push(Step {
                from,
                to,
                rate,
                service,
            }),
            (Some(rate), None) if rate == 0.0 => trace.steps.push(Step {
                from,
                to,
                rate,
                service: 0.0,
            }),
            _ => push_gap(&mut trace.gaps, from, to),
        }
        if to < next {
            push_gap(&mut trace.gaps, to, next);
        }
        trace.length = to.max(trace.length);
    }
    if trace.steps.iter().all(|s| s.rate == 0.0) {
        return Err(TraceError::Empty {
            file: file.to_owned(),
            problem: "no row has jobs arriving".to_owned(),
        });
    }
    Ok(trace)
}

/// Adds (from, to) to `gaps`, joined with the last one when they touch.
fn push_gap(gaps: &mut Vec<(f64, f64)>, from: f64, to: f64) {
    match gaps.last_mut() {
        Some(last) if last.1 >= from => last.1 = last.1.max(to),
        _ => gaps.push((from, to)),
    }
}

impl Trace {
    /// Jobs drawn from the trace: each step's jobs, its rate times its
    /// length, at uniformly random times within it, each with its step's
    /// service time; the same `seed`, the same jobs. That is a Poisson
    /// process given the count each step recorded: a step of Prometheus'
    /// counters holds a whole number of jobs, and drawing that number
    /// again (a Poisson count of the same mean) would add a spread the
    /// queue's traffic did not have (its square root per step). A step's
    /// fraction of a job (a CSV's mean rate) is carried to the next ones
    /// from a random start (systematic sampling), so every stretch holds
    /// its rate's jobs within one.
    pub fn traffic(&self, seed: u64) -> Traffic {
        let mut random = SplitMix(seed);
        let (mut arrivals, mut service) = (Vec::new(), Vec::new());
        let mut carry = random.unit();
        for s in self.steps.iter().filter(|s| s.rate > 0.0) {
            carry += s.rate * (s.to - s.from);
            let n = carry.floor();
            carry -= n;
            let first = arrivals.len();
            // A count is at most the rate times a step: finite, and far
            // below usize::MAX for any trace that fits in memory.
            for _ in 0..n as usize {
                arrivals.push(s.from + random.unit() * (s.to - s.from));
                service.push(s.service);
            }
            arrivals[first..].sort_by(f64::total_cmp);
        }
        Traffic {
            arrivals,
            service: Service::PerJob(service),
        }
    }

    /// The trace of a recording `scale` times faster than the cluster it
    /// stands for (`--time-scale`): every time and service time `scale`
    /// times longer, every rate `scale` times lower; the start unchanged.
    pub fn stretched(mut self, scale: f64) -> Trace {
        if scale == 1.0 {
            return self;
        }
        for s in &mut self.steps {
            s.from *= scale;
            s.to *= scale;
            s.rate /= scale;
            s.service *= scale;
        }
        for g in &mut self.gaps {
            g.0 *= scale;
            g.1 *= scale;
        }
        self.step *= scale;
        self.length *= scale;
        self
    }

    /// The mean service time, weighted by arrivals.
    pub fn mean_service(&self) -> f64 {
        let (mut jobs, mut total) = (0.0, 0.0);
        for s in &self.steps {
            let n = s.rate * (s.to - s.from);
            jobs += n;
            total += n * s.service;
        }
        if jobs > 0.0 { total / jobs } else { 0.0 }
    }
}

/// SplitMix64 (Steele, Lea and Flood): a small seeded generator, so a
/// plan's jobs are the same from run to run.
struct SplitMix(u64);

impl SplitMix {
    /// A number in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretched_trace_is_longer_by_the_scale_and_carries_the_same_jobs() {
        let text = "time,arrivals_per_second,service_seconds\n\
                    1000,15,0.1\n1001,30,0.2\n1002,,\n1003,15,0.1\n1004,15,0.1\n";
        let trace = parse("t.csv", text).unwrap();
        let stretched = trace.clone().stretched(15.0);
        assert_eq!(stretched.start, trace.start);
        assert_eq!(stretched.length, trace.length * 15.0);
        assert_eq!(stretched.step, trace.step * 15.0);
        assert_eq!(stretched.gaps, vec![(30.0, 45.0)]);
        for (s, t) in stretched.steps.iter().zip(&trace.steps) {
            assert_eq!((s.from, s.to), (t.from * 15.0, t.to * 15.0));
            assert_eq!(s.rate, t.rate / 15.0);
            assert!((s.service - t.service * 15.0).abs() < 1e-12);
            // The same jobs in each step: rate × length unchanged.
            assert!(((s.to - s.from) * s.rate - (t.to - t.from) * t.rate).abs() < 1e-9);
        }
        assert!((stretched.mean_service() - trace.mean_service() * 15.0).abs() < 1e-9);
        assert_eq!(trace.clone().stretched(1.0), trace);
    }

    /// A trace of `rows` 15 s rows from unix time 0 at `rate` jobs/s, 1 s each.
    fn steady(rows: usize, rate: f64) -> Trace {
        let mut text = String::from("time,arrivals_per_second,service_seconds\n");
        for i in 0..rows {
            text.push_str(&format!("{},{rate},1\n", 15 * i));
        }
        parse("t.csv", &text).unwrap()
    }

    #[test]
    fn each_step_holds_the_jobs_it_recorded_at_times_within_it() {
        let trace = steady(40, 2.0);
        let jobs = trace.traffic(7);
        // 30 jobs in every 15 s step, not a Poisson count around 30.
        assert_eq!(jobs.arrivals.len(), 40 * 30);
        for step in 0..40 {
            let (a, b) = (15.0 * step as f64, 15.0 * (step + 1) as f64);
            let n = jobs.arrivals.iter().filter(|&&t| a <= t && t < b).count();
            assert_eq!(n, 30, "step {step}");
        }
        assert!(jobs.arrivals.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_fraction_of_a_job_per_step_is_carried_so_a_stretch_holds_its_rates_jobs() {
        // 0.3 jobs per step: 30 over 100 steps, give or take the one carried.
        let jobs = steady(100, 0.02).traffic(3);
        assert!(
            (29..=31).contains(&jobs.arrivals.len()),
            "{}",
            jobs.arrivals.len()
        );
    }

    #[test]
    fn the_same_seed_draws_the_same_jobs_and_another_seed_other_times() {
        let trace = steady(10, 2.0);
        let (a, b, c) = (trace.traffic(1), trace.traffic(1), trace.traffic(2));
        assert_eq!(a.arrivals, b.arrivals);
        assert_eq!(a.arrivals.len(), c.arrivals.len());
        assert_ne!(a.arrivals, c.arrivals);
    }
}
