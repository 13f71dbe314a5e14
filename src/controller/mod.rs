//! The controllers and the runtime they share. A controller is a `reconcile(key)` function
//! fed by a [`Queue`]; informers (shared, see [`client::informer`]) enqueue keys when
//! objects change. Reconciles are level-triggered and idempotent: they read the informer
//! caches, write through the [`Client`], and answer with an [`Action`]. A conflict means
//! "requeue now"; other errors retry with the key's backoff.
//!
//! The [`Supervisor`] runs every informer and controller loop, restarts one that panics
//! (with backoff) without taking the process down, and stops them all on shutdown.
//!
//! [`client::informer`]: crate::client::informer

pub mod apiservice;
pub mod claim;
pub mod clusterroleaggregation;
pub mod crdcleanup;
pub mod cronjob;
pub mod custom;
pub mod daemonset;
pub mod dcview;
pub mod deployer;
pub mod deployment;
pub mod deploymentconfig;
pub mod disruption;
pub mod dnsservice;
pub mod endpoint;
pub mod endpointslice;
pub mod endpointslicemirroring;
pub mod eventttl;
pub mod expectations;
pub mod gc;
pub mod history;
pub mod job;
pub mod namespace;
pub mod nodelifecycle;
pub mod podautoscaler;
pub mod podcontrol;
pub mod queue;
pub mod replication;
pub mod rootca;
pub mod runtime;
pub mod scheduler;
mod selfendpoints;
pub mod serviceaccount;
pub mod servicelb;
pub mod statefulset;

use std::sync::Arc;
use std::time::Duration;

use crate::client::informer::Informers;
use crate::client::recorder::Recorder;
use crate::client::{Client, Kind, catalog};
use crate::supervisor::Supervisor;

pub use queue::Queue;

/// Settings of the control plane.
#[derive(Debug, Clone)]
pub struct Config {
    /// A node whose lease is older than this becomes `Ready=Unknown`.
    pub node_grace: Duration,
    /// Pods on an unreachable node without a toleration of their own are evicted after
    /// this long.
    pub eviction_timeout: Duration,
    /// Events are deleted this long after they were last seen.
    pub event_ttl: Duration,
    /// Run the DeploymentConfig and deployer controllers (off only for tests that play
    /// them, to check the deployer process alone).
    pub deployments: bool,
    /// The port the API serves on, for the `kubernetes` Service; `None` keeps no such
    /// Service.
    pub api_port: Option<u16>,
    /// The address pods reach the API at: the `kubernetes` Service's endpoint.
    pub api_ip: String,
    /// How often each HorizontalPodAutoscaler is synced.
    pub hpa_sync: Duration,
    /// How long an autoscaler without `behavior` (or with no scale-down window of its own)
    /// remembers its recommendations before it scales down.
    pub hpa_downscale_window: Duration,
    /// The CA (PEM) that signed the API's serving certificate, published in every
    /// namespace as the ConfigMap `kube-root-ca.crt`; `None` publishes nothing.
    pub root_ca: Option<String>,
    /// The cluster DNS that `kube-system/kube-dns` publishes; `None` keeps no such
    /// Service.
    pub dns: Option<dnsservice::DnsService>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_grace: Duration::from_secs(40),
            eviction_timeout: Duration::from_secs(300),
            event_ttl: Duration::from_secs(3600),
            deployments: true,
            api_port: None,
            api_ip: "127.0.0.1".into(),
            hpa_sync: Duration::from_secs(15),
            hpa_downscale_window: Duration::from_secs(300),
            root_ca: None,
            dns: None,
        }
    }
}

/// What every controller is given.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub informers: Informers,
    pub config: Arc<Config>,
    /// The custom kinds served now, followed by informers the controllers share.
    pub custom: custom::CustomKinds,
    /// Where the controllers read the time (a manual clock in tests).
    pub clock: Arc<dyn crate::types::clock::Clock>,
}

impl Context {
    pub fn new(client: Client, config: Config) -> Self {
        Context {
            client,
            informers: Informers::default(),
            config: Arc::new(config),
            custom: custom::CustomKinds::default(),
            clock: Arc::new(crate::types::clock::System),
        }
    }

    /// An event recorder for `component`.
    pub fn recorder(&self, component: &str) -> Recorder {
        Recorder::new(self.client.clone(), component, None)
    }
}

/// Starts every controller, then the informers they asked for.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    // Each controller registers its informer handlers before any informer runs, so none
    // misses the first list.
    if ctx.config.deployments {
        deploymentconfig::start(ctx, sup);
        deployer::start(ctx, sup);
    }
    apiservice::start(ctx, sup);
    clusterroleaggregation::start(ctx, sup);
    crdcleanup::start(ctx, sup);
    cronjob::start(ctx, sup);
    daemonset::start(ctx, sup);
    disruption::start(ctx, sup);
    dnsservice::start(ctx, sup);
    endpoint::start(ctx, sup);
    endpointslice::start(ctx, sup);
    endpointslicemirroring::start(ctx, sup);
    deployment::start(ctx, sup);
    eventttl::start(ctx, sup);
    gc::start(ctx, sup);
    job::start(ctx, sup);
    namespace::start(ctx, sup);
    nodelifecycle::start(ctx, sup);
    podautoscaler::start(ctx, sup);
    replication::start(ctx, sup);
    scheduler::start(ctx, sup);
    serviceaccount::start(ctx, sup);
    servicelb::start(ctx, sup);
    rootca::start(ctx, sup);
    statefulset::start(ctx, sup);
    let definitions = ctx
        .informers
        .metadata(catalog::of(Kind::CustomResourceDefinition));
    ctx.custom.start(&ctx.client, definitions, sup);
    for informer in ctx.informers.all() {
        run_informer(sup, &ctx.client, informer);
    }
}

pub use runtime::{Action, Controller, Error, OnConflict, Result, decode, run_informer};
