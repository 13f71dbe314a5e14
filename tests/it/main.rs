//! End-to-end tests: the store under real processes and concurrency, and the `berth`
//! binary driven like a user would.

mod accounts;
mod api;
mod cli;
mod client;
mod exec;
mod gc;
mod https;
mod kube_client;
mod node;
mod replication;
mod runtime;
mod scheduling;
mod store_concurrency;
mod store_crash;
mod support;
mod tidy;
