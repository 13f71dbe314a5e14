//! The pod manager: the pods this node should run (from the API and from manifest files)
//! and the mirror pods the API shows for the static ones, indexed by uid and by full name,
//! with the translation of a mirror pod's uid to its static pod's (§11).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::manifests::{full_name, hash_of, is_mirror, is_static};

#[derive(Default)]
struct Indexes {
    /// Pods to run (API pods and static pods), by uid.
    by_uid: HashMap<String, Arc<Value>>,
    /// Their uids by full name.
    by_name: HashMap<String, String>,
    mirror_by_uid: HashMap<String, Arc<Value>>,
    mirror_by_name: HashMap<String, String>,
}

/// The node's pods; cheap to share, every call takes the lock briefly.
#[derive(Default)]
pub struct Pods {
    inner: Mutex<Indexes>,
}

fn uid_of(pod: &Value) -> String {
    pod.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

impl Pods {
    fn lock(&self) -> std::sync::MutexGuard<'_, Indexes> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces a pod (a mirror pod goes to the mirror indexes).
    pub fn upsert(&self, pod: Arc<Value>) {
        let uid = uid_of(&pod);
        let name = full_name(&pod);
        let mut ix = self.lock();
        if is_mirror(&pod) {
            ix.mirror_by_name.insert(name, uid.clone());
            ix.mirror_by_uid.insert(uid, pod);
        } else {
            ix.by_name.insert(name, uid.clone());
            ix.by_uid.insert(uid, pod);
        }
    }

    /// Forgets a pod (its name too, unless another pod holds it by now).
    pub fn remove(&self, pod: &Value) {
        let uid = uid_of(pod);
        let name = full_name(pod);
        let mut ix = self.lock();
        let ix = &mut *ix;
        let (by_uid, by_name) = if is_mirror(pod) {
            (&mut ix.mirror_by_uid, &mut ix.mirror_by_name)
        } else {
            (&mut ix.by_uid, &mut ix.by_name)
        };
        by_uid.remove(&uid);
        if by_name.get(&name) == Some(&uid) {
            by_name.remove(&name);
        }
    }

    /// A pod to run, by uid.
    pub fn get(&self, uid: &str) -> Option<Arc<Value>> {
        self.lock().by_uid.get(uid).cloned()
    }

    /// A pod to run, by namespace and name.
    pub fn by_name(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let ix = self.lock();
        let uid = ix.by_name.get(&format!("{name}_{namespace}"))?;
        ix.by_uid.get(uid).cloned()
    }

    /// The mirror pod the API shows for `pod` (any, whatever its hash).
    pub fn mirror_of(&self, pod: &Value) -> Option<Arc<Value>> {
        let ix = self.lock();
        let uid = ix.mirror_by_name.get(&full_name(pod))?;
        ix.mirror_by_uid.get(uid).cloned()
    }

    /// The static pod `mirror` reflects, if it runs here.
    pub fn static_of(&self, mirror: &Value) -> Option<Arc<Value>> {
        let ix = self.lock();
        let uid = ix.by_name.get(&full_name(mirror))?;
        ix.by_uid.get(uid).filter(|p| is_static(p)).cloned()
    }

    /// The uid the agent knows a pod by: a mirror pod's uid becomes its static pod's;
    /// any other uid stays as it is.
    pub fn translate_uid(&self, uid: &str) -> String {
        if uid.is_empty() {
            return String::new();
        }
        let ix = self.lock();
        ix.mirror_by_uid
            .get(uid)
            .and_then(|m| ix.by_name.get(&full_name(m)))
            .cloned()
            .unwrap_or_else(|| uid.to_string())
    }

    /// The pods to run.
    pub fn list(&self) -> Vec<Arc<Value>> {
        let mut pods: Vec<_> = self.lock().by_uid.values().cloned().collect();
        pods.sort_by_key(|p| full_name(p));
        pods
    }

    /// The static pods.
    pub fn static_pods(&self) -> Vec<Arc<Value>> {
        let mut pods = self.list();
        pods.retain(|p| is_static(p));
        pods
    }

    /// Mirror pods whose static pod does not run here (any more).
    pub fn orphaned_mirrors(&self) -> Vec<Arc<Value>> {
        let ix = self.lock();
        ix.mirror_by_uid
            .values()
            .filter(|m| {
                ix.by_name
                    .get(&full_name(m))
                    .and_then(|uid| ix.by_uid.get(uid))
                    .is_none_or(|p| !is_static(p))
            })
            .cloned()
            .collect()
    }

    /// `pod` as the agent syncs it: a static pod carries the status of its current
    /// mirror pod (what the API shows of it).
    pub fn with_mirror_status(&self, pod: Arc<Value>) -> Arc<Value> {
        if !is_static(&pod) {
            return pod;
        }
        match self.mirror_of(&pod) {
            Some(m) if hash_of(&m) == hash_of(&pod) && m.get("status").is_some() => {
                let mut p = (*pod).clone();
                p["status"] = m["status"].clone();
                Arc::new(p)
            }
            _ => pod,
        }
    }

    /// Whether the API holds a current mirror pod for static pod `pod` (to write its
    /// status to).
    pub fn has_current_mirror(&self, pod: &Value) -> bool {
        self.mirror_of(pod).is_some_and(|m| {
            hash_of(&m) == hash_of(pod) && m.pointer("/metadata/deletionTimestamp").is_none()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::manifests::{HASH_ANNOTATION, MIRROR_ANNOTATION, SOURCE_ANNOTATION};
    use serde_json::json;

    fn static_pod(uid: &str) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"name": "web-n1", "namespace": "default", "uid": uid,
            "annotations": {HASH_ANNOTATION: uid, SOURCE_ANNOTATION: "file"}}}),
        )
    }

    fn mirror(uid: &str, hash: &str) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"name": "web-n1", "namespace": "default", "uid": uid,
            "annotations": {HASH_ANNOTATION: hash, SOURCE_ANNOTATION: "file", MIRROR_ANNOTATION: hash}},
            "status": {"phase": "Running"}}),
        )
    }

    #[test]
    fn a_mirror_uid_translates_to_its_static_pod() {
        let pods = Pods::default();
        pods.upsert(static_pod("s1"));
        assert_eq!(pods.translate_uid("m1"), "m1", "unknown uids stay");
        assert_eq!(pods.translate_uid(""), "");
        assert_eq!(pods.orphaned_mirrors().len(), 0);
        pods.upsert(mirror("m1", "s1"));
        assert_eq!(pods.translate_uid("m1"), "s1");
        assert_eq!(pods.translate_uid("s1"), "s1");
        assert_eq!(
            pods.static_of(&mirror("m1", "s1")).unwrap()["metadata"]["uid"],
            "s1"
        );
        assert_eq!(pods.list().len(), 1, "a mirror pod is not a pod to run");
        assert_eq!(
            pods.by_name("default", "web-n1").unwrap()["metadata"]["uid"],
            "s1"
        );
        assert!(pods.has_current_mirror(&static_pod("s1")));
        let synced = pods.with_mirror_status(static_pod("s1"));
        assert_eq!(synced["status"]["phase"], "Running");
    }

    #[test]
    fn a_changed_manifest_leaves_the_old_mirror_stale_then_orphaned() {
        let pods = Pods::default();
        pods.upsert(static_pod("s1"));
        pods.upsert(mirror("m1", "s1"));
        // The manifest changed: a new static pod, the old one goes.
        pods.upsert(static_pod("s2"));
        pods.remove(&static_pod("s1"));
        assert!(
            pods.by_name("default", "web-n1").is_some(),
            "the new pod keeps the name"
        );
        assert!(!pods.has_current_mirror(&static_pod("s2")));
        assert!(
            pods.with_mirror_status(static_pod("s2"))
                .get("status")
                .is_none()
        );
        assert_eq!(pods.translate_uid("m1"), "s2");
        pods.remove(&mirror("m1", "s1"));
        pods.upsert(mirror("m2", "s2"));
        assert!(pods.has_current_mirror(&static_pod("s2")));
        // The file went: the mirror is an orphan.
        pods.remove(&static_pod("s2"));
        assert_eq!(pods.orphaned_mirrors().len(), 1);
        assert_eq!(pods.translate_uid("m2"), "m2");
    }
}
