//! Zero config: a source given no `queues:` recognises the queue libraries'
//! keys itself, in the discovery round, and reports each library's queues
//! exactly as the matching `- preset:` entry would (the entries are built
//! here and polled by the same code). What marks each library is its own
//! file's (`Recognise::mark_read`, `Recognise::recognise`; docs/presets.md,
//! "Zero config").
//!
//! A round is one way: **gather** (`gather.rs`: all its I/O, SCAN pages,
//! `TYPE`, the marks' reads, bounded set reads; a plain value) →
//! **classify** (`classify.rs`, pure: the keys against the libraries'
//! marks as read → each library's entries, the keys they consume, those
//! withheld for an unread mark) → **adopt** (`adopt.rs`, pure: the plain
//! keys within `max_keys`, what was left out, what the next round starts
//! from). This file calls them in that order; a stage never calls this
//! file or an earlier stage, and uses an earlier stage's output types
//! only (`tests/architecture.rs`). Where a later step needs more I/O (the
//! keys a queue removed meanwhile left behind, typed again; the
//! libraries-only pass's keys recognition asks the type of; a library
//! round's registries once its marks are unchanged), it is a further
//! gather step this file drives with a plain value. The libraries' marks
//! (`marks.rs`) and what earlier rounds learnt (`learnt.rs`) are leaves
//! every stage may use.

mod adopt;
pub(super) mod classify;
mod gather;
mod learnt;
pub(super) mod marks;

use std::time::Instant;

use super::super::commands::Conn;
use super::super::tracked::KeyState;
use super::Unit;
use super::remembered::Remembered;
use super::spec::PresetSpec;
use crate::config::RedisSourceConfig;
pub use adopt::{LeftOut, LibraryRound, ZeroConfig};
pub use learnt::Learnt;
pub use marks::hides;

/// One zero-config keyspace scan: [`gather::scan`] (the untyped pass,
/// `TYPE` of the names `remembered` does not hold, the marks' reads), the
/// recognition ([`classify::recognise`], off the runtime's threads), the
/// keys the queues `polled` until now owned that nothing claims now typed
/// again ([`gather::retype`]), then [`adopt::scan`]. With `plain_keys:
/// false`, [`libraries_only`].
pub async fn scan(
    conn: &mut Conn,
    config: &RedisSourceConfig,
    known: &[(Vec<u8>, usize)],
    remembered: Option<Remembered>,
    polled: &[(PresetSpec, Vec<Unit>)],
) -> redis::RedisResult<ZeroConfig> {
    if !config.plain_keys {
        return libraries_only(conn, config).await;
    }
    let gathered = gather::scan(conn, config, known, remembered).await?;
    let polled = polled.to_vec();
    let (mut gathered, recognition) = apart(move || {
        let recognition = classify::recognise(&gathered.seen, &gathered.found, &polled);
        (gathered, recognition)
    })
    .await?;
    if !recognition.recheck.is_empty() {
        gather::retype(conn, &mut gathered.found, &recognition.recheck).await?;
    }
    Ok(adopt::scan(gathered, recognition, config, Instant::now()))
}

/// Zero config with `plain_keys: false`: the libraries alone, in ONE SCAN
/// pass and the marks' reads ([`gather::library_marks`]), then `TYPE` of
/// just the keys recognition looks at for the marks found
/// ([`marks::evidence`], off the runtime's threads;
/// [`gather::evidence_keys`]) and the marks beside them; the same
/// recognition as with plain keys, no plain key.
async fn libraries_only(conn: &Conn, config: &RedisSourceConfig) -> redis::RedisResult<ZeroConfig> {
    let gather::LibraryMarks {
        seen,
        names,
        marks_left,
    } = gather::library_marks(conn, config).await?;
    let (mut seen, wanted) = apart(move || {
        let wanted = marks::evidence(&seen, names);
        (seen, wanted)
    })
    .await?;
    let keys = gather::evidence_keys(conn, config, wanted, &mut seen, marks_left).await?;
    let gather::EvidenceKeys { found, refused } = keys;
    let (seen, recognition) = apart(move || {
        let recognition = classify::recognise(&seen, &found, &[]);
        (seen, recognition)
    })
    .await?;
    Ok(adopt::libraries_only(
        &seen,
        refused,
        recognition,
        Instant::now(),
    ))
}

/// One library round (see `learnt.rs`), given the plain keys tracked with
/// their types: the marks the scan `learnt` read, by name
/// ([`gather::learnt_marks`]); if none changed ([`classify::changed_since`]),
/// the registries listed again ([`gather::relisted`]), then
/// [`adopt::library_round`]. `None` when a mark changed since the scan:
/// the round must scan instead.
pub async fn libraries(
    conn: &Conn,
    config: &RedisSourceConfig,
    plain: &[(Vec<u8>, KeyState)],
    learnt: &Learnt,
) -> redis::RedisResult<Option<LibraryRound>> {
    let seen = gather::learnt_marks(conn, config, learnt).await?;
    if classify::changed_since(&seen, learnt) {
        return Ok(None);
    }
    let read = gather::relisted(conn, config, learnt).await?;
    if classify::refused_since(&read.refused, learnt) {
        return Ok(None);
    }
    Ok(Some(adopt::library_round(learnt, &seen, read, plain)))
}

/// Runs the pure `pass` (recognition, the evidence check: each a pass over
/// every name found) on the blocking pool, so a large keyspace's pass
/// leaves the runtime's threads to polls and scrapes.
async fn apart<T: Send + 'static>(
    pass: impl FnOnce() -> T + Send + 'static,
) -> redis::RedisResult<T> {
    tokio::task::spawn_blocking(pass).await.map_err(|e| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "zero config's recognition pass ended",
            e.to_string(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn a_long_recognition_pass_leaves_the_runtime_to_other_tasks() {
        // One thread: a pass run in place would hold it until it ends.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ticks = Arc::new(AtomicUsize::new(0));
        let seen = ticks.clone();
        let (during, result) = rt.block_on(async move {
            let ticker = tokio::spawn(async move {
                loop {
                    seen.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
            tokio::task::yield_now().await;
            let before = ticks.load(Ordering::Relaxed);
            let result = super::apart(|| {
                std::thread::sleep(Duration::from_millis(200));
                42
            })
            .await;
            ticker.abort();
            (ticks.load(Ordering::Relaxed) - before, result)
        });
        assert_eq!(result.ok(), Some(42));
        assert!(during >= 5, "the other task ran {during} times");
    }
}
