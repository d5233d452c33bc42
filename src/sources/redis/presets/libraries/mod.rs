//! The queue libraries, one file each: everything the exporter knows of a
//! library (its options, layout, plan and pure read, and, if zero config
//! recognises it, its marks), written against the library API alone
//! (`presets/library.rs`, `tests/architecture.rs`). Registered once, in
//! `presets::LIBRARIES` (the folder above's `mod.rs`).

pub(super) mod arq;
pub(super) mod asynq;
pub(super) mod beequeue;
pub(super) mod bull;
pub(super) mod bullmq;
pub(super) mod celery;
pub(super) mod dramatiq;
pub(super) mod huey;
pub(super) mod priority_zset;
pub(super) mod rediswq;
pub(super) mod resque;
pub(super) mod rq;
pub(super) mod sidekiq;
