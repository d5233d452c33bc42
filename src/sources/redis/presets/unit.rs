//! What one sample of a preset entry stands for ([`Unit`]): a logical
//! queue, or the keys a library's queues share. A leaf, so that the
//! engine, zero config's stages and the library files share it without
//! reaching the folder's `mod.rs`.

/// What one sample of a preset entry stands for. Typed, so that a queue a
/// library names like the shared keys' label (a Sidekiq queue literally
/// called `(all)`) stays a queue of its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unit {
    /// A logical queue (for priority-zset, one priority), named by its raw
    /// bytes as the registry holds them.
    Queue(Vec<u8>),
    /// The keys the library's queues share (Sidekiq's `schedule`, `retry`,
    /// `dead`; Celery's `unacked`; priority-zset's `processing`...),
    /// reported under [`ALL_QUEUES`](crate::config::ALL_QUEUES) (priority-zset: under its prefix).
    Shared,
}

impl Unit {
    /// The queue's raw name; empty for the shared keys (whose commands
    /// name no queue).
    pub fn name(&self) -> &[u8] {
        match self {
            Unit::Queue(q) => q,
            Unit::Shared => &[],
        }
    }
}
