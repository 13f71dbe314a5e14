//! scheduling.k8s.io/v1 PriorityClass: how important a pod is. The kind's rules
//! (`ValidatePriorityClass`: names with `system-` are the built-in classes', a user's value
//! is at most one billion, value and preemption policy never change) and the Priority
//! admission plugin's part: at most one class is the global default, the built-in classes
//! (made at every start when missing, as kube-apiserver's bootstrap hook makes them) are
//! never deleted, and a new pod's `priorityClassName` (or the
//! global default) is resolved into its `priority` and `preemptionPolicy`.

use serde_json::{Value, json};

use super::strategy::{Strategy, immutable};
use super::{Cause, Error, Part, Registry, catalog};

/// The built-in classes: name, value and description.
pub const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// The built-in classes as objects, for the start of a cluster to make when missing.
pub fn system_classes() -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            json!({
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": description,
            })
        })
        .collect()
}
const SYSTEM_PREFIX: &str = "system-";
/// The highest value a class that is not built in may have.
const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;
const POLICIES: [&str; 2] = ["PreemptLowerPriority", "Never"];
const DEFAULT_POLICY: &str = "PreemptLowerPriority";

pub struct PriorityClass;

impl Strategy for PriorityClass {
    fn default(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut()
            && m.get("preemptionPolicy").is_none_or(Value::is_null)
        {
            m.insert("preemptionPolicy".into(), json!(DEFAULT_POLICY));
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        let value = obj["value"].as_i64();
        if value.is_none() {
            causes.push(Cause::required("value"));
        }
        if name.starts_with(SYSTEM_PREFIX) {
            if let Err(why) = known_system_class(name, value.unwrap_or(0), obj) {
                causes.push(Cause::forbidden(
                    "metadata.name",
                    &format!(
                        "priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {why}"
                    ),
                ));
            }
        } else if value.is_some_and(|v| v > HIGHEST_USER_PRIORITY) {
            causes.push(Cause::forbidden(
                "value",
                &format!(
                    "maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"
                ),
            ));
        }
        if let Some(p) = obj["preemptionPolicy"].as_str()
            && !POLICIES.contains(&p)
        {
            causes.push(Cause::not_supported("preemptionPolicy", p, &POLICIES));
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        if old.get("value") != new.get("value") {
            causes.push(Cause::forbidden(
                "value",
                "may not be changed in an update.",
            ));
        }
        immutable(old, new, "/preemptionPolicy", "preemptionPolicy", causes);
    }

    fn check_delete(&self, name: &str) -> Result<(), Error> {
        if SYSTEM_CLASSES.iter().any(|(n, _, _)| *n == name) {
            return Err(Error::Forbidden(format!(
                "priorityclasses.scheduling.k8s.io {name:?} is forbidden: cannot delete a built-in priority class"
            )));
        }
        Ok(())
    }

    fn admit(
        &self,
        reg: &Registry,
        _ns: Option<&str>,
        name: &str,
        obj: &Value,
    ) -> Result<(), Error> {
        if obj["globalDefault"] != true {
            return Ok(());
        }
        match global_default(reg)? {
            Some(other) if other["metadata"]["name"] != name => Err(Error::Forbidden(format!(
                "priorityclasses.scheduling.k8s.io {name:?} is forbidden: PriorityClass {} is already marked as default. Only one default can exist",
                other["metadata"]["name"].as_str().unwrap_or("")
            ))),
            _ => Ok(()),
        }
    }
}

/// Whether `name` is a built-in class with its value and without `globalDefault`.
fn known_system_class(name: &str, value: i64, obj: &Value) -> Result<(), String> {
    match SYSTEM_CLASSES.iter().find(|(n, _, _)| *n == name) {
        None => Err(format!("{name:?} is not a known system priority class")),
        Some((_, v, _)) if *v != value => Err(format!("value of {name} PriorityClass must be {v}")),
        Some(_) if obj["globalDefault"] == true => Err(format!(
            "globalDefault of {name} PriorityClass must be false"
        )),
        Some(_) => Ok(()),
    }
}

fn classes(reg: &Registry) -> Result<Vec<Value>, Error> {
    let res = catalog::of(catalog::Kind::PriorityClass);
    let (records, _) = reg.store.list(&res.key_prefix());
    records
        .iter()
        .map(|(_, r)| {
            serde_json::from_slice(&r.value)
                .map_err(|e| Error::Internal(format!("a stored PriorityClass does not parse: {e}")))
        })
        .collect()
}

/// The class marked `globalDefault` (the one of lowest value, should there be several).
fn global_default(reg: &Registry) -> Result<Option<Value>, Error> {
    Ok(classes(reg)?
        .into_iter()
        .filter(|c| c["globalDefault"] == true)
        .min_by_key(|c| c["value"].as_i64().unwrap_or(0)))
}

/// The Priority admission of a new pod: its class (named, else the global default) gives
/// its `priority` and `preemptionPolicy`; a class that does not exist, or a priority or
/// policy the pod sets otherwise, is refused, as kube-apiserver's plugin does.
pub(super) fn admit_pod(reg: &Registry, pod: &mut Value) -> Result<(), Error> {
    let named = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    let class = match &named {
        Some(name) => {
            let res = catalog::of(catalog::Kind::PriorityClass);
            let stored = reg.store.get(&res.key(None, name)).ok_or_else(|| {
                Error::Forbidden(format!(
                    "pods {:?} is forbidden: no PriorityClass with name {name} was found",
                    pod["metadata"]["name"].as_str().unwrap_or("")
                ))
            })?;
            Some(serde_json::from_slice::<Value>(&stored.value).map_err(|e| {
                Error::Internal(format!("a stored PriorityClass does not parse: {e}"))
            })?)
        }
        None => global_default(reg)?,
    };
    let priority = class
        .as_ref()
        .and_then(|c| c["value"].as_i64())
        .unwrap_or(0);
    let policy = class
        .as_ref()
        .and_then(|c| c["preemptionPolicy"].as_str())
        .unwrap_or(DEFAULT_POLICY)
        .to_string();
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let spec = pod
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Error::BadRequest("a pod needs a spec".into()))?;
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != priority
    {
        return Err(Error::Forbidden(format!(
            "pods {name:?} is forbidden: the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
        )));
    }
    if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
        && given != policy
    {
        return Err(Error::Forbidden(format!(
            "pods {name:?} is forbidden: the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
        )));
    }
    if let (None, Some(c)) = (&named, &class) {
        spec.insert("priorityClassName".into(), c["metadata"]["name"].clone());
    }
    spec.insert("priority".into(), json!(priority));
    spec.insert("preemptionPolicy".into(), json!(policy));
    Ok(())
}
