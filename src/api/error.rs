//! The one place that turns errors into HTTP answers: a `metav1.Status` body with the
//! matching code and reason. A 5xx answer never carries internals; those go to the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::registry;

/// Errors of the HTTP layer: the registry's, plus what only HTTP can get wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] registry::Error),
    #[error("Unauthorized")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("the server could not find the requested resource")]
    NoRoute,
    #[error("the request body is too large: at most {0} bytes are accepted")]
    TooLarge(usize),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    NotAcceptable(String),
    /// The method is not served here; the second field is the `Allow` header's value, the
    /// methods that are.
    #[error("the server does not allow this method on the requested resource: {0}")]
    MethodNotAllowed(String, &'static str),
    #[error("{0}")]
    Unavailable(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The HTTP code, the reason and the `details` of the Status.
    fn parts(&self) -> (StatusCode, &'static str, Value) {
        use registry::Error as R;
        match self {
            Error::Registry(e) => match e {
                R::NotFound {
                    group,
                    resource,
                    name,
                } => (
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    details(name, group, plural(resource)),
                ),
                R::AlreadyExists {
                    group,
                    resource,
                    name,
                } => (
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    details(name, group, plural(resource)),
                ),
                R::Conflict {
                    group,
                    resource,
                    name,
                    ..
                } => (
                    StatusCode::CONFLICT,
                    "Conflict",
                    details(name, group, plural(resource)),
                ),
                R::Invalid {
                    group,
                    kind,
                    name,
                    causes,
                } => {
                    let mut d = details(name, group, kind);
                    d["causes"] = causes
                        .iter()
                        .map(
                            |c| json!({"reason": c.reason, "message": c.message, "field": c.field}),
                        )
                        .collect();
                    (StatusCode::UNPROCESSABLE_ENTITY, "Invalid", d)
                }
                R::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest", json!(null)),
                R::Unprocessable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid", json!(null)),
                R::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden", json!(null)),
                R::Denied {
                    group,
                    resource,
                    name,
                    ..
                } => (
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    details(name, group, resource),
                ),
                R::Expired(_) | R::ExpiredContinue { .. } => {
                    (StatusCode::GONE, "Expired", json!(null))
                }
                R::MethodNotAllowed(_) => (
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    json!(null),
                ),
                R::UnsupportedMediaType(_) => (
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    json!(null),
                ),
                R::TooLarge(_) => (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "RequestEntityTooLarge",
                    json!(null),
                ),
                R::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, "Timeout", json!(null)),
                // Told as client-go's `IsTooLargeResourceVersion` recognises it.
                R::TooLargeResourceVersion(_) => (
                    StatusCode::GATEWAY_TIMEOUT,
                    "Timeout",
                    json!({
                        "causes": [{
                            "reason": "ResourceVersionTooLarge",
                            "message": "Too large resource version",
                        }],
                        "retryAfterSeconds": 1,
                    }),
                ),
                R::TooManyRequests {
                    cause, retry_after, ..
                } => {
                    let mut d = json!({});
                    if let Some(c) = cause {
                        d["causes"] = json!([{"reason": c.reason, "message": c.message}]);
                    }
                    if *retry_after > 0 {
                        d["retryAfterSeconds"] = json!(retry_after);
                    }
                    (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", d)
                }
                // Not an internal failure: the message is the answer, and has no reason.
                R::Unsupported(_) => (StatusCode::INTERNAL_SERVER_ERROR, "", json!(null)),
                // The disk or the quota is full: the client's request was fine, and the same
                // write succeeds once space is freed.
                R::Store(e) if e.is_out_of_space() => (
                    StatusCode::INSUFFICIENT_STORAGE,
                    "InsufficientStorage",
                    json!(null),
                ),
                R::Internal(_) | R::Store(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    json!(null),
                ),
            },
            Error::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized", json!(null)),
            Error::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden", json!(null)),
            // As kube-apiserver answers a path it does not serve: empty details, which
            // kubectl reads as a Status of a missing resource.
            Error::NoRoute => (StatusCode::NOT_FOUND, "NotFound", json!({})),
            Error::TooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                json!(null),
            ),
            Error::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest", json!(null)),
            Error::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                json!(null),
            ),
            Error::NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, "NotAcceptable", json!(null)),
            Error::MethodNotAllowed(..) => (
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                json!(null),
            ),
            Error::Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                json!(null),
            ),
        }
    }

    /// The Status object for this error.
    pub fn status(&self) -> (StatusCode, Value) {
        let (code, reason, details) = self.parts();
        // What a 503 says is for the client: what is missing, and to try again.
        let shown = code == StatusCode::GATEWAY_TIMEOUT
            || matches!(
                self,
                Error::Registry(registry::Error::Unsupported(_)) | Error::Unavailable(_)
            );
        let out_of_space = match self {
            Error::Registry(registry::Error::Store(e)) => e.out_of_space_message(),
            _ => None,
        };
        let message = if let Some(m) = out_of_space {
            tracing::warn!(error = %chain(self), "write refused for want of space");
            m
        } else if code.is_server_error() && !shown {
            tracing::error!(error = %chain(self), "internal error answering a request");
            "Internal error occurred: see the berth server log for details".to_string()
        } else {
            self.to_string()
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code.as_u16(),
        });
        if reason.is_empty() {
            status.as_object_mut().expect("an object").remove("reason");
        }
        if !details.is_null() {
            status["details"] = details;
        }
        if let Error::Registry(crate::registry::Error::ExpiredContinue { token, .. }) = self {
            status["metadata"] = json!({"continue": token});
        }
        (code, status)
    }
}

/// An error with every source below it: `the object store failed: journal: No space left`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// The `details` of a Status about one object, without the empty fields (as Go's
/// `omitempty` leaves them out).
fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = serde_json::Map::new();
    for (field, value) in [("name", name), ("group", group), ("kind", kind)] {
        if !value.is_empty() {
            d.insert(field.into(), json!(value));
        }
    }
    Value::Object(d)
}

/// A Status encoded with its fields in the order kube-apiserver writes them, so that the
/// bytes are the same as its.
pub fn encode_status(status: &Value) -> Vec<u8> {
    const TOP: &[&str] = &[
        "kind",
        "apiVersion",
        "metadata",
        "status",
        "message",
        "reason",
        "details",
        "code",
    ];
    const DETAILS: &[&str] = &[
        "name",
        "group",
        "kind",
        "uid",
        "causes",
        "retryAfterSeconds",
    ];
    const CAUSE: &[&str] = &["reason", "message", "field"];
    fn object(
        out: &mut Vec<u8>,
        v: &Value,
        order: &[&str],
        nested: &dyn Fn(&str, &Value, &mut Vec<u8>),
    ) {
        let Some(m) = v.as_object() else {
            serde_json::to_writer(&mut *out, v).expect("JSON values serialize");
            return;
        };
        out.push(b'{');
        let known = order.iter().filter_map(|k| m.get_key_value(*k));
        let rest = m.iter().filter(|(k, _)| !order.contains(&k.as_str()));
        for (i, (k, v)) in known.chain(rest).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, k).expect("strings serialize");
            out.push(b':');
            nested(k, v, out);
        }
        out.push(b'}');
    }
    let plain = |_: &str, v: &Value, out: &mut Vec<u8>| {
        serde_json::to_writer(out, v).expect("JSON values serialize")
    };
    let cause = |_: &str, v: &Value, out: &mut Vec<u8>| object(out, v, CAUSE, &plain);
    let in_details = |k: &str, v: &Value, out: &mut Vec<u8>| match (k, v) {
        ("causes", Value::Array(causes)) => {
            out.push(b'[');
            for (i, c) in causes.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                cause("", c, out);
            }
            out.push(b']');
        }
        _ => plain(k, v, out),
    };
    let top = |k: &str, v: &Value, out: &mut Vec<u8>| match k {
        "details" => object(out, v, DETAILS, &in_details),
        _ => plain(k, v, out),
    };
    let mut out = Vec::with_capacity(256);
    object(&mut out, status, TOP, &top);
    out
}

/// `pods` from `pods` or `leases.coordination.k8s.io`: details name the plural alone.
fn plural(qualified: &str) -> &str {
    qualified.split('.').next().unwrap_or(qualified)
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (code, body) = self.status();
        // Ended by a newline, as kube-apiserver's encoder writes it.
        let mut bytes = encode_status(&body);
        bytes.push(b'\n');
        let mut resp = (code, bytes).into_response();
        if let Error::MethodNotAllowed(_, allow) = self {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Error::Registry(registry::Error::TooManyRequests { retry_after, .. }) = &self
            && *retry_after > 0
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
        }
        if code == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"berth\""),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_code_reason_and_details() {
        let e = Error::from(registry::Error::NotFound {
            group: "".into(),
            resource: "pods".into(),
            name: "nope".into(),
        });
        let (code, s) = e.status();
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert_eq!(s["message"], "pods \"nope\" not found");
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["details"], json!({"name": "nope", "kind": "pods"}));
        assert_eq!(s["code"], 404);
    }

    #[test]
    fn statuses_are_encoded_as_kube_apiserver_writes_them() {
        let (_, s) = Error::NoRoute.status();
        assert_eq!(
            String::from_utf8(encode_status(&s)).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#
        );
        let e = Error::from(registry::Error::Invalid {
            group: "apps".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            causes: vec![registry::Cause::required("spec.selector")],
        });
        let (_, s) = e.status();
        assert_eq!(
            String::from_utf8(encode_status(&s)).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Deployment.apps \"web\" is invalid: spec.selector: Required value","reason":"Invalid","details":{"name":"web","group":"apps","kind":"Deployment","causes":[{"reason":"FieldValueRequired","message":"Required value","field":"spec.selector"}]},"code":422}"#
        );
    }

    #[test]
    fn a_store_failure_keeps_its_source_for_the_log_and_hides_it_from_clients() {
        let io = std::io::Error::other("No space left on device");
        let e = Error::from(registry::Error::from(crate::store::Error::Io {
            context: "journal".into(),
            source: io,
        }));
        assert_eq!(
            chain(&e),
            "the object store failed: journal: No space left on device: No space left on device"
        );
        let (code, s) = e.status();
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!s["message"].as_str().unwrap().contains("space"));
    }

    #[test]
    fn a_full_disk_or_quota_is_507_and_says_what_to_do() {
        let full = Error::from(registry::Error::from(crate::store::Error::NoSpace {
            context: "write store log /data/store/log-1".into(),
            source: std::io::Error::from_raw_os_error(28),
        }));
        let (code, s) = full.status();
        assert_eq!(code, StatusCode::INSUFFICIENT_STORAGE);
        let m = s["message"].as_str().unwrap();
        assert!(m.contains("disk") && m.contains("resume"), "{m}");
        assert!(!m.contains("/data"), "no server paths: {m}");
        let quota = Error::from(registry::Error::from(crate::store::Error::Quota {
            used: 300,
            quota: 200,
        }));
        let (code, s) = quota.status();
        assert_eq!(code, StatusCode::INSUFFICIENT_STORAGE);
        let m = s["message"].as_str().unwrap();
        assert!(
            m.contains("--quota-backend-bytes") && m.contains("delete"),
            "{m}"
        );
    }

    #[test]
    fn internal_errors_hide_their_detail() {
        let e = Error::from(registry::Error::Internal(
            "disk on fire at /secret/path".into(),
        ));
        let (code, s) = e.status();
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!s["message"].as_str().unwrap().contains("secret"));
    }

    #[test]
    fn invalid_lists_causes() {
        let e = Error::from(registry::Error::Invalid {
            group: "".into(),
            kind: "Pod".into(),
            name: "invalid".into(),
            causes: vec![registry::Cause::required("spec.containers")],
        });
        let (code, s) = e.status();
        assert_eq!(code.as_u16(), 422);
        assert_eq!(
            s["message"],
            "Pod \"invalid\" is invalid: spec.containers: Required value"
        );
        assert_eq!(s["details"]["causes"][0]["field"], "spec.containers");
    }
}
