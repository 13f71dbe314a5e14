//! oc's older verbs for DeploymentConfigs: `deploy DC [--latest|--cancel|--retry]` and
//! `rollback DC|RC [--to-version=N]` (deploymentconfigs spec §18, §20.2, §20.3, §20.8).

use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{Kind, catalog};
use crate::client::{ListParams, RawRequest};
use crate::types::openshift::{
    DEPLOYMENT_CANCELLED_ANNOTATION, DEPLOYMENT_POD_LABEL, DEPLOYMENT_STATUS_REASON_ANNOTATION,
    Phase, annotation, deployment_version,
};

use super::print::oc_age;
use super::rollout::{
    Cancelled, age_of, cancel_in_progress, dc_name, instantiate, latest_version, paused,
    retry_latest, terminal,
};
use super::{CliError, Conn, out};

/// What `deploy` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    Status,
    Latest { follow: bool },
    Cancel,
    Retry,
}

pub async fn deploy(conn: &Conn, arg: &str, action: Action) -> Result<i32, CliError> {
    let name = dc_name(arg)?;
    let dc = conn.dc(name).await?;
    match action {
        Action::Status => status(conn, &dc).await,
        Action::Latest { follow } => {
            if paused(&dc) {
                return Err(CliError::msg("cannot deploy a paused deployment config"));
            }
            let version = latest_version(&dc);
            if let Some(rc) = conn.deployment(name, version).await?
                && !terminal(Phase::of(&rc))
            {
                return Err(CliError::msg(format!(
                    "#{version} is already in progress ({}).\nOptionally, you can cancel this \
                     deployment using 'oc rollout cancel dc/{name}'.",
                    Phase::of(&rc).as_str()
                )));
            }
            let dc = instantiate(conn, name, true).await?;
            out(&format!("Started deployment #{}\n", latest_version(&dc)));
            if follow {
                let args = super::logs::LogArgs {
                    target: vec![format!("dc/{name}")],
                    follow: true,
                    ..Default::default()
                };
                return super::logs::logs(conn, &args).await;
            }
            out(&format!(
                "Use 'oc logs -f dc/{name}' to track its progress.\n"
            ));
            Ok(0)
        }
        Action::Cancel => {
            if paused(&dc) {
                return Err(CliError::msg("cannot cancel a paused deployment config"));
            }
            match cancel_in_progress(conn, name).await? {
                Cancelled::Nothing => out(&format!(
                    "There have been no deployments for {}/{name}\n",
                    conn.namespace
                )),
                Cancelled::InProgress(before) => {
                    for _ in before {
                        out(&format!("Cancelled deployment #{}\n", latest_version(&dc)));
                    }
                }
                Cancelled::Idle(latest) => out(&format!(
                    "No deployments are in progress (latest deployment {latest} ago)\n"
                )),
            }
            Ok(0)
        }
        Action::Retry => {
            if paused(&dc) {
                return Err(CliError::msg("cannot retry a paused deployment config"));
            }
            let version = retry_latest(conn, &dc).await?;
            out(&format!(
                "Retried #{version}\nUse 'oc logs -f dc/{name}' to track its progress.\n"
            ));
            Ok(0)
        }
    }
}

/// `on image or update`, `on update`, `on image` or `for manual`.
fn waiting_on(dc: &Value) -> &'static str {
    let triggers = dc["spec"]["triggers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let config = triggers.iter().any(|t| t["type"] == "ConfigChange");
    let image = triggers
        .iter()
        .any(|t| t["type"] == "ImageChange" && t["imageChangeParams"]["automatic"] == true);
    match (image, config) {
        (true, true) => "on image or update",
        (false, true) => "on update",
        (true, false) => "on image",
        (false, false) => "for manual",
    }
}

/// ` - 2/3 pods growing to 3 (warning: 4 restarts)`, or nothing for an empty deployment
/// (but `0 pods` on the first line).
fn pods_summary(rc: &Value, restarts: i64, first: bool) -> String {
    let actual = rc["status"]["replicas"].as_i64().unwrap_or(0);
    let requested = rc["spec"]["replicas"].as_i64().unwrap_or(0);
    let summary = if actual == requested {
        match actual {
            0 if !first => return String::new(),
            0 => "0 pods".to_string(),
            1 => "1 pod".to_string(),
            n => format!("{n} pods"),
        }
    } else {
        format!("{actual}/{requested} pods")
    };
    let change = if requested < actual {
        format!(" reducing to {requested}")
    } else if requested > actual {
        format!(" growing to {requested}")
    } else {
        String::new()
    };
    let warning = if restarts > 0 {
        format!(" (warning: {restarts} restarts)")
    } else {
        String::new()
    };
    format!(" - {summary}{change}{warning}")
}

/// One `deploy DC` line for a deployment.
fn deployment_line(dc: &Value, rc: &Value, restarts: i64, first: bool) -> String {
    let version = deployment_version(rc);
    let test = if dc["spec"]["test"] == true {
        "test "
    } else {
        ""
    };
    let age = oc_age(age_of(rc)).to_lowercase();
    let cancelling = if annotation(rc, DEPLOYMENT_CANCELLED_ANNOTATION) == Some("true") {
        " (cancelling)"
    } else {
        ""
    };
    let pods = pods_summary(rc, restarts, first);
    match Phase::of(rc) {
        Phase::Failed => {
            let reason = annotation(rc, DEPLOYMENT_STATUS_REASON_ANNOTATION)
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            format!("deployment #{version} failed {age} ago{reason}{pods}")
        }
        Phase::Complete => format!("{test}deployment #{version} deployed {age} ago{pods}"),
        Phase::Running => {
            format!("{test}deployment #{version} running{cancelling} for {age}{pods}")
        }
        other => format!(
            "deployment #{version} {}{cancelling} {age} ago{pods}",
            other.as_str().to_lowercase()
        ),
    }
}

/// `deploy DC`: the latest deployments back to the last complete one.
async fn status(conn: &Conn, dc: &Value) -> Result<i32, CliError> {
    let name = dc["metadata"]["name"].as_str().unwrap_or_default();
    let deployments = conn.deployments(name).await?;
    let pods = conn
        .client
        .list(
            catalog::of(Kind::Pod),
            Some(&conn.namespace),
            &ListParams::default(),
        )
        .await
        .map_err(|e| conn.error(e))?
        .items;
    let restarts = |rc: &str| -> i64 {
        pods.iter()
            .filter(|p| p["metadata"]["labels"][DEPLOYMENT_POD_LABEL] == rc)
            .flat_map(|p| {
                p["status"]["containerStatuses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|c| c["restartCount"].as_i64().unwrap_or(0))
            .sum()
    };
    let latest = latest_version(dc);
    let mut lines = Vec::new();
    if !deployments
        .iter()
        .any(|rc| deployment_version(rc) == latest)
    {
        if latest == 0 {
            lines.push(format!("deployment #1 waiting {}", waiting_on(dc)));
        } else {
            lines.push(format!("deployment #{latest} pending {}", waiting_on(dc)));
        }
    }
    for rc in &deployments {
        let rc_name = rc["metadata"]["name"].as_str().unwrap_or_default();
        lines.push(deployment_line(dc, rc, restarts(rc_name), lines.is_empty()));
        if Phase::of(rc) == Phase::Complete {
            break;
        }
    }
    for line in lines {
        out(&format!("{name} {line}\n"));
    }
    Ok(0)
}

/// The flags of `rollback`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RollbackArgs {
    /// `dc/NAME` (to the previous complete deployment or `--to-version`) or `rc/NAME`
    /// (to that deployment).
    pub target: String,
    /// The deployment version to roll back to.
    #[arg(long)]
    pub to_version: Option<i64>,
    /// Also restore the triggers of the target.
    #[arg(long)]
    pub change_triggers: bool,
    /// Also restore the strategy of the target.
    #[arg(long)]
    pub change_strategy: bool,
    /// Also restore replicas and selector of the target.
    #[arg(long)]
    pub change_scaling_settings: bool,
    /// Print the rolled-back config instead of saving it.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the rolled-back config (json or yaml) instead of saving it.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
}

pub async fn rollback(conn: &Conn, args: &RollbackArgs) -> Result<i32, CliError> {
    let (kind, name) = match args.target.split_once('/') {
        Some((k, n)) => (super::resource::resolve(k)?.kind, n),
        None => (Kind::DeploymentConfig, args.target.as_str()),
    };
    let (dc_name, target_rc) = match kind {
        Kind::ReplicationController => {
            let rc = conn
                .client
                .get(catalog::of(kind), Some(&conn.namespace), name)
                .await
                .map_err(|e| conn.error(e))?;
            let dc = annotation(&rc, crate::types::openshift::DEPLOYMENT_CONFIG_ANNOTATION)
                .ok_or_else(|| {
                    CliError::msg(format!("{name} is not a deployment of a deployment config"))
                })?
                .to_string();
            (dc, Some(name.to_string()))
        }
        Kind::DeploymentConfig => (name.to_string(), None),
        _ => {
            return Err(CliError::msg(format!(
                "cannot roll back {}: name a deployment config or a deployment",
                args.target
            )));
        }
    };
    let dc = conn.dc(&dc_name).await?;
    if paused(&dc) {
        return Err(CliError::msg("cannot rollback a paused deployment config"));
    }
    let target = match (target_rc, args.to_version) {
        (Some(rc), _) => rc,
        (None, Some(v)) => crate::types::openshift::deployment_name(&dc_name, v),
        (None, None) => {
            let latest = latest_version(&dc);
            conn.deployments(&dc_name)
                .await?
                .into_iter()
                .find(|rc| deployment_version(rc) < latest && Phase::of(rc) == Phase::Complete)
                .and_then(|rc| rc["metadata"]["name"].as_str().map(str::to_string))
                .ok_or_else(|| CliError::msg("couldn't find deployment for rollback"))?
        }
    };
    let body = json!({
        "kind": "DeploymentConfigRollback", "apiVersion": "apps.openshift.io/v1",
        "name": dc_name,
        "spec": {
            "from": {"kind": "ReplicationController", "name": target},
            "includeTemplate": true,
            "includeTriggers": args.change_triggers,
            "includeStrategy": args.change_strategy,
            "includeReplicationMeta": args.change_scaling_settings,
        },
    });
    let path = conn.dc_path(&dc_name, "rollback");
    let mut req = RawRequest::new(Method::POST, &path);
    req.body = Some(&body);
    // The controller may write the DC between the rollback and the update: then the
    // rollback is generated again from the newer DC.
    let mut attempts = 0;
    let saved = loop {
        let rolled = conn
            .client
            .raw_json(&req)
            .await
            .map_err(|e| conn.error(e))?;
        if args.dry_run || args.output.is_some() {
            let format = args.output.as_deref().unwrap_or("yaml");
            if !matches!(format, "json" | "yaml") {
                return Err(CliError::msg(format!(
                    "--output must be json or yaml, not {format:?}"
                )));
            }
            out(&super::encode(&rolled, format)?);
            return Ok(0);
        }
        match conn
            .client
            .update(catalog::of(Kind::DeploymentConfig), &rolled)
            .await
        {
            Ok(saved) => break saved,
            Err(e) if e.is_conflict() && attempts < 5 => attempts += 1,
            Err(e) => return Err(conn.error(e)),
        }
    };
    out(&format!(
        "deployment #{} rolled back to {target}\n",
        latest_version(&saved)
    ));
    let disabled: Vec<String> = dc["spec"]["triggers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["type"] == "ImageChange" && t["imageChangeParams"]["automatic"] == true)
        .map(|t| {
            t["imageChangeParams"]["from"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    if !disabled.is_empty() {
        out(&format!(
            "Warning: the following images triggers were disabled: {}\n  You can re-enable \
             them with: oc set triggers dc/{dc_name} --auto\n",
            disabled.join(", ")
        ));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(phase: &str, spec: i64, status: i64) -> Value {
        json!({
            "metadata": {"name": "web-2", "creationTimestamp": "2000-01-01T00:00:00Z",
                "annotations": {
                    "openshift.io/deployment.phase": phase,
                    "openshift.io/deployment-config.latest-version": "2",
                    "openshift.io/deployment.status-reason": "config change"}},
            "spec": {"replicas": spec}, "status": {"replicas": status},
        })
    }

    #[test]
    fn deployment_lines_read_like_oc() {
        let dc = json!({"spec": {}});
        let line = deployment_line(&dc, &rc("Complete", 3, 3), 0, true);
        assert!(line.starts_with("deployment #2 deployed "), "{line}");
        assert!(line.ends_with(" years ago - 3 pods"), "{line}");
        let line = deployment_line(&dc, &rc("Running", 3, 1), 2, true);
        assert!(line.starts_with("deployment #2 running for "), "{line}");
        assert!(
            line.ends_with(" - 1/3 pods growing to 3 (warning: 2 restarts)"),
            "{line}"
        );
        let line = deployment_line(&dc, &rc("Failed", 0, 0), 0, false);
        assert!(line.ends_with(" ago: config change"), "{line}");
        let line = deployment_line(&dc, &rc("Pending", 1, 1), 0, false);
        assert!(line.starts_with("deployment #2 pending "), "{line}");
        assert!(line.ends_with(" ago - 1 pod"), "{line}");
        let test = json!({"spec": {"test": true}});
        let line = deployment_line(&test, &rc("Complete", 0, 0), 0, true);
        assert!(line.starts_with("test deployment #2 deployed "), "{line}");
        assert!(line.ends_with(" ago - 0 pods"), "{line}");
    }

    #[test]
    fn a_waiting_config_says_what_it_waits_for() {
        let with = |t: Value| json!({"spec": {"triggers": t}});
        assert_eq!(
            waiting_on(&with(json!([{"type": "ConfigChange"}]))),
            "on update"
        );
        assert_eq!(waiting_on(&with(json!([]))), "for manual");
        let image = json!({"type": "ImageChange", "imageChangeParams": {"automatic": true}});
        assert_eq!(waiting_on(&with(json!([image.clone()]))), "on image");
        assert_eq!(
            waiting_on(&with(json!([image, {"type": "ConfigChange"}]))),
            "on image or update"
        );
    }
}
