//! `create -f` and `apply -f`: manifests from files, directories or standard input, created
//! as they are, or applied the way kubectl applies them — client-side with the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation and a three-way strategic
//! merge patch, or server-side with an `application/apply-patch+yaml` patch.

use std::io::Read;
use std::path::Path;

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::client::{Client, RawRequest};
use crate::client::{ListMerge, Resource, Shape, catalog};

use super::resource::object_ref;
use super::{CliError, Conn, out};

/// The annotation client-side apply keeps the last applied manifest in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Where manifests come from: `-f FILE|DIR|-`, `-R`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FileArgs {
    /// A manifest file, a directory of them (.json, .yaml, .yml) or `-` for standard input.
    #[arg(short = 'f', long = "filename")]
    pub filenames: Vec<String>,
    /// Read the directories given with -f recursively.
    #[arg(short = 'R', long)]
    pub recursive: bool,
}

/// `create -f`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub files: FileArgs,
    /// `none`, `client` (print what would be created) or `server` (the server checks it).
    #[arg(long, default_value = "none", num_args = 0..=1, default_missing_value = "client")]
    pub dry_run: String,
    /// Store the manifest in the last-applied-configuration annotation, so that a later
    /// `apply` can compute its changes.
    #[arg(long)]
    pub save_config: bool,
    /// Print the created objects' names (`name`) instead of a message.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    #[command(flatten)]
    pub validate: ValidateArg,
}

/// `--validate`: how the server treats unknown or duplicate fields.
#[derive(Debug, Clone, clap::Args)]
pub struct ValidateArg {
    /// `strict` (or `true`): refuse unknown fields; `warn`: accept them with a warning;
    /// `ignore` (or `false`): drop them.
    #[arg(long = "validate", default_value = "strict", num_args = 0..=1, default_missing_value = "strict")]
    pub value: String,
}

impl ValidateArg {
    /// The `fieldValidation` query value.
    pub fn field_validation(&self) -> Result<&'static str, CliError> {
        match self.value.to_ascii_lowercase().as_str() {
            "strict" | "true" => Ok("Strict"),
            "warn" => Ok("Warn"),
            "ignore" | "false" => Ok("Ignore"),
            other => Err(CliError::msg(format!(
                "invalid - validate option \"{other}\"; must be one of: strict (or true), warn, ignore (or false)"
            ))),
        }
    }
}

/// `apply -f`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub files: FileArgs,
    /// Let the server merge the manifest (an apply patch owned by the field manager).
    #[arg(long)]
    pub server_side: bool,
    /// With --server-side: take over fields other managers own.
    #[arg(long)]
    pub force_conflicts: bool,
    /// The field manager of a server-side apply.
    #[arg(long, default_value = "kubectl")]
    pub field_manager: String,
    /// `none`, `client` or `server`.
    #[arg(long, default_value = "none", num_args = 0..=1, default_missing_value = "client")]
    pub dry_run: String,
    /// Print the applied objects' names (`name`) instead of a message.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    #[command(flatten)]
    pub validate: ValidateArg,
}

/// The dry-run strategy of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DryRun {
    None,
    Client,
    Server,
}

impl DryRun {
    pub fn parse(s: &str) -> Result<DryRun, CliError> {
        match s {
            "none" | "false" | "" => Ok(DryRun::None),
            "client" | "true" => Ok(DryRun::Client),
            "server" => Ok(DryRun::Server),
            other => Err(CliError::msg(format!(
                "Invalid dry-run value ({other}). Must be \"none\", \"server\", or \"client\"."
            ))),
        }
    }

    /// What follows the operation in messages.
    pub fn suffix(self) -> &'static str {
        match self {
            DryRun::None => "",
            DryRun::Client => " (dry run)",
            DryRun::Server => " (server dry run)",
        }
    }

    fn query(self, q: &mut Vec<(&'static str, String)>) {
        if self == DryRun::Server {
            q.push(("dryRun", "All".into()));
        }
    }
}

fn check_output(output: &Option<String>) -> Result<bool, CliError> {
    match output.as_deref() {
        None => Ok(false),
        Some("name") => Ok(true),
        Some(other) => Err(CliError::msg(format!(
            "unable to match a printer suitable for the output format \"{other}\", allowed \
             formats are: name"
        ))),
    }
}

/// One object of a manifest and the file it came from (`STDIN` for `-`).
#[derive(Debug, Clone)]
pub struct Manifest {
    pub source: String,
    pub obj: Value,
}

impl Manifest {
    pub fn name(&self) -> &str {
        self.obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    fn namespace(&self) -> &str {
        self.obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// The files `-f` names, directories expanded to the manifests in them.
fn files_of(arg: &str, recursive: bool, out: &mut Vec<String>) -> Result<(), CliError> {
    let path = Path::new(arg);
    let meta = std::fs::metadata(path)
        .map_err(|_| CliError::msg(format!("the path \"{arg}\" does not exist")))?;
    if !meta.is_dir() {
        out.push(arg.to_string());
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .map_err(|e| CliError::msg(format!("error reading {arg}: {e}")))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        let shown = p.to_string_lossy().into_owned();
        if p.is_dir() {
            if recursive {
                files_of(&shown, recursive, out)?;
            }
        } else if matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml" | "yml")
        ) {
            out.push(shown);
        }
    }
    Ok(())
}

/// The objects of one manifest text: a JSON value or YAML documents, `List`s unpacked.
pub fn parse_manifest(source: &str, text: &str) -> Result<Vec<Manifest>, CliError> {
    let bad = |e: &dyn std::fmt::Display| CliError::msg(format!("error parsing {source}: {e}"));
    let mut docs = Vec::new();
    if text.trim_start().starts_with('{') {
        let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        for v in stream {
            docs.push(v.map_err(|e| bad(&e))?);
        }
    } else {
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let v = Value::deserialize(doc).map_err(|e| bad(&e))?;
            docs.push(v);
        }
    }
    let mut out = Vec::new();
    for v in docs {
        unpack(source, v, &mut out)?;
    }
    Ok(out)
}

fn unpack(source: &str, v: Value, out: &mut Vec<Manifest>) -> Result<(), CliError> {
    match v {
        Value::Null => Ok(()),
        Value::Object(ref m) if m.is_empty() => Ok(()),
        Value::Object(mut m) => {
            let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
            if kind.ends_with("List") && m.get("items").is_some_and(Value::is_array) {
                if let Some(Value::Array(items)) = m.remove("items") {
                    for item in items {
                        unpack(source, item, out)?;
                    }
                }
                return Ok(());
            }
            let mut missing = Vec::new();
            if m.get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                missing.push("apiVersion not set");
            }
            if kind.is_empty() {
                missing.push("kind not set");
            }
            if !missing.is_empty() {
                let list = if missing.len() == 1 {
                    missing[0].to_string()
                } else {
                    format!("[{}]", missing.join(", "))
                };
                return Err(CliError::msg(format!(
                    "error validating \"{source}\": error validating data: {list}; if you \
                     choose to ignore these errors, turn validation off with --validate=false"
                )));
            }
            out.push(Manifest {
                source: source.to_string(),
                obj: Value::Object(m),
            });
            Ok(())
        }
        other => Err(CliError::msg(format!(
            "error parsing {source}: a manifest must be an object, not {other}"
        ))),
    }
}

/// Reads every manifest `-f` names, in order.
pub fn read_manifests(args: &FileArgs) -> Result<Vec<Manifest>, CliError> {
    let mut out = Vec::new();
    for arg in &args.filenames {
        if arg == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::msg(format!("error reading STDIN: {e}")))?;
            out.extend(parse_manifest("STDIN", &text)?);
            continue;
        }
        let mut files = Vec::new();
        files_of(arg, args.recursive, &mut files)?;
        for f in files {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| CliError::msg(format!("error reading {f}: {e}")))?;
            out.extend(parse_manifest(&f, &text)?);
        }
    }
    Ok(out)
}

/// The served resource of a manifest's `apiVersion` and `kind`.
pub fn mapping(m: &Manifest) -> Result<&'static Resource, CliError> {
    let api_version = m.obj["apiVersion"].as_str().unwrap_or("");
    let kind = m.obj["kind"].as_str().unwrap_or("");
    catalog::RESOURCES
        .iter()
        .map(|r| &**r)
        .find(|r| r.api_version() == api_version && r.kind_name == kind)
        .ok_or_else(|| {
            CliError::msg(format!(
                "resource mapping not found for name: \"{}\" namespace: \"{}\" from \"{}\": \
                 no matches for kind \"{kind}\" in version \"{api_version}\"\n\
                 ensure CRDs are installed first",
                m.name(),
                m.namespace(),
                m.source
            ))
        })
}

/// A manifest ready to be sent: its resource and namespace, `metadata.namespace` filled in.
pub struct Resolved {
    pub res: &'static Resource,
    pub ns: Option<String>,
    pub obj: Value,
    pub source: String,
}

impl Resolved {
    pub fn name(&self) -> &str {
        self.obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    pub fn object_path(&self) -> String {
        format!(
            "{}/{}",
            Client::collection_path(self.res, self.ns.as_deref()),
            self.name()
        )
    }

    /// The `kubectl apply` view of the object: `pods/x`.
    fn object_name(&self) -> String {
        format!("{}/{}", self.res.qualified_plural(), self.name())
    }
}

/// The resource and namespace of a manifest: its own namespace, else the request's; a
/// namespace given with `-n` must agree with the manifest's.
pub fn resolve(conn: &Conn, m: &Manifest) -> Result<Resolved, CliError> {
    let res = mapping(m)?;
    let mut obj = m.obj.clone();
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let ns = if res.namespaced {
        let own = m.namespace();
        if !own.is_empty() && conn.namespace_given && own != conn.namespace {
            return Err(CliError::msg(format!(
                "the namespace from the provided object \"{own}\" does not match the namespace \
                 \"{}\". You must pass '--namespace={own}' to perform this operation.",
                conn.namespace
            )));
        }
        let ns = if own.is_empty() {
            conn.namespace.clone()
        } else {
            own.to_string()
        };
        obj["metadata"]["namespace"] = json!(ns);
        Some(ns)
    } else {
        None
    };
    Ok(Resolved {
        res,
        ns,
        obj,
        source: m.source.clone(),
    })
}

/// Runs `each` on every manifest, carrying on after failures like kubectl: successes are
/// printed as they happen, the failures at the end (see [`report`]).
async fn for_each<F, Fut>(
    conn: &Conn,
    files: &FileArgs,
    verb: &str,
    each: F,
) -> Result<i32, CliError>
where
    F: Fn(Resolved) -> Fut,
    Fut: std::future::Future<Output = Result<(), CliError>>,
{
    if files.filenames.is_empty() {
        return Err(CliError::msg("must specify one of -f and -k"));
    }
    let manifests = read_manifests(files)?;
    if manifests.is_empty() {
        return Err(CliError::msg(format!("no objects passed to {verb}")));
    }
    let mut errors = Vec::new();
    for m in &manifests {
        let outcome = match resolve(conn, m) {
            Ok(r) => each(r).await,
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            errors.push(e);
        }
    }
    report(errors)
}

/// The end of a verb that carried on past failures: one failure is the verb's error;
/// several are printed one a line as kubectl prints them (server refusals with their
/// reason, other errors without the `error: ` prefix), exit code 1.
pub fn report(mut errors: Vec<CliError>) -> Result<i32, CliError> {
    if errors.len() <= 1 {
        return errors.pop().map_or(Ok(0), Err);
    }
    for e in &errors {
        if e.reason.is_some() {
            eprintln!("{}", e.text());
        } else {
            eprintln!("{}", e.message);
        }
    }
    Ok(1)
}

/// Sends a write; the server's warnings go to standard error as kubectl prints them.
pub async fn send(conn: &Conn, req: &RawRequest<'_>) -> Result<Value, crate::client::Error> {
    let (v, warnings) = conn.client.raw_json_warned(req).await?;
    for w in warnings {
        eprintln!("Warning: {w}");
    }
    Ok(v)
}

/// A server refusal of a write, named after the file as kubectl names it.
fn when(conn: &Conn, e: crate::client::Error, what: &str, source: &str) -> CliError {
    let mut err = conn.error(e);
    if err.reason.is_some() {
        err.message = format!("error when {what} \"{source}\": {}", err.message);
    }
    err
}

async fn post(
    conn: &Conn,
    r: &Resolved,
    manager: &str,
    dry: DryRun,
    validation: &str,
) -> Result<Value, CliError> {
    let path = Client::collection_path(r.res, r.ns.as_deref());
    let mut q = vec![
        ("fieldManager", manager.to_string()),
        ("fieldValidation", validation.to_string()),
    ];
    dry.query(&mut q);
    let mut req = RawRequest::new(Method::POST, &path);
    req.query = &q;
    req.body = Some(&r.obj);
    send(conn, &req)
        .await
        .map_err(|e| when(conn, e, "creating", &r.source))
}

fn created_name(created: &Value, r: &Resolved) -> String {
    created
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(r.name())
        .to_string()
}

/// `create -f ...`
pub async fn create(conn: &Conn, args: CreateArgs) -> Result<i32, CliError> {
    let dry = DryRun::parse(&args.dry_run)?;
    let names_only = check_output(&args.output)?;
    let save_config = args.save_config;
    let validation = args.validate.field_validation()?;
    for_each(conn, &args.files, "create", |mut r| async move {
        if save_config {
            set_last_applied(&mut r.obj);
        }
        let name = if dry == DryRun::Client {
            r.name().to_string()
        } else {
            let created = post(conn, &r, "kubectl-create", dry, validation).await?;
            created_name(&created, &r)
        };
        let reference = object_ref(r.res, &name);
        if names_only {
            out(&format!("{reference}\n"));
        } else {
            out(&format!("{reference} created{}\n", dry.suffix()));
        }
        Ok(())
    })
    .await
}

/// The manifest as the last-applied annotation records it: compact JSON with sorted keys,
/// the annotation itself left out, followed by a newline.
pub fn last_applied_of(obj: &Value) -> String {
    let mut v = obj.clone();
    if !v["metadata"].is_object() {
        v["metadata"] = json!({});
    }
    if !v["metadata"]["annotations"].is_object() {
        v["metadata"]["annotations"] = json!({});
    }
    if let Some(a) = v["metadata"]["annotations"].as_object_mut() {
        a.remove(LAST_APPLIED);
    }
    format!("{}\n", serde_json::to_string(&v).expect("JSON serializes"))
}

/// Adds the last-applied annotation to a manifest.
fn set_last_applied(obj: &mut Value) {
    let text = last_applied_of(obj);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"][LAST_APPLIED] = json!(text);
}

/// `apply -f ...`
pub async fn apply(conn: &Conn, args: ApplyArgs) -> Result<i32, CliError> {
    let dry = DryRun::parse(&args.dry_run)?;
    let names_only = check_output(&args.output)?;
    let validation = args.validate.field_validation()?;
    if args.server_side && dry == DryRun::Client {
        return Err(CliError::msg(
            "--dry-run=client doesn't work with --server-side (did you mean --dry-run=server instead?)",
        ));
    }
    if args.force_conflicts && !args.server_side {
        return Err(CliError::msg(
            "--force-conflicts only works with --server-side",
        ));
    }
    let args = &args;
    for_each(conn, &args.files, "apply", |r| async move {
        if r.name().is_empty() {
            return Err(CliError::msg(format!(
                "error when retrieving current configuration of \"{}\": resource name may not \
                 be empty",
                r.source
            )));
        }
        let done = if args.server_side {
            server_side(conn, &r, args, dry, validation).await?
        } else {
            client_side(conn, &r, dry, validation).await?
        };
        let reference = object_ref(r.res, r.name());
        if names_only {
            out(&format!("{reference}\n"));
        } else {
            out(&format!("{reference} {done}{}\n", dry.suffix()));
        }
        Ok(())
    })
    .await
}

async fn server_side(
    conn: &Conn,
    r: &Resolved,
    args: &ApplyArgs,
    dry: DryRun,
    validation: &str,
) -> Result<&'static str, CliError> {
    let path = r.object_path();
    let mut q = vec![
        ("fieldManager", args.field_manager.clone()),
        ("fieldValidation", validation.to_string()),
        ("force", args.force_conflicts.to_string()),
    ];
    dry.query(&mut q);
    let mut req = RawRequest::new(Method::PATCH, &path);
    req.query = &q;
    req.body = Some(&r.obj);
    req.content_type = Some("application/apply-patch+yaml");
    send(conn, &req)
        .await
        .map_err(|e| when(conn, e, "patching", &r.source))?;
    Ok("serverside-applied")
}

async fn client_side(
    conn: &Conn,
    r: &Resolved,
    dry: DryRun,
    validation: &str,
) -> Result<&'static str, CliError> {
    let mut modified = r.obj.clone();
    set_last_applied(&mut modified);
    let live = match conn.client.get(r.res, r.ns.as_deref(), r.name()).await {
        Ok(v) => v,
        Err(e) if e.is_not_found() => {
            if dry != DryRun::Client {
                let create = Resolved {
                    obj: modified,
                    res: r.res,
                    ns: r.ns.clone(),
                    source: r.source.clone(),
                };
                post(conn, &create, "kubectl-client-side-apply", dry, validation).await?;
            }
            return Ok("created");
        }
        Err(e) => {
            let mut err = conn.error(e);
            if err.reason.is_some() {
                err.message = format!(
                    "error when retrieving current configuration of:\nResource: \"{}\", \
                     GroupVersionKind: \"{}\"\nName: \"{}\", Namespace: \"{}\"\nfrom server for: \
                     \"{}\": {}",
                    gvr(r.res),
                    gvk(r.res),
                    r.name(),
                    r.ns.as_deref().unwrap_or(""),
                    r.source,
                    err.message
                );
            }
            return Err(err);
        }
    };
    let original: Option<Value> = match live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
    {
        Some(text) => Some(serde_json::from_str(text).map_err(|e| {
            CliError::msg(format!(
                "error when reading the {LAST_APPLIED} annotation of {}: {e}",
                r.object_name()
            ))
        })?),
        None => {
            eprintln!(
                "Warning: resource {} is missing the {LAST_APPLIED} annotation which is \
                 required by berth apply. berth apply should only be used on resources created \
                 declaratively by either berth create --save-config or berth apply. The missing \
                 annotation will be patched automatically.",
                r.object_name()
            );
            None
        }
    };
    let patch = three_way(Shape::of(r.res), original.as_ref(), &modified, &live);
    if patch.as_object().is_some_and(Map::is_empty) {
        return Ok("unchanged");
    }
    if dry == DryRun::Client {
        return Ok("configured");
    }
    let path = r.object_path();
    let mut q = vec![
        ("fieldManager", "kubectl-client-side-apply".to_string()),
        ("fieldValidation", validation.to_string()),
    ];
    dry.query(&mut q);
    let mut req = RawRequest::new(Method::PATCH, &path);
    req.query = &q;
    req.body = Some(&patch);
    req.content_type = Some("application/strategic-merge-patch+json");
    if let Err(e) = send(conn, &req).await {
        let mut err = conn.error(e);
        if err.reason.is_some() {
            err.message = format!(
                "error when applying patch:\n{}\nto:\nResource: \"{}\", GroupVersionKind: \
                 \"{}\"\nName: \"{}\", Namespace: \"{}\"\nfor: \"{}\": error when patching \
                 \"{}\": {}",
                serde_json::to_string(&patch).expect("JSON serializes"),
                gvr(r.res),
                gvk(r.res),
                r.name(),
                r.ns.as_deref().unwrap_or(""),
                r.source,
                r.source,
                err.message
            );
        }
        return Err(err);
    }
    Ok("configured")
}

/// `/v1, Resource=pods`, as kubectl names a resource in apply errors.
fn gvr(res: &Resource) -> String {
    format!("{}/{}, Resource={}", res.group, res.version, res.plural)
}

fn gvk(res: &Resource) -> String {
    format!("{}/{}, Kind={}", res.group, res.version, res.kind_name)
}

/// The strategic merge patch that turns `current` into `modified`: fields of `modified`
/// that differ from `current` are set, fields `original` (the last applied manifest) had
/// and `modified` no longer has are deleted, and fields only the server or other writers
/// set are left alone. Lists with a merge key (containers by name, ...) are patched
/// element by element with `$setElementOrder`, others replaced.
/// `shape` is the objects' type, whose merge rules say which lists merge by which key.
pub fn three_way(
    shape: Shape<'_>,
    original: Option<&Value>,
    modified: &Value,
    current: &Value,
) -> Value {
    let empty = Map::new();
    let m = modified.as_object().unwrap_or(&empty);
    Value::Object(diff_object(
        shape,
        original.and_then(Value::as_object),
        m,
        current.as_object(),
    ))
}

fn diff_object(
    shape: Shape<'_>,
    original: Option<&Map<String, Value>>,
    modified: &Map<String, Value>,
    current: Option<&Map<String, Value>>,
) -> Map<String, Value> {
    let mut patch = Map::new();
    for (k, mv) in modified {
        let cv = current.and_then(|c| c.get(k));
        let ov = original.and_then(|o| o.get(k));
        match (mv, cv) {
            (Value::Null, None | Some(Value::Null)) => {}
            (Value::Object(mo), Some(Value::Object(co))) => {
                let sub = diff_object(shape.field(k), ov.and_then(Value::as_object), mo, Some(co));
                if !sub.is_empty() {
                    patch.insert(k.clone(), Value::Object(sub));
                }
            }
            (Value::Array(ml), Some(Value::Array(cl))) => {
                let ol = ov.and_then(Value::as_array).map(Vec::as_slice);
                diff_list(shape, k, ol, ml, cl, &mut patch);
            }
            (mv, cv) if Some(mv) != cv => {
                patch.insert(k.clone(), mv.clone());
            }
            _ => {}
        }
    }
    if let Some(o) = original {
        for k in o.keys() {
            let present = current.is_some_and(|c| c.get(k).is_some_and(|v| !v.is_null()));
            if !modified.contains_key(k) && present {
                patch.insert(k.clone(), Value::Null);
            }
        }
    }
    patch
}

fn diff_list(
    shape: Shape<'_>,
    field: &str,
    original: Option<&[Value]>,
    modified: &[Value],
    current: &[Value],
    patch: &mut Map<String, Value>,
) {
    let rule = shape.list_merge(field);
    if rule == ListMerge::Union {
        let added: Vec<Value> = modified
            .iter()
            .filter(|v| !current.contains(v))
            .cloned()
            .collect();
        let removed: Vec<Value> = original
            .unwrap_or_default()
            .iter()
            .filter(|v| !modified.contains(v) && current.contains(v))
            .cloned()
            .collect();
        if !added.is_empty() {
            patch.insert(field.to_string(), Value::Array(added));
        }
        if !removed.is_empty() {
            patch.insert(
                format!("$deleteFromPrimitiveList/{field}"),
                Value::Array(removed),
            );
        }
        return;
    }
    let key = match rule {
        ListMerge::ByKey(key) => Some(key),
        _ => None,
    };
    let keyed = key.filter(|key| {
        modified
            .iter()
            .chain(current)
            .chain(original.unwrap_or_default())
            .all(|e| e.get(*key).is_some_and(|id| !id.is_null()))
    });
    let Some(key) = keyed else {
        if modified != current {
            patch.insert(field.to_string(), Value::Array(modified.to_vec()));
        }
        return;
    };
    let find = |list: &[Value], id: &Value| list.iter().find(|e| e.get(key) == Some(id)).cloned();
    let mut items = Vec::new();
    for me in modified {
        let id = &me[key];
        match find(current, id) {
            None => items.push(me.clone()),
            Some(ce) => {
                let oe = original.and_then(|o| find(o, id));
                let mut sub = diff_object(
                    shape.field(field).items(),
                    oe.as_ref().and_then(Value::as_object),
                    me.as_object().expect("keyed elements are objects"),
                    ce.as_object(),
                );
                if !sub.is_empty() {
                    sub.insert(key.to_string(), id.clone());
                    items.push(Value::Object(sub));
                }
            }
        }
    }
    for oe in original.unwrap_or_default() {
        let id = &oe[key];
        if find(modified, id).is_none() && find(current, id).is_some() {
            items.push(json!({key: id, "$patch": "delete"}));
        }
    }
    // The order of the manifest's elements among the ones the server has.
    let ids: Vec<&Value> = modified.iter().map(|e| &e[key]).collect();
    let current_order: Vec<&Value> = current
        .iter()
        .map(|e| &e[key])
        .filter(|id| ids.contains(id))
        .collect();
    let known: Vec<&Value> = ids
        .iter()
        .copied()
        .filter(|id| current_order.contains(id))
        .collect();
    let reordered = known != current_order;
    if !items.is_empty() || reordered {
        patch.insert(
            format!("$setElementOrder/{field}"),
            Value::Array(ids.iter().map(|id| json!({key: id})).collect()),
        );
    }
    if !items.is_empty() {
        patch.insert(field.to_string(), Value::Array(items));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Patch;

    fn pod(image: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "namespace": "default", "labels": {"app": "web", "tier": "fe"}},
            "spec": {"containers": [{"name": "main", "image": image}]},
        })
    }

    /// What the server stores: the manifest plus defaults and status.
    fn live(manifest: &Value) -> Value {
        let mut v = manifest.clone();
        v["metadata"]["uid"] = json!("u1");
        v["metadata"]["resourceVersion"] = json!("7");
        v["spec"]["restartPolicy"] = json!("Always");
        for c in v["spec"]["containers"].as_array_mut().unwrap() {
            c["imagePullPolicy"] = json!("IfNotPresent");
            c["terminationMessagePath"] = json!("/dev/termination-log");
        }
        v["status"] = json!({"phase": "Pending"});
        v
    }

    fn pods() -> Shape<'static> {
        Shape::of(catalog::of(crate::client::Kind::Pod))
    }

    fn patched(current: &Value, patch: &Value) -> Value {
        let res = catalog::of(crate::client::Kind::Pod);
        Patch::Strategic(patch.clone()).apply(res, current).unwrap()
    }

    #[test]
    fn an_unchanged_manifest_gives_an_empty_patch_despite_server_defaults() {
        let m = pod("a:1");
        assert_eq!(three_way(pods(), Some(&m), &m, &live(&m)), json!({}));
    }

    #[test]
    fn a_changed_image_patches_the_container_by_name_and_keeps_defaults() {
        let old = pod("a:1");
        let new = pod("a:2");
        let cur = live(&old);
        let p = three_way(pods(), Some(&old), &new, &cur);
        assert_eq!(
            p,
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "main"}],
                "containers": [{"name": "main", "image": "a:2"}],
            }})
        );
        let out = patched(&cur, &p);
        assert_eq!(out["spec"]["containers"][0]["image"], "a:2");
        assert_eq!(
            out["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(out["spec"]["restartPolicy"], "Always");
    }

    #[test]
    fn fields_removed_since_the_last_apply_are_deleted_others_are_kept() {
        let old = pod("a:1");
        let mut new = pod("a:1");
        new["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("tier");
        let mut cur = live(&old);
        // Someone else added a label: apply leaves it alone.
        cur["metadata"]["labels"]["owner"] = json!("ops");
        let p = three_way(pods(), Some(&old), &new, &cur);
        assert_eq!(p, json!({"metadata": {"labels": {"tier": null}}}));
        let out = patched(&cur, &p);
        assert_eq!(
            out["metadata"]["labels"],
            json!({"app": "web", "owner": "ops"})
        );

        // Without a last-applied configuration nothing is deleted.
        assert_eq!(three_way(pods(), None, &new, &cur), json!({}));
    }

    #[test]
    fn list_elements_are_added_deleted_and_reordered_by_merge_key() {
        let mut old = pod("a:1");
        old["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "side", "image": "s:1"}));
        let mut new = pod("a:1");
        new["spec"]["containers"] = json!([
            {"name": "extra", "image": "e:1"},
            {"name": "main", "image": "a:1"},
        ]);
        let cur = live(&old);
        let p = three_way(pods(), Some(&old), &new, &cur);
        assert_eq!(
            p["spec"]["$setElementOrder/containers"],
            json!([{"name": "extra"}, {"name": "main"}])
        );
        assert_eq!(
            p["spec"]["containers"],
            json!([{"name": "extra", "image": "e:1"}, {"name": "side", "$patch": "delete"}])
        );
        let out = patched(&cur, &p);
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["extra", "main"]);
        assert_eq!(
            out["spec"]["containers"][1]["imagePullPolicy"],
            "IfNotPresent"
        );
    }

    #[test]
    fn lists_without_a_merge_key_are_replaced_and_primitive_unions_use_directives() {
        let mut old = pod("a:1");
        old["spec"]["containers"][0]["command"] = json!(["sleep", "1"]);
        old["metadata"]["finalizers"] = json!(["a/x", "a/y"]);
        let mut new = pod("a:1");
        new["spec"]["containers"][0]["command"] = json!(["sleep", "2"]);
        new["metadata"]["finalizers"] = json!(["a/x", "a/z"]);
        let cur = live(&old);
        let p = three_way(pods(), Some(&old), &new, &cur);
        assert_eq!(
            p["spec"]["containers"],
            json!([{"name": "main", "command": ["sleep", "2"]}])
        );
        assert_eq!(p["metadata"]["finalizers"], json!(["a/z"]));
        assert_eq!(
            p["metadata"]["$deleteFromPrimitiveList/finalizers"],
            json!(["a/y"])
        );
        let out = patched(&cur, &p);
        assert_eq!(out["metadata"]["finalizers"], json!(["a/x", "a/z"]));
        assert_eq!(
            out["spec"]["containers"][0]["command"],
            json!(["sleep", "2"])
        );
    }

    #[test]
    fn a_field_set_again_after_someone_changed_it_is_restored() {
        let m = pod("a:1");
        let mut cur = live(&m);
        cur["metadata"]["labels"]["app"] = json!("other");
        let p = three_way(pods(), Some(&m), &m, &cur);
        assert_eq!(p, json!({"metadata": {"labels": {"app": "web"}}}));
    }

    #[test]
    fn the_last_applied_annotation_reads_like_kubectls() {
        let m = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "newpod", "namespace": "default", "labels": {"app": "new"}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/new:1"}]},
        });
        assert_eq!(
            last_applied_of(&m),
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"annotations\":{},\"labels\":{\"app\":\"new\"},\"name\":\"newpod\",\"namespace\":\"default\"},\"spec\":{\"containers\":[{\"image\":\"registry.example/new:1\",\"name\":\"main\"}]}}\n"
        );
        let mut with = m.clone();
        set_last_applied(&mut with);
        // The annotation never records itself.
        assert_eq!(last_applied_of(&with), last_applied_of(&m));
    }

    #[test]
    fn manifests_parse_from_json_multi_document_yaml_and_lists() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n";
        let ms = parse_manifest("f.yaml", yaml).unwrap();
        let names: Vec<&str> = ms.iter().map(Manifest::name).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let ms = parse_manifest(
            "f.json",
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"}}"#,
        )
        .unwrap();
        assert_eq!(ms[0].name(), "j");

        let err = parse_manifest("bad.yaml", "kind: [\n").unwrap_err();
        assert!(
            err.message.starts_with("error parsing bad.yaml: "),
            "{}",
            err.message
        );
        let err = parse_manifest("k.yaml", "metadata:\n  name: x\n").unwrap_err();
        assert_eq!(
            err.message,
            "error validating \"k.yaml\": error validating data: [apiVersion not set, kind not \
             set]; if you choose to ignore these errors, turn validation off with \
             --validate=false"
        );
    }

    #[test]
    fn unknown_kinds_are_named_like_kubectl_names_them() {
        let m = &parse_manifest(
            "f.yaml",
            "apiVersion: v1\nkind: Foo\nmetadata:\n  name: x\n",
        )
        .unwrap()[0];
        assert_eq!(
            mapping(m).unwrap_err().message,
            "resource mapping not found for name: \"x\" namespace: \"\" from \"f.yaml\": no \
             matches for kind \"Foo\" in version \"v1\"\nensure CRDs are installed first"
        );
        let m = &parse_manifest(
            "f.yaml",
            "apiVersion: apps.openshift.io/v1\nkind: DeploymentConfig\nmetadata:\n  name: x\n",
        )
        .unwrap()[0];
        assert_eq!(mapping(m).unwrap().plural, "deploymentconfigs");
    }
}
