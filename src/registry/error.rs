//! How the registry's requests fail: [`Error`], whose variants the API turns into
//! `Status` answers, and the field-level [`Cause`]s of an invalid object.

use serde_json::Value;

use crate::store;

/// One field-level problem with an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, ...
    pub reason: String,
    pub message: String,
    /// The field path, like `spec.containers[0].image`.
    pub field: String,
}

impl Cause {
    pub fn required(field: &str) -> Self {
        Self {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: field.into(),
        }
    }

    pub fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {value}: {detail}"),
            field: field.into(),
        }
    }

    pub fn not_supported(field: &str, value: &str, allowed: &[&str]) -> Self {
        let allowed: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        Self {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {value:?}: supported values: {}",
                allowed.join(", ")
            ),
            field: field.into(),
        }
    }

    /// A required value, with what requires it.
    pub fn required_with(field: &str, detail: &str) -> Self {
        Self {
            message: format!("Required value: {detail}"),
            ..Self::required(field)
        }
    }

    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {detail}"),
            field: field.into(),
        }
    }
}

/// How a request failed. The API layer turns each into a `Status` with its HTTP code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{resource} {name:?} not found")]
    NotFound {
        group: String,
        resource: String,
        name: String,
    },
    #[error("{resource} {name:?} already exists")]
    AlreadyExists {
        group: String,
        resource: String,
        name: String,
    },
    #[error("Operation cannot be fulfilled on {resource} {name:?}: {message}")]
    Conflict {
        group: String,
        resource: String,
        name: String,
        message: String,
    },
    #[error("{kind}{} {name:?} is invalid: {}", group_suffix(.group), causes_text(.causes))]
    Invalid {
        group: String,
        kind: String,
        name: String,
        causes: Vec<Cause>,
    },
    #[error("{0}")]
    BadRequest(String),
    /// A well-formed request that cannot be carried out on this object, such as a JSON
    /// patch whose `test` fails (HTTP 422, reason Invalid, without causes).
    #[error("the server rejected our request due to an error in our request: {0}")]
    Unprocessable(String),
    #[error("{0}")]
    Forbidden(String),
    /// Authorization refused a request or a write (HTTP 403 with the resource in the
    /// Status' details).
    #[error("{message}")]
    Denied {
        group: String,
        resource: String,
        name: String,
        message: String,
    },
    /// The requested history is gone (HTTP 410, reason Expired).
    #[error("{0}")]
    Expired(String),
    /// The snapshot a continue token reads is gone; `token` continues the list from the
    /// same place at the latest revision (HTTP 410, with the token in the Status).
    #[error("{message}")]
    ExpiredContinue { message: String, token: String },
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The request asked for a state the server does not have yet (HTTP 504).
    #[error("{0}")]
    Timeout(String),
    /// A read asked for a resourceVersion the store has not reached in time (HTTP 504).
    #[error("{0}")]
    TooLargeResourceVersion(String),
    /// The write would make an object larger than [`MAX_OBJECT`] (HTTP 413).
    #[error("{0}")]
    TooLarge(String),
    /// Too many requests now (HTTP 429): an eviction its disruption budget refuses, with
    /// the budget's cause; a client retries after `retry_after` seconds (0: unsaid).
    #[error("{message}")]
    TooManyRequests {
        message: String,
        cause: Option<Cause>,
        retry_after: u64,
    },
    /// A request the server does not support for this object (HTTP 500 with the message,
    /// as kube-apiserver answers an eviction of a pod that two budgets cover).
    #[error("{0}")]
    Unsupported(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// The store failed (an I/O error, a closed store): kept with its source for the log.
    #[error("the object store failed")]
    Store(#[from] store::Error),
}

/// `.group` for kinds outside the core group, as Kubernetes qualifies kinds in messages.
fn group_suffix(group: &str) -> String {
    if group.is_empty() {
        String::new()
    } else {
        format!(".{group}")
    }
}

fn causes_text(causes: &[Cause]) -> String {
    let parts: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}
