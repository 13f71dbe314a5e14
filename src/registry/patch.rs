//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch
//! (Kubernetes: lists of known fields merge by key, with the `$patch`, `$setElementOrder`,
//! `$retainKeys` and `$deleteFromPrimitiveList` directives).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::Resource;

/// A patch as a client sent it.
#[derive(Debug, Clone)]
pub enum Patch {
    /// `application/merge-patch+json`
    Merge(Value),
    /// `application/json-patch+json`
    Json(Value),
    /// `application/strategic-merge-patch+json`
    Strategic(Value),
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchError {
    /// The patch itself is malformed (HTTP 400).
    Malformed(String),
    /// A well-formed JSON patch fails on this object: a `test` that does not hold, a
    /// path that is not there (HTTP 422, as Kubernetes answers).
    Failed(String),
    /// A JSON patch with more operations than are allowed (HTTP 413).
    TooLarge(String),
}

/// At most this many operations in one JSON patch (as Kubernetes).
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// At most this many bytes copied by the `copy` operations of one JSON patch, in all: each
/// copy can double the object, so a short patch could otherwise fill the memory. Three times
/// the largest object, as Kubernetes bounds them.
const MAX_JSON_PATCH_COPIED: usize = 3 * super::MAX_OBJECT;

impl From<String> for PatchError {
    fn from(message: String) -> Self {
        PatchError::Malformed(message)
    }
}

impl From<PatchError> for super::Error {
    fn from(e: PatchError) -> Self {
        match e {
            PatchError::Malformed(m) => super::Error::BadRequest(m),
            PatchError::Failed(m) => super::Error::Unprocessable(m),
            PatchError::TooLarge(m) => super::Error::TooLarge(m),
        }
    }
}

impl Patch {
    /// The patched object.
    pub fn apply(&self, res: &Resource, current: &Value) -> Result<Value, PatchError> {
        match self {
            Patch::Merge(p) => {
                if !p.is_object() {
                    return Err(PatchError::Malformed(
                        "a merge patch must be a JSON object".into(),
                    ));
                }
                let mut out = current.clone();
                merge(&mut out, p);
                Ok(out)
            }
            Patch::Json(p) => {
                let ops: json_patch::Patch = serde_json::from_value(p.clone())
                    .map_err(|e| format!("invalid JSON patch: {e}"))?;
                json_patch_apply(current, &ops.0)
            }
            Patch::Strategic(p) => {
                if !p.is_object() {
                    return Err(PatchError::Malformed(
                        "a strategic merge patch must be a JSON object".into(),
                    ));
                }
                let mut out = current.clone();
                strategic_merge(&mut out, p, Shape::of(res))?;
                Ok(out)
            }
        }
    }
}

/// Applies the operations of a JSON patch to a copy of `current`, within the bounds above.
fn json_patch_apply(
    current: &Value,
    ops: &[json_patch::PatchOperation],
) -> Result<Value, PatchError> {
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "the allowed number of operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, but found {}",
            ops.len()
        )));
    }
    let mut out = current.clone();
    let mut copied = 0;
    for (i, op) in ops.iter().enumerate() {
        if let json_patch::PatchOperation::Copy(copy) = op
            && let Some(from) = out.pointer(copy.from.as_str())
        {
            copied += encoded_len(from);
            if copied > MAX_JSON_PATCH_COPIED {
                return Err(PatchError::Failed(format!(
                    "the JSON patch could not be applied: with operation '/{i}', its copies would add more than {MAX_JSON_PATCH_COPIED} bytes"
                )));
            }
        }
        // One operation at a time, on a copy that a failure throws away, so without the
        // library's undo of the operations before the failing one: that undo panics when
        // it cannot find what an earlier operation added (an `add` to `/list/-` followed
        // by a failing `move` of the list).
        json_patch::patch_unsafe(&mut out, std::slice::from_ref(op)).map_err(|e| {
            PatchError::Failed(format!(
                "the JSON patch could not be applied: operation '/{i}' failed at path '{}': {}",
                e.path, e.kind
            ))
        })?;
    }
    Ok(out)
}

/// The length of `v` encoded as JSON, without encoding it.
fn encoded_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, v).expect("JSON values serialize");
    count.0
}

/// Where a value sits among the API's types: the schema of its type (from the served
/// definitions, with the merge rules of the Go types as `x-kubernetes-*` extensions), so
/// that a list merges by the key its own type names (a Service's `ports` by `port`, a
/// container's by `containerPort`). A custom kind's lists merge as its schema's
/// `x-kubernetes-list-type` says (a `map` list by its `x-kubernetes-list-map-keys`), as
/// server-side apply merges them. `Shape::NONE` is a value of no known type: its lists
/// are replaced whole.
#[derive(Clone, Copy)]
pub struct Shape<'a> {
    schema: Option<&'a Value>,
    defs: Option<&'a Map<String, Value>>,
    /// Lists merge by their list types (a custom kind's schema), not by patch strategies.
    by_list_type: bool,
}

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMerge<'a> {
    /// Replaced whole.
    Replace,
    /// A union of plain values (`finalizers`).
    Union,
    /// Elements matched by this key.
    ByKey(&'a str),
    /// Elements matched by these keys (`x-kubernetes-list-map-keys`); a key an element
    /// leaves out has its schema's default.
    ByKeys(&'a [Value]),
}

impl<'a> Shape<'a> {
    /// A value of no known type.
    pub const NONE: Shape<'static> = Shape {
        schema: None,
        defs: None,
        by_list_type: false,
    };

    /// The root of an object of `res` as server-side apply merges it: by list types and
    /// map keys, and where a built-in type declares none, by its patch strategy (as
    /// kube-openapi's conversion for structured merge does).
    pub fn applied(res: &'a super::Resource) -> Shape<'a> {
        Shape {
            by_list_type: true,
            ..Shape::of(res)
        }
    }

    /// The root of an object of `res`: a built-in kind's merges by the Go types' patch
    /// strategies, a custom kind's by its schema's list types.
    pub fn of(res: &'a super::Resource) -> Shape<'a> {
        let defs = super::schema::definitions();
        match res.schema.custom_schema() {
            Some(schema) => Shape {
                schema: Some(schema),
                defs: Some(defs),
                by_list_type: true,
            },
            None => Shape {
                schema: defs.get(&super::schema::schema_name(res)),
                defs: Some(defs),
                by_list_type: false,
            },
        }
    }

    /// The schema a node stands for: itself, or what its `$ref` (or `allOf` of one)
    /// names.
    fn resolve(self, node: &'a Value) -> Option<&'a Value> {
        let target = node
            .get("$ref")
            .or_else(|| node.pointer("/allOf/0/$ref"))
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/components/schemas/"));
        match (target, self.defs) {
            (Some(name), Some(defs)) => defs.get(name),
            _ => Some(node),
        }
    }

    /// The property `name` of this type, as declared (with its merge extensions).
    fn property(self, name: &str) -> Option<&'a Value> {
        self.schema?.get("properties")?.get(name)
    }

    /// The type of field `name`.
    pub fn field(self, name: &str) -> Shape<'a> {
        Shape {
            schema: self.property(name).and_then(|p| self.resolve(p)),
            ..self
        }
    }

    /// The type of the elements of this list (or the values of this map).
    pub fn items(self) -> Shape<'a> {
        let node = self
            .schema
            .and_then(|s| s.get("items").or_else(|| s.get("additionalProperties")));
        Shape {
            schema: node.filter(|n| n.is_object()).and_then(|n| self.resolve(n)),
            ..self
        }
    }

    /// How the list field `name` of this type merges in a strategic merge patch.
    pub fn list_merge(self, name: &str) -> ListMerge<'a> {
        let Some(p) = self.property(name) else {
            return ListMerge::Replace;
        };
        if self.by_list_type {
            match p.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => {
                    return match p.get("x-kubernetes-list-map-keys") {
                        Some(Value::Array(keys)) if !keys.is_empty() => ListMerge::ByKeys(keys),
                        _ => ListMerge::Replace,
                    };
                }
                Some("set") => return ListMerge::Union,
                Some(_) => return ListMerge::Replace,
                // No list type: the patch strategy, if any, says.
                None => {}
            }
        }
        let strategy = p
            .get("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !strategy.split(',').any(|s| s == "merge") {
            return ListMerge::Replace;
        }
        match p
            .get("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
        {
            Some(key) => ListMerge::ByKey(key),
            None => ListMerge::Union,
        }
    }

    /// The key that identifies the elements of list field `name`, if its elements merge.
    pub fn merge_key(self, name: &str) -> Option<&'a str> {
        match self.list_merge(name) {
            ListMerge::ByKey(k) => Some(k),
            _ => None,
        }
    }
}

/// Applies a strategic merge patch object to `target`, a value of type `shape`.
pub fn strategic_merge(target: &mut Value, patch: &Value, shape: Shape<'_>) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut v = p.clone();
            v.remove("$patch");
            *target = Value::Object(v);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch directive $patch: {other:?}")),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("just made an object");
    if let Some(keep) = p.get("$retainKeys") {
        let keep: HashSet<&str> = keep
            .as_array()
            .ok_or("$retainKeys must be a list")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        t.retain(|k, _| keep.contains(k.as_str()));
    }
    // The lists an order directive names, as they were before the patch merged into them.
    let before: HashMap<&str, Vec<Value>> = p
        .keys()
        .filter_map(|k| k.strip_prefix("$setElementOrder/"))
        .map(|field| {
            let list = t.get(field).and_then(Value::as_array).cloned();
            (field, list.unwrap_or_default())
        })
        .collect();
    for (k, v) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let drop = v
                .as_array()
                .ok_or("$deleteFromPrimitiveList needs a list")?;
            if let Some(Value::Array(list)) = t.get_mut(field) {
                let drop: HashSet<String> = drop.iter().map(Value::to_string).collect();
                list.retain(|x| !drop.contains(&x.to_string()));
            }
            continue;
        }
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Array(items) => {
                let merged = merge_list(k, t.get(k), items, shape)?;
                t.insert(k.clone(), merged);
            }
            Value::Object(_) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                strategic_merge(slot, v, shape.field(k))?;
                if slot.is_null() {
                    t.remove(k);
                }
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
    // Order directives come last, once every list is merged.
    for (k, order) in p {
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            let order = order.as_array().ok_or("$setElementOrder needs a list")?;
            if let Some(Value::Array(list)) = t.get_mut(field) {
                let id = element_id(shape.list_merge(field), shape.field(field).items());
                let original = before.get(field).map_or(&[][..], Vec::as_slice);
                *list = in_patch_order(std::mem::take(list), order, original, &id);
            }
        }
    }
    Ok(())
}

// The lists below are matched through hash maps keyed by the JSON text of an element
// (or of its merge key): a patch may name as many elements as a request body holds, and
// searching the list for each of them would take quadratic time.

fn merge_list(
    field: &str,
    current: Option<&Value>,
    patch: &[Value],
    shape: Shape<'_>,
) -> Result<Value, String> {
    let current = current
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if patch
        .iter()
        .any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let items = patch
            .iter()
            .filter(|e| e.get("$patch").is_none())
            .cloned()
            .collect();
        return Ok(Value::Array(items));
    }
    let rule = shape.list_merge(field);
    let elements = shape.field(field).items();
    if rule == ListMerge::Union {
        // New scalars go last. (Upstream orders them as it does keyed lists, below, so an
        // added one goes first; berth's apply, which sends no `$setElementOrder` for a
        // list of scalars as kubectl would, relies on this order.)
        let mut seen: HashSet<String> = current.iter().map(Value::to_string).collect();
        let mut out = current;
        for e in patch {
            if seen.insert(e.to_string()) {
                out.push(e.clone());
            }
        }
        return Ok(Value::Array(out));
    }
    if !matches!(rule, ListMerge::ByKey(_) | ListMerge::ByKeys(_)) {
        return Ok(Value::Array(patch.to_vec()));
    }
    // Elements by the text of their key (the first of equal keys, as a search would find);
    // a deleted element leaves a hole, closed at the end.
    let mut out: Vec<Option<Value>> = current.iter().cloned().map(Some).collect();
    let mut index: HashMap<String, usize> = HashMap::with_capacity(out.len());
    for (i, o) in out.iter().enumerate() {
        if let Some(id) = o.as_ref().and_then(|o| element_key(o, rule, elements)) {
            index.entry(id.to_string()).or_insert(i);
        }
    }
    for e in patch {
        let Some(id) = element_key(e, rule, elements) else {
            return Err(format!(
                "the elements of {field} need their merge keys {}",
                key_names(rule)
            ));
        };
        let id = id.to_string();
        if e.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = index.remove(&id) {
                out[i] = None;
            }
            continue;
        }
        match index.get(&id).and_then(|&i| out[i].as_mut()) {
            Some(o) => strategic_merge(o, e, elements)?,
            None => {
                let mut fresh = Value::Object(Map::new());
                strategic_merge(&mut fresh, e, elements)?;
                index.insert(id, out.len());
                out.push(Some(fresh));
            }
        }
    }
    let merged: Vec<Value> = out.into_iter().flatten().collect();
    if shape.by_list_type {
        // Server-side apply (and a custom kind's patch, which upstream does not take)
        // keeps the elements where they were and adds new ones last.
        return Ok(Value::Array(merged));
    }
    let kept: Vec<Value> = patch
        .iter()
        .filter(|e| e.get("$patch").is_none())
        .cloned()
        .collect();
    let id = element_id(rule, elements);
    Ok(Value::Array(in_patch_order(merged, &kept, &current, &id)))
}

/// How the elements of a merging list are told apart: by their key (or keys), or whole.
fn element_id<'s>(
    rule: ListMerge<'s>,
    elements: Shape<'s>,
) -> impl Fn(&Value) -> Option<String> + 's {
    move |e| match rule {
        ListMerge::ByKey(_) | ListMerge::ByKeys(_) => {
            element_key(e, rule, elements).map(|k| k.to_string())
        }
        ListMerge::Replace | ListMerge::Union => Some(e.to_string()),
    }
}

/// Orders a merged list as upstream's strategic merge does (`normalizeElementOrder`): the
/// elements that `order` names (the patch's own, or its `$setElementOrder`) in that order,
/// the others in the order of `original` (the list before the patch), the two interleaved
/// by their places in `original`, where an element that was not there goes before the one
/// it is compared with (`mergeSortedSlice`). So a container added by a patch goes first.
fn in_patch_order(
    merged: Vec<Value>,
    order: &[Value],
    original: &[Value],
    id: &dyn Fn(&Value) -> Option<String>,
) -> Vec<Value> {
    let rank = |list: &[Value]| {
        let mut at: HashMap<String, usize> = HashMap::with_capacity(list.len());
        for (i, e) in list.iter().enumerate() {
            if let Some(k) = id(e) {
                at.entry(k).or_insert(i);
            }
        }
        at
    };
    let (in_order, in_original) = (rank(order), rank(original));
    // (place in the order, place in the original, element), and (place in the original,
    // element) for those the order does not name.
    let mut named: Vec<(usize, Option<usize>, Value)> = Vec::new();
    let mut others: Vec<(usize, Value)> = Vec::new();
    for e in merged {
        let k = id(&e);
        let was = k.as_ref().and_then(|k| in_original.get(k).copied());
        match k.as_ref().and_then(|k| in_order.get(k)) {
            Some(&i) => named.push((i, was, e)),
            None => others.push((was.unwrap_or(usize::MAX), e)),
        }
    }
    named.sort_by_key(|(i, ..)| *i);
    others.sort_by_key(|(was, _)| *was);
    let mut out = Vec::with_capacity(named.len() + others.len());
    let (mut named, mut others) = (named.into_iter().peekable(), others.into_iter().peekable());
    loop {
        let other_first = match (others.peek(), named.peek()) {
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
            (Some((l, _)), Some((_, r, _))) => r.is_some_and(|r| *l < r),
        };
        if other_first {
            out.extend(others.next().map(|(_, e)| e));
        } else {
            out.extend(named.next().map(|(_, _, e)| e));
        }
    }
    out
}

/// What identifies element `e` of a list that merges by `rule`: its merge key's value, or
/// the object of its map keys (each left out taking the default of `elements`, the
/// elements' type), as FieldsV1 writes it: `{"port":80,"protocol":"TCP"}`.
pub fn element_key(e: &Value, rule: ListMerge<'_>, elements: Shape<'_>) -> Option<Value> {
    match rule {
        ListMerge::ByKey(key) => e.get(key).cloned(),
        ListMerge::ByKeys(keys) => {
            let mut id = std::collections::BTreeMap::new();
            for key in keys.iter().filter_map(Value::as_str) {
                let value = e
                    .get(key)
                    .or_else(|| elements.property(key).and_then(|p| p.get("default")))?;
                id.insert(key, value);
            }
            Some(json!(id))
        }
        ListMerge::Replace | ListMerge::Union => None,
    }
}

fn key_names(rule: ListMerge<'_>) -> String {
    match rule {
        ListMerge::ByKey(key) => format!("{key:?}"),
        ListMerge::ByKeys(keys) => Value::Array(keys.to_vec()).to_string(),
        ListMerge::Replace | ListMerge::Union => String::new(),
    }
}

/// RFC 7386: objects merge recursively, `null` removes, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("just made an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        // The examples of RFC 7386, appendix A.
        for (target, patch, want) in [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ] {
            let mut t = target.clone();
            merge(&mut t, &patch);
            assert_eq!(t, want, "{target} + {patch}");
        }
    }

    #[test]
    fn json_patch_applies_and_reports_failures() {
        let res = super::super::catalog::of(super::super::Kind::ConfigMap);
        let cur = json!({"data": {"a": "1"}});
        let p = Patch::Json(
            json!([{"op":"add","path":"/data/b","value":"2"},{"op":"remove","path":"/data/a"}]),
        );
        assert_eq!(p.apply(res, &cur).unwrap(), json!({"data": {"b": "2"}}));
        // A patch that does not hold for this object is unprocessable (422)…
        for failing in [
            json!([{"op":"test","path":"/data/a","value":"9"}]),
            json!([{"op":"remove","path":"/data/nope"}]),
            // Fails after an append to a list that the failing operation moved away (found
            // by fuzzing: the library's undo of the append panicked).
            json!([
                {"op":"add","path":"/list/-","value":3},
                {"op":"move","from":"/list","path":"/nope/b"},
            ]),
        ] {
            let cur = json!({"data": {"a": "1"}, "list": [1, 2]});
            let err = Patch::Json(failing).apply(res, &cur).unwrap_err();
            assert!(matches!(err, PatchError::Failed(_)), "{err:?}");
        }
        // …one that is not a patch at all is a bad request (400).
        for malformed in [Patch::Json(json!({"op":"x"})), Patch::Merge(json!([1]))] {
            let err = malformed.apply(res, &cur).unwrap_err();
            assert!(matches!(err, PatchError::Malformed(_)), "{err:?}");
        }
    }

    #[test]
    fn json_patches_are_bounded_in_operations_and_in_what_they_copy() {
        let res = super::super::catalog::of(super::super::Kind::ConfigMap);
        let cur = json!({"data": {"a": "x".repeat(1000)}, "list": ["y".repeat(1000)]});
        // Each copy doubles the list: forty of them would ask for a terabyte.
        let doubling: Vec<Value> = (0..40)
            .map(|_| json!({"op": "copy", "from": "/list", "path": "/list/-"}))
            .collect();
        let err = Patch::Json(Value::Array(doubling))
            .apply(res, &cur)
            .unwrap_err();
        let PatchError::Failed(message) = err else {
            panic!("{err:?}")
        };
        assert!(
            message.ends_with("its copies would add more than 9437184 bytes"),
            "{message}"
        );
        // A few copies are fine.
        let few = json!([
            {"op": "copy", "from": "/data/a", "path": "/data/b"},
            {"op": "copy", "from": "/data", "path": "/more"},
        ]);
        let out = Patch::Json(few).apply(res, &cur).unwrap();
        assert_eq!(out["more"]["b"], cur["data"]["a"]);
        // Too many operations are refused before any is applied.
        let many: Vec<Value> = (0..10_001)
            .map(|_| json!({"op": "test", "path": "/data/a", "value": "x".repeat(1000)}))
            .collect();
        let err = Patch::Json(Value::Array(many))
            .apply(res, &cur)
            .unwrap_err();
        assert!(matches!(err, PatchError::TooLarge(_)), "{err:?}");
        // A failure names the operation by its place in the whole patch.
        let err = Patch::Json(json!([
            {"op": "add", "path": "/data/c", "value": "1"},
            {"op": "remove", "path": "/data/nope"},
        ]))
        .apply(res, &cur)
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::Failed(
                "the JSON patch could not be applied: operation '/1' failed at path '/data/nope': path is invalid".into()
            )
        );
    }

    #[test]
    fn strategic_merge_of_long_lists_keeps_keys_order_and_deletions() {
        // As long as a body allows lists to be, every directive over them at once.
        let n = 5000;
        let named = |i: usize| json!({"name": format!("c{i}")});
        let target = json!({
            "metadata": {"finalizers": (0..n).map(|i| format!("f/{i}")).collect::<Vec<_>>()},
            "spec": {"containers": (0..n).map(|i| json!({"name": format!("c{i}"), "image": "old"})).collect::<Vec<_>>()},
        });
        let mut containers: Vec<Value> = (0..n)
            .step_by(2)
            .map(|i| json!({"name": format!("c{i}"), "image": "new"}))
            .collect();
        containers.push(json!({"name": "c1", "$patch": "delete"}));
        containers.push(json!({"name": "extra", "image": "x"}));
        let patch = json!({
            "metadata": {
                "finalizers": (n..2 * n).map(|i| format!("f/{i}")).collect::<Vec<_>>(),
                "$deleteFromPrimitiveList/finalizers": (0..n).step_by(2).map(|i| format!("f/{i}")).collect::<Vec<_>>(),
            },
            "spec": {
                "containers": containers,
                "$setElementOrder/containers": std::iter::once(json!({"name": "extra"}))
                    .chain((0..n).rev().filter(|i| *i != 1).map(named))
                    .collect::<Vec<_>>(),
            },
        });
        let out = smp(target, patch);
        let finalizers = out["metadata"]["finalizers"].as_array().unwrap();
        assert_eq!(finalizers.len(), n / 2 + n);
        assert_eq!(finalizers[0], "f/1");
        let cs = out["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), n);
        assert_eq!(cs[0], json!({"name": "extra", "image": "x"}));
        assert_eq!(
            cs[1],
            json!({"name": format!("c{}", n - 1), "image": "old"})
        );
        assert_eq!(
            cs[2],
            json!({"name": format!("c{}", n - 2), "image": "new"})
        );
        assert_eq!(cs[n - 1], json!({"name": "c0", "image": "new"}));
        assert!(!cs.iter().any(|c| c["name"] == "c1"));
    }

    fn pods() -> Shape<'static> {
        Shape::of(super::super::catalog::of(super::super::Kind::Pod))
    }

    fn smp(target: Value, patch: Value) -> Value {
        let mut t = target;
        strategic_merge(&mut t, &patch, pods()).unwrap();
        t
    }

    #[test]
    fn lists_merge_by_the_key_of_their_own_type() {
        use super::super::{Kind, catalog};
        let merge = |kind: Kind, target: Value, patch: Value| {
            let mut t = target;
            strategic_merge(&mut t, &patch, Shape::of(catalog::of(kind))).unwrap();
            t
        };
        // A Service's ports merge by port, a container's by containerPort.
        let svc = json!({"spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080},
                                            {"name": "https", "port": 443}]}});
        let out = merge(
            Kind::Service,
            svc,
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
        );
        assert_eq!(out["spec"]["ports"][0]["targetPort"], 9090);
        assert_eq!(out["spec"]["ports"][1]["port"], 443);
        let pod = json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "web"}],
                                                  "env": [{"name": "A", "value": "1"}]}]}});
        let out = merge(
            Kind::Pod,
            pod,
            json!({"spec": {"containers": [{"name": "a",
            "ports": [{"containerPort": 81}], "env": [{"name": "B", "value": "2"}]}]}}),
        );
        assert_eq!(
            out["spec"]["containers"][0]["ports"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            out["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        // Deep in a template: an RC's containers still merge by name.
        let rc = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}]}}}});
        let out = merge(
            Kind::ReplicationController,
            rc,
            json!({"spec": {"template": {"spec":
            {"containers": [{"name": "b", "image": "y"}]}}}}),
        );
        let cs = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            (cs[0]["image"].as_str(), cs[1]["image"].as_str()),
            (Some("x"), Some("y"))
        );
        // A list the types do not merge is replaced: a container's args.
        let out = merge(
            Kind::Pod,
            json!({"spec": {"containers": [{"name": "a", "args": ["1"]}]}}),
            json!({"spec": {"containers": [{"name": "a", "args": ["2"]}]}}),
        );
        assert_eq!(out["spec"]["containers"][0]["args"], json!(["2"]));
        // A ConfigMap has no lists that merge; a field named `ports` there is only data.
        let out = merge(
            Kind::Node,
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "1"}]}}),
            json!({"status": {"addresses": [{"type": "Hostname", "address": "n"}]}}),
        );
        assert_eq!(out["status"]["addresses"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn the_served_schemas_carry_the_merge_rules() {
        let defs = super::super::schema::definitions();
        let ports = &defs["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "port");
        assert_eq!(
            ports["x-kubernetes-list-map-keys"],
            json!(["port", "protocol"])
        );
        let fins =
            &defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["finalizers"];
        assert_eq!(fins["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(fins["x-kubernetes-list-type"], "set");
    }

    #[test]
    fn strategic_merge_merges_containers_by_name() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]}});
        let out = smp(
            pod.clone(),
            json!({"spec": {"containers": [
            {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]}]}}),
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "a:2");
        // The variable added goes first, as upstream orders a merged list.
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}])
        );
        assert_eq!(out["spec"]["containers"][1]["image"], "b:1");
        // $patch: delete removes an element; $setElementOrder orders them.
        let out = smp(
            pod.clone(),
            json!({"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}],
            "containers": [{"name": "a", "$patch": "delete"}, {"name": "c", "image": "c:1"}]}}),
        );
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["b", "c"]);
        // $patch: replace on a list and on a map.
        let out = smp(
            pod.clone(),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "z", "image": "z"}])
        );
        let out = smp(
            pod,
            json!({"spec": {"$patch": "replace", "containers": []}}),
        );
        assert_eq!(out["spec"], json!({"containers": []}));
    }

    #[test]
    fn merged_lists_take_the_order_upstream_gives_them() {
        let pod = json!({"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}});
        let names = |out: &Value| -> Vec<String> {
            out["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_string())
                .collect()
        };
        // A container the patch adds goes first (the ReplicaSet conformance test patches
        // one in and expects it at index 0).
        let out = smp(
            pod.clone(),
            json!({"spec": {"containers": [{"name": "c", "image": "c:1"}]}}),
        );
        assert_eq!(names(&out), ["c", "a", "b"]);
        // The patch's elements keep its order; the others theirs, between them by place.
        let out = smp(
            pod.clone(),
            json!({"spec": {"containers": [{"name": "a", "image": "a:2"}, {"name": "c", "image": "c:1"}]}}),
        );
        assert_eq!(names(&out), ["a", "c", "b"]);
        assert_eq!(out["spec"]["containers"][0]["image"], "a:2");
        let out = smp(
            pod.clone(),
            json!({"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "a", "image": "a:2"}]}}),
        );
        assert_eq!(names(&out), ["b", "a"]);
        // $setElementOrder interleaves the elements it does not name by their old places.
        let three = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}});
        let out = smp(
            three,
            json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}]}}),
        );
        assert_eq!(names(&out), ["b", "c", "a"]);
    }

    #[test]
    fn strategic_merge_handles_maps_primitives_and_unknown_lists() {
        let obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
                         "spec": {"tolerations": [{"key": "k"}], "args": ["1"]}});
        let out = smp(
            obj.clone(),
            json!({"metadata": {"labels": {"a": null, "c": "3"}, "finalizers": ["y"]},
                                          "spec": {"tolerations": [{"key": "z"}]}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        assert_eq!(out["metadata"]["finalizers"], json!(["x", "y"]));
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "z"}]),
            "lists without a merge key are replaced"
        );
        let out = smp(
            obj.clone(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        let out = smp(
            obj,
            json!({"spec": {"$retainKeys": ["args"], "args": ["2"]}}),
        );
        assert_eq!(out["spec"], json!({"args": ["2"]}));
        let mut t = json!({"spec": {"containers": [{"name": "a"}]}});
        assert!(
            strategic_merge(
                &mut t,
                &json!({"spec": {"containers": [{"image": "x"}]}}),
                pods()
            )
            .is_err()
        );
    }
}
