//! The JSON Schemas of the served kinds, generated from the Rust types (k8s-openapi with
//! schemars), used twice: served as OpenAPI v3 components, and compiled into validators
//! that check every incoming object (types, enums, required fields, unknown fields).

use std::collections::HashMap;
use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status};
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

use super::catalog::{RESOURCES, Resource};
use super::{Cause, Error};

/// How to treat fields the schema does not know (`fieldValidation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Refuse the request (400).
    Strict,
    /// Accept, drop the fields and warn (the default).
    #[default]
    Warn,
    /// Accept and drop the fields silently.
    Ignore,
}

/// Where a kind's schema comes from: its name among the definitions, how to add it (and
/// what it refers to) to a generator, and its validator, compiled at its first use (a kind
/// nobody writes costs no memory).
pub struct Source {
    origin: Origin,
    validator: OnceLock<jsonschema::Validator>,
}

enum Origin {
    /// A built-in kind's: a name among [`definitions`] and what adds it there.
    Builtin {
        name: fn() -> String,
        add: fn(&mut schemars::SchemaGenerator),
    },
    /// A custom kind's: its definition's schema, as OpenAPI serves it (`name` among
    /// `definitions`, which refers to the built-in meta schemas), and the JSON Schema
    /// that validates it (closed where unknown fields are pruned).
    Custom {
        name: String,
        definitions: Map<String, Value>,
        validation: Value,
    },
}

impl Source {
    /// The schema of a Rust type (the k8s-openapi types).
    pub const fn typed<T: JsonSchema>() -> Source {
        Source::new(name_of::<T>, add_of::<T>)
    }

    /// A schema written out by hand: its name, and how it adds its definitions.
    pub const fn new(name: fn() -> String, add: fn(&mut schemars::SchemaGenerator)) -> Source {
        Source {
            origin: Origin::Builtin { name, add },
            validator: OnceLock::new(),
        }
    }

    /// A custom kind's schema: `definitions` as OpenAPI documents it, with `name` the
    /// kind's own, and `validation` the JSON Schema objects are checked against (its
    /// `$ref`s point into the built-in definitions).
    pub fn custom(name: String, definitions: Map<String, Value>, validation: Value) -> Source {
        Source {
            origin: Origin::Custom {
                name,
                definitions,
                validation,
            },
            validator: OnceLock::new(),
        }
    }

    /// Whether a built-in kind's schema this is.
    pub fn is_builtin(&self) -> bool {
        matches!(self.origin, Origin::Builtin { .. })
    }

    /// A custom kind's own schema, as OpenAPI documents it (none for a built-in kind).
    pub fn custom_schema(&self) -> Option<&Value> {
        match &self.origin {
            Origin::Builtin { .. } => None,
            Origin::Custom {
                name, definitions, ..
            } => definitions.get(name),
        }
    }

    /// A custom kind's schemas, as OpenAPI documents them (none for a built-in kind).
    pub fn custom_definitions(&self) -> Map<String, Value> {
        match &self.origin {
            Origin::Builtin { .. } => Map::new(),
            Origin::Custom { definitions, .. } => definitions.clone(),
        }
    }

    fn name(&self) -> String {
        match &self.origin {
            Origin::Builtin { name, .. } => name(),
            Origin::Custom { name, .. } => name.clone(),
        }
    }
}

fn name_of<T: JsonSchema>() -> String {
    T::schema_name().into_owned()
}

fn add_of<T: JsonSchema>(generator: &mut schemars::SchemaGenerator) {
    generator.subschema_for::<T>();
}

/// The components.schemas name of a kind's schema.
pub fn schema_name(res: &Resource) -> String {
    res.schema.name()
}

/// The components.schemas name of a kind's list (`io.k8s.api.core.v1.PodList`), the body of
/// a list and of a deletecollection.
pub fn list_schema_name(res: &Resource) -> String {
    format!("{}List", schema_name(res))
}

/// The schema of a list of `item`s, as Kubernetes' `…List` types.
fn list_schema(r: &Resource, item: &str, list_meta: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}.", r.list_kind(), r.kind_name),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object.",
                "type": "string",
            },
            "items": {"type": "array", "items": reference(item)},
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents.",
                "type": "string",
            },
            "metadata": reference(list_meta),
        },
        "x-kubernetes-group-version-kind": [
            {"group": r.group, "version": r.version, "kind": r.list_kind()},
        ],
    })
}

/// The name of the meta/v1 Status schema, the body of every failure.
pub fn status_schema_name() -> String {
    Status::schema_name().into_owned()
}

/// The name of the autoscaling/v1 Scale schema.
pub fn scale_schema_name() -> String {
    k8s_openapi::api::autoscaling::v1::Scale::schema_name().into_owned()
}

/// Every schema the served kinds need, keyed by name, with each kind's schema marked with
/// its group, version and kind (as OpenAPI documents of Kubernetes do).
pub fn definitions() -> &'static Map<String, Value> {
    static DEFS: OnceLock<Map<String, Value>> = OnceLock::new();
    DEFS.get_or_init(|| {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        for r in RESOURCES.iter() {
            if let Origin::Builtin { add, .. } = &r.schema.origin {
                add(&mut generator);
            }
        }
        generator.subschema_for::<k8s_openapi::api::autoscaling::v1::Scale>();
        generator.subschema_for::<ListMeta>();
        generator.subschema_for::<Status>();
        let mut defs = generator.take_definitions(true);
        defs.extend(super::deploymentconfig::schema::definitions());
        defs.extend(super::metrics::definitions());
        annotate_merge_rules(&mut defs);
        // Any JSON value (a definition's defaults and examples), not only objects.
        if let Some(Value::Object(any)) =
            defs.get_mut("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON")
        {
            any.remove("type");
        }
        let mut mark = |name: String, group: &str, version: &str, kind: &str| {
            if let Some(Value::Object(s)) = defs.get_mut(&name) {
                s.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": group, "version": version, "kind": kind}]),
                );
            }
        };
        for r in RESOURCES.iter() {
            mark(schema_name(r), &r.group, &r.version, &r.kind_name);
        }
        mark(scale_schema_name(), "autoscaling", "v1", "Scale");
        let list_meta = ListMeta::schema_name();
        for r in RESOURCES.iter() {
            let item = schema_name(r);
            defs.insert(list_schema_name(r), list_schema(r, &item, &list_meta));
        }
        defs
    })
}

/// Marks each property of the built-in types with how Kubernetes merges it, as its
/// OpenAPI documents do: `x-kubernetes-patch-strategy` and `-patch-merge-key` (strategic
/// merge patch; kubectl reads them too), `x-kubernetes-list-type` and `-list-map-keys`
/// (server-side apply), `x-kubernetes-map-type`.
fn annotate_merge_rules(defs: &mut Map<String, Value>) {
    for (name, def) in defs.iter_mut() {
        if super::patch_meta::is_atomic_type(name)
            && let Some(d) = def.as_object_mut()
        {
            d.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
        let Some(Value::Object(props)) = def.get_mut("properties") else {
            continue;
        };
        for (field, prop) in props.iter_mut() {
            let Some(rule) = super::patch_meta::find(name, field) else {
                continue;
            };
            let Some(p) = prop.as_object_mut() else {
                continue;
            };
            // A property that only refers to another schema keeps the reference in an
            // allOf, so that the extensions beside it are read.
            if let Some(r) = p.remove("$ref") {
                p.insert("allOf".into(), json!([{"$ref": r}]));
            }
            for (key, value) in [
                ("x-kubernetes-patch-strategy", rule.strategy),
                ("x-kubernetes-patch-merge-key", rule.merge_key),
                ("x-kubernetes-list-type", rule.list_type),
                ("x-kubernetes-map-type", rule.map_type),
            ] {
                if !value.is_empty() {
                    p.insert(key.into(), json!(value));
                }
            }
            if !rule.map_keys.is_empty() {
                p.insert("x-kubernetes-list-map-keys".into(), json!(rule.map_keys));
            }
        }
        // The defaults the Go types give list map keys (`+default`), which server-side
        // apply takes for an element that leaves the key out.
        for (schema, field, default) in KEY_DEFAULTS {
            if name == schema
                && let Some(Value::Object(p)) = props.get_mut(*field)
            {
                p.insert("default".into(), json!(default));
            }
        }
    }
}

/// List map keys with a `+default` in the Go types: schema, field, default.
const KEY_DEFAULTS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.ContainerPort", "protocol", "TCP"),
    ("io.k8s.api.core.v1.ServicePort", "protocol", "TCP"),
];

/// The schemas that the OpenAPI document of `resources` (one group version) carries:
/// every schema of the built-in kinds when it holds one (their documents share them), else
/// the definitions' own and the meta types they refer to.
pub fn definitions_of(resources: &[&Resource]) -> Map<String, Value> {
    if resources.iter().any(|r| r.schema.is_builtin()) {
        return definitions().clone();
    }
    let mut out = Map::new();
    for r in resources {
        out.extend(r.schema.custom_definitions());
    }
    for name in [
        ListMeta::schema_name().into_owned(),
        status_schema_name(),
        scale_schema_name(),
    ] {
        out.extend(reachable(definitions(), &name));
    }
    let own = Value::Object(out.clone());
    let mut refs = Vec::new();
    references(&own, &mut refs);
    for name in refs {
        if !out.contains_key(name) {
            out.extend(reachable(definitions(), name));
        }
    }
    out
}

/// A copy of `schema` that refuses properties it does not list, so that validation
/// reports unknown fields.
fn closed(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => {
            let mut out: Map<String, Value> =
                m.iter().map(|(k, v)| (k.clone(), closed(v))).collect();
            if out.contains_key("properties") && !out.contains_key("additionalProperties") {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(closed).collect()),
        other => other.clone(),
    }
}

const REF_PREFIX: &str = "#/components/schemas/";

/// A reference to the schema `name` among the definitions.
pub fn reference(name: &str) -> Value {
    json!({"$ref": format!("{REF_PREFIX}{name}")})
}

/// The names of the schemas that `v` refers to, in order, repeats included.
pub(crate) fn references<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.extend(r.strip_prefix(REF_PREFIX)),
                    _ => references(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| references(v, out)),
        _ => {}
    }
}

/// The schemas of `defs` that `name`'s refers to, itself included, directly or not.
fn reachable(defs: &Map<String, Value>, name: &str) -> Map<String, Value> {
    let mut out = Map::new();
    let mut todo = vec![name];
    while let Some(name) = todo.pop() {
        if out.contains_key(name) {
            continue;
        }
        if let Some(schema) = defs.get(name) {
            references(schema, &mut todo);
            out.insert(name.to_string(), schema.clone());
        }
    }
    out
}

/// The validator of `res`'s schema, compiled at its first use.
fn validator(res: &Resource) -> &jsonschema::Validator {
    res.schema.validator.get_or_init(|| {
        // Only the schemas the kind refers to: each validator keeps its own copy.
        let mut root = match &res.schema.origin {
            Origin::Builtin { .. } => reference(&schema_name(res)),
            Origin::Custom { validation, .. } => closed(validation),
        };
        let mut refs = Vec::new();
        references(&root, &mut refs);
        let mut schemas = Map::new();
        for name in refs {
            schemas.extend(reachable(definitions(), name));
        }
        root["components"] = json!({"schemas": closed(&Value::Object(schemas))});
        let v = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft7)
            .should_validate_formats(false)
            .build(&root)
            .expect("generated schemas compile");
        drop(root);
        // Compiling leaves much freed memory behind.
        crate::release_freed_memory();
        v
    })
}

/// `spec.containers[0].image` from a JSON pointer location.
fn field_path(loc: &jsonschema::paths::Location) -> String {
    let mut out = String::new();
    for seg in loc.iter() {
        match seg {
            jsonschema::paths::LocationSegment::Property(p) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&p);
            }
            jsonschema::paths::LocationSegment::Index(i) => {
                out.push_str(&format!("[{i}]"));
            }
        }
    }
    out
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}

/// Removes `null` members of objects, as decoding into the API types would.
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Removes the member at `path` (an object location plus the member name).
fn remove_at(obj: &mut Value, loc: &jsonschema::paths::Location, name: &str) {
    let mut cur = obj;
    for seg in loc.iter() {
        let next = match seg {
            jsonschema::paths::LocationSegment::Property(p) => cur.get_mut(p.as_ref()),
            jsonschema::paths::LocationSegment::Index(i) => cur.get_mut(i),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(name);
    }
}

/// What decoding a request's body noted besides its value, for strict field validation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyNotes {
    /// Paths (`data.a`, `spec.containers[0].name`) of the fields a JSON body names
    /// twice, in the order of the body: JSON keeps the last.
    pub duplicates: Vec<String>,
    /// Every field path of the body in its order, kept only when it names fields
    /// twice: a typed kind's unknown and duplicate fields are listed in that order.
    pub order: Vec<String>,
    /// Keys a YAML body gives twice, in kube-apiserver's words (`error converting YAML
    /// to JSON: yaml: unmarshal errors:` and a `line N: key "k" already set in map` for
    /// each); YAML keeps the last too.
    pub yaml: Option<String>,
}

/// Parses a JSON body as [`serde_json::from_slice`] does, noting the fields it names
/// twice.
pub fn parse_json(body: &[u8]) -> serde_json::Result<(Value, BodyNotes)> {
    let walk = |order: Option<&mut Vec<String>>| {
        let mut de = serde_json::Deserializer::from_slice(body);
        let mut duplicates = Vec::new();
        let v =
            Checked::new(&mut String::new(), &mut duplicates, order, None).deserialize(&mut de)?;
        de.end()?;
        Ok::<_, serde_json::Error>((v, duplicates))
    };
    use serde::de::DeserializeSeed;
    let (v, duplicates) = walk(None)?;
    let mut order = Vec::new();
    if !duplicates.is_empty() {
        walk(Some(&mut order))?;
    }
    Ok((
        v,
        BodyNotes {
            duplicates,
            order,
            yaml: None,
        },
    ))
}

/// How deep a body may nest: as deep as `serde_json` (which parses JSON bodies) and
/// `serde_yaml_ng` allow.
pub const MAX_NESTING: usize = 128;

/// At most this many keys given twice are located by line in a YAML body (each takes
/// one more pass over it); the others are counted.
const YAML_LINES: usize = 16;

/// Parses a YAML body (JSON is YAML too) into JSON, noting the keys it gives twice with
/// their lines, as kube-apiserver's strict YAML decoding words them.
pub fn parse_yaml(body: &[u8]) -> Result<(Value, BodyNotes), serde_yaml_ng::Error> {
    use serde::de::DeserializeSeed;
    // Refused as a JSON body nested as deep is, and before libyaml's scan of the whole
    // document, whose time grows with the square of the nesting of flow collections.
    if let Err(at) = super::yamldepth::check(body, MAX_NESTING) {
        return Err(serde::de::Error::custom(format!(
            "the document is nested more than {MAX_NESTING} deep at line {} column {}: \
             flatten it",
            at.line, at.column
        )));
    }
    let walk = |stop_at: Option<usize>| {
        let mut duplicates = Vec::new();
        let de = serde_yaml_ng::Deserializer::from_slice(body);
        Checked::new(&mut String::new(), &mut duplicates, None, stop_at)
            .deserialize(de)
            .map(|v| (v, duplicates))
    };
    let (v, duplicates) = walk(None)?;
    let mut notes = BodyNotes::default();
    if !duplicates.is_empty() {
        let mut lines: Vec<String> = Vec::new();
        for (k, path) in duplicates.iter().enumerate().take(YAML_LINES) {
            // The pass stops at the k-th key given twice, whose error says where it is.
            let line = walk(Some(k))
                .err()
                .and_then(|e| e.location())
                .map_or(0, |l| l.line());
            let key = path.rsplit('.').next().unwrap_or(path);
            lines.push(format!("line {line}: key {key:?} already set in map"));
        }
        if duplicates.len() > YAML_LINES {
            lines.push(format!(
                "and {} more keys already set in their maps",
                duplicates.len() - YAML_LINES
            ));
        }
        notes.yaml = Some(format!(
            "error converting YAML to JSON: yaml: unmarshal errors:\n  {}",
            lines.join("\n  ")
        ));
    }
    Ok((v, notes))
}

/// Builds a [`Value`] at `path` (one buffer for the whole walk), noting keys that repeat
/// (and, with `order`, every key's path in the order of the body). With `stop_at: k`
/// the walk fails at the key that repeats for the k-th time, so that the parser's error
/// tells where it is.
struct Checked<'a> {
    path: &'a mut String,
    duplicates: &'a mut Vec<String>,
    order: Option<&'a mut Vec<String>>,
    stop_at: Option<usize>,
}

impl<'a> Checked<'a> {
    fn new(
        path: &'a mut String,
        duplicates: &'a mut Vec<String>,
        order: Option<&'a mut Vec<String>>,
        stop_at: Option<usize>,
    ) -> Self {
        Checked {
            path,
            duplicates,
            order,
            stop_at,
        }
    }

    fn nested(&mut self) -> Checked<'_> {
        Checked {
            path: &mut *self.path,
            duplicates: &mut *self.duplicates,
            order: self.order.as_deref_mut(),
            stop_at: self.stop_at,
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Checked<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// Reads a map's key; fails on one already in `seen` when `stop` says so.
struct Key<'m> {
    seen: &'m serde_json::Map<String, Value>,
    stop: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        if self.stop && self.seen.contains_key(v) {
            return Err(E::custom(format!("key {v:?} already set in map")));
        }
        Ok(v.to_owned())
    }
}

impl<'de> serde::de::Visitor<'de> for Checked<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        use std::fmt::Write;
        let mut items = Vec::new();
        let len = self.path.len();
        loop {
            let _ = write!(self.path, "[{}]", items.len());
            let item = seq.next_element_seed(self.nested())?;
            self.path.truncate(len);
            match item {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        let len = self.path.len();
        loop {
            let stop = self.stop_at == Some(self.duplicates.len());
            let Some(key) = map.next_key_seed(Key { seen: &out, stop })? else {
                break;
            };
            if len > 0 {
                self.path.push('.');
            }
            self.path.push_str(&key);
            if let Some(order) = self.order.as_deref_mut() {
                order.push(self.path.clone());
            }
            // A duplicate is listed where its key is, before those in its value. The
            // stopping pass counts them so as it meets their keys; the others note them
            // with the one lookup of the insert.
            let stopping = self.stop_at.is_some();
            if stopping && out.contains_key(&key) {
                self.duplicates.push(self.path.clone());
            }
            let slot = self.duplicates.len();
            let v = map.next_value_seed(self.nested())?;
            if out.insert(key, v).is_some() && !stopping {
                self.duplicates.insert(slot, self.path.clone());
            }
            self.path.truncate(len);
        }
        Ok(Value::Object(out))
    }
}

/// Checks `obj` against the schema of `res`: unknown fields are dropped (and refused or
/// warned about per `mode`), every other problem becomes a cause. Returns the warnings.
pub fn admit(
    res: &Resource,
    obj: &mut Value,
    mode: FieldValidation,
    causes: &mut Vec<Cause>,
) -> Result<Vec<String>, Error> {
    admit_with(res, obj, mode, &BodyNotes::default(), causes)
}

/// [`admit`], for a body whose decoding noted `notes` (fields named twice).
/// The fields of `obj` that its kind's schema does not declare (paths like
/// `spec.extra`), outside the nodes that keep unknown fields.
pub fn undeclared(res: &Resource, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for e in validator(res).iter_errors(obj) {
        if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } =
            e.kind()
        {
            let at = field_path(e.instance_path());
            out.extend(unexpected.iter().map(|name| join(&at, name)));
        }
    }
    out
}

pub fn admit_with(
    res: &Resource,
    obj: &mut Value,
    mode: FieldValidation,
    notes: &BodyNotes,
    causes: &mut Vec<Cause>,
) -> Result<Vec<String>, Error> {
    drop_nulls(obj);
    let validator = validator(res);
    let mut unknown: Vec<(jsonschema::paths::Location, String)> = Vec::new();
    for e in validator.iter_errors(obj) {
        let at = field_path(e.instance_path());
        match e.kind() {
            jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                for name in unexpected {
                    unknown.push((e.instance_path().clone(), name.clone()));
                }
            }
            jsonschema::error::ValidationErrorKind::Required { property } => {
                let field = join(&at, property.as_str().unwrap_or_default());
                if !res.strategy.may_leave_out(&field) {
                    causes.push(Cause::required(&field));
                }
            }
            jsonschema::error::ValidationErrorKind::Enum { options } => {
                let allowed: Vec<String> = options
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_string))
                    .collect();
                let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
                let value = e.instance();
                let value = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_string);
                causes.push(Cause::not_supported(&at, &value, &allowed));
            }
            kind => {
                // Bounds in kube-apiserver's words (kube-openapi's validation errors).
                use jsonschema::error::ValidationErrorKind as K;
                let detail = match kind {
                    K::Minimum { limit } => {
                        format!("{at} in body should be greater than or equal to {limit}")
                    }
                    K::Maximum { limit } => {
                        format!("{at} in body should be less than or equal to {limit}")
                    }
                    K::MinLength { limit } => {
                        format!("{at} in body should be at least {limit} chars long")
                    }
                    K::MaxLength { limit } => {
                        format!("{at} in body should be at most {limit} chars long")
                    }
                    K::MinItems { limit } => {
                        format!("{at} in body should have at least {limit} items")
                    }
                    K::MaxItems { limit } => {
                        format!("{at} in body should have at most {limit} items")
                    }
                    K::Pattern { pattern } => format!("{at} in body should match '{pattern}'"),
                    _ => e.to_string(),
                };
                causes.push(Cause::invalid(&at, e.instance(), &detail));
            }
        }
    }
    // As kube-apiserver lists them: a YAML body's keys given twice first; then, for a
    // typed kind, unknown and duplicate fields in the order of the body; for a custom
    // kind, duplicates in the order of the body, then unknown fields of the object's
    // own metadata, the others, and those of embedded objects' metadata.
    let mut fields: Vec<String> = unknown
        .iter()
        .map(|(loc, name)| join(&field_path(loc), name))
        .collect();
    let rank = |f: &String| match (f.starts_with("metadata."), f.contains(".metadata.")) {
        (true, _) => 0,
        (false, false) => 1,
        (false, true) => 2,
    };
    fields.sort_by_key(rank);
    let mut listed: Vec<(usize, String)> = notes
        .duplicates
        .iter()
        .map(|d| (0, format!("duplicate field {d:?}")))
        .chain(fields.iter().map(|f| (0, format!("unknown field {f:?}"))))
        .collect();
    if res.schema.custom_schema().is_none() && !notes.order.is_empty() {
        // A duplicate sits where it is given again, an unknown field where it first is.
        let mut at: HashMap<&str, (usize, usize)> = HashMap::with_capacity(notes.order.len());
        for (i, path) in notes.order.iter().enumerate() {
            at.entry(path)
                .and_modify(|(_, last)| *last = i)
                .or_insert((i, i));
        }
        let place = |path: &str, last: bool| {
            at.get(path)
                .map_or(usize::MAX, |&(first, l)| if last { l } else { first })
        };
        let duplicates = notes.duplicates.iter().map(|d| place(d, true));
        let unknown = fields.iter().map(|f| place(f, false));
        for ((rank, _), i) in listed.iter_mut().zip(duplicates.chain(unknown)) {
            *rank = i;
        }
        listed.sort_by_key(|(rank, _)| *rank);
    }
    let names: Vec<String> = notes
        .yaml
        .iter()
        .cloned()
        .chain(listed.into_iter().map(|(_, n)| n))
        .collect();
    if !names.is_empty() && mode == FieldValidation::Strict {
        let list = &names;
        return Err(Error::BadRequest(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            list.join(", "),
            kind = res.kind_name,
            version = res.version,
        )));
    }
    for (loc, name) in &unknown {
        remove_at(obj, loc, name);
    }
    Ok(match mode {
        FieldValidation::Warn => names,
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::catalog::{self, Kind};

    #[test]
    fn parsing_notes_the_fields_a_body_names_twice() {
        let body = br#"{"a": 1, "b": {"c": [true, {"d": null, "d": 2.5}], "c": "x"}, "a": "last"}"#;
        let (v, notes) = parse_json(body).unwrap();
        assert_eq!(v, json!({"a": "last", "b": {"c": "x"}}));
        assert_eq!(notes.duplicates, ["b.c[1].d", "b.c", "a"]);
        assert_eq!(
            notes.order,
            ["a", "b", "b.c", "b.c[1].d", "b.c[1].d", "b.c", "a"]
        );
        let plain = br#"{"k": [1, -2, 18446744073709551615, 0.5, "s", null, {}]}"#;
        let (v, notes) = parse_json(plain).unwrap();
        assert_eq!(v, serde_json::from_slice::<Value>(plain).unwrap());
        assert_eq!(notes, BodyNotes::default());
        assert!(parse_json(b"{} trailing").is_err());
        assert!(parse_json(b"{\"a\": ").is_err());
    }

    #[test]
    fn yaml_nested_beyond_json_limit_is_refused_before_it_is_parsed_whole() {
        let n = 20_000;
        let body = format!("{{\"a\": {}1{}}}", "[".repeat(n), "]".repeat(n));
        let e = parse_yaml(body.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("nested more than 128 deep"), "{e}");
        assert!(parse_json(body.as_bytes()).is_err());
        let ok = format!("{{\"a\": {}1{}}}", "[".repeat(100), "]".repeat(100));
        parse_yaml(ok.as_bytes()).unwrap();
        parse_json(ok.as_bytes()).unwrap();
    }

    #[test]
    fn yaml_keys_given_twice_are_told_by_line() {
        let body = b"\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: '1'\n  y: '2'\n  x: '3'\nlist:\n- {k: 1, k: 2}\n";
        let (v, notes) = parse_yaml(body).unwrap();
        assert_eq!(v["data"]["x"], "3", "the last is kept: {v}");
        assert_eq!(v["list"][0]["k"], 2);
        assert_eq!(
            notes.yaml.as_deref(),
            Some(
                "error converting YAML to JSON: yaml: unmarshal errors:\n  line 9: key \"x\" already set in map\n  line 11: key \"k\" already set in map"
            )
        );
        // A key given twice whose second value gives one twice too: each on its line.
        let (_, notes) = parse_yaml(b"a: {x: 1}\na:\n  y: 1\n  y: 2\n").unwrap();
        assert_eq!(
            notes.yaml.as_deref(),
            Some(
                "error converting YAML to JSON: yaml: unmarshal errors:\n  line 2: key \"a\" already set in map\n  line 4: key \"y\" already set in map"
            )
        );
        let (v, notes) = parse_yaml(b"a: {b: [1, null, ~, true, 2.5, text]}").unwrap();
        assert_eq!(v, json!({"a": {"b": [1, null, null, true, 2.5, "text"]}}));
        assert_eq!(notes, BodyNotes::default());
        assert!(parse_yaml(b"a: [").is_err());
    }

    #[test]
    fn a_typed_kinds_unknown_and_duplicate_fields_are_listed_in_body_order() {
        let res = catalog::of(Kind::ConfigMap);
        let body =
            br#"{"metadata": {"name": "a"}, "zzz": 1, "data": {"a": "1", "a": "2"}, "aaa": 2}"#;
        let (mut v, notes) = parse_json(body).unwrap();
        let err = admit_with(
            res,
            &mut v,
            FieldValidation::Strict,
            &notes,
            &mut Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.ends_with(
                r#"strict decoding error: unknown field "zzz", duplicate field "data.a", unknown field "aaa""#
            ),
            "{err}"
        );
    }

    #[test]
    fn kinds_carry_their_group_version_kind() {
        let defs = definitions();
        let pod = &defs["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        assert!(pod["properties"]["spec"].is_object());
        assert!(defs.contains_key("io.k8s.api.core.v1.Container"));
        assert!(defs.contains_key(&scale_schema_name()));
    }

    #[test]
    fn unknown_fields_are_refused_warned_or_dropped() {
        let res = catalog::of(Kind::Pod);
        let pod = json!({"metadata": {"name": "p", "bogus": 1}, "spec": {"containers": [{"name": "a", "image": "x", "typo": true}]}});
        let mut causes = Vec::new();
        let err = admit(res, &mut pod.clone(), FieldValidation::Strict, &mut causes).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("strict decoding error"), "{msg}");
        assert!(msg.contains("unknown field \"metadata.bogus\""), "{msg}");
        assert!(
            msg.contains("unknown field \"spec.containers[0].typo\""),
            "{msg}"
        );
        let mut warned = pod.clone();
        let warnings = admit(res, &mut warned, FieldValidation::Warn, &mut causes).unwrap();
        assert_eq!(warnings.len(), 2);
        assert!(warned["metadata"].get("bogus").is_none());
        assert!(warned["spec"]["containers"][0].get("typo").is_none());
        let mut ignored = pod;
        assert!(
            admit(res, &mut ignored, FieldValidation::Ignore, &mut causes)
                .unwrap()
                .is_empty()
        );
        assert!(causes.is_empty(), "{causes:?}");
    }

    #[test]
    fn wrong_types_and_missing_fields_become_causes() {
        let res = catalog::of(Kind::ReplicationController);
        let mut rc = json!({"metadata": {"name": "r"}, "spec": {"replicas": "three",
            "template": {"spec": {"containers": [{"image": "x"}]}}}});
        let mut causes = Vec::new();
        admit(res, &mut rc, FieldValidation::Strict, &mut causes).unwrap();
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert!(fields.contains(&"spec.replicas"), "{causes:?}");
        assert!(
            fields.contains(&"spec.template.spec.containers[0].name"),
            "{causes:?}"
        );
    }

    #[test]
    fn nulls_read_as_absent_and_quantities_take_numbers() {
        let res = catalog::of(Kind::Pod);
        let mut pod = json!({"metadata": {"name": "p", "creationTimestamp": null},
            "spec": {"containers": [{"name": "a", "image": "x",
                "resources": {"limits": {"cpu": 1, "memory": "64Mi"}}}]}});
        let mut causes = Vec::new();
        admit(res, &mut pod, FieldValidation::Strict, &mut causes).unwrap();
        assert!(causes.is_empty(), "{causes:?}");
        assert!(pod["metadata"].get("creationTimestamp").is_none());
    }
}
