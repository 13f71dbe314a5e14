//! The registry: one generic engine for every kind, with Kubernetes object semantics on
//! top of the store: names and generateName, uid and timestamps, namespaces that must exist,
//! resourceVersion preconditions, generation, the spec/status split, finalizers and
//! deletion, selectors and paging, patches and watches. It knows kinds, not HTTP.

mod actions;
mod apply;
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod catalog;
mod cel;
mod convert;
pub mod crd;
mod delete;
pub mod deploymentconfig;
pub mod endpoints;
mod error;
pub mod metrics;
pub mod namespace;
pub mod networking;
pub mod node;
mod patch;
mod patch_meta;
pub mod podsecurity;
pub mod policy;
pub mod rbac;
pub mod satoken;
pub mod scheduling;
pub mod schema;
mod service;
pub mod strategy;
pub mod table;
mod tokens;
mod watch;
mod yamldepth;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::store::{self, Outcome, Preconditions, Store};
use crate::types::{fields, labels, names};

pub use apply::{ApplyOptions, parse_config};
pub use catalog::{Kind, Resource};
pub use error::{Cause, Error};
pub use patch::{ListMerge, Patch, Shape};
pub use schema::{BodyNotes, FieldValidation};
pub use service::KUBERNETES_SERVICE_IP;
pub use tokens::{
    AUTHENTICATED, SA_NAME, SA_UID, SERVICE_ACCOUNT_TOKEN, User, new_service_account_token,
};
pub use watch::{Watch, WatchEvent, WatchOptions};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Options of a list.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label: labels::Selector,
    pub field: fields::Selector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct List {
    pub items: Vec<Bytes>,
    pub revision: u64,
    pub continue_token: Option<String>,
    /// Objects after this page (`remainingItemCount`): counted for pages of lists without
    /// selectors read at the current revision.
    pub remaining: Option<u64>,
}

/// Options of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Run every check but write nothing (`dryRun=All`).
    pub dry_run: bool,
    /// What to do about fields the schema does not know.
    pub field_validation: FieldValidation,
    /// What decoding the request's body noted: fields it named twice (refused or
    /// warned about as unknown ones).
    pub body: schema::BodyNotes,
    /// Who writes (`fieldManager`, else the client's name), for a write other than an
    /// apply: recorded in managedFields as an Update. `None` records nothing.
    pub manager: Option<String>,
    /// Who asks, for the checks of [`strategy::Strategy::authorize_write`]; `None` for
    /// the cluster's own writes.
    pub user: Option<User>,
}

/// A successful create, update or patch.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as stored.
    pub object: Bytes,
    /// Warnings for the client (unknown fields that were dropped).
    pub warnings: Vec<String>,
}

/// How dependents are treated when their owner is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// Options of a deletion (the body of a DELETE).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub propagation: Option<Propagation>,
    pub grace_period_seconds: Option<i64>,
    pub dry_run: bool,
}

impl Propagation {
    /// A `propagationPolicy` as the API spells it.
    pub fn parse(policy: &str) -> Result<Propagation> {
        match policy {
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            "Orphan" => Ok(Propagation::Orphan),
            other => Err(Error::BadRequest(format!(
                "unsupported propagationPolicy {other:?}: use Background, Foreground or Orphan"
            ))),
        }
    }
}

impl DeleteOptions {
    /// A DeleteOptions object's fields (a DELETE's body, an Eviction's `deleteOptions`):
    /// `propagationPolicy`, else the older `orphanDependents`.
    pub fn from_json(v: &Value) -> Result<DeleteOptions> {
        let propagation = match v.get("propagationPolicy").and_then(Value::as_str) {
            Some(p) => Some(Propagation::parse(p)?),
            None => match v.get("orphanDependents").and_then(Value::as_bool) {
                Some(true) => Some(Propagation::Orphan),
                Some(false) => Some(Propagation::Background),
                None => None,
            },
        };
        let text = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        Ok(DeleteOptions {
            uid: text("/preconditions/uid"),
            resource_version: text("/preconditions/resourceVersion"),
            propagation,
            grace_period_seconds: v.get("gracePeriodSeconds").and_then(Value::as_i64),
            dry_run: v
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|d| d == "All")),
        })
    }
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
    /// Both, as given (bindings and namespace finalization, which the registry builds).
    All,
}

/// The registry: cheap to clone.
#[derive(Clone)]
pub struct Registry {
    store: Store,
    /// How often an idle watch with bookmarks allowed sends one.
    bookmark_every: Duration,
    /// Held while a Service's addresses are chosen and written, so that two never get
    /// the same.
    services: Arc<tokio::sync::Mutex<()>>,
    /// The kinds served now.
    catalog: Arc<catalog::Catalog>,
    /// The resource metrics the node agents record (`metrics.k8s.io`).
    metrics: Arc<crate::types::metrics::Board>,
    /// The RBAC objects, for authorization (see [`rbac`]).
    rbac: Arc<rbac::Index>,
    /// The keys service-account tokens are signed and checked with, set once at start.
    token_keys: Arc<std::sync::OnceLock<satoken::Keys>>,
}

/// How many times an update is retried when a concurrent writer got there first.
const UPDATE_RETRIES: usize = 16;

fn parse(bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| Error::Internal(format!("stored object: {e}")))
}

fn to_bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).expect("JSON values serialize"))
}

/// The largest object the store keeps, encoded: as large as the largest request body, so
/// that writes which add to an object (patches, updates) cannot grow it without bound.
pub const MAX_OBJECT: usize = 3 * 1024 * 1024;

/// The stored form of an object that a create or an update wrote, if it is not too large.
fn stored(v: &Value) -> Result<Bytes> {
    let bytes = to_bytes(v);
    if bytes.len() > MAX_OBJECT {
        return Err(Error::TooLarge(format!(
            "the object would take {} bytes, over the limit of {MAX_OBJECT}: keep large data outside the cluster, or split it over several objects",
            bytes.len()
        )));
    }
    Ok(bytes)
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)?.get(field)?.as_str()
}

fn meta_mut(obj: &mut Value) -> Result<&mut Map<String, Value>> {
    let m = obj
        .as_object_mut()
        .ok_or_else(|| Error::BadRequest("the body must be a JSON object".into()))?;
    let meta = m
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    meta.as_object_mut()
        .ok_or_else(|| Error::BadRequest("metadata must be a JSON object".into()))
}

/// Parses a resourceVersion given by a client.
fn parse_rv(rv: &str) -> Result<u64> {
    rv.parse::<u64>()
        .map_err(|_| Error::BadRequest(format!("invalid resourceVersion {rv:?}: not a number")))
}

/// `count` characters from the alphabet Kubernetes uses for generated names.
fn random_suffix(count: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bytes = vec![0u8; count];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    start: String,
    /// Continues at the latest revision (a token handed out when `rv` was gone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    latest: bool,
}

impl ContinueToken {
    fn encode(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(self).expect("token serializes"))
    }
}

impl Registry {
    pub fn new(store: Store) -> Self {
        let reg = Self {
            store,
            bookmark_every: Duration::from_secs(60),
            services: Arc::default(),
            catalog: Arc::default(),
            metrics: Arc::default(),
            rbac: Arc::default(),
            token_keys: Arc::default(),
        };
        for r in catalog::RESOURCES.iter() {
            r.strategy.on_open(&reg);
        }
        reg
    }

    /// Sends bookmarks on idle watches this often (when the client allows them).
    pub fn with_bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_every = every;
        self
    }

    /// Signs and checks service-account tokens with `keys` from now on (a second call
    /// keeps the first keys).
    pub fn set_token_keys(&self, keys: satoken::Keys) {
        let _ = self.token_keys.set(keys);
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The RBAC authorizer over this registry's roles and bindings.
    pub fn rbac(&self) -> &rbac::Index {
        &self.rbac
    }

    /// The board the node agents record resource metrics into.
    pub fn metrics(&self) -> &Arc<crate::types::metrics::Board> {
        &self.metrics
    }

    /// The kinds served now.
    pub fn served(&self) -> Arc<catalog::Served> {
        self.catalog.served()
    }

    /// Tells of every change of the kinds served (by the generation of what is served).
    pub fn served_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.catalog.subscribe()
    }

    /// The live descriptor of the resource `group`/`version`/`plural`, if it is served.
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.catalog.served().find(group, version, plural).cloned()
    }

    /// The store's current revision: what a read now reflects.
    pub fn revision(&self) -> u64 {
        self.store.revision()
    }

    /// Adds the engine's metrics (its store's commits and watchers) to `metrics`.
    pub fn register_metrics(&self, metrics: &mut prometheus_client::registry::Registry) {
        self.store.metrics().register(metrics);
    }

    fn not_found(res: &Resource, name: &str) -> Error {
        Error::NotFound {
            group: res.group.clone(),
            resource: res.qualified_plural(),
            name: name.to_string(),
        }
    }

    fn conflict(res: &Resource, name: &str) -> Error {
        Error::Conflict {
            group: res.group.clone(),
            resource: res.qualified_plural(),
            name: name.to_string(),
            message: "the object has been modified; please apply your changes to the latest version and try again".into(),
        }
    }

    fn invalid(res: &Resource, name: &str, causes: Vec<Cause>) -> Error {
        Error::Invalid {
            group: res.group.clone(),
            kind: res.kind_name.clone(),
            name: name.to_string(),
            causes,
        }
    }

    /// The namespace a request addresses, checked against the resource's scope.
    fn scope<'a>(res: &Resource, namespace: Option<&'a str>) -> Result<Option<&'a str>> {
        match (res.namespaced, namespace) {
            (true, Some(ns)) => Ok(Some(ns)),
            (true, None) => Err(Error::BadRequest(format!(
                "{} are namespaced: the request must name a namespace",
                res.plural
            ))),
            (false, _) => Ok(None),
        }
    }

    /// A new object may only go into a namespace that exists and is not terminating.
    fn check_namespace_open(&self, res: &Resource, ns: Option<&str>, name: &str) -> Result<()> {
        let Some(ns) = ns else {
            return Ok(());
        };
        let nsres = catalog::of(Kind::Namespace);
        let Some(rec) = self.store.get(&nsres.key(None, ns)) else {
            return Err(Self::not_found(nsres, ns));
        };
        let obj = parse(&rec.value)?;
        let terminating = obj.pointer("/status/phase").and_then(Value::as_str)
            == Some("Terminating")
            || meta(&obj).is_some_and(|m| m.contains_key("deletionTimestamp"));
        if terminating {
            return Err(Error::Forbidden(format!(
                "{} {name:?} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                res.qualified_plural()
            )));
        }
        Ok(())
    }

    /// A pod that names a service account other than `default` needs that account to
    /// exist (as the ServiceAccount admission plugin); `default` is made by a controller
    /// moments after its namespace, so pods of a fresh namespace are not refused.
    fn check_service_account(&self, ns: Option<&str>, name: &str, obj: &Value) -> Result<()> {
        let Some(ns) = ns else {
            return Ok(());
        };
        let account = obj
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .unwrap_or("default");
        if account == "default" || account.is_empty() {
            return Ok(());
        }
        let sas = catalog::of(Kind::ServiceAccount);
        if self.store.get(&sas.key(Some(ns), account)).is_some() {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "pods {name:?} is forbidden: error looking up service account {ns}/{account}: serviceaccount {account:?} not found"
        )))
    }

    /// Checks `apiVersion` and `kind` of a body, filling them in when absent or empty (as
    /// Kubernetes' decoder does).
    fn check_type(res: &Resource, obj: &mut Value) -> Result<()> {
        let m = obj
            .as_object_mut()
            .ok_or_else(|| Error::BadRequest("the body must be a JSON object".into()))?;
        let want_av = res.api_version();
        for (field, want, what) in [
            ("apiVersion", want_av.as_ref(), "API version"),
            ("kind", res.kind_name.as_str(), "kind"),
        ] {
            match m.get(field) {
                Some(Value::String(s)) if s == want => continue,
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s.is_empty() => {}
                Some(Value::String(s)) => {
                    return Err(Error::BadRequest(format!(
                        "the {what} in the data ({s}) does not match the expected {what} ({want})"
                    )));
                }
                Some(other) => {
                    return Err(Error::BadRequest(format!(
                        "{field} must be a string, not {other}"
                    )));
                }
            }
            m.insert(field.into(), json!(want));
        }
        Ok(())
    }

    /// Metadata and kind rules, on top of the schema's findings; every problem is
    /// collected.
    fn validate(res: &Resource, obj: &Value, schema_causes: &[Cause]) -> Result<()> {
        let mut causes = schema_causes.to_vec();
        let m = meta(obj);
        let name = m
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required("metadata.name"));
        } else {
            for e in res.strategy.name_errors(name) {
                causes.push(Cause::invalid("metadata.name", &json!(name), &e));
            }
        }
        if let Some(m) = m {
            match m.get("labels") {
                None | Some(Value::Null) => {}
                Some(Value::Object(labels)) => {
                    for (k, v) in labels {
                        for e in names::qualified_name(k) {
                            causes.push(Cause::invalid("metadata.labels", &json!(k), &e));
                        }
                        match v.as_str() {
                            Some(v) => {
                                for e in names::label_value(v) {
                                    causes.push(Cause::invalid(
                                        &format!("metadata.labels[{k}]"),
                                        &json!(v),
                                        &e,
                                    ));
                                }
                            }
                            None => causes.push(Cause::invalid(
                                &format!("metadata.labels[{k}]"),
                                v,
                                "must be a string",
                            )),
                        }
                    }
                }
                Some(other) => causes.push(Cause::invalid(
                    "metadata.labels",
                    other,
                    "must be a map of strings",
                )),
            }
            match m.get("annotations") {
                None | Some(Value::Null) => {}
                Some(Value::Object(ann)) => {
                    let mut size = 0;
                    for (k, v) in ann {
                        for e in names::qualified_name(k) {
                            causes.push(Cause::invalid("metadata.annotations", &json!(k), &e));
                        }
                        match v.as_str() {
                            Some(s) => size += k.len() + s.len(),
                            None => causes.push(Cause::invalid(
                                &format!("metadata.annotations[{k}]"),
                                v,
                                "must be a string",
                            )),
                        }
                    }
                    if size > 256 * 1024 {
                        causes.push(Cause {
                            reason: "FieldValueTooLong".into(),
                            message: "Too long: must have at most 262144 bytes".into(),
                            field: "metadata.annotations".into(),
                        });
                    }
                }
                Some(other) => causes.push(Cause::invalid(
                    "metadata.annotations",
                    other,
                    "must be a map of strings",
                )),
            }
            if let Some(refs) = m.get("ownerReferences").and_then(Value::as_array) {
                for (i, r) in refs.iter().enumerate() {
                    for f in ["apiVersion", "kind", "name", "uid"] {
                        if r.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                            causes.push(Cause::required(&format!(
                                "metadata.ownerReferences[{i}].{f}"
                            )));
                        }
                    }
                }
                let controllers = refs
                    .iter()
                    .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                    .count();
                if controllers > 1 {
                    causes.push(Cause::invalid(
                        "metadata.ownerReferences",
                        &Value::Array(refs.clone()),
                        "Only one reference can have Controller set to true",
                    ));
                }
            }
            if let Some(fins) = m.get("finalizers").and_then(Value::as_array) {
                for (i, f) in fins.iter().enumerate() {
                    let ok = f
                        .as_str()
                        .is_some_and(|s| names::qualified_name(s).is_empty());
                    if !ok {
                        causes.push(Cause::invalid(
                            &format!("metadata.finalizers[{i}]"),
                            f,
                            "must be a qualified name",
                        ));
                    }
                }
            }
        }
        res.strategy.validate(obj, &mut causes);
        let mut seen = std::collections::HashSet::new();
        causes.retain(|c| seen.insert((c.field.clone(), c.reason.clone())));
        if causes.is_empty() {
            Ok(())
        } else {
            Err(Self::invalid(res, name, causes))
        }
    }

    /// Creates an object; returns it as stored.
    pub async fn create(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written> {
        if let Some(stored) = convert::stored_resource(res) {
            return Box::pin(self.converted_create(res, &stored, namespace, obj, opts)).await;
        }
        let ns = Self::scope(res, namespace)?;
        Self::check_type(res, &mut obj)?;
        meta_mut(&mut obj)?;
        let mut schema_causes = Vec::new();
        let warnings = schema::admit_with(
            res,
            &mut obj,
            opts.field_validation,
            &opts.body,
            &mut schema_causes,
        )?;
        let m = meta_mut(&mut obj)?;
        check_identity(m, ns, None)?;
        match ns {
            Some(ns) => {
                m.insert("namespace".into(), json!(ns));
            }
            None => {
                m.remove("namespace");
            }
        }
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ] {
            m.remove(field);
        }
        let given = m
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        let generate = m
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        if given.is_none() && generate.is_none() {
            return Err(Self::invalid(
                res,
                "",
                vec![Cause::required("metadata.name")],
            ));
        }
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(crate::types::now()));
        if res.generation {
            m.insert("generation".into(), json!(1));
        }
        res.strategy.default(&mut obj);
        res.strategy.prepare_create(&mut obj);
        // Held until the object is written (a Service, with the addresses it was given).
        let _guard = res
            .strategy
            .before_write(self, None, None, &mut obj, Part::Main, &mut schema_causes)
            .await?;
        for attempt in 0.. {
            let name = match (&given, &generate) {
                (Some(n), _) => n.clone(),
                (None, Some(prefix)) => format!("{}{}", prefix, random_suffix(5)),
                (None, None) => unreachable!("checked above"),
            };
            meta_mut(&mut obj)?.insert("name".into(), json!(name));
            // Defaults may follow from the name (a namespace's name label).
            res.strategy.default(&mut obj);
            let mut causes = schema_causes.clone();
            res.strategy.validate_create(&obj, &mut causes);
            Self::validate(res, &obj, &causes)?;
            self.check_namespace_open(res, ns, &name)?;
            res.strategy.admit(self, ns, &name, &obj)?;
            if let Some(user) = &opts.user {
                res.strategy.authorize_write(self, user, ns, None, &obj)?;
            }
            let mut warnings = warnings.clone();
            warnings.extend(res.strategy.police(self, ns, &name, None, &obj)?);
            if let Some(manager) = opts.manager.as_deref().filter(|_| attempt == 0) {
                apply::record_update(res, None, &mut obj, manager, false);
            }
            let done = |object| Written {
                object,
                warnings: warnings.clone(),
            };
            if opts.dry_run {
                // A dry run answers as the write would, name clashes included.
                if given.is_some() && self.store.get(&res.key(ns, &name)).is_some() {
                    return Err(Error::AlreadyExists {
                        group: res.group.clone(),
                        resource: res.qualified_plural(),
                        name,
                    });
                }
                return Ok(done(stored(&obj)?));
            }
            match self
                .store
                .create(&res.key(ns, &name), stored(&obj)?)
                .await?
            {
                Outcome::Written(r) => {
                    res.strategy.after_write(self, &r.value, false);
                    return Ok(done(r.value));
                }
                Outcome::AlreadyExists(_) if given.is_none() && attempt < 8 => continue,
                Outcome::AlreadyExists(_) => {
                    return Err(Error::AlreadyExists {
                        group: res.group.clone(),
                        resource: res.qualified_plural(),
                        name,
                    });
                }
                Outcome::Conflict(_) | Outcome::NotFound => {
                    return Err(Error::Internal("unexpected store outcome on create".into()));
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// The object `name`.
    pub fn get(&self, res: &Resource, namespace: Option<&str>, name: &str) -> Result<Bytes> {
        if let Some(objects) = res.strategy.live(self, Self::scope(res, namespace)?) {
            return objects
                .into_iter()
                .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
                .map(|o| to_bytes(&o))
                .ok_or_else(|| Self::not_found(res, name));
        }
        if let Some(stored) = convert::stored_resource(res) {
            return self.converted_get(res, &stored, namespace, name);
        }
        let ns = Self::scope(res, namespace)?;
        self.store
            .get(&res.key(ns, name))
            .map(|r| convert::served(res, &r.value))
            .ok_or_else(|| Self::not_found(res, name))
    }

    /// Checks a field selector against what the kind supports.
    pub fn check_field_selector(res: &Resource, sel: &fields::Selector) -> Result<()> {
        for t in &sel.terms {
            let ok = matches!(t.field.as_str(), "metadata.name" | "metadata.namespace")
                || res.selectable.contains(&t.field);
            if !ok {
                return Err(Error::BadRequest(format!(
                    "field label not supported: {}",
                    t.field
                )));
            }
        }
        Ok(())
    }

    /// Lists objects (across namespaces for `namespace: None`).
    pub async fn list(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<List> {
        if let Some(stored) = convert::stored_resource(res) {
            return Box::pin(self.converted_list(res, &stored, namespace, opts)).await;
        }
        Self::check_field_selector(res, &opts.field)?;
        // A field selector on the namespace narrows a cluster-wide list to one namespace.
        let namespace = namespace.or(opts.field.required("metadata.namespace"));
        if let Some(objects) = res
            .strategy
            .live(self, if res.namespaced { namespace } else { None })
        {
            let filter = watch::Filter::new(res, &opts.label, &opts.field)?;
            return Ok(List {
                items: objects
                    .iter()
                    .filter(|o| filter.matches_value(o))
                    .map(to_bytes)
                    .collect(),
                revision: self.store.revision(),
                continue_token: None,
                remaining: None,
            });
        }
        let prefix = res.scope_prefix(if res.namespaced { namespace } else { None });
        const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";
        let given_rv = opts.resource_version.as_deref().filter(|rv| !rv.is_empty());
        Self::check_version_match(given_rv, opts.resource_version_match.as_deref())?;
        // The revision an older snapshot is read at: a later page of a list, or an
        // exact resourceVersion.
        let mut at = None;
        if let Some(rv) = given_rv.filter(|rv| *rv != "0") {
            if opts.continue_token.is_some() {
                return Err(Error::BadRequest(
                    "specifying resource version is not allowed when using continue".into(),
                ));
            }
            let rv = parse_rv(rv)?;
            self.wait_for_revision(rv).await?;
            if opts.resource_version_match.as_deref() == Some("Exact") {
                at = Some(rv);
            }
        }
        let start = match &opts.continue_token {
            None => None,
            Some(token) => {
                let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(token)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<ContinueToken>(&b).ok())
                    .ok_or_else(|| Error::BadRequest("invalid continue token".into()))?;
                if !raw.start.starts_with(&prefix) || raw.rv > self.store.revision() {
                    return Err(Error::BadRequest("invalid continue token".into()));
                }
                if !raw.latest {
                    at = Some(raw.rv);
                }
                Some(raw.start)
            }
        };
        let filter = watch::Filter::new(res, &opts.label, &opts.field)?;
        let limit = opts.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut last_key = None;
        let mut more = false;
        // Objects after the ones read, when counted.
        let mut after = None;
        // Without selectors a page is exactly `limit` entries; ask for one more to know
        // whether to hand out a continue token.
        let want = if filter.is_trivial() {
            limit.map_or(usize::MAX, |l| l.saturating_add(1))
        } else {
            usize::MAX
        };
        let (page, revision) = match at {
            Some(rv) if rv < self.store.revision() => {
                match self
                    .store
                    .list_page_at(&prefix, start.as_deref(), want, rv)
                    .await?
                {
                    Some(page) => (page, rv),
                    None if opts.continue_token.is_some() => {
                        let token = ContinueToken {
                            rv,
                            start: start.clone().unwrap_or_default(),
                            latest: true,
                        };
                        return Err(Error::ExpiredContinue {
                            message: CONTINUE_EXPIRED.into(),
                            token: token.encode(),
                        });
                    }
                    None => {
                        return Err(Error::Expired(format!(
                            "too old resource version: {rv} ({})",
                            self.store.compacted() + 1
                        )));
                    }
                }
            }
            // A page of a list without selectors tells how many objects follow it.
            _ if limit.is_some() && filter.is_trivial() => {
                let (page, revision, rest) =
                    self.store
                        .list_page_counted(&prefix, start.as_deref(), want);
                after = Some(rest);
                (page, revision)
            }
            _ => self.store.list_page(&prefix, start.as_deref(), want),
        };
        for (key, rec) in page {
            if !filter.matches_bytes(&rec.value)? {
                continue;
            }
            if limit.is_some_and(|l| items.len() == l) {
                more = true;
                break;
            }
            last_key = Some(key);
            items.push(convert::served(res, &rec.value));
        }
        let continue_token = match (more, last_key) {
            (true, Some(k)) => Some(
                ContinueToken {
                    rv: revision,
                    start: k.to_string(),
                    latest: false,
                }
                .encode(),
            ),
            _ => None,
        };
        // The one read beyond the page is not in it either.
        let remaining = after.filter(|_| more).map(|rest| rest as u64 + 1);
        Ok(List {
            items,
            revision,
            continue_token,
            remaining,
        })
    }

    /// A list's `resourceVersionMatch` as Kubernetes validates ListOptions.
    fn check_version_match(rv: Option<&str>, matching: Option<&str>) -> Result<()> {
        let field = "resourceVersionMatch";
        let cause = match (matching.filter(|m| !m.is_empty()), rv) {
            (None, _) => return Ok(()),
            (Some(m), _) if m != "Exact" && m != "NotOlderThan" => {
                Cause::not_supported(field, m, &["Exact", "NotOlderThan"])
            }
            (Some(_), None) => Cause::forbidden(
                field,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ),
            (Some("Exact"), Some("0")) => Cause::forbidden(
                field,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ),
            _ => return Ok(()),
        };
        Err(Error::Invalid {
            group: "meta.k8s.io".into(),
            kind: "ListOptions".into(),
            name: String::new(),
            causes: vec![cause],
        })
    }

    /// Waits (briefly) until the store has reached `revision`.
    async fn wait_for_revision(&self, revision: u64) -> Result<()> {
        if self.store.revision() >= revision {
            return Ok(());
        }
        let mut w = self.store.watch(store::WatchOptions {
            prefix: "\u{10FFFF}".into(),
            after: None,
            progress_every: Some(Duration::from_millis(50)),
        })?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        while self.store.revision() < revision {
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::TooLargeResourceVersion(format!(
                    "Too large resource version: {revision}, current: {}",
                    self.store.revision()
                )));
            }
            let _ = tokio::time::timeout_at(deadline, w.next()).await;
        }
        Ok(())
    }

    /// Replaces an object (PUT), or its status.
    pub async fn update(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        mut obj: Value,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Written> {
        if let Some(stored) = convert::stored_resource(res) {
            return Box::pin(self.converted_update(res, &stored, namespace, name, obj, part, opts))
                .await;
        }
        let ns = Self::scope(res, namespace)?;
        Self::check_type(res, &mut obj)?;
        let m = meta_mut(&mut obj)?;
        check_identity(m, ns, Some(name))?;
        let expect = match m.get("resourceVersion").and_then(Value::as_str) {
            Some(rv) if !rv.is_empty() => Some(parse_rv(rv)?),
            _ => None,
        };
        let key = res.key(ns, name);
        self.update_with(res, &key, name, expect, opts, |_old| Ok(obj.clone()), part)
            .await
    }

    /// Carries out a request for an action subresource of an object (one its kind's
    /// descriptor lists as [`Serves::Action`], such as `pods/eviction`), by its strategy.
    ///
    /// [`Serves::Action`]: catalog::Serves::Action
    pub async fn act(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        sub: &str,
        body: &Value,
        opts: &WriteOptions,
    ) -> Result<strategy::Acted> {
        let served = res
            .subresources
            .iter()
            .any(|s| s.name == sub && s.serves == catalog::Serves::Action);
        if !served {
            return Err(Error::MethodNotAllowed(format!(
                "{} do not serve the subresource {sub:?}",
                res.qualified_plural()
            )));
        }
        let ns = Self::scope(res, namespace)?;
        res.strategy.act(self, sub, ns, name, body, opts).await
    }

    /// Applies a patch to an object or its status.
    pub async fn patch(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Written> {
        // A strategic merge patch needs the merge keys of the Go types; a definition's
        // schema has none, so custom kinds refuse it (as kube-apiserver does).
        if matches!(patch, Patch::Strategic(_)) && !res.schema.is_builtin() {
            return Err(Error::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
            ));
        }
        if let Some(stored) = convert::stored_resource(res) {
            return Box::pin(
                self.converted_patch(res, &stored, namespace, name, patch, part, opts),
            )
            .await;
        }
        let ns = Self::scope(res, namespace)?;
        let key = res.key(ns, name);
        self.update_with(
            res,
            &key,
            name,
            None,
            opts,
            |old| Ok(patch.apply(res, old)?),
            part,
        )
        .await
    }

    /// A write or delete meant for the object with uid `want`, while `have` is there.
    fn uid_mismatch(res: &Resource, name: &str, want: &str, have: &str) -> Error {
        Error::Conflict {
            group: res.group.clone(),
            resource: res.qualified_plural(),
            name: name.to_string(),
            message: format!(
                "Precondition failed: UID in precondition: {want}, UID in object meta: {have}"
            ),
        }
    }

    /// The read-modify-write loop shared by update and patch: `change` makes the new object
    /// from the current one; conflicts with concurrent writers are retried unless the
    /// client named the resourceVersion it expects.
    #[allow(clippy::too_many_arguments)]
    async fn update_with(
        &self,
        res: &Resource,
        key: &str,
        name: &str,
        expect: Option<u64>,
        opts: &WriteOptions,
        change: impl Fn(&Value) -> Result<Value>,
        part: Part,
    ) -> Result<Written> {
        for _ in 0..UPDATE_RETRIES {
            let cur = self
                .store
                .get(key)
                .ok_or_else(|| Self::not_found(res, name))?;
            let old = parse(&cur.value)?;
            let mut new = change(&old)?;
            Self::check_type(res, &mut new)?;
            // A patch may not rename the object either.
            check_identity(meta_mut(&mut new)?, None, Some(name))?;
            if part == Part::Status {
                // A status write stores the object as it is with the new status: that is
                // what is checked, not the rest of what the request sent (upstream resets
                // the spec before it validates).
                new = Self::with_status_of(res, &old, new);
            }
            let mut schema_causes = Vec::new();
            let warnings = schema::admit_with(
                res,
                &mut new,
                opts.field_validation,
                &opts.body,
                &mut schema_causes,
            )?;
            // A resourceVersion in the new object (a PUT body or a patch that sets it) is
            // a precondition.
            let wanted = match expect {
                Some(rv) => Some(rv),
                None => match meta_str(&new, "resourceVersion") {
                    Some(rv) if !rv.is_empty() && rv != cur.revision.to_string() => {
                        Some(parse_rv(rv)?)
                    }
                    _ => None,
                },
            };
            if wanted.is_some_and(|rv| rv != cur.revision) {
                return Err(Self::conflict(res, name));
            }
            // So is a uid: a write meant for an object deleted and re-created under the
            // same name must not land on the new one.
            let have = meta_str(&old, "uid").unwrap_or("");
            if let Some(uid) = meta_str(&new, "uid").filter(|u| !u.is_empty() && *u != have) {
                return Err(Self::uid_mismatch(res, name, uid, have));
            }
            let mut merged = Self::merge_update(res, &old, new, part)?;
            // Held until the object is written (a Service, with its addresses).
            let _guard = res
                .strategy
                .before_write(
                    self,
                    Some(key),
                    Some(&old),
                    &mut merged,
                    part,
                    &mut schema_causes,
                )
                .await?;
            res.strategy
                .validate_update(&old, &merged, part, &mut schema_causes);
            Self::validate(res, &merged, &schema_causes)?;
            if let Some(user) = &opts.user {
                let ns = meta_str(&merged, "namespace");
                res.strategy
                    .authorize_write(self, user, ns, Some(&old), &merged)?;
            }
            let mut warnings = warnings;
            if part == Part::Main {
                let ns = meta_str(&merged, "namespace");
                warnings.extend(res.strategy.police(self, ns, name, Some(&old), &merged)?);
            }
            let done = |object| Written {
                object,
                warnings: warnings.clone(),
            };
            if same_object(&old, &merged) {
                return Ok(done(cur.value));
            }
            if let Some(manager) = &opts.manager {
                apply::record_update(res, Some(&old), &mut merged, manager, part == Part::Status);
            }
            let bytes = stored(&merged)?;
            if opts.dry_run {
                return Ok(done(bytes));
            }
            // What holds an object being deleted: its finalizers (and a namespace's).
            let held = |v: &Value| {
                let list = |p: &str| {
                    v.pointer(p)
                        .and_then(Value::as_array)
                        .is_some_and(|f| !f.is_empty())
                };
                list("/metadata/finalizers") || res.strategy.holds_deletion(v)
            };
            // The update that removes the last one completes the deletion. (A pod marked
            // for graceful deletion holds nothing and is removed by its node.)
            let finished = meta(&merged).is_some_and(|m| m.contains_key("deletionTimestamp"))
                && !held(&merged)
                && held(&old);
            let pre = Preconditions::revision(cur.revision);
            let outcome = if finished {
                // The last finalizer is gone: the deletion completes, in one write that
                // answers (and tells watchers) the object as this write left it.
                self.store.delete_as(key, bytes, pre).await?
            } else {
                self.store.update(key, bytes, pre).await?
            };
            match outcome {
                Outcome::Written(r) => {
                    res.strategy.after_write(self, &r.value, finished);
                    return Ok(done(r.value));
                }
                Outcome::Conflict(_) if wanted.is_none() => continue,
                Outcome::Conflict(_) => return Err(Self::conflict(res, name)),
                Outcome::NotFound => return Err(Self::not_found(res, name)),
                Outcome::AlreadyExists(_) => {
                    return Err(Error::Internal("unexpected store outcome on update".into()));
                }
            }
        }
        Err(Self::conflict(res, name))
    }

    /// What a status write stores: the metadata and status of `new` with everything else
    /// of `old` (its spec), then what the kind resets of the metadata. The metadata the
    /// object keeps whatever the client sends (uid, creation, deletion, generation) is
    /// restored by [`merge_update`](Self::merge_update) as for any update.
    fn with_status_of(res: &Resource, old: &Value, new: Value) -> Value {
        let mut m = old.clone();
        if let Some(dst) = m.as_object_mut() {
            match new.get("status") {
                Some(status) => dst.insert("status".into(), status.clone()),
                None => dst.remove("status"),
            };
            if let Some(meta) = new.get("metadata") {
                dst.insert("metadata".into(), meta.clone());
            }
        }
        res.strategy.prepare_status_update(old, &mut m);
        m
    }

    /// The object that an update of `part` stores: immutable metadata and the other part
    /// come from `old`; generation moves when anything but metadata and status changed.
    fn merge_update(res: &Resource, old: &Value, new: Value, part: Part) -> Result<Value> {
        let mut merged = match part {
            // Made by `with_status_of` from the stored object.
            Part::Status => new,
            Part::Main => {
                let mut m = new;
                // The status a client sent is not stored; the strategy may look at it.
                let mut incoming = None;
                if res.status
                    && let Some(dst) = m.as_object_mut()
                {
                    incoming = match old.get("status") {
                        Some(s) => dst.insert("status".into(), s.clone()),
                        None => dst.remove("status"),
                    };
                }
                res.strategy.prepare_update(old, incoming.as_ref(), &mut m);
                m
            }
            Part::All => new,
        };
        res.strategy.default(&mut merged);
        let old_meta = meta(old).cloned().unwrap_or_default();
        let mm = meta_mut(&mut merged)?;
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(field) {
                Some(v) => {
                    mm.insert(field.into(), v.clone());
                }
                None => {
                    mm.remove(field);
                }
            }
        }
        mm.remove("resourceVersion");
        mm.remove("selfLink");
        if old_meta.contains_key("deletionTimestamp") {
            // Finalizers may be removed from an object being deleted, never added.
            let old_f = finalizers(&old_meta);
            let new_f = mm
                .get("finalizers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            if let Some(added) = new_f.iter().find(|f| !old_f.contains(f)) {
                return Err(Self::invalid(
                    res,
                    old_meta.get("name").and_then(Value::as_str).unwrap_or(""),
                    vec![Cause::forbidden(
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers [{added:?}]"
                        ),
                    )],
                ));
            }
        }
        if res.generation && res.strategy.generation_changes(old, &merged, part) {
            let g = old_meta
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta_mut(&mut merged)?.insert("generation".into(), json!(g.saturating_add(1)));
        }
        Ok(merged)
    }

    /// Watches objects of a resource; see [`WatchOptions`].
    pub fn watch(
        &self,
        res: &Arc<Resource>,
        namespace: Option<&str>,
        opts: WatchOptions,
    ) -> Result<Watch> {
        Watch::start(self, res, namespace, opts)
    }
}

pub use crate::types::{MIRROR_ANNOTATION, is_mirror_pod};

/// The API's defaults of a pod, without a store: what a node agent fills into the pods it
/// reads from files.
pub fn default_pod(pod: &mut Value) {
    catalog::of(Kind::Pod).strategy.default(pod);
}

/// The API's validation of a pod (schema, metadata and pod rules), without a store: what
/// a node agent checks the pods it reads from files against before running them.
pub fn validate_pod(pod: &Value) -> Result<()> {
    let res = catalog::of(Kind::Pod);
    let mut obj = pod.clone();
    let mut schema_causes = Vec::new();
    schema::admit(res, &mut obj, FieldValidation::Ignore, &mut schema_causes)?;
    Registry::validate(res, &obj, &schema_causes)
}

/// The name and namespace a body gives, if any, must be those of the request.
fn check_identity(m: &Map<String, Value>, ns: Option<&str>, name: Option<&str>) -> Result<()> {
    if let (Some(want), Some(got)) = (name, m.get("name").and_then(Value::as_str))
        && got != want
    {
        return Err(Error::BadRequest(format!(
            "the name of the object ({got}) does not match the name on the URL ({want})"
        )));
    }
    if let (Some(want), Some(got)) = (ns, m.get("namespace").and_then(Value::as_str))
        && !got.is_empty()
        && got != want
    {
        return Err(Error::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        ));
    }
    Ok(())
}

fn finalizers(m: &Map<String, Value>) -> Vec<String> {
    m.get("finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Equal apart from resourceVersion.
fn same_object(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        v
    };
    strip(old) == strip(new)
}

/// Whether anything outside metadata and status differs.
fn spec_changed(old: &Value, new: &Value) -> bool {
    changed_besides(old, new, &["metadata", "status"])
}

/// Whether `old` and `new` differ in a top-level member other than those `kept`.
pub(crate) fn changed_besides(old: &Value, new: &Value, kept: &[&str]) -> bool {
    fn members<'v>(v: &'v Value, kept: &[&str]) -> BTreeMap<&'v String, &'v Value> {
        v.as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| !kept.contains(&k.as_str()))
            .collect()
    }
    members(old, kept) != members(new, kept)
}
