//! The `instantiate` (DeploymentRequest, spec §6.1) and `rollback`
//! (DeploymentConfigRollback, §6.2) subresources of DeploymentConfigs.

use serde_json::{Value, json};

use super::{GROUP, decode_config, deployment_name};
use crate::registry::catalog::{self, Kind};
use crate::registry::strategy::Acted;
use crate::registry::{Cause, Error, Part, Registry, Result, WriteOptions, parse};
use crate::types::names;

/// A parsed DeploymentConfigRollback.
#[derive(Debug, Default)]
pub struct RollbackRequest {
    pub name: String,
    pub updated_annotations: serde_json::Map<String, Value>,
    pub revision: i64,
    pub from: Option<String>,
    pub include_triggers: bool,
    pub include_template: bool,
    pub include_replication_meta: bool,
    pub include_strategy: bool,
}

fn invalid(kind: &'static str, name: &str, causes: Vec<Cause>) -> Error {
    Error::Invalid {
        group: GROUP.into(),
        kind: kind.into(),
        name: name.to_string(),
        causes,
    }
}

/// The name a request body gives, checked against the URL's.
fn body_name(
    kind: &'static str,
    body: &Value,
    url_name: &str,
    required_message: bool,
) -> Result<String> {
    let name = body.get("name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        let cause = if required_message {
            let mut c = Cause::required("name");
            c.message = "Required value: name of the deployment config is missing".into();
            c
        } else {
            Cause::invalid(
                "name",
                &json!(""),
                "name of the deployment config is missing",
            )
        };
        return Err(invalid(kind, name, vec![cause]));
    }
    if !names::dns1123_subdomain(name).is_empty() {
        return Err(invalid(
            kind,
            name,
            vec![Cause::invalid(
                "name",
                &json!(name),
                "name of the deployment config is invalid",
            )],
        ));
    }
    if name != url_name {
        return Err(Error::BadRequest(format!(
            "the name in the body ({name}) does not match the name in the URL ({url_name})"
        )));
    }
    Ok(name.to_string())
}

fn latest_version(dc: &Value) -> i64 {
    dc.pointer("/status/latestVersion")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn image_triggers(dc: &Value) -> Vec<&Value> {
    dc.pointer("/spec/triggers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("ImageChange"))
        .collect()
}

fn from_of(t: &Value) -> Value {
    t.pointer("/imageChangeParams/from")
        .cloned()
        .unwrap_or(Value::Null)
}

/// The template with server defaults applied, for a semantic comparison.
fn normalized_template(dc: &Value) -> Value {
    let mut d =
        json!({"spec": {"template": dc.pointer("/spec/template").cloned().unwrap_or(Value::Null)}});
    if let Some(ts) = d.pointer_mut("/spec/template/spec") {
        crate::registry::strategy::default_pod_spec(ts);
    }
    d["spec"]["template"].take()
}

/// §6.1 step 3: the causes of a new deployment, or none.
fn causes(dc: &Value, decoded: &Value, force: bool) -> Result<Vec<Value>> {
    let name = dc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let latest = latest_version(dc);
    let images = image_triggers(dc);
    if images.iter().any(|t| {
        t.pointer("/imageChangeParams/lastTriggeredImage")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    }) {
        return Err(Error::BadRequest(format!(
            "cannot trigger a deployment for {name:?} because it contains unresolved images"
        )));
    }
    let old_images = image_triggers(decoded);
    let mut causes = Vec::new();
    for t in &images {
        if t.pointer("/imageChangeParams/automatic")
            .and_then(Value::as_bool)
            != Some(true)
        {
            continue;
        }
        let from = from_of(t);
        let old = old_images.iter().find(|o| from_of(o) == from);
        let changed = match old {
            None => true,
            Some(o) => {
                o.pointer("/imageChangeParams/lastTriggeredImage")
                    != t.pointer("/imageChangeParams/lastTriggeredImage")
            }
        };
        if latest == 0 || changed {
            causes.push(json!({"type": "ImageChange", "imageTrigger": {"from": {
                "kind": "ImageStreamTag", "name": from["name"], "namespace": from["namespace"]}}}));
        }
    }
    if force {
        return Ok(vec![json!({"type": "Manual"})]);
    }
    let config_trigger = dc
        .pointer("/spec/triggers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| t.get("type").and_then(Value::as_str) == Some("ConfigChange"));
    if causes.is_empty()
        && config_trigger
        && (latest == 0 || normalized_template(dc) != normalized_template(decoded))
    {
        causes.push(json!({"type": "ConfigChange"}));
    }
    Ok(causes)
}

fn message_of(cause: &Value) -> &'static str {
    match cause.get("type").and_then(Value::as_str) {
        Some("ImageChange") => "image change",
        Some("Manual") => "manual change",
        _ => "config change",
    }
}

const INSTANTIATE_RETRIES: usize = 5;

/// `POST deploymentconfigs/{name}/instantiate` (§6.1).
pub(super) async fn instantiate(
    reg: &Registry,
    namespace: &str,
    name: &str,
    request: &Value,
) -> Result<Acted> {
    let kind = "DeploymentRequest";
    let name = body_name(kind, request, name, false)?;
    let force = request.get("force").and_then(Value::as_bool) == Some(true);
    let res = catalog::of(Kind::DeploymentConfig);
    let rcs = catalog::of(Kind::ReplicationController);
    for _ in 0..INSTANTIATE_RETRIES {
        let stored = reg.get(res, Some(namespace), &name)?;
        let dc = parse(&stored)?;
        if dc.pointer("/spec/paused").and_then(Value::as_bool) == Some(true) {
            return Err(invalid(
                kind,
                &name,
                vec![Cause::invalid(
                    "spec.paused",
                    &json!(true),
                    &format!(
                        "deployment config {name:?} is paused - unpause to request a new deployment"
                    ),
                )],
            ));
        }
        // Image streams are not served, so `latest` has no image triggers to refresh.
        let latest = latest_version(&dc);
        let decoded = if latest == 0 {
            dc.clone()
        } else {
            let rc = parse(&reg.get(rcs, Some(namespace), &deployment_name(&name, latest))?)?;
            decode_config(&rc).map_err(|e| {
                Error::Internal(format!("deployment config {namespace}/{name}: {e}"))
            })?
        };
        let causes = causes(&dc, &decoded, force)?;
        let Some(first) = causes.first() else {
            // 204 carries no body; clients must not rely on one (§6.1).
            tracing::debug!(%namespace, %name, "instantiate: nothing to deploy");
            return Ok(Acted::NoContent);
        };
        let mut new = dc.clone();
        new["status"]["details"] = json!({"message": message_of(first), "causes": causes});
        new["status"]["latestVersion"] = json!(latest + 1);
        let rv = dc
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|rv| rv.parse().ok());
        let key = res.key(Some(namespace), &name);
        let out = reg
            .update_with(
                res,
                &key,
                &name,
                rv,
                &WriteOptions::default(),
                |_| Ok(new.clone()),
                Part::All,
            )
            .await;
        match out {
            Ok(w) => return Ok(Acted::Created(w.object)),
            Err(Error::Conflict { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Registry::conflict(res, &name))
}

/// `POST deploymentconfigs/{name}/rollback` (§6.2): the rolled-back DC, not stored.
pub(super) fn rollback(reg: &Registry, namespace: &str, name: &str, body: &Value) -> Result<Acted> {
    let kind = "DeploymentConfigRollback";
    let req = parse_rollback(body);
    let name = body_name(kind, body, name, true)?;
    if req.revision < 0 {
        return Err(invalid(
            kind,
            &name,
            vec![Cause::invalid(
                "spec.revision",
                &json!(req.revision),
                "must be non-negative",
            )],
        ));
    }
    let fail = |detail: String| {
        invalid(
            kind,
            &name,
            vec![Cause::invalid("name", &json!(name), &detail)],
        )
    };
    let res = catalog::of(Kind::DeploymentConfig);
    let dc = reg
        .get(res, Some(namespace), &name)
        .and_then(|b| parse(&b))
        .map_err(|e| fail(format!("cannot get deployment config {name:?}: {e}")))?;
    let latest = latest_version(&dc);
    match latest {
        0 => return Err(fail("cannot rollback an undeployed config".into())),
        1 => {
            return Err(fail(format!(
                "no previous deployment exists for \"{namespace}/{name}\""
            )));
        }
        l if l == req.revision => {
            return Err(fail(format!("version {l} is already the latest")));
        }
        _ => {}
    }
    let target = match (&req.from, req.revision) {
        (Some(rc), _) => rc.clone(),
        (None, r) if r > 0 => deployment_name(&name, r),
        (None, _) => deployment_name(&name, latest - 1),
    };
    let rc = reg
        .get(
            catalog::of(Kind::ReplicationController),
            Some(namespace),
            &target,
        )
        .and_then(|b| parse(&b))
        .map_err(|e| fail(e.to_string()))?;
    let from = decode_config(&rc).map_err(|e| {
        fail(format!(
            "couldn't decode deployment config from deployment: {e}"
        ))
    })?;
    let dc = rolled_back(&dc, &from, &req);
    Ok(Acted::Created(
        serde_json::to_vec(&dc).expect("JSON serializes").into(),
    ))
}

fn parse_rollback(body: &Value) -> RollbackRequest {
    let flag = |f: &str| body.pointer(&format!("/spec/{f}")).and_then(Value::as_bool) == Some(true);
    RollbackRequest {
        name: body
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .into(),
        updated_annotations: body
            .get("updatedAnnotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        revision: body
            .pointer("/spec/revision")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        from: body
            .pointer("/spec/from/name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        include_triggers: flag("includeTriggers"),
        include_template: flag("includeTemplate"),
        include_replication_meta: flag("includeReplicationMeta"),
        include_strategy: flag("includeStrategy"),
    }
}

/// §6.2 steps 5–7.
fn rolled_back(current: &Value, from: &Value, req: &RollbackRequest) -> Value {
    let mut out = current.clone();
    if !req.updated_annotations.is_empty() {
        let meta = out["metadata"]
            .as_object_mut()
            .expect("stored objects have metadata");
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = ann.as_object_mut() {
            for (k, v) in &req.updated_annotations {
                a.insert(k.clone(), v.clone());
            }
        }
    }
    let mut copy = |field: &str| {
        if let Some(v) = from.pointer(&format!("/spec/{field}")) {
            out["spec"][field] = v.clone();
        } else if let Some(spec) = out["spec"].as_object_mut() {
            spec.remove(field);
        }
    };
    if req.include_template {
        copy("template");
    }
    if req.include_replication_meta {
        copy("replicas");
        copy("selector");
    }
    if req.include_triggers {
        copy("triggers");
    }
    if req.include_strategy {
        copy("strategy");
    }
    if let Some(triggers) = out
        .pointer_mut("/spec/triggers")
        .and_then(Value::as_array_mut)
    {
        for t in triggers {
            if t.get("type").and_then(Value::as_str) == Some("ImageChange")
                && let Some(p) = t
                    .get_mut("imageChangeParams")
                    .and_then(Value::as_object_mut)
            {
                p.insert("automatic".into(), json!(false));
            }
        }
    }
    let latest = latest_version(current);
    out["status"]["latestVersion"] = json!(latest + 1);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollback_copies_what_it_includes_and_disables_image_triggers() {
        let current = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3,
            "template": {"spec": {"containers": [{"name": "a", "image": "v2"}]}},
            "triggers": [{"type": "ImageChange", "imageChangeParams": {"automatic": true}}]},
            "status": {"latestVersion": 2}});
        let from = json!({"spec": {"replicas": 1,
            "template": {"spec": {"containers": [{"name": "a", "image": "v1"}]}}}});
        let req = RollbackRequest {
            include_template: true,
            updated_annotations: json!({"note": "x"}).as_object().cloned().unwrap(),
            ..Default::default()
        };
        let out = rolled_back(&current, &from, &req);
        assert_eq!(out["spec"]["template"], from["spec"]["template"]);
        assert_eq!(out["spec"]["replicas"], 3);
        assert_eq!(
            out["spec"]["triggers"][0]["imageChangeParams"]["automatic"],
            false
        );
        assert_eq!(out["status"]["latestVersion"], 3);
        assert_eq!(out["metadata"]["annotations"]["note"], "x");
    }

    #[test]
    fn config_changes_cause_a_deployment_only_when_the_template_differs() {
        let dc = json!({"metadata": {"name": "web"}, "spec": {"triggers": [{"type": "ConfigChange"}],
            "template": {"spec": {"containers": [{"name": "a", "image": "v2"}]}}},
            "status": {"latestVersion": 1}});
        let same = dc.clone();
        assert!(causes(&dc, &same, false).unwrap().is_empty());
        assert_eq!(
            causes(&dc, &same, true).unwrap(),
            vec![json!({"type": "Manual"})]
        );
        let mut older = dc.clone();
        older["spec"]["template"]["spec"]["containers"][0]["image"] = json!("v1");
        assert_eq!(
            causes(&dc, &older, false).unwrap(),
            vec![json!({"type": "ConfigChange"})]
        );
        let mut unresolved = dc.clone();
        unresolved["spec"]["triggers"] = json!([{"type": "ImageChange", "imageChangeParams": {}}]);
        let e = causes(&unresolved, &same, false).unwrap_err();
        assert!(e.to_string().contains("unresolved images"), "{e}");
    }
}
