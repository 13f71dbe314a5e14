//! The reviews a client asks about itself: `kubectl auth whoami` (authentication.k8s.io/v1
//! SelfSubjectReview), `kubectl auth can-i` (authorization.k8s.io/v1
//! SelfSubjectAccessReview) and `kubectl auth can-i --list` (SelfSubjectRulesReview).
//! Nothing is stored: the answer is made from the request.

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::error::{Error, Result};
use super::resources::{json_body, json_ok, may};
use crate::registry::User;

/// A review API as discovery lists it (created, never stored, cluster-wide), and what
/// answers it.
pub(super) struct Review {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    /// The review's status for this user and request body (the review as sent).
    status: fn(&User, &Value) -> Result<Value>,
}

/// The reviews served here.
pub(super) const REVIEWS: &[Review] = &[
    Review {
        group: "authentication.k8s.io",
        version: "v1",
        plural: "selfsubjectreviews",
        singular: "selfsubjectreview",
        kind: "SelfSubjectReview",
        status: who_am_i,
    },
    Review {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "selfsubjectaccessreviews",
        singular: "selfsubjectaccessreview",
        kind: "SelfSubjectAccessReview",
        status: can_i,
    },
    Review {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "selfsubjectrulesreviews",
        singular: "selfsubjectrulesreview",
        kind: "SelfSubjectRulesReview",
        status: rules,
    },
];

/// The answer to a review request, or `None` when the path is no review.
pub(super) fn handle(
    group: &str,
    version: &str,
    rest: &str,
    method: &Method,
    user: &User,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Result<Response>> {
    let rest = rest.trim_matches('/');
    let review = REVIEWS
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == rest)?;
    if method != Method::POST {
        return Some(Err(Error::MethodNotAllowed(method.to_string(), "POST")));
    }
    if super::negotiate::only_tables(headers) {
        return Some(Err(Error::NotAcceptable(format!(
            "the resource {}.{} does not support being converted to a Table",
            review.plural, review.group
        ))));
    }
    Some(answer(review, user, headers, body))
}

/// The review as sent (kubectl sends it in protobuf with its typed client; others in JSON
/// or YAML), with the status made for `user`.
fn answer(review: &Review, user: &User, headers: &HeaderMap, body: &[u8]) -> Result<Response> {
    let mut out = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        json_body(headers, body)?
    };
    out["status"] = (review.status)(user, &out)?;
    out["apiVersion"] = json!(format!("{}/{}", review.group, review.version));
    out["kind"] = json!(review.kind);
    out["metadata"] = json!({"creationTimestamp": null});
    Ok(json_ok(StatusCode::CREATED, out.to_string().into()))
}

fn who_am_i(user: &User, _review: &Value) -> Result<Value> {
    Ok(json!({"userInfo": {"username": user.name, "groups": user.groups}}))
}

/// Paths every user may GET: health, version, discovery and the OpenAPI.
const OPEN_PATHS: [&str; 7] = [
    "/healthz", "/livez", "/readyz", "/version", "/api", "/apis", "/openapi",
];

/// `kubectl auth can-i --list`: what the user may do in the namespace asked about, as
/// rules. The same decisions as [`can_i`]: the admin may do anything; a service account
/// anything in its own namespace, `get` that namespace, and GET the open paths. Anyone
/// may ask these reviews.
fn rules(user: &User, review: &Value) -> Result<Value> {
    let namespace = review["spec"]["namespace"].as_str().unwrap_or("");
    let all = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]});
    let (resource_rules, non_resource_rules) = match user.namespace.as_deref() {
        None => (
            vec![all],
            vec![json!({"verbs": ["*"], "nonResourceURLs": ["*"]})],
        ),
        Some(own) => {
            let mut rules = vec![
                json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                       "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
                json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
                       "resources": ["selfsubjectreviews"]}),
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["namespaces"],
                       "resourceNames": [own]}),
            ];
            if namespace == own {
                rules.insert(0, all);
            }
            let urls: Vec<String> = OPEN_PATHS
                .iter()
                .flat_map(|p| [p.to_string(), format!("{p}/*")])
                .collect();
            (
                rules,
                vec![json!({"verbs": ["get"], "nonResourceURLs": urls})],
            )
        }
    };
    Ok(json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    }))
}

fn can_i(user: &User, review: &Value) -> Result<Value> {
    let spec = &review["spec"];
    let text = |v: &Value, f: &str| v[f].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let allowed = if let Some(a) = spec.get("resourceAttributes").filter(|a| a.is_object()) {
        may(
            user,
            &text(a, "verb").unwrap_or_default(),
            &text(a, "group").unwrap_or_default(),
            &text(a, "resource").unwrap_or_default(),
            text(a, "subresource").as_deref(),
            text(a, "namespace").as_deref(),
            text(a, "name").as_deref(),
        )
    } else if let Some(a) = spec.get("nonResourceAttributes").filter(|a| a.is_object()) {
        let path = text(a, "path").unwrap_or_default();
        let open = OPEN_PATHS
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")));
        user.namespace.is_none() || (open && text(a, "verb").as_deref() == Some("get"))
    } else {
        return Err(Error::Registry(crate::registry::Error::Invalid {
            group: "authorization.k8s.io".into(),
            kind: "SelfSubjectAccessReview".into(),
            name: String::new(),
            causes: vec![crate::registry::Cause::forbidden(
                "spec.resourceAttributes",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )],
        }));
    };
    Ok(if allowed {
        json!({"allowed": true, "reason": "berth: allowed for this user"})
    } else {
        json!({"allowed": false, "reason": "berth: a service account may act only in its own namespace"})
    })
}
