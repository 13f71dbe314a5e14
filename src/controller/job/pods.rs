//! `manageJob`: a Job's pods created from its template (with the tracking finalizer and
//! their index) or deleted when surplus; the tracking finalizer removed.

use crate::types::meta::Meta;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::backoff::{Backoff, backoff_left};
use super::failure::match_failure_policy;
use super::status::object_mut;
use super::{
    COMPLETION_INDEX, Controller, FAILURE_COUNT, FAILURE_COUNT_AT, IGNORED_FAILURE_COUNT,
    IGNORED_FAILURE_COUNT_AT, JOBS, JobView, Sync, TRACKING_FINALIZER, annotation_count,
    finished_time, has_finalizer, index_of, is_ready, is_terminating, only_replace_failed, uid,
};
use crate::client::{DeleteParams, Patch};
use crate::controller::Result;
use crate::controller::podcontrol;
use crate::controller::replication::{deletion_order, slow_start};
use crate::types::json::{array_at, str_at};

/// Pods created or deleted in one sync at most.
const BURST: usize = 500;

/// A new pod from the Job's template, with the tracking finalizer. The pod spec is copied
/// as stored (JSON): a typed round trip would rewrite what the server receives.
fn pod_template(job: &JobView) -> Value {
    let template = job.spec.template.metadata.as_ref();
    let mut meta = Map::new();
    meta.insert("generateName".into(), json!(format!("{}-", job.name())));
    meta.insert("namespace".into(), json!(job.namespace()));
    meta.insert(
        "ownerReferences".into(),
        json!([JOBS.controlled_by(job.raw)]),
    );
    if let Some(labels) = template.and_then(|m| m.labels.as_ref()) {
        meta.insert("labels".into(), json!(labels));
    }
    if let Some(annotations) = template.and_then(|m| m.annotations.as_ref()) {
        meta.insert("annotations".into(), json!(annotations));
    }
    let mut finalizers: Vec<String> = template
        .and_then(|m| m.finalizers.clone())
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.into());
    }
    meta.insert("finalizers".into(), json!(finalizers));
    let spec = job
        .raw
        .pointer("/spec/template/spec")
        .cloned()
        .unwrap_or_default();
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// An Indexed Job's pod for index `ix`: the annotation and label, hostname, the
/// `JOB_COMPLETION_INDEX` variable, its generated name and (with per-index limits) the
/// failure count it inherits from the pod it replaces.
fn with_index(pod: &mut Value, job: &JobView, ix: i64, replaced: Option<&Value>) {
    let name = job.name();
    let meta = object_mut(pod.as_object_mut().expect("an object"), "metadata");
    let annotations = object_mut(meta, "annotations");
    annotations.insert(COMPLETION_INDEX.into(), json!(ix.to_string()));
    if job.per_index_limit().is_some() {
        let (mut failures, mut ignored) = (0, 0);
        if let Some(old) = replaced {
            failures = annotation_count(old, FAILURE_COUNT_AT);
            ignored = annotation_count(old, IGNORED_FAILURE_COUNT_AT);
            if match_failure_policy(&job.spec, old).1 {
                failures += 1;
            } else {
                ignored += 1;
            }
        }
        annotations.insert(FAILURE_COUNT.into(), json!(failures.to_string()));
        if ignored > 0 {
            annotations.insert(IGNORED_FAILURE_COUNT.into(), json!(ignored.to_string()));
        }
    }
    object_mut(meta, "labels").insert(COMPLETION_INDEX.into(), json!(ix.to_string()));
    // `podGenerateNameWithIndex`: the prefix leaves room for the random suffix.
    let mut prefix = format!("{name}-{ix}-");
    if prefix.len() > 58 {
        let keep = 58 - (ix.to_string().len() + 2);
        prefix = format!("{}-{ix}-", &name[..keep.min(name.len())]);
    }
    meta.insert("generateName".into(), json!(prefix));
    // The pod spec is the template's JSON, written as before.
    pod["spec"]["hostname"] = json!(format!("{name}-{ix}"));
    let env = json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": format!("metadata.annotations['{COMPLETION_INDEX}']")
    }}});
    for list in ["initContainers", "containers"] {
        for c in pod["spec"][list].as_array_mut().into_iter().flatten() {
            if !c["env"].is_array() {
                c["env"] = json!([]);
            }
            let vars = c["env"].as_array_mut().expect("an array");
            if !vars
                .iter()
                .any(|v| str_at(v, "/name") == "JOB_COMPLETION_INDEX")
            {
                vars.push(env.clone());
            }
        }
    }
}

impl Controller {
    /// `manageJob`: deletes surplus pods or creates missing ones. Returns the active count
    /// after it and, if creations wait for a back-off, how long.
    pub(super) async fn manage(
        &self,
        key: &str,
        job: &JobView<'_>,
        s: &mut Sync,
        active: &[Arc<Value>],
        backoff: Backoff,
    ) -> Result<(i64, Option<Duration>)> {
        let mut n_active = active.len() as i64;
        if job.suspended() {
            let (ready, deleted, err) = self.delete_pods(job, active, true).await;
            s.terminating += deleted;
            s.ready -= ready;
            if let Some(e) = err {
                return Err(e.into());
            }
            return Ok((n_active - deleted, None));
        }
        let parallelism = job.spec.parallelism.map_or(1, i64::from).max(0);
        let want = match job.completions() {
            None if s.succeeded > 0 => n_active,
            None => parallelism,
            Some(c) => (c - s.succeeded).clamp(0, parallelism),
        };
        let mut victims: Vec<Arc<Value>> = Vec::new();
        let mut rest: Vec<Arc<Value>> = active.to_vec();
        if job.is_indexed() {
            // Pods without a valid index, and all but one pod of an index, go.
            let c = job.completions().unwrap_or(0);
            rest.sort_by(|a, b| deletion_order(a, b));
            let mut kept: HashMap<i64, usize> = HashMap::new();
            let mut keep = vec![true; rest.len()];
            for (i, p) in rest.iter().enumerate() {
                match index_of(p, c) {
                    None => keep[i] = false,
                    Some(ix) => {
                        if let Some(prev) = kept.insert(ix, i) {
                            keep[prev] = false;
                        }
                    }
                }
            }
            let (mut stay, mut go) = (Vec::new(), Vec::new());
            for (p, k) in rest.into_iter().zip(keep) {
                if k { stay.push(p) } else { go.push(p) }
            }
            victims = go;
            rest = stay;
        }
        let at_least = (n_active - want).max(0) as usize;
        if victims.len() < at_least {
            rest.sort_by(|a, b| deletion_order(a, b));
            victims.extend(rest.into_iter().take(at_least - victims.len()));
        }
        victims.truncate(BURST);
        if !victims.is_empty() {
            self.expectations.expect(key, 0, victims.len() as i64);
            let (ready, deleted, err) = self.delete_pods(job, &victims, true).await;
            self.expectations
                .observed(key, 0, victims.len() as i64 - deleted);
            s.terminating += deleted;
            s.ready -= ready;
            if let Some(e) = err {
                return Err(e.into());
            }
            return Ok((n_active - deleted, None));
        }
        let terminating = if only_replace_failed(&job.spec) {
            s.terminating
        } else {
            0
        };
        let mut diff = want - terminating - n_active;
        if diff <= 0 {
            return Ok((n_active, None));
        }
        let now = self.now();
        if job.per_index_limit().is_none() {
            let left = backoff_left(backoff.failures, backoff.last_failure, now);
            if !left.is_zero() {
                return Ok((n_active, Some(left)));
            }
        }
        diff = diff.min(BURST as i64);
        let mut indexes: Vec<Option<i64>> = vec![None; diff as usize];
        if job.is_indexed() {
            let c = job.completions().unwrap_or(0);
            let mut taken: BTreeSet<i64> = active.iter().filter_map(|p| index_of(p, c)).collect();
            if only_replace_failed(&job.spec) {
                taken.extend(
                    s.pods
                        .iter()
                        .filter(|p| is_terminating(p))
                        .filter_map(|p| index_of(p, c)),
                );
            }
            taken.extend(s.failed_indexes.iter().flatten().copied());
            taken.extend(s.succeeded_indexes.iter().copied());
            let mut pending: Vec<i64> = (0..c)
                .filter(|i| !taken.contains(i))
                .take(diff as usize)
                .collect();
            if job.per_index_limit().is_some() {
                let mut min_wait: Option<Duration> = None;
                pending.retain(|ix| {
                    let wait = s.delayed.get(ix).map_or(Duration::ZERO, |p| {
                        backoff_left(
                            (annotation_count(p, FAILURE_COUNT_AT) + 1) as u32,
                            finished_time(p),
                            now,
                        )
                    });
                    if wait.is_zero() {
                        true
                    } else {
                        min_wait = Some(min_wait.map_or(wait, |m| m.min(wait)));
                        false
                    }
                });
                if pending.is_empty() {
                    return Ok((n_active, min_wait));
                }
            }
            indexes = pending.into_iter().map(Some).collect();
            diff = indexes.len() as i64;
        }
        let template = pod_template(job);
        self.expectations.expect(key, diff, 0);
        let ns = job.namespace().to_string();
        let (created, err) = slow_start(diff as usize, |i| {
            let mut pod = template.clone();
            let ns = ns.clone();
            let index = indexes.get(i).copied().flatten();
            if let Some(ix) = index {
                with_index(&mut pod, job, ix, s.delayed.get(&ix).map(|p| &**p));
            }
            async move {
                let pods = self.pods.resource();
                podcontrol::create(&self.client, &self.recorder, pods, job.raw, &ns, &pod).await?;
                Ok(())
            }
        })
        .await;
        self.expectations.observed(key, diff - created as i64, 0);
        n_active += created as i64;
        if let Some(e) = err {
            self.recorder
                .warning(job.raw, "FailedCreate", &format!("Error creating: {e}"))
                .await;
            return Err(e.into());
        }
        Ok((n_active, None))
    }

    /// Deletes pods (keeping or dropping their finalizer). Returns how many of them were
    /// ready, how many went, and the first error.
    pub(super) async fn delete_pods(
        &self,
        job: &JobView<'_>,
        pods: &[Arc<Value>],
        drop_finalizer: bool,
    ) -> (i64, i64, Option<crate::client::Error>) {
        let results = futures_util::future::join_all(pods.iter().map(|p| async move {
            if drop_finalizer && has_finalizer(p) {
                self.remove_finalizer(p).await?;
            }
            let params = DeleteParams {
                uid: Some(uid(p).to_string()),
                ..DeleteParams::default()
            };
            let at = (
                str_at(p, "/metadata/namespace"),
                str_at(p, "/metadata/name"),
            );
            let pods = self.pods.resource();
            match podcontrol::delete(&self.client, &self.recorder, pods, job.raw, at, &params).await
            {
                Err(e) if e.is_not_found() => Ok(()),
                done => done,
            }
        }))
        .await;
        let mut ready = 0;
        let mut deleted = 0;
        let mut first = None;
        for (p, r) in pods.iter().zip(results) {
            match r {
                Ok(()) => {
                    deleted += 1;
                    ready += i64::from(is_ready(p));
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        (ready, deleted, first)
    }

    /// Removes the tracking finalizer from a pod if it still has it.
    pub(super) async fn remove_finalizer(&self, pod: &Value) -> crate::client::Result<()> {
        let Some(i) = array_at(pod, "/metadata/finalizers")
            .iter()
            .position(|f| f == TRACKING_FINALIZER)
        else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{i}");
        let patch = json!([
            {"op": "test", "path": "/metadata/uid", "value": uid(pod)},
            {"op": "test", "path": path, "value": TRACKING_FINALIZER},
            {"op": "remove", "path": path},
        ]);
        match self
            .client
            .patch(
                self.pods.resource(),
                Some(str_at(pod, "/metadata/namespace")),
                str_at(pod, "/metadata/name"),
                &Patch::Json(patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            // The list moved under us: read the pod again and retry once.
            Err(crate::client::Error::Invalid(_) | crate::client::Error::BadRequest(_)) => {
                let fresh = match self
                    .client
                    .get(
                        self.pods.resource(),
                        Some(str_at(pod, "/metadata/namespace")),
                        str_at(pod, "/metadata/name"),
                    )
                    .await
                {
                    Ok(p) => p,
                    Err(e) if e.is_not_found() => return Ok(()),
                    Err(e) => return Err(e),
                };
                if uid(&fresh) != uid(pod) || !has_finalizer(&fresh) {
                    return Ok(());
                }
                Box::pin(self.remove_finalizer(&fresh)).await
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_indexed_pod_knows_its_index() {
        let job = json!({"metadata": {"name": "work", "namespace": "ns", "uid": "u"},
            "spec": {"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1,
                "template": {"metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let job = JobView::decode(&job).unwrap();
        let mut pod = pod_template(&job);
        let old = json!({"metadata": {"annotations": {FAILURE_COUNT: "0"}}, "status": {"phase": "Failed"}});
        with_index(&mut pod, &job, 2, Some(&old));
        assert_eq!(pod["metadata"]["generateName"], "work-2-");
        assert_eq!(pod["metadata"]["annotations"][COMPLETION_INDEX], "2");
        assert_eq!(pod["metadata"]["annotations"][FAILURE_COUNT], "1");
        assert_eq!(pod["metadata"]["labels"][COMPLETION_INDEX], "2");
        assert_eq!(pod["metadata"]["finalizers"], json!([TRACKING_FINALIZER]));
        assert_eq!(pod["spec"]["hostname"], "work-2");
        assert_eq!(
            pod["spec"]["containers"][0]["env"][0]["name"],
            "JOB_COMPLETION_INDEX"
        );
        assert_eq!(index_of(&pod, 3), Some(2));
        assert_eq!(index_of(&pod, 2), None);
    }
}
