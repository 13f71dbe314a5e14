//! `delete TYPE NAME... | TYPE/NAME... | -f FILE | TYPE -l SELECTOR | TYPE --all`: deletes,
//! then (by default) waits by watch until the objects are gone, like kubectl.

use reqwest::Method;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::client::Resource;
use crate::client::{Client, RawRequest};

use super::apply::{DryRun, FileArgs, read_manifests, report, resolve, send};
use super::resource::{Picked, Picking, object_ref, targets};
use super::wait::{Outcome, follow, parse_duration, timed_out};
use super::{CliError, Conn, out};

#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// `TYPE NAME...`, `TYPE/NAME...`, or `TYPE` with -l or --all.
    pub resources: Vec<String>,
    #[command(flatten)]
    pub files: FileArgs,
    /// Delete the objects matching this label selector.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Delete the objects matching this field selector.
    #[arg(long)]
    pub field_selector: Option<String>,
    /// Delete every object of the types given in the namespace.
    #[arg(long)]
    pub all: bool,
    /// With -l or --all: in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// What happens to dependents: background, foreground or orphan.
    #[arg(long, default_value = "background", num_args = 0..=1, default_missing_value = "background")]
    pub cascade: String,
    /// Seconds the object has to terminate (-1: its own default; 0 needs --force).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub grace_period: i64,
    /// Delete at once: a grace period of 1 second.
    #[arg(long)]
    pub now: bool,
    /// Delete without waiting for the object to terminate (grace period 0).
    #[arg(long)]
    pub force: bool,
    /// Wait until the objects are gone.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub wait: bool,
    /// Treat objects that do not exist as deleted (the default with -l and --all).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub ignore_not_found: Option<bool>,
    /// How long to wait for the objects to be gone (0: as long as it takes).
    #[arg(long, default_value = "0s")]
    pub timeout: String,
    /// `none`, `client` or `server`.
    #[arg(long, default_value = "none", num_args = 0..=1, default_missing_value = "client")]
    pub dry_run: String,
    /// Print the deleted objects' names (`name`) instead of a message.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
}

/// One object to delete.
type Item = Picked;

fn propagation(cascade: &str) -> Result<&'static str, CliError> {
    match cascade {
        "background" | "true" => Ok("Background"),
        "foreground" => Ok("Foreground"),
        "orphan" | "false" => Ok("Orphan"),
        other => Err(CliError::msg(format!(
            "invalid cascade value ({other}). Must be \"background\", \"foreground\", or \"orphan\""
        ))),
    }
}

/// kubectl's name of a kind in delete messages: `pod`, `deploymentconfig.apps.openshift.io`.
fn kind_string(res: &Resource) -> String {
    let kind = res.kind_name.to_ascii_lowercase();
    if res.group.is_empty() {
        kind
    } else {
        format!("{kind}.{}", res.group)
    }
}

const NO_RESOURCES: &str = "You must provide one or more resources by argument or filename.\n\
Example resource specifications include:\n   '-f rsrc.yaml'\n   '--filename=rsrc.json'\n   \
'<resource> <name>'\n   '<resource>'";

/// The objects the arguments name.
async fn items(conn: &Conn, args: &DeleteArgs) -> Result<(Vec<Item>, bool), CliError> {
    let selecting = args.all || args.selector.is_some() || args.field_selector.is_some();
    let mut out = Vec::new();
    if !args.files.filenames.is_empty() {
        if !args.resources.is_empty() {
            return Err(CliError::msg(
                "Only one type of resource selection may be specified: filenames, resources \
                 and names, or resources and label selector",
            ));
        }
        for m in read_manifests(&args.files)? {
            let r = resolve(conn, &m)?;
            out.push(Item {
                name: r.name().to_string(),
                res: r.res,
                ns: r.ns,
            });
        }
        return Ok((out, false));
    }
    if args.resources.is_empty() {
        return Err(CliError::msg(NO_RESOURCES));
    }
    let how = Picking {
        selector: args.selector.as_deref(),
        field_selector: args.field_selector.as_deref(),
        all: args.all,
        all_namespaces: args.all_namespaces,
    };
    out.extend(conn.pick(targets(&args.resources)?, &how).await?);
    Ok((out, selecting))
}

/// `delete ...`
pub async fn run(conn: &Conn, args: DeleteArgs) -> Result<i32, CliError> {
    let dry = DryRun::parse(&args.dry_run)?;
    let policy = propagation(&args.cascade)?;
    let names_only = match args.output.as_deref() {
        None => false,
        Some("name") => true,
        Some(other) => {
            return Err(CliError::msg(format!(
                "unexpected -o output mode: {other}. We only support '-o name'"
            )));
        }
    };
    let mut grace = args.grace_period;
    if args.now {
        if grace != -1 {
            return Err(CliError::msg(
                "--now and --grace-period cannot be specified together",
            ));
        }
        grace = 1;
    }
    if args.force && grace < 0 {
        grace = 0;
    }
    if grace == 0 && !args.force {
        // Immediate deletion needs --force; without it the shortest grace is 1s.
        grace = 1;
    }
    let (negative, timeout) = parse_duration(&args.timeout)?;
    let deadline = (!negative && !timeout.is_zero()).then(|| Instant::now() + timeout);

    let (items, selecting) = items(conn, &args).await?;
    let ignore_not_found = args.ignore_not_found.unwrap_or(selecting);
    if items.is_empty() {
        out("No resources found\n");
        return Ok(0);
    }
    if grace == 0 {
        eprintln!(
            "Warning: Immediate deletion does not wait for confirmation that the running \
             resource has been terminated. The resource may continue to run on the cluster \
             indefinitely."
        );
    }
    let operation = if grace == 0 {
        "force deleted"
    } else {
        "deleted"
    };

    let mut errors = Vec::new();
    let mut deleted = Vec::new();
    for it in &items {
        let path = format!(
            "{}/{}",
            Client::collection_path(it.res, it.ns.as_deref()),
            it.name
        );
        let answer = if dry == DryRun::Client {
            conn.client.get(it.res, it.ns.as_deref(), &it.name).await
        } else {
            let mut body =
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy});
            if grace >= 0 {
                body["gracePeriodSeconds"] = json!(grace);
            }
            let mut q = Vec::new();
            if dry == DryRun::Server {
                q.push(("dryRun", "All".to_string()));
            }
            let mut req = RawRequest::new(Method::DELETE, &path);
            req.query = &q;
            req.body = Some(&body);
            send(conn, &req).await
        };
        let answer = match answer {
            Ok(a) => a,
            Err(e) if e.is_not_found() && ignore_not_found => continue,
            Err(e) => {
                errors.push(conn.error(e));
                continue;
            }
        };
        if names_only {
            out(&format!("{}\n", object_ref(it.res, &it.name)));
        } else {
            let place = match &it.ns {
                Some(ns) if it.res.namespaced => format!(" from {ns} namespace"),
                _ => String::new(),
            };
            out(&format!(
                "{} \"{}\" {operation}{}{place}\n",
                kind_string(it.res),
                it.name,
                dry.suffix()
            ));
        }
        let uid = answer
            .pointer("/metadata/uid")
            .or_else(|| answer.pointer("/details/uid"))
            .and_then(Value::as_str)
            .map(str::to_string);
        deleted.push((it, uid));
    }

    if args.wait && dry == DryRun::None {
        let waits = deleted.iter().map(|(it, uid)| async move {
            // Gone, or replaced by a new object of the same name.
            let gone = |o: Option<&Value>| match o {
                None => true,
                Some(o) => uid
                    .as_deref()
                    .is_some_and(|u| o.pointer("/metadata/uid").and_then(Value::as_str) != Some(u)),
            };
            match follow(
                conn,
                it.res,
                it.ns.as_deref(),
                &it.name,
                deadline,
                false,
                gone,
            )
            .await?
            {
                Outcome::Met => Ok(()),
                Outcome::TimedOut => Err(timed_out(it.res, &it.name)),
            }
        });
        for r in futures_util::future::join_all(waits).await {
            if let Err(e) = r {
                errors.push(e);
            }
        }
    }

    report(errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Kind, catalog};

    #[test]
    fn cascade_values_map_to_propagation_policies() {
        assert_eq!(propagation("background").unwrap(), "Background");
        assert_eq!(propagation("true").unwrap(), "Background");
        assert_eq!(propagation("foreground").unwrap(), "Foreground");
        assert_eq!(propagation("orphan").unwrap(), "Orphan");
        assert_eq!(propagation("false").unwrap(), "Orphan");
        assert_eq!(
            propagation("x").unwrap_err().text(),
            "error: invalid cascade value (x). Must be \"background\", \"foreground\", or \"orphan\""
        );
    }

    #[test]
    fn kinds_are_named_like_kubectl_names_them() {
        assert_eq!(kind_string(catalog::of(Kind::Pod)), "pod");
        assert_eq!(
            kind_string(catalog::of(Kind::DeploymentConfig)),
            "deploymentconfig.apps.openshift.io"
        );
    }
}
