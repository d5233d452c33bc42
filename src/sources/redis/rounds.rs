//! A Redis source's discovery rounds, each on its own task with its own
//! deadline: what a round is given, what it finds, and (zero config)
//! whether it scans the keyspace or reads the libraries the last scan
//! found ([`presets::zero::libraries`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::commands::Conn;
use super::tracked::KeyState;
use super::{discovery, presets};
use crate::config::RedisSourceConfig;

/// Discovery rounds of a source.
#[derive(Default)]
pub(super) struct Rounds {
    /// When the last round finished; `None` before the first (nothing is
    /// known yet) and to force one.
    pub last: Option<Instant>,
    /// The round running on its own task, if any; aborted when dropped (the
    /// source stopped, or its master moved).
    pub running: Option<DiscoveryTask>,
    /// A new round is wanted at the next poll, whenever the last one was.
    pub forced: bool,
    /// Zero config: the next round scans the keyspace, whenever the last
    /// scan was (asked for by [`Rounds::force`]).
    pub scan_wanted: bool,
    /// Zero config: the last logged line of what discovery recognised.
    pub picture: Option<String>,
    /// Zero config: what the last rounds learnt, lent to the next round
    /// (lost with a round that fails, so the next is a full scan).
    pub memory: Memory,
    /// Rounds finished so far, by kind (`queue_exporter_discovery_rounds`).
    pub finished: crate::snapshot::DiscoveryRounds,
    /// What the last round could not tell (logged when it changes).
    pub left_out: presets::zero::LeftOut,
}

impl Rounds {
    /// Drops the running round and asks for a new one, a keyspace scan;
    /// what the last round found stays known.
    pub fn force(&mut self) {
        self.running = None;
        self.forced = true;
        self.scan_wanted = true;
    }

    /// Whether the next zero-config round must scan the keyspace: asked
    /// for, nothing learnt yet, or `keyspace_scan_interval` since the last
    /// scan.
    pub fn scan_due(&self, config: &RedisSourceConfig) -> bool {
        self.scan_wanted
            || self.memory.learnt.as_ref().is_none_or(|l| {
                let every = l.scan_every(config.keyspace_scan_interval, config.discovery_interval);
                l.scan_due(every, Instant::now())
            })
    }
}

/// Zero config: what earlier rounds learnt, for the next.
#[derive(Debug, Default)]
pub(super) struct Memory {
    /// The names of no queue type the last scans saw.
    pub remembered: Option<presets::remembered::Remembered>,
    /// What the last scan recognised, for the library rounds after it.
    pub learnt: Option<presets::zero::Learnt>,
}

/// What a round is given.
pub(super) struct RoundInput {
    /// The source's configuration, a copy per round (every
    /// `discovery_interval`): the task outlives any borrow of the source.
    pub config: Arc<RedisSourceConfig>,
    /// The pattern keys tracked so far (see [`discovery::discover`]).
    pub known: Vec<(Vec<u8>, usize)>,
    /// Zero config, a library round: the plain keys tracked, with their
    /// types (empty for a scan).
    pub plain: Vec<(Vec<u8>, KeyState)>,
    /// Zero config: what earlier rounds learnt.
    pub memory: Memory,
    /// The configured `- preset:` entries, resolved.
    pub configured: Arc<[presets::PresetSpec]>,
    /// Zero config: the library entries polled now, with their units.
    pub polled: Vec<(presets::PresetSpec, Vec<presets::Unit>)>,
    /// Zero config: scan the keyspace rather than read the libraries the
    /// last scan found.
    pub scan: bool,
}

/// A discovery round on its own task. Dropping it aborts the task.
pub(super) struct DiscoveryTask {
    /// The round's outcome.
    pub handle: tokio::task::JoinHandle<Result<Found, DiscoveryFailure>>,
    /// When it started (for the error of a poll that cannot wait longer).
    pub started: Instant,
}

impl DiscoveryTask {
    /// Starts a round (plain keys, then preset registries; or zero
    /// config's) on `conn`, given up after `deadline`.
    pub fn spawn(mut conn: Conn, input: RoundInput, deadline: Duration) -> DiscoveryTask {
        let round = async move {
            conn.begin_discovery();
            let RoundInput {
                config,
                known,
                plain,
                memory,
                configured,
                polled,
                scan,
            } = input;
            if config.recognise {
                let round = ZeroConfigRound {
                    plain: &plain,
                    memory,
                    polled: &polled,
                    scan,
                };
                return zero_config(&mut conn, &config, &known, round).await;
            }
            let plain = discovery::discover(&mut conn, &config, &known).await?;
            let registries =
                presets::registries(&configured, &mut conn, config.scan_count, config.max_keys)
                    .await?;
            Ok(Found {
                plain: Plain::Found(plain),
                presets: registries.units,
                recognised: None,
                memory: Memory::default(),
                kind: RoundKind::Full,
                left_out: presets::zero::LeftOut {
                    names_unknown: registries
                        .refused
                        .iter()
                        .map(|(k, _)| super::keyname::display_key(k))
                        .collect(),
                    unread: registries.refused.into_iter().map(|(_, r)| r).collect(),
                    keys: 0,
                    withheld: registries
                        .near_refused
                        .iter()
                        .map(|k| super::keyname::display_key(k))
                        .collect(),
                    over_hides: presets::zero::hides(
                        registries.over.iter().map(|(k, _)| k.as_slice()),
                    ),
                    over: registries
                        .over
                        .iter()
                        .map(|(k, b)| (super::keyname::display_key(k), *b))
                        .collect(),
                },
            })
        };
        let handle = tokio::spawn(async move {
            match tokio::time::timeout(deadline, round).await {
                Ok(r) => r.map_err(DiscoveryFailure::Redis),
                Err(_) => Err(DiscoveryFailure::Deadline(deadline)),
            }
        });
        DiscoveryTask {
            handle,
            started: Instant::now(),
        }
    }
}

/// What a zero-config round is given beside the connection and config.
struct ZeroConfigRound<'a> {
    /// The plain keys tracked, with their types (empty for a scan).
    plain: &'a [(Vec<u8>, KeyState)],
    /// What earlier rounds learnt.
    memory: Memory,
    /// The library entries polled now, with their units.
    polled: &'a [(presets::PresetSpec, Vec<presets::Unit>)],
    /// Scan the keyspace rather than read the libraries.
    scan: bool,
}

/// A zero-config round: a library round when no scan is due and nothing
/// changed since the last scan, else a scan.
async fn zero_config(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
    round: ZeroConfigRound<'_>,
) -> redis::RedisResult<Found> {
    let ZeroConfigRound {
        plain,
        memory,
        polled,
        scan,
    } = round;
    if let (false, Some(learnt)) = (scan, &memory.learnt) {
        let round = presets::zero::libraries(conn, config, plain, learnt).await?;
        if let Some(round) = round {
            let (specs, units) = round.entries.into_iter().unzip();
            return Ok(Found {
                plain: Plain::Kept {
                    now_owned: round.now_owned,
                },
                presets: units,
                recognised: Some(specs),
                memory,
                kind: RoundKind::Libraries,
                left_out: round.left_out,
            });
        }
    }
    let started = Instant::now();
    let mut zero = presets::zero::scan(conn, config, known, memory.remembered, polled).await?;
    zero.learnt.took_since(started);
    let (specs, units) = zero.entries.into_iter().unzip();
    Ok(Found {
        plain: Plain::Found(zero.plain),
        presets: units,
        recognised: Some(specs),
        memory: Memory {
            remembered: zero.remembered,
            learnt: Some(zero.learnt),
        },
        kind: match zero.from_memory {
            true => RoundKind::Remembered,
            false => RoundKind::Full,
        },
        left_out: zero.left_out,
    })
}

impl Drop for DiscoveryTask {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// What a discovery round found.
pub(super) struct Found {
    /// Key and pattern entries.
    pub plain: Plain,
    /// Per preset entry, the logical queues its registry names.
    pub presets: Vec<Vec<presets::Unit>>,
    /// Zero config: the preset entries recognised, one per `presets` item.
    pub recognised: Option<Vec<presets::PresetSpec>>,
    /// Zero config: what the round learnt, for the next.
    pub memory: Memory,
    /// Which kind of round it was (`queue_exporter_discovery_rounds`).
    pub kind: RoundKind,
    /// What the round could not tell for want of reading a library's mark.
    pub left_out: presets::zero::LeftOut,
}

/// The plain keys a round found.
pub(super) enum Plain {
    /// The keys to track instead of those before.
    Found(discovery::Discovered),
    /// Zero config's library round: the keys tracked stay, less these,
    /// which a library's entry now owns.
    Kept {
        /// Keys no longer plain.
        now_owned: BTreeSet<Vec<u8>>,
    },
}

/// Which kind of round finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RoundKind {
    /// Every entry scanned afresh (zero config: `TYPE` of every name).
    Full,
    /// Zero config: one untyped pass, `TYPE` of the names not remembered.
    Remembered,
    /// Zero config: the libraries the last scan found, read by name.
    Libraries,
}

/// Why a discovery round ended without an outcome.
pub(super) enum DiscoveryFailure {
    /// A command failed (connection, refused SCAN or registry read...).
    Redis(redis::RedisError),
    /// The round ran past its own deadline.
    Deadline(Duration),
}
