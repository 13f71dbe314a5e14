//! Verbs that change a field or two of existing objects: `scale`, `label`, `annotate`,
//! `patch`.

use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::client::{Patch, RawRequest};

use super::resource::{Picking, object_ref, targets};
use super::{CliError, Conn, out};

impl Selection {
    /// How [`Conn::pick`] selects for these arguments.
    pub fn picking(&self) -> Picking<'_> {
        Picking {
            selector: self.selector.as_deref(),
            all: self.all,
            ..Default::default()
        }
    }
}

/// Which objects a verb acts on: named ones, or those a selector (or `--all`) picks.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Selection {
    /// `TYPE NAME...`, `TYPE/NAME...`.
    pub args: Vec<String>,
    /// Act on the objects with these labels (`app=web,tier!=db`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Act on all objects of the type in the namespace.
    #[arg(long)]
    pub all: bool,
}

/// `scale --replicas=N [--current-replicas=M] TYPE NAME`.
pub async fn scale(
    conn: &Conn,
    sel: &Selection,
    replicas: i64,
    current: Option<i64>,
) -> Result<i32, CliError> {
    if replicas < 0 {
        return Err(CliError::msg(
            "The --replicas=COUNT flag is required, and COUNT must be greater than or equal to 0",
        ));
    }
    let targets = targets(&sel.args)?;
    let picked = conn.pick(targets, &sel.picking()).await?;
    for p in picked {
        if !p.res.scale {
            return Err(CliError::msg(format!(
                "cannot scale {}: it has no scale subresource",
                p.res.qualified_plural()
            )));
        }
        let path = format!(
            "{}/{}/scale",
            crate::client::Client::collection_path(p.res, p.ns.as_deref()),
            p.name
        );
        // A write that meets a newer version (a controller wrote the status) reads again
        // and checks the precondition again, as kubectl's scaler does.
        let mut attempts = 0;
        loop {
            let mut scale = conn
                .client
                .raw_json(&RawRequest::new(Method::GET, &path))
                .await
                .map_err(|e| conn.error(e))?;
            if let Some(want) = current {
                let have = scale["spec"]["replicas"].as_i64().unwrap_or(0);
                if have != want {
                    return Err(CliError::msg(format!(
                        "Expected replicas to be {want}, was {have}"
                    )));
                }
            }
            scale["spec"]["replicas"] = json!(replicas);
            // With --current-replicas the write carries the read's resourceVersion, so a
            // change in between is a conflict rather than lost.
            if current.is_none() {
                scale["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("resourceVersion"));
            }
            let mut req = RawRequest::new(Method::PUT, &path);
            req.body = Some(&scale);
            match conn.client.raw(&req).await {
                Ok(_) => break,
                Err(e) if e.is_conflict() && attempts < 5 => attempts += 1,
                Err(e) => return Err(conn.error(e)),
            }
        }
        out(&format!("{} scaled\n", object_ref(p.res, &p.name)));
    }
    Ok(0)
}

/// Which metadata map `label` and `annotate` change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetaMap {
    Labels,
    Annotations,
}

/// The arguments of `label` and `annotate`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MetaArgs {
    #[command(flatten)]
    pub sel: Selection,
    /// Change keys that already have a value.
    #[arg(long)]
    pub overwrite: bool,
    /// Print the labels (or annotations).
    #[arg(long)]
    pub list: bool,
}

/// `label`/`annotate TYPE NAME k=v k2- [--overwrite] [--list]`.
pub async fn set_meta(conn: &Conn, which: MetaMap, args: &MetaArgs) -> Result<i32, CliError> {
    let (sel, overwrite, list) = (&args.sel, args.overwrite, args.list);
    let field = match which {
        MetaMap::Labels => "labels",
        MetaMap::Annotations => "annotations",
    };
    // The object arguments come first, then `key=value` and `key-` changes.
    let first_change = sel
        .args
        .iter()
        .position(|a| a.contains('=') || (a.ends_with('-') && !a.contains('/')))
        .unwrap_or(sel.args.len());
    let (objects, changes) = sel.args.split_at(first_change);
    if changes.is_empty() && !list {
        return Err(CliError::msg(format!(
            "at least one {} update is required",
            &field[..field.len() - 1]
        )));
    }
    let mut set = Map::new();
    let mut remove = Vec::new();
    for c in changes {
        if let Some((k, v)) = c.split_once('=') {
            if which == MetaMap::Labels {
                let mut problems = crate::types::names::qualified_name(k);
                problems.extend(crate::types::names::label_value(v));
                if !problems.is_empty() {
                    return Err(CliError::msg(format!(
                        "invalid label spec: {c}: {}",
                        problems.join("; ")
                    )));
                }
            }
            set.insert(k.to_string(), json!(v));
        } else if let Some(k) = c.strip_suffix('-') {
            remove.push(k.to_string());
        } else {
            return Err(CliError::msg(format!("invalid {field} spec: {c}")));
        }
    }
    let targets = targets(objects)?;
    let picked = conn.pick(targets, &sel.picking()).await?;
    for p in picked {
        let obj = conn
            .client
            .get(p.res, p.ns.as_deref(), &p.name)
            .await
            .map_err(|e| conn.error(e))?;
        let current = obj["metadata"][field]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if list {
            let mut keys: Vec<_> = current.iter().collect();
            keys.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in keys {
                out(&format!("{k}={}\n", v.as_str().unwrap_or_default()));
            }
            if changes.is_empty() {
                continue;
            }
        }
        if !overwrite {
            for (k, v) in &set {
                if let Some(have) = current.get(k)
                    && have != v
                {
                    return Err(CliError::msg(format!(
                        "'{k}' already has a value ({}), and --overwrite is false",
                        have.as_str().unwrap_or_default()
                    )));
                }
            }
        }
        let mut patch = set.clone();
        for k in &remove {
            patch.insert(k.clone(), Value::Null);
        }
        let mut next = current.clone();
        for (k, v) in &set {
            next.insert(k.clone(), v.clone());
        }
        for k in &remove {
            next.remove(k);
        }
        let verb = match which {
            MetaMap::Labels => "labeled",
            MetaMap::Annotations => "annotated",
        };
        let message = if next == current {
            format!("not {verb}")
        } else if which == MetaMap::Labels && set.is_empty() {
            "unlabeled".to_string()
        } else {
            verb.to_string()
        };
        if next != current {
            let body = Patch::Merge(json!({"metadata": {field: patch}}));
            conn.client
                .patch(p.res, p.ns.as_deref(), &p.name, &body)
                .await
                .map_err(|e| conn.error(e))?;
        }
        out(&format!("{} {message}\n", object_ref(p.res, &p.name)));
    }
    Ok(0)
}

/// `patch TYPE NAME -p PATCH [--type=strategic|merge|json] [--subresource=status]`.
pub async fn patch(
    conn: &Conn,
    sel: &Selection,
    body: &str,
    kind: &str,
    subresource: Option<&str>,
) -> Result<i32, CliError> {
    let value: Value = serde_yaml_ng::from_str(body)
        .map_err(|e| CliError::msg(format!("unable to parse \"{body}\": {e}")))?;
    let patch = match kind {
        "strategic" => Patch::Strategic(value),
        "merge" => Patch::Merge(value),
        "json" => Patch::Json(value),
        other => {
            return Err(CliError::msg(format!(
                "--type must be one of [json merge strategic], not \"{other}\""
            )));
        }
    };
    let status = match subresource {
        None => false,
        Some("status") => true,
        Some(other) => {
            return Err(CliError::msg(format!(
                "invalid subresource value: \"{other}\". Must be one of [status scale]"
            )));
        }
    };
    let targets = targets(&sel.args)?;
    let picked = conn.pick(targets, &sel.picking()).await?;
    for p in picked {
        let before = conn
            .client
            .get(p.res, p.ns.as_deref(), &p.name)
            .await
            .map_err(|e| conn.error(e))?;
        let after = if status {
            conn.client
                .patch_status(p.res, p.ns.as_deref(), &p.name, &patch)
                .await
        } else {
            conn.client
                .patch(p.res, p.ns.as_deref(), &p.name, &patch)
                .await
        }
        .map_err(|e| conn.error(e))?;
        let changed = before["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"];
        out(&format!(
            "{} patched{}\n",
            object_ref(p.res, &p.name),
            if changed { "" } else { " (no change)" }
        ));
    }
    Ok(0)
}
