//! The deployer process (`berth deploy`, also `openshift-deploy`): carries out one
//! deployment (RC) of a DeploymentConfig with the Recreate or Rolling strategy, running its
//! lifecycle hooks, and prints the rollout's progress on stdout.
//!
//! It works from the deployment RC alone: the RC's annotations carry the encoded DC, and
//! the other deployments of the same DC are found by label. Every wait is a watch bounded
//! by the strategy's timeouts; nothing sleeps to find out whether something happened.

mod hooks;
mod recreate;
mod rolling;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::client::recorder::Recorder;
use crate::client::watcher::{Event as WatchEvent, Watcher};
use crate::client::{Client, ListParams, Patch};
use crate::client::{Kind, Resource, catalog};
use crate::types::openshift::{self as os, DeploymentConfig};

/// How long the deployer keeps connecting to an API server that refuses connections.
pub const RECONNECT_BUDGET: Duration = Duration::from_secs(120);

/// Where the deployer stops early (`--until`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    Start,
    Pre,
    Mid,
    /// `N%`, 0 ≤ N ≤ 100.
    Percent(u32),
}

impl Until {
    /// The condition named by `s`; `None` for anything unrecognised (which is ignored).
    pub fn parse(s: &str) -> Option<Until> {
        match s {
            "start" => Some(Until::Start),
            "pre" => Some(Until::Pre),
            "mid" => Some(Until::Mid),
            _ => s
                .strip_suffix('%')
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| *n <= 100)
                .map(Until::Percent),
        }
    }

    fn percent(self) -> Option<u32> {
        match self {
            Until::Percent(n) => Some(n),
            _ => None,
        }
    }
}

/// What the deployer needs to run.
pub struct Options {
    pub server: String,
    pub ca_pem: String,
    pub token: String,
    pub namespace: String,
    pub deployment: String,
    pub until: Option<Until>,
}

/// Why the deployer stopped before a rollout's end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Where `--until` asked; the text is printed after `--> `.
    #[error("{0}")]
    Halt(String),
    /// The rollout failed: what went wrong, with its causes (`scale web-2: …`).
    #[error("{0}")]
    Failed(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::client::Error> for Error {
    fn from(e: crate::client::Error) -> Self {
        Error::Failed(chain(&e))
    }
}

/// An error with every source below it, joined by `: `.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// [`Error::Failed`] with a formatted message.
macro_rules! fail {
    ($($arg:tt)*) => {
        $crate::deploy::Error::Failed(format!($($arg)*))
    };
}
pub(crate) use fail;

/// Returns [`fail!`] from the function.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::deploy::fail!($($arg)*))
    };
}

/// Context for a failure, as a prefix of its message.
trait Context<T> {
    fn with_context<C: std::fmt::Display>(self, what: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: std::error::Error> Context<T> for std::result::Result<T, E> {
    fn with_context<C: std::fmt::Display>(self, what: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::Failed(format!("{}: {}", what(), chain(&e))))
    }
}

/// Prints one line of the deployment log on stdout.
pub(crate) fn say(line: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs the deployer and returns its exit code, having printed the outcome.
pub async fn main(opts: Options) -> i32 {
    match run(opts).await {
        Ok(()) => {
            say("--> Success");
            0
        }
        Err(Error::Halt(halt)) => {
            say(format_args!("--> {halt}"));
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn rcs() -> &'static Arc<Resource> {
    catalog::of(Kind::ReplicationController)
}

fn pods() -> &'static Arc<Resource> {
    catalog::of(Kind::Pod)
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn uid_of(obj: &Value) -> &str {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn spec_replicas(rc: &Value) -> i64 {
    rc.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn status_replicas(rc: &Value) -> i64 {
    rc.pointer("/status/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The status of `rc` reflects its latest spec.
fn observed(rc: &Value) -> bool {
    let generation = rc.pointer("/metadata/generation").and_then(Value::as_i64);
    let seen = rc
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    match (generation, seen) {
        (Some(g), Some(s)) => s >= g,
        (Some(_), None) => false,
        _ => true,
    }
}

/// `k=v,...` of an RC's selector.
fn selector_of(rc: &Value) -> String {
    rc.pointer("/spec/selector")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

fn by_name(name: &str) -> ListParams {
    ListParams {
        label_selector: None,
        field_selector: Some(format!("metadata.name={name}")),
    }
}

fn by_labels(selector: String) -> ListParams {
    ListParams {
        label_selector: Some(selector),
        field_selector: None,
    }
}

/// One deployer run.
pub(crate) struct Deployer {
    client: Client,
    ns: String,
    until: Option<Until>,
    recorder: Recorder,
    /// The DC the deployment was made from.
    config: DeploymentConfig,
    /// When the deployer pod started (hooks get what remains of its deadline).
    started: jiff::Timestamp,
}

impl Deployer {
    /// Stops with `message` when `--until` names `cond`.
    fn halt_at(&self, cond: Until, message: impl Into<String>) -> Result<()> {
        if self.until == Some(cond) {
            return Err(Error::Halt(message.into()));
        }
        Ok(())
    }

    /// Lists and watches `res` in the namespace, calling `check` with the current objects
    /// (by name) after every change until it answers; `None` when `timeout` passes first.
    async fn watch_until<T>(
        &self,
        res: &'static Arc<Resource>,
        selection: ListParams,
        timeout: Duration,
        mut check: impl FnMut(&BTreeMap<String, Value>) -> Option<T>,
    ) -> Option<T> {
        let mut watcher = Watcher::new(self.client.clone(), res, Some(&self.ns), selection);
        let mut objects = BTreeMap::new();
        tokio::time::timeout(timeout, async {
            loop {
                match watcher.next().await {
                    WatchEvent::Restarted(items) => {
                        objects = items
                            .into_iter()
                            .map(|o| (name_of(&o).to_string(), o))
                            .collect();
                    }
                    WatchEvent::Applied(o) => {
                        objects.insert(name_of(&o).to_string(), o);
                    }
                    WatchEvent::Deleted(o) => {
                        objects.remove(name_of(&o));
                    }
                }
                if let Some(out) = check(&objects) {
                    return out;
                }
            }
        })
        .await
        .ok()
    }

    /// Waits until the RC `name` (with `uid`) satisfies `check`; errors when it is deleted
    /// or replaced, `None` on timeout.
    async fn watch_rc(
        &self,
        name: &str,
        uid: &str,
        timeout: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Result<Option<Value>> {
        let got = self
            .watch_until(rcs(), by_name(name), timeout, |objs| match objs.get(name) {
                Some(rc) if uid_of(rc) != uid => Some(Err(fail!(
                    "replication controller {}/{name} was replaced",
                    self.ns
                ))),
                None => Some(Err(fail!(
                    "replication controller {}/{name} was deleted",
                    self.ns
                ))),
                Some(rc) if check(rc) => Some(Ok(rc.clone())),
                Some(_) => None,
            })
            .await;
        got.transpose()
    }

    /// Scales `rc` to `n` (through its scale subresource) and waits until its status
    /// reports `n` replicas; returns the fresh RC.
    async fn scale_and_wait(&self, rc: &Value, n: i64, timeout: Duration) -> Result<Value> {
        let name = name_of(rc).to_string();
        let cur = self.client.get(rcs(), Some(&self.ns), &name).await?;
        if spec_replicas(&cur) == n && status_replicas(&cur) == n && observed(&cur) {
            return Ok(cur);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        if spec_replicas(&cur) != n {
            loop {
                match self.client.scale(rcs(), Some(&self.ns), &name, n).await {
                    Ok(_) => break,
                    Err(e) if e.is_conflict() => continue,
                    Err(
                        e @ (crate::client::Error::NotFound(_) | crate::client::Error::Invalid(_)),
                    ) => {
                        return Err(e.into());
                    }
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(rc = %name, error = %e, "scaling failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.watch_rc(&name, uid_of(&cur), left, |rc| {
            spec_replicas(rc) == n && status_replicas(rc) == n && observed(rc)
        })
        .await?
        .ok_or_else(|| {
            fail!(
                "timed out waiting for \"{name}\" to be synced: replicas {n} not reached in {}s",
                timeout.as_secs()
            )
        })
    }

    /// Waits until every replica of `rc` is available (Ready for `minReadySeconds`).
    async fn accept(&self, rc: &Value, timeout: Duration) -> Result<Value> {
        let name = name_of(rc);
        let available = |rc: &Value| {
            observed(rc)
                && rc
                    .pointer("/status/availableReplicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    == spec_replicas(rc)
        };
        self.watch_rc(name, uid_of(rc), timeout, available)
            .await?
            .ok_or_else(|| {
                fail!(
                    "pods for rc '{}/{name}' took longer than {:.0} seconds to become available",
                    self.ns,
                    timeout.as_secs_f64()
                )
            })
    }

    /// Waits until no pod selected by `rc`'s selector is still running.
    async fn wait_pods_gone(&self, rc: &Value, timeout: Duration) -> Result<()> {
        let selector = selector_of(rc);
        if selector.is_empty() {
            return Ok(());
        }
        self.watch_until(pods(), by_labels(selector), timeout, |objs| {
            objs.values()
                .all(|p| matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .then_some(())
        })
        .await
        .ok_or_else(|| {
            fail!(
                "pods of {} were not terminated in {}s",
                name_of(rc),
                timeout.as_secs()
            )
        })
    }

    /// The DC as the involved object of events.
    fn config_ref(&self) -> Value {
        let m = &self.config.metadata;
        json!({
            "apiVersion": "apps.openshift.io/v1",
            "kind": "DeploymentConfig",
            "metadata": {
                "name": m.name.clone().unwrap_or_default(),
                "namespace": m.namespace.clone().unwrap_or_else(|| self.ns.clone()),
                "uid": m.uid.clone().unwrap_or_default(),
            },
        })
    }
}

/// The deployer run: §13 steps 1–7.
async fn run(opts: Options) -> Result<()> {
    if opts.deployment.is_empty() {
        bail!("--deployment or OPENSHIFT_DEPLOYMENT_NAME is required");
    }
    if opts.namespace.is_empty() {
        bail!("--namespace or OPENSHIFT_DEPLOYMENT_NAMESPACE is required");
    }
    // berth restarting under a running deployer is a pause, not the deployment's end.
    let client = Client::http(&opts.server, &opts.ca_pem, &opts.token)
        .with_context(|| format!("connect to {}", opts.server))?
        .reconnecting(RECONNECT_BUDGET);
    let ns = opts.namespace.clone();
    let to_name = opts.deployment.clone();
    let to = client
        .get(rcs(), Some(&ns), &to_name)
        .await
        .map_err(|e| fail!("couldn't get deployment {to_name}: {e}"))?;
    let config = os::decode_deployment_config(&to)
        .map_err(|e| fail!("couldn't decode deployment config from deployment {to_name}: {e}"))?;
    let strategy = config.spec.strategy.type_.clone();
    if strategy != "Recreate" && strategy != "Rolling" {
        bail!("unsupported strategy type: {strategy}");
    }
    let desired: i64 = match os::annotation(&to, os::DESIRED_REPLICAS_ANNOTATION) {
        Some(v) => v
            .trim()
            .parse()
            .map_err(|e| fail!("unable to parse annotation for {to_name}: {e}"))?,
        None => bail!("deployment {to_name} has already run to completion"),
    };
    let dc_name = config
        .metadata
        .name
        .clone()
        .or_else(|| os::annotation(&to, os::DEPLOYMENT_CONFIG_ANNOTATION).map(str::to_string))
        .unwrap_or_default();

    // The deployer pod's start bounds the hooks' deadline.
    let deployer_pod = os::deployer_pod_name(&to_name);
    let started = match client.get(pods(), Some(&ns), &deployer_pod).await {
        Ok(p) => p
            .pointer("/status/startTime")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(jiff::Timestamp::now),
        Err(_) => jiff::Timestamp::now(),
    };
    let d = Deployer {
        recorder: Recorder::new(client.clone(), &deployer_pod, None),
        client,
        ns: ns.clone(),
        until: opts.until,
        config,
        started,
    };

    // The other deployments of the DC, newest first.
    let mut all = d
        .client
        .list(
            rcs(),
            Some(&ns),
            &by_labels(format!("{}={dc_name}", os::DEPLOYMENT_CONFIG_LABEL)),
        )
        .await
        .with_context(|| format!("couldn't get deployments of {ns}/{dc_name}"))?
        .items;
    all.sort_by_key(|rc| std::cmp::Reverse(os::deployment_version(rc)));
    let from = all
        .iter()
        .find(|rc| name_of(rc) != to_name && os::deployment_phase(rc) == os::Phase::Complete)
        .cloned();
    if let Some(from) = &from
        && os::deployment_version(&to) < os::deployment_version(from)
    {
        bail!("deployment {to_name} is older than {}", name_of(from));
    }

    // Scale down every other deployment still running.
    let from_name = from.as_ref().map(name_of).unwrap_or("").to_string();
    for rc in &all {
        let name = name_of(rc);
        if name == to_name || name == from_name || spec_replicas(rc) == 0 {
            continue;
        }
        match d.scale_and_wait(rc, 0, Duration::from_secs(120)).await {
            Ok(_) => say(format_args!("--> Scaled older deployment {name} down")),
            Err(e) => eprintln!("error: Couldn't scale down prior deployment {ns}/{name}: {e:#}"),
        }
    }
    d.halt_at(Until::Start, "Ready to start deployment")?;

    let outcome = if strategy == "Recreate" {
        let params = d
            .config
            .spec
            .strategy
            .recreate_params
            .clone()
            .unwrap_or_default();
        let timeout = params
            .timeout_seconds
            .unwrap_or(os::DEFAULT_TIMEOUT_SECONDS);
        recreate::run(
            &d,
            from.as_ref(),
            &to,
            desired,
            secs(timeout),
            &params.pre,
            &params.mid,
            &params.post,
        )
        .await
    } else {
        rolling::run(&d, from.as_ref(), &to, desired).await
    };
    if !matches!(outcome, Err(Error::Halt(_))) {
        let mut involved = vec![to_name.as_str()];
        if !from_name.is_empty() {
            involved.push(&from_name);
        }
        config_warnings(&d, &involved).await;
    }
    outcome
}

/// Passes the Warning events of the deployments `rcs` on to the DC and prints them.
async fn config_warnings(d: &Deployer, rcs: &[&str]) {
    let dc = d.config_ref();
    for rc in rcs {
        let selection = ListParams {
            label_selector: None,
            field_selector: Some(format!(
                "involvedObject.kind=ReplicationController,involvedObject.name={rc},type=Warning"
            )),
        };
        let events = match d
            .client
            .list(catalog::of(Kind::Event), Some(&d.ns), &selection)
            .await
        {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(rc, error = %e, "couldn't list the events of a deployment");
                continue;
            }
        };
        for e in events {
            let reason = e["reason"].as_str().unwrap_or("");
            let message = e["message"].as_str().unwrap_or("");
            say(format_args!("-->  {reason}: {rc} {message}"));
            d.recorder
                .event(
                    &dc,
                    crate::client::recorder::EventType::Warning,
                    reason,
                    message,
                )
                .await;
        }
    }
}

fn secs(n: i64) -> Duration {
    Duration::from_secs(n.max(0) as u64)
}

/// Merge-patches `rc`'s annotations.
async fn annotate(d: &Deployer, rc: &str, annotations: Value) -> Result<Value> {
    let patch = Patch::Merge(json!({"metadata": {"annotations": annotations}}));
    d.client
        .patch(rcs(), Some(&d.ns), rc, &patch)
        .await
        .with_context(|| format!("couldn't update deployment {rc}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_conditions_parse() {
        assert_eq!(Until::parse("start"), Some(Until::Start));
        assert_eq!(Until::parse("pre"), Some(Until::Pre));
        assert_eq!(Until::parse("mid"), Some(Until::Mid));
        assert_eq!(Until::parse("0%"), Some(Until::Percent(0)));
        assert_eq!(Until::parse("50%"), Some(Until::Percent(50)));
        assert_eq!(Until::parse("100%"), Some(Until::Percent(100)));
        assert_eq!(Until::parse("101%"), None);
        assert_eq!(Until::parse("post"), None);
        assert_eq!(Until::parse("x%"), None);
    }

    #[test]
    fn selectors_and_generations() {
        let rc = json!({"metadata": {"generation": 3}, "spec": {"selector": {"a": "1", "b": "2"}},
                        "status": {"observedGeneration": 2}});
        assert_eq!(selector_of(&rc), "a=1,b=2");
        assert!(!observed(&rc));
        let rc = json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 3}});
        assert!(observed(&rc));
    }
}
