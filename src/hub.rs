//! Where sources publish snapshots and readers pick them up.
//!
//! Each source owns one [`SnapshotPublisher`]; every reader holds a clone of
//! the [`Hub`]. Publishing replaces the source's snapshot atomically and wakes
//! anything waiting in [`Hub::subscribe`], so push-style readers react to new
//! data instead of polling on a timer.
//!
//! The set of sources itself can be replaced while readers run (a config
//! reload): [`HubControl::install`] swaps it in one step, so a reader sees
//! either the old sources or the new ones, never a mix, and every open
//! stream or scrape keeps working across the swap.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::snapshot::{Libraries, QueueScope, Snapshot, SourceKind};

/// Read side: the latest snapshot of every source.
#[derive(Debug, Clone)]
pub struct Hub {
    /// The current set of sources; replaced as a whole on reload.
    sources: watch::Receiver<SourceSet>,
    /// Bumped by every publish of any source, and by every swap of the set.
    epoch: watch::Receiver<u64>,
}

/// The sources readers see, in config order.
#[derive(Debug, Clone)]
struct SourceSet {
    /// One slot per source.
    slots: Arc<[SourceSlot]>,
    /// Bumped by every [`HubControl::install`], so a reader can drop what it
    /// derived from the previous set (the scaler's parsed-metadata cache).
    generation: u64,
    /// The queue libraries the exporter knows, as readers learn them.
    libraries: Arc<Libraries>,
}

/// The read end of one source's snapshot slot. A running source's slot is
/// carried into the next set when a reload keeps that source.
#[derive(Debug, Clone)]
pub struct SourceSlot(watch::Receiver<Arc<Snapshot>>);

impl SourceSlot {
    /// The latest snapshot in the slot.
    pub fn current(&self) -> Arc<Snapshot> {
        self.0.borrow().clone()
    }
}

/// Replaces the set of sources a [`Hub`] serves (config reload).
#[derive(Debug)]
pub struct HubControl {
    /// The set readers see.
    set: watch::Sender<SourceSet>,
    /// The hub-wide change counter, shared with every publisher.
    epoch: Arc<watch::Sender<u64>>,
}

/// Write side for one source.
#[derive(Debug)]
pub struct SnapshotPublisher {
    /// This source's slot.
    slot: watch::Sender<Arc<Snapshot>>,
    /// The hub-wide change counter.
    epoch: Arc<watch::Sender<u64>>,
}

/// Builds a [`Hub`] (or the next set of sources of one) and the publishers
/// that feed it.
#[derive(Debug)]
pub struct HubBuilder {
    /// Slots collected so far, in config order.
    sources: Vec<SourceSlot>,
    /// Shared change counter.
    epoch: Arc<watch::Sender<u64>>,
    /// The queue libraries every snapshot tells of (none by default).
    libraries: Arc<Libraries>,
}

impl Default for HubBuilder {
    fn default() -> Self {
        HubBuilder {
            sources: Vec::new(),
            epoch: Arc::new(watch::Sender::new(0)),
            libraries: Arc::default(),
        }
    }
}

impl HubBuilder {
    /// The same builder, whose hub and snapshots tell of `libraries`.
    pub fn with_libraries(self, libraries: Libraries) -> Self {
        HubBuilder {
            libraries: Arc::new(libraries),
            ..self
        }
    }

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
        let initial = Snapshot::initial(name, kind, poll_interval)
            .with_scope(scope)
            .with_libraries(self.libraries.clone());
        let (tx, rx) = watch::channel(Arc::new(initial));
        self.sources.push(SourceSlot(rx));
        SnapshotPublisher {
            slot: tx,
            epoch: self.epoch.clone(),
        }
    }

    /// Adds a source that is already running (its publisher lives on in its
    /// poll loop): a reload that keeps a source carries its slot over.
    pub fn keep(&mut self, slot: SourceSlot) {
        self.sources.push(slot);
    }

    /// Finishes a hub whose set of sources never changes.
    pub fn build(self) -> Hub {
        self.build_swappable().0
    }

    /// Finishes a hub, with the control that can later replace its sources.
    pub fn build_swappable(self) -> (Hub, HubControl) {
        let (set, rx) = watch::channel(SourceSet {
            slots: self.sources.into(),
            generation: 0,
            libraries: self.libraries,
        });
        let hub = Hub {
            sources: rx,
            epoch: self.epoch.subscribe(),
        };
        (
            hub,
            HubControl {
                set,
                epoch: self.epoch,
            },
        )
    }
}

impl HubControl {
    /// An empty builder for the next set of sources; its publishers wake
    /// this hub's readers.
    pub fn builder(&self) -> HubBuilder {
        HubBuilder {
            sources: Vec::new(),
            epoch: self.epoch.clone(),
            libraries: self.set.borrow().libraries.clone(),
        }
    }

    /// Makes `next` the set every reader sees, at once, and wakes them.
    /// Slots left out stay readable by whoever still holds them (a source
    /// being stopped), but no reader sees them any more.
    pub fn install(&self, next: HubBuilder) {
        self.set.send_modify(|set| {
            set.slots = next.sources.into();
            set.generation = set.generation.wrapping_add(1);
        });
        self.epoch.send_modify(|e| *e = e.wrapping_add(1));
    }
}

impl SnapshotPublisher {
    /// The snapshot currently published.
    pub fn current(&self) -> Arc<Snapshot> {
        self.slot.borrow().clone()
    }

    /// The read end of this source's slot, to keep it in the next set of
    /// sources on a reload ([`HubBuilder::keep`]).
    pub fn slot(&self) -> SourceSlot {
        SourceSlot(self.slot.subscribe())
    }

    /// Replaces the snapshot and wakes readers.
    pub fn publish(&self, snapshot: Snapshot) {
        self.slot.send_replace(Arc::new(snapshot));
        self.epoch.send_modify(|e| *e = e.wrapping_add(1));
    }
}

impl Hub {
    /// The current slots (a cheap clone, so no lock is held while reading them).
    fn slots(&self) -> Arc<[SourceSlot]> {
        self.sources.borrow().slots.clone()
    }

    /// The latest snapshot of every source, in config order.
    pub fn snapshots(&self) -> Vec<Arc<Snapshot>> {
        self.slots().iter().map(SourceSlot::current).collect()
    }

    /// The queue libraries the exporter knows (their names, where their
    /// arrivals come from).
    pub fn libraries(&self) -> Arc<Libraries> {
        self.sources.borrow().libraries.clone()
    }

    /// Changes each time the set of sources is replaced (not on publishes).
    pub fn generation(&self) -> u64 {
        self.sources.borrow().generation
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
        self.slots().iter().all(|s| s.0.borrow().polled)
    }

    /// True once any source has published a successful poll.
    pub fn any_success(&self) -> bool {
        self.slots()
            .iter()
            .any(|s| s.0.borrow().last_success.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::AnyName;

    fn add(b: &mut HubBuilder, name: &str) -> SnapshotPublisher {
        b.add_source(
            name,
            SourceKind::Redis,
            Duration::from_secs(1),
            Arc::new(AnyName),
        )
    }

    fn names(hub: &Hub) -> Vec<String> {
        hub.snapshots()
            .iter()
            .map(|s| s.source.to_string())
            .collect()
    }

    #[test]
    fn install_swaps_the_whole_set_and_wakes_readers() {
        let mut b = HubBuilder::default();
        let a = add(&mut b, "a");
        let _old = add(&mut b, "old");
        let (hub, control) = b.build_swappable();
        let mut woken = hub.subscribe();
        woken.borrow_and_update();
        assert_eq!(names(&hub), ["a", "old"]);
        let generation = hub.generation();

        let mut next = control.builder();
        let new = add(&mut next, "new");
        next.keep(a.slot());
        control.install(next);
        assert!(woken.has_changed().unwrap());
        assert_eq!(names(&hub), ["new", "a"]);
        assert_ne!(hub.generation(), generation);

        // The kept source's publisher still feeds the hub, and so does the
        // new one; both wake readers through the shared epoch.
        woken.borrow_and_update();
        let mut polled = Snapshot::initial("a", SourceKind::Redis, Duration::from_secs(1));
        polled.polled = true;
        a.publish(polled);
        assert!(woken.has_changed().unwrap());
        assert!(!hub.all_polled());
        let mut polled = Snapshot::initial("new", SourceKind::Redis, Duration::from_secs(1));
        polled.polled = true;
        new.publish(polled);
        assert!(hub.all_polled());
    }
}
