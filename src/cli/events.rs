//! `events [--for TYPE/NAME] [--types=Warning] [-A] [-w]`, laid out like `kubectl events`.

use serde_json::Value;

use crate::client::{Event, ListParams, WatchParams};
use crate::client::{Kind, catalog};
use crate::types::{age_seconds, human_duration};

use super::resource::resolve;
use super::tabwriter::{Layout, TabWriter};
use super::{CliError, Conn, out};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct EventArgs {
    /// Only the events of this object (`pod/web-1`).
    #[arg(long = "for")]
    pub for_object: Option<String>,
    /// Only events of these types (`Normal`, `Warning`), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub types: Vec<String>,
    /// The events of all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// After listing, print new events as they happen.
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[arg(long)]
    pub no_headers: bool,
}

/// When an event last happened: `lastTimestamp`, else `eventTime`.
fn last_seen(e: &Value) -> &str {
    e["lastTimestamp"]
        .as_str()
        .or(e["eventTime"].as_str())
        .or(e["metadata"]["creationTimestamp"].as_str())
        .unwrap_or_default()
}

fn since(ts: &str) -> String {
    age_seconds(ts)
        .map(human_duration)
        .unwrap_or_else(|| "<unknown>".into())
}

/// One row, tab-separated.
fn row(e: &Value, all_namespaces: bool) -> String {
    let count = e["count"].as_i64().unwrap_or(1);
    let first = e["firstTimestamp"].as_str().unwrap_or_default();
    let seen = if count > 1 && !first.is_empty() {
        format!("{} (x{count} over {})", since(last_seen(e)), since(first))
    } else {
        since(last_seen(e))
    };
    let obj = &e["involvedObject"];
    let mut line = String::new();
    if all_namespaces {
        line.push_str(e["metadata"]["namespace"].as_str().unwrap_or_default());
        line.push('\t');
    }
    line.push_str(&format!(
        "{seen}\t{}\t{}\t{}/{}\t{}\n",
        e["type"].as_str().unwrap_or_default(),
        e["reason"].as_str().unwrap_or_default(),
        obj["kind"].as_str().unwrap_or_default(),
        obj["name"].as_str().unwrap_or_default(),
        e["message"].as_str().unwrap_or_default().trim()
    ));
    line
}

pub async fn events(conn: &Conn, args: &EventArgs) -> Result<i32, CliError> {
    let res = catalog::of(Kind::Event);
    let ns = (!args.all_namespaces).then_some(conn.namespace.as_str());
    let mut fields = Vec::new();
    if let Some(target) = &args.for_object {
        let (kind, name) = target
            .split_once('/')
            .map(|(k, n)| resolve(k).map(|r| (r.kind_name.as_str(), n)))
            .unwrap_or(Ok(("Pod", target.as_str())))?;
        fields.push(format!("involvedObject.kind={kind}"));
        fields.push(format!("involvedObject.name={name}"));
    }
    let params = ListParams {
        label_selector: None,
        field_selector: (!fields.is_empty()).then(|| fields.join(",")),
    };
    let wanted = |e: &Value| {
        args.types.is_empty()
            || args.types.iter().any(|t| {
                e["type"]
                    .as_str()
                    .is_some_and(|x| x.eq_ignore_ascii_case(t))
            })
    };
    let list = conn
        .client
        .list(res, ns, &params)
        .await
        .map_err(|e| conn.error(e))?;
    let mut items: Vec<Value> = list.items.into_iter().filter(|e| wanted(e)).collect();
    items.sort_by(|a, b| last_seen(a).cmp(last_seen(b)));
    let mut w = TabWriter::new(Layout::TABLE).remember_widths();
    if items.is_empty() && !args.watch {
        match ns {
            Some(ns) => eprintln!("No events found in {ns} namespace."),
            None => eprintln!("No events found."),
        }
        return Ok(0);
    }
    if !args.no_headers {
        if args.all_namespaces {
            w.write("NAMESPACE\t");
        }
        w.write("LAST SEEN\tTYPE\tREASON\tOBJECT\tMESSAGE\n");
    }
    for e in &items {
        w.write(&row(e, args.all_namespaces));
    }
    out(&w.take());
    if !args.watch {
        return Ok(0);
    }
    let watch = WatchParams {
        selection: params,
        resource_version: list.resource_version,
        bookmarks: false,
        timeout: None,
    };
    let mut stream = conn
        .client
        .watch(res, ns, &watch)
        .await
        .map_err(|e| conn.error(e))?;
    while let Some(event) = stream.next().await {
        match event.map_err(|e| conn.error(e))? {
            Event::Added(e) | Event::Modified(e) if wanted(&e) => {
                w.write(&row(&e, args.all_namespaces));
                out(&w.take());
            }
            _ => {}
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_row_names_the_object_by_kind_and_counts_repeats() {
        let e = json!({
            "metadata": {"namespace": "default"},
            "type": "Warning", "reason": "BackOff", "count": 3,
            "firstTimestamp": "2020-01-01T00:00:00Z", "lastTimestamp": "2020-01-01T00:00:00Z",
            "involvedObject": {"kind": "Pod", "name": "web-1"},
            "message": "Back-off restarting failed container\n",
        });
        let r = row(&e, true);
        assert!(r.starts_with("default\t"), "{r}");
        assert!(r.contains(" (x3 over "), "{r}");
        assert!(
            r.ends_with("\tWarning\tBackOff\tPod/web-1\tBack-off restarting failed container\n"),
            "{r}"
        );
        let once = json!({"type": "Normal", "reason": "Scheduled",
            "eventTime": "2020-01-01T00:00:00.000000Z",
            "involvedObject": {"kind": "Pod", "name": "x"}, "message": "m"});
        assert!(row(&once, false).contains("d\tNormal\tScheduled\tPod/x\tm\n"));
    }
}
