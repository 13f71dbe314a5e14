//! The resource catalog: every kind berth serves, with the names, scope, verbs and
//! subresources that discovery advertises. Adding a kind is one entry here plus its arm in
//! `strategy.rs`.

/// The closed set of kinds berth serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Namespace,
    Pod,
    ReplicationController,
    Event,
    Node,
    ConfigMap,
    Secret,
    ServiceAccount,
    /// core/v1 Service: stored with an allocated cluster IP and node ports (see
    /// `registry::service`); no proxy carries its traffic yet.
    Service,
    Lease,
    /// events.k8s.io/v1 Event: the core Events, seen through the newer API.
    EventsV1Event,
    /// apps.openshift.io/v1 DeploymentConfig (see `registry::deploymentconfig`).
    DeploymentConfig,
}

/// One served resource.
#[derive(Debug)]
pub struct Resource {
    pub kind: Kind,
    /// API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind_name: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub namespaced: bool,
    pub categories: &'static [&'static str],
    /// Has a `/status` subresource (spec and status are written separately).
    pub status: bool,
    /// Has a `/scale` subresource.
    pub scale: bool,
}

impl Resource {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind_name)
    }

    /// `pods` or `leases.coordination.k8s.io`, as error messages name resources.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The store key prefix of this resource: `/registry/pods/` or
    /// `/registry/coordination.k8s.io/leases/`. Kinds stored as another kind share its keys.
    pub fn key_prefix(&self) -> String {
        if let Some(stored) = super::convert::stored_as(self.kind) {
            return of(stored).key_prefix();
        }
        if self.group.is_empty() {
            format!("/registry/{}/", self.plural)
        } else {
            format!("/registry/{}/{}/", self.group, self.plural)
        }
    }

    /// The store key prefix of one namespace's objects (or all, for `None`).
    pub fn scope_prefix(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/", self.key_prefix()),
            _ => self.key_prefix(),
        }
    }

    /// The store key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.key_prefix()),
            _ => format!("{}{name}", self.key_prefix()),
        }
    }

    pub fn verbs(&self) -> &'static [&'static str] {
        if self.kind == Kind::Namespace {
            // As Kubernetes: namespaces go one at a time.
            return &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ];
        }
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

const ALL: &[&str] = &["all"];

/// Every served resource, in discovery order.
pub static RESOURCES: &[Resource] = &[
    Resource {
        kind: Kind::Pod,
        group: "",
        version: "v1",
        kind_name: "Pod",
        plural: "pods",
        singular: "pod",
        short_names: &["po"],
        namespaced: true,
        categories: ALL,
        status: true,
        scale: false,
    },
    Resource {
        kind: Kind::ReplicationController,
        group: "",
        version: "v1",
        kind_name: "ReplicationController",
        plural: "replicationcontrollers",
        singular: "replicationcontroller",
        short_names: &["rc"],
        namespaced: true,
        categories: ALL,
        status: true,
        scale: true,
    },
    Resource {
        kind: Kind::Namespace,
        group: "",
        version: "v1",
        kind_name: "Namespace",
        plural: "namespaces",
        singular: "namespace",
        short_names: &["ns"],
        namespaced: false,
        categories: &[],
        status: true,
        scale: false,
    },
    Resource {
        kind: Kind::Node,
        group: "",
        version: "v1",
        kind_name: "Node",
        plural: "nodes",
        singular: "node",
        short_names: &["no"],
        namespaced: false,
        categories: &[],
        status: true,
        scale: false,
    },
    Resource {
        kind: Kind::Event,
        group: "",
        version: "v1",
        kind_name: "Event",
        plural: "events",
        singular: "event",
        short_names: &["ev"],
        namespaced: true,
        categories: &[],
        status: false,
        scale: false,
    },
    Resource {
        kind: Kind::ConfigMap,
        group: "",
        version: "v1",
        kind_name: "ConfigMap",
        plural: "configmaps",
        singular: "configmap",
        short_names: &["cm"],
        namespaced: true,
        categories: &[],
        status: false,
        scale: false,
    },
    Resource {
        kind: Kind::Secret,
        group: "",
        version: "v1",
        kind_name: "Secret",
        plural: "secrets",
        singular: "secret",
        short_names: &[],
        namespaced: true,
        categories: &[],
        status: false,
        scale: false,
    },
    Resource {
        kind: Kind::ServiceAccount,
        group: "",
        version: "v1",
        kind_name: "ServiceAccount",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        short_names: &["sa"],
        namespaced: true,
        categories: &[],
        status: false,
        scale: false,
    },
    Resource {
        kind: Kind::Service,
        group: "",
        version: "v1",
        kind_name: "Service",
        plural: "services",
        singular: "service",
        short_names: &["svc"],
        namespaced: true,
        categories: ALL,
        status: true,
        scale: false,
    },
    Resource {
        kind: Kind::Lease,
        group: "coordination.k8s.io",
        version: "v1",
        kind_name: "Lease",
        plural: "leases",
        singular: "lease",
        short_names: &[],
        namespaced: true,
        categories: &[],
        status: false,
        scale: false,
    },
    Resource {
        kind: Kind::EventsV1Event,
        group: "events.k8s.io",
        version: "v1",
        kind_name: "Event",
        plural: "events",
        singular: "event",
        short_names: &[],
        namespaced: true,
        categories: &[],
        status: false,
        scale: false,
    },
    Resource {
        kind: Kind::DeploymentConfig,
        group: "apps.openshift.io",
        version: "v1",
        kind_name: "DeploymentConfig",
        plural: "deploymentconfigs",
        singular: "deploymentconfig",
        short_names: &["dc"],
        namespaced: true,
        categories: ALL,
        status: true,
        scale: true,
    },
];

/// Subresources a kind serves beyond `status` and `scale`, with their verbs and the kind
/// of their body, as discovery lists them.
pub fn extra_subresources(
    kind: Kind,
) -> &'static [(&'static str, &'static [&'static str], &'static str)] {
    match kind {
        Kind::DeploymentConfig => &[
            ("instantiate", &["create"], "DeploymentRequest"),
            ("log", &["get"], "DeploymentLog"),
            ("rollback", &["create"], "DeploymentConfigRollback"),
        ],
        // What the node agent and the scheduler serve of a pod.
        Kind::Pod => &[
            ("attach", &["create", "get"], "PodAttachOptions"),
            ("binding", &["create"], "Binding"),
            ("exec", &["create", "get"], "PodExecOptions"),
            ("log", &["get"], "Pod"),
        ],
        Kind::Namespace => &[("finalize", &["update"], "Namespace")],
        Kind::Node => &[(
            "proxy",
            &["create", "delete", "get", "patch", "update"],
            "NodeProxyOptions",
        )],
        _ => &[],
    }
}

/// The resource served at `group`/`version` under `plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of a kind.
pub fn of(kind: Kind) -> &'static Resource {
    RESOURCES
        .iter()
        .find(|r| r.kind == kind)
        .expect("every kind is in the catalog")
}

/// The API groups (other than core) with their versions, in discovery order.
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version);
                }
            }
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_nest_namespaces_under_resources() {
        let pods = of(Kind::Pod);
        assert_eq!(
            pods.key(Some("default"), "web"),
            "/registry/pods/default/web"
        );
        assert_eq!(
            pods.scope_prefix(Some("default")),
            "/registry/pods/default/"
        );
        assert_eq!(pods.scope_prefix(None), "/registry/pods/");
        let ns = of(Kind::Namespace);
        assert_eq!(ns.key(None, "default"), "/registry/namespaces/default");
        let lease = of(Kind::Lease);
        assert_eq!(
            lease.key(Some("kube-node-lease"), "n1"),
            "/registry/coordination.k8s.io/leases/kube-node-lease/n1"
        );
        assert_eq!(lease.api_version(), "coordination.k8s.io/v1");
    }

    #[test]
    fn names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for r in RESOURCES {
            assert!(seen.insert((r.group, r.plural)), "{} twice", r.plural);
            let _ = r.version;
            for s in r.short_names {
                assert!(seen.insert(("short", s)), "short name {s} twice");
            }
        }
        assert_eq!(
            groups(),
            vec![
                ("coordination.k8s.io", vec!["v1"]),
                ("events.k8s.io", vec!["v1"]),
                ("apps.openshift.io", vec!["v1"])
            ]
        );
        assert_eq!(of(Kind::EventsV1Event).key_prefix(), "/registry/events/");
    }
}
