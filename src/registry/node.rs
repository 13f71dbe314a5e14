//! node.k8s.io/v1 RuntimeClass: which container runtime a pod's containers run in. The
//! kind's rules (`ValidateRuntimeClass`: a handler that is a DNS label and never changes,
//! overhead quantities, scheduling labels) and the RuntimeClass admission plugin's part of
//! a pod's creation: the class a pod names must exist, its overhead becomes the pod's, its
//! node selector and tolerations are merged into the pod's.

use serde_json::{Map, Value, json};

use super::strategy::{Strategy, immutable};
use super::{Cause, Error, Part, Registry, catalog};
use crate::types::names;

pub struct RuntimeClass;

impl Strategy for RuntimeClass {
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        match obj.get("handler").and_then(Value::as_str) {
            None | Some("") => causes.push(Cause::required("handler")),
            Some(h) => {
                for e in names::dns1123_label(h) {
                    causes.push(Cause::invalid("handler", &json!(h), &e));
                }
            }
        }
        if let Some(fixed) = obj.pointer("/overhead/podFixed").and_then(Value::as_object) {
            for (resource, q) in fixed {
                let field = format!("overhead.podFixed[{resource}]");
                match super::autoscaling::quantity(q) {
                    None => causes.push(Cause::invalid(&field, q, "must be a quantity")),
                    Some(_) if q.as_str().is_some_and(|s| s.starts_with('-')) => causes.push(
                        Cause::invalid(&field, q, "must be greater than or equal to 0"),
                    ),
                    Some(_) => {}
                }
            }
        }
        if let Some(selector) = obj
            .pointer("/scheduling/nodeSelector")
            .and_then(Value::as_object)
        {
            for (k, v) in selector {
                let field = format!("scheduling.nodeSelector[{k}]");
                for e in names::qualified_name(k) {
                    causes.push(Cause::invalid("scheduling.nodeSelector", &json!(k), &e));
                }
                for e in names::label_value(v.as_str().unwrap_or("")) {
                    causes.push(Cause::invalid(&field, v, &e));
                }
            }
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        immutable(old, new, "/handler", "handler", causes);
    }
}

/// The RuntimeClass admission of a new pod: refuses a pod that names a class that does
/// not exist (or whose overhead contradicts the class's), and gives it the class's
/// overhead and scheduling, as kube-apiserver's plugin does.
pub(super) fn admit_pod(reg: &Registry, pod: &mut Value) -> Result<(), Error> {
    let Some(class) = pod
        .pointer("/spec/runtimeClassName")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
    else {
        // An overhead is a RuntimeClass's to give.
        if pod.pointer("/spec/overhead").is_some_and(|o| !o.is_null()) {
            return Err(no_class_overhead());
        }
        return Ok(());
    };
    let classes = catalog::of(catalog::Kind::RuntimeClass);
    let Some(stored) = reg.store.get(&classes.key(None, &class)) else {
        return Err(Error::Forbidden(format!(
            "pod rejected: RuntimeClass {class:?} not found"
        )));
    };
    let rc: Value = serde_json::from_slice(&stored.value)
        .map_err(|e| Error::Internal(format!("a stored RuntimeClass does not parse: {e}")))?;
    let spec = pod
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Error::BadRequest("a pod needs a spec".into()))?;
    if let Some(overhead) = rc.pointer("/overhead/podFixed").filter(|o| !o.is_null()) {
        match spec.get("overhead") {
            Some(given) if !given.is_null() && given != overhead => {
                return Err(Error::Forbidden(
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                ));
            }
            _ => {
                spec.insert("overhead".into(), overhead.clone());
            }
        }
    } else if spec.get("overhead").is_some_and(|o| !o.is_null()) {
        return Err(no_class_overhead());
    }
    if let Some(selector) = rc
        .pointer("/scheduling/nodeSelector")
        .and_then(Value::as_object)
    {
        let pod_selector = spec
            .entry("nodeSelector")
            .or_insert_with(|| Value::Object(Map::new()));
        if pod_selector.is_null() {
            *pod_selector = Value::Object(Map::new());
        }
        let pod_selector = pod_selector.as_object_mut().ok_or_else(|| {
            Error::BadRequest("spec.nodeSelector must be an object of strings".into())
        })?;
        for (k, v) in selector {
            match pod_selector.get(k) {
                Some(have) if have != v => {
                    return Err(Error::Forbidden(format!(
                        "pod rejected: conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; pod.spec.nodeSelector[{k}] = {}",
                        v.as_str().unwrap_or(""),
                        have.as_str().unwrap_or("")
                    )));
                }
                _ => {
                    pod_selector.insert(k.clone(), v.clone());
                }
            }
        }
    }
    if let Some(tolerations) = rc
        .pointer("/scheduling/tolerations")
        .and_then(Value::as_array)
    {
        let list = spec
            .entry("tolerations")
            .or_insert_with(|| Value::Array(Vec::new()));
        if list.is_null() {
            *list = Value::Array(Vec::new());
        }
        if let Some(list) = list.as_array_mut() {
            for t in tolerations {
                if !list.contains(t) {
                    list.push(t.clone());
                }
            }
        }
    }
    Ok(())
}

fn no_class_overhead() -> Error {
    Error::Forbidden(
        "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead".into(),
    )
}
