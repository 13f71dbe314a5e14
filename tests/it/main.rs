//! End-to-end tests: the store under real processes and concurrency, and the `berth`
//! binary driven like a user would.

// Tests drive real servers in other processes, whose time is the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

mod accounts;
mod api;
mod api_proxy;
mod autoscaling;
mod cleanup;
mod cli;
mod cli_describe;
mod cli_get;
mod cli_manifests;
mod cli_rollout;
mod cli_verbs;
mod client;
mod conformance_apps;
mod conformance_core;
mod conformance_network;
mod console;
mod crds;
mod daemonsets;
mod deployer;
mod deploymentconfigs;
mod deployments;
mod disruption;
mod dns;
mod endpoints;
mod exec;
mod gc;
mod hardening;
mod https;
mod images;
mod jobs;
mod kube_client;
mod lifecycle;
mod metrics;
mod netlab;
mod networking;
mod node;
mod oci;
mod podnet;
mod podsecurity;
mod portforward;
mod probes;
mod protobuf;
mod proxy;
mod pull;
mod rbac;
mod recovery;
mod replication;
mod resources;
mod rollout;
mod rollout_more;
mod runtime;
mod runtime_classes;
mod scheduling;
mod statefulsets;
mod static_pods;
mod status;
mod store_concurrency;
mod store_crash;
mod support;
mod tidy;
mod volumes;
