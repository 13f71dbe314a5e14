//! Authorization of every authenticated request through the registry's RBAC authorizer
//! (`registry::rbac`): resource requests by their verb, group, resource, subresource,
//! namespace and name; other paths (discovery, OpenAPI, metrics) by method and path; and
//! impersonation (`Impersonate-User`, `-Group`, `-Uid`), allowed to who holds the
//! `impersonate` verb, as kube-apiserver's impersonation filter.

use axum::http::{HeaderMap, Method};

use super::error::{Error, Result};
use crate::registry::rbac::{Attributes, ResourceAttributes};
use crate::registry::{self, Registry, User};

/// The Kubernetes verb of a request with a name (or without), as authorization names it.
pub(super) fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match (method, named) {
        (&Method::GET | &Method::HEAD, false) if watch => "watch",
        (&Method::GET | &Method::HEAD, false) => "list",
        (&Method::GET | &Method::HEAD, true) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, false) => "deletecollection",
        (&Method::DELETE, true) => "delete",
        _ => "unknown",
    }
}

/// The attributes of a request for `resource` (`group`, `sub`resource) in `namespace`.
pub(super) fn resource(
    verb: &str,
    group: &str,
    resource: &str,
    sub: Option<&str>,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Attributes {
    Attributes::resource(
        verb,
        ResourceAttributes {
            group: group.into(),
            resource: resource.into(),
            subresource: sub.map(str::to_string),
            namespace: namespace.unwrap_or("").into(),
            name: name.map(str::to_string),
        },
    )
}

/// Refuses what RBAC does not allow `user`, with upstream's 403.
pub(super) fn check(reg: &Registry, user: &User, a: &Attributes) -> Result<()> {
    let d = reg.rbac().authorize(user, a);
    if d.allowed {
        return Ok(());
    }
    let (group, resource, name) = match &a.resource {
        Some(r) => (
            r.group.clone(),
            r.resource.clone(),
            r.name.clone().unwrap_or_default(),
        ),
        None => Default::default(),
    };
    Err(Error::Registry(registry::Error::Denied {
        group,
        resource,
        name,
        message: a.forbidden(&user.name, &d.reason),
    }))
}

/// Whether `path` is a resource request (`/api/v1/...`, `/apis/{group}/{version}/...`),
/// which its handler authorizes; anything else is authorized by path.
fn is_resource_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.first() {
        Some(&"api") => parts.len() >= 3,
        Some(&"apis") => parts.len() >= 4,
        _ => false,
    }
}

/// Authorizes a request that is no resource request, by its method and path.
pub(super) fn check_path(reg: &Registry, user: &User, method: &Method, path: &str) -> Result<()> {
    if is_resource_path(path) {
        return Ok(());
    }
    let verb = method.as_str().to_ascii_lowercase();
    check(reg, user, &Attributes::path(&verb, path))
}

pub(super) const IMPERSONATE_USER: &str = "impersonate-user";
pub(super) const IMPERSONATE_GROUP: &str = "impersonate-group";
pub(super) const IMPERSONATE_UID: &str = "impersonate-uid";
const IMPERSONATE_EXTRA: &str = "impersonate-extra-";
const SA_PREFIX: &str = "system:serviceaccount:";

/// The user a request acts as: `user`, or whom its impersonation headers name once
/// `user` may impersonate each of them.
pub(super) fn impersonate(reg: &Registry, user: User, headers: &HeaderMap) -> Result<User> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let name = values(IMPERSONATE_USER).into_iter().next();
    let groups = values(IMPERSONATE_GROUP);
    let uid = values(IMPERSONATE_UID).into_iter().next();
    let extra = headers
        .keys()
        .any(|k| k.as_str().starts_with(IMPERSONATE_EXTRA));
    let Some(name) = name else {
        if !groups.is_empty() || uid.is_some() || extra {
            return Err(Error::BadRequest(
                "impersonating groups, a uid or extra fields needs Impersonate-User too".into(),
            ));
        }
        return Ok(user);
    };
    if extra {
        return Err(Error::BadRequest(
            "Impersonate-Extra- headers are not supported by berth; impersonate a user and groups"
                .into(),
        ));
    }
    let account = name
        .strip_prefix(SA_PREFIX)
        .and_then(|rest| rest.split_once(':'));
    let as_user = match account {
        Some((ns, sa)) => resource(
            "impersonate",
            "",
            "serviceaccounts",
            None,
            Some(ns),
            Some(sa),
        ),
        None => resource("impersonate", "", "users", None, None, Some(&name)),
    };
    check(reg, &user, &as_user)?;
    for g in &groups {
        check(
            reg,
            &user,
            &resource("impersonate", "", "groups", None, None, Some(g)),
        )?;
    }
    if let Some(uid) = &uid {
        check(
            reg,
            &user,
            &resource(
                "impersonate",
                "authentication.k8s.io",
                "uids",
                None,
                None,
                Some(uid),
            ),
        )?;
    }
    let mut new_groups = groups.clone();
    if let Some((ns, _)) = account
        && groups.is_empty()
    {
        new_groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
        ];
    }
    if name != "system:anonymous"
        && !new_groups
            .iter()
            .any(|g| g == registry::AUTHENTICATED || g == "system:unauthenticated")
    {
        new_groups.push(registry::AUTHENTICATED.into());
    }
    Ok(User {
        namespace: account.map(|(ns, _)| ns.to_string()),
        name,
        groups: new_groups,
        uid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_paths_are_left_to_their_handlers() {
        assert!(!is_resource_path("/api"));
        assert!(!is_resource_path("/api/v1"));
        assert!(is_resource_path("/api/v1/pods"));
        assert!(!is_resource_path("/apis/apps/v1"));
        assert!(is_resource_path("/apis/apps/v1/deployments"));
        assert!(!is_resource_path("/openapi/v3/apis/apps/v1"));
        assert!(!is_resource_path("/metrics"));
    }
}
