//! `queue-exporter plan`'s engine: a queue's traffic replayed through the
//! exporter, KEDA and the HPA in virtual time, to tell what a trigger would
//! have cost and how late jobs would have started. The grid of
//! `scripts/bench --closed-loop --grid` (benches/waitgrid.rs) runs the same
//! code, so the grid and `plan` cannot disagree.
//!
//! - [`cluster`]: KEDA's and the HPA's rules (activation, cooldown, the
//!   AverageValue calculator with its tolerance, the scale-up limit, the
//!   scale-down stabilisation).
//! - [`replay`]: the world (a FIFO list, pods, the exporter's polls into a
//!   snapshot) stepped sync by sync, every answer from `query::evaluate`.
//! - [`score`]: a replay's share on time, waits and worker time.
//! - [`trace`]: `--trace FILE`, the recorded traffic as CSV.
//! - [`prometheus`]: `--prometheus URL`, the exporter's series of the queue as a trace.
//! - [`scaledobject`]: `--scaledobject FILE`, the user's ScaledObject.
//! - [`command`]: the command: the candidates, each replayed and scored.
//! - [`report`]: its table, recommendation YAML and JSON.
//! - [`plot`]: `--plot FILE.svg|FILE.png`, replicas, backlog and waits over time.

pub mod cluster;
pub mod command;
pub mod plot;
pub mod prometheus;
pub mod replay;
pub mod report;
pub mod scaledobject;
pub mod score;
pub mod trace;
