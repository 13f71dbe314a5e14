//! The strategy of core/v1 Namespaces: the name label, the `kubernetes` finalizer that
//! only `finalize` changes, the namespaces that are never deleted, and the Pod Security
//! labels (their values checked; a new `enforce` level warns of the pods it would refuse).

use serde_json::{Value, json};

use super::catalog::{self, Kind};
use super::strategy::{Acted, BoxFuture, Strategy, object_entry};
use super::{Cause, Error, Registry};
use crate::types::names;

/// The namespaces that are never deleted, as Kubernetes keeps them.
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

fn has_namespace_finalizers(ns: &Value) -> bool {
    ns.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

pub struct Namespace;
impl Strategy for Namespace {
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
            for (label, value, detail) in super::podsecurity::label_errors(labels) {
                causes.push(Cause::invalid(
                    &format!("metadata.labels[{label}]"),
                    &json!(value),
                    &detail,
                ));
            }
        }
    }
    // Pod Security: a new `enforce` level says which running pods it would refuse.
    fn police(
        &self,
        reg: &Registry,
        _ns: Option<&str>,
        _name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, Error> {
        Ok(super::podsecurity::namespace_warnings(reg, old, obj))
    }
    fn default(&self, obj: &mut Value) {
        let name = obj["metadata"]["name"].clone();
        let labels = obj["metadata"]
            .as_object_mut()
            .map(|m| m.entry("labels").or_insert_with(|| json!({})));
        if let Some(Value::Object(labels)) = labels {
            labels.insert("kubernetes.io/metadata.name".into(), name);
        }
        let spec = object_entry(obj, "spec");
        spec.entry("finalizers")
            .or_insert_with(|| json!(["kubernetes"]));
    }
    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"phase": "Active"}));
        }
    }
    fn name_errors(&self, name: &str) -> Vec<String> {
        names::dns1123_label(name)
    }
    // A namespace's finalizers change only through `finalize`.
    fn prepare_update(&self, old: &Value, _incoming: Option<&Value>, merged: &mut Value) {
        match (merged.as_object_mut(), old.pointer("/spec/finalizers")) {
            (Some(dst), Some(f)) => {
                let spec = dst.entry("spec").or_insert_with(|| json!({}));
                if let Some(spec) = spec.as_object_mut() {
                    spec.insert("finalizers".into(), f.clone());
                }
            }
            (Some(dst), None) => {
                if let Some(spec) = dst.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.remove("finalizers");
                }
            }
            _ => {}
        }
    }
    fn holds_deletion(&self, obj: &Value) -> bool {
        has_namespace_finalizers(obj)
    }
    fn mark_deleting(&self, obj: &mut Value) {
        if let Some(o) = obj.as_object_mut() {
            o.insert("status".into(), json!({"phase": "Terminating"}));
        }
    }
    fn act<'a>(
        &'a self,
        reg: &'a Registry,
        sub: &'a str,
        _ns: Option<&'a str>,
        name: &'a str,
        body: &'a Value,
        _opts: &'a super::WriteOptions,
    ) -> BoxFuture<'a, Result<Acted, Error>> {
        Box::pin(async move {
            match sub {
                "finalize" => {
                    super::actions::finalize(reg, catalog::of(Kind::Namespace), name, body).await
                }
                _ => Err(Error::MethodNotAllowed(format!(
                    "namespaces do not serve the subresource {sub:?}"
                ))),
            }
        })
    }
    fn check_delete(&self, name: &str) -> Result<(), Error> {
        if IMMORTAL_NAMESPACES.contains(&name) {
            return Err(Error::Forbidden(format!(
                "namespaces {name:?} is forbidden: this namespace may not be deleted"
            )));
        }
        Ok(())
    }
}
