//! `rollout latest|status|history|cancel|retry|pause|resume|undo` for DeploymentConfigs,
//! with the texts and exit codes of `oc` (deploymentconfigs spec §20); a `deploy/NAME`
//! goes to the Deployment verbs of [`super::rollout_apps`], as kubectl's.

use reqwest::Method;
use serde_json::{Value, json};

use crate::client::watcher::{Event as WatchEvent, Watcher};
use crate::client::{DeleteParams, ListParams, Patch, RawRequest};
use crate::client::{Kind, Resource, catalog};
use crate::types::openshift::{
    DEPLOYER_POD_FOR_LABEL, DEPLOYMENT_CANCELLED_ANNOTATION, DEPLOYMENT_CONFIG_LABEL,
    DEPLOYMENT_PHASE_ANNOTATION, DEPLOYMENT_STATUS_REASON_ANNOTATION, Phase, annotation,
    deployment_name, deployment_version,
};

use super::print::oc_age;
use super::tabwriter::{Layout, align};
use super::{CliError, Conn, out};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Start a new rollout of a deployment config with its latest state.
    Latest {
        /// `dc/NAME` (or NAME).
        names: Vec<String>,
        /// Deploy the current template again without re-resolving image triggers.
        #[arg(long)]
        again: bool,
        /// Print the deployment config instead of a message: json, yaml, name or revision.
        #[arg(short = 'o', long)]
        output: Option<String>,
        /// Only check that the rollout could start.
        #[arg(long)]
        dry_run: bool,
    },
    /// Follow a rollout until it completes, fails or is paused.
    Status {
        name: String,
        /// Follow only this revision.
        #[arg(long)]
        revision: Option<i64>,
        /// Follow the rollout (false: print the current status once).
        #[arg(short = 'w', long, default_value_t = true, action = clap::ArgAction::Set)]
        watch: bool,
        /// Give up after this long (`30s`, `5m`; 0 waits forever).
        #[arg(long, default_value = "0s")]
        timeout: String,
    },
    /// List the revisions of a deployment config, or show one.
    History {
        name: String,
        /// Show the pod template of this revision.
        #[arg(long)]
        revision: Option<i64>,
    },
    /// Cancel the rollout in progress.
    Cancel { name: String },
    /// Retry the latest rollout when it failed.
    Retry { name: String },
    /// Mark a deployment config as paused: config changes start no rollout.
    Pause { name: String },
    /// Resume a paused deployment config.
    Resume { name: String },
    /// Roll back to an earlier revision (default: the one before the latest).
    Undo {
        name: String,
        #[arg(long, default_value_t = 0)]
        to_revision: i64,
    },
    /// Restart every pod of a deployment (`deploy/NAME`) by a rolling update.
    Restart { name: String },
}

fn dcs() -> &'static std::sync::Arc<Resource> {
    catalog::of(Kind::DeploymentConfig)
}

fn rcs() -> &'static std::sync::Arc<Resource> {
    catalog::of(Kind::ReplicationController)
}

/// `deploymentconfig.apps.openshift.io/<name>`, as oc names the object it acted on.
pub(crate) fn res(name: &str) -> String {
    format!("deploymentconfig.apps.openshift.io/{name}")
}

/// The name of a DC given as `NAME`, `dc/NAME`, `deploymentconfig/NAME`, ...
pub fn dc_name(arg: &str) -> Result<&str, CliError> {
    match arg.split_once('/') {
        None => Ok(arg),
        Some((kind, name))
            if matches!(
                kind,
                "dc" | "deploymentconfig"
                    | "deploymentconfigs"
                    | "deploymentconfig.apps.openshift.io"
                    | "deploymentconfigs.apps.openshift.io"
            ) && !name.is_empty() =>
        {
            Ok(name)
        }
        Some((kind, _)) => Err(CliError::msg(format!(
            "berth rollout works on deployment configs (dc/NAME) and deployments (deploy/NAME), not on {kind:?}"
        ))),
    }
}

pub(crate) fn age_of(obj: &Value) -> i64 {
    obj["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(crate::types::age_seconds)
        .unwrap_or(0)
}

pub(crate) fn paused(dc: &Value) -> bool {
    dc["spec"]["paused"].as_bool().unwrap_or(false)
}

pub(crate) fn latest_version(dc: &Value) -> i64 {
    dc["status"]["latestVersion"].as_i64().unwrap_or(0)
}

pub(crate) fn cancelled(rc: &Value) -> bool {
    annotation(rc, DEPLOYMENT_CANCELLED_ANNOTATION) == Some("true")
}

pub(crate) fn terminal(phase: Phase) -> bool {
    matches!(phase, Phase::Complete | Phase::Failed)
}

impl Conn {
    pub(crate) async fn dc(&self, name: &str) -> Result<Value, CliError> {
        self.client
            .get(dcs(), Some(&self.namespace), name)
            .await
            .map_err(|e| self.error(e))
    }

    /// The deployments (RCs) of a DC, newest first.
    pub(crate) async fn deployments(&self, dc: &str) -> Result<Vec<Value>, CliError> {
        let params = ListParams {
            label_selector: Some(format!("{DEPLOYMENT_CONFIG_LABEL}={dc}")),
            field_selector: None,
        };
        let mut items = self
            .client
            .list(rcs(), Some(&self.namespace), &params)
            .await
            .map_err(|e| self.error(e))?
            .items;
        items.sort_by_key(|rc| std::cmp::Reverse(deployment_version(rc)));
        Ok(items)
    }

    pub(crate) async fn deployment(
        &self,
        dc: &str,
        version: i64,
    ) -> Result<Option<Value>, CliError> {
        match self
            .client
            .get(rcs(), Some(&self.namespace), &deployment_name(dc, version))
            .await
        {
            Ok(rc) => Ok(Some(rc)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    pub(crate) fn dc_path(&self, name: &str, sub: &str) -> String {
        format!(
            "{}/{name}/{sub}",
            crate::client::Client::collection_path(dcs(), Some(&self.namespace))
        )
    }
}

/// Runs a rollout verb; returns the exit code.
pub async fn run(conn: &Conn, command: Command) -> Result<i32, CliError> {
    use super::rollout_apps as apps;
    use super::rollout_revisions::{self as revisions, revisioned};
    let stop = matches!(command, Command::Pause { .. });
    match command {
        Command::Latest {
            names,
            again,
            output,
            dry_run,
        } => latest(conn, &names, again, output.as_deref(), dry_run).await,
        Command::Status {
            name,
            revision,
            watch,
            timeout,
        } => {
            let timeout = parse_timeout(&timeout)?;
            let status = async {
                if let Some((kind, n)) = revisioned(&name) {
                    return revisions::status(conn, kind, n, watch).await;
                }
                match apps::deployment_name(&name) {
                    Some(d) => apps::status(conn, d, revision, watch).await,
                    None => status(conn, dc_name(&name)?, revision, watch).await,
                }
            };
            match timeout {
                Some(t) => tokio::time::timeout(t, status).await.map_err(|_| {
                    CliError::msg(format!("timed out waiting for the condition on {name}"))
                })?,
                None => status.await,
            }
        }
        Command::History { name, revision } => {
            if let Some((kind, n)) = revisioned(&name) {
                return revisions::history(conn, kind, n, revision).await;
            }
            match apps::deployment_name(&name) {
                Some(d) => apps::history(conn, d, revision).await,
                None => history(conn, dc_name(&name)?, revision).await,
            }
        }
        Command::Restart { name } => {
            if let Some((kind, n)) = revisioned(&name) {
                return revisions::restart(conn, kind, n).await;
            }
            match apps::deployment_name(&name) {
                Some(d) => apps::restart(conn, d).await,
                None => Err(CliError::msg(format!(
                    "berth rollout restart works on deployments, daemon sets and stateful sets (deploy/NAME, ds/NAME, sts/NAME), not on {name:?}"
                ))),
            }
        }
        Command::Cancel { name } => cancel(conn, dc_name(&name)?).await,
        Command::Retry { name } => retry(conn, dc_name(&name)?).await,
        Command::Pause { name } | Command::Resume { name } => match apps::deployment_name(&name) {
            Some(d) => apps::pause(conn, d, stop).await,
            None => pause(conn, dc_name(&name)?, stop).await,
        },
        Command::Undo { name, to_revision } => {
            if let Some((kind, n)) = revisioned(&name) {
                return revisions::undo(conn, kind, n, to_revision).await;
            }
            match apps::deployment_name(&name) {
                Some(d) => apps::undo(conn, d, to_revision).await,
                None => undo(conn, dc_name(&name)?, to_revision).await,
            }
        }
    }
}

/// `--timeout`: a Go duration, or a bare number of seconds; zero or negative waits
/// forever.
fn parse_timeout(s: &str) -> Result<Option<std::time::Duration>, CliError> {
    let (negative, d) = match s.parse::<u64>() {
        Ok(secs) => (false, std::time::Duration::from_secs(secs)),
        Err(_) => super::wait::parse_duration(s)?,
    };
    Ok((!negative && !d.is_zero()).then_some(d))
}

/// Starts a new deployment (POST `instantiate` with `force`); returns the DC.
pub(crate) async fn instantiate(conn: &Conn, name: &str, latest: bool) -> Result<Value, CliError> {
    let body = json!({
        "kind": "DeploymentRequest", "apiVersion": "apps.openshift.io/v1",
        "name": name, "latest": latest, "force": true,
    });
    let path = conn.dc_path(name, "instantiate");
    let mut req = RawRequest::new(Method::POST, &path);
    req.body = Some(&body);
    match conn.client.raw_json(&req).await {
        Ok(Value::Null) => conn.dc(name).await,
        Ok(dc) => Ok(dc),
        Err(e) => Err(conn.error(e)),
    }
}

async fn latest(
    conn: &Conn,
    names: &[String],
    again: bool,
    output: Option<&str>,
    dry_run: bool,
) -> Result<i32, CliError> {
    let [name] = names else {
        return Err(CliError::msg(
            "one deployment config name is needed as argument.",
        ));
    };
    let name = dc_name(name)?;
    let dc = conn.dc(name).await?;
    if paused(&dc) {
        return Err(CliError::msg("cannot deploy a paused deployment config"));
    }
    let version = latest_version(&dc);
    if version > 0
        && let Some(rc) = conn.deployment(name, version).await?
    {
        let phase = Phase::of(&rc);
        if !terminal(phase) {
            return Err(CliError::msg(format!(
                "#{version} is already in progress ({}).",
                phase.as_str()
            )));
        }
    }
    let dc = if dry_run {
        dc
    } else {
        instantiate(conn, name, !again).await?
    };
    match output {
        None => out(&format!(
            "{} rolled out{}\n",
            res(name),
            if dry_run { " (dry run)" } else { "" }
        )),
        Some("revision") => out(&format!("{}\n", latest_version(&dc))),
        Some("name") => out(&format!("{}\n", res(name))),
        Some(fmt @ ("json" | "yaml")) => out(&super::encode(&dc, fmt)?),
        Some(other) => {
            return Err(CliError::msg(format!(
                "unable to match a printer suitable for the output format {other:?}, allowed \
                 formats are: json,name,revision,yaml"
            )));
        }
    }
    Ok(0)
}

/// What cancelling the rollouts in progress of a DC came to.
pub(crate) enum Cancelled {
    /// The DC has no deployments at all.
    Nothing,
    /// Deployments in progress, with whether each was cancelled before.
    InProgress(Vec<bool>),
    /// Nothing in progress: the latest deployment's line (`#1 complete 5 seconds`).
    Idle(String),
}

/// Cancels every deployment of `name` in progress.
pub(crate) async fn cancel_in_progress(conn: &Conn, name: &str) -> Result<Cancelled, CliError> {
    let rcs_of = conn.deployments(name).await?;
    let Some(latest) = rcs_of.first() else {
        return Ok(Cancelled::Nothing);
    };
    let mut acted = Vec::new();
    for rc in &rcs_of {
        if terminal(Phase::of(rc)) {
            continue;
        }
        if cancelled(rc) {
            acted.push(true);
            continue;
        }
        let patch = Patch::Merge(json!({"metadata": {"annotations": {
            DEPLOYMENT_CANCELLED_ANNOTATION: "true",
            DEPLOYMENT_STATUS_REASON_ANNOTATION: "cancelled by the user",
        }}}));
        let rc_name = rc["metadata"]["name"].as_str().unwrap_or_default();
        conn.client
            .patch(rcs(), Some(&conn.namespace), rc_name, &patch)
            .await
            .map_err(|e| conn.error(e))?;
        acted.push(false);
    }
    if !acted.is_empty() {
        return Ok(Cancelled::InProgress(acted));
    }
    let phase = Phase::of(latest);
    let cancelling = if cancelled(latest) && !terminal(phase) {
        " (cancelling)"
    } else {
        ""
    };
    Ok(Cancelled::Idle(format!(
        "#{} {}{} {}",
        deployment_version(latest),
        phase.as_str().to_lowercase(),
        cancelling,
        oc_age(age_of(latest)).to_lowercase()
    )))
}

async fn cancel(conn: &Conn, name: &str) -> Result<i32, CliError> {
    let ns = &conn.namespace;
    let dc = conn.dc(name).await?;
    if paused(&dc) {
        return Err(CliError::msg(format!(
            "unable to cancel paused deployment {ns}/{name}"
        )));
    }
    match cancel_in_progress(conn, name).await? {
        Cancelled::Nothing => Err(CliError::msg(format!(
            "there have been no replication controllers for {ns}/{name}"
        ))),
        Cancelled::InProgress(before) => {
            for already in before {
                let what = if already {
                    "already cancelled"
                } else {
                    "cancelling"
                };
                out(&format!("{} {what}\n", res(name)));
            }
            Ok(0)
        }
        Cancelled::Idle(latest) => {
            out(&format!(
                "No rollout is in progress (latest rollout {latest} ago)\n"
            ));
            Ok(0)
        }
    }
}

/// Resets the failed latest deployment of `dc` so that the deployer controller runs it
/// again; returns its version.
pub(crate) async fn retry_latest(conn: &Conn, dc: &Value) -> Result<i64, CliError> {
    let name = dc["metadata"]["name"].as_str().unwrap_or_default();
    let version = latest_version(dc);
    if version == 0 {
        return Err(CliError::msg(format!("no rollouts found for \"{name}\"")));
    }
    let Some(rc) = conn.deployment(name, version).await? else {
        return Err(CliError::msg(format!(
            "unable to find the latest rollout (#{version}).\nYou can start a new rollout \
             with 'oc rollout latest dc/{name}'."
        )));
    };
    let phase = Phase::of(&rc);
    if phase != Phase::Failed {
        let hint = if phase == Phase::Complete {
            format!("You can start a new deployment with 'oc rollout latest dc/{name}'.")
        } else {
            format!(
                "Optionally, you can cancel this deployment with 'oc rollout cancel dc/{name}'."
            )
        };
        return Err(CliError::msg(format!(
            "rollout #{version} is {}; only failed deployments can be retried.\n{hint}",
            phase.as_str().to_lowercase()
        )));
    }
    let rc_name = deployment_name(name, version);
    let ns = &conn.namespace;
    let pods = catalog::of(Kind::Pod);
    let params = ListParams {
        label_selector: Some(format!("{DEPLOYER_POD_FOR_LABEL}={rc_name}")),
        field_selector: None,
    };
    let deployer_pods = conn
        .client
        .list(pods, Some(ns), &params)
        .await
        .map_err(|e| conn.error(e))?;
    for pod in deployer_pods.items {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        match conn.client.delete(pods, Some(ns), pod_name, &params).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                return Err(CliError::msg(format!(
                    "failed to delete deployer/hook pod {pod_name} for deployment #{version}: {e}"
                )));
            }
        }
    }
    let patch = Patch::Merge(json!({"metadata": {"annotations": {
        DEPLOYMENT_PHASE_ANNOTATION: "New",
        DEPLOYMENT_STATUS_REASON_ANNOTATION: null,
        DEPLOYMENT_CANCELLED_ANNOTATION: null,
    }}}));
    conn.client
        .patch(rcs(), Some(ns), &rc_name, &patch)
        .await
        .map_err(|e| conn.error(e))?;
    Ok(version)
}

async fn retry(conn: &Conn, name: &str) -> Result<i32, CliError> {
    let dc = conn.dc(name).await?;
    if paused(&dc) {
        return Err(CliError::msg(format!(
            "unable to retry paused deployment config \"{name}\""
        )));
    }
    let version = retry_latest(conn, &dc).await?;
    out(&format!("{} retried rollout #{version}\n", res(name)));
    Ok(0)
}

async fn pause(conn: &Conn, name: &str, pause: bool) -> Result<i32, CliError> {
    let dc = conn.dc(name).await?;
    if paused(&dc) == pause {
        return Err(CliError::msg(format!(
            "deploymentconfigs.apps.openshift.io \"{name}\" is {}",
            if pause {
                "already paused"
            } else {
                "not paused"
            }
        )));
    }
    let patch = Patch::Merge(json!({"spec": {"paused": pause}}));
    conn.client
        .patch(dcs(), Some(&conn.namespace), name, &patch)
        .await
        .map_err(|e| conn.error(e))?;
    out(&format!(
        "{} {}\n",
        res(name),
        if pause { "paused" } else { "resumed" }
    ));
    Ok(0)
}

async fn undo(conn: &Conn, name: &str, to_revision: i64) -> Result<i32, CliError> {
    let dc = conn.dc(name).await?;
    if paused(&dc) {
        return Err(CliError::msg(format!(
            "cannot rollback a paused config; resume it first with 'rollout resume dc/{name}' \
             and try again"
        )));
    }
    let body = json!({
        "kind": "DeploymentConfigRollback", "apiVersion": "apps.openshift.io/v1",
        "name": name,
        "spec": {"from": {"name": ""}, "revision": to_revision, "includeTemplate": true},
    });
    let path = conn.dc_path(name, "rollback");
    let mut req = RawRequest::new(Method::POST, &path);
    req.body = Some(&body);
    // The controller may write the DC between the rollback and the update: then the
    // rollback is generated again from the newer DC.
    let mut attempts = 0;
    loop {
        let rolled = conn
            .client
            .raw_json(&req)
            .await
            .map_err(|e| conn.error(e))?;
        match conn.client.update(dcs(), &rolled).await {
            Ok(_) => break,
            Err(e) if e.is_conflict() && attempts < 5 => attempts += 1,
            Err(e) => return Err(conn.error(e)),
        }
    }
    out(&format!("{} rolled back\n", res(name)));
    Ok(0)
}

async fn history(conn: &Conn, name: &str, revision: Option<i64>) -> Result<i32, CliError> {
    conn.dc(name).await?;
    let mut deployments = conn.deployments(name).await?;
    deployments.reverse();
    if let Some(rev) = revision {
        let Some(rc) = deployments.iter().find(|rc| deployment_version(rc) == rev) else {
            return Err(CliError::msg("unable to find the specified revision"));
        };
        out(&format!(
            "{} with revision #{rev}\n{}",
            res(name),
            super::describe::pod_template(
                &rc["spec"]["template"],
                &super::describe::Clock::system()
            )
        ));
        return Ok(0);
    }
    if deployments.is_empty() {
        out("No rollout history found.\n");
        return Ok(0);
    }
    let mut table = String::from("REVISION\tSTATUS\tCAUSE\n");
    for rc in &deployments {
        table.push_str(&format!(
            "{}\t{}\t{}\n",
            deployment_version(rc),
            Phase::of(rc).as_str(),
            annotation(rc, DEPLOYMENT_STATUS_REASON_ANNOTATION).unwrap_or("<unknown>")
        ));
    }
    out(&format!("{}\n{}\n", res(name), align(Layout::TABS, &table)));
    Ok(0)
}

/// What `rollout status` makes of one state of the DC: a line to print and whether (and
/// how) the command ends.
#[derive(Debug, PartialEq)]
enum Observed {
    Waiting(String),
    Done(String),
    Failed(String),
}

fn observe(dc: &Value, revision: Option<i64>) -> Observed {
    let name = dc["metadata"]["name"].as_str().unwrap_or_default();
    let latest = latest_version(dc);
    let triggers = dc["spec"]["triggers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if latest == 0 {
        if triggers.iter().any(|t| t["type"] == "ImageChange") {
            return Observed::Waiting(format!(
                "Deployment config \"{name}\" waiting on image update"
            ));
        }
        if triggers.is_empty() {
            return Observed::Failed(format!(
                "Deployment config \"{name}\" waiting on manual update (use 'oc rollout latest \
                 {name}')"
            ));
        }
    }
    if let Some(rev) = revision
        && rev != latest
    {
        return Observed::Failed(format!(
            "desired revision ({rev}) is different from the running revision ({latest})"
        ));
    }
    let generation = dc["metadata"]["generation"].as_i64().unwrap_or(0);
    let observed = dc["status"]["observedGeneration"].as_i64().unwrap_or(0);
    if generation > observed {
        return Observed::Waiting(
            "Waiting for latest deployment config spec to be observed by the controller \
             loop..."
                .into(),
        );
    }
    let progressing = dc["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Progressing"))
        .cloned()
        .unwrap_or(Value::Null);
    let message = progressing["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match progressing["reason"].as_str().unwrap_or_default() {
        "NewReplicationControllerAvailable" => return Observed::Done(message),
        "ProgressDeadlineExceeded" | "RolloutCancelled" => return Observed::Failed(message),
        "DeploymentConfigPaused" => {
            return Observed::Failed(format!(
                "Deployment config \"{name}\" is paused. Resume to continue watching the \
                 status of the rollout."
            ));
        }
        _ => {}
    }
    let count = |k: &str| dc["status"][k].as_i64().unwrap_or(0);
    let desired = dc["spec"]["replicas"].as_i64().unwrap_or(0);
    let (updated, replicas, available) = (
        count("updatedReplicas"),
        count("replicas"),
        count("availableReplicas"),
    );
    if updated < desired {
        Observed::Waiting(format!(
            "Waiting for rollout to finish: {updated} out of {desired} new replicas have been \
             updated..."
        ))
    } else if replicas > updated {
        Observed::Waiting(format!(
            "Waiting for rollout to finish: {} old replicas are pending termination...",
            replicas - updated
        ))
    } else {
        // Also when everything is in place but the controller has yet to say so.
        Observed::Waiting(format!(
            "Waiting for rollout to finish: {available} of {updated} updated replicas are \
             available..."
        ))
    }
}

async fn status(
    conn: &Conn,
    name: &str,
    revision: Option<i64>,
    watch: bool,
) -> Result<i32, CliError> {
    let dc = conn.dc(name).await?;
    let mut last = String::new();
    let show = |dc: &Value| -> Option<Result<i32, CliError>> {
        match observe(dc, revision) {
            Observed::Done(line) => {
                out(&format!("{line}\n"));
                Some(Ok(0))
            }
            Observed::Failed(message) => Some(Err(CliError::msg(message))),
            Observed::Waiting(line) => {
                if line != last {
                    out(&format!("{line}\n"));
                    last = line;
                }
                (!watch).then_some(Ok(0))
            }
        }
    };
    follow(conn, dcs(), &dc, show).await
}

/// Shows `obj` and each later state of it until `show` says how the command ends. The
/// client's watcher resumes after the state just read, re-watches when a watch ends and
/// lists again when the history is gone.
pub(crate) async fn follow(
    conn: &Conn,
    res: &std::sync::Arc<Resource>,
    obj: &Value,
    mut show: impl FnMut(&Value) -> Option<Result<i32, CliError>>,
) -> Result<i32, CliError> {
    if let Some(end) = show(obj) {
        return end;
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let gone = || {
        CliError::msg(format!(
            "{}.{} \"{name}\" was deleted",
            res.plural, res.group
        ))
    };
    let selection = ListParams {
        label_selector: None,
        field_selector: Some(format!("metadata.name={name}")),
    };
    let rv = obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    let mut watcher = Watcher::from_revision(
        conn.client.clone(),
        res,
        Some(&conn.namespace),
        selection,
        rv,
    );
    loop {
        let obj = match watcher.next().await {
            WatchEvent::Applied(obj) => obj,
            WatchEvent::Restarted(list) => list.into_iter().next().ok_or_else(gone)?,
            WatchEvent::Deleted(_) => return Err(gone()),
        };
        if let Some(end) = show(&obj) {
            return end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_taken_with_or_without_their_kind() {
        assert_eq!(dc_name("x").unwrap(), "x");
        assert_eq!(dc_name("dc/x").unwrap(), "x");
        assert_eq!(
            dc_name("deploymentconfig.apps.openshift.io/x").unwrap(),
            "x"
        );
        assert!(dc_name("pod/x").is_err());
        assert!(dc_name("dc/").is_err());
    }

    fn dc(status: Value) -> Value {
        json!({
            "metadata": {"name": "web", "generation": 2},
            "spec": {"replicas": 3, "triggers": [{"type": "ConfigChange"}]},
            "status": status,
        })
    }

    #[test]
    fn rollout_status_reads_the_progressing_condition_and_the_counts() {
        let waiting = |s: &str| Observed::Waiting(s.to_string());
        assert_eq!(
            observe(
                &dc(json!({"observedGeneration": 1, "latestVersion": 1})),
                None
            ),
            waiting(
                "Waiting for latest deployment config spec to be observed by the controller loop..."
            )
        );
        assert_eq!(
            observe(
                &dc(json!({"observedGeneration": 2, "latestVersion": 1, "updatedReplicas": 1})),
                None
            ),
            waiting("Waiting for rollout to finish: 1 out of 3 new replicas have been updated...")
        );
        assert_eq!(
            observe(
                &dc(
                    json!({"observedGeneration": 2, "latestVersion": 1, "updatedReplicas": 3,
                    "replicas": 4})
                ),
                None
            ),
            waiting("Waiting for rollout to finish: 1 old replicas are pending termination...")
        );
        assert_eq!(
            observe(
                &dc(
                    json!({"observedGeneration": 2, "latestVersion": 1, "updatedReplicas": 3,
                    "replicas": 3, "availableReplicas": 2})
                ),
                None
            ),
            waiting("Waiting for rollout to finish: 2 of 3 updated replicas are available...")
        );
        let done = dc(
            json!({"observedGeneration": 2, "latestVersion": 1, "conditions": [
            {"type": "Progressing", "reason": "NewReplicationControllerAvailable",
             "message": "replication controller \"web-1\" successfully rolled out"}]}),
        );
        assert_eq!(
            observe(&done, None),
            Observed::Done("replication controller \"web-1\" successfully rolled out".into())
        );
        assert_eq!(
            observe(&done, Some(2)),
            Observed::Failed(
                "desired revision (2) is different from the running revision (1)".into()
            )
        );
        let failed = dc(
            json!({"observedGeneration": 2, "latestVersion": 1, "conditions": [
            {"type": "Progressing", "reason": "ProgressDeadlineExceeded",
             "message": "replication controller \"web-1\" has failed progressing"}]}),
        );
        assert_eq!(
            observe(&failed, None),
            Observed::Failed("replication controller \"web-1\" has failed progressing".into())
        );
        let paused = dc(
            json!({"observedGeneration": 2, "latestVersion": 1, "conditions": [
            {"type": "Progressing", "reason": "DeploymentConfigPaused"}]}),
        );
        assert_eq!(
            observe(&paused, None),
            Observed::Failed(
                "Deployment config \"web\" is paused. Resume to continue watching the status \
                 of the rollout."
                    .into()
            )
        );
        let mut manual = dc(json!({"latestVersion": 0}));
        manual["spec"]["triggers"] = json!([]);
        assert_eq!(
            observe(&manual, None),
            Observed::Failed(
                "Deployment config \"web\" waiting on manual update (use 'oc rollout latest \
                 web')"
                    .into()
            )
        );
    }

    #[test]
    fn timeouts_take_seconds_minutes_and_hours() {
        assert_eq!(parse_timeout("0s").unwrap(), None);
        assert_eq!(
            parse_timeout("90").unwrap(),
            Some(std::time::Duration::from_secs(90))
        );
        assert_eq!(
            parse_timeout("2m").unwrap(),
            Some(std::time::Duration::from_secs(120))
        );
        assert!(parse_timeout("soon").is_err());
    }
}
