//! Where sources publish snapshots and readers pick them up.
//!
//! Each source owns one [`SnapshotPublisher`]; every reader holds a clone of
//! the [`Hub`]. Publishing replaces the source's snapshot atomically and wakes
//! anything waiting in [`Hub::changed`], so push-style readers react to new
//! data instead of polling on a timer.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::snapshot::{QueueScope, Snapshot, SourceKind};

/// Read side: the latest snapshot of every source.
#[derive(Debug, Clone)]
pub struct Hub {
    /// One receiver per source, in config order.
    sources: Arc<[watch::Receiver<Arc<Snapshot>>]>,
    /// Bumped by every publish of any source.
    epoch: watch::Receiver<u64>,
}

/// Write side for one source.
#[derive(Debug)]
pub struct SnapshotPublisher {
    /// This source's slot.
    slot: watch::Sender<Arc<Snapshot>>,
    /// The hub-wide change counter.
    epoch: Arc<watch::Sender<u64>>,
}

/// Builds a [`Hub`] and the publishers that feed it.
#[derive(Debug)]
pub struct HubBuilder {
    /// Receivers collected so far.
    sources: Vec<watch::Receiver<Arc<Snapshot>>>,
    /// Shared change counter.
    epoch: Arc<watch::Sender<u64>>,
}

impl Default for HubBuilder {
    fn default() -> Self {
        HubBuilder {
            sources: Vec::new(),
            epoch: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl HubBuilder {
    /// Registers a source and returns the publisher it must use. `scope`
    /// says which queue names the source's configuration can report; it
    /// travels with every snapshot.
    pub fn add_source(
        &mut self,
        name: &str,
        kind: SourceKind,
        poll_interval: Duration,
        scope: Arc<dyn QueueScope>,
    ) -> SnapshotPublisher {
        let initial = Snapshot::initial(name, kind, poll_interval).with_scope(scope);
        let (tx, rx) = watch::channel(Arc::new(initial));
        self.sources.push(rx);
        SnapshotPublisher {
            slot: tx,
            epoch: self.epoch.clone(),
        }
    }

    /// Finishes the hub; no more sources may be added.
    pub fn build(self) -> Hub {
        Hub {
            sources: self.sources.into(),
            epoch: self.epoch.subscribe(),
        }
    }
}

impl SnapshotPublisher {
    /// The snapshot currently published.
    pub fn current(&self) -> Arc<Snapshot> {
        self.slot.borrow().clone()
    }

    /// Replaces the snapshot and wakes readers.
    pub fn publish(&self, snapshot: Snapshot) {
        self.slot.send_replace(Arc::new(snapshot));
        self.epoch.send_modify(|e| *e = e.wrapping_add(1));
    }
}

impl Hub {
    /// The latest snapshot of every source, in config order.
    pub fn snapshots(&self) -> Vec<Arc<Snapshot>> {
        self.sources.iter().map(|rx| rx.borrow().clone()).collect()
    }

    /// A number that changes whenever any snapshot changes.
    pub fn epoch(&self) -> u64 {
        *self.epoch.borrow()
    }

    /// A receiver that is woken whenever any snapshot changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.epoch.clone()
    }

    /// True once every source has finished at least one poll.
    pub fn all_polled(&self) -> bool {
        self.sources.iter().all(|rx| rx.borrow().polled)
    }

    /// True once any source has published a successful poll.
    pub fn any_success(&self) -> bool {
        self.sources
            .iter()
            .any(|rx| rx.borrow().last_success.is_some())
    }
}
