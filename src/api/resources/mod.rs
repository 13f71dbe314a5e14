//! Resource requests: `/api/v1/...` and `/apis/{group}/{version}/...` parsed into a
//! target (resource, namespace, name, subresource) and dispatched to the registry by verb.

mod watch;

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use super::AppState;
use super::error::{Error, Result};
use super::protobuf;
use crate::registry::catalog::{Served, Serves, Subresource};
use crate::registry::strategy::Acted;
use crate::registry::table::{self, IncludeObject};
use crate::registry::{
    self, BodyNotes, DeleteOptions, FieldValidation, ListOptions, Part, Patch, Resource,
    WatchEvent, WatchOptions, WriteOptions, catalog,
};
use crate::types::{fields, labels};

/// Largest request body accepted (3 MiB, as the Kubernetes API server).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// What a request path names.
#[derive(Debug)]
struct Target {
    res: Arc<Resource>,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

/// The target of a request's path. A legacy watch path also makes `query` a watch's.
fn request_target(
    served: &Served,
    group: &str,
    version: &str,
    rest: &str,
    method: &Method,
    query: &mut Cow<'_, Query>,
) -> Result<Target> {
    match rest.strip_prefix("watch/") {
        Some(watched) if *method == Method::GET => {
            legacy_watch(served, group, version, watched, query.to_mut())
        }
        _ => parse_target(served, group, version, rest),
    }
}

/// The target of a legacy watch path (`/api/v1/watch/namespaces/NS/pods[/NAME]`, which
/// kube-apiserver still serves): a watch of the collection, of the one object if named.
fn legacy_watch(
    served: &Served,
    group: &str,
    version: &str,
    rest: &str,
    query: &mut Query,
) -> Result<Target> {
    let mut t = parse_target(served, group, version, rest)?;
    if t.sub.is_some() {
        return Err(Error::NoRoute);
    }
    if let Some(name) = t.name.take() {
        let by_name = format!("metadata.name={name}");
        let field = match query.remove("fieldSelector").filter(|f| !f.is_empty()) {
            Some(f) => format!("{f},{by_name}"),
            None => by_name,
        };
        query.insert("fieldSelector".into(), field);
    }
    query.insert("watch".into(), "true".into());
    Ok(t)
}

fn parse_target(served: &Served, group: &str, version: &str, rest: &str) -> Result<Target> {
    let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let find = |plural: &str| served.find(group, version, plural);
    let (res, namespace, tail) = match segs.as_slice() {
        ["namespaces", ns, plural, tail @ ..] if find(plural).is_some_and(|r| r.namespaced) => {
            (find(plural).expect("checked"), Some(ns.to_string()), tail)
        }
        [plural, tail @ ..] => (find(plural).ok_or(Error::NoRoute)?, None, tail),
        [] => return Err(Error::NoRoute),
    };
    let (name, sub) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, sub] => (Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(Error::NoRoute),
    };
    // A namespaced object is only reachable through its namespace.
    if res.namespaced && namespace.is_none() && name.is_some() {
        return Err(Error::NoRoute);
    }
    match sub.as_deref() {
        None => {}
        Some("status") if res.status => {}
        Some("scale") if res.scale => {}
        // What the kind's descriptor routes here (the rest, such as a pod's exec, has
        // routes of its own).
        Some(s) if subresource(res, s).is_some_and(|d| d.serves != Serves::Elsewhere) => {}
        Some(_) => return Err(Error::NoRoute),
    }
    Ok(Target {
        res: res.clone(),
        namespace,
        name,
        sub,
    })
}

/// The descriptor of subresource `name` of `res`, beyond status and scale.
fn subresource<'r>(res: &'r Resource, name: &str) -> Option<&'r Subresource> {
    res.subresources.iter().find(|s| s.name == name)
}

pub type Query = HashMap<String, String>;

/// Whether a boolean query parameter that is present is true, as Kubernetes reads it:
/// anything but `0` and `false` (in any case), the empty value included (`?watch`).
pub(super) fn truthy(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// A boolean query parameter: false when absent, else [`truthy`].
pub(super) fn flag(q: &Query, name: &str) -> bool {
    q.get(name).is_some_and(|v| truthy(v))
}

fn write_options(q: &Query) -> Result<WriteOptions> {
    let dry_run = match q.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(Error::BadRequest(format!(
                "unsupported dryRun value {other:?}: only \"All\" is supported"
            )));
        }
    };
    let field_validation = match q.get("fieldValidation").map(String::as_str) {
        None | Some("") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Warn") => FieldValidation::Warn,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(Error::BadRequest(format!(
                "fieldValidation must be one of Strict, Warn or Ignore, not {other:?}"
            )));
        }
    };
    Ok(WriteOptions {
        dry_run,
        field_validation,
        body: Default::default(),
        manager: None,
        user: None,
    })
}

/// Who makes a write, as the API server names the manager of the fields it sets:
/// `fieldManager`, else the client's product name from its User-Agent (`kubectl`,
/// `curl`).
fn field_manager(q: &Query, headers: &HeaderMap) -> Option<String> {
    q.get("fieldManager")
        .filter(|m| !m.is_empty())
        .cloned()
        .or_else(|| {
            let agent = headers.get(header::USER_AGENT)?.to_str().ok()?;
            let name = agent.split('/').next()?.trim();
            (!name.is_empty()).then(|| name.chars().take(128).collect())
        })
}

/// A write's answer: the object, with its warnings as `Warning` headers.
fn written(code: StatusCode, w: registry::Written) -> Response {
    let mut r = json_ok(code, w.object);
    for warning in w.warnings {
        let text = format!("299 - {}", json!(warning));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

fn list_options(q: &Query) -> Result<ListOptions> {
    Ok(ListOptions {
        label: labels::Selector::parse(q.get("labelSelector").map_or("", String::as_str))
            .map_err(|e| Error::BadRequest(format!("unable to parse requirement: {e}")))?,
        field: fields::Selector::parse(q.get("fieldSelector").map_or("", String::as_str))
            .map_err(Error::BadRequest)?,
        // As in Kubernetes, a limit of 0 or less asks for the whole list.
        limit: int_param(q, "limit")?
            .filter(|l| *l > 0)
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
        resource_version: q.get("resourceVersion").cloned(),
        resource_version_match: q
            .get("resourceVersionMatch")
            .filter(|m| !m.is_empty())
            .cloned(),
    })
}

/// An integer query parameter (a 64-bit one, as Kubernetes' are): refused with a 400
/// when it is not one, rather than ignored or left to overflow later.
pub(super) fn int_param(q: &Query, name: &str) -> Result<Option<i64>> {
    let Some(v) = q.get(name).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    v.trim().parse::<i64>().map(Some).map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "out of the range of a 64-bit integer"
            }
            _ => "not an integer",
        };
        Error::BadRequest(format!("invalid {name} {v:?}: {why}"))
    })
}

pub(super) fn json_ok(code: StatusCode, body: Bytes) -> Response {
    let mut r = (code, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A list's `metadata`: its resourceVersion, and its continue token and the number of
/// objects after it if there are more.
fn list_meta(list: &registry::List) -> Value {
    let mut meta = json!({"resourceVersion": list.revision.to_string()});
    if let Some(c) = &list.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(n) = list.remaining {
        meta["remainingItemCount"] = json!(n);
    }
    meta
}

/// A list answer, assembled from the stored bytes of its items.
fn list_body(res: &Resource, list: &registry::List) -> Bytes {
    let meta = list_meta(list);
    let head = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
        json!(res.list_kind()),
        json!(res.api_version()),
        meta
    );
    let size = head.len() + list.items.iter().map(|i| i.len() + 1).sum::<usize>() + 2;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(head.as_bytes());
    for (i, item) in list.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.extend_from_slice(b"]}");
    Bytes::from(out)
}

fn media_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|ct| {
            ct.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
}

/// A protobuf-encoded object as JSON: malformed bodies are a 400, kinds or encodings the
/// decoder does not know a 415.
fn protobuf_body(body: &[u8]) -> Result<Value> {
    protobuf::decode(body).map_err(|e| match e {
        protobuf::DecodeError::Malformed(_) => Error::BadRequest(e.to_string()),
        protobuf::DecodeError::UnknownKind { .. } | protobuf::DecodeError::ContentEncoding(_) => {
            Error::UnsupportedMediaType(e.to_string())
        }
    })
}

/// Bodies larger than this are decoded on a blocking thread: parsing (and checking for
/// keys given twice) a large one is CPU work that would hold a runtime thread, and the
/// other clients' requests on it, for its whole length.
const DECODE_OFF_THREAD: usize = 64 * 1024;

/// `decode(body)`, on a blocking thread when the body is large (see
/// [`DECODE_OFF_THREAD`]).
async fn decoded<T: Send + 'static>(
    body: &Bytes,
    decode: impl FnOnce(&[u8]) -> Result<T> + Send + 'static,
) -> Result<T> {
    if body.len() <= DECODE_OFF_THREAD {
        return decode(body);
    }
    let body = body.clone();
    match tokio::task::spawn_blocking(move || decode(&body)).await {
        Ok(decoded) => decoded,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => Err(Error::Unavailable(
                "the server is shutting down: send the request again once it is back".into(),
            )),
        },
    }
}

/// The body of a POST or PUT: JSON (also without a Content-Type), YAML or protobuf.
pub(super) fn json_body(headers: &HeaderMap, body: &[u8]) -> Result<Value> {
    Ok(checked_body(headers, body)?.0)
}

/// A request's object, and what decoding it noted (fields named twice).
fn checked_body(headers: &HeaderMap, body: &[u8]) -> Result<(Value, BodyNotes)> {
    let (v, notes) = match media_type(headers).as_deref() {
        None | Some("application/json") | Some("") => {
            registry::schema::parse_json(body).map_err(|e| {
                Error::BadRequest(format!("the body of the request is not valid JSON: {e}"))
            })?
        }
        Some("application/yaml") => registry::schema::parse_yaml(body).map_err(|e| {
            Error::BadRequest(format!("the body of the request is not valid YAML: {e}"))
        })?,
        Some("application/vnd.kubernetes.protobuf") => (protobuf_body(body)?, BodyNotes::default()),
        Some(other) => {
            return Err(Error::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other})"
            )));
        }
    };
    if !v.is_object() {
        return Err(Error::BadRequest(
            "the body of the request must be a JSON object".into(),
        ));
    }
    Ok((v, notes))
}

/// A patch, and the fields its JSON named twice (reported as in a create's body).
fn patch_body(headers: &HeaderMap, body: &[u8]) -> Result<(Patch, BodyNotes)> {
    let parse = || {
        registry::schema::parse_json(body)
            .map_err(|e| Error::BadRequest(format!("the patch is not valid JSON: {e}")))
    };
    match media_type(headers).as_deref() {
        Some("application/merge-patch+json") => parse().map(|(v, d)| (Patch::Merge(v), d)),
        // Its operations are no fields of the object.
        Some("application/json-patch+json") => {
            parse().map(|(v, _)| (Patch::Json(v), BodyNotes::default()))
        }
        Some("application/strategic-merge-patch+json") => {
            parse().map(|(v, d)| (Patch::Strategic(v), d))
        }
        other => Err(Error::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {})",
            other.unwrap_or("no Content-Type")
        ))),
    }
}

fn delete_options(q: &Query, body: &[u8]) -> Result<DeleteOptions> {
    let v: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else if protobuf::is_protobuf(body) {
        // Typed clients (kubectl drain's pod deletions) send DeleteOptions in protobuf.
        let v = protobuf_body(body)?;
        if v["kind"] != "DeleteOptions" {
            return Err(Error::BadRequest(format!(
                "the body of a delete must be DeleteOptions, not {}",
                v["kind"]
            )));
        }
        v
    } else {
        serde_json::from_slice(body)
            .map_err(|e| Error::BadRequest(format!("invalid DeleteOptions: {e}")))?
    };
    let mut opts = DeleteOptions::from_json(&v)?;
    // The query's policy gives way to the body's, but not to its `orphanDependents`.
    if v.get("propagationPolicy").is_none()
        && let Some(p) = q.get("propagationPolicy")
    {
        opts.propagation = Some(registry::Propagation::parse(p)?);
    }
    opts.dry_run |= write_options(q)?.dry_run;
    if opts.grace_period_seconds.is_none() {
        opts.grace_period_seconds = int_param(q, "gracePeriodSeconds")?;
    }
    Ok(opts)
}

/// The verb and resource of a request, as metrics name them.
pub fn describe(
    served: &Served,
    group: &str,
    version: &str,
    rest: &str,
    method: &Method,
    q: &Query,
) -> (&'static str, String) {
    let mut q = Cow::Borrowed(q);
    let Ok(t) = request_target(served, group, version, rest, method, &mut q) else {
        return ("unknown", String::new());
    };
    let verb = match verb(&t, method, &q) {
        "watch" => "WATCH",
        "list" => "LIST",
        "get" => "GET",
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "deletecollection" => "DELETECOLLECTION",
        "delete" => "DELETE",
        _ => "OTHER",
    };
    let mut resource = t.res.qualified_plural();
    if let Some(sub) = t.sub {
        resource = format!("{resource}/{sub}");
    }
    (verb, resource)
}

/// The parts of a request a resource handler reads.
pub struct Call {
    /// Who is asking (authenticated).
    pub user: registry::User,
    pub method: Method,
    pub query: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The Content-Type of Table answers.
const TABLE_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// Whether the client's Accept asks for the meta.k8s.io form `as` (`Table`,
/// `PartialObjectMetadata`, whose prefix also matches `PartialObjectMetadataList`).
fn accepts_as(headers: &HeaderMap, form: &str) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',').any(|range| {
                let (mut is_form, mut is_meta) = (false, false);
                for param in range.split(';').map(str::trim) {
                    is_form |= param
                        .strip_prefix("as=")
                        .is_some_and(|v| v.starts_with(form));
                    is_meta |= param == "g=meta.k8s.io";
                }
                is_form && is_meta
            })
        })
}

/// Whether the client asked for server-side printing, and with which row objects.
fn table_request(headers: &HeaderMap, q: &Query) -> Result<Option<IncludeObject>> {
    if !accepts_as(headers, "Table") {
        return Ok(None);
    }
    Ok(Some(match q.get("includeObject").map(String::as_str) {
        None | Some("") | Some("Metadata") => IncludeObject::Metadata,
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        Some(other) => {
            return Err(Error::BadRequest(format!(
                "includeObject must be None, Metadata or Object, not {other:?}"
            )));
        }
    }))
}

/// What a read answers with: the objects, a Table of them, or their metadata alone.
#[derive(Clone, Copy)]
enum View {
    Object,
    Table(IncludeObject),
    Metadata,
}

const PARTIAL_TYPE: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
const PARTIAL_LIST_TYPE: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

/// Whether the client asks for metadata alone (`as=PartialObjectMetadata` or
/// `as=PartialObjectMetadataList`), as metadata informers do.
fn metadata_request(headers: &HeaderMap) -> bool {
    accepts_as(headers, "PartialObjectMetadata")
}

fn typed_ok(content_type: &'static str, body: Bytes) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A list as a PartialObjectMetadataList.
fn partial_list_body(list: &registry::List) -> Bytes {
    let items: Vec<Value> = list
        .items
        .iter()
        .map(|i| table::partial_metadata(&serde_json::from_slice(i).unwrap_or(Value::Null)))
        .collect();
    let body = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta(list), "items": items});
    Bytes::from(serde_json::to_vec(&body).expect("JSON serializes"))
}

fn table_ok(body: Bytes) -> Response {
    typed_ok(TABLE_TYPE, body)
}

/// The Kubernetes verb of a request, as authorization names it.
fn verb(t: &Target, method: &Method, q: &Query) -> &'static str {
    match (method, t.name.is_some()) {
        (&Method::GET, false) if flag(q, "watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::GET, true) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, false) => "deletecollection",
        (&Method::DELETE, true) => "delete",
        _ => "unknown",
    }
}

/// Whether RBAC allows `user` the request for `t` (the namespaces kind's objects are
/// asked for in their own namespace, as kube-apiserver's request info has it).
fn authorize(
    reg: &registry::Registry,
    user: &registry::User,
    t: &Target,
    method: &Method,
    q: &Query,
) -> Result<()> {
    let mut namespace = t.namespace.as_deref();
    if catalog::holds_namespaces(&t.res) && t.name.is_some() {
        namespace = t.name.as_deref();
    }
    let asked = super::authz::resource(
        verb(t, method, q),
        &t.res.group,
        &t.res.plural,
        t.sub.as_deref(),
        namespace,
        t.name.as_deref(),
    );
    super::authz::check(reg, user, &asked)
}

/// The methods a target serves, as a 405's `Allow` header lists them.
fn allowed(t: &Target) -> &'static str {
    if !t.res.verbs.contains(&"create") {
        return "GET";
    }
    match (t.name.is_some(), t.sub.as_deref()) {
        // Across namespaces, a namespaced kind is only listed and watched.
        (false, _) if t.res.namespaced && t.namespace.is_none() => "GET",
        (false, _) if !t.res.verbs.contains(&"deletecollection") => "GET, POST",
        (false, _) => "GET, POST, DELETE",
        (true, None) => "GET, PUT, PATCH, DELETE",
        (true, Some("status" | "scale")) => "GET, PUT, PATCH",
        (true, Some(sub)) => subresource(&t.res, sub).map_or("POST", Subresource::method),
    }
}

/// Serves one resource request.
pub async fn handle(
    state: AppState,
    group: &str,
    version: &str,
    rest: &str,
    call: Call,
) -> Result<Response> {
    let Call {
        user,
        method,
        query,
        headers,
        body,
    } = call;
    if let Some(answer) = super::review::handle(
        &state.registry,
        group,
        version,
        rest,
        &method,
        &user,
        &headers,
        &body,
    ) {
        return answer;
    }
    let mut query = Cow::Owned(query);
    let t = request_target(
        &state.registry.served(),
        group,
        version,
        rest,
        &method,
        &mut query,
    )?;
    authorize(&state.registry, &user, &t, &method, &query)?;
    // Writes carry their user, for the checks a kind makes of who writes (RBAC's
    // escalation and bind checks).
    let write_options = |q: &Query| -> Result<WriteOptions> {
        Ok(WriteOptions {
            user: Some(user.clone()),
            ..write_options(q)?
        })
    };
    let reg = &state.registry;
    let ns = t.namespace.as_deref();
    let res = &*t.res;
    if let (Some("scale"), Some(name), &(Method::PUT | Method::PATCH)) =
        (t.sub.as_deref(), t.name.as_deref(), &method)
    {
        // A kind may name the Scale of a missing object otherwise.
        if let Some(missing) = res.strategy.missing_scale(name)
            && reg.get(res, ns, name).is_err()
        {
            return Err(Error::Registry(missing));
        }
    }
    // What the descriptor says of the subresource asked for, when not status or scale.
    let serves = t
        .sub
        .as_deref()
        .and_then(|s| subresource(res, s))
        .map(|s| (s.serves, s.method()));
    let not_allowed = || Err(Error::MethodNotAllowed(method.to_string(), allowed(&t)));
    // A verb the kind does not serve (a kind made when read takes no writes).
    let verb = match (&method, t.name.is_some()) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if flag(&query, "watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "",
    };
    if t.sub.is_none() && !verb.is_empty() && !res.verbs.contains(&verb) {
        return not_allowed();
    }
    match (&method, t.name.as_deref()) {
        // A namespaced kind is created and deleted in a namespace only; namespaces are
        // never deleted by the collection.
        (&Method::POST | &Method::DELETE, None) if res.namespaced && ns.is_none() => not_allowed(),
        (&Method::GET, None) if flag(&query, "watch") => {
            let view = match table_request(&headers, &query)? {
                Some(include) => View::Table(include),
                None if metadata_request(&headers) => View::Metadata,
                None => View::Object,
            };
            watch::serve(state.clone(), &t.res, ns, &query, view)
        }
        (&Method::GET, None) => {
            let list = reg.list(res, ns, &list_options(&query)?).await?;
            match table_request(&headers, &query)? {
                Some(include) => Ok(table_ok(table::table(
                    res,
                    &list.items,
                    list.revision,
                    list.continue_token.as_deref(),
                    include,
                ))),
                None if metadata_request(&headers) => {
                    Ok(typed_ok(PARTIAL_LIST_TYPE, partial_list_body(&list)))
                }
                None => Ok(json_ok(StatusCode::OK, list_body(res, &list))),
            }
        }
        (&Method::POST, None) => {
            let h = headers.clone();
            let (obj, notes) = decoded(&body, move |b| checked_body(&h, b)).await?;
            let opts = WriteOptions {
                body: notes,
                manager: field_manager(&query, &headers),
                ..write_options(&query)?
            };
            let created = reg.create(res, ns, obj, &opts).await?;
            Ok(written(StatusCode::CREATED, created))
        }
        (&Method::DELETE, None) => {
            let list = reg
                .delete_collection(
                    res,
                    ns,
                    &list_options(&query)?,
                    &delete_options(&query, &body)?,
                )
                .await?;
            Ok(json_ok(StatusCode::OK, list_body(res, &list)))
        }
        (_, Some(name)) if serves.is_some_and(|(_, m)| m == method.as_str()) => {
            let sub = t.sub.as_deref().unwrap_or_default();
            match serves.map(|(serves, _)| serves) {
                Some(Serves::PodLog) => {
                    let pod: Value = serde_json::from_slice(&reg.get(res, ns, name)?)
                        .map_err(|e| Error::BadRequest(e.to_string()))?;
                    super::logs::serve(state.node.as_deref(), &pod, &query)
                }
                Some(Serves::DeploymentLog) => {
                    super::dclog::serve(&state, ns.unwrap_or_default(), name, &query).await
                }
                _ => {
                    let h = headers.clone();
                    let body = decoded(&body, move |b| json_body(&h, b)).await?;
                    let acted = reg
                        .act(res, ns, name, sub, &body, &write_options(&query)?)
                        .await?;
                    Ok(match acted {
                        Acted::Created(body) => json_ok(StatusCode::CREATED, body),
                        Acted::Written(w) => written(StatusCode::OK, w),
                        Acted::NoContent => StatusCode::NO_CONTENT.into_response(),
                    })
                }
            }
        }
        (_, Some(_)) if serves.is_some() => not_allowed(),
        (&Method::GET, Some(name)) => {
            let obj = reg.get(res, ns, name)?;
            match (t.sub.as_deref(), table_request(&headers, &query)?) {
                (Some("scale"), _) => Ok(json_ok(StatusCode::OK, to_scale(res, &obj)?)),
                (None, Some(include)) => Ok(table_ok(table::table(
                    res,
                    std::slice::from_ref(&obj),
                    reg.revision(),
                    None,
                    include,
                ))),
                (None, None) if metadata_request(&headers) => {
                    Ok(typed_ok(PARTIAL_TYPE, table::partial_metadata_bytes(&obj)))
                }
                _ => Ok(json_ok(StatusCode::OK, obj)),
            }
        }
        (&Method::PUT, Some(name)) => {
            let h = headers.clone();
            let (obj, notes) = decoded(&body, move |b| checked_body(&h, b)).await?;
            let opts = WriteOptions {
                body: notes,
                manager: field_manager(&query, &headers),
                ..write_options(&query)?
            };
            let out = match t.sub.as_deref() {
                Some("scale") => {
                    let replicas = scale_replicas(&obj)?;
                    let rv = obj
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty());
                    let mut patch = res.strategy.scale_patch(replicas);
                    if let Some(rv) = rv {
                        patch["metadata"] = json!({"resourceVersion": rv});
                    }
                    let out = reg
                        .patch(res, ns, name, &Patch::Merge(patch), Part::Main, &opts)
                        .await?;
                    registry::Written {
                        object: to_scale(res, &out.object)?,
                        warnings: out.warnings,
                    }
                }
                Some("status") => reg.update(res, ns, name, obj, Part::Status, &opts).await?,
                _ => reg.update(res, ns, name, obj, Part::Main, &opts).await?,
            };
            Ok(written(StatusCode::OK, out))
        }
        (&Method::PATCH, Some(name))
            if matches!(t.sub.as_deref(), None | Some("status"))
                && media_type(&headers).as_deref() == Some("application/apply-patch+yaml") =>
        {
            let (config, notes) = decoded(&body, |b| {
                registry::parse_config(b).map_err(Error::BadRequest)
            })
            .await?;
            let mut opts = write_options(&query)?;
            if let Some(yaml) = &notes.yaml
                && opts.field_validation == FieldValidation::Strict
            {
                return Err(Error::BadRequest(format!(
                    "error strict decoding YAML: {yaml}"
                )));
            }
            opts.body = notes;
            let apply = registry::ApplyOptions {
                manager: query.get("fieldManager").cloned().unwrap_or_default(),
                force: flag(&query, "force"),
                status: t.sub.is_some(),
            };
            let (out, created) = reg.apply(res, ns, name, config, &opts, &apply).await?;
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(written(code, out))
        }
        (&Method::PATCH, Some(name)) => {
            let (patch, notes) = if t.sub.as_deref() == Some("scale")
                && media_type(&headers).as_deref() == Some("application/apply-patch+yaml")
            {
                // A Scale has one field a client sets: applied, it merges.
                let (config, notes) = decoded(&body, |b| {
                    registry::parse_config(b).map_err(Error::BadRequest)
                })
                .await?;
                (Patch::Merge(config), notes)
            } else {
                let h = headers.clone();
                decoded(&body, move |b| patch_body(&h, b)).await?
            };
            let opts = WriteOptions {
                manager: field_manager(&query, &headers),
                body: notes,
                ..write_options(&query)?
            };
            let out = match t.sub.as_deref() {
                Some("scale") => {
                    // Patch the Scale view, then write its replicas back. The Scale is
                    // patched without its resourceVersion: only one the patch itself
                    // names is a precondition (a concurrent write of the object, such
                    // as a controller's status, is no conflict for a patch).
                    let cur = reg.get(res, ns, name)?;
                    let mut scale: Value = serde_json::from_slice(&to_scale(res, &cur)?)
                        .map_err(|e| Error::BadRequest(e.to_string()))?;
                    if let Some(meta) = scale["metadata"].as_object_mut() {
                        meta.remove("resourceVersion");
                    }
                    let patched = patch
                        .apply(res, &scale)
                        .map_err(|e| Error::Registry(e.into()))?;
                    let replicas = scale_replicas(&patched)?;
                    let mut p = res.strategy.scale_patch(replicas);
                    if let Some(rv) = patched
                        .pointer("/metadata/resourceVersion")
                        .filter(|rv| rv.as_str().is_some_and(|s| !s.is_empty()))
                    {
                        p["metadata"] = json!({"resourceVersion": rv});
                    }
                    let out = reg
                        .patch(res, ns, name, &Patch::Merge(p), Part::Main, &opts)
                        .await?;
                    registry::Written {
                        object: to_scale(res, &out.object)?,
                        warnings: out.warnings,
                    }
                }
                Some("status") => {
                    reg.patch(res, ns, name, &patch, Part::Status, &opts)
                        .await?
                }
                _ => reg.patch(res, ns, name, &patch, Part::Main, &opts).await?,
            };
            Ok(written(StatusCode::OK, out))
        }
        (&Method::DELETE, Some(name)) if t.sub.is_none() => {
            let out = reg
                .delete(res, ns, name, &delete_options(&query, &body)?)
                .await?;
            Ok(json_ok(StatusCode::OK, out))
        }
        _ => not_allowed(),
    }
}

fn scale_replicas(scale: &Value) -> Result<i64> {
    scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .filter(|r| *r >= 0)
        .ok_or_else(|| {
            Error::Registry(registry::Error::Invalid {
                group: "autoscaling".into(),
                kind: "Scale".into(),
                name: scale
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .into(),
                causes: vec![registry::Cause::invalid(
                    "spec.replicas",
                    scale.pointer("/spec/replicas").unwrap_or(&Value::Null),
                    "must be an integer greater than or equal to 0",
                )],
            })
        })
}

/// The autoscaling/v1 Scale view of an object with replicas.
fn to_scale(res: &Resource, obj: &Bytes) -> Result<Bytes> {
    let v: Value = serde_json::from_slice(obj)
        .map_err(|e| Error::Registry(registry::Error::Internal(e.to_string())))?;
    let meta = &v["metadata"];
    let view = res.strategy.scale(&v);
    let scale = json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": view.replicas},
        "status": {"replicas": view.status_replicas, "selector": view.selector},
    });
    Ok(Bytes::from(
        serde_json::to_vec(&scale).expect("JSON serializes"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Query {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn large_bodies_are_decoded_off_the_runtime_thread() {
        let here = std::thread::current().id();
        let on = |len: usize| {
            let body = Bytes::from(vec![b' '; len]);
            async move {
                decoded(&body, |_| Ok(std::thread::current().id()))
                    .await
                    .unwrap()
            }
        };
        assert_eq!(on(1024).await, here);
        assert_ne!(on(DECODE_OFF_THREAD + 1).await, here);
        // A decoding error is the request's, wherever it ran.
        let big = Bytes::from(format!("{{\"a\": \"{}", "x".repeat(100_000)));
        let e = decoded(&big, |b| json_body(&HeaderMap::new(), b)).await;
        assert!(matches!(e, Err(Error::BadRequest(_))));
    }

    #[test]
    fn a_negative_limit_lists_all_and_a_huge_one_does_not_overflow() {
        let limit = |l: &str| list_options(&query(&[("limit", l)])).map(|o| o.limit);
        assert_eq!(limit("-1").unwrap(), None);
        assert_eq!(limit("0").unwrap(), None);
        assert_eq!(limit("5").unwrap(), Some(5));
        assert_eq!(
            limit("9223372036854775807").unwrap(),
            Some(i64::MAX as usize)
        );
        assert!(matches!(
            limit("18446744073709551616"),
            Err(Error::BadRequest(_))
        ));
        assert!(matches!(limit("many"), Err(Error::BadRequest(_))));
    }

    #[test]
    fn a_grace_period_in_the_query_is_an_integer_or_refused() {
        let grace = |g: &str| {
            delete_options(&query(&[("gracePeriodSeconds", g)]), b"")
                .map(|o| o.grace_period_seconds)
        };
        assert_eq!(grace("9223372036854775807").unwrap(), Some(i64::MAX));
        assert_eq!(grace("0").unwrap(), Some(0));
        let e = grace("9223372036854775808").unwrap_err().to_string();
        assert!(e.contains("out of the range"), "{e}");
        assert!(matches!(grace("soon"), Err(Error::BadRequest(_))));
        // The body's wins over the query's.
        let body = br#"{"kind":"DeleteOptions","gracePeriodSeconds":9223372036854775807}"#;
        let opts = delete_options(&query(&[("gracePeriodSeconds", "1")]), body).unwrap();
        assert_eq!(opts.grace_period_seconds, Some(i64::MAX));
    }

    #[test]
    fn subresources_are_routed_as_their_descriptors_say() {
        let catalog = catalog::Catalog::default();
        let served = catalog.served();
        let mut routed = Vec::new();
        for res in served.iter() {
            for sub in &res.subresources {
                let rest = match res.namespaced {
                    true => format!("namespaces/ns/{}/x/{}", res.plural, sub.name),
                    false => format!("{}/x/{}", res.plural, sub.name),
                };
                let found = parse_target(&served, &res.group, &res.version, &rest);
                match sub.serves {
                    Serves::Elsewhere => assert!(
                        matches!(found, Err(Error::NoRoute)),
                        "{}/{} has a route of its own",
                        res.plural,
                        sub.name
                    ),
                    _ => {
                        let t = found.unwrap();
                        assert_eq!(t.sub.as_deref(), Some(sub.name));
                        routed.push(format!("{}/{} {}", res.plural, sub.name, allowed(&t)));
                    }
                }
            }
            // One the descriptor does not list is no route.
            let rest = match res.namespaced {
                true => format!("namespaces/ns/{}/x/nonesuch", res.plural),
                false => format!("{}/x/nonesuch", res.plural),
            };
            let found = parse_target(&served, &res.group, &res.version, &rest);
            assert!(matches!(found, Err(Error::NoRoute)), "{}", res.plural);
        }
        routed.sort();
        assert_eq!(
            routed,
            [
                "deploymentconfigs/instantiate POST",
                "deploymentconfigs/log GET",
                "deploymentconfigs/rollback POST",
                "namespaces/finalize PUT",
                "pods/binding POST",
                "pods/eviction POST",
                "pods/log GET",
                "serviceaccounts/token POST",
            ]
        );
    }

    #[test]
    fn boolean_parameters_are_true_unless_absent_zero_or_false() {
        let q: Query = [
            ("a", ""),
            ("b", "true"),
            ("c", "0"),
            ("d", "False"),
            ("e", "yes"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let got: Vec<bool> = ["a", "b", "c", "d", "e", "missing"]
            .iter()
            .map(|n| flag(&q, n))
            .collect();
        assert_eq!(got, [true, true, false, false, true, false]);
    }

    #[test]
    fn paths_resolve_to_targets() {
        let served = crate::registry::catalog::Catalog::default().served();
        let t = parse_target(&served, "", "v1", "namespaces/default/pods/web/status").unwrap();
        assert_eq!(
            (
                t.res.plural.as_str(),
                t.namespace.as_deref(),
                t.name.as_deref(),
                t.sub.as_deref()
            ),
            ("pods", Some("default"), Some("web"), Some("status"))
        );
        let t = parse_target(&served, "", "v1", "pods").unwrap();
        assert_eq!(
            (t.res.plural.as_str(), t.namespace, t.name),
            ("pods", None, None)
        );
        let t = parse_target(&served, "", "v1", "namespaces/default").unwrap();
        assert_eq!(
            (t.res.plural.as_str(), t.name.as_deref()),
            ("namespaces", Some("default"))
        );
        let t = parse_target(&served, "", "v1", "namespaces/kube-system/status").unwrap();
        assert_eq!(
            (t.res.plural.as_str(), t.name.as_deref(), t.sub.as_deref()),
            ("namespaces", Some("kube-system"), Some("status"))
        );
        let t = parse_target(
            &served,
            "coordination.k8s.io",
            "v1",
            "namespaces/x/leases/n",
        )
        .unwrap();
        assert_eq!(t.res.plural, "leases");
        for bad in [
            "pods/web",
            "nothing",
            "namespaces/default/pods/web/exec-nothing",
            "namespaces/default/configmaps/x/log",
            "namespaces/a/pods/b/c/d",
            "",
        ] {
            assert!(parse_target(&served, "", "v1", bad).is_err(), "{bad}");
        }
        assert!(parse_target(&served, "", "v1", "configmaps/x").is_err());
    }

    #[test]
    fn lists_are_assembled_from_item_bytes() {
        let res = catalog::of(registry::Kind::ConfigMap);
        let list = registry::List {
            items: vec![
                Bytes::from_static(b"{\"a\":1}"),
                Bytes::from_static(b"{\"b\":2}"),
            ],
            revision: 7,
            continue_token: Some("t".into()),
            remaining: None,
        };
        let v: Value = serde_json::from_slice(&list_body(res, &list)).unwrap();
        assert_eq!(
            v,
            json!({"kind": "ConfigMapList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "7", "continue": "t"}, "items": [{"a":1},{"b":2}]})
        );
    }
}
