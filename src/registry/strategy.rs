//! Per-kind rules as values: the [`Strategy`] trait, whose hooks the engine calls for
//! defaults, validation, the spec/status split, deletion and admission, and the strategies
//! of the core kinds with their rules (Services and DeploymentConfigs keep theirs beside
//! their other code).

use serde_json::{Map, Value, json};

use super::catalog::{self, Kind};
use super::{Cause, DeleteOptions, Error, Part, Propagation, Registry};
use crate::types::names;

/// What makes one kind differ from another in the engine's eyes: every hook has the
/// behaviour of a plain kind (a ConfigMap's) unless the kind says otherwise. A kind's
/// descriptor in the catalog names its strategy; the engine calls these hooks and never
/// asks which kind it serves.
pub trait Strategy: Send + Sync {
    /// Fills in the fields the API server defaults, on create and update alike (called
    /// again whenever the name changes, so a default may depend on it).
    fn default(&self, _obj: &mut Value) {}

    /// What only a create sets: the status a new object starts with (for kinds whose
    /// status the server owns), and fields a create resets.
    fn prepare_create(&self, _obj: &mut Value) {}

    /// Which name rule the kind's objects follow.
    fn name_errors(&self, name: &str) -> Vec<String> {
        names::dns1123_subdomain(name)
    }

    /// Semantic rules beyond the schema, reported as field causes.
    fn validate(&self, _obj: &Value, _causes: &mut Vec<Cause>) {}

    /// Whether the schema's required `field` (a path like `status.conditions[0].type`) may
    /// be left out all the same (kube-apiserver does not check it).
    fn may_leave_out(&self, _field: &str) -> bool {
        false
    }

    /// Rules of a create only, beyond those every write checks.
    fn validate_create(&self, _obj: &Value, _causes: &mut Vec<Cause>) {}

    /// Rules of an update of `part` from `old` to `new`, beyond those of a create.
    fn validate_update(&self, _old: &Value, _new: &Value, _part: Part, _causes: &mut Vec<Cause>) {}

    /// What an update of the main resource keeps of `old` beyond its status (already
    /// kept for kinds with a status subresource): `incoming` is the status the client
    /// sent, `merged` what will be stored.
    fn prepare_update(&self, _old: &Value, _incoming: Option<&Value>, _merged: &mut Value) {}

    /// What a status write keeps of `old` beyond its spec (the engine keeps everything but
    /// the metadata and the status): `new` is the object to be stored, with the metadata
    /// the client sent. Most kinds keep that metadata, as kube-apiserver's status
    /// strategies do; a kind resets what its status writers may not change.
    fn prepare_status_update(&self, _old: &Value, _new: &mut Value) {}

    /// Whether an update of `part` moves `metadata.generation` (kinds with a status).
    fn generation_changes(&self, old: &Value, new: &Value, _part: Part) -> bool {
        super::spec_changed(old, new)
    }

    /// Whether something besides `metadata.finalizers` holds the deletion of `obj`.
    fn holds_deletion(&self, _obj: &Value) -> bool {
        false
    }

    /// Marks an object whose deletion waits for its finalizers.
    fn mark_deleting(&self, _obj: &mut Value) {}

    /// Refuses the deletion of an object the kind never lets go.
    fn check_delete(&self, _name: &str) -> Result<(), Error> {
        Ok(())
    }

    /// How dependents are treated when the client does not say.
    fn default_propagation(&self) -> Option<Propagation> {
        None
    }

    /// The grace period a deletion of `obj` waits for, when it does not delete at once.
    fn graceful_deletion(&self, _obj: &Value, _opts: &DeleteOptions) -> Option<i64> {
        None
    }

    /// Checks a new object against others in the store (an admission step).
    fn admit(
        &self,
        _reg: &Registry,
        _ns: Option<&str>,
        _name: &str,
        _obj: &Value,
    ) -> Result<(), Error> {
        Ok(())
    }

    /// Admission that may refuse a create (`old: None`) or an update of the main part,
    /// or warn of it, with what the store holds (Pod Security): the warnings go back
    /// with the answer.
    fn police(
        &self,
        _reg: &Registry,
        _ns: Option<&str>,
        _name: &str,
        _old: Option<&Value>,
        _obj: &Value,
    ) -> Result<Vec<String>, Error> {
        Ok(Vec::new())
    }

    /// Whether `user` may write `new` as it will be stored, `old` being what the store
    /// holds on an update (RBAC's escalation and bind checks). Only writes a user asked
    /// for through the API are checked.
    fn authorize_write(
        &self,
        _reg: &Registry,
        _user: &super::User,
        _ns: Option<&str>,
        _old: Option<&Value>,
        _new: &Value,
    ) -> Result<(), Error> {
        Ok(())
    }

    /// Runs just before a create (`old: None`) or an update of `part` is written, with
    /// what the store holds: the returned guard is held until the write is done (a
    /// Service's addresses are chosen under one).
    fn before_write<'r: 'a, 'a>(
        &'a self,
        _reg: &'r Registry,
        _key: Option<&'a str>,
        _old: Option<&'a Value>,
        _obj: &'a mut Value,
        _part: Part,
        _causes: &'a mut Vec<Cause>,
    ) -> BoxFuture<'a, Result<Option<WriteGuard<'r>>, Error>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    /// The value of a selectable field, rendered as a field selector compares it.
    fn field_value(&self, obj: &Value, field: &str) -> Option<String> {
        value_at(obj, field)
    }

    /// The `scale` subresource's view of `obj` (kinds that have one): desired and
    /// current replicas, and the selector of what it scales, as a label selector string.
    fn scale(&self, obj: &Value) -> Scale {
        Scale {
            replicas: obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0)),
            status_replicas: obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            selector: crate::types::labels::Selector::from_map(&crate::types::labels::map_at(
                obj,
                "/spec/selector",
            ))
            .to_string(),
        }
    }

    /// The merge patch that sets the desired replicas to `replicas`.
    fn scale_patch(&self, replicas: i64) -> Value {
        json!({"spec": {"replicas": replicas}})
    }

    /// A stored object as it is read, when that differs (a custom kind fills in the
    /// defaults its schema gained since the object was written).
    fn read(&self, _stored: &[u8]) -> Option<bytes::Bytes> {
        None
    }

    /// Runs once a write is durable: `object` as stored, or its last state when it was
    /// `deleted`.
    fn after_write(&self, _reg: &Registry, _object: &[u8], _deleted: bool) {}

    /// For a kind whose objects are made when read rather than stored (resource
    /// metrics): every object there is now, in `namespace` or in all. Such a kind
    /// serves only `get` and `list`.
    fn live(&self, _reg: &Registry, _namespace: Option<&str>) -> Option<Vec<Value>> {
        None
    }

    /// Runs when a registry opens on its store.
    fn on_open(&self, _reg: &Registry) {}

    /// Carries out a request for subresource `sub` of object `name` with `body`: one
    /// the kind's descriptor lists as [`Serves::Action`] (a pod's `eviction`).
    ///
    /// [`Serves::Action`]: super::catalog::Serves::Action
    fn act<'a>(
        &'a self,
        _reg: &'a Registry,
        sub: &'a str,
        _ns: Option<&'a str>,
        _name: &'a str,
        _body: &'a Value,
        _opts: &'a super::WriteOptions,
    ) -> BoxFuture<'a, Result<Acted, Error>> {
        Box::pin(std::future::ready(Err(Error::MethodNotAllowed(format!(
            "the server does not serve the subresource {sub:?} of this kind"
        )))))
    }

    /// The error for a write of the `scale` of a missing object, when the kind names it
    /// otherwise than NotFound of its own resource (OpenShift names a missing
    /// DeploymentConfig's Scale by its extensions kind).
    fn missing_scale(&self, _name: &str) -> Option<Error> {
        None
    }
}

/// What a subresource action answers.
#[derive(Debug)]
pub enum Acted {
    /// 201 Created, with this body.
    Created(bytes::Bytes),
    /// 200 OK: the object as written (with its warnings).
    Written(super::Written),
    /// 204 No Content: nothing was to be done.
    NoContent,
}

/// What the `scale` subresource shows of an object.
pub struct Scale {
    pub replicas: Value,
    pub status_replicas: Value,
    pub selector: String,
}

/// What a [`Strategy::before_write`] holds until the write is done.
pub type WriteGuard<'a> = tokio::sync::MutexGuard<'a, ()>;

/// A boxed future, as the dyn-compatible hooks return them.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The value of the field at a dotted path, rendered as a field selector compares it.
pub fn value_at(obj: &Value, field: &str) -> Option<String> {
    let path = format!("/{}", field.replace('.', "/"));
    let unset = || BOOLEAN_FIELDS.contains(&field).then(|| "false".to_string());
    match obj.pointer(&path) {
        None | Some(Value::Null) => unset(),
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Bool(b)) => Some(b.to_string()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(other) => Some(other.to_string()),
    }
}

/// Selectable fields that are booleans: unset, they read `false` (as Go's zero value
/// does in the API server's field sets), so `spec.unschedulable=false` finds every node
/// that does not say otherwise.
const BOOLEAN_FIELDS: &[&str] = &["spec.unschedulable", "spec.hostNetwork"];

/// A mirror pod's annotation is its node's: it is neither added, changed nor removed by
/// an update.
fn check_mirror_annotation(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    use super::MIRROR_ANNOTATION;
    let mirror = |v: &Value| {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(MIRROR_ANNOTATION))
            .cloned()
    };
    let detail = match (mirror(old), mirror(new)) {
        (None, None) => return,
        (Some(a), Some(b)) if a == b => return,
        (None, Some(_)) => "may not add mirror pod annotation",
        (Some(_), _) => "may not remove or update mirror pod annotation",
    };
    causes.push(Cause::forbidden(
        &format!("metadata.annotations[{MIRROR_ANNOTATION}]"),
        detail,
    ));
}

/// The grace period a pod's deletion waits for its node, when it does: pods bound to a
/// node and not finished are deleted gracefully (as Kubernetes), unless asked for 0.
fn graceful_pod_deletion(pod: &Value, opts: &DeleteOptions) -> Option<i64> {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    // A mirror pod only reflects a static pod its node runs from a file: it goes at once.
    if !bound || finished || super::is_mirror_pod(pod) {
        return None;
    }
    let grace = opts.grace_period_seconds.unwrap_or_else(|| {
        pod.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30)
    });
    (grace > 0).then_some(grace)
}

/// Kinds with no rules of their own (ServiceAccounts).
pub struct Plain;
impl Strategy for Plain {}

pub struct Pod;
impl Strategy for Pod {
    fn prepare_status_update(&self, old: &Value, new: &mut Value) {
        // A node reports status; who owns the pod is not its to say.
        keep_metadata(old, new, &["ownerReferences"]);
    }

    fn act<'a>(
        &'a self,
        reg: &'a Registry,
        sub: &'a str,
        ns: Option<&'a str>,
        name: &'a str,
        body: &'a Value,
        opts: &'a super::WriteOptions,
    ) -> BoxFuture<'a, Result<Acted, Error>> {
        let ns = ns.unwrap_or_default();
        Box::pin(async move {
            match sub {
                "eviction" => {
                    let out = super::policy::evict(reg, ns, name, body, opts).await?;
                    Ok(Acted::Created(
                        serde_json::to_vec(&out).expect("JSON serializes").into(),
                    ))
                }
                "binding" => {
                    super::actions::bind(reg, catalog::of(Kind::Pod), ns, name, body, opts).await
                }
                _ => Err(Error::MethodNotAllowed(format!(
                    "pods do not serve the subresource {sub:?}"
                ))),
            }
        })
    }
    fn default(&self, obj: &mut Value) {
        default_pod(obj)
    }
    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"phase": "Pending"}));
        }
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        match obj.get("spec") {
            None | Some(Value::Null) => required(causes, "spec"),
            Some(spec) => validate_pod_spec(spec, "spec", causes),
        }
    }
    fn validate_update(&self, old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        check_mirror_annotation(old, new, causes);
        // A binding (Part::All) is how a pod's node is set; an update is not.
        if part == Part::Main {
            validate_pod_update(old, new, causes);
        }
    }
    fn graceful_deletion(&self, pod: &Value, opts: &DeleteOptions) -> Option<i64> {
        graceful_pod_deletion(pod, opts)
    }
    fn admit(
        &self,
        reg: &Registry,
        ns: Option<&str>,
        name: &str,
        obj: &Value,
    ) -> Result<(), Error> {
        reg.check_service_account(ns, name, obj)
    }
    fn police(
        &self,
        reg: &Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, Error> {
        super::podsecurity::admit(reg, "pods", ns, name, old, obj, "")
    }
    fn before_write<'r: 'a, 'a>(
        &'a self,
        reg: &'r Registry,
        _key: Option<&'a str>,
        old: Option<&'a Value>,
        obj: &'a mut Value,
        part: Part,
        _causes: &'a mut Vec<Cause>,
    ) -> BoxFuture<'a, Result<Option<WriteGuard<'r>>, Error>> {
        // The RuntimeClass admission: on creation only (the class is immutable after).
        // The Priority admission too: a new pod's class gives its priority.
        let admitted = match (old, part) {
            (None, Part::Main) => super::node::admit_pod(reg, obj)
                .and_then(|()| super::scheduling::admit_pod(reg, obj)),
            _ => Ok(()),
        };
        Box::pin(std::future::ready(admitted.map(|()| None)))
    }
}

pub struct ReplicationController;
impl Strategy for ReplicationController {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, Error> {
        super::podsecurity::admit(
            reg,
            "replicationcontrollers",
            ns,
            name,
            old,
            obj,
            "/spec/template",
        )
    }
    fn default(&self, obj: &mut Value) {
        default_rc(obj)
    }
    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"replicas": 0}));
        }
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_rc(obj, causes)
    }
    // The v1 API orphans an RC's pods unless told otherwise.
    fn default_propagation(&self) -> Option<Propagation> {
        Some(Propagation::Orphan)
    }
}

pub struct Node;
impl Strategy for Node {
    fn default(&self, obj: &mut Value) {
        // As the API server defaults it: `spec` is there, if empty.
        if obj.get("spec").is_none_or(Value::is_null)
            && let Some(m) = obj.as_object_mut()
        {
            m.insert("spec".into(), json!({}));
        }
    }
}

pub struct Event;
impl Strategy for Event {
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        if obj.get("involvedObject").is_none_or(Value::is_null) {
            required(causes, "involvedObject");
        }
    }
    fn field_value(&self, obj: &Value, field: &str) -> Option<String> {
        match field {
            "source" => value_at(obj, "source.component"),
            f => value_at(obj, f),
        }
    }
}

/// events.k8s.io/v1 Events: the core Events, seen through the newer API (see `convert`).
pub struct EventsV1Event;
impl Strategy for EventsV1Event {
    fn field_value(&self, obj: &Value, field: &str) -> Option<String> {
        Event.field_value(obj, &super::convert::stored_event_field(field))
    }
}

/// A PodTemplate: its template is defaulted and checked as a pod's spec is.
pub struct PodTemplate;
impl Strategy for PodTemplate {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, Error> {
        super::podsecurity::admit(reg, "podtemplates", ns, name, old, obj, "/template")
    }
    fn default(&self, obj: &mut Value) {
        if let Some(spec) = obj.pointer_mut("/template/spec") {
            default_pod_spec(spec);
        }
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        if let Some(spec) = obj.pointer("/template/spec") {
            validate_pod_spec(spec, "template.spec", causes);
        }
    }
}

/// core/v1 PersistentVolumeClaim: stored and shown; nothing provisions or binds volumes
/// yet, so a claim stays `Pending` (`SetDefaults_PersistentVolumeClaim*`,
/// `ValidatePersistentVolumeClaim*`).
pub struct PersistentVolumeClaim;
impl Strategy for PersistentVolumeClaim {
    fn default(&self, obj: &mut Value) {
        default_claim(obj);
    }
    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"phase": "Pending"}));
        }
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_claim_spec(&obj["spec"], "spec", causes);
    }
    fn validate_update(&self, old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        if part == Part::Status {
            return;
        }
        let rest = |obj: &Value| {
            let mut spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
            if let Some(m) = spec.as_object_mut() {
                m.remove("volumeAttributesClassName");
                if let Some(r) = m.get_mut("resources").and_then(Value::as_object_mut) {
                    r.remove("requests");
                }
            }
            spec
        };
        if rest(old) != rest(new) {
            causes.push(Cause::forbidden(
                "spec",
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        }
    }
}

/// A claim's defaults, alone or as a StatefulSet's template: `Filesystem` volumes, a
/// `Pending` phase.
pub(super) fn default_claim(claim: &mut Value) {
    if let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("volumeMode")
            .or_insert_with(|| json!("Filesystem"));
    }
    if let Some(m) = claim.as_object_mut() {
        let status = m.entry("status").or_insert_with(|| json!({}));
        if let Some(st) = status.as_object_mut() {
            st.entry("phase").or_insert_with(|| json!("Pending"));
        }
    }
}

/// A claim's spec (`ValidatePersistentVolumeClaimSpec`): access modes, a storage request
/// and the volume mode.
pub(super) fn validate_claim_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    const MODES: [&str; 4] = [
        "ReadOnlyMany",
        "ReadWriteMany",
        "ReadWriteOnce",
        "ReadWriteOncePod",
    ];
    let modes = spec["accessModes"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    if modes.is_empty() {
        causes.push(Cause::required_with(
            &format!("{path}.accessModes"),
            "at least 1 access mode is required",
        ));
    }
    for m in modes {
        let mode = m.as_str().unwrap_or("");
        if !MODES.contains(&mode) {
            causes.push(Cause::not_supported(
                &format!("{path}.accessModes"),
                mode,
                &MODES,
            ));
        }
    }
    if spec.pointer("/resources/requests/storage").is_none() {
        causes.push(Cause::required(&format!("{path}.resources[storage]")));
    }
    one_of(
        causes,
        &spec["volumeMode"],
        &format!("{path}.volumeMode"),
        &["Block", "Filesystem"],
    );
}

/// A ConfigMap's or Secret's rule once `immutable` is set: it stays set and `fields`
/// keep their contents (an absent map counts as an empty one).
fn immutable_once_set(old: &Value, new: &Value, fields: &[&str], causes: &mut Vec<Cause>) {
    if old["immutable"] != true {
        return;
    }
    const WHY: &str = "field is immutable when `immutable` is set";
    if new["immutable"] != true {
        causes.push(Cause::forbidden("immutable", WHY));
    }
    let contents = |v: &Value, f: &str| match v.get(f) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(c) => c.clone(),
    };
    for f in fields {
        if contents(old, f) != contents(new, f) {
            causes.push(Cause::forbidden(f, WHY));
        }
    }
}

pub struct ConfigMap;
impl Strategy for ConfigMap {
    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        immutable_once_set(old, new, &["data", "binaryData"], causes);
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let data = obj.get("data").and_then(Value::as_object);
        let binary = obj.get("binaryData").and_then(Value::as_object);
        for k in binary.into_iter().flat_map(|b| b.keys()) {
            if data.is_some_and(|d| d.contains_key(k)) {
                causes.push(Cause::invalid(
                    &format!("data[{k}]"),
                    &json!(k),
                    "duplicate of key present in binaryData",
                ));
            }
        }
        let bytes: usize = data
            .into_iter()
            .flatten()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .chain(binary.into_iter().flatten().map(|(k, v)| {
                // base64: three bytes in four characters.
                k.len() + v.as_str().map_or(0, |b| b.len() / 4 * 3)
            }))
            .sum();
        if bytes > MAX_DATA_BYTES {
            causes.push(too_long("data", MAX_DATA_BYTES));
        }
        for field in ["data", "binaryData"] {
            if let Some(Value::Object(m)) = obj.get(field) {
                for k in m.keys() {
                    if !config_key_ok(k) {
                        causes.push(Cause::invalid(
                            &format!("{field}[{k}]"),
                            &Value::String(k.clone()),
                            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                        ));
                    }
                }
            }
        }
    }
}

pub struct Secret;
impl Strategy for Secret {
    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        immutable(old, new, "/type", "type", causes);
        immutable_once_set(old, new, &["data"], causes);
    }
    fn default(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.entry("type").or_insert_with(|| json!("Opaque"));
            string_data_into_data(m);
        }
    }
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let bytes: usize = obj
            .get("data")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, |b| b.len() / 4 * 3))
            .sum();
        if bytes > MAX_DATA_BYTES {
            causes.push(too_long("data", MAX_DATA_BYTES));
        }
        if let Some(Value::Object(m)) = obj.get("data") {
            for (k, v) in m {
                if !config_key_ok(k) {
                    causes.push(Cause::invalid(
                        &format!("data[{k}]"),
                        &Value::String(k.clone()),
                        "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                    ));
                }
                let ok = v.as_str().is_some_and(|s| {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.decode(s).is_ok()
                });
                if !ok {
                    causes.push(Cause::invalid(
                        &format!("data[{k}]"),
                        v,
                        "must be base64-encoded bytes",
                    ));
                }
            }
        }
    }
}

pub struct Lease;
impl Strategy for Lease {
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        // Leader election decodes these as times; a Lease it cannot read stops it.
        for field in ["acquireTime", "renewTime"] {
            if let Some(t) = obj["spec"].get(field).and_then(Value::as_str)
                && t.parse::<jiff::Timestamp>().is_err()
            {
                causes.push(Cause::invalid(
                    &format!("spec.{field}"),
                    &json!(t),
                    "must be a time such as 2006-01-02T15:04:05.000000Z",
                ));
            }
        }
    }
}
/// A Secret's `stringData` is write-only: its values go into `data`, base64-encoded,
/// replacing those of the same keys, and it is never stored.
fn string_data_into_data(secret: &mut serde_json::Map<String, Value>) {
    use base64::Engine;
    let Some(Value::Object(strings)) = secret.remove("stringData") else {
        return;
    };
    let data = secret.entry("data").or_insert_with(|| json!({}));
    if data.is_null() {
        *data = json!({});
    }
    let Some(data) = data.as_object_mut() else {
        return;
    };
    for (k, v) in strings {
        if let Some(text) = v.as_str() {
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(k, json!(encoded));
        }
    }
}

pub(super) fn object_entry<'a>(obj: &'a mut Value, field: &str) -> &'a mut Map<String, Value> {
    let m = obj.as_object_mut().expect("objects are JSON objects");
    let e = m.entry(field).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut().expect("just made an object")
}

fn default_container(c: &mut Value) {
    let Some(c) = c.as_object_mut() else {
        return;
    };
    c.entry("terminationMessagePath")
        .or_insert_with(|| json!("/dev/termination-log"));
    c.entry("terminationMessagePolicy")
        .or_insert_with(|| json!("File"));
    if !c.contains_key("imagePullPolicy") {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let tag = image
            .rsplit('/')
            .next()
            .and_then(|last| last.split_once(':'))
            .map(|(_, t)| t);
        let policy = if image.contains('@') || !matches!(tag, None | Some("latest")) {
            "IfNotPresent"
        } else {
            "Always"
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    c.entry("resources").or_insert_with(|| json!({}));
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(Value::Object(p)) = c.get_mut(probe) {
            p.entry("timeoutSeconds").or_insert_with(|| json!(1));
            p.entry("periodSeconds").or_insert_with(|| json!(10));
            p.entry("successThreshold").or_insert_with(|| json!(1));
            p.entry("failureThreshold").or_insert_with(|| json!(3));
            default_handler(p);
        }
    }
    if let Some(Value::Object(l)) = c.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(Value::Object(h)) = l.get_mut(hook) {
                default_handler(h);
            }
        }
    }
}

/// An HTTP action's scheme and path, as Kubernetes defaults them.
fn default_handler(h: &mut Map<String, Value>) {
    if let Some(Value::Object(get)) = h.get_mut("httpGet") {
        get.entry("scheme").or_insert_with(|| json!("HTTP"));
        get.entry("path").or_insert_with(|| json!("/"));
    }
}

pub(super) fn default_pod_spec(spec: &mut Value) {
    let Some(s) = spec.as_object_mut() else {
        return;
    };
    s.entry("restartPolicy").or_insert_with(|| json!("Always"));
    s.entry("dnsPolicy")
        .or_insert_with(|| json!("ClusterFirst"));
    s.entry("schedulerName")
        .or_insert_with(|| json!("default-scheduler"));
    s.entry("terminationGracePeriodSeconds")
        .or_insert_with(|| json!(30));
    s.entry("securityContext").or_insert_with(|| json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = s.get_mut(list) {
            cs.iter_mut().for_each(default_container);
        }
    }
}

fn default_pod(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec") {
        default_pod_spec(spec);
        // As the ServiceAccount admission plugin: a pod runs as `default` unless told.
        if let Some(s) = spec.as_object_mut() {
            s.entry("serviceAccountName")
                .or_insert_with(|| json!("default"));
        }
    }
}

fn default_rc(obj: &mut Value) {
    let template_labels = obj
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()));
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("replicas").or_insert_with(|| json!(1));
        if let Some(labels) = &template_labels {
            let empty = spec
                .get("selector")
                .and_then(Value::as_object)
                .is_none_or(|s| s.is_empty());
            if empty {
                spec.insert("selector".into(), labels.clone());
            }
        }
        if let Some(tspec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
            default_pod_spec(tspec);
        }
    }
    if let (Some(labels), Some(meta)) = (
        template_labels,
        obj.get_mut("metadata").and_then(Value::as_object_mut),
    ) {
        let empty = meta
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(|l| l.is_empty());
        if empty {
            meta.insert("labels".into(), labels);
        }
    }
}

/// The most a ConfigMap's or Secret's data may hold, as Kubernetes limits it.
const MAX_DATA_BYTES: usize = 1 << 20;

fn too_long(field: &str, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooLong".into(),
        message: format!("Too long: must have at most {max} bytes"),
        field: field.into(),
    }
}

/// Refuses a change of the field at `pointer` (shown as `field`).
pub(super) fn immutable(
    old: &Value,
    new: &Value,
    pointer: &str,
    field: &str,
    causes: &mut Vec<Cause>,
) {
    if old.pointer(pointer) != new.pointer(pointer) {
        causes.push(Cause::invalid(
            field,
            new.pointer(pointer).unwrap_or(&Value::Null),
            "field is immutable",
        ));
    }
}

fn required(causes: &mut Vec<Cause>, field: &str) {
    causes.push(Cause::required(field));
}

fn config_key_ok(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

pub(super) fn validate_pod_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    validate_pod_spec_with_claims(spec, path, &[], causes)
}

/// [`validate_pod_spec`] of a template whose pods also get a volume for each of `claims`
/// (a StatefulSet's claim templates), which its containers may mount.
pub(super) fn validate_pod_spec_with_claims(
    spec: &Value,
    path: &str,
    claims: &[&str],
    causes: &mut Vec<Cause>,
) {
    let list = |f: &str| {
        spec.get(f)
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
    };
    let mut volumes: std::collections::HashSet<&str> = claims.iter().copied().collect();
    for (i, v) in list("volumes").iter().enumerate() {
        let at = format!("{path}.volumes[{i}].name");
        match v.get("name").and_then(Value::as_str) {
            None | Some("") => required(causes, &at),
            Some(name) => {
                for e in names::dns1123_label(name) {
                    causes.push(Cause::invalid(&at, &json!(name), &e));
                }
                if !volumes.insert(name) {
                    causes.push(duplicate(&at, name));
                }
            }
        }
    }
    if list("containers").is_empty() {
        required(causes, &format!("{path}.containers"));
    }
    // Container names are unique across init and regular containers.
    let mut seen = std::collections::HashSet::new();
    for field in ["initContainers", "containers"] {
        for (i, c) in list(field).iter().enumerate() {
            let at = format!("{path}.{field}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => required(causes, &format!("{at}.name")),
                Some(name) => {
                    for e in names::dns1123_label(name) {
                        causes.push(Cause::invalid(&format!("{at}.name"), &json!(name), &e));
                    }
                    if !seen.insert(name) {
                        causes.push(duplicate(&format!("{at}.name"), name));
                    }
                }
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(|s| s.trim().is_empty())
            {
                required(causes, &format!("{at}.image"));
            }
            validate_container(c, &at, &volumes, causes);
        }
    }
    one_of(
        causes,
        &spec["restartPolicy"],
        &format!("{path}.restartPolicy"),
        &["Always", "OnFailure", "Never"],
    );
    one_of(
        causes,
        &spec["dnsPolicy"],
        &format!("{path}.dnsPolicy"),
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    );
    validate_sysctls(spec, &format!("{path}.securityContext.sysctls"), causes);
}

/// A sysctl's name: dot- or slash-separated segments (`kernel.shm_rmid_forced`,
/// `net/ipv4/ip_forward`), as `validateSysctls` takes them.
const SYSCTL_FORMAT: &str = "([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?";
const SYSCTL_MAX_LENGTH: usize = 253;

/// The pod's sysctls: well-formed names, each once.
fn validate_sysctls(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    static NAME: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(&format!("^{SYSCTL_FORMAT}$")).expect("a valid expression")
    });
    let list = spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut seen = std::collections::HashSet::new();
    for (i, s) in list.iter().enumerate() {
        let at = format!("{path}[{i}].name");
        match s["name"].as_str() {
            None | Some("") => required(causes, &at),
            Some(name) if name.len() > SYSCTL_MAX_LENGTH || !NAME.is_match(name) => {
                causes.push(Cause::invalid(
                    &at,
                    &json!(name),
                    &format!(
                        "must have at most {SYSCTL_MAX_LENGTH} characters and match regex {SYSCTL_FORMAT}"
                    ),
                ))
            }
            Some(name) if !seen.insert(name) => causes.push(duplicate(&at, name)),
            Some(_) => {}
        }
    }
}

/// A string field that must be one of `allowed` (when it is given).
fn one_of(causes: &mut Vec<Cause>, v: &Value, field: &str, allowed: &[&str]) {
    if let Some(value) = v.as_str()
        && !allowed.contains(&value)
    {
        causes.push(Cause::not_supported(field, value, allowed));
    }
}

fn duplicate(field: &str, value: &str) -> Cause {
    Cause {
        reason: "FieldValueDuplicate".into(),
        message: format!("Duplicate value: {}", json!(value)),
        field: field.into(),
    }
}

/// A container's enums, ports, environment and mounts (which must name a volume of the
/// pod), as the API server checks them.
fn validate_container(
    c: &Value,
    at: &str,
    volumes: &std::collections::HashSet<&str>,
    causes: &mut Vec<Cause>,
) {
    one_of(
        causes,
        &c["imagePullPolicy"],
        &format!("{at}.imagePullPolicy"),
        &["Always", "IfNotPresent", "Never"],
    );
    one_of(
        causes,
        &c["terminationMessagePolicy"],
        &format!("{at}.terminationMessagePolicy"),
        &["File", "FallbackToLogsOnError"],
    );
    let items = |f: &str| {
        c.get(f)
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
    };
    for (i, p) in items("ports").iter().enumerate() {
        let field = format!("{at}.ports[{i}]");
        match p.get("containerPort").and_then(Value::as_i64) {
            Some(1..=65535) => {}
            None => required(causes, &format!("{field}.containerPort")),
            Some(_) => causes.push(Cause::invalid(
                &format!("{field}.containerPort"),
                &p["containerPort"],
                "must be between 1 and 65535, inclusive",
            )),
        }
        if let Some(h) = p.get("hostPort").and_then(Value::as_i64)
            && !(0..=65535).contains(&h)
        {
            causes.push(Cause::invalid(
                &format!("{field}.hostPort"),
                &p["hostPort"],
                "must be between 1 and 65535, inclusive",
            ));
        }
        one_of(
            causes,
            &p["protocol"],
            &format!("{field}.protocol"),
            &["TCP", "UDP", "SCTP"],
        );
    }
    for (i, e) in items("env").iter().enumerate() {
        let field = format!("{at}.env[{i}].name");
        match e.get("name").and_then(Value::as_str) {
            None | Some("") => required(causes, &field),
            // Any printable ASCII but '=', as Kubernetes takes names now.
            Some(n) if !n.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'=') => {
                causes.push(Cause::invalid(
                    &field,
                    &json!(n),
                    "a valid environment variable name must consist only of printable ASCII characters other than '='",
                ));
            }
            Some(_) => {}
        }
    }
    for (i, m) in items("volumeMounts").iter().enumerate() {
        let field = format!("{at}.volumeMounts[{i}]");
        match m.get("name").and_then(Value::as_str) {
            None | Some("") => required(causes, &format!("{field}.name")),
            Some(n) if !volumes.contains(n) => causes.push(Cause {
                reason: "FieldValueNotFound".into(),
                message: format!("Not found: {}", json!(n)),
                field: format!("{field}.name"),
            }),
            Some(_) => {}
        }
        if m.get("mountPath")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            required(causes, &format!("{field}.mountPath"));
        }
    }
}

/// What an update may change of a pod's spec, as Kubernetes allows it: the containers'
/// images, `activeDeadlineSeconds` (set, or lowered), tolerations (added to),
/// `terminationGracePeriodSeconds` (from negative to 1) and `schedulingGates` (removed
/// from). Anything else is refused, so that an edited manifest is not silently run as
/// a changed pod.
pub fn validate_pod_update(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    let (Some(before), Some(after)) = (old.get("spec"), new.get("spec")) else {
        return;
    };
    // `after` with every allowed change taken back: then it must equal `before`.
    let mut undone = after.clone();
    for list in ["containers", "initContainers"] {
        let (Some(b), Some(Value::Array(a))) = (before.get(list), undone.get_mut(list)) else {
            continue;
        };
        let Some(b) = b.as_array().filter(|b| b.len() == a.len()) else {
            continue;
        };
        for (was, now) in b.iter().zip(a.iter_mut()) {
            if let (Some(image), Some(now)) = (was.get("image"), now.as_object_mut()) {
                now.insert("image".into(), image.clone());
            }
        }
    }
    let int = |v: &Value, f: &str| v.get(f).and_then(Value::as_i64);
    let deadline_ok = match (
        int(before, "activeDeadlineSeconds"),
        int(after, "activeDeadlineSeconds"),
    ) {
        (None, Some(n)) => n > 0,
        (Some(o), Some(n)) => n > 0 && n <= o,
        _ => false,
    };
    let grace_ok = int(before, "terminationGracePeriodSeconds").is_some_and(|o| o < 0)
        && int(after, "terminationGracePeriodSeconds") == Some(1);
    let list = |v: &Value, f: &str| {
        v.get(f)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let tolerations_ok = list(before, "tolerations")
        .iter()
        .all(|t| list(after, "tolerations").contains(t));
    let gates_ok = list(after, "schedulingGates")
        .iter()
        .all(|g| list(before, "schedulingGates").contains(g));
    if let Some(u) = undone.as_object_mut() {
        for (field, ok) in [
            ("activeDeadlineSeconds", deadline_ok),
            ("terminationGracePeriodSeconds", grace_ok),
            ("tolerations", tolerations_ok),
            ("schedulingGates", gates_ok),
        ] {
            if ok {
                match before.get(field) {
                    Some(v) => u.insert(field.into(), v.clone()),
                    None => u.remove(field),
                };
            }
        }
    }
    if &undone != before {
        causes.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

fn validate_rc(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
        required(causes, "spec");
        return;
    };
    if let Some(r) = spec.get("replicas")
        && r.as_i64().is_none_or(|r| r < 0)
    {
        causes.push(Cause::invalid(
            "spec.replicas",
            r,
            "must be greater than or equal to 0",
        ));
    }
    let selector = spec.get("selector").and_then(Value::as_object);
    if selector.is_none_or(|s| s.is_empty()) {
        required(causes, "spec.selector");
    }
    match spec.get("template").filter(|t| t.is_object()) {
        None => required(causes, "spec.template"),
        Some(t) => {
            let labels = t.pointer("/metadata/labels").and_then(Value::as_object);
            if let Some(selector) = selector {
                let matches = selector
                    .iter()
                    .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
                if !matches {
                    causes.push(Cause::invalid(
                        "spec.template.metadata.labels",
                        &labels.map_or(Value::Null, |l| Value::Object(l.clone())),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
            match t.get("spec") {
                None => required(causes, "spec.template.spec"),
                Some(ts) => validate_pod_spec(ts, "spec.template.spec", causes),
            }
        }
    }
}

/// Puts back the metadata `fields` of `old` into `new` (those `old` lacks are removed).
pub fn keep_metadata(old: &Value, new: &mut Value, fields: &[&str]) {
    let Some(dst) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for field in fields {
        match old.pointer(&format!("/metadata/{field}")) {
            Some(v) => {
                dst.insert((*field).to_string(), v.clone());
            }
            None => {
                dst.remove(*field);
            }
        }
    }
}

#[cfg(test)]
#[path = "strategy_tests.rs"]
mod tests;
