//! End-to-end tests: the store under real processes and concurrency, and the `berth`
//! binary driven like a user would.

mod accounts;
mod api;
mod cli;
mod cli_describe;
mod cli_get;
mod cli_manifests;
mod cli_rollout;
mod cli_verbs;
mod client;
mod console;
mod crds;
mod deployer;
mod deploymentconfigs;
mod exec;
mod gc;
mod https;
mod kube_client;
mod lifecycle;
mod node;
mod probes;
mod protobuf;
mod recovery;
mod replication;
mod resources;
mod rollout;
mod rollout_more;
mod runtime;
mod scheduling;
mod static_pods;
mod status;
mod store_concurrency;
mod store_crash;
mod support;
mod tidy;
mod volumes;
