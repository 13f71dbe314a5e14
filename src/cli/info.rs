//! What the cluster is: `version` and `api-resources`, both read from the server.

use reqwest::Method;
use serde_json::{Value, json};

use crate::client::RawRequest;

use super::tabwriter::{Layout, align};
use super::{CliError, Conn, out};

/// `version [--client] [-o json|yaml]`.
pub async fn version(conn: Option<&Conn>, output: Option<&str>) -> Result<i32, CliError> {
    let server = match conn {
        Some(c) => Some(
            c.client
                .raw_json(&RawRequest::new(Method::GET, "/version"))
                .await
                .map_err(|e| c.error(e))?,
        ),
        None => None,
    };
    let client = crate::types::version_info();
    match output {
        None => {
            out(&format!(
                "Client Version: {}\n",
                client["gitVersion"].as_str().unwrap_or_default()
            ));
            if let Some(s) = &server {
                out(&format!(
                    "Server Version: {}\n",
                    s["gitVersion"].as_str().unwrap_or_default()
                ));
            }
        }
        Some(fmt @ ("json" | "yaml")) => {
            let mut v = json!({"clientVersion": client});
            if let Some(s) = server {
                v["serverVersion"] = s;
            }
            out(&super::encode(&v, fmt)?);
        }
        Some(other) => {
            return Err(CliError::msg(format!(
                "--output must be 'yaml' or 'json', not {other:?}"
            )));
        }
    }
    Ok(0)
}

/// One row of `api-resources`.
struct Row {
    name: String,
    short: String,
    api_version: String,
    group: String,
    namespaced: bool,
    kind: String,
    verbs: String,
    categories: String,
}

/// Reads discovery: `/api/v1` and every version of `/apis`.
async fn discover(conn: &Conn) -> Result<Vec<Row>, CliError> {
    let get = |path: String| async move {
        conn.client
            .raw_json(&RawRequest::new(Method::GET, &path))
            .await
            .map_err(|e| conn.error(e))
    };
    let mut lists = Vec::new();
    let core = get("/api".into()).await?;
    for v in core["versions"].as_array().into_iter().flatten() {
        let v = v.as_str().unwrap_or_default();
        lists.push((
            String::new(),
            v.to_string(),
            get(format!("/api/{v}")).await?,
        ));
    }
    let groups = get("/apis".into()).await?;
    for g in groups["groups"].as_array().into_iter().flatten() {
        let name = g["name"].as_str().unwrap_or_default().to_string();
        // The preferred version only, as kubectl lists them.
        let gv = g["preferredVersion"]["groupVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let version = gv.rsplit('/').next().unwrap_or_default().to_string();
        lists.push((name, version, get(format!("/apis/{gv}")).await?));
    }
    let mut rows = Vec::new();
    for (group, version, list) in lists {
        for r in list["resources"].as_array().into_iter().flatten() {
            let name = r["name"].as_str().unwrap_or_default();
            if name.contains('/') {
                continue;
            }
            let strings = |k: &str| {
                r[k].as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
            };
            rows.push(Row {
                name: name.to_string(),
                short: strings("shortNames").join(","),
                api_version: if group.is_empty() {
                    version.clone()
                } else {
                    format!("{group}/{version}")
                },
                group: group.clone(),
                namespaced: r["namespaced"].as_bool().unwrap_or(false),
                kind: r["kind"].as_str().unwrap_or_default().to_string(),
                verbs: strings("verbs").join(","),
                categories: strings("categories").join(","),
            });
        }
    }
    rows.sort_by(|a, b| (&a.group, &a.name).cmp(&(&b.group, &b.name)));
    Ok(rows)
}

/// `api-resources [-o wide|name] [--namespaced=B] [--api-group=G] [--no-headers]`.
pub async fn api_resources(
    conn: &Conn,
    output: Option<&str>,
    namespaced: Option<bool>,
    api_group: Option<&str>,
    no_headers: bool,
) -> Result<i32, CliError> {
    let rows: Vec<Row> = discover(conn)
        .await?
        .into_iter()
        .filter(|r| namespaced.is_none_or(|n| n == r.namespaced))
        .filter(|r| api_group.is_none_or(|g| g == r.group))
        .collect();
    let wide = match output {
        None => false,
        Some("wide") => true,
        Some("name") => {
            for r in &rows {
                if r.group.is_empty() {
                    out(&format!("{}\n", r.name));
                } else {
                    out(&format!("{}.{}\n", r.name, r.group));
                }
            }
            return Ok(0);
        }
        Some(other) => {
            return Err(CliError::msg(format!("--output {other} is not available")));
        }
    };
    let mut table = String::new();
    if !no_headers {
        table.push_str("NAME\tSHORTNAMES\tAPIVERSION\tNAMESPACED\tKIND");
        table.push_str(if wide { "\tVERBS\tCATEGORIES\n" } else { "\n" });
    }
    for r in &rows {
        table.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}",
            r.name, r.short, r.api_version, r.namespaced, r.kind
        ));
        if wide {
            table.push_str(&format!(
                "\t[{}]\t{}",
                r.verbs.replace(',', " "),
                r.categories
            ));
        }
        table.push('\n');
    }
    out(&align(Layout::TABLE, &table));
    Ok(0)
}
