//! The default ClusterRoles and ClusterRoleBindings, as kube-apiserver's bootstrap policy
//! makes them (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`), labelled
//! `kubernetes.io/bootstrapping: rbac-defaults` and annotated
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`, reconciled at every start: a
//! missing one is made, one still marked for autoupdate gets back the rules, subjects,
//! labels and annotations it lacks (what was added to it stays). Also OpenShift's
//! `system:deployer`, which the `deployer` service account of each namespace is bound to
//! (the DeploymentConfig deployer pods act with it).

use serde_json::{Value, json};

use super::{AUTOUPDATE, BOOTSTRAPPING, GROUP, MASTERS, Rule};
use crate::registry::catalog::{self, Kind};
use crate::registry::{Error, Part, Registry, Result, WriteOptions};

/// The label that puts a role's rules into `admin`, `edit` or `view`.
pub const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";
/// The ClusterRole the deployer service accounts are bound to (by the RoleBinding
/// `system:deployers` the service-account controller makes in each namespace).
pub const DEPLOYER_ROLE: &str = "system:deployer";

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ_WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];
const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTHENTICATION: &str = "authentication.k8s.io";
const OPENSHIFT_APPS: &str = "apps.openshift.io";

fn meta(name: &str, labels: Value) -> Value {
    let mut labels = labels;
    labels[BOOTSTRAPPING] = json!("rbac-defaults");
    json!({"name": name, "labels": labels, "annotations": {AUTOUPDATE: "true"}})
}

fn role(name: &str, labels: Value, rules: Vec<Rule>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": meta(name, labels), "rules": rules})
}

/// A role whose rules are those of the roles labelled `aggregate-to-<into>`.
fn aggregated(name: &str, labels: Value, into: &str) -> Value {
    let mut r = role(name, labels, Vec::new());
    r["aggregationRule"] = json!({"clusterRoleSelectors": [
        {"matchLabels": {format!("{AGGREGATE_TO}{into}"): "true"}}
    ]});
    r
}

fn aggregate_label(into: &str) -> Value {
    json!({format!("{AGGREGATE_TO}{into}"): "true"})
}

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let r = Rule::new;
    vec![
        role(
            "cluster-admin",
            json!({}),
            vec![r(&["*"], &["*"], &["*"]), Rule::urls(&["*"], &["*"])],
        ),
        role(
            "system:discovery",
            json!({}),
            vec![Rule::urls(
                &["get"],
                &[
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/version",
                    "/version/",
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
            )],
        ),
        role(
            "system:monitoring",
            json!({}),
            vec![Rule::urls(
                &["get"],
                &[
                    "/metrics",
                    "/metrics/slis",
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/livez/*",
                    "/readyz/*",
                    "/healthz/*",
                ],
            )],
        ),
        role(
            "system:basic-user",
            json!({}),
            vec![
                r(
                    &["create"],
                    &[AUTHORIZATION],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                r(&["create"], &[AUTHENTICATION], &["selfsubjectreviews"]),
            ],
        ),
        role(
            "system:public-info-viewer",
            json!({}),
            vec![Rule::urls(
                &["get"],
                &["/livez", "/readyz", "/healthz", "/version", "/version/"],
            )],
        ),
        aggregated("admin", json!({}), "admin"),
        aggregated("edit", aggregate_label("admin"), "edit"),
        aggregated("view", aggregate_label("edit"), "view"),
        role(
            "system:aggregate-to-admin",
            aggregate_label("admin"),
            vec![
                r(
                    &["create"],
                    &[AUTHORIZATION],
                    &["localsubjectaccessreviews"],
                ),
                r(READ_WRITE, &[GROUP], &["roles", "rolebindings"]),
            ],
        ),
        role(
            "system:aggregate-to-edit",
            aggregate_label("edit"),
            edit_rules(),
        ),
        role(
            "system:aggregate-to-view",
            aggregate_label("view"),
            view_rules(),
        ),
        role(
            DEPLOYER_ROLE,
            json!({}),
            vec![
                r(
                    &["get", "list", "watch", "patch", "update", "delete"],
                    &[""],
                    &["replicationcontrollers"],
                ),
                // berth's deployer scales by patching the Scale; its event recorder
                // patches the events it repeats.
                r(
                    &["get", "update", "patch"],
                    &[""],
                    &["replicationcontrollers/scale"],
                ),
                r(&["get", "list", "watch", "create"], &[""], &["pods"]),
                r(&["get"], &[""], &["pods/log"]),
                r(&["create", "list", "patch"], &[""], &["events"]),
            ],
        ),
    ]
}

fn edit_rules() -> Vec<Rule> {
    let r = Rule::new;
    vec![
        r(
            READ,
            &[""],
            &[
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward",
                "secrets",
                "services/proxy",
            ],
        ),
        r(&["impersonate"], &[""], &["serviceaccounts"]),
        r(
            WRITE,
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward",
            ],
        ),
        r(&["create"], &[""], &["pods/eviction"]),
        r(
            WRITE,
            &[""],
            &[
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/proxy",
                "persistentvolumeclaims",
                "configmaps",
                "secrets",
                "events",
            ],
        ),
        r(&["create"], &[""], &["serviceaccounts/token"]),
        r(
            WRITE,
            &["apps"],
            &[
                "statefulsets",
                "statefulsets/scale",
                "daemonsets",
                "deployments",
                "deployments/scale",
                "deployments/rollback",
                "replicasets",
                "replicasets/scale",
            ],
        ),
        r(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        r(WRITE, &["batch"], &["jobs", "cronjobs"]),
        r(WRITE, &["policy"], &["poddisruptionbudgets"]),
        r(
            WRITE,
            &["networking.k8s.io"],
            &["networkpolicies", "ingresses"],
        ),
        r(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
        // OpenShift's edit rules of DeploymentConfigs.
        r(
            WRITE,
            &[OPENSHIFT_APPS],
            &[
                "deploymentconfigs",
                "deploymentconfigs/scale",
                "deploymentconfigs/instantiate",
                "deploymentconfigs/rollback",
            ],
        ),
    ]
}

fn view_rules() -> Vec<Rule> {
    let r = Rule::new;
    vec![
        r(
            READ,
            &[""],
            &[
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "configmaps",
            ],
        ),
        r(
            READ,
            &[""],
            &[
                "limitranges",
                "resourcequotas",
                "bindings",
                "events",
                "pods/status",
                "resourcequotas/status",
                "namespaces/status",
                "replicationcontrollers/status",
                "pods/log",
            ],
        ),
        r(READ, &[""], &["namespaces"]),
        r(READ, &["discovery.k8s.io"], &["endpointslices"]),
        r(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "statefulsets",
                "statefulsets/status",
                "statefulsets/scale",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/status",
                "deployments/scale",
                "replicasets",
                "replicasets/status",
                "replicasets/scale",
            ],
        ),
        r(
            READ,
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        r(
            READ,
            &["batch"],
            &["jobs", "cronjobs", "cronjobs/status", "jobs/status"],
        ),
        r(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        r(
            READ,
            &["networking.k8s.io"],
            &["networkpolicies", "ingresses", "ingresses/status"],
        ),
        // OpenShift's view rules of DeploymentConfigs.
        r(
            READ,
            &[OPENSHIFT_APPS],
            &[
                "deploymentconfigs",
                "deploymentconfigs/scale",
                "deploymentconfigs/status",
                "deploymentconfigs/log",
            ],
        ),
    ]
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "apiGroup": GROUP, "name": name})
}

fn binding(name: &str, role: &str, subjects: Vec<Value>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": meta(name, json!({})),
           "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
           "subjects": subjects})
}

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", "cluster-admin", vec![group(MASTERS)]),
        binding(
            "system:discovery",
            "system:discovery",
            vec![group("system:authenticated")],
        ),
        binding(
            "system:monitoring",
            "system:monitoring",
            vec![group("system:monitoring")],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            vec![group("system:authenticated")],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            vec![
                group("system:authenticated"),
                group("system:unauthenticated"),
            ],
        ),
    ]
}

/// `existing` with what it lacks of `wanted`: labels, annotations, the list `field`'s
/// items (rules or subjects), and a role's aggregation rule; `None` when it lacks
/// nothing.
fn reconciled(existing: &Value, wanted: &Value, field: &str) -> Option<Value> {
    let mut out = existing.clone();
    for part in ["labels", "annotations"] {
        for (k, v) in wanted["metadata"][part].as_object().into_iter().flatten() {
            if out["metadata"][part].get(k) != Some(v) {
                out["metadata"][part][k] = v.clone();
            }
        }
    }
    if let Some(agg) = wanted.get("aggregationRule") {
        out["aggregationRule"] = agg.clone();
    } else {
        let have = out[field].as_array().cloned().unwrap_or_default();
        let mut list = have.clone();
        for item in wanted[field].as_array().into_iter().flatten() {
            if !have.contains(item) {
                list.push(item.clone());
            }
        }
        out[field] = json!(list);
    }
    (out != *existing).then_some(out)
}

/// Makes or brings up to date every default role and binding (see the module's text).
pub async fn reconcile(reg: &Registry) -> Result<()> {
    let work = [
        (Kind::ClusterRole, cluster_roles(), "rules"),
        (
            Kind::ClusterRoleBinding,
            cluster_role_bindings(),
            "subjects",
        ),
    ];
    let opts = WriteOptions::default();
    for (kind, objects, field) in work {
        let res = catalog::of(kind);
        for wanted in objects {
            let name = wanted["metadata"]["name"].as_str().unwrap_or_default();
            let existing = match reg.get(res, None, name) {
                Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                    .map_err(|e| Error::Internal(format!("stored {name}: {e}")))?,
                Err(Error::NotFound { .. }) => {
                    match reg.create(res, None, wanted.clone(), &opts).await {
                        Ok(_) | Err(Error::AlreadyExists { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            if existing["metadata"]["annotations"][AUTOUPDATE] != "true" {
                continue;
            }
            if let Some(updated) = reconciled(&existing, &wanted, field) {
                match reg
                    .update(res, None, name, updated, Part::Main, &opts)
                    .await
                {
                    // Changed meanwhile: the next start brings it up to date.
                    Ok(_) | Err(Error::Conflict { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciling_adds_what_is_missing_and_keeps_additions() {
        let wanted = binding("b", "r", vec![group("a")]);
        let mut existing = wanted.clone();
        existing["subjects"] = json!([group("mine")]);
        existing["metadata"]["labels"] = json!({"team": "x"});
        let out = reconciled(&existing, &wanted, "subjects").unwrap();
        assert_eq!(out["subjects"], json!([group("mine"), group("a")]));
        assert_eq!(out["metadata"]["labels"]["team"], "x");
        assert_eq!(out["metadata"]["labels"][BOOTSTRAPPING], "rbac-defaults");
        assert_eq!(reconciled(&out, &wanted, "subjects"), None);
    }

    #[test]
    fn the_defaults_pass_their_own_rules() {
        for r in cluster_roles() {
            let rules: Vec<Rule> = serde_json::from_value(r["rules"].clone()).unwrap();
            assert!(rules.iter().all(|r| !r.verbs.is_empty()), "{r:?}");
        }
        assert_eq!(cluster_role_bindings()[0]["subjects"][0]["name"], MASTERS);
    }
}
