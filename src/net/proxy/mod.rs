//! berth's service proxy: Services programmed into the kernel with nftables, as
//! kube-proxy's nftables mode (`pkg/proxy/nftables`) does it. One table of berth's own
//! (`ip <net::Config::table>`), verdict maps keyed by address, protocol and port, and
//! one transaction per sync.
//!
//! - [`model`]: Services and EndpointSlices (typed) to the ports to proxy and their
//!   endpoints (ready ones, else serving and terminating ones; this node's for `Local`
//!   traffic policies);
//! - [`hostport`]: pods' host ports (`hostPort`), as the CNI `portmap` plugin gives
//!   them, and their nftables objects;
//! - [`rules`]: the nftables objects of a Service and the table's fixed part;
//! - [`table`]: what the table holds, and the commands of a full or a partial sync;
//! - [`nft`]: running them through the `nft` command.
//!
//! What it serves: cluster IPs, node ports on every local address (127.0.0.1 too, so a
//! developer reaches them from the host: such traffic is masqueraded, and the bridge
//! gets `route_localnet`), load balancer ingress IPs (the node's own addresses, which
//! `controller::servicelb` sets) and `externalIPs`, `loadBalancerSourceRanges` (as
//! kube-proxy: before DNAT, new connections to a load balancer IP and the Service's
//! port from a source outside the IPv4 ranges are dropped; cluster IPs, external IPs
//! and node ports are not filtered, and the node and pods are clients like any other),
//! `sessionAffinity: ClientIP`, `Local` internal and external traffic policies, hairpin traffic, TCP, UDP and SCTP (when
//! the kernel has SCTP). Headless and ExternalName Services get nothing. A Service
//! without endpoints is rejected, and so is anything sent to an address of the Service
//! CIDR that no Service holds, or to a pod address through another interface than the
//! bridge: no packet for a pod or Service address leaves through an uplink. Pods reach
//! the world masqueraded.
//!
//! It also gives this node's pods their host ports, as `portmap` does for kubelet:
//! traffic to `hostPort` on `hostIP`, or on every local address when that is unset or
//! `0.0.0.0`, goes to the pod's address and `containerPort`, from outside and from pods
//! (their source kept; a pod may reach its own host port) and from the node itself
//! (127.0.0.1 too; masqueraded as for node ports). A `hostIP` that is not one of the
//! node's addresses captures nothing. Host ports are looked up before the Services, so
//! a pod's host port wins over a node port or a load balancer address on the same
//! port. Pods on the host's network, without an IPv4 address or finished get none: a
//! pod's host ports go in the first sync after it is deleted, finishes or loses its
//! address. Conntrack entries are not flushed when a UDP host port changes (`portmap`
//! does).
//!
//! The proxier follows Services, EndpointSlices and this node's pods with informers
//! (no polling; a pod's change that leaves its host ports as they were wakes nothing);
//! changes wait coalesced (a `Notify` holds one wake-up however many come) and a sync
//! runs at most every [`MIN_SYNC_INTERVAL`]. The first sync replaces the whole table in
//! one transaction, so nothing of an earlier run survives; later ones change only what
//! changed. A failed transaction changes nothing (the kernel applies it whole or not
//! at all) and is followed by a full one after a backoff. When berth stops the rules
//! stay, so running pods keep their Services and host ports; [`remove`] deletes the
//! table.

pub mod hostport;
pub mod model;
pub mod nft;
pub mod rules;
pub mod table;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::informer::{Change, Informer};
use crate::client::{Client, Kind, ListParams, catalog, key_of};
use crate::supervisor::Supervisor;

pub use hostport::HostPort;
pub use model::{Options, PortName, Proto, ServicePort, Target};
pub use nft::{Error, Nft};
pub use rules::Layout;
pub use table::Table;

/// The shortest time between two syncs: changes that come closer are made together.
pub const MIN_SYNC_INTERVAL: Duration = Duration::from_millis(5);
/// The longest wait before a failed sync is tried again (whole).
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often setting `route_localnet` is tried until the bridge is there.
const LOCALNET_RETRY: Duration = Duration::from_secs(5);

/// What the proxy needs to run.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub net: crate::net::Config,
    /// This node's name (`Local` traffic policies use the endpoints on it, and the pods
    /// bound to it get their host ports).
    pub node_name: String,
    /// The command that runs `nft` in the node's network namespace: `["nft"]`, or
    /// `["ip", "netns", "exec", NS, "nft"]` for another namespace. What comes before the
    /// last word also runs `sysctl` there.
    pub nft: Vec<String>,
}

impl ProxyConfig {
    pub fn new(net: crate::net::Config, node_name: impl Into<String>) -> Self {
        ProxyConfig {
            net,
            node_name: node_name.into(),
            nft: vec!["nft".to_string()],
        }
    }
}

/// Deletes the proxy's table (`berth node reset`, tests); a table that is not there is
/// no error.
pub async fn remove(nft: &[String], table: &str) -> Result<(), Error> {
    match Nft::new(nft.to_vec())
        .run(&[format!("delete table ip {table}")])
        .await
    {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

/// Whether this kernel has SCTP sockets (a module it can load counts).
pub fn kernel_has_sctp() -> bool {
    use rustix::net::{AddressFamily, SocketType, ipproto, socket};
    socket(AddressFamily::INET, SocketType::STREAM, Some(ipproto::SCTP)).is_ok()
}

/// Sets `route_localnet` on the bridge in the node's network namespace (through the
/// command prefix before `nft`), so traffic from 127.0.0.1 to a node port can be sent
/// to a pod once masqueraded.
async fn allow_localnet(nft: &[String], bridge: &str) -> Result<(), String> {
    let runner = &nft[..nft.len().saturating_sub(1)];
    if runner.is_empty() {
        let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
        return std::fs::write(&path, "1").map_err(|e| format!("{path}: {e}"));
    }
    let out = tokio::process::Command::new(&runner[0])
        .args(&runner[1..])
        .args([
            "sysctl",
            "-q",
            "-w",
            &format!("net/ipv4/conf/{bridge}/route_localnet=1"),
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The Services and EndpointSlices the informers hold, decoded, and which Services
/// changed since the last sync; this node's pods' host ports, and which pods changed.
#[derive(Default)]
struct Tracked {
    services: HashMap<String, Service>,
    slices: HashMap<String, (String, EndpointSlice)>,
    by_service: HashMap<String, BTreeSet<String>>,
    dirty: BTreeSet<String>,
    host_ports: HashMap<String, Vec<HostPort>>,
    dirty_pods: BTreeSet<String>,
    /// Pods refused a host port another pod held: tried again at every sync.
    refused_pods: BTreeSet<String>,
}

/// Whether a pod's containers ask for a host port (read before the pod is decoded:
/// most pods do not).
fn asks_for_host_ports(pod: &Value) -> bool {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .any(|p| p["hostPort"].as_i64().is_some_and(|h| h > 0))
}

impl Tracked {
    fn on_service(&mut self, change: Change<'_>) {
        let key = key_of(change.object());
        match change {
            Change::Deleted(_) => {
                self.services.remove(&key);
            }
            Change::Added(o) | Change::Updated { new: o, .. } => match Service::deserialize(o) {
                Ok(svc) => {
                    self.services.insert(key.clone(), svc);
                }
                Err(e) => {
                    tracing::debug!(service = %key, error = %e, "not a Service the proxy can read; left out");
                    self.services.remove(&key);
                }
            },
        }
        self.dirty.insert(key);
    }

    fn on_slice(&mut self, change: Change<'_>) {
        let key = key_of(change.object());
        if let Some((svc, _)) = self.slices.remove(&key) {
            if let Some(set) = self.by_service.get_mut(&svc) {
                set.remove(&key);
                if set.is_empty() {
                    self.by_service.remove(&svc);
                }
            }
            self.dirty.insert(svc);
        }
        let (Change::Added(o) | Change::Updated { new: o, .. }) = change else {
            return;
        };
        let Ok(slice) = EndpointSlice::deserialize(o) else {
            return;
        };
        let Some(name) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(model::SERVICE_NAME_LABEL))
        else {
            return;
        };
        let svc = format!(
            "{}/{name}",
            slice.metadata.namespace.as_deref().unwrap_or_default()
        );
        self.by_service
            .entry(svc.clone())
            .or_default()
            .insert(key.clone());
        self.slices.insert(key, (svc.clone(), slice));
        self.dirty.insert(svc);
    }

    /// Notes a pod's change; whether its host ports changed.
    fn on_pod(&mut self, change: Change<'_>, opts: &Options) -> bool {
        let object = change.object();
        let key = key_of(object);
        let ports = match change {
            Change::Deleted(_) => Vec::new(),
            _ if !asks_for_host_ports(object) => Vec::new(),
            Change::Added(o) | Change::Updated { new: o, .. } => match Pod::deserialize(o) {
                Ok(pod) => hostport::host_ports(&pod, opts),
                Err(e) => {
                    tracing::debug!(pod = %key, error = %e, "not a Pod the proxy can read; its host ports are left out");
                    Vec::new()
                }
            },
        };
        let before = self.host_ports.get(&key).map_or(&[][..], Vec::as_slice);
        if before == ports.as_slice() {
            return false;
        }
        if ports.is_empty() {
            self.host_ports.remove(&key);
        } else {
            self.host_ports.insert(key.clone(), ports);
        }
        self.dirty_pods.insert(key);
        true
    }

    /// The ports of the Service `key` as they are now (none when it is gone).
    fn ports(&self, key: &str, opts: &Options) -> Vec<(PortName, ServicePort)> {
        let Some(svc) = self.services.get(key) else {
            return Vec::new();
        };
        let slices = self
            .by_service
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|k| self.slices.get(k).map(|(_, s)| s));
        model::service_ports(svc, slices, opts)
    }
}

struct Shared {
    tracked: Mutex<Tracked>,
    changed: tokio::sync::Notify,
}

/// Starts the proxy's informers and its sync loop under the supervisor.
pub fn start(sup: &mut Supervisor, client: &Client, cfg: ProxyConfig) {
    let shared = Arc::new(Shared {
        tracked: Mutex::new(Tracked::default()),
        changed: tokio::sync::Notify::new(),
    });
    let opts = Options {
        node_name: cfg.node_name.clone(),
        sctp: kernel_has_sctp(),
    };
    let services = Informer::new(catalog::of(Kind::Service));
    let slices = Informer::new(catalog::of(Kind::EndpointSlice));
    // This node's pods, for their host ports.
    let pods = Informer::with_selection(
        catalog::of(Kind::Pod),
        ListParams {
            field_selector: Some(format!("spec.nodeName={}", cfg.node_name)),
            ..ListParams::default()
        },
    );
    {
        let shared = shared.clone();
        services.on_change(move |change| {
            shared
                .tracked
                .lock()
                .expect("proxy lock")
                .on_service(change);
            shared.changed.notify_one();
        });
    }
    {
        let shared = shared.clone();
        slices.on_change(move |change| {
            shared.tracked.lock().expect("proxy lock").on_slice(change);
            shared.changed.notify_one();
        });
    }
    {
        let (shared, opts) = (shared.clone(), opts.clone());
        pods.on_change(move |change| {
            let changed = shared
                .tracked
                .lock()
                .expect("proxy lock")
                .on_pod(change, &opts);
            if changed {
                shared.changed.notify_one();
            }
        });
    }
    for (name, informer) in [
        ("proxy-services", services.clone()),
        ("proxy-endpointslices", slices.clone()),
        ("proxy-pods", pods.clone()),
    ] {
        let client = client.clone();
        sup.spawn(name, move |cancel| {
            informer.clone().run(client.clone(), cancel)
        });
    }
    sup.spawn("proxy", move |cancel| {
        let (shared, cfg, opts) = (shared.clone(), cfg.clone(), opts.clone());
        let (services, slices, pods) = (services.clone(), slices.clone(), pods.clone());
        async move {
            tokio::select! {
                () = async { services.synced().await; slices.synced().await; pods.synced().await } => {}
                () = cancel.cancelled() => return,
            }
            run(shared, cfg, opts, cancel).await;
        }
    });
}

/// The sync loop: waits for changes (or a stale chain's deletion, or a retry), and
/// makes them in one transaction.
async fn run(shared: Arc<Shared>, cfg: ProxyConfig, opts: Options, cancel: CancellationToken) {
    if !opts.sctp {
        tracing::info!(
            "this kernel has no SCTP: SCTP Service ports and host ports are not proxied"
        );
    }
    let layout = Layout::new(&cfg.net);
    let mut nft = Nft::new(cfg.nft.clone());
    let mut table: Option<Table> = None;
    let mut backoff = Duration::from_millis(100);
    let mut retry_at: Option<Instant> = None;
    let mut last_sync: Option<Instant> = None;
    let mut localnet_set = false;
    let mut localnet_tried: Option<Instant> = None;
    loop {
        let localnet_retry = localnet_tried
            .filter(|_| !localnet_set)
            .map(|at| at + LOCALNET_RETRY);
        let wake = table
            .as_ref()
            .and_then(Table::next_cleanup)
            .into_iter()
            .chain(retry_at)
            .chain(localnet_retry)
            .min();
        if table.is_some() || retry_at.is_some() {
            tokio::select! {
                () = shared.changed.notified() => {}
                () = sleep_until(wake) => {}
                () = cancel.cancelled() => return,
            }
        }
        if let Some(last) = last_sync {
            tokio::select! {
                () = tokio::time::sleep_until(last + MIN_SYNC_INTERVAL) => {}
                () = cancel.cancelled() => return,
            }
        }
        if retry_at.is_some_and(|at| Instant::now() < at) {
            continue;
        }
        let started = Instant::now();
        last_sync = Some(started);
        // route_localnet, once the bridge exists: tried again every few seconds.
        if !localnet_set && localnet_tried.is_none_or(|at| started - at >= LOCALNET_RETRY) {
            localnet_tried = Some(started);
            match allow_localnet(&cfg.nft, &cfg.net.bridge).await {
                Ok(()) => localnet_set = true,
                Err(e) => {
                    tracing::debug!(bridge = %cfg.net.bridge, error = %e, "route_localnet not set yet; node ports on 127.0.0.1 wait for the bridge")
                }
            }
        }
        let (commands, services, pods) = {
            let mut tracked = shared.tracked.lock().expect("proxy lock");
            let dirty = std::mem::take(&mut tracked.dirty);
            let t = table.get_or_insert_with(|| Table::new(layout.clone()));
            let keys: Vec<String> = if t.is_full() {
                let mut all: Vec<String> = tracked.services.keys().cloned().collect();
                all.sort();
                all
            } else {
                dirty.into_iter().collect()
            };
            for key in keys {
                for r in t.set_service(&key, &tracked.ports(&key, &opts)) {
                    tracing::warn!(service = %r.owner, destination = %r.dest, holder = %r.holder, "another Service has this destination; this one is not reachable there");
                }
            }
            sync_pods(&mut tracked, t);
            (t.commands(Instant::now()), t.len(), t.pods())
        };
        if commands.is_empty() {
            continue;
        }
        let whole = commands.first().is_some_and(|c| c.starts_with("add table"));
        let result = if whole {
            nft.run(&commands).await
        } else {
            nft.run_in_session(&commands).await
        };
        match result {
            Ok(()) => {
                retry_at = None;
                backoff = Duration::from_millis(100);
                tracing::debug!(
                    whole,
                    services,
                    pods,
                    commands = commands.len(),
                    elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
                    "proxy rules synced"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "could not program the Services into nftables; the whole table is written again");
                table = None;
                retry_at = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Sets the host ports of the pods that changed (all of them for a whole table), and
/// of those refused a host port before: pods that let go of host ports first, and those
/// refused once more at the end, so that a pod taking over another's host port in the
/// same sync gets it.
fn sync_pods(tracked: &mut Tracked, t: &mut Table) {
    let dirty = std::mem::take(&mut tracked.dirty_pods);
    let before = std::mem::take(&mut tracked.refused_pods);
    let mut keys: Vec<String> = if t.is_full() {
        tracked.host_ports.keys().cloned().collect()
    } else {
        dirty.into_iter().chain(before.iter().cloned()).collect()
    };
    keys.sort();
    keys.dedup();
    keys.sort_by_key(|k| tracked.host_ports.contains_key(k));
    let ports = |k: &str| tracked.host_ports.get(k).map_or(&[][..], Vec::as_slice);
    let mut refused = Vec::new();
    for key in keys {
        if !t.set_pod(&key, ports(&key)).is_empty() {
            refused.push(key);
        }
    }
    for key in refused {
        let r = t.set_pod(&key, ports(&key));
        if r.is_empty() {
            continue;
        }
        if !before.contains(&key) {
            for r in r {
                tracing::warn!(pod = %key, destination = %r.dest, holder = %r.holder, "another pod has this host port; this one is not reachable there");
            }
        }
        tracked.refused_pods.insert(key);
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
