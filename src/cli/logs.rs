//! `logs`: a pod's container log, the log of a pod of an RC, or a DeploymentConfig's
//! log subresource (its deployer's output during a rollout, then an application pod's).

use std::io::Write;

use serde_json::Value;

use crate::client::{Client, ListParams};
use crate::client::{Kind, catalog};

use super::resource::resolve;
use super::{CliError, Conn};

/// The flags of `logs`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogArgs {
    /// `POD`, `pod/NAME`, `rc/NAME` or `dc/NAME`, then optionally the container.
    #[arg(required = true, num_args = 1..=2)]
    pub target: Vec<String>,
    /// Follow the log.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The log of the previous instance of the container.
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// The container (default: the pod's default container or its first).
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// Only the last N lines.
    #[arg(long)]
    pub tail: Option<i64>,
    /// Only lines newer than this (`10s`, `5m`, `2h`).
    #[arg(long)]
    pub since: Option<String>,
    /// Prefix each line with its timestamp.
    #[arg(long)]
    pub timestamps: bool,
    /// The deployment version of a `dc/NAME` log.
    #[arg(long)]
    pub version: Option<i64>,
}

/// `--since`: a Go duration (`10s`, `5m`, `1h30m`), in whole seconds.
fn since_seconds(s: &str) -> Result<i64, CliError> {
    match super::wait::parse_flag_duration(s, "--since")? {
        (false, d) => Ok(d.as_secs() as i64),
        (true, _) => Err(CliError::msg(format!(
            "invalid argument {s:?} for \"--since\" flag: must be positive"
        ))),
    }
}

/// The container kubectl picks when none is named, saying so when there was a choice.
pub(crate) fn default_container(pod: &Value) -> Option<String> {
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()?
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let chosen = pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"]
        .as_str()
        .filter(|d| names.contains(d))
        .or(names.first().copied())?;
    if names.len() > 1 {
        eprintln!(
            "Defaulted container \"{chosen}\" out of: {}",
            names.join(", ")
        );
    }
    Some(chosen.to_string())
}

pub async fn logs(conn: &Conn, args: &LogArgs) -> Result<i32, CliError> {
    let (kind, name) = match args.target[0].split_once('/') {
        Some((k, n)) => (resolve(k)?.kind, n.to_string()),
        None => (Kind::Pod, args.target[0].clone()),
    };
    let container = args.container.clone().or(args.target.get(1).cloned());
    let ns = conn.namespace.as_str();
    let mut query: Vec<(&str, String)> = Vec::new();
    if args.follow {
        query.push(("follow", "true".into()));
    }
    if args.previous {
        query.push(("previous", "true".into()));
    }
    if let Some(t) = args.tail.filter(|t| *t >= 0) {
        query.push(("tailLines", t.to_string()));
    }
    if let Some(s) = &args.since {
        query.push(("sinceSeconds", since_seconds(s)?.to_string()));
    }
    if args.timestamps {
        query.push(("timestamps", "true".into()));
    }
    let path = match kind {
        Kind::DeploymentConfig => {
            if let Some(v) = args.version {
                query.push(("version", v.to_string()));
            }
            if let Some(c) = &container {
                query.push(("container", c.clone()));
            }
            format!(
                "{}/{name}/log",
                Client::collection_path(catalog::of(kind), Some(ns))
            )
        }
        Kind::Pod | Kind::ReplicationController => {
            let pod = if kind == Kind::Pod {
                conn.client
                    .get(catalog::of(Kind::Pod), Some(ns), &name)
                    .await
                    .map_err(|e| conn.error(e))?
            } else {
                pod_of_rc(conn, &name).await?
            };
            let pod_name = pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if let Some(c) = container.or_else(|| default_container(&pod)) {
                query.push(("container", c));
            }
            format!(
                "{}/{pod_name}/log",
                Client::collection_path(catalog::of(Kind::Pod), Some(ns))
            )
        }
        _ => {
            return Err(CliError::msg(format!(
                "cannot get the logs from {}: berth reads logs of pods, replication \
                 controllers and deployment configs",
                args.target[0]
            )));
        }
    };
    let mut stream = conn
        .client
        .raw_stream(&path, &query)
        .await
        .map_err(|e| conn.error(e))?;
    let mut stdout = std::io::stdout().lock();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| conn.error(e))?;
        if stdout
            .write_all(&chunk)
            .and_then(|_| stdout.flush())
            .is_err()
        {
            // The reader went away (`| head`).
            break;
        }
    }
    Ok(0)
}

/// The pod of an RC kubectl reads the log of: the oldest running one, else any.
pub(crate) async fn pod_of_rc(conn: &Conn, name: &str) -> Result<Value, CliError> {
    let rc = conn
        .client
        .get(
            catalog::of(Kind::ReplicationController),
            Some(&conn.namespace),
            name,
        )
        .await
        .map_err(|e| conn.error(e))?;
    let selector = rc["spec"]["selector"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let params = ListParams {
        label_selector: Some(selector),
        field_selector: None,
    };
    let mut pods = conn
        .client
        .list(catalog::of(Kind::Pod), Some(&conn.namespace), &params)
        .await
        .map_err(|e| conn.error(e))?
        .items;
    pods.sort_by_key(|p| {
        (
            p["status"]["phase"] != "Running",
            p["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    });
    let count = pods.len();
    let pod = pods.into_iter().next().ok_or_else(|| {
        CliError::msg(format!(
            "timed out waiting for the condition: no pods of replicationcontroller/{name}"
        ))
    })?;
    if count > 1 {
        eprintln!(
            "Found {count} pods, using pod/{}",
            pod["metadata"]["name"].as_str().unwrap_or_default()
        );
    }
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn since_takes_seconds_minutes_and_hours() {
        assert_eq!(since_seconds("10s").unwrap(), 10);
        assert_eq!(since_seconds("5m").unwrap(), 300);
        assert_eq!(since_seconds("2h").unwrap(), 7200);
        assert!(since_seconds("10").is_err());
        assert!(since_seconds("x").is_err());
    }

    #[test]
    fn the_default_container_is_the_annotated_one_or_the_first() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(default_container(&pod).as_deref(), Some("a"));
        let mut annotated = pod.clone();
        annotated["metadata"] =
            json!({"annotations": {"kubectl.kubernetes.io/default-container": "b"}});
        assert_eq!(default_container(&annotated).as_deref(), Some("b"));
        assert_eq!(default_container(&json!({})), None);
    }
}
