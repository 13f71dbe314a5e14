//! The reviews a client asks about itself: `kubectl auth whoami` (authentication.k8s.io/v1
//! SelfSubjectReview), `kubectl auth can-i` (authorization.k8s.io/v1
//! SelfSubjectAccessReview), `kubectl auth can-i --list` (SelfSubjectRulesReview), and
//! SubjectAccessReviews of any user (for who may `create` them). Nothing is stored: the
//! answer is made from the request and the RBAC authorizer.

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::error::{Error, Result};
use super::resources::{json_body, json_ok};
use crate::registry::rbac::{Attributes, Decision, ResourceAttributes};
use crate::registry::{Registry, User};

/// A review API as discovery lists it (created, never stored, cluster-wide), and what
/// answers it.
pub(super) struct Review {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    /// The review's status for this user and request body (the review as sent).
    status: fn(&Registry, &User, &Value) -> Result<Value>,
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
    Review {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "subjectaccessreviews",
        singular: "subjectaccessreview",
        kind: "SubjectAccessReview",
        status: subject_can,
    },
];

/// The answer to a review request, or `None` when the path is no review.
#[allow(clippy::too_many_arguments)]
pub(super) fn handle(
    reg: &Registry,
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
    let create = super::authz::resource("create", review.group, review.plural, None, None, None);
    if let Err(e) = super::authz::check(reg, user, &create) {
        return Some(Err(e));
    }
    if super::negotiate::only_tables(headers) {
        return Some(Err(Error::NotAcceptable(format!(
            "the resource {}.{} does not support being converted to a Table",
            review.plural, review.group
        ))));
    }
    Some(answer(reg, review, user, headers, body))
}

/// The review as sent (kubectl sends it in protobuf with its typed client; others in JSON
/// or YAML), with the status made for `user`.
fn answer(
    reg: &Registry,
    review: &Review,
    user: &User,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response> {
    let mut out = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        json_body(headers, body)?
    };
    out["status"] = (review.status)(reg, user, &out)?;
    out["apiVersion"] = json!(format!("{}/{}", review.group, review.version));
    out["kind"] = json!(review.kind);
    out["metadata"] = json!({"creationTimestamp": null});
    Ok(json_ok(StatusCode::CREATED, out.to_string().into()))
}

fn who_am_i(_reg: &Registry, user: &User, _review: &Value) -> Result<Value> {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if let Some(uid) = &user.uid {
        info["uid"] = json!(uid);
    }
    Ok(json!({"userInfo": info}))
}

/// `kubectl auth can-i --list`: the rules RBAC gives the user in the namespace asked
/// about (and cluster-wide).
fn rules(reg: &Registry, user: &User, review: &Value) -> Result<Value> {
    let namespace = review["spec"]["namespace"].as_str().unwrap_or("");
    let (mut resource_rules, mut non_resource_rules) = (Vec::new(), Vec::new());
    for rule in reg.rbac().rules_for(user, namespace) {
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules.push(json!({"verbs": rule.verbs,
                "nonResourceURLs": rule.non_resource_urls}));
        } else {
            let mut r = json!({"verbs": rule.verbs, "apiGroups": rule.api_groups,
                "resources": rule.resources});
            if !rule.resource_names.is_empty() {
                r["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(r);
        }
    }
    Ok(json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    }))
}

fn invalid(kind: &str, cause: crate::registry::Cause) -> Error {
    Error::Registry(crate::registry::Error::Invalid {
        group: "authorization.k8s.io".into(),
        kind: kind.into(),
        name: String::new(),
        causes: vec![cause],
    })
}

/// What a review's `spec` asks about, as authorizer attributes.
fn asked(kind: &str, spec: &Value) -> Result<Attributes> {
    let text = |v: &Value, f: &str| v[f].as_str().unwrap_or("").to_string();
    let some = |v: &Value, f: &str| v[f].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    if let Some(a) = spec.get("resourceAttributes").filter(|a| a.is_object()) {
        Ok(Attributes::resource(
            &text(a, "verb"),
            ResourceAttributes {
                group: text(a, "group"),
                resource: text(a, "resource"),
                subresource: some(a, "subresource"),
                namespace: text(a, "namespace"),
                name: some(a, "name"),
            },
        ))
    } else if let Some(a) = spec.get("nonResourceAttributes").filter(|a| a.is_object()) {
        Ok(Attributes::path(&text(a, "verb"), &text(a, "path")))
    } else {
        Err(invalid(
            kind,
            crate::registry::Cause::forbidden(
                "spec.resourceAttributes",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ),
        ))
    }
}

fn decided(d: Decision) -> Value {
    let mut out = json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        out["reason"] = json!(d.reason);
    }
    out
}

/// `kubectl auth can-i`: whether RBAC allows the asking user what the review names.
fn can_i(reg: &Registry, user: &User, review: &Value) -> Result<Value> {
    let a = asked("SelfSubjectAccessReview", &review["spec"])?;
    Ok(decided(reg.rbac().authorize(user, &a)))
}

/// A SubjectAccessReview: whether RBAC allows the user the review names.
fn subject_can(reg: &Registry, _asker: &User, review: &Value) -> Result<Value> {
    let spec = &review["spec"];
    let name = spec["user"].as_str().unwrap_or("").to_string();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    if name.is_empty() && groups.is_empty() {
        return Err(invalid(
            "SubjectAccessReview",
            crate::registry::Cause::invalid(
                "spec.user",
                &json!(""),
                "at least one of user or group must be specified",
            ),
        ));
    }
    let a = asked("SubjectAccessReview", spec)?;
    let subject = User {
        name,
        groups,
        uid: spec["uid"].as_str().map(str::to_string),
        namespace: None,
    };
    Ok(decided(reg.rbac().authorize(&subject, &a)))
}
