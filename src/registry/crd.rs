//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`) and the kinds they serve. A
//! definition is an object like any other; once it is durable, the registry serves each of
//! its served versions as a descriptor in the live catalog: the definition's names and
//! scope, its structural schema (validation with unknown fields pruned, `default`s filled
//! in), its printer columns and selectable fields, the `status` subresource, and the
//! conversion strategy `None` between versions (objects are stored in the storage version
//! and differ between versions only in their `apiVersion`). Deleting a definition marks it
//! `Terminating`; the cleanup controller deletes its objects and then its finalizer.

use crate::types::json::str_at;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::catalog::{Kind, Resource};
use super::schema::Source;
use super::strategy::Strategy;
use super::table::{Column, Printer};
use super::{Cause, Error, Part, Registry, convert};
use crate::types::names;

pub use crate::types::CRD_CLEANUP_FINALIZER as CLEANUP_FINALIZER;

/// The strategy of CustomResourceDefinitions.
pub struct Definitions;

fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The version objects are stored in.
fn storage_version(crd: &Value) -> Option<&str> {
    versions(crd)
        .iter()
        .find(|v| v["storage"] == true)
        .and_then(|v| v["name"].as_str())
}

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": kind, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": crate::types::now(),
    })
}

/// The status a definition has once its names are accepted and it is served.
fn served_status(crd: &Value, stored: &[Value]) -> Value {
    let mut stored: Vec<Value> = stored.to_vec();
    if let Some(storage) = storage_version(crd)
        && !stored.iter().any(|v| v == storage)
    {
        stored.push(json!(storage));
    }
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "conditions": [
            condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
            condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    })
}

impl Strategy for Definitions {
    fn default(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
            let kind = names
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if !kind.is_empty() {
                names
                    .entry("singular")
                    .or_insert_with(|| json!(kind.to_ascii_lowercase()));
                names
                    .entry("listKind")
                    .or_insert_with(|| json!(format!("{kind}List")));
            }
        }
        spec.entry("conversion")
            .or_insert_with(|| json!({"strategy": "None"}));
    }

    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            let fins = m.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = fins.as_array_mut()
                && !list.iter().any(|f| f == CLEANUP_FINALIZER)
            {
                list.push(json!(CLEANUP_FINALIZER));
            }
        }
        let status = served_status(obj, &[]);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), status);
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_definition(obj, causes);
    }

    /// kube-apiserver checks a definition's status for its accepted names and stored
    /// versions only: conditions are whatever their writers make them.
    fn may_leave_out(&self, field: &str) -> bool {
        field.starts_with("status.conditions[")
    }

    fn validate_update(&self, old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        if part == Part::Status {
            return;
        }
        for (field, pointer) in [("spec.group", "/spec/group"), ("spec.scope", "/spec/scope")] {
            super::strategy::immutable(old, new, pointer, field, causes);
        }
        let served: Vec<&str> = versions(new)
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        let stored = old
            .pointer("/status/storedVersions")
            .and_then(Value::as_array);
        for v in stored.into_iter().flatten().filter_map(Value::as_str) {
            if !served.contains(&v) {
                causes.push(Cause::invalid(
                    "status.storedVersions",
                    &json!(v),
                    "must appear in spec.versions",
                ));
            }
        }
    }

    fn prepare_update(&self, old: &Value, _incoming: Option<&Value>, merged: &mut Value) {
        let stored = old
            .pointer("/status/storedVersions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut status = served_status(merged, &stored);
        // Conditions keep their transition times while they hold.
        if let Some(conditions) = old.pointer("/status/conditions").cloned() {
            status["conditions"] = conditions;
        }
        if let Some(m) = merged.as_object_mut() {
            m.insert("status".into(), status);
        }
    }

    fn admit(
        &self,
        reg: &Registry,
        _ns: Option<&str>,
        name: &str,
        obj: &Value,
    ) -> Result<(), Error> {
        let causes = name_conflicts(reg, obj);
        if causes.is_empty() {
            return Ok(());
        }
        Err(Error::Invalid {
            group: "apiextensions.k8s.io".into(),
            kind: "CustomResourceDefinition".into(),
            name: name.to_string(),
            causes,
        })
    }

    fn mark_deleting(&self, obj: &mut Value) {
        let terminating = condition(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
        crate::types::set_condition(obj, terminating);
    }

    fn after_write(&self, reg: &Registry, object: &[u8], deleted: bool) {
        match serde_json::from_slice::<Value>(object) {
            Ok(crd) => serve(reg, &crd, deleted),
            Err(e) => {
                tracing::error!(error = %e, "a stored CustomResourceDefinition does not parse")
            }
        }
    }

    fn on_open(&self, reg: &Registry) {
        let prefix = super::catalog::of(Kind::CustomResourceDefinition).key_prefix();
        let (all, _) = reg.store.list(&prefix);
        for (key, rec) in all {
            match serde_json::from_slice::<Value>(&rec.value) {
                Ok(crd) => serve(reg, &crd, false),
                Err(e) => {
                    tracing::error!(%key, error = %e, "skipping a CustomResourceDefinition that does not parse")
                }
            }
        }
    }
}

/// Serves what `crd` defines now (nothing once it is `deleted`).
fn serve(reg: &Registry, crd: &Value, deleted: bool) {
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let resources = if deleted {
        Vec::new()
    } else {
        descriptors(crd)
    };
    tracing::debug!(%group, %plural, versions = resources.len(), "serving custom resources");
    reg.catalog.replace(group, plural, resources);
}

/// The names of `crd` that another served kind of its group already has, as causes; and a
/// group that berth's own kinds use.
fn name_conflicts(reg: &Registry, crd: &Value) -> Vec<Cause> {
    let group = str_at(crd, "/spec/group");
    let names = crd.pointer("/spec/names").unwrap_or(&Value::Null);
    let plural = str_at(names, "/plural");
    let mut causes = Vec::new();
    let served = reg.served();
    let others: Vec<&Arc<Resource>> = served
        .iter()
        .filter(|r| r.group == group && r.plural != plural)
        .collect();
    if served
        .iter()
        .any(|r| r.group == group && r.kind != Kind::Custom)
    {
        causes.push(Cause::invalid(
            "spec.group",
            &json!(group),
            "the group is served by berth's own kinds; choose a group of your own",
        ));
    }
    let mut check = |field: &str, value: &str, taken: &dyn Fn(&Resource) -> bool| {
        if !value.is_empty() && others.iter().any(|r| taken(r)) {
            causes.push(Cause::invalid(
                field,
                &json!(value),
                &format!("{value:?} is already in use in group {group}"),
            ));
        }
    };
    let singular = str_at(names, "/singular");
    let kind = str_at(names, "/kind");
    check("spec.names.plural", plural, &|r| r.singular == plural);
    check("spec.names.singular", singular, &|r| {
        r.plural == singular || r.singular == singular
    });
    check("spec.names.kind", kind, &|r| r.kind_name == kind);
    for short in names["shortNames"].as_array().into_iter().flatten() {
        let short = short.as_str().unwrap_or("");
        check("spec.names.shortNames", short, &|r| {
            r.short_names.iter().any(|s| s == short) || r.plural == short
        });
    }
    causes
}

/// The rules of a definition beyond its schema.
fn validate_definition(crd: &Value, causes: &mut Vec<Cause>) {
    let spec = crd.get("spec").unwrap_or(&Value::Null);
    let group = str_at(spec, "/group");
    let plural = str_at(spec, "/names/plural");
    let name = str_at(crd, "/metadata/name");
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    } else if !group.contains('.') {
        causes.push(Cause::invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    } else {
        for e in names::dns1123_subdomain(group) {
            causes.push(Cause::invalid("spec.group", &json!(group), &e));
        }
    }
    if name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    for (field, value) in [
        ("spec.names.plural", plural),
        ("spec.names.singular", str_at(spec, "/names/singular")),
    ] {
        if value.is_empty() {
            causes.push(Cause::required(field));
        }
        for e in names::dns1123_label(value)
            .into_iter()
            .filter(|_| !value.is_empty())
        {
            causes.push(Cause::invalid(field, &json!(value), &e));
        }
    }
    for (field, value) in [
        ("spec.names.kind", str_at(spec, "/names/kind")),
        ("spec.names.listKind", str_at(spec, "/names/listKind")),
    ] {
        if value.is_empty() {
            causes.push(Cause::required(field));
        } else if !names::dns1123_label(&value.to_ascii_lowercase()).is_empty() {
            causes.push(Cause::invalid(
                field,
                &json!(value),
                "may have mixed case, but should otherwise match: [a-z0-9]([-a-z0-9]*[a-z0-9])?",
            ));
        }
    }
    match str_at(spec, "/scope") {
        "Namespaced" | "Cluster" => {}
        other => causes.push(Cause::not_supported(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    match str_at(spec, "/conversion/strategy") {
        "" | "None" => {}
        "Webhook" => causes.push(Cause::invalid(
            "spec.conversion.strategy",
            &json!("Webhook"),
            "conversion webhooks are not supported by this server yet; use the None strategy",
        )),
        other => causes.push(Cause::not_supported(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
    let list = versions(crd);
    if list.is_empty() {
        causes.push(Cause::required("spec.versions"));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, v) in list.iter().enumerate() {
        let at = |f: &str| format!("spec.versions[{i}].{f}");
        let vname = v["name"].as_str().unwrap_or("");
        if vname.is_empty() {
            causes.push(Cause::required(&at("name")));
        } else if !names::dns1123_label(vname).is_empty() {
            causes.push(Cause::invalid(
                &at("name"),
                &json!(vname),
                "must be a DNS-1035 label such as v1 or v2beta1",
            ));
        } else if !seen.insert(vname) {
            causes.push(Cause {
                reason: "FieldValueDuplicate".into(),
                message: format!("Duplicate value: {vname:?}"),
                field: at("name"),
            });
        }
        if let Some(scale) = v.pointer("/subresources/scale") {
            validate_scale(scale, &at("subresources.scale"), causes);
        }
        match v.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => causes.push(Cause::required(&at("schema.openAPIV3Schema"))),
            Some(schema) => {
                structural(schema, &at("schema.openAPIV3Schema"), true, causes);
                super::cel::Rules::compile(schema, &at("schema.openAPIV3Schema"), causes);
            }
        }
    }
    match list.iter().filter(|v| v["storage"] == true).count() {
        1 => {}
        0 if list.is_empty() => {}
        n => causes.push(Cause::invalid(
            "spec.versions",
            &json!(n),
            "must have exactly one version marked as storage version",
        )),
    }
    if !list.is_empty() && !list.iter().any(|v| v["served"] == true) {
        causes.push(Cause::invalid(
            "spec.versions",
            &Value::Null,
            "must have at least one served version",
        ));
    }
}

/// The paths of a `scale` subresource: replicas under `.spec` and `.status`, a selector
/// under either, each a plain path.
fn validate_scale(scale: &Value, at: &str, causes: &mut Vec<Cause>) {
    for (field, required, prefixes) in [
        ("specReplicasPath", true, &[".spec."][..]),
        ("statusReplicasPath", true, &[".status."][..]),
        ("labelSelectorPath", false, &[".spec.", ".status."][..]),
    ] {
        let at = format!("{at}.{field}");
        match scale[field].as_str() {
            None if required => causes.push(Cause::required(&at)),
            None => {}
            Some(p) if !prefixes.iter().any(|pre| p.starts_with(pre)) => {
                causes.push(Cause::invalid(
                    &at,
                    &json!(p),
                    &format!("should be a json path under {}", prefixes.join(" or ")),
                ))
            }
            Some(p)
                if simple_path(p).is_none() || (field == "specReplicasPath" && p.contains('[')) =>
            {
                causes.push(Cause::invalid(&at, &json!(p), "must be a simple json path"))
            }
            Some(_) => {}
        }
    }
}

/// Checks that `schema` is structural (every node says its type, unless it keeps unknown
/// fields or is an int-or-string) and uses nothing berth cannot enforce, as
/// kube-apiserver's messages name the problems.
fn structural(schema: &Value, at: &str, root: bool, causes: &mut Vec<Cause>) {
    let Some(m) = schema.as_object() else {
        causes.push(Cause::invalid(at, schema, "must be an object"));
        return;
    };
    let flag = |k: &str| m.get(k) == Some(&Value::Bool(true));
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    if root && ty != "object" {
        causes.push(Cause::invalid(
            &format!("{at}.type"),
            &json!(ty),
            "must be object at the root",
        ));
    }
    if ty.is_empty()
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        causes.push(Cause::required(&format!("{at}.type")));
    }
    for forbidden in [
        "$ref",
        "definitions",
        "dependencies",
        "additionalItems",
        "patternProperties",
    ] {
        if m.contains_key(forbidden) {
            causes.push(Cause::forbidden(
                &format!("{at}.{forbidden}"),
                &format!("{forbidden} is not supported"),
            ));
        }
    }
    if m.contains_key("properties")
        && m.contains_key("additionalProperties")
        && m["additionalProperties"] != false
    {
        causes.push(Cause::forbidden(
            &format!("{at}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if let Some(Value::Object(props)) = m.get("properties") {
        for (name, sub) in props {
            if root && name == "metadata" {
                continue;
            }
            structural(sub, &format!("{at}.properties[{name}]"), false, causes);
        }
    }
    for nested in ["items", "additionalProperties"] {
        if let Some(sub @ Value::Object(_)) = m.get(nested) {
            structural(sub, &format!("{at}.{nested}"), false, causes);
        }
    }
    for combinator in ["allOf", "anyOf", "oneOf"] {
        for (i, sub) in m
            .get(combinator)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if sub.get("type").is_some() || sub.get("default").is_some() {
                causes.push(Cause::forbidden(
                    &format!("{at}.{combinator}[{i}]"),
                    "type and default must not be set inside allOf, anyOf or oneOf",
                ));
            }
        }
    }
}

/// `com.example.stable.v1.CronTab`: the OpenAPI name of a custom kind's schema.
fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The JSON Schema that validates objects of a version: its structural schema with every
/// object that does not keep unknown fields closed to them (so they are pruned),
/// int-or-strings as either, and `apiVersion`, `kind` and `metadata` at the root and in
/// embedded resources.
fn validation(schema: &Value, root: bool) -> Value {
    let Some(m) = schema.as_object() else {
        return schema.clone();
    };
    let flag = |k: &str| m.get(k) == Some(&Value::Bool(true));
    let mut out = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "properties" => {
                let props: Map<String, Value> = v
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, sub)| (name.clone(), validation(sub, false)))
                    .collect();
                out.insert(k.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" if v.is_object() => {
                out.insert(k.clone(), validation(v, false));
            }
            "allOf" | "anyOf" | "oneOf" => {
                let subs: Vec<Value> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| {
                        let mut s = validation(s, false);
                        // Inside a combinator, a schema only constrains; unknown fields are
                        // pruned by the schema beside it.
                        if let Some(o) = s.as_object_mut() {
                            o.remove("additionalProperties");
                        }
                        s
                    })
                    .collect();
                out.insert(k.clone(), Value::Array(subs));
            }
            "nullable" | "x-kubernetes-validations" | "example" | "externalDocs" => {}
            _ if k.starts_with("x-kubernetes-") => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if flag("nullable")
        && let Some(Value::String(t)) = out.get("type").cloned()
    {
        out.insert("type".into(), json!([t, "null"]));
    }
    if flag("x-kubernetes-int-or-string") {
        out.remove("type");
        out.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    if root || flag("x-kubernetes-embedded-resource") {
        let props = out
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("properties are an object");
        props.insert("apiVersion".into(), json!({"type": "string"}));
        props.insert("kind".into(), json!({"type": "string"}));
        props.insert("metadata".into(), super::schema::reference(OBJECT_META));
    }
    let is_object = m.get("type").and_then(Value::as_str) == Some("object");
    if flag("x-kubernetes-preserve-unknown-fields") {
        if out.contains_key("properties") {
            out.entry("additionalProperties")
                .or_insert(Value::Bool(true));
        }
    } else if is_object
        && !out.contains_key("properties")
        && !out.contains_key("additionalProperties")
    {
        // An object that names no fields keeps none.
        out.insert("properties".into(), json!({}));
    }
    Value::Object(out)
}

/// The OpenAPI form of a version's schema: as given, `metadata` the ObjectMeta.
fn documented(schema: &Value, group: &str, version: &str, kind: &str) -> Value {
    let mut s = schema.clone();
    if let Some(m) = s.as_object_mut() {
        let props = m
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("properties are an object");
        props.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}),
        );
        props.insert(
            "kind".into(),
            json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}),
        );
        props.insert(
            "metadata".into(),
            json!({
                "allOf": [super::schema::reference(OBJECT_META)],
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            }),
        );
        m.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": group, "version": version, "kind": kind}]),
        );
    }
    s
}

/// Fills in the `default`s of `schema` that `obj` leaves out, as kube-apiserver defaults
/// custom resources.
pub fn apply_defaults(schema: &Value, obj: &mut Value) {
    match obj {
        Value::Object(fields) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (name, sub) in props {
                    if !fields.contains_key(name)
                        && let Some(d) = sub.get("default")
                    {
                        fields.insert(name.clone(), d.clone());
                    }
                    if let Some(child) = fields.get_mut(name) {
                        apply_defaults(sub, child);
                    }
                }
            }
            if let Some(sub @ Value::Object(_)) = schema.get("additionalProperties") {
                for child in fields.values_mut() {
                    apply_defaults(sub, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for item in items {
                    apply_defaults(sub, item);
                }
            }
        }
        _ => {}
    }
}

/// How objects of one served version of a definition behave.
struct CustomKind {
    /// The version's structural schema (for its defaults).
    schema: Value,
    /// Has a status subresource: a create or update of the object leaves status alone.
    status: bool,
    /// The definition is being deleted: no new objects.
    terminating: bool,
    /// `plural.group`, for messages.
    definition: String,
    /// Where the `scale` subresource reads and writes, when the version has one.
    scale: Option<ScalePaths>,
    /// The schema has defaults: objects read are defaulted too.
    defaults: bool,
    /// The storage version's descriptor as of the definition's revision `since`: objects
    /// written after it got these defaults when written, and are read as stored.
    since: Option<u64>,
    /// The schema's CEL validation rules, compiled.
    rules: Option<super::cel::Rules>,
}

/// Whether a schema names a `default` anywhere.
fn has_defaults(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.contains_key("default") || m.values().any(has_defaults),
        Value::Array(a) => a.iter().any(has_defaults),
        _ => false,
    }
}

/// The paths of a version's `scale` subresource.
struct ScalePaths {
    /// `.spec.replicas`, as field names.
    spec: Vec<String>,
    status: Vec<Step>,
    selector: Option<Vec<Step>>,
}

impl ScalePaths {
    fn of(scale: &Value) -> Option<ScalePaths> {
        let spec = simple_path(scale["specReplicasPath"].as_str()?)?
            .into_iter()
            .map(|s| match s {
                Step::Field(f) => Some(f),
                Step::Index(_) => None,
            })
            .collect::<Option<Vec<String>>>()?;
        Some(ScalePaths {
            spec,
            status: simple_path(scale["statusReplicasPath"].as_str()?)?,
            selector: scale["labelSelectorPath"].as_str().and_then(simple_path),
        })
    }
}

impl Strategy for CustomKind {
    fn prepare_status_update(&self, old: &Value, new: &mut Value) {
        // A custom resource's status write changes its status only (kube-apiserver's
        // customResourceStatusStrategy): the metadata is the stored one but for who
        // owns which fields, and the resourceVersion and uid the write expects.
        let sent = new.get("metadata").cloned().unwrap_or_default();
        if let (Some(dst), Some(meta)) = (new.as_object_mut(), old.get("metadata")) {
            dst.insert("metadata".into(), meta.clone());
        }
        let Some(dst) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        for field in ["managedFields", "resourceVersion", "uid"] {
            match sent.get(field) {
                Some(v) => dst.insert(field.into(), v.clone()),
                None => dst.remove(field),
            };
        }
    }

    fn default(&self, obj: &mut Value) {
        apply_defaults(&self.schema, obj);
    }

    fn prepare_create(&self, obj: &mut Value) {
        if self.status
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
    }

    fn validate_create(&self, obj: &Value, causes: &mut Vec<Cause>) {
        if let Some(rules) = &self.rules {
            rules.check(obj, None, causes);
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        if let Some(rules) = &self.rules {
            rules.check(new, Some(old), causes);
        }
    }

    fn generation_changes(&self, old: &Value, new: &Value, _part: Part) -> bool {
        // Without a status subresource the status is the object's like any other field.
        let kept: &[&str] = if self.status {
            &["metadata", "status"]
        } else {
            &["metadata"]
        };
        super::changed_besides(old, new, kept)
    }

    fn read(&self, stored: &[u8]) -> Option<bytes::Bytes> {
        if !self.defaults {
            return None;
        }
        if let (Some(since), Some(written)) = (self.since, crate::store::stored_revision(stored))
            && written > since
        {
            return None;
        }
        let mut obj: Value = serde_json::from_slice(stored).ok()?;
        let before = obj.clone();
        apply_defaults(&self.schema, &mut obj);
        (obj != before)
            .then(|| bytes::Bytes::from(serde_json::to_vec(&obj).expect("JSON serializes")))
    }

    fn scale(&self, obj: &Value) -> super::strategy::Scale {
        let paths = self.scale.as_ref();
        let spec: Vec<Step> = paths
            .map(|p| p.spec.iter().cloned().map(Step::Field).collect())
            .unwrap_or_default();
        super::strategy::Scale {
            replicas: follow(obj, &spec).cloned().unwrap_or(json!(0)),
            status_replicas: paths
                .and_then(|p| follow(obj, &p.status))
                .cloned()
                .unwrap_or(json!(0)),
            selector: paths
                .and_then(|p| p.selector.as_ref())
                .and_then(|s| follow(obj, s))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        }
    }

    fn scale_patch(&self, replicas: i64) -> Value {
        let fields = self.scale.as_ref().map_or(&[][..], |p| p.spec.as_slice());
        fields
            .iter()
            .rev()
            .fold(json!(replicas), |inner, f| json!({ f.as_str(): inner }))
    }

    fn admit(
        &self,
        _reg: &Registry,
        _ns: Option<&str>,
        _name: &str,
        _obj: &Value,
    ) -> Result<(), Error> {
        if self.terminating {
            return Err(Error::MethodNotAllowed(format!(
                "create not allowed while custom resource definition {} is terminating",
                self.definition
            )));
        }
        Ok(())
    }
}

/// One printer column of a definition.
struct PrinterColumn {
    column: Column,
    path: Vec<Step>,
}

/// A step of a simple JSONPath (`.spec.replicas`, `.status.conditions[0].type`).
#[derive(Clone)]
enum Step {
    Field(String),
    Index(usize),
}

/// The steps of a printer column's or selectable field's JSONPath; `None` for what only
/// a full JSONPath engine would read (filters, wildcards, recursion).
fn simple_path(path: &str) -> Option<Vec<Step>> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut steps = Vec::new();
    for part in path.strip_prefix('.')?.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if name.is_empty() || name.contains(['*', '?', '@', '(']) {
            return None;
        }
        steps.push(Step::Field(name.to_string()));
        while let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            steps.push(Step::Index(r[..end].parse().ok()?));
            rest = &r[end + 1..];
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(steps)
}

fn follow<'a>(obj: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, step| match step {
        Step::Field(f) => v.get(f),
        Step::Index(i) => v.get(*i),
    })
}

/// The Table columns of a version: Name, its printer columns, and Age when it has none.
struct CustomPrinter {
    columns: Vec<PrinterColumn>,
}

impl Printer for CustomPrinter {
    fn columns(&self) -> Vec<Column> {
        let mut out = vec![Column {
            name: "Name".into(),
            kind: "string".into(),
            priority: 0,
            description: "Name must be unique within a namespace.".into(),
        }];
        out.extend(self.columns.iter().map(|c| Column {
            name: c.column.name.clone(),
            kind: c.column.kind.clone(),
            priority: c.column.priority,
            description: c.column.description.clone(),
        }));
        out
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let mut out = vec![json!(str_at(obj, "/metadata/name"))];
        for c in &self.columns {
            let v = follow(obj, &c.path);
            out.push(match (c.column.kind.as_ref(), v) {
                (_, None | Some(Value::Null)) => Value::Null,
                ("date", Some(Value::String(t))) => json!(
                    crate::types::age_seconds(t)
                        .map(crate::types::human_duration)
                        .unwrap_or_default()
                ),
                (_, Some(v)) => v.clone(),
            });
        }
        out
    }
}

/// The printer columns of a version: its own, else Age.
fn printer(version: &Value) -> CustomPrinter {
    let given = version["additionalPrinterColumns"].as_array();
    let columns = match given {
        Some(list) if !list.is_empty() => list
            .iter()
            .filter_map(|c| {
                Some(PrinterColumn {
                    column: Column {
                        name: c["name"].as_str()?.to_string().into(),
                        kind: c["type"].as_str().unwrap_or("string").to_string().into(),
                        priority: c["priority"].as_u64().unwrap_or(0).min(255) as u8,
                        description: c["description"].as_str().unwrap_or("").to_string().into(),
                    },
                    path: simple_path(c["jsonPath"].as_str()?)?,
                })
            })
            .collect(),
        _ => vec![PrinterColumn {
            column: Column {
                name: "Age".into(),
                kind: "date".into(),
                priority: 0,
                description: "The time since the object was created.".into(),
            },
            path: vec![
                Step::Field("metadata".into()),
                Step::Field("creationTimestamp".into()),
            ],
        }],
    };
    CustomPrinter { columns }
}

/// The descriptors of every served version of `crd`, the storage version first among
/// them in the conversions of the others.
fn descriptors(crd: &Value) -> Vec<Arc<Resource>> {
    let group = str_at(crd, "/spec/group");
    let names = crd.pointer("/spec/names").unwrap_or(&Value::Null);
    let kind = str_at(names, "/kind");
    let strings = |field: &str| -> Vec<String> {
        names[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let terminating = crd.pointer("/metadata/deletionTimestamp").is_some();
    let build = |version: &Value| -> Resource {
        let vname = version["name"].as_str().unwrap_or("");
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        let status = version.pointer("/subresources/status").is_some();
        let scale = version
            .pointer("/subresources/scale")
            .and_then(ScalePaths::of);
        let name = schema_name(group, vname, kind);
        let mut definitions = Map::new();
        definitions.insert(name.clone(), documented(&schema, group, vname, kind));
        let list_kind = str_at(names, "/listKind");
        definitions.insert(
            format!("{name}List"),
            json!({
                "description": format!("{list_kind} is a list of {kind}"),
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "items": {"type": "array", "items": super::schema::reference(&name)},
                    "kind": {"type": "string"},
                    "metadata": super::schema::reference("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"),
                },
                "x-kubernetes-group-version-kind": [{"group": group, "version": vname, "kind": list_kind}],
            }),
        );
        Resource {
            kind: Kind::Custom,
            group: group.to_string(),
            version: vname.to_string(),
            kind_name: kind.to_string(),
            plural: str_at(names, "/plural").to_string(),
            singular: str_at(names, "/singular").to_string(),
            short_names: strings("shortNames"),
            namespaced: str_at(crd, "/spec/scope") == "Namespaced",
            categories: strings("categories"),
            status,
            // Every custom object has one, moved by any change but of metadata (and of
            // the status, with a status subresource).
            generation: true,
            scale: scale.is_some(),
            verbs: super::catalog::VERBS,
            subresources: Vec::new(),
            selectable: version["selectableFields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["jsonPath"].as_str())
                .map(|p| p.trim_start_matches('.').to_string())
                .collect(),
            strategy: Arc::new(CustomKind {
                schema: schema.clone(),
                status,
                terminating,
                definition: str_at(crd, "/metadata/name").to_string(),
                scale,
                defaults: has_defaults(&schema),
                since: (version["storage"] == true)
                    .then(|| str_at(crd, "/metadata/resourceVersion").parse().ok())
                    .flatten(),
                rules: super::cel::Rules::compile(&schema, "", &mut Vec::new()),
            }),
            schema: Source::custom(name, definitions, validation(&schema, true)),
            table: Arc::new(printer(version)),
            conversion: None,
        }
    };
    let served: Vec<&Value> = versions(crd)
        .iter()
        .filter(|v| v["served"] == true)
        .collect();
    let Some(storage) = versions(crd).iter().find(|v| v["storage"] == true) else {
        return Vec::new();
    };
    let stored = Arc::new(build(storage));
    let mut out = Vec::new();
    for v in served {
        if v["name"] == storage["name"] {
            out.push(stored.clone());
            continue;
        }
        let mut r = build(v);
        r.conversion = Some(convert::api_version_only(stored.clone(), r.api_version()));
        out.push(Arc::new(r));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_is_left_out_at_every_depth() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"}}}}}}}});
        let mut obj = json!({});
        apply_defaults(&schema, &mut obj);
        assert_eq!(obj, json!({"spec": {"replicas": 1}}));
        let mut obj = json!({"spec": {"replicas": 3, "ports": [{"port": 80}]}});
        apply_defaults(&schema, &mut obj);
        assert_eq!(obj["spec"]["replicas"], 3);
        assert_eq!(obj["spec"]["ports"][0]["protocol"], "TCP");
    }

    #[test]
    fn validation_closes_objects_unless_they_keep_unknown_fields() {
        let v = validation(
            &json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "bare": {"type": "object"},
                "port": {"x-kubernetes-int-or-string": true}}}),
            true,
        );
        assert!(v["properties"]["metadata"]["$ref"].is_string());
        assert_eq!(v["properties"]["bare"]["properties"], json!({}));
        assert!(v["properties"]["free"].get("properties").is_none());
        assert_eq!(v["properties"]["port"]["anyOf"][1]["type"], "string");
    }

    #[test]
    fn simple_json_paths_are_followed_and_others_refused() {
        let obj = json!({"status": {"conditions": [{"type": "Ready"}]}});
        let path = simple_path(".status.conditions[0].type").unwrap();
        assert_eq!(follow(&obj, &path), Some(&json!("Ready")));
        assert!(simple_path(".items[*].name").is_none());
        assert!(simple_path("spec").is_none());
    }

    #[test]
    fn non_structural_schemas_are_refused() {
        let mut causes = Vec::new();
        structural(
            &json!({"type": "object", "properties": {"a": {"properties": {}}},
                    "x-kubernetes-validations": [{"rule": "self.a == 1"}]}),
            "s",
            true,
            &mut causes,
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["s.properties[a].type"]);
    }
}
