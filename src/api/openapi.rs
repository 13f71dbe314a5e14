//! OpenAPI v3: `/openapi/v3` lists one document per group version, each with the paths of
//! its resources (operations marked with their group-version-kind, writes taking
//! `fieldValidation`) and the schemas: generated from the Rust types for the built-in kinds,
//! a definition's own for a custom kind. Documents are built when the served kinds change
//! (a built-in group version's only once) and served with an ETag. `/openapi/v2` is the
//! Swagger 2.0 form of the same documents, made from them when first asked for after a
//! change.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::registry::catalog::{Resource, Served};
use crate::registry::schema;

/// The patch media types every kind accepts, as advertised on PATCH operations.
pub const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// The strategic merge patch type, which only the built-in kinds take: their schemas
/// carry the merge keys it needs (a definition's do not, as upstream).
const STRATEGIC: &str = "application/strategic-merge-patch+json";

struct Doc {
    body: Vec<u8>,
    hash: String,
}

/// `api/v1` or `apis/{group}/{version}`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

type Docs = BTreeMap<String, Arc<Doc>>;

/// The documents of one served set, remade when the set changes.
#[derive(Default)]
pub struct Cache {
    built: Mutex<Option<(u64, Arc<Docs>)>>,
    swagger: Mutex<Option<(u64, Arc<Doc>)>>,
}

fn doc_of(v: &Value) -> Arc<Doc> {
    let body = serde_json::to_vec(v).expect("JSON serializes");
    let digest = Sha256::digest(&body);
    let hash: String = digest[..8].iter().map(|b| format!("{b:02X}")).collect();
    Arc::new(Doc { body, hash })
}

impl Cache {
    /// The documents of `served`: those of the last set again if it is the same, and
    /// those of built-in group versions (which no definition may add to) kept.
    fn docs(&self, served: &Served) -> Arc<Docs> {
        let mut built = self.built.lock().expect("openapi cache lock");
        if let Some((generation, docs)) = &*built
            && *generation == served.generation()
        {
            return docs.clone();
        }
        let before = built.as_ref().map(|(_, d)| d.clone());
        let mut gvs: Vec<(&str, &str, bool)> = Vec::new();
        for r in served.iter() {
            let custom = !r.schema.is_builtin();
            match gvs
                .iter_mut()
                .find(|(g, v, _)| *g == r.group && *v == r.version)
            {
                Some(gv) => gv.2 |= custom,
                None => gvs.push((&r.group, &r.version, custom)),
            }
        }
        let docs: Docs = gvs
            .into_iter()
            .map(|(g, v, custom)| {
                let path = gv_path(g, v);
                let kept = (!custom)
                    .then(|| before.as_ref().and_then(|b| b.get(&path).cloned()))
                    .flatten();
                let doc = kept.unwrap_or_else(|| doc_of(&document(served, g, v)));
                (path, doc)
            })
            .collect();
        let docs = Arc::new(docs);
        *built = Some((served.generation(), docs.clone()));
        docs
    }

    /// The Swagger 2.0 document of `served`.
    fn swagger(&self, served: &Served) -> Arc<Doc> {
        let docs = self.docs(served);
        let mut built = self.swagger.lock().expect("openapi cache lock");
        if let Some((generation, doc)) = &*built
            && *generation == served.generation()
        {
            return doc.clone();
        }
        let custom: Vec<String> = served
            .iter()
            .filter(|r| !r.schema.is_builtin())
            .map(|r| schema::schema_name(r))
            .collect();
        let doc = doc_of(&swagger(&docs, &custom));
        *built = Some((served.generation(), doc.clone()));
        doc
    }
}

/// The Swagger 2.0 form of the v3 documents `docs`: every path and every schema, with
/// the schemas of custom kinds (named in `custom`) as kube-apiserver publishes them in
/// v2 (what keeps unknown fields is left open; v2 has no `anyOf`, `oneOf` or `not`).
fn swagger(docs: &Docs, custom: &[String]) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for doc in docs.values() {
        let Ok(v) = serde_json::from_slice::<Value>(&doc.body) else {
            continue;
        };
        for (path, item) in v["paths"].as_object().into_iter().flatten() {
            paths.insert(path.clone(), v2_path(item));
        }
        for (name, s) in v["components"]["schemas"].as_object().into_iter().flatten() {
            if !definitions.contains_key(name) {
                let is_custom = custom.contains(name);
                definitions.insert(name.clone(), v2_schema(s, is_custom, is_custom));
            }
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::types::kubernetes_version()},
        "paths": paths,
        "definitions": definitions,
    })
}

/// A v3 schema in v2: references into `#/definitions/`, no `nullable`; a custom kind's
/// (`custom`) as its structural v2 form.
fn v2_schema(s: &Value, custom: bool, root: bool) -> Value {
    let Some(m) = s.as_object() else {
        return match s {
            Value::Array(a) => {
                Value::Array(a.iter().map(|v| v2_schema(v, custom, false)).collect())
            }
            other => other.clone(),
        };
    };
    let preserves = custom && m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if preserves && root {
        let mut out = Map::new();
        out.insert("type".into(), json!("object"));
        for k in ["description", "x-kubernetes-group-version-kind"] {
            if let Some(v) = m.get(k) {
                out.insert(k.into(), v.clone());
            }
        }
        return Value::Object(out);
    }
    let mut out = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "$ref" => {
                let r = v.as_str().unwrap_or("").replace(REF_V3, REF_V2);
                out.insert(k.clone(), json!(r));
            }
            "nullable" => {}
            "type" | "properties" | "items" | "additionalProperties" if preserves => {}
            "anyOf" | "oneOf" | "not" if custom => {}
            "allOf" if custom => {
                // The one use a custom kind's schema has for it: metadata's reference.
                if let Some(r) = v.pointer("/0/$ref").and_then(Value::as_str) {
                    out.insert("$ref".into(), json!(r.replace(REF_V3, REF_V2)));
                }
            }
            "properties" => {
                let props: Map<String, Value> = v
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(n, p)| (n.clone(), v2_schema(p, custom, false)))
                    .collect();
                out.insert(k.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" | "allOf" | "anyOf" | "oneOf" | "not" => {
                out.insert(k.clone(), v2_schema(v, custom, false));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

const REF_V3: &str = "#/components/schemas/";
const REF_V2: &str = "#/definitions/";

/// A v3 path item in v2: parameters typed inline, the request body a `body` parameter
/// with the media types it takes as `consumes`, responses with their schema.
fn v2_path(item: &Value) -> Value {
    let mut out = Map::new();
    for (method, op) in item.as_object().into_iter().flatten() {
        let Some(op) = op.as_object() else {
            continue;
        };
        let mut o = Map::new();
        for (k, v) in op {
            match k.as_str() {
                "parameters" => {
                    let mut params: Vec<Value> = v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|p| {
                            let mut q = p.as_object().cloned().unwrap_or_default();
                            if let Some(Value::Object(schema)) = q.remove("schema") {
                                q.extend(schema);
                            }
                            Value::Object(q)
                        })
                        .collect();
                    if let Some(content) = op.get("requestBody").and_then(|b| b.get("content")) {
                        let schema = content
                            .as_object()
                            .and_then(|c| c.values().next())
                            .map(|c| v2_schema(&c["schema"], false, false))
                            .unwrap_or(json!({"type": "object"}));
                        params.push(json!({"name": "body", "in": "body", "required": true, "schema": schema}));
                        let types: Vec<&String> = content
                            .as_object()
                            .into_iter()
                            .flatten()
                            .map(|(t, _)| t)
                            .collect();
                        o.insert("consumes".into(), json!(types));
                    }
                    o.insert(k.clone(), Value::Array(params));
                }
                "requestBody" => {}
                "responses" => {
                    let responses: Map<String, Value> = v
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(code, r)| {
                            let mut answer = json!({"description": r["description"]});
                            if let Some(s) = r.pointer("/content/application~1json/schema") {
                                answer["schema"] = v2_schema(s, false, false);
                            }
                            (code.clone(), answer)
                        })
                        .collect();
                    o.insert(k.clone(), Value::Object(responses));
                }
                _ => {
                    o.insert(k.clone(), v.clone());
                }
            }
        }
        o.insert(
            "produces".into(),
            json!([
                "application/json",
                "application/yaml",
                "application/vnd.kubernetes.protobuf"
            ]),
        );
        o.insert("schemes".into(), json!(["https"]));
        out.insert(method.clone(), Value::Object(o));
    }
    Value::Object(out)
}

fn param(name: &str, location: &str, description: &str) -> Value {
    json!({
        "name": name, "in": location, "description": description,
        "required": location == "path", "schema": param_schema(name),
    })
}

/// The values a query parameter takes, as the server reads them.
fn param_schema(name: &str) -> Value {
    match name {
        "limit" | "timeoutSeconds" => json!({"type": "integer", "minimum": 0, "uniqueItems": true}),
        "watch" | "allowWatchBookmarks" | "sendInitialEvents" | "force" => {
            json!({"type": "boolean", "uniqueItems": true})
        }
        "dryRun" => json!({"type": "string", "enum": ["All"], "uniqueItems": true}),
        "fieldValidation" => {
            json!({"type": "string", "enum": ["Strict", "Warn", "Ignore"], "uniqueItems": true})
        }
        "resourceVersionMatch" => {
            json!({"type": "string", "enum": ["Exact", "NotOlderThan"], "uniqueItems": true})
        }
        _ => json!({"type": "string", "uniqueItems": true}),
    }
}

fn write_params() -> Vec<Value> {
    vec![
        param(
            "dryRun",
            "query",
            "When present, indicates that modifications should not be persisted. The only valid value is All.",
        ),
        param(
            "fieldManager",
            "query",
            "A name associated with the actor or entity that is making these changes.",
        ),
        param(
            "fieldValidation",
            "query",
            "How to handle unknown fields in the object: Ignore, Warn (the default) or Strict.",
        ),
    ]
}

fn list_params() -> Vec<Value> {
    [
        "allowWatchBookmarks",
        "continue",
        "fieldSelector",
        "labelSelector",
        "limit",
        "resourceVersion",
        "resourceVersionMatch",
        "sendInitialEvents",
        "timeoutSeconds",
        "watch",
    ]
    .iter()
    .map(|n| param(n, "query", ""))
    .collect()
}

/// The body of a patch of media type `t`: a JSON patch is a list of operations (RFC 6902),
/// the others are (partial) objects.
fn patch_schema(t: &str) -> Value {
    if t != "application/json-patch+json" {
        return json!({"type": "object"});
    }
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["op", "path"],
            "properties": {
                "op": {"type": "string", "enum": ["add", "remove", "replace", "move", "copy", "test"]},
                "path": {"type": "string"},
                "from": {"type": "string"},
                "value": {},
            },
        },
    })
}

/// The answers of an operation: its object (201 as well for a create), and a Status for
/// every failure.
fn responses(action: &str, schema_name: &str) -> Value {
    let body = json!({"application/json": {"schema": schema::reference(schema_name)}});
    let mut out = json!({
        "200": {"description": "OK", "content": body},
        "401": {"description": "Unauthorized"},
        "default": {
            "description": "Failure: a Status with the code, the reason and the causes",
            "content": {"application/json": {"schema": schema::reference(&schema::status_schema_name())}},
        },
    });
    // A create, or a server-side apply that creates.
    if action == "post" || action == "patch" {
        out["201"] = json!({"description": "Created", "content": body});
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn operation(
    r: &Resource,
    action: &str,
    id: &str,
    schema_name: &str,
    gvk: Value,
    mut params: Vec<Value>,
    body: Option<Value>,
) -> Value {
    params.push(param(
        "pretty",
        "query",
        "If 'true', then the output is pretty printed.",
    ));
    let mut op = json!({
        "operationId": id,
        "description": format!("{action} {}", r.kind_name),
        "tags": [gv_path(&r.group, &r.version).replace('/', "_")],
        "parameters": params,
        "responses": responses(action, schema_name),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    });
    if let Some(b) = body {
        op["requestBody"] = json!({"content": b, "required": true});
    }
    op
}

fn resource_paths(r: &Resource, paths: &mut Map<String, Value>) {
    let base = format!("/{}", gv_path(&r.group, &r.version));
    let collection = if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{base}/{}", r.plural)
    };
    let item = format!("{collection}/{{name}}");
    let scope_params = |with_name: bool| {
        let mut p = Vec::new();
        if with_name {
            p.push(param("name", "path", "name of the object"));
        }
        if r.namespaced {
            p.push(param("namespace", "path", "object name and auth scope"));
        }
        p
    };
    let name = schema::schema_name(r);
    let list = schema::list_schema_name(r);
    let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind_name});
    let id = format!(
        "{}{}",
        if r.group.is_empty() { "CoreV1" } else { "V1" },
        r.kind_name
    );
    let json_body = json!({"application/json": {"schema": schema::reference(&name)}});
    let strategic = r.schema.is_builtin().then_some(STRATEGIC);
    let patch_body: Map<String, Value> = PATCH_TYPES
        .iter()
        .copied()
        .chain(strategic)
        .map(|t| (t.to_string(), json!({"schema": patch_schema(t)})))
        .collect();
    let with = |mut a: Vec<Value>, b: Vec<Value>| {
        a.extend(b);
        a
    };
    let mut collection_ops = json!({
        "get": operation(r, "list", &format!("list{id}"), &list, gvk.clone(), with(scope_params(false), list_params()), None),
        "post": operation(r, "post", &format!("create{id}"), &name, gvk.clone(), with(scope_params(false), write_params()), Some(json_body.clone())),
    });
    // Only where the resource serves it: namespaces are deleted one at a time.
    if r.verbs.contains(&"deletecollection") {
        collection_ops["delete"] = operation(
            r,
            "deletecollection",
            &format!("deleteCollection{id}"),
            &list,
            gvk.clone(),
            with(scope_params(false), list_params()),
            None,
        );
    }
    paths.insert(collection.clone(), collection_ops);
    let item_ops = |suffix: &str, schema_name: &str, gvk: &Value| {
        json!({
            "get": operation(r, "get", &format!("read{id}{suffix}"), schema_name, gvk.clone(), scope_params(true), None),
            "put": operation(r, "put", &format!("replace{id}{suffix}"), schema_name, gvk.clone(),
                with(scope_params(true), write_params()),
                Some(json!({"application/json": {"schema": schema::reference(schema_name)}}))),
            "patch": operation(r, "patch", &format!("patch{id}{suffix}"), schema_name, gvk.clone(),
                with(with(scope_params(true), write_params()), vec![param("force", "query", "Force is going to \"force\" Apply requests.")]),
                Some(Value::Object(patch_body.clone()))),
        })
    };
    let mut ops = item_ops("", &name, &gvk);
    ops["delete"] = operation(
        r,
        "delete",
        &format!("delete{id}"),
        &name,
        gvk.clone(),
        with(scope_params(true), vec![param("dryRun", "query", "")]),
        None,
    );
    paths.insert(item.clone(), ops);
    if r.status {
        paths.insert(format!("{item}/status"), item_ops("Status", &name, &gvk));
    }
    if r.scale {
        let scale_gvk = json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
        paths.insert(
            format!("{item}/scale"),
            item_ops("Scale", &schema::scale_schema_name(), &scale_gvk),
        );
    }
    if r.namespaced {
        paths.insert(
            format!("{base}/{}", r.plural),
            json!({"get": operation(r, "list", &format!("list{id}ForAllNamespaces"), &list, gvk, list_params(), None)}),
        );
    }
}

fn document(served: &Served, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let resources: Vec<&Resource> = served
        .iter()
        .map(|r| &**r)
        .filter(|r| r.group == group && r.version == version)
        .collect();
    for r in &resources {
        resource_paths(r, &mut paths);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::types::kubernetes_version()},
        "paths": paths,
        "components": {"schemas": schema::definitions_of(&resources)},
    })
}

/// `GET /openapi/v2`: the Swagger 2.0 document of every served kind, in JSON (with an
/// ETag). Protobuf (gnostic's `openapi.v2.Document`, as client-go asks for it) is still a
/// document with no paths and no definitions: berth does not encode schemas in protobuf,
/// and a v2 that knows no types makes kubectl read the v3 documents instead and report a
/// kind they do not list as one the server does not serve.
pub fn v2(cache: &Cache, served: &Served, headers: &HeaderMap) -> Response {
    let version = crate::types::kubernetes_version();
    let wants_protobuf = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("protobuf"));
    if !wants_protobuf {
        return with_etag(&cache.swagger(served), headers, false);
    }
    // Length-delimited fields: Document.swagger = 1, .info = 2 (Info.title = 1,
    // .version = 2), .paths = 8 (empty).
    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push(number << 3 | 2);
        let mut n = bytes.len();
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        out.extend_from_slice(bytes);
    }
    let mut info = Vec::new();
    field(&mut info, 1, b"Kubernetes");
    field(&mut info, 2, version.as_bytes());
    let mut doc = Vec::new();
    field(&mut doc, 1, b"2.0");
    field(&mut doc, 2, &info);
    field(&mut doc, 8, &[]);
    // The type client-go asks for has an `@`, which no media type parser takes back, so
    // the document is answered as plain bytes (as kube-openapi does).
    let mut r = doc.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    r
}

/// `GET /openapi/v3`
pub fn root(cache: &Cache, served: &Served) -> Response {
    let paths: Map<String, Value> = cache
        .docs(served)
        .iter()
        .map(|(path, doc)| {
            (
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
            )
        })
        .collect();
    super::discovery::json_response("application/json", &json!({"paths": paths}))
}

/// `GET /openapi/v3/{path}`
pub fn document_at(
    cache: &Cache,
    served: &Served,
    path: &str,
    headers: &HeaderMap,
) -> Option<Response> {
    let docs = cache.docs(served);
    let doc = docs.get(path.trim_matches('/'))?;
    Some(with_etag(doc, headers, true))
}

/// A document's body (or 304 when the client has it), with its ETag; `immutable` for one
/// at an address with its hash.
fn with_etag(doc: &Doc, headers: &HeaderMap, immutable: bool) -> Response {
    let etag = format!("\"{}\"", doc.hash);
    let cached = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag);
    let mut r = if cached {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        doc.body.clone().into_response()
    };
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex is a valid header"),
    );
    if immutable {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, immutable"),
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs() -> Arc<Docs> {
        let served = crate::registry::catalog::Catalog::default().served();
        Cache::default().docs(&served)
    }

    #[test]
    fn every_group_version_has_a_document_with_patch_operations_kubectl_can_use() {
        assert!(docs().contains_key("api/v1"));
        assert!(docs().contains_key("apis/coordination.k8s.io/v1"));
        let doc: Value = serde_json::from_slice(&docs()["api/v1"].body).unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        let params: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(params.contains(&"fieldValidation"));
        // Built-in kinds take strategic merge patches: their schemas carry the keys.
        assert!(
            patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_some()
        );
        let containers =
            &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());
        assert!(doc["paths"]["/api/v1/namespaces/{name}"].is_object());
        assert!(
            doc["paths"]["/api/v1/namespaces/{namespace}/replicationcontrollers/{name}/scale"]
                .is_object()
        );
    }

    #[test]
    fn collections_list_delete_only_where_the_resource_serves_deletecollection() {
        let doc: Value = serde_json::from_slice(&docs()["api/v1"].body).unwrap();
        let paths = &doc["paths"];
        assert!(paths["/api/v1/namespaces"]["get"].is_object());
        assert!(paths["/api/v1/namespaces"].get("delete").is_none());
        assert_eq!(
            paths["/api/v1/namespaces/{namespace}/configmaps"]["delete"]["x-kubernetes-action"],
            "deletecollection"
        );
    }

    #[test]
    fn lists_answer_with_the_list_schema() {
        let doc: Value = serde_json::from_slice(&docs()["api/v1"].body).unwrap();
        let ok = |path: &str, method: &str| {
            doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
                ["$ref"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let list = "#/components/schemas/io.k8s.api.core.v1.EventList";
        assert_eq!(ok("/api/v1/namespaces/{namespace}/events", "get"), list);
        assert_eq!(ok("/api/v1/namespaces/{namespace}/events", "delete"), list);
        assert_eq!(ok("/api/v1/events", "get"), list);
        assert_eq!(
            ok("/api/v1/namespaces/{namespace}/events/{name}", "get"),
            "#/components/schemas/io.k8s.api.core.v1.Event"
        );
        let schemas = &doc["components"]["schemas"];
        let event_list = &schemas["io.k8s.api.core.v1.EventList"];
        assert_eq!(
            event_list["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Event"
        );
        let meta = event_list["properties"]["metadata"]["$ref"]
            .as_str()
            .unwrap();
        let meta = meta.trim_start_matches("#/components/schemas/");
        assert!(schemas[meta]["properties"]["continue"].is_object());
        let create = &doc["paths"]["/api/v1/namespaces/{namespace}/events"]["post"]["responses"];
        assert!(create["201"].is_object() && create["200"].is_object());
        let failure = create["default"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap();
        let status = &schemas[failure.trim_start_matches("#/components/schemas/")];
        assert!(status["properties"]["reason"].is_object());
    }

    #[test]
    fn parameters_and_patches_are_typed_as_the_server_reads_them() {
        let doc: Value = serde_json::from_slice(&docs()["api/v1"].body).unwrap();
        let item = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"];
        let list = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["get"];
        let schema = |op: &Value, name: &str| {
            op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{name}"))["schema"]
                .clone()
        };
        assert_eq!(schema(list, "limit")["type"], "integer");
        assert_eq!(schema(list, "watch")["type"], "boolean");
        assert_eq!(schema(list, "labelSelector")["type"], "string");
        assert_eq!(schema(&item["patch"], "dryRun")["enum"], json!(["All"]));
        let patch = &item["patch"]["requestBody"]["content"];
        assert_eq!(
            patch["application/json-patch+json"]["schema"]["type"],
            "array"
        );
        assert_eq!(
            patch["application/merge-patch+json"]["schema"]["type"],
            "object"
        );
        assert!(item["patch"]["responses"]["201"].is_object());
    }
}
