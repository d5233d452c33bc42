//! Every `scalerMetadata` key the scaler reads, declared once, as KEDA's
//! scalers declare theirs in a struct tag (`keda:"name=listLength,
//! default=5"`): its name, its default, the modes that accept it and the
//! line docs/keda.md's parameter table gives it.
//!
//! Everything else follows from [`ALL`]: the accepted-key list of error
//! messages and of `/scalers`' allow-list ([`ACCEPTED_KEYS`]), the
//! parser's defaults ([`Key::default_for`]) and its refusal of a key its
//! mode does not read ([`Key::refusal`]), `plan`'s QueueLength candidates
//! (the keys QueueLength does not take, dropped), and a test holding
//! docs/keda.md's parameter table to the same names, order, defaults and
//! lines (`tests/docs.rs`).

use crate::scaler::mode::Mode;

/// One metadata key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Its name, case-sensitive, as a trigger writes it.
    pub name: &'static str,
    /// What the scaler takes when the trigger leaves it out.
    pub default: Default,
    /// The modes that read it; any other refuses it, so a key that would
    /// do nothing is never silently accepted.
    pub modes: Modes,
    /// What it is for, in the words docs/keda.md's parameter table uses
    /// (its row holds this line).
    pub doc: &'static str,
}

/// What the scaler takes for a key the trigger leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Default {
    /// Nothing: the key only narrows or names (a `source`, a `vhost`).
    Nothing,
    /// The trigger must give it (in the modes that read it).
    Required,
    /// This value, parsed exactly as if the trigger had written it.
    Value(&'static str),
    /// Worked out by the scaler from what it reads (a measured service
    /// time, a library's backlog); the words say what.
    WorkedOut(&'static str),
}

/// The modes that read a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modes {
    /// Every mode.
    Every,
    /// These modes only; `hint` ends the refusal (after "remove it").
    Only {
        /// The modes that read it.
        modes: &'static [Mode],
        /// More advice for the refusal, such as " or set mode: Lag".
        hint: &'static str,
    },
    /// Every mode but this one, which refuses it for `why`.
    Except {
        /// The mode that refuses it.
        mode: Mode,
        /// Why that mode has no use for it.
        why: &'static str,
    },
}

impl Modes {
    /// Whether `mode` reads the key.
    pub fn accepts(self, mode: Mode) -> bool {
        match self {
            Modes::Every => true,
            Modes::Only { modes, .. } => modes.contains(&mode),
            Modes::Except { mode: refused, .. } => mode != refused,
        }
    }
}

impl Key {
    /// The value taken in `mode` when the trigger leaves the key out: its
    /// declared [`Default::Value`], where `mode` reads the key.
    pub fn default_for(&self, mode: Mode) -> Option<&'static str> {
        match self.default {
            Default::Value(v) if self.modes.accepts(mode) => Some(v),
            _ => None,
        }
    }

    /// Why `mode` refuses the key, if it does: the problem of an
    /// `INVALID_ARGUMENT` naming it.
    pub fn refusal(&self, mode: Mode) -> Option<String> {
        match self.modes {
            _ if self.modes.accepts(mode) => None,
            Modes::Every => None,
            Modes::Only { modes, hint } => {
                let names: Vec<&str> = modes.iter().map(|m| m.as_str()).collect();
                let list = match names.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("modes {} and {last}", rest.join(", "))
                    }
                    _ => format!("mode {}", names.join("")),
                };
                Some(format!(
                    "applies only to {list}, not {mode}; remove it{hint}"
                ))
            }
            Modes::Except { why, .. } => Some(format!("{why}; remove it")),
        }
    }
}

/// `WaitTime` alone reads it.
const WAIT_TIME: Modes = Modes::Only {
    modes: &[Mode::WaitTime],
    hint: "",
};

/// `queue`.
pub const QUEUE: Key = Key {
    name: "queue",
    default: Default::Required,
    modes: Modes::Every,
    doc: "a queue name exactly as in the `queue` label, or a glob over names",
};
/// `source`.
pub const SOURCE: Key = Key {
    name: "source",
    default: Default::Nothing,
    modes: Modes::Every,
    doc: "the configured source name",
};
/// `vhost`.
pub const VHOST: Key = Key {
    name: "vhost",
    default: Default::Nothing,
    modes: Modes::Every,
    doc: "the RabbitMQ vhost",
};
/// `mode`.
pub const MODE: Key = Key {
    name: "mode",
    default: Default::Value("QueueLength"),
    modes: Modes::Every,
    doc: "what is measured",
};
/// `value`.
pub const VALUE: Key = Key {
    name: "value",
    default: Default::Value("5"),
    modes: Modes::Except {
        mode: Mode::WaitTime,
        why: "the target of mode WaitTime is fixed: its value is replicas, against a target of 1",
    },
    doc: "per-replica target",
};
/// `activationValue`.
pub const ACTIVATION_VALUE: Key = Key {
    name: "activationValue",
    default: Default::Value("0"),
    modes: Modes::Except {
        mode: Mode::WaitTime,
        why: "mode WaitTime is active while jobs wait or arrive",
    },
    doc: "the trigger is active iff the value is **above** this",
};
/// `operation`.
pub const OPERATION: Key = Key {
    name: "operation",
    default: Default::Value("sum"),
    modes: Modes::Except {
        mode: Mode::WaitTime,
        why: "mode WaitTime sums backlogs and arrival rates and takes the oldest age over the matched queues",
    },
    doc: "over all queues the name or glob matches",
};
/// `window`.
pub const WINDOW: Key = Key {
    name: "window",
    default: Default::Value("1m"),
    modes: Modes::Only {
        modes: &[Mode::PublishRate, Mode::DeliverRate, Mode::WaitTime],
        hint: "",
    },
    doc: "the averaging window",
};
/// `group`.
pub const GROUP: Key = Key {
    name: "group",
    default: Default::Nothing,
    modes: Modes::Only {
        modes: &[Mode::Lag],
        hint: " or set mode: Lag",
    },
    doc: "the stream consumer group",
};
/// `state`.
pub const STATE: Key = Key {
    name: "state",
    default: Default::WorkedOut("waiting"),
    modes: Modes::Only {
        modes: &[Mode::QueueLength],
        hint: "",
    },
    doc: "a comma list of job states to sum",
};
/// `preset`.
pub const PRESET: Key = Key {
    name: "preset",
    default: Default::Nothing,
    modes: Modes::Every,
    doc: "when two presets of a source have a queue of that name",
};
/// `targetWait`.
pub const TARGET_WAIT: Key = Key {
    name: "targetWait",
    default: Default::Required,
    modes: WAIT_TIME,
    doc: "how soon after it is enqueued a job should start",
};
/// `processingTime`.
pub const PROCESSING_TIME: Key = Key {
    name: "processingTime",
    default: Default::WorkedOut("measured where the exporter can"),
    modes: WAIT_TIME,
    doc: "the average worker time per job",
};
/// `workersPerReplica`.
pub const WORKERS_PER_REPLICA: Key = Key {
    name: "workersPerReplica",
    default: Default::Value("1"),
    modes: WAIT_TIME,
    doc: "jobs one replica works on at once",
};
/// `targetWaitPercentile`.
pub const TARGET_WAIT_PERCENTILE: Key = Key {
    name: "targetWaitPercentile",
    default: Default::Value("99"),
    modes: WAIT_TIME,
    doc: "the share of arriving jobs",
};
/// `reactionTime`.
pub const REACTION_TIME: Key = Key {
    name: "reactionTime",
    default: Default::Value("75s"),
    modes: WAIT_TIME,
    doc: "how long from a job waiting to a new pod taking jobs",
};

/// Every key, in the order of messages and of docs/keda.md's table.
pub const ALL: [Key; 16] = [
    QUEUE,
    SOURCE,
    VHOST,
    MODE,
    VALUE,
    ACTIVATION_VALUE,
    OPERATION,
    WINDOW,
    GROUP,
    STATE,
    PRESET,
    TARGET_WAIT,
    PROCESSING_TIME,
    WORKERS_PER_REPLICA,
    TARGET_WAIT_PERCENTILE,
    REACTION_TIME,
];

/// Every key's name, as listed in error messages and `/scalers`'
/// allow-list.
pub const ACCEPTED_KEYS: [&str; ALL.len()] = names(&ALL);

/// The names of `keys`, in order.
const fn names<const N: usize>(keys: &[Key; N]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = keys[i].name;
        i += 1;
    }
    out
}

/// The key named `name`, if the scaler reads one.
pub fn named(name: &str) -> Option<&'static Key> {
    ALL.iter().find(|k| k.name == name)
}

/// The keys `mode` reads, in order.
pub fn read_by(mode: Mode) -> impl Iterator<Item = &'static Key> {
    ALL.iter().filter(move |k| k.modes.accepts(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_declared_once() {
        let mut names: Vec<&str> = ALL.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn a_refusal_names_the_modes_that_read_the_key() {
        assert_eq!(
            GROUP.refusal(Mode::Age).as_deref(),
            Some("applies only to mode Lag, not Age; remove it or set mode: Lag")
        );
        assert_eq!(
            WINDOW.refusal(Mode::QueueLength).as_deref(),
            Some(
                "applies only to modes PublishRate, DeliverRate and WaitTime, not QueueLength; remove it"
            )
        );
        assert_eq!(WINDOW.refusal(Mode::WaitTime), None);
        assert!(
            VALUE
                .refusal(Mode::WaitTime)
                .is_some_and(|r| r.ends_with("; remove it"))
        );
    }

    #[test]
    fn a_default_holds_only_where_its_mode_reads_the_key() {
        assert_eq!(VALUE.default_for(Mode::QueueLength), Some("5"));
        assert_eq!(VALUE.default_for(Mode::WaitTime), None);
        assert_eq!(REACTION_TIME.default_for(Mode::WaitTime), Some("75s"));
        assert_eq!(REACTION_TIME.default_for(Mode::Age), None);
        assert_eq!(TARGET_WAIT.default_for(Mode::WaitTime), None);
    }
}
