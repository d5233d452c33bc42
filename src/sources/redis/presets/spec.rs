//! A `- preset:` entry resolved against its library: the library and the
//! options that locate its keys ([`Preset`]), with the entry's counters
//! ([`PresetSpec`]). The config holds the entry as plain data
//! (`config::PresetEntry`); `entry.rs` turns it into these, each library
//! reading its own options (`options.rs`).

use std::time::Duration;

use crate::config::CounterKeys;
use crate::snapshot::PresetKind;

/// Default bound on the per-poll stalled checks (one `EXISTS` each).
pub const DEFAULT_STALLED_CHECK_LIMIT: usize = 100;

/// One `- preset: <name>` entry, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct PresetSpec {
    /// Which library, with its options.
    pub preset: Preset,
    /// Integer string keys read with `GET` as job totals, for layouts whose
    /// library keeps no totals of its own.
    pub counters: Option<CounterKeys>,
}

/// A library and the options that locate its keys: every option a library
/// may take, with the library's defaults filled in (an option the library
/// does not take stays at its empty value).
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// Which library (its config name, the `preset` label).
    pub kind: PresetKind,
    /// Key prefix (`prefix:`), the library's own by default.
    pub prefix: String,
    /// Queue names, for a library without a registry (`queues:`).
    pub queues: Vec<String>,
    /// A single queue's name (`name:`), for a one-queue layout.
    pub name: String,
    /// Priority steps (`priority_steps:`); step 0 is the bare queue name.
    pub priority_steps: Vec<u8>,
    /// Separator between a queue name and its step (`sep:`).
    pub sep: String,
    /// Time after which a taken job counts as stalled (`visibility_timeout:`).
    pub visibility_timeout: Duration,
    /// Jobs (or processes) whose lease is checked per poll, at most
    /// (`stalled_check_limit:`).
    pub stalled_check_limit: usize,
}

impl Preset {
    /// A preset of `kind` at `prefix` with every other option empty and the
    /// default stalled check limit: what a library's `configure` starts
    /// from, and what zero config recognises.
    pub fn new(kind: PresetKind, prefix: &str) -> Preset {
        Preset {
            kind,
            prefix: prefix.to_string(),
            queues: Vec::new(),
            name: String::new(),
            priority_steps: Vec::new(),
            sep: String::new(),
            visibility_timeout: Duration::ZERO,
            stalled_check_limit: DEFAULT_STALLED_CHECK_LIMIT,
        }
    }

    /// Which library: the `preset` label.
    pub fn kind(&self) -> PresetKind {
        self.kind
    }
}
