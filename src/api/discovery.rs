//! Discovery: `/api`, `/apis` (aggregated v2 when asked for, legacy otherwise), the legacy
//! per-group-version resource lists, and `/version`. All built from the catalog.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::review::{REVIEWS, Review};
use crate::registry::catalog::{Resource, Served};

/// The Content-Type that tells clients an answer is aggregated discovery.
pub const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn wants_aggregated(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=APIGroupDiscoveryList") && a.contains("v=v2"))
}

pub fn json_response(content_type: &'static str, body: &Value) -> Response {
    let mut r = serde_json::to_vec(body)
        .expect("JSON serializes")
        .into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn aggregated_resource(r: &Resource) -> Value {
    let mut subresources = Vec::new();
    if r.scale {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"],
        }));
    }
    if r.status {
        subresources.push(json!({
            "subresource": "status",
            "responseKind": {"group": r.group, "version": r.version, "kind": r.kind_name},
            "verbs": ["get", "patch", "update"],
        }));
    }
    for sub in &r.subresources {
        let (group, version) = sub.api.unwrap_or((&r.group, &r.version));
        subresources.push(json!({
            "subresource": sub.name,
            "responseKind": {"group": group, "version": version, "kind": sub.kind},
            "verbs": sub.verbs,
        }));
    }
    let mut v = json!({
        "resource": r.plural,
        "singularResource": r.singular,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind_name},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        v["subresources"] = json!(subresources);
    }
    v
}

/// Every served group with its versions: the stored kinds' groups, then the reviews'.
fn all_groups(served: &Served) -> Vec<(&str, Vec<&str>)> {
    let mut out = served.groups();
    for r in REVIEWS {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) if versions.contains(&r.version) => {}
            Some((_, versions)) => versions.push(r.version),
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

/// The reviews of one group version.
fn reviews<'a>(group: &'a str, version: &'a str) -> impl Iterator<Item = &'static Review> + 'a {
    REVIEWS
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

fn aggregated_review(r: &Review) -> Value {
    json!({
        "resource": r.plural,
        "singularResource": r.singular,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": "Cluster",
        "verbs": ["create"],
    })
}

fn aggregated_group(served: &Served, group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = served
                .iter()
                .filter(|r| r.group == group && r.version == *v)
                .map(|r| aggregated_resource(r))
                .chain(reviews(group, v).map(aggregated_review))
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let mut metadata = json!({"creationTimestamp": null});
    if !group.is_empty() {
        metadata["name"] = json!(group);
    }
    json!({"metadata": metadata, "versions": versions})
}

fn aggregated_list(items: Vec<Value>) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `GET /api`
pub fn core(served: &Served, headers: &HeaderMap, server_address: &str) -> Response {
    if wants_aggregated(headers) {
        return json_response(
            AGGREGATED,
            &aggregated_list(vec![aggregated_group(served, "", &["v1"])]),
        );
    }
    json_response(
        "application/json",
        &json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        }),
    )
}

/// `GET /apis`
pub fn groups(served: &Served, headers: &HeaderMap) -> Response {
    let groups = all_groups(served);
    if wants_aggregated(headers) {
        let items = groups
            .iter()
            .map(|(g, vs)| aggregated_group(served, g, vs))
            .collect();
        return json_response(AGGREGATED, &aggregated_list(items));
    }
    let groups: Vec<Value> = groups.iter().map(|(g, vs)| legacy_group(g, vs)).collect();
    json_response(
        "application/json",
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
    )
}

fn legacy_group(group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": {"groupVersion": format!("{group}/{}", versions[0]), "version": versions[0]},
    })
}

/// `GET /apis/{group}`
pub fn group(served: &Served, name: &str) -> Option<Response> {
    let groups = all_groups(served);
    let (g, vs) = groups.iter().find(|(g, _)| *g == name)?;
    let mut v = legacy_group(g, vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(json_response("application/json", &v))
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`
pub fn resources(served: &Served, group: &str, version: &str) -> Option<Response> {
    let served: Vec<&Resource> = served
        .iter()
        .map(|r| &**r)
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() && reviews(group, version).next().is_none() {
        return None;
    }
    let mut list: Vec<Value> = reviews(group, version)
        .map(|r| {
            json!({"name": r.plural, "singularName": r.singular, "namespaced": false,
                   "kind": r.kind, "verbs": ["create"]})
        })
        .collect();
    for r in served {
        let mut v = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind_name,
            "verbs": r.verbs,
            "storageVersionHash": r.storage_version_hash(),
        });
        if !r.short_names.is_empty() {
            v["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            v["categories"] = json!(r.categories);
        }
        list.push(v);
        if r.scale {
            list.push(json!({
                "name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
        if r.status {
            list.push(json!({
                "name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind_name, "verbs": ["get", "patch", "update"],
            }));
        }
        for sub in &r.subresources {
            let mut v = json!({
                "name": format!("{}/{}", r.plural, sub.name), "singularName": "",
                "namespaced": r.namespaced, "kind": sub.kind, "verbs": sub.verbs,
            });
            // kubectl drain finds the Eviction's version here.
            if let Some((group, version)) = sub.api {
                v["group"] = json!(group);
                v["version"] = json!(version);
            }
            list.push(v);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json_response(
        "application/json",
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    ))
}

/// `GET /version`
pub fn version() -> Response {
    json_response("application/json", &crate::types::version_info())
}
