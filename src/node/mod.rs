//! The node agent: registers this machine as a Node, renews its Lease, and runs the pods
//! bound to it through a [`Runtime`], one worker per pod, reporting their status. It talks
//! to the API only through [`Client`], so the same agent can run on another machine.

mod admission;
mod probe;
mod status;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::client::informer::{Change, Informer};
use crate::client::{Client, ListParams, Patch};
use crate::controller::Supervisor;
use crate::registry::{Kind, catalog};
use crate::runtime::{Event, Runtime};

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
}

impl Config {
    pub fn new(node_name: &str, node_ip: &str) -> Self {
        Config {
            node_name: node_name.to_string(),
            node_ip: node_ip.to_string(),
            lease_every: Duration::from_secs(10),
            resync_every: Duration::from_secs(60),
            max_pods: 110,
        }
    }
}

/// What every pod worker shares.
pub(crate) struct Shared<R> {
    pub client: Client,
    pub runtime: R,
    pub config: Config,
    pub recorder: crate::client::recorder::Recorder,
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
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = format!("{}Ki", machine_memory_bytes() / 1024);
    let resources =
        json!({"cpu": cpus.to_string(), "memory": memory, "pods": config.max_pods.to_string()});
    let now = crate::types::now();
    let cond = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": config.node_ip},
            {"type": "Hostname", "address": config.node_name},
        ],
        "nodeInfo": {
            "machineID": read_trimmed("/etc/machine-id"),
            "systemUUID": "",
            "bootID": read_trimmed("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": read_trimmed("/proc/sys/kernel/osrelease"),
            "osImage": os_image(),
            "containerRuntimeVersion": format!("process://berth-{}", env!("CARGO_PKG_VERSION")),
            "kubeletVersion": format!("v1.34.0-berth.{}", env!("CARGO_PKG_VERSION")),
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
        },
    })
}

/// Creates the Node, or brings an existing one's status up to date (conditions keep
/// their transition times while their status holds).
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
    let current = match client.create(nodes, None, &node).await {
        Ok(made) => made,
        Err(e) if e.is_already_exists() => client.get(nodes, None, &config.node_name).await?,
        Err(e) => return Err(e),
    };
    let mut updated = current.clone();
    for field in ["capacity", "allocatable", "addresses", "nodeInfo"] {
        updated["status"][field] = status[field].clone();
    }
    for c in status["conditions"].as_array().into_iter().flatten() {
        let mut c = c.clone();
        if let Some(m) = c.as_object_mut() {
            m.remove("lastTransitionTime");
        }
        crate::types::set_condition(&mut updated, c);
    }
    if updated != current {
        client.update_status(nodes, &updated).await?;
    }
    Ok(())
}

/// Renews the node's lease until cancelled.
async fn heartbeat(client: Client, config: Config, cancel: CancellationToken) {
    let leases = catalog::of(Kind::Lease);
    let ns = Some("kube-node-lease");
    loop {
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
            () = cancel.cancelled() => return,
        }
    }
}

/// Starts the node agent's tasks under the supervisor.
pub fn start<R: Runtime + Clone>(
    sup: &mut Supervisor,
    client: &Client,
    runtime: R,
    config: Config,
) {
    let shared = Arc::new(Shared {
        client: client.clone(),
        runtime,
        recorder: crate::client::recorder::Recorder::new(
            client.clone(),
            "kubelet",
            Some(&config.node_name),
        ),
        config,
    });
    {
        let shared = shared.clone();
        sup.spawn("node-heartbeat", move |cancel| {
            let shared = shared.clone();
            async move {
                if let Err(e) = register(&shared.client, &shared.config).await {
                    tracing::error!(error = %e, "could not register the node");
                    return;
                }
                heartbeat(shared.client.clone(), shared.config.clone(), cancel).await;
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
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(String, Option<Arc<Value>>)>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    pods.on_change(move |change| {
        let pod = change.object();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let desired = match change {
            Change::Deleted(_) => None,
            _ => Some(Arc::new(pod.clone())),
        };
        // Bounded by the number of pods on the node: one entry per change, drained at once.
        let _ = tx.send((uid, desired));
    });
    {
        let client = client.clone();
        let pods = pods.clone();
        sup.spawn("node-pods", move |cancel| {
            pods.clone().run(client.clone(), cancel)
        });
    }
    sup.spawn("node-agent", move |cancel| {
        let (shared, rx, pods) = (shared.clone(), rx.clone(), pods.clone());
        async move {
            let mut rx = rx.lock().await;
            run(shared, &mut rx, pods, cancel).await;
        }
    });
}

type Desired = watch::Sender<Option<Arc<Value>>>;

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

/// Hands pod changes and runtime events to the pod workers, and cleans up what no pod
/// owns any more.
async fn run<R: Runtime + Clone>(
    shared: Arc<Shared<R>>,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Option<Arc<Value>>)>,
    pods: Informer,
    cancel: CancellationToken,
) {
    tokio::select! {
        () = pods.synced() => {}
        () = cancel.cancelled() => return,
    }
    let mut workers: HashMap<String, (Desired, Arc<tokio::sync::Notify>)> = HashMap::new();
    let mut tasks: JoinSet<String> = JoinSet::new();
    let mut events = shared.runtime.events();
    // Pods that had containers when the agent started were admitted before.
    let had_containers: std::collections::HashSet<String> = shared
        .runtime
        .pods()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut rejected: std::collections::HashSet<String> = std::collections::HashSet::new();
    // Containers of pods this node no longer has (deleted while berth was down).
    let known: std::collections::HashSet<String> = pods
        .list()
        .iter()
        .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    for uid in shared.runtime.pods().unwrap_or_default() {
        if !known.contains(&uid) {
            let (tx, _) = watch::channel(None);
            let notify = Arc::new(tokio::sync::Notify::new());
            tasks.spawn(worker::run(
                shared.clone(),
                uid.clone(),
                tx.subscribe(),
                notify.clone(),
                None,
            ));
            workers.insert(uid, (tx, notify));
        }
    }
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            change = rx.recv() => {
                let Some((uid, desired)) = change else { break };
                if let Some((tx, _)) = workers.get(&uid) {
                    tx.send_replace(desired);
                } else if let Some(pod) = desired {
                    let verdict = if had_containers.contains(&uid) || finished(&pod) {
                        Ok(())
                    } else {
                        let admitted: Vec<Arc<Value>> = pods
                            .list()
                            .into_iter()
                            .filter(|p| {
                                let other = p["metadata"]["uid"].as_str().unwrap_or("");
                                workers.contains_key(other) && !rejected.contains(other) && !finished(p)
                            })
                            .collect();
                        let admitted: Vec<&Value> = admitted.iter().map(|p| p.as_ref()).collect();
                        let node = this_node(&shared.client, &shared.config).await;
                        admission::admit(&pod, &node, &admitted)
                    };
                    let rejection = verdict.err();
                    if let Some(r) = &rejection {
                        tracing::info!(pod = %uid, reason = %r.reason, message = %r.message, "rejected a pod");
                        rejected.insert(uid.clone());
                    }
                    let (tx, rx) = watch::channel(Some(pod));
                    let notify = Arc::new(tokio::sync::Notify::new());
                    tasks.spawn(worker::run(shared.clone(), uid.clone(), rx, notify.clone(), rejection));
                    workers.insert(uid, (tx, notify));
                }
            }
            ev = events.recv() => {
                let uid = match ev {
                    Ok(Event::Started(id) | Event::Exited(id)) => Some(id.pod_uid),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        // Missed some: wake everyone.
                        workers.values().for_each(|(_, n)| n.notify_one());
                        None
                    }
                    Err(_) => None,
                };
                if let Some((_, n)) = uid.and_then(|u| workers.get(&u)) {
                    n.notify_one();
                }
            }
            Some(done) = tasks.join_next() => {
                match done {
                    Ok(uid) => {
                        workers.remove(&uid);
                        rejected.remove(&uid);
                    }
                    Err(e) => tracing::error!(error = %e, "a pod worker failed"),
                }
            }
        }
    }
    tasks.shutdown().await;
}
