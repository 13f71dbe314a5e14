//! berth: a whole single-node Kubernetes-compatible cluster in one process.
//!
//! The map (see ARCHITECTURE.md for the reasons behind it):
//!
//! - [`store`] — the object store: keys and JSON objects, one global revision, durable
//!   group commit, an in-memory read cache, watches, compaction, migrations, snapshots.
//!   It imports nothing else from this crate, and is the only module that names sled.
//! - [`app`] — wiring the layers into the `berth serve` process.
//!
//! Dependencies point down only: `app` → `store`.

#![forbid(unsafe_code)]

pub mod app;
pub mod store;
