//! One pod's worker: syncs what runs with what the pod asks for (init containers in order,
//! then the app containers; restarts by policy with the CrashLoopBackOff back-off; a
//! changed container is restarted), reports the status when it changed, and stops
//! everything (SIGTERM, then SIGKILL after the grace period) when the pod goes.

mod probes;
mod pull;
mod report;
mod spec;
mod stop;

use crate::types::json::str_at;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use self::pull::builtin_matches;
use self::spec::{pod_resources, resources, sandbox, security, spec_hash};
use super::Shared;
use super::admission::Rejection;
use super::env::{self, expand};
use super::probe::{self, Kind as ProbeKind, Tracker};
use super::status::{self, Inputs, Waiting};
use super::volume;
use crate::client::{Kind, catalog};
use crate::runtime::{ContainerId, ContainerSpec, ContainerStatus, Runtime, State};

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
    /// The sandbox (the pid holding its namespaces) wired to the pod network.
    wired: Option<i32>,
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
        env::resolve(&self.shared.client, &self.shared.config, pod, c).await
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
        let sandbox = self.pod_sandbox(pod, rootfs.is_some());
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
            sandbox: sandbox.clone(),
            etc: sandbox.filter(|s| s.network).map(|_| self.etc_files(pod)),
            rootfs,
        };
        if spec.resources.any_limit()
            && !self.told_unenforced
            && let Some(why) = self.shared.runtime.limits_unenforced()
        {
            self.told_unenforced = true;
            let message = format!("Resource limits are not enforced on this node: {why}");
            self.shared
                .recorder
                .warning(pod, "LimitsNotEnforced", &message)
                .await;
        }
        self.envs.insert(name.to_string(), env.clone());
        match self.shared.runtime.start(&spec).await {
            Ok(id) => {
                let rec = &self.shared.recorder;
                rec.normal(pod, "Created", &format!("Created container {name}"))
                    .await;
                rec.normal(pod, "Started", &format!("Started container {name}"))
                    .await;
                if let Some(hook) = c.pointer("/lifecycle/postStart") {
                    let ran = tokio::time::timeout(
                        POST_START_LIMIT,
                        probe::act(hook, c, &env, &self.inside(&id), &self.pod_ip(pod)),
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
                        rec.warning(pod, "FailedPostStartHook", &message).await;
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
                                .warning(pod, "Failed", &w.message)
                                .await;
                            format!("Error: {}", w.reason)
                        }
                        _ => format!("Error: {}", w.message),
                    };
                    self.shared.recorder.warning(pod, "Failed", &message).await;
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
                    .warning(pod, &r.reason, &r.message)
                    .await;
            }
            self.write_status(pod, r.status()).await;
            return None;
        }
        // A finished pod never runs again.
        if matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed") {
            self.stop_all(pod).await;
            self.end_finished_sandbox().await;
            return None;
        }
        let deadline = self.deadline_left(pod);
        if deadline == Some(Duration::ZERO) {
            self.end_past_deadline(pod).await;
            return None;
        }
        let mut failed = self.sandbox_error(pod).await;
        if failed.is_none() {
            failed = self.network_error(pod).await;
        }
        if let Some(why) = failed {
            // As the kubelet when the pod's runtime handler is not there: the containers
            // wait in ContainerCreating and the sandbox is tried again.
            let message = format!("Failed to create pod sandbox: {why}");
            self.shared
                .recorder
                .warning(pod, "FailedCreatePodSandBox", &message)
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
                pod_ips: &self.pod_ips(pod),
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
                if let Some(l) = mine.last()
                    && l.state == State::Running
                    && l.hash != spec_hash(c)
                {
                    let id = l.id.clone();
                    let message = format!("Container {name} definition changed, will be restarted");
                    self.kill(pod, Some(c), &id, grace(pod), &message).await;
                    started_any |= self
                        .start_or_wait(pod, c, id.attempt + 1, &mut waiting)
                        .await;
                    continue;
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
                        self.shared.recorder.warning(pod, "BackOff", &event).await;
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
            pod_ips: &self.pod_ips(pod),
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

    /// The sandbox a container of the pod joins: always for a container of an image; for
    /// a command on this machine, when the pod has a network of its own (then only its
    /// network and host name are the pod's).
    fn pod_sandbox(&self, pod: &Value, image: bool) -> Option<crate::runtime::oci::Sandbox> {
        let full = sandbox(pod, self.shared.config.network.is_some());
        if image || self.handler.as_deref() == Some(super::OCI_HANDLER) {
            return Some(full);
        }
        let network = full.network;
        let own = crate::runtime::oci::Sandbox {
            host_ipc: true,
            host_pid: true,
            share_pids: false,
            ..full
        };
        network.then_some(own)
    }

    /// Why the pod's network could not be made, if it could not: its sandbox is made
    /// (unless it runs) and wired to the node's pod network, once per sandbox.
    async fn network_error(&mut self, pod: &Value) -> Option<String> {
        let network = self.shared.config.network.clone()?;
        let sandbox = self.pod_sandbox(pod, false).filter(|s| s.network)?;
        let pod_sandbox = crate::runtime::PodSandbox {
            pod_uid: self.uid.clone(),
            pod_name: str_at(pod, "/metadata/name").into(),
            pod_namespace: str_at(pod, "/metadata/namespace").into(),
            sandbox,
        };
        let holder = match self.shared.runtime.sandbox(&pod_sandbox).await {
            Ok(pid) => pid,
            Err(e) => return Some(e.to_string()),
        };
        if self.wired == Some(holder) {
            return None;
        }
        match network.attach(&self.uid, holder).await {
            Ok(ips) => {
                tracing::debug!(pod = %Self::full_name(pod), ?ips, "pod network wired");
                self.wired = Some(holder);
                None
            }
            Err(e) => Some(format!("set up the pod's network: {e}")),
        }
    }

    /// The `/etc` files of a pod with a network of its own.
    fn etc_files(&self, pod: &Value) -> crate::runtime::EtcFiles {
        let net = self
            .shared
            .config
            .network
            .as_ref()
            .map(|n| n.config().clone())
            .unwrap_or_default();
        let host = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        let dns = crate::net::dns::resolv_conf(
            pod,
            &crate::net::dns::ResolvConf::parse(&host),
            &crate::net::dns::ClusterDns::from(&net),
        );
        crate::runtime::EtcFiles {
            hosts: super::etc::hosts(pod, &self.pod_ips(pod), &net.cluster_domain),
            resolv_conf: dns,
        }
    }

    /// The pod's address: its own on the pod network (none until it is made), else the
    /// node's.
    fn pod_ip(&self, pod: &Value) -> String {
        let config = &self.shared.config;
        if let Some(ip) = config.pod_address(&self.uid) {
            return ip.to_string();
        }
        match self.pod_sandbox(pod, false) {
            Some(s) if s.network => String::new(),
            _ => config.node_ip.clone(),
        }
    }

    /// The pod's addresses, the primary (IPv4) one first: its own on the pod network
    /// (none until they are made), else the node's.
    fn pod_ips(&self, pod: &Value) -> Vec<String> {
        let own = self.shared.config.pod_addresses(&self.uid);
        if !own.is_empty() {
            return own.iter().map(ToString::to_string).collect();
        }
        let ip = self.pod_ip(pod);
        if ip.is_empty() { Vec::new() } else { vec![ip] }
    }

    /// Removes what the pod had of the node's network (its veth and its address).
    async fn unwire(&mut self) {
        self.wired = None;
        if let Some(network) = &self.shared.config.network
            && let Err(e) = network.detach(&self.uid).await
        {
            tracing::warn!(pod = %self.uid, error = %e, "could not remove a pod's network");
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
                if s.state == State::Exited
                    && let Err(e) = self.shared.runtime.remove_container(&s.id)
                {
                    tracing::warn!(container = %s.id, error = %e, "could not remove a dead container");
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
        self.volumes = volume::prepare(
            &self.shared.client,
            &self.shared.config,
            &self.shared.tokens,
            pod,
            &dir,
        )
        .await;
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
                    .warning(pod, "FailedMount", &why.message)
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
            .normal(pod, "DeadlineExceeded", MESSAGE)
            .await;
        self.stop_all(pod).await;
        let mut st = self.final_status(pod);
        st["phase"] = json!("Failed");
        st["reason"] = json!("DeadlineExceeded");
        st["message"] = json!(MESSAGE);
        self.write_status(pod, st).await;
    }

    /// A finished pod's sandbox goes as soon as nothing runs in it, as the kubelet stops
    /// it, not when the pod is deleted.
    async fn end_finished_sandbox(&mut self) {
        let running = self
            .instances()
            .into_iter()
            .any(|s| matches!(s.state, State::Running | State::Created));
        if !running {
            self.shared.runtime.stop_sandbox(&self.uid);
            self.unwire().await;
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
            pod_ips: &self.pod_ips(pod),
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
        wired: None,
        handler: None,
        pull_backoff: HashMap::new(),
    };
    let retry = shared_retry;
    let clock = worker.shared.clone();
    let after_worker = worker.shared.clone();
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
    after_worker.tokens.forget(&uid);
    uid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }
}
