//! The replicas the HPA holds for a trigger: the highest `WaitTime` answer
//! the trigger was given within the HPA's scale-down stabilisation window.
//!
//! Kubernetes' HPA scales down to the highest replica count it was asked
//! for within `behavior.scaleDown.stabilizationWindowSeconds` (300 s by
//! default), so every answer is paid for that long. KEDA tells a scaler
//! nothing of the replicas it runs; the answers the scaler gave are what
//! it can know of them. The `WaitTime` model uses them to ask no more than
//! the pods already asked for will need once they run
//! ([`crate::scaler::wait::WaitInputs::held`]), instead of asking again for
//! a backlog those pods will have drained by the time more could start.
//!
//! Kept per ScaledObject and metric by the gRPC service, and by `plan`'s
//! replay the same way, so both answer alike. A replica of the exporter
//! that KEDA did not ask knows no answers and holds nothing: its model
//! answers as without this memory, never lower.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::scaler::wait::Held;

/// Kubernetes' default `behavior.scaleDown.stabilizationWindowSeconds`.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(300);

/// Answers one trigger was given, oldest first, none older than the window
/// the last [`Answers::note`] was told.
#[derive(Debug, Clone, Default)]
pub struct Answers {
    /// When each answer was given, and its replicas.
    given: VecDeque<(SystemTime, f64)>,
}

impl Answers {
    /// Answers kept at most: an HPA asks every 15 s, so 300 s is 20; the
    /// bound only guards against a client asking in a loop.
    const MAX: usize = 256;

    /// Notes the answer `replicas` given at `at`, forgetting those older
    /// than `window` before it.
    pub fn note(&mut self, at: SystemTime, replicas: f64, window: Duration) {
        if !replicas.is_finite() {
            return;
        }
        let start = at.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
        while self.given.front().is_some_and(|(t, _)| *t < start) {
            self.given.pop_front();
        }
        if self.given.len() >= Self::MAX {
            // Drop the lowest of the oldest half: the highest is what counts.
            self.given.pop_front();
        }
        self.given.push_back((at, replicas));
    }

    /// The highest answer given within `window` before `now`; `None` when
    /// none was.
    pub fn highest(&self, now: SystemTime, window: Duration) -> Option<f64> {
        self.highest_between(now.checked_sub(window), now)
    }

    /// What the HPA holds at `now` for a window of `window`: the highest
    /// answer in it, and the highest given `reaction` or more ago; `None`
    /// when no answer in the window is that old (the memory is younger
    /// than a reaction time: which pods run is not known).
    pub fn held(&self, now: SystemTime, window: Duration, reaction: Duration) -> Option<Held> {
        let settled_by = now.checked_sub(reaction)?;
        let settled = self.highest_between(now.checked_sub(window), settled_by)?;
        Some(Held {
            replicas: self.highest(now, window)?,
            settled,
        })
    }

    /// The highest answer given from `start` (the epoch when `None`) to `end`.
    fn highest_between(&self, start: Option<SystemTime>, end: SystemTime) -> Option<f64> {
        let start = start.unwrap_or(SystemTime::UNIX_EPOCH);
        self.given
            .iter()
            .filter(|(t, _)| *t >= start && *t <= end)
            .map(|(_, r)| *r)
            .reduce(f64::max)
    }
}

/// Which trigger answers belong to: the ScaledObject and its metric.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Trigger {
    /// The ScaledObject's namespace.
    pub namespace: String,
    /// The ScaledObject's name.
    pub name: String,
    /// The trigger's metric name (one ScaledObject may have several triggers).
    pub metric: String,
}

/// Every trigger's [`Answers`], shared by the gRPC handlers.
#[derive(Debug, Default)]
pub struct HeldAnswers {
    /// Answers per trigger.
    by_trigger: Mutex<HashMap<Trigger, Answers>>,
}

impl HeldAnswers {
    /// Triggers kept at most; beyond, the memory starts over (a bound
    /// against a client inventing ScaledObjects). Starting over forgets
    /// what is held, which only makes answers as high as without it.
    const MAX_TRIGGERS: usize = 10_000;

    /// What the HPA holds for `trigger` at `now` ([`Answers::held`]).
    pub fn held(
        &self,
        trigger: &Trigger,
        now: SystemTime,
        window: Duration,
        reaction: Duration,
    ) -> Option<Held> {
        // A poisoned lock only means a panic elsewhere; the answers are valid.
        let map = self.by_trigger.lock().unwrap_or_else(|p| p.into_inner());
        map.get(trigger)?.held(now, window, reaction)
    }

    /// Notes that `trigger` was answered `replicas` at `at`.
    pub fn note(&self, trigger: &Trigger, at: SystemTime, replicas: f64, window: Duration) {
        let mut map = self.by_trigger.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(trigger) && map.len() >= Self::MAX_TRIGGERS {
            map.clear();
        }
        map.entry(trigger.clone())
            .or_default()
            .note(at, replicas, window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    const WINDOW: Duration = Duration::from_secs(300);

    #[test]
    fn the_highest_answer_within_the_window_is_held_and_older_ones_are_not() {
        let mut a = Answers::default();
        assert_eq!(a.highest(at(0), WINDOW), None);
        a.note(at(0), 40.0, WINDOW);
        a.note(at(15), 12.0, WINDOW);
        a.note(at(30), 20.0, WINDOW);
        assert_eq!(a.highest(at(30), WINDOW), Some(40.0));
        assert_eq!(a.highest(at(300), WINDOW), Some(40.0));
        // 301 s after the 40: the HPA may scale below it.
        assert_eq!(a.highest(at(301), WINDOW), Some(20.0));
        assert_eq!(a.highest(at(331), WINDOW), None);
    }

    #[test]
    fn answers_a_reaction_time_old_are_settled_and_a_younger_memory_holds_nothing_known() {
        let reaction = Duration::from_secs(75);
        let mut a = Answers::default();
        a.note(at(0), 4.0, WINDOW);
        // Younger than a reaction time: which pods run is not known.
        assert_eq!(a.held(at(60), WINDOW, reaction), None);
        a.note(at(60), 30.0, WINDOW);
        a.note(at(75), 56.0, WINDOW);
        let h = a
            .held(at(90), WINDOW, reaction)
            .expect("an answer 90 s old");
        assert_eq!((h.replicas, h.settled), (56.0, 4.0));
        let h = a.held(at(150), WINDOW, reaction).expect("answers");
        assert_eq!((h.replicas, h.settled), (56.0, 56.0));
    }

    #[test]
    fn answers_are_kept_per_trigger_and_bounded() {
        let held = HeldAnswers::default();
        let t = |metric: &str| Trigger {
            namespace: "ns".into(),
            name: "workers".into(),
            metric: metric.into(),
        };
        let reaction = Duration::from_secs(75);
        held.note(&t("a"), at(0), 5.0, WINDOW);
        held.note(&t("a"), at(60), 9.0, WINDOW);
        let expect = Held {
            replicas: 9.0,
            settled: 5.0,
        };
        assert_eq!(held.held(&t("a"), at(80), WINDOW, reaction), Some(expect));
        assert_eq!(held.held(&t("b"), at(80), WINDOW, reaction), None);
        let mut a = Answers::default();
        for i in 0..1_000 {
            a.note(at(0), f64::from(i), Duration::from_secs(3600));
        }
        assert!(a.given.len() <= Answers::MAX);
        assert_eq!(a.highest(at(0), WINDOW), Some(999.0));
        a.note(at(1), f64::NAN, WINDOW);
        assert_eq!(a.highest(at(1), WINDOW), Some(999.0));
    }
}
