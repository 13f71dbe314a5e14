//! One pod's worker: syncs what runs with what the pod asks for (init containers in order,
//! then the app containers; restarts by policy with the CrashLoopBackOff back-off; a
//! changed container is restarted), reports the status when it changed, and stops
//! everything (SIGTERM, then SIGKILL after the grace period) when the pod goes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, watch};

use super::Shared;
use super::admission::Rejection;
use super::probe::{self, Kind as ProbeKind, Outcome, Tracker};
use super::status::{self, Inputs, Waiting};
use super::volume;
use crate::client::Patch;
use crate::client::recorder::EventType;
use crate::client::{Kind, catalog};
use crate::runtime::{ContainerId, ContainerSpec, ContainerStatus, Resources, Runtime, State};
use crate::types::quantity::Quantity;

/// Even a grace period of 0 gives a container this long between SIGTERM and SIGKILL.
/// The image back-off (a container waits in `ImagePullBackOff` between lookups).
const IMAGE_BACKOFF_FIRST: Duration = Duration::from_secs(10);
const IMAGE_BACKOFF_MAX: Duration = Duration::from_secs(300);
const MIN_GRACE: Duration = Duration::from_secs(2);
/// How long a postStart hook may run before it counts as failed.
const POST_START_LIMIT: Duration = Duration::from_secs(120);
/// Volumes that could not be set up (a missing ConfigMap, say) are tried again after 1 s,
/// doubling up to 8 s: the agent does not watch what volumes project.
const MOUNT_RETRY_FIRST: Duration = Duration::from_secs(1);
const MOUNT_RETRY_MAX: Duration = Duration::from_secs(8);
/// How long a new pod waits quietly for its service account's token, and how often it
/// looks again meanwhile.
const TOKEN_GRACE: Duration = Duration::from_secs(10);
const TOKEN_RETRY: Duration = Duration::from_millis(100);

/// How long ago `pod` was created (zero if that is not known).
fn pod_age(pod: &Value) -> Duration {
    str_at(pod, "/metadata/creationTimestamp")
        .parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| Duration::try_from(jiff::Timestamp::now().duration_since(t)).ok())
        .unwrap_or_default()
}

#[derive(Clone, Copy)]
struct Backoff {
    delay: Duration,
    last: jiff::Timestamp,
}

struct Worker<R> {
    shared: Arc<Shared<R>>,
    uid: String,
    /// Per (container, spec hash).
    backoff: HashMap<(String, String), Backoff>,
    /// Image "pulls" (lookups in the node's store) that failed, by (container, image):
    /// until the delay has passed, the container waits in `ImagePullBackOff`.
    pull_backoff: HashMap<(String, String), Backoff>,
    /// Probe state per (container, probe kind), for the instance (attempt) it belongs to.
    probes: HashMap<(String, ProbeKind), (u32, Tracker)>,
    /// The environment each container was started with (exec probes run in it).
    envs: HashMap<String, Vec<(String, String)>>,
    /// A step of the last sync failed: sync again after `retry_after`.
    retry: bool,
    /// The status the agent last computed for the pod: what the API must show.
    reported: Option<Value>,
    /// The pod's volumes as of the last sync, or why they could not be set up.
    volumes: Result<volume::Prepared, volume::MountError>,
    /// When to try again after volumes failed (doubling up to [`MOUNT_RETRY_MAX`]).
    mount_retry: Duration,
    /// When the volumes were last set up, and for which version of the pod's spec and
    /// metadata (what the downward API shows).
    volumes_at: Option<(tokio::time::Instant, String)>,
    /// Whether the pod was told that its limits are not enforced (it is told once).
    told_unenforced: bool,
    /// Why the node turned the pod away, if it did: it never starts.
    rejected: Option<Rejection>,
    /// Whether the rejection event was sent.
    told_rejected: bool,
    /// Whether the pod's RuntimeClass was found to name this node's handler: both the
    /// pod's class and the class's handler are immutable, so it is looked up once.
    sandbox_ok: bool,
    /// The RuntimeClass handler the pod runs with (its class's, else the node's).
    handler: Option<String>,
}

/// What a whole pod may use, as kubelet sizes the pod's cgroup: a limit only when every
/// container has one (the app containers' sum, or an init container's if larger); the
/// cpu weight from the requests likewise.
/// Who a container runs as, from its security context over its pod's.
fn security(pod: &Value, c: &Value) -> super::images::Security {
    let pick = |key: &str| {
        c.pointer(&format!("/securityContext/{key}"))
            .or_else(|| pod.pointer(&format!("/spec/securityContext/{key}")))
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    super::images::Security {
        run_as_user: pick("runAsUser"),
        run_as_group: pick("runAsGroup"),
        supplemental_groups: pod
            .pointer("/spec/securityContext/supplementalGroups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_u64)
            .filter_map(|n| u32::try_from(n).ok())
            .collect(),
        hardening: hardening(pod, c),
        sandbox: crate::runtime::oci::Sandbox {
            host_network: pod.pointer("/spec/hostNetwork") == Some(&Value::Bool(true)),
            host_ipc: pod.pointer("/spec/hostIPC") == Some(&Value::Bool(true)),
            host_pid: pod.pointer("/spec/hostPID") == Some(&Value::Bool(true)),
            share_pids: pod.pointer("/spec/shareProcessNamespace") == Some(&Value::Bool(true)),
        },
    }
}

/// What a container's security context asks of its process and root filesystem.
fn hardening(pod: &Value, c: &Value) -> crate::runtime::oci::Hardening {
    let sc = &c["securityContext"];
    let names = |key: &str| -> Vec<String> {
        sc.pointer(&format!("/capabilities/{key}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let seccomp = sc
        .pointer("/seccompProfile/type")
        .or_else(|| pod.pointer("/spec/securityContext/seccompProfile/type"))
        .and_then(Value::as_str);
    crate::runtime::oci::Hardening {
        privileged: sc["privileged"] == true,
        add: names("add"),
        drop: names("drop"),
        read_only_root: sc["readOnlyRootFilesystem"] == true,
        no_new_privileges: sc["allowPrivilegeEscalation"] == false,
        seccomp_runtime_default: seccomp == Some("RuntimeDefault"),
    }
}

fn pod_resources(pod: &Value) -> Resources {
    let list = |field: &str| -> Vec<Resources> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .map(resources)
            .collect()
    };
    let (apps, inits) = (list("containers"), list("initContainers"));
    let total = |get: fn(&Resources) -> Option<u64>, all: bool| -> Option<u64> {
        let each = |rs: &[Resources]| -> Option<Vec<u64>> {
            if all {
                rs.iter().map(get).collect()
            } else {
                Some(rs.iter().filter_map(get).collect())
            }
        };
        let sum: u64 = each(&apps)?.iter().sum();
        let peak = each(&inits)?.into_iter().max().unwrap_or(0);
        Some(sum.max(peak)).filter(|n| *n > 0)
    };
    Resources {
        memory_limit_bytes: total(|r| r.memory_limit_bytes, true),
        cpu_limit_millis: total(|r| r.cpu_limit_millis, true),
        cpu_request_millis: total(|r| r.cpu_request_millis.or(r.cpu_limit_millis), false),
    }
}

/// A container's resources as the runtime takes them. A quantity that does not parse
/// (the API validates them) counts as not given.
fn resources(c: &Value) -> Resources {
    let get = |path: &str| {
        c.pointer(path)
            .and_then(Value::as_str)
            .and_then(|q| q.parse::<Quantity>().ok())
    };
    let whole = |q: Quantity| u64::try_from(q.value()).ok();
    let milli = |q: Quantity| u64::try_from(q.milli()).ok();
    // A limit of zero is no limit (as the container runtimes read it).
    let limit = |n: u64| (n > 0).then_some(n);
    Resources {
        memory_limit_bytes: get("/resources/limits/memory")
            .and_then(whole)
            .and_then(limit),
        cpu_limit_millis: get("/resources/limits/cpu").and_then(milli).and_then(limit),
        cpu_request_millis: get("/resources/requests/cpu").and_then(milli),
    }
}

/// A stable hash of a container's spec: a different hash means "changed, restart".
fn spec_hash(container: &Value) -> String {
    let digest = Sha256::digest(serde_json::to_vec(container).unwrap_or_default());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn str_at<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// `10s`, `1m20s`, `5m0s`, as Go prints durations.
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{}s", s / 60, s % 60)
    }
}

/// What to do about one container now.
enum Step {
    Keep,
    Start,
    Wait(Waiting, Option<Duration>),
}

impl<R: Runtime + Clone> Worker<R> {
    fn full_name(pod: &Value) -> String {
        format!(
            "{}_{}({})",
            str_at(pod, "/metadata/name"),
            str_at(pod, "/metadata/namespace"),
            str_at(pod, "/metadata/uid")
        )
    }

    /// Resolves a container's environment; a missing reference is a config error.
    async fn env(&self, pod: &Value, c: &Value) -> Result<Vec<(String, String)>, String> {
        let ns = str_at(pod, "/metadata/namespace");
        // As in Kubernetes, HOSTNAME is the pod's name unless the spec sets it.
        let mut out = vec![(
            "HOSTNAME".to_string(),
            str_at(pod, "/metadata/name").to_string(),
        )];
        // Where the API is, as Kubernetes tells every container (its "kubernetes"
        // service), so in-cluster clients find it; the container's own env may override.
        if let Some((host, port)) = &self.shared.config.api {
            out.extend([
                ("KUBERNETES_SERVICE_HOST".to_string(), host.clone()),
                ("KUBERNETES_SERVICE_PORT".to_string(), port.to_string()),
                (
                    "KUBERNETES_SERVICE_PORT_HTTPS".to_string(),
                    port.to_string(),
                ),
                (
                    "KUBERNETES_PORT".to_string(),
                    format!("tcp://{host}:{port}"),
                ),
            ]);
        }
        let lookup = |kind: Kind, name: &str| {
            let client = self.shared.client.clone();
            let name = name.to_string();
            let ns = ns.to_string();
            async move { client.get(catalog::of(kind), Some(&ns), &name).await }
        };
        for from in c["envFrom"].as_array().into_iter().flatten() {
            let prefix = from["prefix"].as_str().unwrap_or("");
            for (kind, key) in [
                (Kind::ConfigMap, "configMapRef"),
                (Kind::Secret, "secretRef"),
            ] {
                let Some(r) = from.get(key) else { continue };
                let name = r["name"].as_str().unwrap_or("");
                match lookup(kind, name).await {
                    Ok(obj) => out.extend(
                        data(&obj, kind)
                            .into_iter()
                            .map(|(k, v)| (format!("{prefix}{k}"), v)),
                    ),
                    Err(_) if r["optional"] == true => {}
                    Err(e) => return Err(format!("{key} {name:?}: {e}")),
                }
            }
        }
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or("").to_string();
            if let Some(v) = e["value"].as_str() {
                out.push((name, expand(v, &out)));
                continue;
            }
            let Some(from) = e.get("valueFrom") else {
                out.push((name, String::new()));
                continue;
            };
            if let Some(f) = from.get("fieldRef") {
                let path = f["fieldPath"].as_str().unwrap_or("");
                out.push((name, field_value(pod, path, &self.shared.config.node_ip)));
            } else if let Some(r) = from.get("resourceFieldRef") {
                // As the downward API's files: in units of the divisor, an unset limit
                // the node's capacity; the container is this one unless named.
                let mut r = r.clone();
                if r["containerName"].as_str().is_none_or(str::is_empty) {
                    r["containerName"] = c["name"].clone();
                }
                out.push((name, super::volume::resource_value(pod, &r)?));
            } else {
                for (kind, key) in [
                    (Kind::ConfigMap, "configMapKeyRef"),
                    (Kind::Secret, "secretKeyRef"),
                ] {
                    let Some(r) = from.get(key) else { continue };
                    let obj_name = r["name"].as_str().unwrap_or("");
                    let k = r["key"].as_str().unwrap_or("");
                    let value = match lookup(kind, obj_name).await {
                        Ok(obj) => data(&obj, kind)
                            .into_iter()
                            .find(|(dk, _)| dk == k)
                            .map(|(_, v)| v),
                        Err(_) => None,
                    };
                    match value {
                        Some(v) => out.push((name.clone(), v)),
                        None if r["optional"] == true => {}
                        None => {
                            let what = if kind == Kind::ConfigMap {
                                "configmap"
                            } else {
                                "secret"
                            };
                            return Err(format!("couldn't find key {k} in {what} {ns}/{obj_name}"));
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Decides about one container from its instances.
    fn step(&mut self, pod: &Value, c: &Value, instances: &[&ContainerStatus], init: bool) -> Step {
        let name = c["name"].as_str().unwrap_or("").to_string();
        let hash = spec_hash(c);
        let Some(latest) = instances.last() else {
            return Step::Start;
        };
        match latest.state {
            State::Running | State::Created => return Step::Keep,
            State::Exited | State::Unknown => {}
        }
        let policy = str_at(pod, "/spec/restartPolicy");
        let code = latest.exit_code.unwrap_or(137);
        let restart = match policy {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => !init || code != 0,
        };
        if !restart || (init && code == 0) {
            return Step::Keep;
        }
        // Restart back-off (§6): the first restart is immediate, then the delay starts at
        // `backoff_initial` and doubles up to `backoff_max`; a run longer than twice the
        // maximum forgets it.
        let (first, max) = (
            self.shared.config.backoff_initial,
            self.shared.config.backoff_max,
        );
        let now = self.shared.runtime.now();
        let finished: jiff::Timestamp = latest
            .finished_at
            .as_deref()
            .and_then(|t| t.parse().ok())
            .unwrap_or(now);
        let since = |a: jiff::Timestamp, b: jiff::Timestamp| {
            Duration::try_from(a.duration_since(b)).unwrap_or(Duration::ZERO)
        };
        let key = (name.clone(), hash);
        match self.backoff.get(&key).copied() {
            Some(b) if since(finished, b.last) <= max * 2 => {
                let waited = since(now, finished);
                if waited < b.delay {
                    let message = format!(
                        "back-off {} restarting failed container={name} pod={}",
                        go_duration(b.delay),
                        Self::full_name(pod)
                    );
                    return Step::Wait(
                        Waiting {
                            reason: "CrashLoopBackOff".into(),
                            message,
                        },
                        Some(b.delay - waited),
                    );
                }
                self.backoff.insert(
                    key,
                    Backoff {
                        delay: (b.delay * 2).min(max),
                        last: now,
                    },
                );
            }
            _ => {
                self.backoff.insert(
                    key,
                    Backoff {
                        delay: first.min(max),
                        last: now,
                    },
                );
            }
        }
        Step::Start
    }

    async fn start(&mut self, pod: &Value, c: &Value, attempt: u32) -> Result<(), Waiting> {
        let name = c["name"].as_str().unwrap_or("");
        let mut env = self.env(pod, c).await.map_err(|message| Waiting {
            reason: "CreateContainerConfigError".into(),
            message,
        })?;
        let mut argv: Vec<String> = Vec::new();
        let no_command = c["command"].as_array().is_none_or(Vec::is_empty);
        // Images are not pulled; the built-in ones are commands of berth's own, whose
        // other names (`openshift-deploy`) are on their PATH.
        let image = c["image"].as_str().unwrap_or("").trim();
        let builtin_image = self
            .shared
            .config
            .builtin_images
            .iter()
            .find(|(i, _)| builtin_matches(i, image));
        if let (Some(_), Some(dir)) = (builtin_image, &self.shared.config.builtin_bin) {
            let dir = dir.display().to_string();
            match env.iter_mut().rev().find(|(k, _)| k == "PATH") {
                Some((_, path)) => *path = format!("{dir}:{path}"),
                None => env.push((
                    "PATH".into(),
                    format!("{dir}:{}", crate::runtime::DEFAULT_PATH),
                )),
            }
        }
        let builtin = builtin_image
            .filter(|_| no_command)
            .map(|(_, argv)| argv.clone());
        if let Some(cmd) = &builtin {
            argv.extend(cmd.iter().cloned());
        }
        let expanded = |key: &str| -> Vec<String> {
            c[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| expand(a.as_str().unwrap_or(""), &env))
                .collect()
        };
        let (command, args) = (expanded("command"), expanded("args"));
        let mut working_dir: Option<std::path::PathBuf> = c["workingDir"]
            .as_str()
            .filter(|d| !d.is_empty())
            .map(Into::into);
        let mut rootfs = None;
        let handler = self
            .handler
            .as_deref()
            .unwrap_or(&self.shared.config.runtime_handler);
        if builtin.is_none() && handler == super::OCI_HANDLER {
            let data_dir = self.shared.config.data_dir.clone();
            let (wanted, security) = (image.to_string(), security(pod, c));
            let policy = c["imagePullPolicy"].as_str().unwrap_or("").to_string();
            let key = (name.to_string(), image.to_string());
            let now = self.shared.runtime.now();
            if let Some(b) = self.pull_backoff.get(&key) {
                let since = Duration::try_from(now.duration_since(b.last)).unwrap_or_default();
                // Within the back-off, a look at the store only: an image imported
                // meanwhile is taken at once.
                let stored = crate::image::reference::normalize(image)
                    .ok()
                    .is_some_and(|n| {
                        crate::image::Store::at(&crate::image::store_dir(&data_dir))
                            .image(&n)
                            .is_some()
                    });
                if since < b.delay && !stored {
                    return Err(Waiting {
                        reason: "ImagePullBackOff".into(),
                        message: format!("Back-off pulling image {image:?}"),
                    });
                }
            }
            if let Err(w) = self.pull(pod, image, &policy).await {
                // As the kubelet's image back-off: 10 s, doubling up to 5 min.
                let delay = self
                    .pull_backoff
                    .get(&key)
                    .map_or(IMAGE_BACKOFF_FIRST, |b| {
                        (b.delay * 2).min(IMAGE_BACKOFF_MAX)
                    });
                self.pull_backoff.insert(key, Backoff { delay, last: now });
                return Err(w);
            }
            let resolved = tokio::task::spawn_blocking(move || {
                super::images::resolve(&data_dir, &wanted, &policy, &security)
            })
            .await
            .unwrap_or_else(|e| {
                Err(Waiting {
                    reason: "CreateContainerError".into(),
                    message: format!("resolving the image failed: {e}"),
                })
            });
            let resolved = match resolved {
                Ok(r) => {
                    self.pull_backoff.remove(&key);
                    r
                }
                Err(w) => {
                    if w.reason == "ErrImagePull" {
                        // As the kubelet's image back-off: 10 s, doubling up to 5 min.
                        let delay = self
                            .pull_backoff
                            .get(&key)
                            .map_or(IMAGE_BACKOFF_FIRST, |b| {
                                (b.delay * 2).min(IMAGE_BACKOFF_MAX)
                            });
                        self.pull_backoff.insert(key, Backoff { delay, last: now });
                    }
                    return Err(w);
                }
            };
            argv = crate::runtime::oci::argv(&resolved.config, &command, &args);
            if argv.is_empty() {
                return Err(Waiting {
                    reason: "CreateContainerError".into(),
                    message: format!(
                        "no command specified: image {image:?} has no entrypoint and no cmd, and the container no command"
                    ),
                });
            }
            // The image's environment, under the container's own.
            let mut merged: Vec<(String, String)> = resolved
                .config
                .env
                .iter()
                .filter_map(|e| e.split_once('='))
                .filter(|(k, _)| !env.iter().any(|(ck, _)| ck == k))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            merged.append(&mut env);
            env = merged;
            if working_dir.is_none() {
                working_dir = resolved.config.working_dir.clone().map(Into::into);
            }
            rootfs = Some(resolved.rootfs);
        } else {
            argv.extend(command);
            argv.extend(args);
            if no_command && builtin.is_none() {
                let store =
                    crate::image::Store::at(&crate::image::store_dir(&self.shared.config.data_dir));
                let stored = crate::image::reference::normalize(image)
                    .ok()
                    .and_then(|n| store.image(&n));
                let message = match stored {
                    Some(_) => format!(
                        "the container has no command: image {image:?} is in this node's store, but the process runtime runs commands on this machine, not an image's entrypoint; give the container a command, or run the pod with the oci runtime"
                    ),
                    None => format!(
                        "the container has no command, and the process runtime runs only commands on this machine (image {image:?} is not in this node's store, and images are not pulled): give the container a command"
                    ),
                };
                return Err(Waiting {
                    reason: "CreateContainerConfigError".into(),
                    message,
                });
            }
        }
        let config_error = |message: String| Waiting {
            reason: "CreateContainerConfigError".into(),
            message,
        };
        let prepared = self
            .volumes
            .as_ref()
            .map_err(|e| config_error(e.message.clone()))?;
        let mounts = volume::mounts(c, prepared, &env).map_err(config_error)?;
        if !mounts.is_empty() && !self.shared.config.mount_namespaces && rootfs.is_none() {
            let targets: Vec<String> = mounts
                .iter()
                .map(|m| m.target.display().to_string())
                .collect();
            return Err(config_error(format!(
                "the container mounts volumes at {}: volume mounts need a mount namespace of the container's own, which needs berth to run as root",
                targets.join(", ")
            )));
        }
        let spec = ContainerSpec {
            pod_uid: self.uid.clone(),
            pod_name: str_at(pod, "/metadata/name").into(),
            pod_namespace: str_at(pod, "/metadata/namespace").into(),
            name: name.into(),
            attempt,
            hash: spec_hash(c),
            image: c["image"].as_str().unwrap_or("").into(),
            argv,
            env: env.clone(),
            working_dir,
            mounts,
            resources: resources(c),
            pod_resources: pod_resources(pod),
            stdio: crate::runtime::Stdio {
                stdin: c["stdin"].as_bool().unwrap_or(false),
                stdin_once: c["stdinOnce"].as_bool().unwrap_or(false),
                tty: c["tty"].as_bool().unwrap_or(false),
            },
            termination_message: crate::runtime::TerminationMessage {
                // A file of the container's own needs a mount namespace of its own.
                path: c["terminationMessagePath"]
                    .as_str()
                    .filter(|p| {
                        !p.is_empty() && (self.shared.config.mount_namespaces || rootfs.is_some())
                    })
                    .map(Into::into),
                fallback_to_logs: c["terminationMessagePolicy"] == "FallbackToLogsOnError",
            },
            rootfs,
        };
        if spec.resources.any_limit() && !self.told_unenforced {
            if let Some(why) = self.shared.runtime.limits_unenforced() {
                self.told_unenforced = true;
                let message = format!("Resource limits are not enforced on this node: {why}");
                self.shared
                    .recorder
                    .event(pod, EventType::Warning, "LimitsNotEnforced", &message)
                    .await;
            }
        }
        self.envs.insert(name.to_string(), env.clone());
        match self.shared.runtime.start(&spec).await {
            Ok(id) => {
                let rec = &self.shared.recorder;
                rec.event(
                    pod,
                    EventType::Normal,
                    "Created",
                    &format!("Created container {name}"),
                )
                .await;
                rec.event(
                    pod,
                    EventType::Normal,
                    "Started",
                    &format!("Started container {name}"),
                )
                .await;
                if let Some(hook) = c.pointer("/lifecycle/postStart") {
                    let ran = tokio::time::timeout(
                        POST_START_LIMIT,
                        probe::act(
                            hook,
                            c,
                            &env,
                            &self.inside(&id),
                            &self.shared.config.node_ip,
                        ),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "did not finish within {}s",
                            POST_START_LIMIT.as_secs()
                        ))
                    });
                    if let Err(why) = ran {
                        let message = format!(
                            "PostStartHook failed: {} lifecycle hook for container {name:?} in pod {:?} failed: {why}",
                            hook_kind(hook),
                            Self::full_name(pod)
                        );
                        rec.event(pod, EventType::Warning, "FailedPostStartHook", &message)
                            .await;
                        // Killed as the kubelet does; the policy decides about a restart.
                        self.kill(pod, Some(c), &id, grace(pod), "FailedPostStartHook")
                            .await;
                    }
                }
                Ok(())
            }
            Err(e) => Err(Waiting {
                reason: "RunContainerError".into(),
                message: e.to_string(),
            }),
        }
    }

    /// Starts a container; when it cannot, records why it waits. True if it started.
    async fn start_or_wait(
        &mut self,
        pod: &Value,
        c: &Value,
        attempt: u32,
        waiting: &mut HashMap<String, Waiting>,
    ) -> bool {
        match self.start(pod, c, attempt).await {
            Ok(()) => true,
            Err(w) => {
                // As the kubelet: the reason is in the status, the error in an event too
                // (volumes not set up yet say so themselves, as FailedMount).
                if self.volumes.is_ok() {
                    // A failed pull: its error, then its reason, as two events.
                    let message = match w.reason.as_str() {
                        "ErrImagePull" => {
                            self.shared
                                .recorder
                                .event(pod, EventType::Warning, "Failed", &w.message)
                                .await;
                            format!("Error: {}", w.reason)
                        }
                        _ => format!("Error: {}", w.message),
                    };
                    self.shared
                        .recorder
                        .event(pod, EventType::Warning, "Failed", &message)
                        .await;
                }
                waiting.insert(c["name"].as_str().unwrap_or("").to_string(), w);
                self.retry = true;
                false
            }
        }
    }

    /// One sync of a live pod; returns when to look again without an event.
    async fn sync(&mut self, pod: &Value) -> Option<Duration> {
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            self.retry |= !self.terminate(Some(pod), true).await;
            return None;
        }
        if let Some(r) = self.rejected.clone() {
            if !self.told_rejected {
                self.told_rejected = true;
                self.shared
                    .recorder
                    .event(pod, EventType::Warning, &r.reason, &r.message)
                    .await;
            }
            self.write_status(pod, r.status()).await;
            return None;
        }
        // A finished pod never runs again.
        if matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed") {
            self.stop_all(pod).await;
            self.end_finished_sandbox();
            return None;
        }
        let deadline = self.deadline_left(pod);
        if deadline == Some(Duration::ZERO) {
            self.end_past_deadline(pod).await;
            return None;
        }
        if let Some(why) = self.sandbox_error(pod).await {
            // As the kubelet when the pod's runtime handler is not there: the containers
            // wait in ContainerCreating and the sandbox is tried again.
            let message = format!("Failed to create pod sandbox: {why}");
            self.shared
                .recorder
                .event(pod, EventType::Warning, "FailedCreatePodSandBox", &message)
                .await;
            let waiting: HashMap<String, Waiting> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let name = c["name"].as_str().unwrap_or("").to_string();
                    let w = Waiting {
                        reason: "ContainerCreating".into(),
                        message: String::new(),
                    };
                    (name, w)
                })
                .collect();
            let st = status::build(&Inputs {
                pod,
                instances: &[],
                waiting: &waiting,
                node_ip: &self.shared.config.node_ip,
                terminating: false,
                probed: &HashMap::new(),
            });
            self.write_status(pod, st).await;
            return min(Some(self.shared.config.retry_after), deadline);
        }
        let mut wake = self.prepare_volumes(pod).await;
        let instances = self.instances();
        let mut waiting: HashMap<String, Waiting> = HashMap::new();
        let mut started_any = false;
        let init_specs = pod["spec"]["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let app_specs = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let of = |name: &str| status::instances_of(&instances, name);
        // Init containers: one at a time, in order.
        let mut inits_done = true;
        let mut pod_failed = false;
        for c in &init_specs {
            let name = c["name"].as_str().unwrap_or("");
            let mine = of(name);
            let done = mine
                .last()
                .is_some_and(|l| l.state == State::Exited && l.exit_code == Some(0));
            if done {
                continue;
            }
            inits_done = false;
            if mine.last().is_some_and(|l| l.state == State::Exited)
                && str_at(pod, "/spec/restartPolicy") == "Never"
            {
                pod_failed = true;
                break;
            }
            match self.step(pod, c, &mine, true) {
                Step::Keep => {}
                Step::Start => {
                    let attempt = mine.last().map_or(0, |l| l.id.attempt + 1);
                    started_any |= self.start_or_wait(pod, c, attempt, &mut waiting).await;
                }
                Step::Wait(w, after) => {
                    waiting.insert(name.to_string(), w);
                    wake = min(wake, after);
                }
            }
            break;
        }
        if inits_done && !pod_failed {
            for c in &app_specs {
                let name = c["name"].as_str().unwrap_or("");
                let mine = of(name);
                // A running container whose spec changed is restarted.
                if let Some(l) = mine.last() {
                    if l.state == State::Running && l.hash != spec_hash(c) {
                        let id = l.id.clone();
                        let message =
                            format!("Container {name} definition changed, will be restarted");
                        self.kill(pod, Some(c), &id, grace(pod), &message).await;
                        started_any |= self
                            .start_or_wait(pod, c, id.attempt + 1, &mut waiting)
                            .await;
                        continue;
                    }
                }
                match self.step(pod, c, &mine, false) {
                    Step::Keep => {}
                    Step::Start => {
                        let attempt = mine.last().map_or(0, |l| l.id.attempt + 1);
                        started_any |= self.start_or_wait(pod, c, attempt, &mut waiting).await;
                    }
                    Step::Wait(w, after) => {
                        let event = format!(
                            "Back-off restarting failed container {name} in pod {}",
                            Self::full_name(pod)
                        );
                        self.shared
                            .recorder
                            .event(pod, EventType::Warning, "BackOff", &event)
                            .await;
                        waiting.insert(name.to_string(), w);
                        wake = min(wake, after);
                    }
                }
            }
        }
        let mut instances = if started_any {
            self.instances()
        } else {
            instances
        };
        let mut probed = HashMap::new();
        if inits_done && !pod_failed {
            let (verdicts, next, killed) = self.probe(pod, &app_specs, &instances).await;
            probed = verdicts;
            wake = min(wake, next);
            if killed {
                instances = self.instances();
                // The next sync restarts what was killed (by policy, with back-off).
                wake = Some(Duration::ZERO);
            }
        }
        self.prune(&instances);
        let st = status::build(&Inputs {
            pod,
            instances: &instances,
            waiting: &waiting,
            node_ip: &self.shared.config.node_ip,
            terminating: pod_failed,
            probed: &probed,
        });
        if pod_failed {
            self.stop_all(pod).await;
        }
        self.write_status(pod, st).await;
        min(wake, deadline)
    }

    /// Why the pod's sandbox cannot be made on this node, if it cannot: its RuntimeClass
    /// is gone, or names a handler this node does not have.
    async fn sandbox_error(&mut self, pod: &Value) -> Option<String> {
        let class = str_at(pod, "/spec/runtimeClassName");
        let config = &self.shared.config;
        if class.is_empty() {
            self.handler = Some(config.runtime_handler.clone());
            return None;
        }
        if self.sandbox_ok {
            return None;
        }
        let classes = catalog::of(Kind::RuntimeClass);
        match self.shared.client.get(classes, None, class).await {
            Ok(rc) => {
                let handler = str_at(&rc, "/handler");
                self.sandbox_ok = handler == config.runtime_handler
                    || config.other_handlers.iter().any(|h| h == handler);
                if self.sandbox_ok {
                    self.handler = Some(handler.to_string());
                }
                (!self.sandbox_ok).then(|| format!("no runtime for {handler:?} is configured"))
            }
            Err(e) if e.is_not_found() => Some(format!("RuntimeClass {class:?} not found")),
            Err(e) => Some(format!("cannot read RuntimeClass {class:?}: {e}")),
        }
    }

    /// Forgets dead instances older than the two newest of each container (§5.5): the
    /// newest and the one before it are what the status and `logs --previous` show, so a
    /// crash-looping container does not fill the disk.
    fn prune(&self, instances: &[ContainerStatus]) {
        let mut names: Vec<&str> = instances.iter().map(|s| s.id.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let mine = status::instances_of(instances, name);
            let old = mine.len().saturating_sub(2);
            for s in &mine[..old] {
                if s.state == State::Exited {
                    if let Err(e) = self.shared.runtime.remove_container(&s.id) {
                        tracing::warn!(container = %s.id, error = %e, "could not remove a dead container");
                    }
                }
            }
        }
    }

    /// Sets up (or refreshes) the pod's volumes; when they fail, says so with a
    /// `FailedMount` event and returns when to try again.
    ///
    /// Set-up volumes are refreshed (ConfigMaps, Secrets and the downward API read again)
    /// when the pod changed or about once per resync period, not at every sync: probes
    /// and container events wake a worker far more often than that.
    async fn prepare_volumes(&mut self, pod: &Value) -> Option<Duration> {
        let generation = pod["metadata"]["generation"].as_i64().unwrap_or(0);
        let labels = (&pod["metadata"]["labels"], &pod["metadata"]["annotations"]);
        let fingerprint = spec_hash(&json!([generation, labels.0, labels.1]));
        let fresh = self.volumes.is_ok()
            && self.volumes_at.as_ref().is_some_and(|(at, seen)| {
                *seen == fingerprint && at.elapsed() < self.shared.config.resync_every.mul_f32(0.9)
            });
        if fresh {
            return None;
        }
        let dir = self.shared.runtime.volumes_dir(&self.uid);
        self.volumes = volume::prepare(&self.shared.client, &self.shared.config, pod, &dir).await;
        self.volumes_at = Some((tokio::time::Instant::now(), fingerprint));
        match &self.volumes {
            Ok(_) => {
                self.mount_retry = MOUNT_RETRY_FIRST;
                None
            }
            // A new pod of a new service account: the token follows in moments, and
            // is waited for quietly before it is worth a warning.
            Err(why) if why.token_pending && pod_age(pod) < TOKEN_GRACE => Some(TOKEN_RETRY),
            Err(why) => {
                self.shared
                    .recorder
                    .event(pod, EventType::Warning, "FailedMount", &why.message)
                    .await;
                let after = self.mount_retry;
                self.mount_retry = (after * 2).min(MOUNT_RETRY_MAX);
                Some(after)
            }
        }
    }

    /// How long until `activeDeadlineSeconds` (counted from the pod's start time) ends.
    fn deadline_left(&self, pod: &Value) -> Option<Duration> {
        let limit = pod.pointer("/spec/activeDeadlineSeconds")?.as_u64()?;
        // Before the first status is written, the pod starts now.
        let start: jiff::Timestamp = str_at(pod, "/status/startTime")
            .parse()
            .unwrap_or_else(|_| jiff::Timestamp::now());
        let ran =
            Duration::try_from(jiff::Timestamp::now().duration_since(start)).unwrap_or_default();
        Some(Duration::from_secs(limit).saturating_sub(ran))
    }

    /// Stops a pod that ran longer than its deadline and reports it Failed.
    async fn end_past_deadline(&mut self, pod: &Value) {
        const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";
        self.shared
            .recorder
            .event(pod, EventType::Normal, "DeadlineExceeded", MESSAGE)
            .await;
        self.stop_all(pod).await;
        let mut st = self.final_status(pod);
        st["phase"] = json!("Failed");
        st["reason"] = json!("DeadlineExceeded");
        st["message"] = json!(MESSAGE);
        self.write_status(pod, st).await;
    }

    /// Runs the probes that are due for running app containers; returns the verdicts
    /// (ready, started) per container, when the next probe is due, and whether a
    /// container was killed for failing one.
    async fn probe(
        &mut self,
        pod: &Value,
        app_specs: &[Value],
        instances: &[ContainerStatus],
    ) -> (HashMap<String, (bool, bool)>, Option<Duration>, bool) {
        let mut verdicts = HashMap::new();
        let mut next: Option<Duration> = None;
        let mut killed = false;
        let now = tokio::time::Instant::now();
        for c in app_specs {
            let name = c["name"].as_str().unwrap_or("").to_string();
            let Some(latest) = instances
                .iter()
                .filter(|s| s.id.name == name)
                .max_by_key(|s| s.id.attempt)
            else {
                continue;
            };
            if latest.state != State::Running {
                self.probes.retain(|(n, _), _| n != &name);
                continue;
            }
            let running_for = latest
                .started_at
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .and_then(|t| Duration::try_from(self.shared.runtime.now().duration_since(t)).ok())
                .unwrap_or_default();
            for kind in [
                ProbeKind::Startup,
                ProbeKind::Liveness,
                ProbeKind::Readiness,
            ] {
                let key = (name.clone(), kind);
                match c.get(kind.field()).filter(|p| p.is_object()) {
                    Some(spec) => {
                        let fresh = self
                            .probes
                            .get(&key)
                            .is_none_or(|(a, _)| *a != latest.id.attempt);
                        if fresh {
                            let tracker = Tracker::new(spec, running_for);
                            self.probes.insert(key, (latest.id.attempt, tracker));
                        }
                    }
                    None => {
                        self.probes.remove(&key);
                    }
                }
            }
            let verdict = |w: &Self, kind| {
                w.probes
                    .get(&(name.clone(), kind))
                    .map(|(_, t): &(u32, Tracker)| t.result)
            };
            let started = verdict(self, ProbeKind::Startup).is_none_or(|r| r == Some(true));
            let kinds: &[ProbeKind] = if started {
                &[ProbeKind::Liveness, ProbeKind::Readiness]
            } else {
                &[ProbeKind::Startup]
            };
            for kind in kinds {
                let key = (name.clone(), *kind);
                if self.probes.get(&key).is_none_or(|(_, t)| t.due > now) {
                    continue;
                }
                if !self.envs.contains_key(&name) {
                    // Adopted after a restart: resolve the environment again.
                    let env = self.env(pod, c).await.unwrap_or_default();
                    self.envs.insert(name.clone(), env);
                }
                let env = self.envs.get(&name).cloned().unwrap_or_default();
                let inside = crate::runtime::Inside {
                    pid: latest.pid,
                    prefix: self.shared.runtime.exec_prefix(&latest.id),
                };
                let ran = probe::run(
                    &c[kind.field()],
                    c,
                    &env,
                    &inside,
                    &self.shared.config.node_ip,
                )
                .await;
                if let Err(why) = &ran {
                    let message = format!("{} probe failed: {why}", kind.title());
                    self.shared
                        .recorder
                        .event(pod, EventType::Warning, "Unhealthy", &message)
                        .await;
                }
                let Some((_, tracker)) = self.probes.get_mut(&key) else {
                    continue;
                };
                let fatal = tracker.record(ran.is_ok()) == Outcome::Became(false)
                    && matches!(kind, ProbeKind::Liveness | ProbeKind::Startup);
                if fatal {
                    let what = if *kind == ProbeKind::Liveness {
                        "liveness"
                    } else {
                        "startup"
                    };
                    let restart = match str_at(pod, "/spec/restartPolicy") {
                        "Never" => "",
                        _ => ", will be restarted",
                    };
                    let message = format!("Container {name} failed {what} probe{restart}");
                    // A probe's own terminationGracePeriodSeconds wins over the pod's.
                    let grace = c[kind.field()]["terminationGracePeriodSeconds"]
                        .as_u64()
                        .map_or_else(|| grace(pod), Duration::from_secs);
                    self.kill(pod, Some(c), &latest.id, grace, &message).await;
                    self.probes.retain(|(n, _), _| n != &name);
                    killed = true;
                    break;
                }
            }
            let started = verdict(self, ProbeKind::Startup).is_none_or(|r| r == Some(true));
            let ready =
                started && verdict(self, ProbeKind::Readiness).is_none_or(|r| r == Some(true));
            verdicts.insert(name.clone(), (ready, started));
            for ((n, _), (_, t)) in &self.probes {
                if n == &name {
                    let wait = t.due.saturating_duration_since(tokio::time::Instant::now());
                    next = min(next, Some(wait));
                }
            }
        }
        (verdicts, next, killed)
    }

    async fn stop_all(&self, pod: &Value) {
        let instances = self.instances();
        let running: Vec<ContainerId> = instances
            .iter()
            .filter(|s| matches!(s.state, State::Running | State::Created))
            .map(|s| s.id.clone())
            .collect();
        let grace = grace(pod);
        let specs: Vec<&Value> = ["initContainers", "containers"]
            .iter()
            .flat_map(|k| pod["spec"][k].as_array().into_iter().flatten())
            .collect();
        let stops = running.iter().map(|id| {
            let c = specs
                .iter()
                .copied()
                .find(|c| c["name"] == id.name.as_str());
            let message = format!("Stopping container {}", id.name);
            async move { self.kill(pod, c, id, grace, &message).await }
        });
        futures_util::future::join_all(stops).await;
    }

    /// Kills one running container (§14.2): event `Killing` with `message`, the preStop
    /// hook within the grace period, then SIGTERM and, when the rest of the grace period
    /// (at least 2 s) has passed, SIGKILL.
    async fn kill(
        &self,
        pod: &Value,
        c: Option<&Value>,
        id: &ContainerId,
        grace: Duration,
        message: &str,
    ) {
        self.shared
            .recorder
            .event(pod, EventType::Normal, "Killing", message)
            .await;
        let began = self.shared.runtime.now();
        let hook = c.and_then(|c| c.pointer("/lifecycle/preStop").map(|h| (c, h)));
        if let (Some((c, hook)), false) = (hook, grace.is_zero()) {
            let env = match self.envs.get(&id.name) {
                Some(env) => env.clone(),
                None => self.env(pod, c).await.unwrap_or_default(),
            };
            let ran = tokio::time::timeout(
                grace,
                probe::act(hook, c, &env, &self.inside(id), &self.shared.config.node_ip),
            )
            .await
            .unwrap_or_else(|_| Err(format!("did not finish within {}s", grace.as_secs())));
            if let Err(why) = ran {
                let message = format!(
                    "PreStopHook failed: {} lifecycle hook for container {:?} in pod {:?} failed: {why}",
                    hook_kind(hook),
                    id.name,
                    Self::full_name(pod)
                );
                self.shared
                    .recorder
                    .event(pod, EventType::Warning, "FailedPreStopHook", &message)
                    .await;
            }
        }
        let spent =
            Duration::try_from(self.shared.runtime.now().duration_since(began)).unwrap_or_default();
        let left = grace.saturating_sub(spent).max(MIN_GRACE);
        if let Err(e) = self.shared.runtime.stop(id, left).await {
            tracing::warn!(container = %id, error = %e, "could not stop a container");
        }
    }

    /// Stops the pod's containers; once nothing runs, its records go and, for a pod
    /// still in the API (graceful deletion), its object is removed.
    /// `pod` is the pod as last seen; `in_api` says whether its object is still there
    /// (graceful deletion) or already gone (force deletion, or berth was down).
    ///
    /// Returns false when something still runs or the object could not be removed: the
    /// worker tries again after `retry_after`, and nothing is reported finished meanwhile.
    async fn terminate(&mut self, pod: Option<&Value>, in_api: bool) -> bool {
        let fallback = json!({"spec": {"terminationGracePeriodSeconds": 30}});
        let p = pod.unwrap_or(&fallback);
        self.stop_all(p).await;
        let still = self
            .instances()
            .into_iter()
            .find(|s| matches!(s.state, State::Running | State::Created));
        if let Some(s) = still {
            tracing::warn!(container = %s.id, "a container of a deleted pod is still running; trying again");
            return false;
        }
        // Its containers stopped, the pod's sandbox goes too (as the kubelet stops it).
        self.shared.runtime.stop_sandbox(&self.uid);
        if let (Some(pod), true) = (pod, in_api) {
            let st = self.final_status(pod);
            self.write_status(pod, st).await;
            let params = crate::client::DeleteParams {
                uid: Some(self.uid.clone()),
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            let ns = str_at(pod, "/metadata/namespace");
            let name = str_at(pod, "/metadata/name");
            match self
                .shared
                .client
                .delete(catalog::of(Kind::Pod), Some(ns), name, &params)
                .await
            {
                // Gone, or the name now belongs to another pod (the uid precondition).
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => {
                    tracing::warn!(pod = %Self::full_name(pod), error = %e, "could not remove a finished pod");
                    return false;
                }
            }
        }
        if let Err(e) = self.shared.runtime.remove_pod(&self.uid) {
            tracing::warn!(pod = %self.uid, error = %e, "could not remove a pod's records");
        }
        true
    }

    /// Writes the status unless the API already shows it.
    ///
    /// The agent is the source of truth: a status someone else changed in the API is
    /// written back at the next sync (which that change itself triggers). One the API
    /// already shows is not sent again.
    /// Pulls `image` when its policy says so (`Always`; `IfNotPresent` and it is not in
    /// the store), with the events the kubelet writes; the waiting reason when it fails.
    async fn pull(&self, pod: &Value, image: &str, policy: &str) -> Result<(), Waiting> {
        let Ok(name) = crate::image::reference::normalize(image) else {
            // Said by the resolution, as InvalidImageName.
            return Ok(());
        };
        let present = self.shared.puller.store().image(&name).is_some();
        let pull = match policy {
            "Never" => false,
            "Always" => true,
            _ => !present,
        };
        let recorder = &self.shared.recorder;
        if !pull {
            if present {
                let message = format!("Container image {image:?} already present on machine");
                recorder
                    .event(pod, EventType::Normal, "Pulled", &message)
                    .await;
            }
            return Ok(());
        }
        let message = format!("Pulling image {image:?}");
        recorder
            .event(pod, EventType::Normal, "Pulling", &message)
            .await;
        let credentials = self.pull_credentials(pod).await;
        let began = std::time::Instant::now();
        match self.shared.puller.pull(image, credentials, None).await {
            Ok(p) => {
                // As the kubelet: the pull's own time, then the time with the wait for
                // a pull of the same image under way.
                let message = format!(
                    "Successfully pulled image {image:?} in {:.3}s ({:.3}s including waiting). Image size: {} bytes.",
                    p.took.as_secs_f64(),
                    began.elapsed().as_secs_f64(),
                    p.image.size()
                );
                recorder
                    .event(pod, EventType::Normal, "Pulled", &message)
                    .await;
                Ok(())
            }
            Err(e) => Err(Waiting {
                reason: "ErrImagePull".into(),
                message: format!("Failed to pull image {image:?}: {e}"),
            }),
        }
    }

    /// The registry credentials of the pod's `imagePullSecrets`, or of its service
    /// account's when it names none (as the ServiceAccount admission gives them).
    async fn pull_credentials(&self, pod: &Value) -> Vec<crate::image::pull::Credential> {
        let ns = str_at(pod, "/metadata/namespace");
        let names = |v: &Value| -> Vec<String> {
            v["imagePullSecrets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["name"].as_str().map(str::to_string))
                .collect()
        };
        let mut secrets = names(&pod["spec"]);
        if secrets.is_empty() {
            let account = pod["spec"]["serviceAccountName"]
                .as_str()
                .unwrap_or("default");
            if let Ok(sa) = self
                .shared
                .client
                .get(catalog::of(Kind::ServiceAccount), Some(ns), account)
                .await
            {
                secrets = names(&sa);
            }
        }
        let mut out = Vec::new();
        for name in secrets {
            let secret = match self
                .shared
                .client
                .get(catalog::of(Kind::Secret), Some(ns), &name)
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    // As the kubelet: the pull goes on without them.
                    tracing::warn!(pod = %str_at(pod, "/metadata/name"), secret = %name, error = %e, "cannot read an image pull secret");
                    continue;
                }
            };
            use base64::Engine;
            let data: std::collections::BTreeMap<String, Vec<u8>> = secret["data"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(v.as_str()?)
                        .ok()?;
                    Some((k.clone(), bytes))
                })
                .collect();
            match crate::image::pull::credentials_of_secret(str_at(&secret, "/type"), &data) {
                Ok(c) => out.extend(c),
                Err(e) => {
                    tracing::warn!(secret = %name, error = %e, "an image pull secret holds no credentials");
                }
            }
        }
        out
    }

    /// A finished pod's sandbox goes as soon as nothing runs in it, as the kubelet stops
    /// it, not when the pod is deleted.
    fn end_finished_sandbox(&self) {
        let running = self
            .instances()
            .into_iter()
            .any(|s| matches!(s.state, State::Running | State::Created));
        if !running {
            self.shared.runtime.stop_sandbox(&self.uid);
        }
    }

    async fn write_status(&mut self, pod: &Value, mut st: Value) {
        if matches!(st["phase"].as_str(), Some("Succeeded" | "Failed")) {
            self.end_finished_sandbox();
        }
        self.reported = Some(st.clone());
        if pod.get("status").is_some_and(|api| covers(api, &st)) {
            return;
        }
        // A static pod's status goes to its mirror pod, once there is a current one.
        let target = if super::manifests::is_static(pod) {
            if !self.shared.pods.has_current_mirror(pod) {
                return;
            }
            match self.shared.pods.mirror_of(pod) {
                Some(m) => str_at(&m, "/metadata/uid").to_string(),
                None => return,
            }
        } else {
            self.uid.clone()
        };
        let ns = str_at(pod, "/metadata/namespace");
        let name = str_at(pod, "/metadata/name");
        let patch = status_patch(&target, st.take());
        match self
            .shared
            .client
            .patch_status(
                catalog::of(Kind::Pod),
                Some(ns),
                name,
                &Patch::Strategic(patch.clone()),
            )
            .await
        {
            Ok(_) => {}
            // Gone, or the name now belongs to another pod: nothing to report to.
            Err(e) if e.is_not_found() || self.replaced(&e) => {}
            Err(e) => {
                // Left unwritten: the retry sync sends it again.
                tracing::warn!(pod = %Self::full_name(pod), error = %e, "could not write the pod status");
                self.retry = true;
            }
        }
    }
}

impl<R: Runtime + Clone> Worker<R> {
    /// Every instance the runtime holds for the pod (none when it cannot say).
    fn instances(&self) -> Vec<ContainerStatus> {
        self.shared
            .runtime
            .pod_status(&self.uid)
            .unwrap_or_default()
    }

    /// The status of a pod whose containers the agent has stopped.
    fn final_status(&self, pod: &Value) -> Value {
        status::build(&Inputs {
            pod,
            instances: &self.instances(),
            waiting: &HashMap::new(),
            node_ip: &self.shared.config.node_ip,
            terminating: true,
            probed: &HashMap::new(),
        })
    }

    /// The process of a running instance (hooks run in its mount namespace).
    /// Where a command for the instance `id` runs.
    fn inside(&self, id: &ContainerId) -> crate::runtime::Inside {
        crate::runtime::Inside {
            pid: self.pid_of(id),
            prefix: self.shared.runtime.exec_prefix(id),
        }
    }

    fn pid_of(&self, id: &ContainerId) -> Option<i32> {
        self.shared
            .runtime
            .pod_status(&id.pod_uid)
            .ok()?
            .into_iter()
            .find(|s| &s.id == id && s.state == State::Running)?
            .pid
    }

    /// Whether a write failed because the pod's name now belongs to another pod.
    fn replaced(&self, e: &crate::client::Error) -> bool {
        e.is_conflict() && e.to_string().contains("UID in precondition")
    }

    /// Writes the last computed status over a status someone else changed.
    async fn reconcile(&mut self, pod: &Value) {
        if let Some(st) = self.reported.clone() {
            self.write_status(pod, st).await;
        }
    }
}

/// Whether two versions of a pod differ in their status (and resource version) only.
fn same_but_status(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("status");
        }
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        v
    };
    strip(a) == strip(b)
}

/// The strategic merge patch that writes status `st` of the pod with uid `uid`: fields of
/// the API status the agent does not own stay, the rest are replaced. Of the conditions
/// only the agent's go, merged by type with every field named (null for one a condition
/// has not): another writer's (the DisruptionTarget of an eviction) stays, however old
/// the agent's copy of the pod. The uid makes the write fail on a pod re-created under
/// the same name.
fn status_patch(uid: &str, mut st: Value) -> Value {
    if let Some(cs) = st.get_mut("conditions").and_then(Value::as_array_mut) {
        cs.retain(status::owns_condition);
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            for field in ["reason", "message", "lastProbeTime", "lastTransitionTime"] {
                c.entry(field).or_insert(Value::Null);
            }
        }
    }
    json!({"metadata": {"uid": uid}, "status": st})
}

/// Whether `api` already holds every field of `ours` with the same value (fields only
/// `api` has are someone else's and do not matter).
fn covers(api: &Value, ours: &Value) -> bool {
    match (api, ours) {
        (Value::Object(a), Value::Object(o)) => o
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|av| covers(av, v)) || v.is_null()),
        (a, o) => a == o,
    }
}

fn min(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// What a hook's handler does, as its failure message names it.
fn hook_kind(hook: &Value) -> &'static str {
    if hook.get("exec").is_some() {
        "Exec"
    } else if hook.get("httpGet").is_some() {
        "HTTP"
    } else if hook.get("sleep").is_some() {
        "Sleep"
    } else {
        "Unknown"
    }
}

/// The grace period of a pod's containers (the kill floors it at [`MIN_GRACE`]).
fn grace(pod: &Value) -> Duration {
    let secs = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(30)
        .max(0);
    Duration::from_secs(secs as u64)
}

/// The string values of a ConfigMap's or Secret's data.
fn data(obj: &Value, kind: Kind) -> Vec<(String, String)> {
    use base64::Engine;
    let Some(m) = obj["data"].as_object() else {
        return Vec::new();
    };
    m.iter()
        .filter_map(|(k, v)| {
            let s = v.as_str()?;
            let value = if kind == Kind::Secret {
                let raw = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
                String::from_utf8(raw).ok()?
            } else {
                s.to_string()
            };
            Some((k.clone(), value))
        })
        .collect()
}

/// `$(VAR)` references to variables defined before; `$$` escapes.
pub(super) fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(') {
            match tail.find(')') {
                Some(end) => {
                    let name = &tail[..end];
                    match env.iter().rev().find(|(k, _)| k == name) {
                        Some((_, v)) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &tail[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = tail;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A downward-API field of the pod.
pub(super) fn field_value(pod: &Value, path: &str, node_ip: &str) -> String {
    if let Some(label) = path
        .strip_prefix("metadata.labels['")
        .and_then(|p| p.strip_suffix("']"))
    {
        return str_at(
            pod,
            &format!("/metadata/labels/{}", label.replace('/', "~1")),
        )
        .into();
    }
    if let Some(a) = path
        .strip_prefix("metadata.annotations['")
        .and_then(|p| p.strip_suffix("']"))
    {
        return str_at(
            pod,
            &format!("/metadata/annotations/{}", a.replace('/', "~1")),
        )
        .into();
    }
    match path {
        "metadata.name" => str_at(pod, "/metadata/name").into(),
        "metadata.namespace" => str_at(pod, "/metadata/namespace").into(),
        "metadata.uid" => str_at(pod, "/metadata/uid").into(),
        "spec.nodeName" => str_at(pod, "/spec/nodeName").into(),
        "spec.serviceAccountName" => str_at(pod, "/spec/serviceAccountName").into(),
        "status.hostIP" | "status.podIP" => node_ip.into(),
        _ => String::new(),
    }
}

/// Whether the container image `image` is the built-in one `builtin`: the same
/// repository once both are normalized (`pause:3.10` is `registry.k8s.io/pause:3.10`
/// only if written so; `docker.io/library/x` is `x`), with the same tag unless `builtin`
/// names none (then any tag or digest of it).
pub(super) fn builtin_matches(builtin: &str, image: &str) -> bool {
    use crate::image::reference::parse;
    match (parse(builtin), parse(image)) {
        (Ok(b), Ok(i)) => {
            b.registry == i.registry
                && b.repository == i.repository
                && (b.tag.is_none() && b.digest.is_none() || b.tag == i.tag && i.digest.is_none())
        }
        _ => builtin == image,
    }
}

/// Runs one pod's worker until the pod is gone and its containers stopped; returns the
/// pod's uid. A panic ends the worker, not the agent.
pub(super) async fn run<R: Runtime + Clone>(
    shared: Arc<Shared<R>>,
    uid: String,
    mut desired: watch::Receiver<Option<Arc<Value>>>,
    wake: Arc<Notify>,
    rejected: Option<Rejection>,
) -> String {
    let resync = shared.config.resync_every;
    let shared_retry = shared.config.retry_after;
    let mut worker = Worker {
        shared,
        uid: uid.clone(),
        backoff: HashMap::new(),
        probes: HashMap::new(),
        envs: HashMap::new(),
        retry: false,
        reported: None,
        volumes: Ok(volume::Prepared::default()),
        mount_retry: MOUNT_RETRY_FIRST,
        volumes_at: None,
        told_unenforced: false,
        rejected,
        told_rejected: false,
        sandbox_ok: false,
        handler: None,
        pull_backoff: HashMap::new(),
    };
    let retry = shared_retry;
    let clock = worker.shared.clone();
    let body = async move {
        // The pod as last seen: its grace period still applies once it is gone.
        let mut last: Option<Arc<Value>> = None;
        loop {
            // A static pod is synced against what its mirror pod shows.
            let pod = desired
                .borrow_and_update()
                .clone()
                .map(|p| worker.shared.pods.with_mirror_status(p));
            worker.retry = false;
            let began = clock.runtime.now();
            let after = match &pod {
                None => {
                    if worker.terminate(last.as_deref(), false).await {
                        return;
                    }
                    retry
                }
                Some(p) if p.pointer("/metadata/deletionTimestamp").is_some() => {
                    if worker.terminate(Some(p), true).await {
                        return;
                    }
                    retry
                }
                Some(p) => {
                    let after = worker.sync(p).await.unwrap_or(resync).min(resync);
                    if worker.retry {
                        after.min(retry)
                    } else {
                        after
                    }
                }
            };
            if pod.is_some() {
                last = pod;
            }
            // Timers count from when the sync decided, not from when it finished writing.
            let spent =
                Duration::try_from(clock.runtime.now().duration_since(began)).unwrap_or_default();
            let sleep = clock.runtime.sleep(after.saturating_sub(spent));
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    changed = desired.changed() => {
                        if changed.is_err() {
                            // The agent is going away: leave the containers running.
                            return;
                        }
                        // A change of the status alone (the agent's own write, or someone
                        // else's) needs no sync: a foreign one is only written over.
                        let now = desired
                            .borrow_and_update()
                            .clone()
                            .map(|p| worker.shared.pods.with_mirror_status(p));
                        match (&last, &now) {
                            (Some(old), Some(new)) if same_but_status(old, new) => {
                                worker.reconcile(new).await;
                                last = Some(new.clone());
                            }
                            _ => break,
                        }
                    }
                    () = wake.notified() => break,
                    () = &mut sleep => break,
                }
            }
        }
    };
    if let Err(panic) = std::panic::AssertUnwindSafe(body).catch_unwind().await {
        tracing::error!(pod = %uid, panic = ?panic.downcast_ref::<&str>(), "a pod worker panicked");
    }
    uid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_patch_writes_only_the_agents_conditions_and_all_their_fields() {
        let st = json!({"phase": "Failed", "conditions": [
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": "t"},
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
        ]});
        let patch = status_patch("u1", st);
        assert_eq!(patch["metadata"]["uid"], "u1");
        assert_eq!(
            patch["status"]["conditions"],
            json!([{"type": "Ready", "status": "False", "reason": "PodFailed",
                    "lastTransitionTime": "t", "message": null, "lastProbeTime": null}])
        );
    }

    #[test]
    fn a_status_is_covered_when_the_api_holds_all_of_it() {
        let ours = json!({"phase": "Running", "containerStatuses": [{"ready": true}], "x": null});
        let api = json!({"phase": "Running", "containerStatuses": [{"ready": true}], "other": 1});
        assert!(covers(&api, &ours));
        let edited = json!({"phase": "Pending", "containerStatuses": [{"ready": true}]});
        assert!(!covers(&edited, &ours));
    }

    #[test]
    fn variables_expand_from_earlier_ones() {
        let env = vec![("A".to_string(), "x".to_string())];
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &env), "x-$(B)-$(A)-$");
    }

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }

    #[test]
    fn field_references() {
        let pod = json!({"metadata": {"name": "p", "namespace": "n", "labels": {"app.io/x": "y"}},
                         "spec": {"nodeName": "node"}});
        assert_eq!(field_value(&pod, "metadata.name", "1.2.3.4"), "p");
        assert_eq!(field_value(&pod, "metadata.labels['app.io/x']", ""), "y");
        assert_eq!(field_value(&pod, "status.podIP", "1.2.3.4"), "1.2.3.4");
        assert_eq!(field_value(&pod, "spec.nodeName", ""), "node");
    }

    #[test]
    fn resources_are_read_in_kernel_units() {
        let c = json!({"resources": {"limits": {"memory": "32Mi", "cpu": "1500m"},
                                     "requests": {"cpu": "0.25", "memory": "1Gi"}}});
        assert_eq!(
            resources(&c),
            Resources {
                memory_limit_bytes: Some(32 << 20),
                cpu_limit_millis: Some(1500),
                cpu_request_millis: Some(250),
            }
        );
        assert_eq!(resources(&json!({})), Resources::default());
        assert!(!resources(&json!({"resources": {"limits": {"memory": "lots"}}})).any_limit());
        assert!(
            !resources(&json!({"resources": {"limits": {"memory": "0", "cpu": "0"}}})).any_limit()
        );
    }

    #[test]
    fn a_pod_is_limited_only_when_every_container_is() {
        let c = |limits: Value, requests: Value| json!({"name": "c", "resources": {"limits": limits, "requests": requests}});
        let pod = json!({"spec": {
            "containers": [c(json!({"memory": "64Mi", "cpu": "1"}), json!({"cpu": "100m"})),
                           c(json!({"memory": "32Mi"}), json!({}))],
            "initContainers": [c(json!({"memory": "128Mi", "cpu": "2"}), json!({}))],
        }});
        assert_eq!(
            pod_resources(&pod),
            Resources {
                memory_limit_bytes: Some(128 << 20),
                cpu_limit_millis: None,
                cpu_request_millis: Some(2000),
            },
            "the init container needs the most memory; one app container has no cpu limit"
        );
        let apps = json!({"spec": {"containers": [
            c(json!({"memory": "64Mi"}), json!({})), c(json!({"memory": "32Mi"}), json!({}))
        ]}});
        assert_eq!(pod_resources(&apps).memory_limit_bytes, Some(96 << 20));
        assert_eq!(pod_resources(&apps).cpu_request_millis, None);
    }

    #[test]
    fn a_changed_container_has_another_hash() {
        let a = json!({"name": "c", "image": "x:1"});
        let b = json!({"name": "c", "image": "x:2"});
        assert_ne!(spec_hash(&a), spec_hash(&b));
        assert_eq!(spec_hash(&a), spec_hash(&a.clone()));
    }

    #[test]
    fn built_in_images_match_by_repository_and_any_tag_unless_one_is_named() {
        let pause = "registry.k8s.io/pause";
        assert!(builtin_matches(pause, "registry.k8s.io/pause:3.10"));
        assert!(builtin_matches(pause, "registry.k8s.io/pause"));
        assert!(builtin_matches(
            pause,
            &format!("registry.k8s.io/pause@sha256:{}", "a".repeat(64))
        ));
        assert!(
            !builtin_matches(pause, "pause:3.10"),
            "docker.io's is another"
        );
        assert!(!builtin_matches(pause, "registry.k8s.io/pause-extra:1"));
        assert!(builtin_matches(
            "berth/deployer",
            "docker.io/berth/deployer:latest"
        ));
        assert!(builtin_matches("x:1", "docker.io/library/x:1"));
        assert!(!builtin_matches("x:1", "x:2"));
        assert!(!builtin_matches("x:1", "x"));
    }
}
