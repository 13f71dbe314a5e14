//! `describe`: the texts `kubectl describe` (pods, replication controllers, nodes,
//! namespaces) and `oc describe dc` print, byte for byte, as pure functions of the
//! objects the caller fetched, their events and the current time.
//!
//! The `describe` verb at the end fetches the object, its events and the related objects
//! each describer needs, and prints the texts.
//!
//! Each describer writes `label:\tvalue` lines, indented two spaces per level like
//! kubectl's `PrefixWriter`, and lays them out with Go's tabwriter rules
//! ([`Layout::DESCRIBE`] for kubectl, [`Layout::TABS`] for oc's DeploymentConfig
//! describer, which pads with tabs).
//!
//! This module holds what every describer shares (the clock, the JSON readers, the
//! prefix writer and kubectl's common printers: labels, annotations, tolerations, taints,
//! events) and the verb; the describers live in one file per group of kinds.

mod autoscaling;
mod cluster;
mod config;
mod deploymentconfig;
mod generic;
mod pod_spec;
mod pods;
mod policy;
mod resources;
mod sort;
mod workloads;

pub use autoscaling::horizontal_pod_autoscaler;
pub use cluster::{namespace, node};
pub use config::{config_map, secret, service_account};
pub use deploymentconfig::deployment_config;
pub use generic::generic;
pub use pod_spec::pod_template;
pub use pods::pod;
pub use policy::pod_disruption_budget;
pub use workloads::{
    cron_job, daemon_set, deployment, job, replica_set, replication_controller, stateful_set,
};

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::Value;

use crate::cli::tabwriter::{Layout, align};
use crate::cli::{CliError, Conn};
use crate::client::{Kind, Resource, catalog};
use crate::client::{ListParams, RawRequest};
use crate::types::human_duration;
use crate::types::labels::map_at;
use crate::types::openshift;

use sort::go_sort;
use workloads::rs_selector;

/// The current time and the zone timestamps are shown in (kubectl prints local time).
#[derive(Debug, Clone)]
pub struct Clock {
    pub now: Timestamp,
    pub zone: TimeZone,
}

impl Clock {
    /// The wall clock and the machine's time zone, as kubectl uses them.
    pub fn system() -> Self {
        Clock {
            now: Timestamp::now(),
            zone: TimeZone::system(),
        }
    }

    /// A fixed instant shown in UTC (tests).
    pub fn utc(now: Timestamp) -> Self {
        Clock {
            now,
            zone: TimeZone::UTC,
        }
    }

    /// Whole seconds from `t` to now (negative when `t` is in the future).
    fn seconds_since(&self, t: Timestamp) -> i64 {
        let nanos = self.now.as_nanosecond() - t.as_nanosecond();
        i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX)
    }

    /// `translateTimestampSince`: a kubectl age, `<unknown>` without a timestamp.
    fn since(&self, timestamp: Option<&str>) -> String {
        match timestamp.and_then(parse_time) {
            None => "<unknown>".to_string(),
            Some(t) => kube_age(self.seconds_since(t)),
        }
    }

    /// Go's `time.RFC1123Z` in the clock's zone; a missing time is Go's zero time.
    fn rfc1123z(&self, timestamp: Option<&str>) -> String {
        match timestamp.and_then(parse_time) {
            None => "Mon, 01 Jan 0001 00:00:00 +0000".to_string(),
            Some(t) => t
                .to_zoned(self.zone.clone())
                .strftime("%a, %d %b %Y %H:%M:%S %z")
                .to_string(),
        }
    }
}

fn parse_time(s: &str) -> Option<Timestamp> {
    if s.is_empty() {
        return None;
    }
    s.parse().ok()
}

/// kubectl's `duration.HumanDuration`: `<invalid>` for more than a second in the future.
fn kube_age(seconds: i64) -> String {
    if seconds < -1 {
        "<invalid>".to_string()
    } else {
        human_duration(seconds)
    }
}

pub use super::print::oc_age;

// ---------------------------------------------------------------------------------------
// Reading JSON objects

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn opt_text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

fn flag(v: &Value, pointer: &str) -> bool {
    v.pointer(pointer).and_then(Value::as_bool).unwrap_or(false)
}

fn list<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Go's `%v` of a JSON scalar (`true`, `5`, `x`; `null` prints `<nil>`).
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_string(),
        other => other.to_string(),
    }
}

/// An IntOrString as Go's `String()` prints it.
fn int_or_string(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => plain(other),
    }
}

/// Go's `%v` of a string slice: `[a b c]`.
fn go_slice(items: &[Value]) -> String {
    let words: Vec<String> = items.iter().map(plain).collect();
    format!("[{}]", words.join(" "))
}

/// `labels.FormatLabels`: `k=v,k2=v2` sorted by key, `<none>` when empty.
fn format_labels(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        "<none>".to_string()
    } else {
        labels_string(map)
    }
}

/// `labels.Set.String()`: `k=v,k2=v2` sorted by key, empty when empty.
fn labels_string(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `Kind/name` of the controller owner reference, if any.
fn controlled_by(obj: &Value) -> Option<String> {
    list(obj, "/metadata/ownerReferences")
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .map(|r| format!("{}/{}", text(r, "/kind"), text(r, "/name")))
}

fn controller_uid(obj: &Value) -> Option<&str> {
    list(obj, "/metadata/ownerReferences")
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .and_then(|r| r["uid"].as_str())
}

// ---------------------------------------------------------------------------------------
// The prefix writer and kubectl's shared printers

/// kubectl's `PrefixWriter`: text collected for the tabwriter, two spaces per level.
#[derive(Default)]
struct Out {
    buf: String,
}

impl Out {
    /// Writes at an indentation level, escaping terminal control sequences (kubectl's
    /// `printers.WriteEscaped`: ESC as `^[`, CR as `\\r`).
    fn w(&mut self, level: usize, text: &str) {
        for _ in 0..level {
            self.buf.push_str("  ");
        }
        for c in text.chars() {
            match c {
                '\x1b' => self.buf.push_str("^["),
                '\r' => self.buf.push_str("\\r"),
                c => self.buf.push(c),
            }
        }
    }

    /// Writes as is (oc's own lines go straight to its tabwriter).
    fn raw(&mut self, text: &str) {
        self.buf.push_str(text);
    }

    fn finish(self, layout: Layout) -> String {
        align(layout, &self.buf)
    }
}

/// `printLabelsMultilineWithIndent`.
fn labels_multiline(
    out: &mut Out,
    initial_indent: &str,
    title: &str,
    inner_indent: &str,
    labels: &BTreeMap<String, String>,
) {
    out.w(0, &format!("{initial_indent}{title}:{inner_indent}"));
    if labels.is_empty() {
        out.w(0, "<none>\n");
        return;
    }
    for (i, (k, v)) in labels.iter().enumerate() {
        if i != 0 {
            out.w(0, initial_indent);
            out.w(0, inner_indent);
        }
        out.w(0, &format!("{k}={v}\n"));
    }
}

fn labels_multiline_simple(out: &mut Out, title: &str, labels: &BTreeMap<String, String>) {
    labels_multiline(out, "", title, "\t", labels);
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const MAX_ANNOTATION_LEN: usize = 140;

/// `printAnnotationsMultiline`: `key: value` lines; long or multi-line values go below
/// their key, cut at 140 characters.
fn annotations_multiline(out: &mut Out, title: &str, annotations: &BTreeMap<String, String>) {
    out.w(0, &format!("{title}:\t"));
    let keys: Vec<&String> = annotations.keys().filter(|k| *k != LAST_APPLIED).collect();
    if keys.is_empty() {
        out.w(0, "<none>\n");
        return;
    }
    let indent = "\t";
    for (i, key) in keys.into_iter().enumerate() {
        if i != 0 {
            out.w(0, indent);
        }
        let value = annotations[key]
            .strip_suffix('\n')
            .unwrap_or(&annotations[key]);
        if value.len() + key.len() + 2 > MAX_ANNOTATION_LEN || value.contains('\n') {
            out.w(0, &format!("{key}:\n"));
            for line in value.split('\n') {
                out.w(
                    0,
                    &format!("{indent}  {}\n", shorten(line, MAX_ANNOTATION_LEN - 2)),
                );
            }
        } else {
            out.w(0, &format!("{key}: {value}\n"));
        }
    }
}

/// Go's `s[:max] + "..."` on bytes, kept on a character boundary.
fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// `printTolerationsMultilineWithIndent`.
fn tolerations_multiline(out: &mut Out, title: &str, tolerations: &[Value]) {
    out.w(0, &format!("{title}:\t"));
    if tolerations.is_empty() {
        out.w(0, "<none>\n");
        return;
    }
    let mut sorted: Vec<&Value> = tolerations.iter().collect();
    go_sort(&mut sorted, |a, b| text(a, "/key") < text(b, "/key"));
    for (i, t) in sorted.into_iter().enumerate() {
        if i != 0 {
            out.w(0, "\t");
        }
        let (key, value, effect) = (text(t, "/key"), text(t, "/value"), text(t, "/effect"));
        let mut line = key.to_string();
        if !value.is_empty() {
            let _ = write!(line, "={value}");
        }
        if !effect.is_empty() {
            let _ = write!(line, ":{effect}");
        }
        if text(t, "/operator") == "Exists" && value.is_empty() {
            if !key.is_empty() || !effect.is_empty() {
                line.push_str(" op=Exists");
            } else {
                line.push_str("op=Exists");
            }
        }
        if let Some(s) = int(t, "/tolerationSeconds") {
            let _ = write!(line, " for {s}s");
        }
        out.w(0, &format!("{line}\n"));
    }
}

/// `printNodeTaintsMultiline`: sorted by effect, then key.
fn taints_multiline(out: &mut Out, title: &str, taints: &[Value]) {
    out.w(0, &format!("{title}:\t"));
    if taints.is_empty() {
        out.w(0, "<none>\n");
        return;
    }
    let mut sorted: Vec<&Value> = taints.iter().collect();
    let key = |t: &Value| format!("{},{}", text(t, "/effect"), text(t, "/key"));
    go_sort(&mut sorted, |a, b| key(a) < key(b));
    for (i, t) in sorted.into_iter().enumerate() {
        if i != 0 {
            out.w(0, "\t");
        }
        let value = text(t, "/value");
        let shown = if value.is_empty() {
            format!("{}:{}", text(t, "/key"), text(t, "/effect"))
        } else {
            format!("{}={value}:{}", text(t, "/key"), text(t, "/effect"))
        };
        out.w(0, &format!("{shown}\n"));
    }
}

/// `DescribeEvents`: oldest first by when last seen; repeated events show
/// `<last> (xN over <first>)`.
fn describe_events(out: &mut Out, events: &[Value], clock: &Clock) {
    if events.is_empty() {
        out.w(0, "Events:\t<none>\n");
        return;
    }
    let mut sorted: Vec<&Value> = events.iter().collect();
    // kubectl's `eventTime`: the series' last sighting, else the last timestamp, else the
    // event time. Missing timestamps are Go's zero time, before every other.
    let at = |e: &Value| {
        let series = e.pointer("/series").filter(|v| v.is_object());
        match series {
            Some(s) => opt_text(s, "/lastObservedTime").and_then(parse_time),
            None => opt_text(e, "/lastTimestamp")
                .and_then(parse_time)
                .or_else(|| opt_text(e, "/eventTime").and_then(parse_time)),
        }
    };
    go_sort(&mut sorted, |a, b| at(a) < at(b));
    out.w(0, "Events:\n  Type\tReason\tAge\tFrom\tMessage\n");
    out.w(1, "----\t------\t----\t----\t-------\n");
    for e in sorted {
        let first = match opt_text(e, "/eventTime").and_then(parse_time) {
            Some(_) => clock.since(opt_text(e, "/eventTime")),
            None => clock.since(opt_text(e, "/firstTimestamp")),
        };
        let count = int(e, "/count").unwrap_or(0);
        let interval = if e.pointer("/series").is_some_and(Value::is_object) {
            format!(
                "{} (x{} over {first})",
                clock.since(opt_text(e, "/series/lastObservedTime")),
                int(e, "/series/count").unwrap_or(0),
            )
        } else if count > 1 {
            format!(
                "{} (x{count} over {first})",
                clock.since(opt_text(e, "/lastTimestamp"))
            )
        } else {
            first
        };
        let mut source = text(e, "/source/component");
        if source.is_empty() {
            source = text(e, "/reportingComponent");
        }
        out.w(
            1,
            &format!(
                "{}\t{}\t{interval}\t{source}\t{}\n",
                text(e, "/type"),
                text(e, "/reason"),
                text(e, "/message").trim(),
            ),
        );
    }
}

/// The `Name:` and `Namespace:` lines most describers open with.
fn name_and_namespace(out: &mut Out, obj: &Value) {
    out.w(0, &format!("Name:\t{}\n", text(obj, "/metadata/name")));
    out.w(
        0,
        &format!("Namespace:\t{}\n", text(obj, "/metadata/namespace")),
    );
}

// ---------------------------------------------------------------------------------------
// The `describe` verb: fetching what the describers need

/// `describe (TYPE [NAME_PREFIX...] | TYPE/NAME...) [-l selector]`.
#[derive(Debug, Clone, clap::Args)]
pub struct DescribeArgs {
    /// `TYPE [NAME_PREFIX...]` or `TYPE/NAME...`.
    pub args: Vec<String>,
    /// Describe the objects with these labels (`app=web,tier!=db`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Describe objects of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Show the objects' events.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub show_events: bool,
}

/// Describes the objects the arguments name, one after the other, like `kubectl describe`:
/// with a single `TYPE NAME` that names no object, the objects whose names start with
/// `NAME` are described instead.
pub async fn describe(conn: &Conn, args: &DescribeArgs) -> Result<i32, CliError> {
    let targets = super::resource::targets(&args.args)?;
    let clock = Clock::system();
    let by_prefix = args.args.len() == 2 && !args.args.iter().any(|a| a.contains('/'));
    if !args.args.iter().any(|a| a.contains('/')) && targets.len() > 1 && args.args.len() > 1 {
        return Err(CliError::msg("you may only specify a single resource type"));
    }
    let mut texts = Vec::new();
    // Objects that could not be fetched are reported after the others are printed.
    let mut errors = Vec::new();
    for t in &targets {
        let ns = if args.all_namespaces {
            None
        } else {
            t.res.namespaced.then(|| conn.namespace.clone())
        };
        if t.names.is_empty() {
            let params = ListParams {
                label_selector: args.selector.clone(),
                field_selector: None,
            };
            let list = conn
                .client
                .list(t.res, ns.as_deref(), &params)
                .await
                .map_err(|e| conn.error(e))?;
            for obj in &list.items {
                texts.push(describe_object(conn, t.res, obj, args.show_events, &clock).await?);
            }
            continue;
        }
        if args.selector.is_some() {
            return Err(CliError::msg(
                "name cannot be provided when a selector is specified",
            ));
        }
        for name in &t.names {
            match conn.client.get(t.res, ns.as_deref(), name).await {
                Ok(obj) => {
                    texts.push(describe_object(conn, t.res, &obj, args.show_events, &clock).await?)
                }
                Err(e) if e.is_not_found() && by_prefix => {
                    let list = conn
                        .client
                        .list(t.res, ns.as_deref(), &ListParams::default())
                        .await
                        .map_err(|e| conn.error(e))?;
                    let matching: Vec<&Value> = list
                        .items
                        .iter()
                        .filter(|o| text(o, "/metadata/name").starts_with(name.as_str()))
                        .collect();
                    if matching.is_empty() {
                        return Err(conn.error(e));
                    }
                    // kubectl prints each match with a newline after it, no separator.
                    for obj in matching {
                        let text =
                            describe_object(conn, t.res, obj, args.show_events, &clock).await?;
                        super::out(&format!("{text}\n"));
                    }
                    return Ok(0);
                }
                Err(e) => errors.push(conn.error(e).text()),
            }
        }
    }
    if texts.is_empty() && errors.is_empty() {
        if args.all_namespaces {
            eprintln!("No resources found");
        } else {
            eprintln!("No resources found in {} namespace.", conn.namespace);
        }
    }
    super::out(&texts.join("\n\n"));
    for e in &errors {
        eprintln!("{e}");
    }
    Ok(i32::from(!errors.is_empty()))
}

/// Fetches what the describer of `obj` needs and describes it.
async fn describe_object(
    conn: &Conn,
    res: &'static Resource,
    obj: &Value,
    show_events: bool,
    clock: &Clock,
) -> Result<String, CliError> {
    let ns = opt_text(obj, "/metadata/namespace");
    let name = text(obj, "/metadata/name");
    let uid = text(obj, "/metadata/uid");
    let events = |kind: Option<&'static str>, uid: String| {
        let namespace = ns.unwrap_or("");
        async move {
            if !show_events {
                return None;
            }
            Some(events_about(conn, name, namespace, kind, &uid).await)
        }
    };
    Ok(match res.kind {
        Kind::Pod => {
            // A mirror pod's events are about the static pod it mirrors.
            let uid = openshift::annotation(obj, MIRROR_ANNOTATION).unwrap_or(uid);
            let events = events(None, uid.to_string()).await;
            pod(obj, events.as_deref(), clock)
        }
        Kind::ReplicationController => {
            let selector = labels_string(&map_at(obj, "/spec/selector"));
            let pods = list_or_empty(conn, Kind::Pod, ns, Some(selector)).await?;
            let events = events(Some("ReplicationController"), uid.to_string()).await;
            replication_controller(obj, &pods, events.as_deref(), clock)
        }
        Kind::ReplicaSet => {
            let selector = rs_selector(obj);
            let pods = list_or_empty(conn, Kind::Pod, ns, Some(selector)).await?;
            let events = events(Some("ReplicaSet"), uid.to_string()).await;
            replica_set(obj, &pods, events.as_deref(), clock)
        }
        Kind::Deployment => {
            let rss = list_or_empty(conn, Kind::ReplicaSet, ns, Some(rs_selector(obj))).await?;
            let events = events(Some("Deployment"), uid.to_string()).await;
            deployment(obj, &rss, events.as_deref(), clock)
        }
        Kind::DaemonSet => {
            let pods = list_or_empty(conn, Kind::Pod, ns, Some(rs_selector(obj))).await?;
            let events = events(Some("DaemonSet"), uid.to_string()).await;
            daemon_set(obj, &pods, events.as_deref(), clock)
        }
        Kind::Job => {
            let events = events(Some("Job"), uid.to_string()).await;
            job(obj, events.as_deref(), clock)
        }
        Kind::CronJob => {
            let events = events(Some("CronJob"), uid.to_string()).await;
            cron_job(obj, events.as_deref(), clock)
        }
        Kind::StatefulSet => {
            let pods = list_or_empty(conn, Kind::Pod, ns, Some(rs_selector(obj))).await?;
            let events = events(Some("StatefulSet"), uid.to_string()).await;
            stateful_set(obj, &pods, events.as_deref(), clock)
        }
        Kind::PodDisruptionBudget => {
            let events = events(Some("PodDisruptionBudget"), uid.to_string()).await;
            pod_disruption_budget(obj, events.as_deref(), clock)
        }
        Kind::HorizontalPodAutoscaler => {
            let events = events(Some("HorizontalPodAutoscaler"), uid.to_string()).await;
            horizontal_pod_autoscaler(obj, events.as_deref(), clock)
        }
        Kind::DeploymentConfig => {
            let by_dc = format!("{}={name}", openshift::DEPLOYMENT_CONFIG_LABEL);
            let rcs = list_or_empty(conn, Kind::ReplicationController, ns, Some(by_dc)).await?;
            let pods = list_or_empty(conn, Kind::Pod, ns, None).await?;
            let events = events(Some("DeploymentConfig"), uid.to_string()).await;
            deployment_config(obj, &rcs, &pods, events.as_deref(), clock)
        }
        Kind::Node => {
            let lease = conn
                .client
                .get(catalog::of(Kind::Lease), Some(NODE_LEASE_NAMESPACE), name)
                .await
                .ok();
            let params = ListParams {
                label_selector: None,
                field_selector: Some(format!(
                    "spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed"
                )),
            };
            let pods = conn
                .client
                .list(catalog::of(Kind::Pod), None, &params)
                .await
                .map_err(|e| conn.error(e))?
                .items;
            // The node's events name it by uid (controllers) or by name (the node agent).
            let events = match events(Some("Node"), uid.to_string()).await {
                Some(mut by_uid) => {
                    if let Some(by_name) = events(Some("Node"), name.to_string()).await {
                        by_uid.extend(by_name);
                    }
                    Some(by_uid)
                }
                None => None,
            };
            node(obj, lease.as_ref(), &pods, events.as_deref(), clock)
        }
        Kind::ConfigMap => {
            let events = events(Some(&res.kind_name), uid.to_string()).await;
            config_map(obj, events.as_deref(), clock)
        }
        Kind::Secret => secret(obj),
        Kind::ServiceAccount => {
            let secrets = conn
                .client
                .list(catalog::of(Kind::Secret), ns, &ListParams::default())
                .await
                .ok()
                .map(|l| l.items);
            let events = events(Some(&res.kind_name), uid.to_string()).await;
            service_account(obj, secrets.as_deref(), events.as_deref(), clock)
        }
        Kind::Namespace => {
            let quotas =
                optional_list(conn, &format!("/api/v1/namespaces/{name}/resourcequotas")).await?;
            let limits =
                optional_list(conn, &format!("/api/v1/namespaces/{name}/limitranges")).await?;
            namespace(obj, quotas.as_deref(), limits.as_deref(), clock)
        }
        _ => {
            let events = events(Some(&res.kind_name), uid.to_string()).await;
            generic(obj, events.as_deref(), clock)
        }
    })
}

/// The annotation that holds the uid of the static pod a mirror pod stands for.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Where node leases live.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The items at a list path, `None` when the server does not serve it.
async fn optional_list(conn: &Conn, path: &str) -> Result<Option<Vec<Value>>, CliError> {
    let req = RawRequest::new(reqwest::Method::GET, path);
    match conn.client.raw_json(&req).await {
        Ok(list) => Ok(Some(list["items"].as_array().cloned().unwrap_or_default())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(conn.error(e)),
    }
}

async fn list_or_empty(
    conn: &Conn,
    kind: Kind,
    ns: Option<&str>,
    label_selector: Option<String>,
) -> Result<Vec<Value>, CliError> {
    let params = ListParams {
        label_selector,
        field_selector: None,
    };
    conn.client
        .list(catalog::of(kind), ns, &params)
        .await
        .map(|l| l.items)
        .map_err(|e| conn.error(e))
}

/// The events about one object, in the order the server lists them; none when they
/// cannot be read (kubectl describes the object anyway).
async fn events_about(
    conn: &Conn,
    name: &str,
    namespace: &str,
    kind: Option<&str>,
    uid: &str,
) -> Vec<Value> {
    let mut selector = format!("involvedObject.name={name},involvedObject.namespace={namespace}");
    if let Some(kind) = kind {
        let _ = write!(selector, ",involvedObject.kind={kind}");
    }
    if !uid.is_empty() {
        let _ = write!(selector, ",involvedObject.uid={uid}");
    }
    let params = ListParams {
        label_selector: None,
        field_selector: Some(selector),
    };
    let ns = (!namespace.is_empty()).then_some(namespace);
    match conn
        .client
        .list(catalog::of(Kind::Event), ns, &params)
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list events");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests;
