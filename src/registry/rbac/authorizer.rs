//! The RBAC authorizer (upstream's `plugin/pkg/auth/authorizer/rbac`): the rules of every
//! Role and ClusterRole and the subjects of every binding, held in memory by [`Index`]
//! and kept current by the four kinds' strategies after each durable write (and loaded
//! when the registry opens), so a decision reads no store. A decision walks the
//! ClusterRoleBindings, then the RoleBindings of the request's namespace, and stops at the
//! first rule that allows the request. Members of `system:masters` are allowed everything
//! without RBAC, as kube-apiserver's privileged-group authorizer allows them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::registry::User;

/// The group whose members may do anything.
pub const MASTERS: &str = "system:masters";
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// One rule of a role, as the API spells it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

impl Rule {
    /// A resource rule.
    pub fn new(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Self {
        let own = |l: &[&str]| l.iter().map(|s| (*s).to_string()).collect();
        Rule {
            verbs: own(verbs),
            api_groups: own(groups),
            resources: own(resources),
            ..Rule::default()
        }
    }

    /// A rule of non-resource URLs.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        let own = |l: &[&str]| l.iter().map(|s| (*s).to_string()).collect();
        Rule {
            verbs: own(verbs),
            non_resource_urls: own(urls),
            ..Rule::default()
        }
    }

    /// Whether this rule allows the request (upstream's `RuleAllows`).
    pub fn allows(&self, a: &Attributes) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        if !any(&self.verbs, &a.verb) {
            return false;
        }
        let Some(r) = &a.resource else {
            return self.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == a.path
                    || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
            });
        };
        if !any(&self.api_groups, &r.group) {
            return false;
        }
        let combined = match &r.subresource {
            Some(sub) => format!("{}/{sub}", r.resource),
            None => r.resource.clone(),
        };
        let resource = self.resources.iter().any(|rr| {
            rr == "*"
                || *rr == combined
                || r.subresource
                    .as_deref()
                    .is_some_and(|sub| rr.strip_prefix("*/") == Some(sub))
        });
        resource
            && (self.resource_names.is_empty()
                || r.name
                    .as_deref()
                    .is_some_and(|n| self.resource_names.iter().any(|x| x == n)))
    }
}

/// Who a binding names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

impl Subject {
    /// Whether the subject is `user` (upstream's `appliesToUser`); `ns` is the binding's.
    fn is(&self, user: &User, ns: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    ns
                } else {
                    &self.namespace
                };
                !ns.is_empty()
                    && user
                        .name
                        .strip_prefix("system:serviceaccount:")
                        .and_then(|rest| rest.split_once(':'))
                        == Some((ns, self.name.as_str()))
            }
            _ => false,
        }
    }
}

/// The role a binding grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

/// What a request asks of a resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    /// Empty for cluster-scoped requests and requests across namespaces.
    pub namespace: String,
    pub name: Option<String>,
}

/// What a request asks: a verb on a resource, or on a non-resource path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// `None` for a non-resource request (`path` then says what is asked for).
    pub resource: Option<ResourceAttributes>,
    pub path: String,
}

impl Attributes {
    pub fn resource(verb: &str, r: ResourceAttributes) -> Self {
        Attributes {
            verb: verb.into(),
            resource: Some(r),
            path: String::new(),
        }
    }

    pub fn path(verb: &str, path: &str) -> Self {
        Attributes {
            verb: verb.into(),
            resource: None,
            path: path.into(),
        }
    }

    /// The text of a refusal, as kube-apiserver words it (`forbiddenMessage` wrapped by
    /// `NewForbidden`), with `reason` after it when there is one.
    pub fn forbidden(&self, user: &str, reason: &str) -> String {
        let why = if reason.is_empty() {
            String::new()
        } else {
            format!(": {reason}")
        };
        let Some(r) = &self.resource else {
            return format!(
                "forbidden: User {user:?} cannot {} path {:?}{why}",
                self.verb, self.path
            );
        };
        let mut resource = r.resource.clone();
        if let Some(sub) = &r.subresource {
            resource = format!("{resource}/{sub}");
        }
        let scope = if r.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", r.namespace)
        };
        let qualified = if r.group.is_empty() {
            r.resource.clone()
        } else {
            format!("{}.{}", r.resource, r.group)
        };
        let named = match &r.name {
            Some(n) if !n.is_empty() => format!("{qualified} {n:?}"),
            _ => qualified,
        };
        format!(
            "{named} is forbidden: User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}{why}",
            self.verb, r.group
        )
    }
}

/// An authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Why (for reviews), or what went wrong on the way (a missing role).
    pub reason: String,
}

#[derive(Debug, Clone)]
struct Binding {
    subjects: Vec<Subject>,
    role_ref: RoleRef,
}

#[derive(Debug, Default)]
struct State {
    cluster_roles: HashMap<String, Arc<[Rule]>>,
    /// By namespace, then name.
    roles: HashMap<String, HashMap<String, Arc<[Rule]>>>,
    cluster_bindings: BTreeMap<String, Binding>,
    /// By namespace, then name.
    bindings: HashMap<String, BTreeMap<String, Binding>>,
}

/// Which of the four kinds an object is, for [`Index::put`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

/// The RBAC objects a registry holds, in memory (one per registry).
#[derive(Debug, Default)]
pub struct Index {
    state: RwLock<State>,
    /// Serializes updates: each re-reads the store under it, so the last one sees the
    /// latest write whatever order writers finished in.
    updating: Mutex<()>,
}

fn rules_of(obj: &Value) -> Arc<[Rule]> {
    serde_json::from_value::<Vec<Rule>>(obj.get("rules").cloned().unwrap_or(Value::Null))
        .unwrap_or_default()
        .into()
}

fn binding_of(obj: &Value) -> Binding {
    Binding {
        subjects: serde_json::from_value(obj.get("subjects").cloned().unwrap_or(Value::Null))
            .unwrap_or_default(),
        role_ref: serde_json::from_value(obj.get("roleRef").cloned().unwrap_or(Value::Null))
            .unwrap_or_default(),
    }
}

impl Index {
    /// The serialization of updates: hold it while reading the store and putting.
    pub fn updating(&self) -> std::sync::MutexGuard<'_, ()> {
        self.updating.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `obj` (or its absence) as the object `ns`/`name` of kind `held`.
    pub fn put(&self, held: Held, ns: &str, name: &str, obj: Option<&Value>) {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        match (held, obj) {
            (Held::ClusterRole, Some(o)) => {
                s.cluster_roles.insert(name.into(), rules_of(o));
            }
            (Held::ClusterRole, None) => {
                s.cluster_roles.remove(name);
            }
            (Held::Role, Some(o)) => {
                s.roles
                    .entry(ns.into())
                    .or_default()
                    .insert(name.into(), rules_of(o));
            }
            (Held::Role, None) => {
                if let Some(m) = s.roles.get_mut(ns) {
                    m.remove(name);
                    if m.is_empty() {
                        s.roles.remove(ns);
                    }
                }
            }
            (Held::ClusterRoleBinding, Some(o)) => {
                s.cluster_bindings.insert(name.into(), binding_of(o));
            }
            (Held::ClusterRoleBinding, None) => {
                s.cluster_bindings.remove(name);
            }
            (Held::RoleBinding, Some(o)) => {
                s.bindings
                    .entry(ns.into())
                    .or_default()
                    .insert(name.into(), binding_of(o));
            }
            (Held::RoleBinding, None) => {
                if let Some(m) = s.bindings.get_mut(ns) {
                    m.remove(name);
                    if m.is_empty() {
                        s.bindings.remove(ns);
                    }
                }
            }
        }
    }

    /// Calls `visit` with the rules of each role bound to `user` that apply in `ns`
    /// (cluster-wide ones first), until it returns true; a binding whose role is missing
    /// adds to `errors`. Returns whether a visit returned true.
    fn visit(
        &self,
        user: &User,
        ns: &str,
        errors: &mut Vec<String>,
        mut visit: impl FnMut(&[Rule]) -> bool,
    ) -> bool {
        let s = self.state.read().unwrap_or_else(|e| e.into_inner());
        for b in s.cluster_bindings.values() {
            if !b.subjects.iter().any(|sub| sub.is(user, "")) {
                continue;
            }
            match s.cluster_roles.get(&b.role_ref.name) {
                Some(rules) if b.role_ref.kind == "ClusterRole" => {
                    if visit(rules) {
                        return true;
                    }
                }
                _ => errors.push(format!(
                    "clusterrole.rbac.authorization.k8s.io {:?} not found",
                    b.role_ref.name
                )),
            }
        }
        if ns.is_empty() {
            return false;
        }
        for b in s.bindings.get(ns).into_iter().flat_map(|m| m.values()) {
            if !b.subjects.iter().any(|sub| sub.is(user, ns)) {
                continue;
            }
            let (rules, what) = match b.role_ref.kind.as_str() {
                "ClusterRole" => (s.cluster_roles.get(&b.role_ref.name), "clusterrole"),
                _ => (
                    s.roles.get(ns).and_then(|m| m.get(&b.role_ref.name)),
                    "role",
                ),
            };
            match rules {
                Some(rules) => {
                    if visit(rules) {
                        return true;
                    }
                }
                None => errors.push(format!(
                    "{what}.rbac.authorization.k8s.io {:?} not found",
                    b.role_ref.name
                )),
            }
        }
        false
    }

    /// Whether `user` may do what `a` asks.
    pub fn authorize(&self, user: &User, a: &Attributes) -> Decision {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let ns = a.resource.as_ref().map_or("", |r| r.namespace.as_str());
        let mut errors = Vec::new();
        let allowed = self.visit(user, ns, &mut errors, |rules| {
            rules.iter().any(|r| r.allows(a))
        });
        let reason = if allowed {
            "RBAC: allowed".to_string()
        } else {
            match errors.len() {
                0 => String::new(),
                1 => format!("RBAC: {}", errors[0]),
                _ => format!("RBAC: [{}]", errors.join(", ")),
            }
        };
        Decision { allowed, reason }
    }

    /// Every rule RBAC gives `user` in `ns` (cluster-wide ones too), for
    /// SelfSubjectRulesReviews and escalation checks (`system:masters` holds its rights
    /// without rules, as upstream; the default `cluster-admin` binding lists them).
    pub fn rules_for(&self, user: &User, ns: &str) -> Vec<Rule> {
        let mut out = Vec::new();
        self.visit(user, ns, &mut Vec::new(), |rules| {
            out.extend(rules.iter().cloned());
            false
        });
        out
    }

    /// The rules of the role `role_ref` names, as bound in `ns` (empty for a cluster
    /// binding), or `None` when it does not exist.
    pub fn role_rules(&self, role_ref: &RoleRef, ns: &str) -> Option<Vec<Rule>> {
        let s = self.state.read().unwrap_or_else(|e| e.into_inner());
        let rules = match role_ref.kind.as_str() {
            "ClusterRole" => s.cluster_roles.get(&role_ref.name),
            _ => s.roles.get(ns).and_then(|m| m.get(&role_ref.name)),
        };
        rules.map(|r| r.to_vec())
    }
}

/// The rules of `wanted` that `held` do not cover, each broken down to one verb, group,
/// resource (and name, or URL) as upstream's `Covers` does.
pub fn not_covered(held: &[Rule], wanted: &[Rule]) -> Vec<Rule> {
    let mut missing = Vec::new();
    for atom in wanted.iter().flat_map(atoms) {
        if !held.iter().any(|h| covers(h, &atom)) {
            missing.push(atom);
        }
    }
    missing
}

/// One rule per verb and group and resource (and name), or per verb and URL.
fn atoms(r: &Rule) -> Vec<Rule> {
    let mut out = Vec::new();
    for verb in &r.verbs {
        for g in &r.api_groups {
            for res in &r.resources {
                let one = |names: Vec<String>| Rule {
                    verbs: vec![verb.clone()],
                    api_groups: vec![g.clone()],
                    resources: vec![res.clone()],
                    resource_names: names,
                    non_resource_urls: Vec::new(),
                };
                if r.resource_names.is_empty() {
                    out.push(one(Vec::new()));
                } else {
                    out.extend(r.resource_names.iter().map(|n| one(vec![n.clone()])));
                }
            }
        }
        for u in &r.non_resource_urls {
            out.push(Rule {
                verbs: vec![verb.clone()],
                non_resource_urls: vec![u.clone()],
                ..Rule::default()
            });
        }
    }
    out
}

/// Upstream's `ruleCovers` for one atomic rule `sub`.
fn covers(owner: &Rule, sub: &Rule) -> bool {
    let has = |l: &[String], v: &str| l.iter().any(|x| x == v);
    let all = |l: &[String], of: &[String]| of.iter().all(|v| has(l, v));
    let verbs = has(&owner.verbs, "*") || all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || all(&owner.api_groups, &sub.api_groups);
    let resources = has(&owner.resources, "*")
        || sub.resources.iter().all(|r| {
            has(&owner.resources, r)
                || r.split_once('/')
                    .is_some_and(|(_, s)| has(&owner.resources, &format!("*/{s}")))
        });
    let urls = sub.non_resource_urls.iter().all(|u| {
        owner
            .non_resource_urls
            .iter()
            .any(|o| o == u || o.strip_suffix('*').is_some_and(|p| u.starts_with(p)))
    });
    let names = owner.resource_names.is_empty()
        || (!sub.resource_names.is_empty() && all(&owner.resource_names, &sub.resource_names));
    verbs && groups && resources && names && urls
}

/// A rule as upstream's `CompactString` prints it: `{APIGroups:[""], Resources:["secrets"],
/// Verbs:["get"]}`.
pub fn compact(r: &Rule) -> String {
    let q = |l: &[String]| {
        let items: Vec<String> = l.iter().map(|s| format!("{s:?}")).collect();
        format!("[{}]", items.join(" "))
    };
    let mut parts = Vec::new();
    for (name, list) in [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("NonResourceURLs", &r.non_resource_urls),
        ("ResourceNames", &r.resource_names),
        ("Verbs", &r.verbs),
    ] {
        if !list.is_empty() {
            parts.push(format!("{name}:{}", q(list)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_string()).collect(),
            ..User::default()
        }
    }

    fn res(verb: &str, group: &str, resource: &str, sub: Option<&str>, name: &str) -> Attributes {
        Attributes::resource(
            verb,
            ResourceAttributes {
                group: group.into(),
                resource: resource.into(),
                subresource: sub.map(str::to_string),
                namespace: "team".into(),
                name: (!name.is_empty()).then(|| name.to_string()),
            },
        )
    }

    #[test]
    fn rules_match_as_upstream() {
        let r = Rule::new(&["get"], &[""], &["pods", "*/status"]);
        assert!(r.allows(&res("get", "", "pods", None, "")));
        assert!(!r.allows(&res("list", "", "pods", None, "")));
        assert!(!r.allows(&res("get", "apps", "pods", None, "")));
        assert!(!r.allows(&res("get", "", "pods", Some("log"), "")));
        assert!(r.allows(&res("get", "", "deployments", Some("status"), "")));
        let named = Rule {
            resource_names: vec!["a".into()],
            ..Rule::new(&["*"], &["*"], &["secrets"])
        };
        assert!(named.allows(&res("delete", "", "secrets", None, "a")));
        assert!(!named.allows(&res("delete", "", "secrets", None, "b")));
        assert!(!named.allows(&res("list", "", "secrets", None, "")));
        let urls = Rule::urls(&["get"], &["/healthz", "/apis/*"]);
        assert!(urls.allows(&Attributes::path("get", "/healthz")));
        assert!(urls.allows(&Attributes::path("get", "/apis/apps/v1")));
        assert!(!urls.allows(&Attributes::path("get", "/healthz/etcd")));
        assert!(!urls.allows(&Attributes::path("post", "/healthz")));
        assert!(!urls.allows(&res("get", "", "pods", None, "")));
    }

    #[test]
    fn bindings_grant_their_roles_in_their_namespace() {
        let idx = Index::default();
        let sa = user(
            "system:serviceaccount:team:bot",
            &["system:serviceaccounts", "system:authenticated"],
        );
        let get = res("get", "", "secrets", None, "x");
        assert!(!idx.authorize(&sa, &get).allowed);
        idx.put(
            Held::Role,
            "team",
            "reader",
            Some(&serde_json::json!({"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]})),
        );
        idx.put(
            Held::RoleBinding,
            "team",
            "b",
            Some(
                &serde_json::json!({"roleRef": {"kind": "Role", "name": "reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "bot"}]}),
            ),
        );
        assert!(idx.authorize(&sa, &get).allowed);
        let elsewhere = Attributes::resource(
            "get",
            ResourceAttributes {
                namespace: "other".into(),
                ..get.resource.clone().unwrap()
            },
        );
        assert!(!idx.authorize(&sa, &elsewhere).allowed);
        idx.put(Held::Role, "team", "reader", None);
        let d = idx.authorize(&sa, &get);
        assert!(!d.allowed);
        assert_eq!(
            d.reason,
            "RBAC: role.rbac.authorization.k8s.io \"reader\" not found"
        );
        assert!(idx.authorize(&user("admin", &[MASTERS]), &get).allowed);
    }

    #[test]
    fn coverage_breaks_rules_down() {
        let held = vec![
            Rule::new(&["get", "list"], &[""], &["pods", "secrets"]),
            Rule::urls(&["get"], &["/apis/*"]),
        ];
        assert!(not_covered(&held, &[Rule::new(&["get"], &[""], &["pods"])]).is_empty());
        let missing = not_covered(&held, &[Rule::new(&["get", "delete"], &[""], &["secrets"])]);
        assert_eq!(missing.len(), 1);
        assert_eq!(
            compact(&missing[0]),
            "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"delete\"]}"
        );
        assert!(not_covered(&held, &[Rule::urls(&["get"], &["/apis/apps"])]).is_empty());
        assert_eq!(
            not_covered(&held, &[Rule::new(&["*"], &[""], &["pods"])]).len(),
            1
        );
    }
}
