//! Server-side apply: an applied configuration creates the object or merges into it, and
//! each field manager owns the fields it applied (recorded in `metadata.managedFields` as
//! FieldsV1). Applying a field another manager applied with a different value is a
//! conflict unless forced, which moves the ownership. Fields a manager stops applying are
//! removed unless someone else owns them.
//!
//! Other writes (creates, updates, the other patch types) are recorded too, as `Update`
//! entries of their manager ([`record_update`]), so that an apply conflicts with them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::patch::{ListMerge, Shape, element_key, strategic_merge};
use super::{Error, Part, Registry, Resource, Result, WriteOptions, Written, meta};

/// Who applies, and whether they take fields from other managers.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    pub manager: String,
    pub force: bool,
    /// An apply to the status subresource: only the configuration's status is applied,
    /// and the manager's entry is its own, marked `subresource: status`.
    pub status: bool,
}

/// One step of a field path: a member, or a list element identified by its merge key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Seg {
    Field(String),
    /// The key object as FieldsV1 writes it, like `{"name":"main"}`.
    Key(String),
    /// A member of a set (`x-kubernetes-list-type: set`), as JSON: `"a"`.
    Value(String),
}

type Path = Vec<Seg>;

/// Paths that belong to the server, never to a field manager.
fn ignored(path: &[String], status: bool) -> bool {
    matches!(
        path,
        [a] if a == "apiVersion" || a == "kind" || (a == "status" && !status)
    ) || matches!(
        path,
        [m, f] if m == "metadata" && matches!(f.as_str(),
            "name" | "namespace" | "uid" | "resourceVersion" | "generation"
            | "creationTimestamp" | "managedFields" | "deletionTimestamp"
            | "deletionGracePeriodSeconds" | "selfLink")
    )
}

/// The leaf fields a configuration sets (its status only for the status subresource).
fn leaves(v: &Value, status: bool, shape: Shape<'_>) -> BTreeSet<Path> {
    leaf_values(v, status, shape).into_keys().collect()
}

/// The value at each leaf field of `v` (of list elements with equal keys, the first's).
/// Comparing two objects' maps tells which fields differ in one walk of each, where
/// looking each path up would search every keyed list once per element: quadratic in
/// the length of a list such as a container's `env`.
fn leaf_values<'a>(v: &'a Value, status: bool, shape: Shape<'_>) -> BTreeMap<Path, &'a Value> {
    let mut out = BTreeMap::new();
    walk(
        v,
        &mut Vec::new(),
        &mut Vec::new(),
        None,
        shape,
        status,
        &mut out,
    );
    out
}

/// `shape` is the type of `v`'s parent (`field` names `v` in it), or of `v` itself when
/// `field` is `None`.
#[allow(clippy::too_many_arguments)]
fn walk<'a>(
    v: &'a Value,
    path: &mut Path,
    names: &mut Vec<String>,
    field: Option<&str>,
    shape: Shape<'_>,
    status: bool,
    out: &mut BTreeMap<Path, &'a Value>,
) {
    let own = match field {
        Some(f) => shape.field(f),
        None => shape,
    };
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                names.push(k.clone());
                if !ignored(names, status) {
                    path.push(Seg::Field(k.clone()));
                    walk(child, path, names, Some(k), own, status, out);
                    path.pop();
                }
                names.pop();
            }
        }
        Value::Array(items) => match field.map(|f| shape.list_merge(f)) {
            Some(rule @ (ListMerge::ByKey(_) | ListMerge::ByKeys(_)))
                if !items.is_empty()
                    && let Some(ids) = items
                        .iter()
                        .map(|i| element_key(i, rule, own.items()))
                        .collect::<Option<Vec<Value>>>() =>
            {
                for (item, id) in items.iter().zip(ids) {
                    let id = match rule {
                        ListMerge::ByKey(key) => json!({ key: id }),
                        _ => id,
                    };
                    path.push(Seg::Key(id.to_string()));
                    walk(item, path, names, None, own.items(), status, out);
                    path.pop();
                }
            }
            Some(ListMerge::Union) if !items.is_empty() => {
                for item in items {
                    path.push(Seg::Value(item.to_string()));
                    out.entry(path.clone()).or_insert(item);
                    path.pop();
                }
            }
            _ => {
                out.entry(path.clone()).or_insert(v);
            }
        },
        _ => {
            out.entry(path.clone()).or_insert(v);
        }
    }
}

fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut node = &mut root;
        for seg in p {
            let name = match seg {
                Seg::Field(f) => format!("f:{f}"),
                Seg::Key(k) => format!("k:{k}"),
                Seg::Value(v) => format!("v:{v}"),
            };
            let is_key = matches!(seg, Seg::Key(_));
            let entry = node.entry(name).or_insert_with(|| json!({}));
            if is_key {
                entry
                    .as_object_mut()
                    .expect("fields are objects")
                    .entry(".")
                    .or_insert_with(|| json!({}));
            }
            node = entry.as_object_mut().expect("fields are objects");
        }
    }
    Value::Object(root)
}

fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    fn go(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(m) = v.as_object() else {
            return;
        };
        let children: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| *k != ".").collect();
        if children.is_empty() {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            return;
        }
        for (k, child) in children {
            let seg = if let Some(f) = k.strip_prefix("f:") {
                Seg::Field(f.to_string())
            } else if let Some(key) = k.strip_prefix("k:") {
                Seg::Key(key.to_string())
            } else if let Some(value) = k.strip_prefix("v:") {
                Seg::Value(value.to_string())
            } else {
                continue;
            };
            path.push(seg);
            go(child, path, out);
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    go(v, &mut Vec::new(), &mut out);
    out
}

/// The fields of a list element's key, as FieldsV1 writes it (`{"name":"main"}`).
fn parse_key(key: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(key) {
        Ok(Value::Object(k)) => Some(k),
        _ => None,
    }
}

fn key_match(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(f, want)| item.get(f) == Some(want))
}

/// Removes the field at `path`; a list element goes as a whole once its key field goes.
fn remove_path(v: &mut Value, path: &[Seg]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    if let (Some(Seg::Key(k)), Seg::Field(f)) = (parent_path.last(), last) {
        let is_key_field = serde_json::from_str::<Value>(k)
            .ok()
            .and_then(|v| v.as_object().map(|m| m.contains_key(f)))
            .unwrap_or(false);
        if is_key_field {
            remove_path(v, parent_path);
            return;
        }
    }
    let mut cur = v;
    for seg in parent_path {
        let next = match seg {
            Seg::Field(f) => cur.get_mut(f),
            Seg::Key(k) => match (cur.as_array_mut(), parse_key(k)) {
                (Some(a), Some(k)) => a.iter_mut().find(|i| key_match(i, &k)),
                _ => None,
            },
            // A set's members are leaves.
            Seg::Value(_) => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Seg::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Seg::Key(k) => {
            if let (Some(a), Some(k)) = (cur.as_array_mut(), parse_key(k)) {
                a.retain(|i| !key_match(i, &k));
            }
        }
        Seg::Value(v) => {
            if let (Some(a), Ok(v)) = (cur.as_array_mut(), serde_json::from_str::<Value>(v)) {
                a.retain(|i| *i != v);
            }
        }
    }
}

fn render(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Seg::Key(k) => out.push_str(&format!("[{k}]")),
            Seg::Value(v) => out.push_str(&format!("[={v}]")),
        }
    }
    out
}

/// One managedFields entry.
fn entry(opts: &ApplyOptions, api_version: &str, fields: &BTreeSet<Path>) -> Value {
    let mut e = json!({
        "manager": opts.manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": crate::types::now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(fields),
    });
    if opts.status {
        e["subresource"] = json!("status");
    }
    e
}

/// Whether managedFields entry `e` is the one `opts` applies as.
fn is_own(e: &Value, opts: &ApplyOptions) -> bool {
    e["manager"] == opts.manager
        && e["operation"] == "Apply"
        && (e["subresource"] == "status") == opts.status
}

/// The object after `config` is applied by `opts.manager` to `live`.
fn apply_to(res: &Resource, live: &Value, config: &Value, opts: &ApplyOptions) -> Result<Value> {
    let shape = Shape::applied(res);
    let config_values = leaf_values(config, opts.status, shape);
    let applied: BTreeSet<Path> = config_values.keys().cloned().collect();
    let entries: Vec<Value> = meta(live)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut others: Vec<(Value, BTreeSet<Path>)> = Vec::new();
    let mut previous = BTreeSet::new();
    // The manager's own entry, and how many entries came before it.
    let mut own: Option<(usize, Value)> = None;
    for e in entries {
        let fields = e.get("fieldsV1").map(from_fields_v1).unwrap_or_default();
        if is_own(&e, opts) {
            previous = fields;
            own = Some((others.len(), e));
        } else {
            others.push((e, fields));
        }
    }
    let mut conflicts = Vec::new();
    // The live values matter only where another manager owns an applied field.
    let live_values = if others.iter().any(|(_, f)| !f.is_disjoint(&applied)) {
        leaf_values(live, opts.status, shape)
    } else {
        BTreeMap::new()
    };
    for (e, fields) in &mut others {
        let clashing: Vec<Path> = fields
            .intersection(&applied)
            .filter(|p| live_values.get(*p) != config_values.get(*p))
            .cloned()
            .collect();
        if opts.force {
            for p in &clashing {
                fields.remove(p);
            }
        } else {
            for p in clashing {
                conflicts.push(format!(
                    "conflict with {:?} using {}: {}",
                    e["manager"].as_str().unwrap_or(""),
                    e["apiVersion"].as_str().unwrap_or(""),
                    render(&p)
                ));
            }
        }
    }
    if !conflicts.is_empty() {
        let n = conflicts.len();
        return Err(Error::Conflict {
            group: res.group.clone(),
            resource: res.qualified_plural(),
            name: live["metadata"]["name"].as_str().unwrap_or("").to_string(),
            message: format!(
                "Apply failed with {n} conflict{}: {}",
                if n == 1 { "" } else { "s" },
                conflicts.join("\n")
            ),
        });
    }
    let owned_by_others: BTreeSet<Path> =
        others.iter().flat_map(|(_, f)| f.iter().cloned()).collect();
    let mut out = live.clone();
    for p in previous.difference(&applied) {
        if !owned_by_others.contains(p) {
            remove_path(&mut out, p);
        }
    }
    strategic_merge(&mut out, config, shape).map_err(Error::BadRequest)?;
    let api_version = res.api_version();
    let mut managed: Vec<Value> = others
        .into_iter()
        .filter(|(_, f)| !f.is_empty())
        .map(|(mut e, f)| {
            e["fieldsV1"] = to_fields_v1(&f);
            e
        })
        .collect();
    let fresh = entry(opts, &api_version, &applied);
    match own {
        // An apply that changes nothing, neither the object nor who owns what, leaves
        // the entry (and its time) where it was: the write is then no write at all.
        Some((at, own))
            if at <= managed.len()
                && own["apiVersion"] == fresh["apiVersion"]
                && own["fieldsV1"] == fresh["fieldsV1"]
                && without_managed(&out) == without_managed(live) =>
        {
            managed.insert(at, own);
        }
        _ => managed.push(fresh),
    }
    if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("managedFields".into(), Value::Array(managed));
    }
    Ok(out)
}

/// Records a write other than an apply in `new`'s managedFields, as the API server does:
/// `manager` (operation Update, of the status subresource when `status`) comes to own
/// every field the write set or changed, which no other manager owns any longer; a field
/// the write removed leaves every manager. The entries come from `old` (none for a
/// create), so that a client cannot rewrite them by sending managedFields back.
pub(super) fn record_update(
    res: &Resource,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    status: bool,
) {
    let scope = |v: &Value| {
        let v = without_managed(v);
        if status {
            // A status write is about the status alone.
            return json!({"status": v.get("status").cloned().unwrap_or(Value::Null)});
        }
        v
    };
    let new_scope = scope(new);
    let shape = Shape::applied(res);
    let now = leaf_values(&new_scope, status, shape);
    let (set, removed): (BTreeSet<Path>, BTreeSet<Path>) = match old {
        None => (now.into_keys().collect(), BTreeSet::new()),
        Some(old) => {
            let old_scope = scope(old);
            let before = leaf_values(&old_scope, status, shape);
            let set = now
                .iter()
                .filter(|(p, v)| before.get(*p) != Some(*v))
                .map(|(p, _)| p.clone())
                .collect();
            let removed = before
                .into_keys()
                .filter(|p| !now.contains_key(p))
                .collect();
            (set, removed)
        }
    };
    if set.is_empty() && removed.is_empty() {
        return;
    }
    let entries: Vec<Value> = old
        .and_then(meta)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mine = |e: &Value| {
        e["manager"] == manager
            && e["operation"] == "Update"
            && (e["subresource"] == "status") == status
    };
    let mut own: BTreeSet<Path> = BTreeSet::new();
    let mut managed = Vec::new();
    for mut e in entries {
        let mut fields = e.get("fieldsV1").map(from_fields_v1).unwrap_or_default();
        if mine(&e) {
            own = fields;
            continue;
        }
        fields.retain(|p| !set.contains(p) && !removed.contains(p));
        if !fields.is_empty() {
            e["fieldsV1"] = to_fields_v1(&fields);
            managed.push(e);
        }
    }
    own.extend(set);
    own.retain(|p| !removed.contains(p));
    if !own.is_empty() {
        let mut e = json!({
            "manager": manager,
            "operation": "Update",
            "apiVersion": res.api_version(),
            "time": crate::types::now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(&own),
        });
        if status {
            e["subresource"] = json!("status");
        }
        managed.push(e);
    }
    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        if managed.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(managed));
        }
    }
}

/// `v` without its `metadata.managedFields`.
fn without_managed(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}

impl Registry {
    /// An applied configuration names only fields of the kind's schema, whatever the
    /// field validation: who owns a field nobody declares cannot be told.
    pub(super) fn check_declared(res: &Resource, config: &Value) -> Result<()> {
        let undeclared = super::schema::undeclared(res, config);
        if undeclared.is_empty() {
            return Ok(());
        }
        let fields: Vec<String> = undeclared
            .iter()
            .map(|f| format!(".{f}: field not declared in schema"))
            .collect();
        let listed = match fields.as_slice() {
            [one] => one.clone(),
            many => format!("errors:\n  {}", many.join("\n  ")),
        };
        Err(Error::BadRequest(format!(
            "failed to create typed patch object ({}/{}, Kind={}): {listed}",
            res.group, res.version, res.kind_name
        )))
    }

    /// Server-side apply of `config` (a patch of type `application/apply-patch+yaml`).
    /// Returns the object and whether it was created.
    pub async fn apply(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        name: &str,
        mut config: Value,
        opts: &WriteOptions,
        apply: &ApplyOptions,
    ) -> Result<(Written, bool)> {
        if let Some(stored) = super::convert::stored_resource(res) {
            return Box::pin(
                self.converted_apply(res, &stored, namespace, name, config, opts, apply),
            )
            .await;
        }
        if apply.manager.is_empty() {
            let mut cause = super::Cause::required("fieldManager");
            cause.message.push_str(": is required for apply patch");
            return Err(Error::Invalid {
                group: "meta.k8s.io".into(),
                kind: "PatchOptions".into(),
                name: String::new(),
                causes: vec![cause],
            });
        }
        let ns = Self::scope(res, namespace)?;
        Self::check_type(res, &mut config)?;
        if let Some(m) = config.get("metadata").and_then(Value::as_object) {
            super::check_identity(m, ns, Some(name))?;
        }
        Self::check_declared(res, &config)?;
        let part = if apply.status {
            // The status subresource takes the status alone (and the identity that
            // names the object).
            if let Some(c) = config.as_object_mut() {
                c.retain(|k, _| {
                    matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                });
                if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.retain(|k, _| matches!(k.as_str(), "name" | "namespace"));
                }
            }
            Part::Status
        } else {
            Part::Main
        };
        let key = res.key(ns, name);
        for _ in 0..super::UPDATE_RETRIES {
            if self.store.get(&key).is_none() {
                if apply.status {
                    return Err(Self::not_found(res, name));
                }
                let mut obj = config.clone();
                super::meta_mut(&mut obj)?.insert("name".into(), json!(name));
                let fields = leaves(&config, false, Shape::applied(res));
                super::meta_mut(&mut obj)?.insert(
                    "managedFields".into(),
                    json!([entry(apply, &res.api_version(), &fields)]),
                );
                match self.create(res, ns, obj, opts).await {
                    Ok(w) => return Ok((w, true)),
                    // Someone created it meanwhile: apply to theirs.
                    Err(Error::AlreadyExists { .. }) => continue,
                    Err(e) => return Err(e),
                }
            }
            let result = self
                .update_with(
                    res,
                    &key,
                    name,
                    None,
                    opts,
                    |live| apply_to(res, live, &config, apply),
                    part,
                )
                .await;
            match result {
                Err(Error::NotFound { .. }) => continue,
                other => return other.map(|w| (w, false)),
            }
        }
        Err(Self::conflict(res, name))
    }
}

/// Parses an apply body: YAML (JSON is YAML too), with the keys it gives twice.
pub fn parse_config(body: &[u8]) -> std::result::Result<(Value, super::schema::BodyNotes), String> {
    let (v, notes) = super::schema::parse_yaml(body)
        .map_err(|e| format!("the applied configuration is not valid YAML: {e}"))?;
    if !v.is_object() {
        return Err("the applied configuration must be an object".into());
    }
    Ok((v, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Kind, catalog};

    fn opts(m: &str, force: bool) -> ApplyOptions {
        ApplyOptions {
            manager: m.into(),
            force,
            status: false,
        }
    }

    #[test]
    fn fields_v1_round_trips_with_keyed_lists() {
        let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "main", "image": "x"}]}});
        let set = leaves(&cfg, false, Shape::applied(catalog::of(Kind::Pod)));
        let f = to_fields_v1(&set);
        assert_eq!(f["f:metadata"]["f:labels"]["f:a"], json!({}));
        assert!(f["f:metadata"].get("f:name").is_none());
        assert_eq!(
            f["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"]["f:image"],
            json!({})
        );
        assert_eq!(from_fields_v1(&f), set);
    }

    #[test]
    fn long_keyed_lists_are_compared_element_by_element() {
        // A container with as many variables as a request body holds.
        let res = catalog::of(Kind::ReplicationController);
        let n = 5000;
        let rc = |env: Vec<Value>| {
            json!({"metadata": {"name": "r"},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "env": env}]}}}})
        };
        let env = |changed: &str| -> Vec<Value> {
            (0..n)
                .map(|i| json!({"name": format!("E{i}"), "value": if i == 7 { changed } else { "v" }}))
                .collect()
        };
        let old = rc(env("v"));
        let mut new = rc(env("w"));
        record_update(res, Some(&old), &mut new, "editor", false);
        let fields = from_fields_v1(&new["metadata"]["managedFields"][0]["fieldsV1"]);
        let path = |name: &str| {
            vec![
                Seg::Field("spec".into()),
                Seg::Field("template".into()),
                Seg::Field("spec".into()),
                Seg::Field("containers".into()),
                Seg::Key(r#"{"name":"c"}"#.into()),
                Seg::Field("env".into()),
                Seg::Key(format!(r#"{{"name":"{name}"}}"#)),
                Seg::Field("value".into()),
            ]
        };
        assert_eq!(fields, BTreeSet::from([path("E7")]));
        // An apply of the whole list by another manager clashes on that variable alone.
        let err = apply_to(res, &new, &rc(env("x")), &opts("applier", false)).unwrap_err();
        assert!(
            err.to_string().ends_with(r#"Apply failed with 1 conflict: conflict with "editor" using v1: .spec.template.spec.containers[{"name":"c"}].env[{"name":"E7"}].value"#),
            "{err}"
        );
    }

    #[test]
    fn managers_conflict_unless_forced_and_dropped_fields_go() {
        let res = catalog::of(Kind::ConfigMap);
        let live = json!({"metadata": {"name": "c"}, "data": {}});
        let a1 = json!({"metadata": {"name": "c"}, "data": {"x": "1", "y": "1"}});
        let live = apply_to(res, &live, &a1, &opts("a", false)).unwrap();
        assert_eq!(live["data"], json!({"x": "1", "y": "1"}));
        // b applies x with another value: conflict.
        let b = json!({"data": {"x": "2"}});
        let err = apply_to(res, &live, &b, &opts("b", false)).unwrap_err();
        assert!(
            err.to_string()
                .contains("Apply failed with 1 conflict: conflict with \"a\" using v1: .data.x"),
            "{err}"
        );
        // The same value is shared ownership, not a conflict.
        let live2 = apply_to(res, &live, &json!({"data": {"x": "1"}}), &opts("b", false)).unwrap();
        assert_eq!(
            live2["metadata"]["managedFields"].as_array().unwrap().len(),
            2
        );
        // Forced: b takes x; a keeps y.
        let live = apply_to(res, &live, &b, &opts("b", true)).unwrap();
        assert_eq!(live["data"]["x"], "2");
        // a stops applying y: it goes; x (now b's) stays.
        let live = apply_to(res, &live, &json!({"data": {}}), &opts("a", false)).unwrap();
        assert_eq!(live["data"], json!({"x": "2"}));
    }

    #[test]
    fn an_apply_that_changes_nothing_leaves_the_object_as_it_was() {
        let res = catalog::of(Kind::ConfigMap);
        let live = json!({"metadata": {"name": "c"}, "data": {"z": "0"}});
        let cfg = json!({"metadata": {"name": "c"}, "data": {"x": "1"}});
        let live = apply_to(res, &live, &cfg, &opts("a", false)).unwrap();
        let live = apply_to(res, &live, &json!({"data": {"y": "1"}}), &opts("b", false)).unwrap();
        // The manager's entry is the first of two; applying the same again keeps all.
        let mut stamped = live.clone();
        stamped["metadata"]["managedFields"][0]["time"] = json!("2000-01-01T00:00:00Z");
        let again = apply_to(res, &stamped, &cfg, &opts("a", false)).unwrap();
        assert_eq!(again, stamped);
        // A changed value, or a changed set of fields, is a new entry with a new time.
        for cfg in [
            json!({"data": {"x": "2"}}),
            json!({"data": {"x": "1", "w": "1"}}),
        ] {
            let changed = apply_to(res, &stamped, &cfg, &opts("a", false)).unwrap();
            let entries = changed["metadata"]["managedFields"].as_array().unwrap();
            assert_eq!(entries.len(), 2);
            assert_eq!(entries[1]["manager"], "a");
            assert_ne!(entries[1]["time"], "2000-01-01T00:00:00Z");
        }
    }

    #[test]
    fn writes_other_than_applies_own_what_they_set_and_conflict_with_appliers() {
        let res = catalog::of(Kind::ConfigMap);
        let managers = |v: &Value| -> Vec<(String, Value)> {
            v["metadata"]["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap().to_string(),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        };
        let mut made = json!({"metadata": {"name": "c", "labels": {"l": "1"}},
            "data": {"a": "1", "b": "1"}});
        record_update(res, None, &mut made, "kubectl-create", false);
        assert_eq!(
            managers(&made),
            [(
                "kubectl-create".to_string(),
                json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:l": {}}}})
            )]
        );
        // An edit changes a and removes b: a is the editor's, b nobody's.
        let mut edited = made.clone();
        edited["data"] = json!({"a": "2"});
        record_update(res, Some(&made), &mut edited, "kubectl-edit", false);
        assert_eq!(
            managers(&edited),
            [
                (
                    "kubectl-create".into(),
                    json!({"f:metadata": {"f:labels": {"f:l": {}}}})
                ),
                ("kubectl-edit".into(), json!({"f:data": {"f:a": {}}})),
            ]
        );
        // An apply of another value for a conflicts with the editor, unless forced.
        let err = apply_to(
            res,
            &edited,
            &json!({"data": {"a": "3"}}),
            &opts("ssa", false),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("conflict with \"kubectl-edit\""),
            "{err}"
        );
        let forced = apply_to(
            res,
            &edited,
            &json!({"data": {"a": "3"}}),
            &opts("ssa", true),
        )
        .unwrap();
        let m = managers(&forced);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[1], ("ssa".into(), json!({"f:data": {"f:a": {}}})));
        // A write that changes nothing records nothing.
        let mut same = edited.clone();
        record_update(res, Some(&edited), &mut same, "other", false);
        assert_eq!(same, edited);
    }

    #[test]
    fn a_container_no_longer_applied_is_removed() {
        let res = catalog::of(Kind::Pod);
        let live = json!({"metadata": {"name": "p"}, "spec": {}});
        let two = json!({"spec": {"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}});
        let live = apply_to(res, &live, &two, &opts("m", false)).unwrap();
        let one = json!({"spec": {"containers": [{"name": "a", "image": "a"}]}});
        let live = apply_to(res, &live, &one, &opts("m", false)).unwrap();
        assert_eq!(
            live["spec"]["containers"],
            json!([{"name": "a", "image": "a"}])
        );
    }
}
