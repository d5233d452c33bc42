//! A `- preset:` entry resolved against its library: the library and the
//! options that locate its keys ([`Preset`]), with the entry's counters
//! ([`PresetSpec`]); and the options as written, each parsed by its type
//! only ([`Given`]), which a library's `configure` reads. The config
//! holds the entry as plain data (`config::PresetEntry`); `entry.rs`
//! turns it into these.

use std::time::Duration;

use crate::config::{Bounds, CounterKeys, parse_duration};
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

/// The options an entry wrote, each parsed by its type only: a library's
/// `configure` reads those it takes (the others were refused before).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Given {
    /// `prefix:`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// `queues:`.
    #[serde(default)]
    pub queues: Option<Vec<String>>,
    /// `priority_steps:`.
    #[serde(default)]
    pub priority_steps: Option<Vec<u8>>,
    /// `sep:`.
    #[serde(default)]
    pub sep: Option<String>,
    /// `visibility_timeout:`, as written (a duration with a unit).
    #[serde(default)]
    pub visibility_timeout: Option<String>,
    /// `heartbeat_timeout:`, as written (a duration with a unit).
    #[serde(default)]
    pub heartbeat_timeout: Option<String>,
    /// `name:`.
    #[serde(default)]
    pub name: Option<String>,
    /// `stalled_check_limit:`.
    #[serde(default)]
    pub stalled_check_limit: Option<usize>,
}

impl Given {
    /// The option words written, in a fixed order.
    pub fn words(&self) -> Vec<&'static str> {
        [
            ("prefix", self.prefix.is_some()),
            ("queues", self.queues.is_some()),
            ("priority_steps", self.priority_steps.is_some()),
            ("sep", self.sep.is_some()),
            ("visibility_timeout", self.visibility_timeout.is_some()),
            ("heartbeat_timeout", self.heartbeat_timeout.is_some()),
            ("name", self.name.is_some()),
            ("stalled_check_limit", self.stalled_check_limit.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect()
    }

    /// `visibility_timeout:` as a duration, if written (at most a year).
    pub fn visibility_timeout(&self) -> Result<Option<Duration>, String> {
        timeout("visibility_timeout", self.visibility_timeout.as_deref())
    }

    /// `heartbeat_timeout:` as a duration, if written (at most a year).
    pub fn heartbeat_timeout(&self) -> Result<Option<Duration>, String> {
        timeout("heartbeat_timeout", self.heartbeat_timeout.as_deref())
    }
}

/// The timeout option `word` as a duration, if written (at most a year).
fn timeout(word: &str, written: Option<&str>) -> Result<Option<Duration>, String> {
    let Some(t) = written else {
        return Ok(None);
    };
    let d = parse_duration(t).map_err(|e| format!("{word}: {e}"))?;
    Bounds::YEAR.check(d).map_err(|e| format!("{word}: {e}"))?;
    Ok(Some(d))
}
