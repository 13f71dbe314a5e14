//! Kinds served in one version and stored in another: events.k8s.io/v1 Events are the
//! core v1 Events, converted on the way in and out, so both APIs see the same objects.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::catalog::Kind;
use super::catalog::{self, Resource};
use super::{
    ApplyOptions, Cause, DeleteOptions, List, ListOptions, Part, Patch, Registry, Result,
    WriteOptions, Written, schema,
};
use crate::types::fields;

/// A mapping of one object form to another.
pub type Map1 = Box<dyn Fn(&Value) -> Value + Send + Sync>;

/// How a resource served in one form is stored in another resource's form and keys.
pub struct Conversion {
    /// The resource whose keys and stored form it shares.
    pub stored: Stored,
    /// A served object as it is stored.
    pub to_stored: Map1,
    /// A stored object as it is served.
    pub from_stored: Map1,
    /// A field selector's field as the stored resource names it.
    pub stored_field: fn(&str) -> String,
}

/// The resource a converted one is stored as.
pub enum Stored {
    Builtin(Kind),
    /// Another version of a custom kind (its storage version).
    Custom(Arc<Resource>),
}

/// events.k8s.io/v1 Events, stored as core v1 Events.
pub fn events_v1() -> Conversion {
    Conversion {
        stored: Stored::Builtin(Kind::Event),
        to_stored: Box::new(event_to_stored),
        from_stored: Box::new(event_from_stored),
        stored_field: stored_event_field,
    }
}

/// A version of a custom kind stored as its storage version, with the conversion
/// strategy `None`: the objects are the same but for their `apiVersion`.
pub fn api_version_only(stored: Arc<Resource>, served_api_version: String) -> Conversion {
    let stored_api_version = stored.api_version();
    let set = |api_version: String| {
        move |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.insert("apiVersion".into(), json!(api_version));
            }
            v
        }
    };
    Conversion {
        stored: Stored::Custom(stored),
        to_stored: Box::new(set(stored_api_version)),
        from_stored: Box::new(set(served_api_version)),
        stored_field: str::to_string,
    }
}

/// Pairs of (served field, stored field) for Events.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

/// Fields both versions name alike.
const EVENT_SHARED: &[&str] = &[
    "metadata",
    "reason",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingInstance",
];

fn rename(
    v: &Value,
    pairs: impl Iterator<Item = (&'static str, &'static str)>,
    api_version: &str,
) -> Value {
    let Some(m) = v.as_object() else {
        return v.clone();
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    for f in EVENT_SHARED {
        if let Some(x) = m.get(*f) {
            out.insert((*f).into(), x.clone());
        }
    }
    for (from, to) in pairs {
        if let Some(x) = m.get(from) {
            out.insert(to.into(), x.clone());
        }
    }
    Value::Object(out)
}

/// An events.k8s.io/v1 Event as a core v1 Event.
pub fn event_to_stored(v: &Value) -> Value {
    rename(v, EVENT_FIELDS.iter().copied(), "v1")
}

/// A core v1 Event as an events.k8s.io/v1 Event.
fn event_from_stored(v: &Value) -> Value {
    rename(
        v,
        EVENT_FIELDS
            .iter()
            .map(|(served, stored)| (*stored, *served)),
        "events.k8s.io/v1",
    )
}

/// An events.k8s.io/v1 field as core v1 Events name it.
pub fn stored_event_field(field: &str) -> String {
    for (served, stored) in EVENT_FIELDS {
        if field == *served {
            return (*stored).to_string();
        }
        if let Some(rest) = field.strip_prefix(&format!("{served}.")) {
            return format!("{stored}.{rest}");
        }
    }
    field.to_string()
}

/// A served object of `res` as it is stored.
pub fn to_stored(res: &Resource, v: &Value) -> Value {
    match &res.conversion {
        Some(c) => (c.to_stored)(v),
        None => v.clone(),
    }
}

/// A stored object as `res` serves it.
pub fn from_stored_value(res: &Resource, v: &Value) -> Value {
    match &res.conversion {
        Some(c) => (c.from_stored)(v),
        None => v.clone(),
    }
}

/// Stored bytes as `res` serves them to a reader: converted, then as its strategy reads
/// them (the same bytes when neither changes them).
pub fn served(res: &Resource, b: &Bytes) -> Bytes {
    let b = from_stored(res, b);
    res.strategy.read(&b).unwrap_or(b)
}

/// Stored bytes as `res` serves them (the same bytes when no conversion applies).
pub fn from_stored(res: &Resource, b: &Bytes) -> Bytes {
    let Some(c) = &res.conversion else {
        return b.clone();
    };
    match serde_json::from_slice::<Value>(b) {
        Ok(v) => Bytes::from(serde_json::to_vec(&(c.from_stored)(&v)).expect("JSON serializes")),
        Err(_) => b.clone(),
    }
}

// ---------------------------------------------------------------------------------------
// The registry's verbs for converted kinds: check the served form against its own schema,
// store the stored form, answer in the served form.

/// The stored resource of a converted one.
pub(super) fn stored_resource(res: &Resource) -> Option<Arc<Resource>> {
    res.conversion.as_ref().map(|c| match &c.stored {
        Stored::Builtin(kind) => catalog::of(*kind).clone(),
        Stored::Custom(res) => res.clone(),
    })
}

fn convert_written(res: &Resource, mut w: Written) -> Written {
    w.object = from_stored(res, &w.object);
    w
}

fn convert_list(res: &Resource, mut l: List) -> List {
    l.items = l.items.iter().map(|i| served(res, i)).collect();
    l
}

/// A field selector in the stored kind's names.
pub(super) fn stored_selector(res: &Resource, sel: &fields::Selector) -> fields::Selector {
    let Some(c) = &res.conversion else {
        return sel.clone();
    };
    fields::Selector {
        terms: sel
            .terms
            .iter()
            .map(|t| fields::Term {
                field: (c.stored_field)(&t.field),
                ..t.clone()
            })
            .collect(),
    }
}

impl Registry {
    /// The stored form of a served object, checked against the served schema.
    fn served_to_stored(
        res: &Resource,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<(Value, Vec<String>)> {
        Self::check_type(res, &mut obj)?;
        super::meta_mut(&mut obj)?;
        let mut causes: Vec<Cause> = Vec::new();
        let warnings = schema::admit_with(
            res,
            &mut obj,
            opts.field_validation,
            &opts.body,
            &mut causes,
        )?;
        if !causes.is_empty() {
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            return Err(Self::invalid(res, &name, causes));
        }
        Ok((to_stored(res, &obj), warnings))
    }

    pub(super) async fn converted_create(
        &self,
        res: &Resource,
        stored: &Resource,
        namespace: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let (obj, warnings) = Self::served_to_stored(res, obj, opts)?;
        let mut w = convert_written(res, self.create(stored, namespace, obj, opts).await?);
        w.warnings.extend(warnings);
        Ok(w)
    }

    pub(super) fn converted_get(
        &self,
        res: &Resource,
        stored: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<bytes::Bytes> {
        Ok(served(res, &self.get(stored, namespace, name)?))
    }

    pub(super) async fn converted_list(
        &self,
        res: &Resource,
        stored: &Resource,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<List> {
        Self::check_field_selector(res, &opts.field)?;
        let opts = ListOptions {
            field: stored_selector(res, &opts.field),
            ..opts.clone()
        };
        Ok(convert_list(
            res,
            self.list(stored, namespace, &opts).await?,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn converted_update(
        &self,
        res: &Resource,
        stored: &Resource,
        namespace: Option<&str>,
        name: &str,
        obj: Value,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let (obj, warnings) = Self::served_to_stored(res, obj, opts)?;
        let mut w = convert_written(
            res,
            self.update(stored, namespace, name, obj, part, opts)
                .await?,
        );
        w.warnings.extend(warnings);
        Ok(w)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn converted_patch(
        &self,
        res: &Resource,
        stored: &Resource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let ns = Self::scope(res, namespace)?;
        let key = stored.key(ns, name);
        let w = self
            .update_with(
                stored,
                &key,
                name,
                None,
                opts,
                |old| {
                    let served = from_stored_value(res, old);
                    let patched = patch.apply(res, &served)?;
                    Self::served_to_stored(res, patched, opts).map(|(v, _)| v)
                },
                part,
            )
            .await?;
        Ok(convert_written(res, w))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn converted_apply(
        &self,
        res: &Resource,
        stored: &Resource,
        namespace: Option<&str>,
        name: &str,
        mut config: Value,
        opts: &WriteOptions,
        apply: &ApplyOptions,
    ) -> Result<(Written, bool)> {
        // An applied configuration is partial: it is checked against the version it is
        // written in, and admitted only once merged, in the stored version.
        Self::check_type(res, &mut config)?;
        Self::check_declared(res, &config)?;
        let config = to_stored(res, &config);
        let (w, created) = self
            .apply(stored, namespace, name, config, opts, apply)
            .await?;
        Ok((convert_written(res, w), created))
    }

    pub(super) async fn converted_delete(
        &self,
        res: &Resource,
        stored: &Resource,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<bytes::Bytes> {
        Ok(from_stored(
            res,
            &self.delete(stored, namespace, name, opts).await?,
        ))
    }

    pub(super) async fn converted_delete_collection(
        &self,
        res: &Resource,
        stored: &Resource,
        namespace: Option<&str>,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<List> {
        Self::check_field_selector(res, &list.field)?;
        let list = ListOptions {
            field: stored_selector(res, &list.field),
            ..list.clone()
        };
        Ok(convert_list(
            res,
            self.delete_collection(stored, namespace, &list, opts)
                .await?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_convert_both_ways_without_loss() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "Pod", "name": "web"}, "note": "pulled", "reason": "Pulled",
            "type": "Normal", "reportingController": "berth/node", "reportingInstance": "n1",
            "eventTime": "2026-01-01T00:00:00.000000Z", "deprecatedCount": 3});
        let core = to_stored(catalog::of(Kind::EventsV1Event), &v1);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!(core["message"], "pulled");
        assert_eq!(core["count"], 3);
        assert_eq!(core["reportingComponent"], "berth/node");
        assert_eq!(
            from_stored_value(catalog::of(Kind::EventsV1Event), &core),
            v1
        );
        assert_eq!(stored_event_field("regarding.name"), "involvedObject.name");
        assert_eq!(stored_event_field("reason"), "reason");
    }
}
