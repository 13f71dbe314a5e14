//! berth: a whole single-node Kubernetes-compatible cluster in one process.
//!
//! The map (see ARCHITECTURE.md for the reasons behind it):
//!
//! - [`store`] — the object store: keys and JSON objects, one global revision, durable
//!   group commit, an in-memory read cache, watches, compaction, migrations, snapshots.
//!   It imports nothing else from this crate, and is the only module that names sled.
//! - [`types`] — API object helpers: timestamps, name syntax, label and field selectors.
//! - [`registry`] — the generic resource engine and the per-kind rules: Kubernetes object
//!   semantics on top of the store. Knows kinds, not HTTP.
//! - [`api`] — the HTTP skin over the registry: routing, TLS, authentication, discovery,
//!   watch streaming, and errors as `metav1.Status` (chosen in `api::error` only).
//! - [`client`] — the one client interface (in-process or HTTPS), watchers, informers and
//!   the event recorder, used by everything that acts on the cluster.
//! - [`controller`] — the controller runtime (work queue, `run`) and the controllers.
//! - [`node`] — the node agent: node registration and lease, pod workers, pod status.
//! - [`net`] — the node's network: pod network namespaces on a bridge, Services in
//!   nftables, the cluster DNS.
//! - [`runtime`] — what runs containers for the node agent: the `Runtime` trait, the
//!   `process` runtime and its `berth shim`.
//! - [`cli`] — the client verbs of the `berth` binary (`get`, `describe`, `rollout`, ...).
//! - [`supervisor`] — the owner of every long-running task: restarts, shutdown.
//! - [`app`] — wiring the layers into the `berth serve` process.
//!
//! Dependencies point down only: `app` → `api` → `registry` → `store`, and
//! `app` → `controller` → `client` → `registry`; everything above the store may use
//! `types`. ARCHITECTURE.md's "Who may use whom" table is the rule, and a tidy test
//! reads it.

// `unsafe` only where processes and namespaces need it, each use allowed where it is and
// explained by a `SAFETY:` comment.
#![deny(unsafe_code)]

pub mod api;
pub mod app;
pub mod cli;
pub mod client;
pub mod controller;
pub mod deploy;
pub mod image;
pub mod net;
pub mod node;
pub mod registry;
pub mod runtime;
pub mod store;
pub mod supervisor;
pub mod types;

pub use store::release_freed_memory;
