//! The node agent: registers this machine as a Node, renews its Lease, and runs the pods
//! bound to it through a [`Runtime`], one worker per pod, reporting their status. It talks
//! to the API only through [`Client`], so the same agent can run on another machine.
//! Pods come from two sources: the API (pods bound to this node) and, optionally, a
//! directory of manifests (static pods, mirrored into the API).

mod admission;
mod atomic_writer;
mod downward;
mod env;
mod etc;
mod images;
pub use images::GcThresholds;
pub mod manifests;
mod pods;
mod probe;
mod status;
mod volume;
mod worker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::client::informer::{Change, Informer};
use crate::client::{Client, ListParams, Patch};
use crate::client::{Kind, catalog};
use crate::runtime::{Event, Runtime};
use crate::supervisor::Supervisor;
use admission::Rejection;
use manifests::{Scan, is_mirror, is_static};

pub use pods::Pods;
pub use status::qos_class;

/// Settings of the node agent.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_name: String,
    /// The address pods and the node report (host network).
    pub node_ip: String,
    /// How often the lease is renewed.
    pub lease_every: Duration,
    /// Every pod is synced at least this often, events or not.
    pub resync_every: Duration,
    /// How many pods the node takes (its `pods` capacity).
    pub max_pods: u32,
    /// Where berth keeps its data: its free space decides `DiskPressure`.
    pub data_dir: PathBuf,
    /// The API's address (host, port), given to every container as
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
    pub api: Option<(String, u16)>,
    /// Images that are commands of berth's own: a container of one of these images
    /// without a `command` runs the command given here (the deployer image, say).
    pub builtin_images: Vec<(String, Vec<String>)>,
    /// A directory put first on the PATH of containers of built-in images (it holds
    /// berth's other names, such as `openshift-deploy`).
    pub builtin_bin: Option<PathBuf>,
    /// The first restart delay of a crashing container (CrashLoopBackOff), doubled up to
    /// `backoff_max`; a run longer than twice the maximum forgets the back-off.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// How soon a failed sync step (a container that could not start, a status that
    /// could not be written, a container that would not stop) is tried again.
    pub retry_after: Duration,
    /// Static pods: a manifest file, or a directory of them (`--pod-manifest-path`).
    pub pod_manifest_path: Option<PathBuf>,
    /// The manifest path is read again at least this often (besides on change).
    pub manifest_scan_every: Duration,
    /// How often housekeeping runs (mirror pods, the health of the sync loop).
    pub housekeeping_every: Duration,
    /// Whether containers get a mount namespace of their own with their volumes mounted
    /// (needs root; by default, whether berth runs as root). Without, a container with
    /// volume mounts waits with `CreateContainerConfigError`, and no pod gets the
    /// service-account token mounted.
    pub mount_namespaces: bool,
    /// The cluster's CA (PEM), given to pods as the service account's `ca.crt`.
    pub ca_pem: String,
    /// The RuntimeClass handler of this node's runtime: the agent makes the RuntimeClass
    /// of that name if there is none, and a pod of another handler waits in
    /// `ContainerCreating` (`FailedCreatePodSandBox`).
    pub runtime_handler: String,
    /// The other RuntimeClass handlers this node runs pods with (their classes are made
    /// too): `process` beside `oci`, and `oci` beside `process` where runc is installed.
    pub other_handlers: Vec<String>,
    /// Whether the archives put into `DATA/images` are imported into the image store
    /// (at start and as they arrive).
    pub import_images: bool,
    /// Where the node's resource metrics go (`metrics.k8s.io`), measured this often from
    /// the machine and the containers' cgroups; none measures nothing.
    pub metrics: Option<std::sync::Arc<crate::types::metrics::Board>>,
    pub metrics_every: Duration,
    /// Where images are pulled from (`berth serve --registries`).
    pub registries: crate::image::pull::Registries,
    /// When unused images are removed, and how often that is looked at.
    pub image_gc: images::GcThresholds,
    pub image_gc_every: Duration,
    /// Images stored more recently than this are not removed.
    pub image_gc_min_age: Duration,
    /// The pod network: pods without `hostNetwork` get a network namespace of their own
    /// on it (none: every pod shares this machine's network).
    pub network: Option<Arc<crate::net::pod::PodNetwork>>,
}

impl Config {
    /// The address of pod `uid` on the pod network, if it has one.
    pub fn pod_address(&self, pod_uid: &str) -> Option<std::net::Ipv4Addr> {
        self.network.as_ref()?.address_of(pod_uid)
    }

    /// Every address of pod `uid` on the pod network, IPv4 first (none without one).
    pub fn pod_addresses(&self, pod_uid: &str) -> Vec<std::net::IpAddr> {
        self.network
            .as_ref()
            .map(|n| n.addresses_of(pod_uid))
            .unwrap_or_default()
    }

    /// The pod's address: its own on the pod network, else the node's.
    pub fn pod_ip(&self, pod: &Value) -> String {
        self.pod_address(crate::types::json::str_at(pod, "/metadata/uid"))
            .map_or_else(|| self.node_ip.clone(), |ip| ip.to_string())
    }

    /// The pod's addresses, the primary (IPv4) one first: its own on the pod network
    /// (an IPv6 one too on a dual-stack network), else the node's.
    pub fn pod_ips(&self, pod: &Value) -> Vec<String> {
        let own = self.pod_addresses(crate::types::json::str_at(pod, "/metadata/uid"));
        if own.is_empty() {
            return vec![self.node_ip.clone()];
        }
        own.iter().map(ToString::to_string).collect()
    }

    /// The node's and the pod's addresses, for the downward API (`pod_ips` holds the
    /// latter, made by [`Config::pod_ips`]).
    pub(super) fn ips<'a>(&'a self, pod_ips: &'a [String]) -> downward::Ips<'a> {
        downward::Ips {
            host: &self.node_ip,
            pods: pod_ips,
        }
    }
}

impl Config {
    pub fn new(node_name: &str, node_ip: &str) -> Self {
        Config {
            node_name: node_name.to_string(),
            node_ip: node_ip.to_string(),
            lease_every: Duration::from_secs(10),
            resync_every: Duration::from_secs(60),
            max_pods: 110,
            data_dir: PathBuf::from("/"),
            api: None,
            builtin_images: Vec::new(),
            builtin_bin: None,
            backoff_initial: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            retry_after: Duration::from_secs(10),
            pod_manifest_path: None,
            manifest_scan_every: Duration::from_secs(20),
            housekeeping_every: Duration::from_secs(2),
            mount_namespaces: rustix::process::geteuid().is_root(),
            ca_pem: String::new(),
            import_images: false,
            runtime_handler: "process".into(),
            other_handlers: Vec::new(),
            metrics: None,
            // metrics-server's default resolution.
            metrics_every: Duration::from_secs(15),
            registries: crate::image::pull::Registries::default(),
            image_gc: images::GcThresholds::default(),
            // The kubelet's period.
            image_gc_every: Duration::from_secs(300),
            image_gc_min_age: Duration::from_secs(120),
            network: None,
        }
    }
}

/// What every pod worker shares.
pub(crate) struct Shared<R> {
    pub client: Client,
    pub runtime: R,
    pub config: Config,
    pub recorder: crate::client::recorder::Recorder,
    /// The pods this node should run and the mirror pods of its static ones.
    pub pods: Arc<Pods>,
    /// When the agent's loop last went round (for `/healthz`).
    pub last_loop: std::sync::Mutex<tokio::time::Instant>,
    /// Pulls images into the node's store, one pull per image however many pods wait.
    pub puller: Arc<crate::image::pull::Puller>,
    /// The bound service-account tokens the pods' volumes hold, while fresh.
    pub tokens: volume::TokenCache,
}

/// Below this much available memory the node reports `MemoryPressure` (the kubelet's
/// default hard eviction threshold, `memory.available<100Mi`).
/// The RuntimeClass handler of the runtime that runs containers in their images' root
/// filesystems through runc.
pub const OCI_HANDLER: &str = "oci";
/// The RuntimeClass handler of the runtime that runs containers' commands on this machine.
pub const PROCESS_HANDLER: &str = "process";

const MEMORY_AVAILABLE_MIN: u64 = 100 << 20;
/// Below this share of free space where berth keeps its data: `DiskPressure`
/// (`nodefs.available<10%`).
const DISK_AVAILABLE_MIN: f64 = 0.10;
/// Below this share of free process ids: `PIDPressure`.
const PIDS_AVAILABLE_MIN: f64 = 0.10;

/// How much of a resource is left, as read from the machine.
#[derive(Debug, Clone, Copy, Default)]
struct Left {
    memory_bytes: Option<u64>,
    disk_share: Option<f64>,
    pid_share: Option<f64>,
}

impl Left {
    fn read(data_dir: &std::path::Path) -> Left {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024);
        let disk_share = rustix::fs::statvfs(data_dir)
            .ok()
            .filter(|v| v.f_blocks > 0)
            .map(|v| v.f_bavail as f64 / v.f_blocks as f64);
        // The fourth field of loadavg is "running/existing" tasks.
        let tasks = std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| {
            l.split_whitespace()
                .nth(3)?
                .split_once('/')?
                .1
                .parse::<f64>()
                .ok()
        });
        let pid_max = read_trimmed("/proc/sys/kernel/pid_max").parse::<f64>().ok();
        let pid_share = match (tasks, pid_max) {
            (Some(t), Some(m)) if m > 0.0 => Some(1.0 - t / m),
            _ => None,
        };
        Left {
            memory_bytes,
            disk_share,
            pid_share,
        }
    }

    /// Memory, disk and pid pressure (an unreadable figure is no pressure).
    fn pressure(&self) -> (bool, bool, bool) {
        (
            self.memory_bytes.is_some_and(|m| m < MEMORY_AVAILABLE_MIN),
            self.disk_share.is_some_and(|d| d < DISK_AVAILABLE_MIN),
            self.pid_share.is_some_and(|p| p < PIDS_AVAILABLE_MIN),
        )
    }
}

fn machine_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "Linux".into())
}

/// The Node's status as this machine is now.
fn node_status(config: &Config) -> Value {
    node_status_with(config, Left::read(&config.data_dir))
}

fn node_status_with(config: &Config, left: Left) -> Value {
    let (memory, disk, pids) = left.pressure();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let total = format!("{}Ki", machine_memory_bytes() / 1024);
    let resources =
        json!({"cpu": cpus.to_string(), "memory": total, "pods": config.max_pods.to_string()});
    let now = crate::types::now();
    let cond = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            if memory {
                cond("MemoryPressure", "True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
            } else {
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
            },
            if disk {
                cond("DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure")
            } else {
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
            },
            if pids {
                cond("PIDPressure", "True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
            } else {
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available")
            },
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": config.node_ip},
            {"type": "Hostname", "address": config.node_name},
        ],
        "images": node_images(config),
        "nodeInfo": {
            "machineID": read_trimmed("/etc/machine-id"),
            "systemUUID": "",
            "bootID": read_trimmed("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": read_trimmed("/proc/sys/kernel/osrelease"),
            "osImage": os_image(),
            "containerRuntimeVersion": format!("process://berth-{}", env!("CARGO_PKG_VERSION")),
            "kubeletVersion": crate::types::kubernetes_version(),
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
        },
    })
}

/// At most this many images are listed in the Node's status (the kubelet's
/// `nodeStatusMaxImages`).
const NODE_STATUS_MAX_IMAGES: usize = 50;

/// The images of the node's store, as `status.images` lists them.
fn node_images(config: &Config) -> Value {
    let store = crate::image::Store::at(&crate::image::store_dir(&config.data_dir));
    store
        .node_images(NODE_STATUS_MAX_IMAGES)
        .into_iter()
        .map(|(names, size)| json!({"names": names, "sizeBytes": size}))
        .collect()
}

/// How often the Node's status is written even when nothing changed (§17.2).
const NODE_STATUS_REFRESH: Duration = Duration::from_secs(300);

/// Creates the Node if it does not exist.
async fn register(client: &Client, config: &Config) -> crate::client::Result<()> {
    let nodes = catalog::of(Kind::Node);
    let status = node_status(config);
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": config.node_name, "labels": {
            "kubernetes.io/hostname": config.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": status["nodeInfo"]["architecture"],
        }},
        "status": status,
    });
    match client.create(nodes, None, &node).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes the RuntimeClass of this node's runtime, unless one of that name is there (an
/// admin's is kept as it is).
async fn ensure_runtime_class(client: &Client, handler: &str) -> crate::client::Result<()> {
    let class = json!({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": handler},
        "handler": handler,
    });
    match client
        .create(catalog::of(Kind::RuntimeClass), None, &class)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Brings the Node's status up to date: written when it changed (someone else's edit,
/// such as the node lifecycle controller's `Unknown`, included) or when `refresh` asks
/// for a heartbeat. Conditions keep their transition times while their status holds.
async fn update_node_status(
    client: &Client,
    config: &Config,
    refresh: bool,
) -> crate::client::Result<bool> {
    let nodes = catalog::of(Kind::Node);
    let status = node_status(config);
    let current = client.get(nodes, None, &config.node_name).await?;
    let mut updated = current.clone();
    for field in ["capacity", "allocatable", "addresses", "nodeInfo", "images"] {
        updated["status"][field] = status[field].clone();
    }
    for c in status["conditions"].as_array().into_iter().flatten() {
        let mut c = c.clone();
        if let Some(m) = c.as_object_mut() {
            m.remove("lastTransitionTime");
            if !refresh {
                // Keep the last heartbeat unless something else changes.
                let old = crate::types::condition(&current, c["type"].as_str().unwrap_or(""));
                if let Some(beat) = old
                    .filter(|o| o["status"] == c["status"] && o["reason"] == c["reason"])
                    .and_then(|o| o.get("lastHeartbeatTime"))
                {
                    c["lastHeartbeatTime"] = beat.clone();
                }
            }
        }
        crate::types::set_condition(&mut updated, c);
    }
    if updated == current {
        return Ok(false);
    }
    client.update_status(nodes, &updated).await?;
    Ok(true)
}

/// Registers the node, then renews its lease and keeps its status true until cancelled.
async fn heartbeat(
    client: Client,
    config: Config,
    changed: Arc<tokio::sync::Notify>,
    cancel: CancellationToken,
) {
    let leases = catalog::of(Kind::Lease);
    let ns = Some("kube-node-lease");
    let mut written: Option<tokio::time::Instant> = None;
    for handler in std::iter::once(&config.runtime_handler).chain(&config.other_handlers) {
        if let Err(e) = ensure_runtime_class(&client, handler).await {
            tracing::warn!(handler = %handler, error = %e, "could not make the node's RuntimeClass");
        }
    }
    loop {
        let refresh = written.is_none_or(|w| w.elapsed() >= NODE_STATUS_REFRESH);
        let outcome = match update_node_status(&client, &config, refresh).await {
            Err(e) if e.is_not_found() => register(&client, &config).await.map(|()| true),
            other => other,
        };
        match outcome {
            Ok(true) => written = Some(tokio::time::Instant::now()),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(node = %config.node_name, error = %e, "could not update the node status")
            }
        }
        let renew = json!({"spec": {
            "holderIdentity": config.node_name,
            "leaseDurationSeconds": 40,
            "renewTime": crate::types::now_micro(),
        }});
        let result = match client
            .patch(leases, ns, &config.node_name, &Patch::Merge(renew.clone()))
            .await
        {
            Err(e) if e.is_not_found() => {
                let mut lease = renew;
                lease["apiVersion"] = json!("coordination.k8s.io/v1");
                lease["kind"] = json!("Lease");
                lease["metadata"] =
                    json!({"name": config.node_name, "namespace": "kube-node-lease"});
                client.create(leases, ns, &lease).await.map(|_| ())
            }
            other => other.map(|_| ()),
        };
        if let Err(e) = result {
            tracing::warn!(node = %config.node_name, error = %e, "could not renew the node lease");
        }
        tokio::select! {
            () = tokio::time::sleep(config.lease_every) => {}
            // Something of the status changed (the images): it is written at once.
            () = changed.notified() => {}
            () = cancel.cancelled() => return,
        }
    }
}

/// What the agent's HTTP endpoints see of it.
pub struct Handle<R> {
    shared: Arc<Shared<R>>,
}

impl<R> Clone for Handle<R> {
    fn clone(&self) -> Self {
        Handle {
            shared: self.shared.clone(),
        }
    }
}

impl<R: Runtime + Clone> Handle<R> {
    pub fn node_name(&self) -> &str {
        &self.shared.config.node_name
    }

    /// Fine while the agent's loop goes round; an error saying so when it has not for
    /// max(2 × resync, 5 min).
    pub fn healthy(&self) -> Result<(), String> {
        let last = *self
            .shared
            .last_loop
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let limit = (self.shared.config.resync_every * 2).max(Duration::from_secs(300));
        if last.elapsed() > limit {
            return Err("Sync Loop took longer than expected.".into());
        }
        Ok(())
    }

    /// The pods the node should run (a static pod with its mirror pod's status).
    pub fn pods(&self) -> Vec<Value> {
        let pods = &self.shared.pods;
        pods.list()
            .into_iter()
            .map(|p| (*pods.with_mirror_status(p)).clone())
            .collect()
    }

    /// A pod the node should run, by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        let pods = &self.shared.pods;
        pods.by_name(namespace, name)
            .map(|p| (*pods.with_mirror_status(p)).clone())
    }

    /// The uid the agent knows a pod by (a mirror pod's uid is its static pod's).
    /// The address of pod `uid` on the pod network, if it has one.
    pub fn pod_address(&self, uid: &str) -> Option<std::net::Ipv4Addr> {
        self.shared.config.pod_address(uid)
    }

    pub fn translate_uid(&self, uid: &str) -> String {
        self.shared.pods.translate_uid(uid)
    }

    /// The status of `pod` as its containers are now (their probe verdicts as last
    /// reported).
    pub fn pod_status(&self, pod: &Value) -> Value {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
        let instances = self.shared.runtime.pod_status(uid).unwrap_or_default();
        let probed: HashMap<String, (bool, bool)> = pod
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let name = c["name"].as_str()?.to_string();
                Some((name, (c["ready"] == true, c["started"] == true)))
            })
            .collect();
        status::build(&status::Inputs {
            pod,
            instances: &instances,
            waiting: &HashMap::new(),
            node_ip: &self.shared.config.node_ip,
            pod_ips: &self.shared.config.pod_ips(pod),
            terminating: pod.pointer("/metadata/deletionTimestamp").is_some(),
            probed: &probed,
        })
    }
}

/// Starts the node agent's tasks under the supervisor.
pub fn start<R: Runtime + Clone>(
    sup: &mut Supervisor,
    client: &Client,
    runtime: R,
    config: Config,
) -> Handle<R> {
    let shared = Arc::new(Shared {
        client: client.clone(),
        runtime,
        recorder: crate::client::recorder::Recorder::new(
            client.clone(),
            "kubelet",
            Some(&config.node_name),
        ),
        puller: crate::image::pull::Puller::new(
            crate::image::Store::open(&crate::image::store_dir(&config.data_dir)).unwrap_or_else(
                |_| crate::image::Store::at(&crate::image::store_dir(&config.data_dir)),
            ),
            config.registries.clone(),
        ),
        config,
        pods: Arc::default(),
        last_loop: std::sync::Mutex::new(tokio::time::Instant::now()),
        tokens: volume::TokenCache::default(),
    });
    // Told when the node's status changes between heartbeats.
    let status_changed = Arc::new(tokio::sync::Notify::new());
    {
        let (shared, changed) = (shared.clone(), status_changed.clone());
        sup.spawn("node-heartbeat", move |cancel| {
            let (shared, changed) = (shared.clone(), changed.clone());
            async move {
                heartbeat(
                    shared.client.clone(),
                    shared.config.clone(),
                    changed,
                    cancel,
                )
                .await;
            }
        });
    }
    let pods = Informer::with_selection(
        catalog::of(Kind::Pod),
        ListParams {
            field_selector: Some(format!("spec.nodeName={}", shared.config.node_name)),
            ..ListParams::default()
        },
    );
    let changes = Arc::new(ApiChanges::default());
    {
        let changes = changes.clone();
        pods.on_change(move |change| {
            changes.push(ApiChange {
                pod: Arc::new(change.object().clone()),
                deleted: matches!(change, Change::Deleted(_)),
            })
        });
    }
    {
        let client = client.clone();
        let pods = pods.clone();
        sup.spawn("node-pods", move |cancel| {
            pods.clone().run(client.clone(), cancel)
        });
    }
    // Static pods: one scan at a time reaches the agent.
    let (scan_tx, scan_rx) = tokio::sync::mpsc::channel::<Scan>(1);
    let scan_rx = match shared.config.pod_manifest_path.clone() {
        Some(path) => {
            let (node, every) = (
                shared.config.node_name.clone(),
                shared.config.manifest_scan_every,
            );
            sup.spawn("node-manifests", move |cancel| {
                manifests::watch(path.clone(), node.clone(), every, scan_tx.clone(), cancel)
            });
            Some(Arc::new(tokio::sync::Mutex::new(scan_rx)))
        }
        None => None,
    };
    if shared.config.import_images {
        let data_dir = shared.config.data_dir.clone();
        let status_changed = status_changed.clone();
        sup.spawn("node-images", move |cancel| {
            images::watch(data_dir.clone(), status_changed.clone(), cancel)
        });
    }
    {
        let (shared, changed) = (shared.clone(), status_changed.clone());
        sup.spawn("node-image-gc", move |cancel| {
            collect_images(shared.clone(), changed.clone(), cancel)
        });
    }
    if let Some(board) = shared.config.metrics.clone() {
        let shared = shared.clone();
        sup.spawn("node-metrics", move |cancel| {
            measure(shared.clone(), board.clone(), cancel)
        });
    }
    let handle = Handle {
        shared: shared.clone(),
    };
    sup.spawn("node-agent", move |cancel| {
        let (shared, changes, pods, scan_rx) = (
            shared.clone(),
            changes.clone(),
            pods.clone(),
            scan_rx.clone(),
        );
        async move {
            let mut scans = match &scan_rx {
                Some(s) => Some(s.lock().await),
                None => None,
            };
            run(shared, &changes, scans.as_deref_mut(), pods, cancel).await;
        }
    });
    handle
}

/// How long after a container starts its first sample is taken (so that starts close
/// together share one).
const STARTED_SAMPLE_DELAY: Duration = Duration::from_millis(200);

/// Measures the machine and every pod it runs each `metrics_every` into `board` (as the
/// kubelet's resource metrics and metrics-server's scrapes do together); the node is
/// forgotten when the agent stops.
async fn measure<R: Runtime>(
    shared: Arc<Shared<R>>,
    board: Arc<crate::types::metrics::Board>,
    cancel: CancellationToken,
) {
    use crate::types::metrics::{ContainerSample, PodSample};
    let node = shared.config.node_name.clone();
    let mut tick = tokio::time::interval(shared.config.metrics_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A container that starts is measured at once (its first figures are from its
    // start), as the kubelet's summary is live; starts close together share a sample.
    let mut events = shared.runtime.events();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            event = events.recv() => match event {
                Ok(crate::runtime::Event::Started(_)) => {
                    tokio::time::sleep(STARTED_SAMPLE_DELAY).await;
                    while events.try_recv().is_ok() {}
                }
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    events = shared.runtime.events();
                    continue;
                }
            },
            () = cancel.cancelled() => break,
        }
        let machine = crate::runtime::cgroup::machine_usage();
        let machine_at = jiff::Timestamp::now();
        let pods = shared
            .pods
            .list()
            .into_iter()
            .filter(|p| !finished(p))
            .filter_map(|pod| {
                let meta = |f: &str| pod["metadata"][f].as_str().unwrap_or("").to_string();
                let uid = meta("uid");
                let statuses = shared.runtime.pod_status(&uid).unwrap_or_default();
                let started = |name: &str, instance: u32| {
                    statuses
                        .iter()
                        .find(|s| s.id.name == name && s.id.attempt == instance)?
                        .started_at
                        .as_deref()?
                        .parse::<jiff::Timestamp>()
                        .ok()
                };
                let usage = shared.runtime.usage(&uid);
                let read_at = jiff::Timestamp::now();
                let containers: Vec<ContainerSample> = usage
                    .into_iter()
                    .map(|(name, instance, u)| ContainerSample {
                        started_at: started(&name, instance),
                        name,
                        instance,
                        cpu_ns: u.cpu_ns,
                        memory_bytes: u.memory_working_set,
                    })
                    .collect();
                (!containers.is_empty()).then(|| PodSample {
                    namespace: meta("namespace"),
                    name: meta("name"),
                    uid,
                    containers,
                    read_at: Some(read_at),
                })
            })
            .collect();
        board.record(
            &node,
            machine_at,
            machine.cpu_ns,
            machine.memory_working_set,
            pods,
        );
    }
    board.forget(&node);
}

/// The kubelet's image garbage collection: every `image_gc_every`, when the image
/// store's file system is past the high threshold, the images no pod of this node uses go,
/// the least recently used first, down to the low threshold; when not enough can go, a
/// Warning event `ImageGCFailed` on the Node says so.
async fn collect_images<R: Runtime>(
    shared: Arc<Shared<R>>,
    status_changed: Arc<tokio::sync::Notify>,
    cancel: CancellationToken,
) {
    let mut used_at: std::collections::HashMap<String, std::time::SystemTime> =
        std::collections::HashMap::new();
    let mut tick = tokio::time::interval(shared.config.image_gc_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let in_use: std::collections::HashSet<String> = shared
            .pods
            .list()
            .iter()
            .flat_map(|p| {
                ["initContainers", "containers", "ephemeralContainers"]
                    .iter()
                    .flat_map(|k| p["spec"][k].as_array().cloned().unwrap_or_default())
                    .collect::<Vec<_>>()
            })
            .filter_map(|c| crate::image::reference::normalize(c["image"].as_str()?).ok())
            .collect();
        let now = std::time::SystemTime::now();
        for name in &in_use {
            used_at.insert(name.clone(), now);
        }
        // A pull's blobs are in the store before its image is: not now.
        if shared.puller.busy() {
            continue;
        }
        let dir = crate::image::store_dir(&shared.config.data_dir);
        let Some((total, used)) = images::usage(&dir) else {
            continue;
        };
        let wanted = images::to_free(total, used, shared.config.image_gc);
        if wanted == 0 {
            continue;
        }
        let (gc_shared, used_now) = (shared.clone(), used_at.clone());
        let done = tokio::task::spawn_blocking(move || {
            let min_age = gc_shared.config.image_gc_min_age;
            images::collect(
                gc_shared.puller.store(),
                &in_use,
                &used_now,
                min_age,
                wanted,
            )
        })
        .await;
        let Ok(done) = done else { continue };
        for name in &done.removed {
            used_at.remove(name);
            tracing::info!(image = %name, "image garbage collection removed an unused image");
        }
        if !done.removed.is_empty() {
            status_changed.notify_one();
        }
        if done.freed < wanted {
            let node = json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": shared.config.node_name, "uid": shared.config.node_name}});
            let message = format!(
                "Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {} bytes eligible to free.",
                done.freed
            );
            shared
                .recorder
                .event(
                    &node,
                    crate::client::recorder::EventType::Warning,
                    "ImageGCFailed",
                    &message,
                )
                .await;
        }
    }
}

/// A pod as the API watch delivers it.
struct ApiChange {
    pod: Arc<Value>,
    deleted: bool,
}

/// Pod changes from the API waiting for the agent: the latest of each pod, in the order
/// the pods first changed (a pod deleted before another of its name was made is still
/// handled first). Bounded by the pods of this node, however slow the agent is.
#[derive(Default)]
struct ApiChanges {
    pending: std::sync::Mutex<PendingChanges>,
    added: tokio::sync::Notify,
}

#[derive(Default)]
struct PendingChanges {
    /// Pod uids, each once, in the order of their first pending change.
    order: std::collections::VecDeque<String>,
    latest: HashMap<String, ApiChange>,
}

impl ApiChanges {
    fn push(&self, change: ApiChange) {
        let uid = change.pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.latest.insert(uid.clone(), change).is_none() {
                p.order.push_back(uid);
            }
        }
        self.added.notify_one();
    }

    fn pop(&self) -> Option<ApiChange> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let uid = p.order.pop_front()?;
        p.latest.remove(&uid)
    }

    /// The next change, once there is one.
    async fn next(&self) -> ApiChange {
        loop {
            if let Some(change) = self.pop() {
                return change;
            }
            // A push between the pop and here leaves a permit: this returns at once.
            self.added.notified().await;
        }
    }
}

/// Whether a pod has ended (it holds nothing of the node any more).
fn finished(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// This node as admission sees it: its labels and taints from the API (when it can be
/// read) and the allocatable of this machine.
async fn this_node(client: &Client, config: &Config) -> Value {
    let mut node = match client
        .get(catalog::of(Kind::Node), None, &config.node_name)
        .await
    {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(node = %config.node_name, error = %e, "could not read the node; admitting against this machine alone");
            json!({"metadata": {"name": config.node_name}})
        }
    };
    node["status"]["allocatable"] = node_status(config)["allocatable"].clone();
    node
}

type Desired = watch::Sender<Option<Arc<Value>>>;

/// The agent's loop state: one worker per pod uid.
struct Agent<R> {
    shared: Arc<Shared<R>>,
    workers: HashMap<String, (Desired, Arc<tokio::sync::Notify>)>,
    tasks: JoinSet<String>,
    /// Static pods whose mirror pod could not be made (said once in the log).
    mirror_failed: std::collections::HashSet<String>,
    /// Pods that had containers when the agent started: they were admitted before.
    had_containers: std::collections::HashSet<String>,
    /// Pods admission refused (their workers only report that).
    rejected: std::collections::HashSet<String>,
}

impl<R: Runtime + Clone> Agent<R> {
    fn spawn(&mut self, uid: String, desired: Option<Arc<Value>>, rejection: Option<Rejection>) {
        let (tx, rx) = watch::channel(desired);
        let notify = Arc::new(tokio::sync::Notify::new());
        self.tasks.spawn(worker::run(
            self.shared.clone(),
            uid.clone(),
            rx,
            notify.clone(),
            rejection,
        ));
        self.workers.insert(uid, (tx, notify));
    }

    /// Hands a pod (or its absence) to its worker, starting one for a new pod once
    /// admission (§13) has said whether it fits.
    async fn desire(&mut self, uid: String, desired: Option<Arc<Value>>) {
        if let Some((tx, _)) = self.workers.get(&uid) {
            tx.send_replace(desired);
            return;
        }
        let Some(pod) = desired else { return };
        let rejection = self.admit(&uid, &pod).await.err();
        if let Some(r) = &rejection {
            tracing::info!(pod = %uid, reason = %r.reason, message = %r.message, "rejected a pod");
            self.rejected.insert(uid.clone());
        }
        self.spawn(uid, Some(pod), rejection);
    }

    /// Whether a new pod fits beside the pods admitted already.
    async fn admit(&self, uid: &str, pod: &Value) -> Result<(), Rejection> {
        if self.had_containers.contains(uid) || finished(pod) {
            return Ok(());
        }
        let others: Vec<Arc<Value>> = self
            .shared
            .pods
            .list()
            .into_iter()
            .filter(|p| {
                let other = p["metadata"]["uid"].as_str().unwrap_or("");
                other != uid
                    && self.workers.contains_key(other)
                    && !self.rejected.contains(other)
                    && !finished(p)
            })
            .collect();
        let others: Vec<&Value> = others.iter().map(|p| p.as_ref()).collect();
        let node = this_node(&self.shared.client, &self.shared.config).await;
        admission::admit(pod, &node, &others)
    }

    fn wake(&self, uid: &str) {
        if let Some((_, n)) = self.workers.get(uid) {
            n.notify_one();
        }
    }

    /// A pod of this node changed in the API. Mirror pods are never run: they are
    /// recorded beside their static pod, whose worker writes its status to them.
    async fn api_change(&mut self, change: ApiChange) {
        let ApiChange { pod, deleted } = change;
        let pods = self.shared.pods.clone();
        if deleted {
            pods.remove(&pod);
        } else {
            pods.upsert(pod.clone());
        }
        if is_mirror(&pod) {
            if let Some(st) = pods.static_of(&pod) {
                self.wake(st["metadata"]["uid"].as_str().unwrap_or(""));
            }
            self.sync_mirrors().await;
            return;
        }
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        self.desire(uid, (!deleted).then_some(pod)).await;
    }

    /// A new complete set of static pods: the ones gone are stopped, new ones started
    /// (an edited manifest is both, its uid being a hash of its content).
    async fn apply_scan(&mut self, scan: Scan) {
        for (pod, message) in &scan.rejected {
            self.shared
                .recorder
                .event(
                    pod,
                    crate::client::recorder::EventType::Warning,
                    "FailedValidation",
                    message,
                )
                .await;
        }
        let pods = self.shared.pods.clone();
        let uids: std::collections::HashSet<&str> = scan
            .pods
            .iter()
            .filter_map(|p| p["metadata"]["uid"].as_str())
            .collect();
        for old in pods.static_pods() {
            let uid = old["metadata"]["uid"].as_str().unwrap_or("");
            if !uids.contains(uid) {
                tracing::info!(pod = %manifests::full_name(&old), "static pod removed");
                pods.remove(&old);
                self.desire(uid.to_string(), None).await;
            }
        }
        for mut pod in scan.pods {
            let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
            if pods.get(&uid).is_some() {
                continue;
            }
            tracing::info!(pod = %manifests::full_name(&pod), "static pod added");
            pod["metadata"]["annotations"][manifests::SEEN_ANNOTATION] =
                json!(crate::types::now_micro());
            let pod = Arc::new(pod);
            pods.upsert(pod.clone());
            self.desire(uid, Some(pod)).await;
        }
        self.sync_mirrors().await;
    }

    /// Makes the API's mirror pods match the static pods: a stale one (another hash, or
    /// being deleted) is replaced, a missing one made, an orphaned one deleted.
    async fn sync_mirrors(&mut self) {
        let pods = self.shared.pods.clone();
        let client = &self.shared.client;
        let res = catalog::of(Kind::Pod);
        let delete = |m: Arc<Value>| async move {
            let params = crate::client::DeleteParams {
                uid: m["metadata"]["uid"].as_str().map(str::to_string),
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            let ns = m["metadata"]["namespace"].as_str().unwrap_or("");
            let name = m["metadata"]["name"].as_str().unwrap_or("");
            match client.delete(res, Some(ns), name, &params).await {
                Ok(_) => true,
                Err(e) if e.is_not_found() || e.is_conflict() => true,
                Err(e) => {
                    tracing::warn!(pod = %manifests::full_name(&m), error = %e, "could not delete a mirror pod");
                    false
                }
            }
        };
        for pod in pods.static_pods() {
            if let Some(m) = pods.mirror_of(&pod) {
                let stale = m.pointer("/metadata/deletionTimestamp").is_some()
                    || manifests::hash_of(&m) != manifests::hash_of(&pod);
                if !stale {
                    continue;
                }
                tracing::info!(pod = %manifests::full_name(&pod), "replacing a stale mirror pod");
                if !delete(m.clone()).await {
                    continue;
                }
                pods.remove(&m);
            }
            let mut mirror = (*pod).clone();
            if let Some(meta) = mirror["metadata"].as_object_mut() {
                meta.remove("uid");
                meta.remove("resourceVersion");
            }
            mirror["metadata"]["annotations"][manifests::MIRROR_ANNOTATION] =
                json!(manifests::hash_of(&pod));
            if let Some(m) = mirror.as_object_mut() {
                m.remove("status");
            }
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
            match client.create(res, Some(ns), &mirror).await {
                Ok(made) => {
                    self.mirror_failed
                        .remove(pod["metadata"]["uid"].as_str().unwrap_or(""));
                    pods.upsert(Arc::new(made));
                    self.wake(pod["metadata"]["uid"].as_str().unwrap_or(""));
                }
                // Made already: the watch brings it.
                Err(e) if e.is_already_exists() => {}
                Err(e) => {
                    // Retried at each housekeeping; said once per pod.
                    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
                    if self.mirror_failed.insert(uid) {
                        tracing::warn!(pod = %manifests::full_name(&pod), error = %e, "could not create a mirror pod");
                    } else {
                        tracing::debug!(pod = %manifests::full_name(&pod), error = %e, "could not create a mirror pod");
                    }
                }
            }
        }
        for m in pods.orphaned_mirrors() {
            tracing::info!(pod = %manifests::full_name(&m), "deleting an orphaned mirror pod");
            if delete(m.clone()).await {
                pods.remove(&m);
            }
        }
    }
}

/// Hands pod changes and runtime events to the pod workers, and cleans up what no pod
/// owns any more.
async fn run<R: Runtime + Clone>(
    shared: Arc<Shared<R>>,
    changes: &ApiChanges,
    mut scans: Option<&mut tokio::sync::mpsc::Receiver<Scan>>,
    pods: Informer,
    cancel: CancellationToken,
) {
    tokio::select! {
        () = pods.synced() => {}
        () = cancel.cancelled() => return,
    }
    // Nothing is cleaned up before every source has delivered its pods once (§12.3).
    let mut first_scan = None;
    if let Some(scans) = scans.as_mut() {
        tokio::select! {
            scan = scans.recv() => first_scan = scan,
            () = cancel.cancelled() => return,
        }
    }
    let mut agent = Agent {
        shared: shared.clone(),
        workers: HashMap::new(),
        tasks: JoinSet::new(),
        mirror_failed: std::collections::HashSet::new(),
        had_containers: shared
            .runtime
            .pods()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        rejected: std::collections::HashSet::new(),
    };
    let mut events = shared.runtime.events();
    // Containers of pods this node no longer has (deleted while berth was down).
    let known: std::collections::HashSet<String> = pods
        .list()
        .iter()
        .map(|p| &**p)
        .chain(first_scan.iter().flat_map(|s| s.pods.iter()))
        .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    let held = shared.runtime.pods().unwrap_or_default();
    if let Some(network) = &shared.config.network {
        // Addresses and links of pods gone with their records while berth was down.
        let live = known.iter().chain(&held).cloned().collect();
        network.retain(&live).await;
    }
    for uid in held {
        if !known.contains(&uid) {
            agent.spawn(uid, None, None);
        }
    }
    if let Some(scan) = first_scan {
        agent.apply_scan(scan).await;
    }
    let mut housekeeping = tokio::time::interval(shared.config.housekeeping_every);
    housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        *shared.last_loop.lock().unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
        tokio::select! {
            () = cancel.cancelled() => break,
            change = changes.next() => agent.api_change(change).await,
            Some(scan) = async {
                match scans.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            } => agent.apply_scan(scan).await,
            ev = events.recv() => {
                match ev {
                    Ok(Event::Started(id) | Event::Exited(id)) => agent.wake(&id.pod_uid),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        // Missed some: wake everyone.
                        agent.workers.values().for_each(|(_, n)| n.notify_one());
                    }
                    Err(_) => {}
                }
            }
            _ = housekeeping.tick() => agent.sync_mirrors().await,
            Some(done) = agent.tasks.join_next() => {
                match done {
                    Ok(uid) => {
                        agent.workers.remove(&uid);
                        agent.rejected.remove(&uid);
                        // Wanted again meanwhile (a manifest put back as it was).
                        if let Some(pod) = shared.pods.get(&uid).filter(|p| is_static(p)) {
                            agent.desire(uid, Some(pod)).await;
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "a pod worker failed"),
                }
            }
        }
    }
    agent.tasks.shutdown().await;
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pressure_tests {
    use super::*;

    fn condition(status: &Value, kind: &str) -> (String, String) {
        let c = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap();
        (
            c["status"].as_str().unwrap().to_string(),
            c["reason"].as_str().unwrap().to_string(),
        )
    }

    #[test]
    fn pressure_conditions_follow_what_is_left() {
        let config = Config::new("n1", "127.0.0.1");
        let plenty = Left {
            memory_bytes: Some(4 << 30),
            disk_share: Some(0.5),
            pid_share: Some(0.9),
        };
        let st = node_status_with(&config, plenty);
        assert_eq!(condition(&st, "MemoryPressure").0, "False");
        assert_eq!(condition(&st, "DiskPressure").0, "False");
        assert_eq!(condition(&st, "PIDPressure").0, "False");
        let short = Left {
            memory_bytes: Some(50 << 20),
            disk_share: Some(0.05),
            pid_share: Some(0.01),
        };
        let st = node_status_with(&config, short);
        assert_eq!(
            condition(&st, "MemoryPressure"),
            ("True".into(), "KubeletHasInsufficientMemory".into())
        );
        assert_eq!(
            condition(&st, "DiskPressure"),
            ("True".into(), "KubeletHasDiskPressure".into())
        );
        assert_eq!(
            condition(&st, "PIDPressure"),
            ("True".into(), "KubeletHasInsufficientPID".into())
        );
        // What cannot be read is no pressure.
        let st = node_status_with(&config, Left::default());
        assert_eq!(condition(&st, "MemoryPressure").0, "False");
        // This machine can be read.
        let here = Left::read(std::path::Path::new("/"));
        assert!(
            here.memory_bytes.is_some() && here.disk_share.is_some() && here.pid_share.is_some()
        );
    }
}

#[cfg(test)]
mod api_changes_tests {
    use super::*;

    fn change(uid: &str, rv: &str, deleted: bool) -> ApiChange {
        ApiChange {
            pod: Arc::new(json!({"metadata": {"uid": uid, "resourceVersion": rv}})),
            deleted,
        }
    }

    fn rv(c: &ApiChange) -> (&str, &str, bool) {
        (
            c.pod["metadata"]["uid"].as_str().unwrap(),
            c.pod["metadata"]["resourceVersion"].as_str().unwrap(),
            c.deleted,
        )
    }

    #[tokio::test]
    async fn pending_changes_keep_the_latest_of_each_pod_in_first_arrival_order() {
        let changes = ApiChanges::default();
        for (uid, v, deleted) in [("a", "1", false), ("b", "2", false), ("a", "3", true)] {
            changes.push(change(uid, v, deleted));
        }
        // However many changes a pod had, one entry waits for it.
        assert_eq!(changes.pending.lock().unwrap().latest.len(), 2);
        assert_eq!(rv(&changes.next().await), ("a", "3", true));
        assert_eq!(rv(&changes.next().await), ("b", "2", false));
        assert!(changes.pop().is_none());
        // A change pushed while the agent waits wakes it.
        let waiter = async { rv(&changes.next().await).1.to_string() };
        let (got, ()) = tokio::join!(waiter, async { changes.push(change("c", "4", false)) });
        assert_eq!(got, "4");
    }
}
