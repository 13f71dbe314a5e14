//! `manageJob`: a Job's pods created from its template (with the tracking finalizer and
//! their index) or deleted when surplus; the tracking finalizer removed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::backoff::{Backoff, backoff_left};
use super::failure::match_failure_policy;
use super::{
    COMPLETION_INDEX, Controller, FAILURE_COUNT, IGNORED_FAILURE_COUNT, JOBS, Sync,
    TRACKING_FINALIZER, annotation_count, completions, finished_time, has_finalizer, index_of, int,
    is_indexed, is_ready, is_terminating, only_replace_failed, per_index_limit, suspended, uid,
};
use crate::client::recorder::EventType;
use crate::client::{DeleteParams, Patch};
use crate::controller::Result;
use crate::controller::claim::str_at;
use crate::controller::replication::{deletion_order, slow_start};

/// Pods created or deleted in one sync at most.
const BURST: usize = 500;

/// A new pod from the Job's template, with the tracking finalizer.
fn pod_template(job: &Value) -> Value {
    let template = &job["spec"]["template"];
    let mut meta = json!({
        "generateName": format!("{}-", str_at(job, "/metadata/name")),
        "namespace": str_at(job, "/metadata/namespace"),
        "ownerReferences": [JOBS.controlled_by(job)],
    });
    for field in ["labels", "annotations"] {
        if let Some(v) = template.pointer(&format!("/metadata/{field}")) {
            meta[field] = v.clone();
        }
    }
    let mut finalizers: Vec<Value> = template
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(json!(TRACKING_FINALIZER));
    }
    meta["finalizers"] = json!(finalizers);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]})
}

/// An Indexed Job's pod for index `ix`: the annotation and label, hostname, the
/// `JOB_COMPLETION_INDEX` variable, its generated name and (with per-index limits) the
/// failure count it inherits from the pod it replaces.
fn with_index(pod: &mut Value, job: &Value, ix: i64, replaced: Option<&Value>) {
    let name = str_at(job, "/metadata/name");
    let meta = &mut pod["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["annotations"][COMPLETION_INDEX] = json!(ix.to_string());
    meta["labels"][COMPLETION_INDEX] = json!(ix.to_string());
    // `podGenerateNameWithIndex`: the prefix leaves room for the random suffix.
    let mut prefix = format!("{name}-{ix}-");
    if prefix.len() > 58 {
        let keep = 58 - (ix.to_string().len() + 2);
        prefix = format!("{}-{ix}-", &name[..keep.min(name.len())]);
    }
    meta["generateName"] = json!(prefix);
    if per_index_limit(job).is_some() {
        let (mut failures, mut ignored) = (0, 0);
        if let Some(old) = replaced {
            failures = annotation_count(old, FAILURE_COUNT);
            ignored = annotation_count(old, IGNORED_FAILURE_COUNT);
            if match_failure_policy(job, old).1 {
                failures += 1;
            } else {
                ignored += 1;
            }
        }
        meta["annotations"][FAILURE_COUNT] = json!(failures.to_string());
        if ignored > 0 {
            meta["annotations"][IGNORED_FAILURE_COUNT] = json!(ignored.to_string());
        }
    }
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
            if !vars.iter().any(|v| v["name"] == "JOB_COMPLETION_INDEX") {
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
        job: &Value,
        s: &mut Sync,
        active: &[Arc<Value>],
        backoff: Backoff,
    ) -> Result<(i64, Option<Duration>)> {
        let mut n_active = active.len() as i64;
        if suspended(job) {
            let (ready, deleted, err) = self.delete_pods(job, active, true).await;
            s.terminating += deleted;
            s.ready -= ready;
            if let Some(e) = err {
                return Err(e.into());
            }
            return Ok((n_active - deleted, None));
        }
        let parallelism = int(job, "/spec/parallelism").unwrap_or(1).max(0);
        let want = match completions(job) {
            None if s.succeeded > 0 => n_active,
            None => parallelism,
            Some(c) => (c - s.succeeded).clamp(0, parallelism),
        };
        let mut victims: Vec<Arc<Value>> = Vec::new();
        let mut rest: Vec<Arc<Value>> = active.to_vec();
        if is_indexed(job) {
            // Pods without a valid index, and all but one pod of an index, go.
            let c = completions(job).unwrap_or(0);
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
        let terminating = if only_replace_failed(job) {
            s.terminating
        } else {
            0
        };
        let mut diff = want - terminating - n_active;
        if diff <= 0 {
            return Ok((n_active, None));
        }
        let now = self.now();
        if per_index_limit(job).is_none() {
            let left = backoff_left(backoff.failures, backoff.last_failure, now);
            if !left.is_zero() {
                return Ok((n_active, Some(left)));
            }
        }
        diff = diff.min(BURST as i64);
        let mut indexes: Vec<Option<i64>> = vec![None; diff as usize];
        if is_indexed(job) {
            let c = completions(job).unwrap_or(0);
            let mut taken: BTreeSet<i64> = active.iter().filter_map(|p| index_of(p, c)).collect();
            if only_replace_failed(job) {
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
            if per_index_limit(job).is_some() {
                let mut min_wait: Option<Duration> = None;
                pending.retain(|ix| {
                    let wait = s.delayed.get(ix).map_or(Duration::ZERO, |p| {
                        backoff_left(
                            (annotation_count(p, FAILURE_COUNT) + 1) as u32,
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
        let ns = str_at(job, "/metadata/namespace").to_string();
        let (created, err) = slow_start(diff as usize, |i| {
            let mut pod = template.clone();
            let ns = ns.clone();
            let index = indexes.get(i).copied().flatten();
            if let Some(ix) = index {
                with_index(&mut pod, job, ix, s.delayed.get(&ix).map(|p| &**p));
            }
            async move {
                let made = self
                    .client
                    .create(self.pods.resource(), Some(&ns), &pod)
                    .await?;
                self.recorder
                    .event(
                        job,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {}", str_at(&made, "/metadata/name")),
                    )
                    .await;
                Ok(())
            }
        })
        .await;
        self.expectations.observed(key, diff - created as i64, 0);
        n_active += created as i64;
        if let Some(e) = err {
            self.recorder
                .event(
                    job,
                    EventType::Warning,
                    "FailedCreate",
                    &format!("Error creating: {e}"),
                )
                .await;
            return Err(e.into());
        }
        Ok((n_active, None))
    }

    /// Deletes pods (keeping or dropping their finalizer). Returns how many of them were
    /// ready, how many went, and the first error.
    pub(super) async fn delete_pods(
        &self,
        job: &Value,
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
            match self
                .client
                .delete(
                    self.pods.resource(),
                    Some(str_at(p, "/metadata/namespace")),
                    str_at(p, "/metadata/name"),
                    &params,
                )
                .await
            {
                Ok(_) => {
                    self.recorder
                        .event(
                            job,
                            EventType::Normal,
                            "SuccessfulDelete",
                            &format!("Deleted pod: {}", str_at(p, "/metadata/name")),
                        )
                        .await;
                    Ok(())
                }
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e),
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
        let Some(i) = pod
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .and_then(|f| f.iter().position(|f| f == TRACKING_FINALIZER))
        else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{i}");
        let patch = json!([
            {"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]},
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
