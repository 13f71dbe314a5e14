//! rbac.authorization.k8s.io/v1: Role, ClusterRole (with aggregation), RoleBinding and
//! ClusterRoleBinding, with upstream's rules (`pkg/apis/rbac/validation`: names that are
//! path segments, rules with verbs, bindings whose `roleRef` never changes, subjects
//! that are users, groups or service accounts), the escalation and bind checks of a
//! user's writes (`pkg/registry/rbac`), and the authorizer ([`authorizer`]) whose
//! in-memory [`Index`] these strategies keep current after each durable write. The
//! default roles and bindings are in [`defaults`].

pub mod authorizer;
pub mod defaults;

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Value, json};

pub use authorizer::{
    Attributes, Decision, GROUP, Held, Index, MASTERS, ResourceAttributes, RoleRef, Rule,
};

use super::catalog::{self, Kind, Resource, VERBS};
use super::schema::Source;
use super::strategy::Strategy;
use super::table::{Column, Printer};
use super::{Cause, Error, Part, Registry, User};
use crate::types::json::str_at;
use k8s_openapi::api::rbac::v1 as rbac;

/// The label and annotation of the default roles and bindings.
pub const BOOTSTRAPPING: &str = "kubernetes.io/bootstrapping";
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// The four kinds' descriptors, in discovery order.
pub fn resources() -> Vec<Resource> {
    let one = |kind: Kind,
               kind_name: &str,
               plural: &str,
               namespaced: bool,
               strategy: Arc<dyn Strategy>,
               schema: Source,
               binding: bool| Resource {
        kind,
        group: GROUP.into(),
        version: "v1".into(),
        kind_name: kind_name.into(),
        plural: plural.into(),
        singular: kind_name.to_ascii_lowercase(),
        short_names: Vec::new(),
        namespaced,
        categories: Vec::new(),
        status: false,
        generation: false,
        scale: false,
        verbs: VERBS,
        subresources: Vec::new(),
        selectable: Vec::new(),
        strategy,
        schema,
        table: Arc::new(Table { binding }),
        conversion: None,
    };
    vec![
        one(
            Kind::ClusterRoleBinding,
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            Arc::new(Binding(Held::ClusterRoleBinding)),
            Source::typed::<rbac::ClusterRoleBinding>(),
            true,
        ),
        one(
            Kind::ClusterRole,
            "ClusterRole",
            "clusterroles",
            false,
            Arc::new(Role(Held::ClusterRole)),
            Source::typed::<rbac::ClusterRole>(),
            false,
        ),
        one(
            Kind::RoleBinding,
            "RoleBinding",
            "rolebindings",
            true,
            Arc::new(Binding(Held::RoleBinding)),
            Source::typed::<rbac::RoleBinding>(),
            true,
        ),
        one(
            Kind::Role,
            "Role",
            "roles",
            true,
            Arc::new(Role(Held::Role)),
            Source::typed::<rbac::Role>(),
            false,
        ),
    ]
}

fn kind_of(held: Held) -> Kind {
    match held {
        Held::Role => Kind::Role,
        Held::ClusterRole => Kind::ClusterRole,
        Held::RoleBinding => Kind::RoleBinding,
        Held::ClusterRoleBinding => Kind::ClusterRoleBinding,
    }
}

/// Puts what the store holds now for `obj`'s key into the index.
fn refresh(reg: &Registry, held: Held, obj: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(obj) else {
        return;
    };
    let (ns, name) = (
        str_at(&v, "/metadata/namespace"),
        str_at(&v, "/metadata/name"),
    );
    let key = catalog::of(kind_of(held)).key(Some(ns).filter(|n| !n.is_empty()), name);
    let _serial = reg.rbac.updating();
    let now = reg
        .store
        .get(&key)
        .and_then(|rec| serde_json::from_slice::<Value>(&rec.value).ok());
    reg.rbac.put(held, ns, name, now.as_ref());
}

fn load(reg: &Registry, held: Held) {
    let (all, _) = reg.store.list(&catalog::of(kind_of(held)).key_prefix());
    let _serial = reg.rbac.updating();
    for (_, rec) in all {
        if let Ok(v) = serde_json::from_slice::<Value>(&rec.value) {
            let (ns, name) = (
                str_at(&v, "/metadata/namespace"),
                str_at(&v, "/metadata/name"),
            );
            reg.rbac.put(held, ns, name, Some(&v));
        }
    }
}

/// Upstream's `ValidateRBACName`: a name that is a path segment.
fn name_errors(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    match name {
        "." => out.push("may not be '.'".to_string()),
        ".." => out.push("may not be '..'".to_string()),
        _ => {}
    }
    for c in ['/', '%'] {
        if name.contains(c) {
            out.push(format!("may not contain '{c}'"));
        }
    }
    out
}

fn list<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v.get(field)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The escalation check: `user` holds every rule of `wanted` in `ns`.
fn confirm_no_escalation(
    reg: &Registry,
    user: &User,
    ns: &str,
    wanted: &[Rule],
    refused: impl Fn(String) -> Error,
) -> Result<(), Error> {
    let held = reg.rbac.rules_for(user, ns);
    let missing = authorizer::not_covered(&held, wanted);
    if missing.is_empty() {
        return Ok(());
    }
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    let rules: Vec<String> = missing.iter().map(authorizer::compact).collect();
    Err(refused(format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        groups.join(" "),
        rules.join("\n")
    )))
}

/// A refusal of a write of `plural` `name`, as `NewForbidden` words it.
fn forbidden(plural: &str, name: &str, why: String) -> Error {
    Error::Denied {
        group: GROUP.into(),
        resource: plural.into(),
        name: name.into(),
        message: format!("{plural}.{GROUP} {name:?} is forbidden: {why}"),
    }
}

/// Roles and ClusterRoles.
struct Role(Held);

impl Role {
    fn namespaced(&self) -> bool {
        self.0 == Held::Role
    }
    fn plural(&self) -> &'static str {
        if self.namespaced() {
            "roles"
        } else {
            "clusterroles"
        }
    }
}

impl Strategy for Role {
    fn name_errors(&self, name: &str) -> Vec<String> {
        name_errors(name)
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        for (i, rule) in list(obj, "rules").iter().enumerate() {
            let at = format!("rules[{i}]");
            let has = |f: &str| !list(rule, f).is_empty();
            if !has("verbs") {
                causes.push(Cause::required_with(
                    &format!("{at}.verbs"),
                    "verbs must contain at least one value",
                ));
            }
            if has("nonResourceURLs") {
                let urls = rule["nonResourceURLs"].clone();
                if self.namespaced() {
                    causes.push(Cause::invalid(
                        &format!("{at}.nonResourceURLs"),
                        &urls,
                        "namespaced rules cannot apply to non-resource URLs",
                    ));
                }
                if has("apiGroups") || has("resources") || has("resourceNames") {
                    causes.push(Cause::invalid(
                        &format!("{at}.nonResourceURLs"),
                        &urls,
                        "rules cannot apply to both regular resources and non-resource URLs",
                    ));
                }
                continue;
            }
            if !has("apiGroups") {
                causes.push(Cause::required_with(
                    &format!("{at}.apiGroups"),
                    "resource rules must supply at least one api group",
                ));
            }
            if !has("resources") {
                causes.push(Cause::required_with(
                    &format!("{at}.resources"),
                    "resource rules must supply at least one resource",
                ));
            }
        }
        if let Some(agg) = obj.get("aggregationRule").filter(|a| !a.is_null()) {
            let selectors = list(agg, "clusterRoleSelectors");
            if selectors.is_empty() {
                causes.push(Cause::required_with(
                    "aggregationRule.clusterRoleSelectors",
                    "at least one clusterRoleSelector required if aggregationRule is non-nil",
                ));
            }
            for (i, sel) in selectors.iter().enumerate() {
                super::apps::validate_label_selector(
                    sel,
                    &format!("aggregationRule.clusterRoleSelectors[{i}]"),
                    causes,
                );
            }
        }
    }

    fn authorize_write(
        &self,
        reg: &Registry,
        user: &User,
        ns: Option<&str>,
        old: Option<&Value>,
        new: &Value,
    ) -> Result<(), Error> {
        if old.is_some_and(|o| o.get("rules") == new.get("rules")) {
            return Ok(());
        }
        let name = str_at(new, "/metadata/name");
        let ns = ns.unwrap_or("");
        let escalate = Attributes::resource(
            "escalate",
            ResourceAttributes {
                group: GROUP.into(),
                resource: self.plural().into(),
                subresource: None,
                namespace: ns.into(),
                name: Some(name.into()),
            },
        );
        if reg.rbac.authorize(user, &escalate).allowed {
            return Ok(());
        }
        let rules: Vec<Rule> =
            serde_json::from_value(new.get("rules").cloned().unwrap_or(Value::Null))
                .unwrap_or_default();
        confirm_no_escalation(reg, user, ns, &rules, |why| {
            forbidden(self.plural(), name, why)
        })
    }

    fn after_write(&self, reg: &Registry, object: &[u8], _deleted: bool) {
        refresh(reg, self.0, object);
    }

    fn on_open(&self, reg: &Registry) {
        load(reg, self.0);
    }
}

/// RoleBindings and ClusterRoleBindings.
struct Binding(Held);

impl Binding {
    fn namespaced(&self) -> bool {
        self.0 == Held::RoleBinding
    }
    fn plural(&self) -> &'static str {
        if self.namespaced() {
            "rolebindings"
        } else {
            "clusterrolebindings"
        }
    }
}

const SUBJECT_KINDS: [&str; 3] = ["ServiceAccount", "User", "Group"];

impl Strategy for Binding {
    fn name_errors(&self, name: &str) -> Vec<String> {
        name_errors(name)
    }

    fn default(&self, obj: &mut Value) {
        if let Some(r) = obj.get_mut("roleRef").and_then(Value::as_object_mut)
            && r.get("apiGroup")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
        {
            r.insert("apiGroup".into(), json!(GROUP));
        }
        if let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut) {
            for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
                let empty = s
                    .get("apiGroup")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty();
                match s.get("kind").and_then(Value::as_str) {
                    Some("User" | "Group") if empty => {
                        s.insert("apiGroup".into(), json!(GROUP));
                    }
                    Some("ServiceAccount") if empty => {
                        s.insert("apiGroup".into(), json!(""));
                    }
                    _ => {}
                }
            }
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let role_ref = &obj["roleRef"];
        let group = role_ref["apiGroup"].as_str().unwrap_or("");
        if group != GROUP {
            causes.push(Cause::not_supported("roleRef.apiGroup", group, &[GROUP]));
        }
        let kind = role_ref["kind"].as_str().unwrap_or("");
        let kinds: &[&str] = if self.namespaced() {
            &["Role", "ClusterRole"]
        } else {
            &["ClusterRole"]
        };
        if !kinds.contains(&kind) {
            causes.push(Cause::not_supported("roleRef.kind", kind, kinds));
        }
        let name = role_ref["name"].as_str().unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required("roleRef.name"));
        }
        for msg in name_errors(name) {
            causes.push(Cause::invalid("roleRef.name", &json!(name), &msg));
        }
        for (i, s) in list(obj, "subjects").iter().enumerate() {
            let at = format!("subjects[{i}]");
            let name = s["name"].as_str().unwrap_or("");
            if name.is_empty() {
                causes.push(Cause::required(&format!("{at}.name")));
            }
            let api_group = s["apiGroup"].as_str().unwrap_or("");
            match s["kind"].as_str().unwrap_or("") {
                "ServiceAccount" => {
                    if !name.is_empty() {
                        for msg in crate::types::names::dns1123_subdomain(name) {
                            causes.push(Cause::invalid(&format!("{at}.name"), &json!(name), &msg));
                        }
                    }
                    if !api_group.is_empty() {
                        causes.push(Cause::not_supported(
                            &format!("{at}.apiGroup"),
                            api_group,
                            &[""],
                        ));
                    }
                    if !self.namespaced() && s["namespace"].as_str().unwrap_or("").is_empty() {
                        causes.push(Cause::required(&format!("{at}.namespace")));
                    }
                }
                "User" | "Group" => {
                    if api_group != GROUP {
                        causes.push(Cause::not_supported(
                            &format!("{at}.apiGroup"),
                            api_group,
                            &[GROUP],
                        ));
                    }
                }
                other => causes.push(Cause::not_supported(
                    &format!("{at}.kind"),
                    other,
                    &SUBJECT_KINDS,
                )),
            }
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        if old.get("roleRef") != new.get("roleRef") {
            causes.push(Cause::invalid(
                "roleRef",
                new.get("roleRef").unwrap_or(&Value::Null),
                "cannot change roleRef",
            ));
        }
    }

    fn authorize_write(
        &self,
        reg: &Registry,
        user: &User,
        ns: Option<&str>,
        old: Option<&Value>,
        new: &Value,
    ) -> Result<(), Error> {
        if old.is_some_and(|o| o.get("roleRef") == new.get("roleRef")) {
            return Ok(());
        }
        let name = str_at(new, "/metadata/name");
        let ns = ns.unwrap_or("");
        let role_ref: RoleRef = serde_json::from_value(new["roleRef"].clone()).unwrap_or_default();
        let bind = Attributes::resource(
            "bind",
            ResourceAttributes {
                group: GROUP.into(),
                resource: if role_ref.kind == "Role" {
                    "roles".into()
                } else {
                    "clusterroles".into()
                },
                subresource: None,
                namespace: ns.into(),
                name: Some(role_ref.name.clone()),
            },
        );
        if reg.rbac.authorize(user, &bind).allowed {
            return Ok(());
        }
        let Some(rules) = reg.rbac.role_rules(&role_ref, ns) else {
            let what = if role_ref.kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            return Err(forbidden(
                self.plural(),
                name,
                format!("{what}.{GROUP} {:?} not found", role_ref.name),
            ));
        };
        confirm_no_escalation(reg, user, ns, &rules, |why| {
            forbidden(self.plural(), name, why)
        })
    }

    fn after_write(&self, reg: &Registry, object: &[u8], _deleted: bool) {
        refresh(reg, self.0, object);
    }

    fn on_open(&self, reg: &Registry) {
        load(reg, self.0);
    }
}

/// kubectl's columns: a role's name and creation time; a binding's name, role, age and
/// (wide) subjects by kind.
struct Table {
    binding: bool,
}

fn column(name: &'static str, kind: &'static str, priority: u8, about: &'static str) -> Column {
    Column {
        name: Cow::Borrowed(name),
        kind: Cow::Borrowed(kind),
        priority,
        description: Cow::Borrowed(about),
    }
}

impl Printer for Table {
    fn columns(&self) -> Vec<Column> {
        let name = column(
            "Name",
            "string",
            0,
            "Name must be unique within a namespace.",
        );
        const CREATED: &str = "CreationTimestamp is a timestamp representing the server time when this object was created.";
        if !self.binding {
            return vec![name, column("Created At", "date", 0, CREATED)];
        }
        vec![
            name,
            column(
                "Role",
                "string",
                0,
                "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
            ),
            column("Age", "string", 0, CREATED),
            column("Users", "string", 1, "Users in the roleBinding"),
            column("Groups", "string", 1, "Groups in the roleBinding"),
            column(
                "ServiceAccounts",
                "string",
                1,
                "ServiceAccounts in the roleBinding",
            ),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let name = str_at(obj, "/metadata/name");
        let created = str_at(obj, "/metadata/creationTimestamp");
        if !self.binding {
            return vec![json!(name), json!(created)];
        }
        let of = |kind: &str| {
            let names: Vec<String> = list(obj, "subjects")
                .iter()
                .filter(|s| s["kind"] == kind)
                .map(
                    |s| match s["namespace"].as_str().filter(|_| kind == "ServiceAccount") {
                        Some(ns) => format!("{ns}/{}", str_at(s, "/name")),
                        None => str_at(s, "/name").to_string(),
                    },
                )
                .collect();
            names.join(", ")
        };
        let age = crate::types::age_seconds(created)
            .map_or_else(|| "<unknown>".into(), crate::types::human_duration);
        vec![
            json!(name),
            json!(format!(
                "{}/{}",
                str_at(obj, "/roleRef/kind"),
                str_at(obj, "/roleRef/name")
            )),
            json!(age),
            json!(of("User")),
            json!(of("Group")),
            json!(of("ServiceAccount")),
        ]
    }
}
