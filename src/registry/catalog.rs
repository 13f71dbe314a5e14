//! The resource catalog: every kind berth serves, each a descriptor that the engine
//! serves without knowing which kind it is: the names, scope, verbs and subresources that
//! discovery advertises, the fields a selector may name, its schema, its Table columns,
//! how it is stored and its [`Strategy`]. Adding a kind is one entry here (with its
//! strategy, printer and schema).

use super::convert::Conversion;
use super::schema::Source;
use super::strategy::{self, Strategy};
use super::table::{self, Printer};

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

/// A subresource beyond `status` and `scale`, as discovery lists it.
pub struct Subresource {
    pub name: &'static str,
    pub verbs: &'static [&'static str],
    /// The kind of its body.
    pub kind: &'static str,
}

/// One served resource: a kind's descriptor.
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
    pub verbs: &'static [&'static str],
    /// Subresources beyond `status` and `scale`.
    pub subresources: &'static [Subresource],
    /// Fields a field selector may name, besides `metadata.name` and `metadata.namespace`.
    pub selectable: &'static [&'static str],
    /// Defaults, rules, the spec/status split, deletion and admission.
    pub strategy: &'static dyn Strategy,
    pub schema: Source,
    /// Its Table columns.
    pub table: &'static Printer,
    /// How it is stored, when as another resource.
    pub conversion: Option<&'static Conversion>,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("group", &self.group)
            .field("version", &self.version)
            .field("plural", &self.plural)
            .finish_non_exhaustive()
    }
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
        if let Some(c) = self.conversion {
            return of(c.stored).key_prefix();
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
}

const ALL: &[&str] = &["all"];

/// What most kinds can be asked to do.
const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

const fn sub(
    name: &'static str,
    verbs: &'static [&'static str],
    kind: &'static str,
) -> Subresource {
    Subresource { name, verbs, kind }
}

use k8s_openapi::api::coordination::v1 as coordination;
use k8s_openapi::api::core::v1 as core;

/// Every served resource, in discovery order.
pub static RESOURCES: [Resource; 12] = [
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
        verbs: VERBS,
        subresources: &[
            // What the node agent and the scheduler serve of a pod.
            sub("attach", &["create", "get"], "PodAttachOptions"),
            sub("binding", &["create"], "Binding"),
            sub("exec", &["create", "get"], "PodExecOptions"),
            sub("log", &["get"], "Pod"),
        ],
        selectable: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        strategy: &strategy::Pod,
        schema: Source::typed::<core::Pod>(),
        table: &table::POD,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[],
        selectable: &["status.replicas"],
        strategy: &strategy::ReplicationController,
        schema: Source::typed::<core::ReplicationController>(),
        table: &table::REPLICATION_CONTROLLER,
        conversion: None,
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
        // As Kubernetes: namespaces go one at a time.
        verbs: &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
        subresources: &[sub("finalize", &["update"], "Namespace")],
        selectable: &["status.phase"],
        strategy: &strategy::Namespace,
        schema: Source::typed::<core::Namespace>(),
        table: &table::NAMESPACE,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[sub(
            "proxy",
            &["create", "delete", "get", "patch", "update"],
            "NodeProxyOptions",
        )],
        selectable: &["spec.unschedulable"],
        strategy: &strategy::Node,
        schema: Source::typed::<core::Node>(),
        table: &table::NODE,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[],
        selectable: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        strategy: &strategy::Event,
        schema: Source::typed::<core::Event>(),
        table: &table::EVENT,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[],
        selectable: &[],
        strategy: &strategy::ConfigMap,
        schema: Source::typed::<core::ConfigMap>(),
        table: &table::CONFIG_MAP,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[],
        selectable: &["type"],
        strategy: &strategy::Secret,
        schema: Source::typed::<core::Secret>(),
        table: &table::SECRET,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[],
        selectable: &[],
        strategy: &strategy::Plain,
        schema: Source::typed::<core::ServiceAccount>(),
        table: &table::SERVICE_ACCOUNT,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[],
        selectable: &["spec.clusterIP", "spec.type"],
        strategy: &super::service::Service,
        schema: Source::typed::<core::Service>(),
        table: &table::SERVICE,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[],
        selectable: &[],
        strategy: &strategy::Lease,
        schema: Source::typed::<coordination::Lease>(),
        table: &table::LEASE,
        conversion: None,
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
        verbs: VERBS,
        subresources: &[],
        selectable: &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        strategy: &strategy::EventsV1Event,
        schema: Source::typed::<k8s_openapi::api::events::v1::Event>(),
        table: &table::EVENTS_V1_EVENT,
        conversion: Some(&super::convert::EVENTS_V1),
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
        verbs: VERBS,
        subresources: &[
            sub("instantiate", &["create"], "DeploymentRequest"),
            sub("log", &["get"], "DeploymentLog"),
            sub("rollback", &["create"], "DeploymentConfigRollback"),
        ],
        selectable: &[],
        strategy: &super::deploymentconfig::DeploymentConfig,
        schema: Source::new(
            super::deploymentconfig::schema::name,
            super::deploymentconfig::schema::add_referenced,
        ),
        table: &table::DEPLOYMENT_CONFIG,
        conversion: None,
    },
];

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
        for r in &RESOURCES {
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
