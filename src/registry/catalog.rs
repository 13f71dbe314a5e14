//! The resource catalog: every kind berth serves, each a descriptor that the engine
//! serves without knowing which kind it is: the names, scope, verbs and subresources that
//! discovery advertises, the fields a selector may name, its schema, its Table columns,
//! how it is stored and its [`Strategy`]. Adding a kind is one entry here (with its
//! strategy, printer and schema).

use std::sync::{Arc, LazyLock};

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
    /// core/v1 Endpoints: a Service's addresses, kept by the endpoints controller (see
    /// `registry::endpoints`).
    Endpoints,
    /// discovery.k8s.io/v1 EndpointSlice: a Service's addresses in slices, kept by the
    /// endpoint slice controller (see `registry::endpoints`).
    EndpointSlice,
    /// core/v1 PodTemplate: a stored pod template, nothing runs it.
    PodTemplate,
    Lease,
    /// events.k8s.io/v1 Event: the core Events, seen through the newer API.
    EventsV1Event,
    /// apps.openshift.io/v1 DeploymentConfig (see `registry::deploymentconfig`).
    DeploymentConfig,
    /// apiextensions.k8s.io/v1 CustomResourceDefinition (see `registry::crd`).
    CustomResourceDefinition,
    /// apps/v1 Deployment (see `registry::apps`).
    Deployment,
    /// apps/v1 ReplicaSet (see `registry::apps`).
    ReplicaSet,
    /// apps/v1 ControllerRevision (see `registry::apps`).
    ControllerRevision,
    /// batch/v1 Job (see `registry::batch`).
    Job,
    /// batch/v1 CronJob (see `registry::batch`).
    CronJob,
    /// apps/v1 DaemonSet (see `registry::apps`).
    DaemonSet,
    /// policy/v1 PodDisruptionBudget (see `registry::policy`).
    PodDisruptionBudget,
    /// apps/v1 StatefulSet (see `registry::apps`).
    StatefulSet,
    /// autoscaling/v2 HorizontalPodAutoscaler (see `registry::autoscaling`).
    HorizontalPodAutoscaler,
    /// autoscaling/v1 HorizontalPodAutoscaler: the v2 objects with only a CPU target.
    HorizontalPodAutoscalerV1,
    /// core/v1 PersistentVolumeClaim: stored, never bound (no volumes are provisioned).
    PersistentVolumeClaim,
    /// metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics: made when read from what the
    /// node agents measure (see `registry::metrics`).
    NodeMetrics,
    PodMetrics,
    /// node.k8s.io/v1 RuntimeClass (see `registry::node`).
    RuntimeClass,
    /// scheduling.k8s.io/v1 PriorityClass (see `registry::scheduling`).
    PriorityClass,
    /// networking.k8s.io/v1 Ingress, IngressClass and NetworkPolicy (see
    /// `registry::networking`): stored and validated; no ingress controller is built in
    /// and nothing enforces a NetworkPolicy yet.
    Ingress,
    IngressClass,
    NetworkPolicy,
    /// rbac.authorization.k8s.io/v1 (see `registry::rbac`).
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
    /// A kind that a CustomResourceDefinition serves.
    Custom,
}

/// A subresource beyond `status` and `scale`, as discovery lists it and the API routes
/// it.
#[derive(Debug, Clone)]
pub struct Subresource {
    pub name: &'static str,
    pub verbs: &'static [&'static str],
    /// The kind of its body.
    pub kind: &'static str,
    /// The group and version of that kind, when not the resource's own (a pod's
    /// `eviction` takes a policy/v1 Eviction).
    pub api: Option<(&'static str, &'static str)>,
    /// Who answers a request for it.
    pub serves: Serves,
}

/// Who answers a request for a subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// The kind's strategy carries it out ([`Strategy::act`]): a POST when its verb is
    /// `create`, a PUT when it is `update` (a pod's `binding` and `eviction`, a
    /// namespace's `finalize`, a DeploymentConfig's `instantiate` and `rollback`).
    Action,
    /// The log of a pod's containers, read from the node that runs it.
    PodLog,
    /// The log of a DeploymentConfig's latest deployment: its deployer pod's, then its
    /// pods'.
    DeploymentLog,
    /// Not on this path: routed on its own (a pod's `exec`, `attach` and `portforward`
    /// upgrade to a stream) or listed for discovery only (a node's `proxy`).
    Elsewhere,
}

impl Subresource {
    /// The method a request for it takes: PUT for an `update`, GET for a `get`, else POST.
    pub fn method(&self) -> &'static str {
        match self.verbs.first() {
            Some(&"update") => "PUT",
            Some(&"get") => "GET",
            _ => "POST",
        }
    }
}

/// The verbs of a `proxy` subresource (the methods a proxied request may take).
const PROXY_VERBS: &[&str] = &["create", "delete", "get", "patch", "update"];

/// One served resource: a kind's descriptor, shared as an `Arc` (the built-in kinds'
/// live as long as the process; a custom resource's as long as its definition serves it).
pub struct Resource {
    /// Which built-in kind this is ([`Kind::Custom`] for a kind a definition adds).
    pub kind: Kind,
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    pub kind_name: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    pub categories: Vec<String>,
    /// Has a `/status` subresource (spec and status are written separately).
    pub status: bool,
    /// Objects carry `metadata.generation`, moved by changes the strategy says move it.
    pub generation: bool,
    /// Has a `/scale` subresource.
    pub scale: bool,
    pub verbs: &'static [&'static str],
    /// Subresources beyond `status` and `scale`.
    pub subresources: Vec<Subresource>,
    /// Fields a field selector may name, besides `metadata.name` and `metadata.namespace`.
    pub selectable: Vec<String>,
    /// Defaults, rules, the spec/status split, deletion and admission.
    pub strategy: Arc<dyn Strategy>,
    pub schema: Source,
    /// Its Table columns.
    pub table: Arc<dyn Printer>,
    /// How it is stored, when as another resource.
    pub conversion: Option<Conversion>,
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
    /// A resource as a client knows it from discovery: its names and scope, and the
    /// behaviour of a plain kind (the server applies the real one).
    pub fn identity(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
    ) -> Resource {
        Resource {
            kind: Kind::Custom,
            group: group.into(),
            version: version.into(),
            kind_name: kind.into(),
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            short_names: Vec::new(),
            namespaced,
            categories: Vec::new(),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: Vec::new(),
            strategy: Arc::new(strategy::Plain),
            schema: Source::custom(String::new(), serde_json::Map::new(), serde_json::json!({})),
            table: Arc::new(table::NAME_ONLY),
            conversion: None,
        }
    }

    /// What discovery says of the version objects are stored in (so a client sees when it
    /// changes): the first 8 bytes of the SHA-256 of its `group/version/kind`, in base64,
    /// as kube-apiserver computes it.
    pub fn storage_version_hash(&self) -> String {
        use base64::Engine as _;
        use sha2::Digest as _;
        let stored = super::convert::stored_resource(self);
        let r = stored.as_deref().unwrap_or(self);
        let digest = sha2::Sha256::digest(format!("{}/{}/{}", r.group, r.version, r.kind_name));
        base64::engine::general_purpose::STANDARD.encode(&digest[..8])
    }

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
        if let Some(stored) = super::convert::stored_resource(self) {
            return stored.key_prefix();
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

/// What a kind made when read can be asked to do.
const READ_ONLY: &[&str] = &["get", "list"];

/// What most kinds can be asked to do.
pub const VERBS: &[&str] = &[
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
    Subresource {
        name,
        verbs,
        kind,
        api: None,
        serves: Serves::Action,
    }
}

/// A subresource that the strategy does not carry out.
const fn served_by(sub: Subresource, serves: Serves) -> Subresource {
    Subresource { serves, ..sub }
}

/// A subresource whose body is a kind of another group and version.
const fn sub_in(
    group: &'static str,
    version: &'static str,
    name: &'static str,
    verbs: &'static [&'static str],
    kind: &'static str,
) -> Subresource {
    Subresource {
        api: Some((group, version)),
        ..sub(name, verbs, kind)
    }
}

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::coordination::v1 as coordination;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

/// The built-in kinds' names as owned strings.
fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_string()).collect()
}

/// The built-in kinds, in discovery order.
fn builtin() -> Vec<Resource> {
    vec![
        Resource {
            kind: Kind::Pod,
            group: "".into(),
            version: "v1".into(),
            kind_name: "Pod".into(),
            plural: "pods".into(),
            singular: "pod".into(),
            short_names: names(&["po"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![
                // What the node agent and the scheduler serve of a pod.
                served_by(
                    sub("attach", &["create", "get"], "PodAttachOptions"),
                    Serves::Elsewhere,
                ),
                sub("binding", &["create"], "Binding"),
                sub_in("policy", "v1", "eviction", &["create"], "Eviction"),
                served_by(
                    sub("exec", &["create", "get"], "PodExecOptions"),
                    Serves::Elsewhere,
                ),
                served_by(sub("log", &["get"], "Pod"), Serves::PodLog),
                served_by(
                    sub("portforward", &["create", "get"], "PodPortForwardOptions"),
                    Serves::Elsewhere,
                ),
                served_by(
                    sub("proxy", PROXY_VERBS, "PodProxyOptions"),
                    Serves::Elsewhere,
                ),
            ],
            selectable: names(&[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ]),
            strategy: Arc::new(strategy::Pod),
            schema: Source::typed::<core::Pod>(),
            table: Arc::new(table::POD),
            conversion: None,
        },
        Resource {
            kind: Kind::ReplicationController,
            group: "".into(),
            version: "v1".into(),
            kind_name: "ReplicationController".into(),
            plural: "replicationcontrollers".into(),
            singular: "replicationcontroller".into(),
            short_names: names(&["rc"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: true,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&["status.replicas"]),
            strategy: Arc::new(strategy::ReplicationController),
            schema: Source::typed::<core::ReplicationController>(),
            table: Arc::new(table::REPLICATION_CONTROLLER),
            conversion: None,
        },
        Resource {
            kind: Kind::Deployment,
            group: "apps".into(),
            version: "v1".into(),
            kind_name: "Deployment".into(),
            plural: "deployments".into(),
            singular: "deployment".into(),
            short_names: names(&["deploy"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: true,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::apps::Deployment),
            schema: Source::typed::<apps::Deployment>(),
            table: Arc::new(table::DEPLOYMENT),
            conversion: None,
        },
        Resource {
            kind: Kind::ReplicaSet,
            group: "apps".into(),
            version: "v1".into(),
            kind_name: "ReplicaSet".into(),
            plural: "replicasets".into(),
            singular: "replicaset".into(),
            short_names: names(&["rs"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: true,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&["status.replicas"]),
            strategy: Arc::new(super::apps::ReplicaSet),
            schema: Source::typed::<apps::ReplicaSet>(),
            table: Arc::new(table::REPLICA_SET),
            conversion: None,
        },
        Resource {
            kind: Kind::ControllerRevision,
            group: "apps".into(),
            version: "v1".into(),
            kind_name: "ControllerRevision".into(),
            plural: "controllerrevisions".into(),
            singular: "controllerrevision".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::apps::ControllerRevision),
            schema: Source::typed::<apps::ControllerRevision>(),
            table: Arc::new(table::CONTROLLER_REVISION),
            conversion: None,
        },
        Resource {
            kind: Kind::DaemonSet,
            group: "apps".into(),
            version: "v1".into(),
            kind_name: "DaemonSet".into(),
            plural: "daemonsets".into(),
            singular: "daemonset".into(),
            short_names: names(&["ds"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::apps::DaemonSet),
            schema: Source::typed::<apps::DaemonSet>(),
            table: Arc::new(table::DAEMON_SET),
            conversion: None,
        },
        Resource {
            kind: Kind::Job,
            group: "batch".into(),
            version: "v1".into(),
            kind_name: "Job".into(),
            plural: "jobs".into(),
            singular: "job".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::batch::Job),
            schema: Source::typed::<batch::Job>(),
            table: Arc::new(table::JOB),
            conversion: None,
        },
        Resource {
            kind: Kind::CronJob,
            group: "batch".into(),
            version: "v1".into(),
            kind_name: "CronJob".into(),
            plural: "cronjobs".into(),
            singular: "cronjob".into(),
            short_names: names(&["cj"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::batch::CronJob),
            schema: Source::typed::<batch::CronJob>(),
            table: Arc::new(table::CRON_JOB),
            conversion: None,
        },
        Resource {
            kind: Kind::StatefulSet,
            group: "apps".into(),
            version: "v1".into(),
            kind_name: "StatefulSet".into(),
            plural: "statefulsets".into(),
            singular: "statefulset".into(),
            short_names: names(&["sts"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: true,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::apps::StatefulSet),
            schema: Source::typed::<apps::StatefulSet>(),
            table: Arc::new(table::STATEFUL_SET),
            conversion: None,
        },
        Resource {
            kind: Kind::PersistentVolumeClaim,
            group: "".into(),
            version: "v1".into(),
            kind_name: "PersistentVolumeClaim".into(),
            plural: "persistentvolumeclaims".into(),
            singular: "persistentvolumeclaim".into(),
            short_names: names(&["pvc"]),
            namespaced: true,
            categories: names(&[]),
            status: true,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(strategy::PersistentVolumeClaim),
            schema: Source::typed::<core::PersistentVolumeClaim>(),
            table: Arc::new(table::PERSISTENT_VOLUME_CLAIM),
            conversion: None,
        },
        Resource {
            kind: Kind::Namespace,
            group: "".into(),
            version: "v1".into(),
            kind_name: "Namespace".into(),
            plural: "namespaces".into(),
            singular: "namespace".into(),
            short_names: names(&["ns"]),
            namespaced: false,
            categories: names(&[]),
            status: true,
            generation: true,
            scale: false,
            // As Kubernetes: namespaces go one at a time.
            verbs: &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ],
            subresources: vec![sub("finalize", &["update"], "Namespace")],
            selectable: names(&["status.phase"]),
            strategy: Arc::new(super::namespace::Namespace),
            schema: Source::typed::<core::Namespace>(),
            table: Arc::new(table::NAMESPACE),
            conversion: None,
        },
        Resource {
            kind: Kind::Node,
            group: "".into(),
            version: "v1".into(),
            kind_name: "Node".into(),
            plural: "nodes".into(),
            singular: "node".into(),
            short_names: names(&["no"]),
            namespaced: false,
            categories: names(&[]),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![served_by(
                sub("proxy", PROXY_VERBS, "NodeProxyOptions"),
                Serves::Elsewhere,
            )],
            selectable: names(&["spec.unschedulable"]),
            strategy: Arc::new(strategy::Node),
            schema: Source::typed::<core::Node>(),
            table: Arc::new(table::NODE),
            conversion: None,
        },
        Resource {
            kind: Kind::Event,
            group: "".into(),
            version: "v1".into(),
            kind_name: "Event".into(),
            plural: "events".into(),
            singular: "event".into(),
            short_names: names(&["ev"]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: names(&[
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
            ]),
            strategy: Arc::new(strategy::Event),
            schema: Source::typed::<core::Event>(),
            table: Arc::new(table::EVENT),
            conversion: None,
        },
        Resource {
            kind: Kind::ConfigMap,
            group: "".into(),
            version: "v1".into(),
            kind_name: "ConfigMap".into(),
            plural: "configmaps".into(),
            singular: "configmap".into(),
            short_names: names(&["cm"]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: names(&[]),
            strategy: Arc::new(strategy::ConfigMap),
            schema: Source::typed::<core::ConfigMap>(),
            table: Arc::new(table::CONFIG_MAP),
            conversion: None,
        },
        Resource {
            kind: Kind::Secret,
            group: "".into(),
            version: "v1".into(),
            kind_name: "Secret".into(),
            plural: "secrets".into(),
            singular: "secret".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: names(&["type"]),
            strategy: Arc::new(strategy::Secret),
            schema: Source::typed::<core::Secret>(),
            table: Arc::new(table::SECRET),
            conversion: None,
        },
        Resource {
            kind: Kind::ServiceAccount,
            group: "".into(),
            version: "v1".into(),
            kind_name: "ServiceAccount".into(),
            plural: "serviceaccounts".into(),
            singular: "serviceaccount".into(),
            short_names: names(&["sa"]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: vec![sub_in(
                "authentication.k8s.io",
                "v1",
                "token",
                &["create"],
                "TokenRequest",
            )],
            selectable: names(&[]),
            strategy: Arc::new(super::satoken::ServiceAccount),
            schema: Source::typed::<core::ServiceAccount>(),
            table: Arc::new(table::SERVICE_ACCOUNT),
            conversion: None,
        },
        Resource {
            kind: Kind::PodTemplate,
            group: "".into(),
            version: "v1".into(),
            kind_name: "PodTemplate".into(),
            plural: "podtemplates".into(),
            singular: "podtemplate".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: names(&[]),
            strategy: Arc::new(strategy::PodTemplate),
            schema: Source::typed::<core::PodTemplate>(),
            table: Arc::new(table::POD_TEMPLATE),
            conversion: None,
        },
        Resource {
            kind: Kind::Service,
            group: "".into(),
            version: "v1".into(),
            kind_name: "Service".into(),
            plural: "services".into(),
            singular: "service".into(),
            short_names: names(&["svc"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![served_by(
                sub("proxy", PROXY_VERBS, "ServiceProxyOptions"),
                Serves::Elsewhere,
            )],
            selectable: names(&["spec.clusterIP", "spec.type"]),
            strategy: Arc::new(super::service::Service),
            schema: Source::typed::<core::Service>(),
            table: Arc::new(table::SERVICE),
            conversion: None,
        },
        Resource {
            kind: Kind::Endpoints,
            group: "".into(),
            version: "v1".into(),
            kind_name: "Endpoints".into(),
            plural: "endpoints".into(),
            singular: "endpoints".into(),
            short_names: names(&["ep"]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: names(&[]),
            strategy: Arc::new(super::endpoints::Endpoints),
            schema: Source::typed::<core::Endpoints>(),
            table: Arc::new(table::ENDPOINTS),
            conversion: None,
        },
        Resource {
            kind: Kind::Lease,
            group: "coordination.k8s.io".into(),
            version: "v1".into(),
            kind_name: "Lease".into(),
            plural: "leases".into(),
            singular: "lease".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: names(&[]),
            strategy: Arc::new(strategy::Lease),
            schema: Source::typed::<coordination::Lease>(),
            table: Arc::new(table::LEASE),
            conversion: None,
        },
        Resource {
            kind: Kind::EndpointSlice,
            group: "discovery.k8s.io".into(),
            version: "v1".into(),
            kind_name: "EndpointSlice".into(),
            plural: "endpointslices".into(),
            singular: "endpointslice".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: names(&[]),
            strategy: Arc::new(super::endpoints::EndpointSlice),
            schema: Source::typed::<k8s_openapi::api::discovery::v1::EndpointSlice>(),
            table: Arc::new(table::ENDPOINT_SLICE),
            conversion: None,
        },
        Resource {
            kind: Kind::EventsV1Event,
            group: "events.k8s.io".into(),
            version: "v1".into(),
            kind_name: "Event".into(),
            plural: "events".into(),
            singular: "event".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: names(&[
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
            ]),
            strategy: Arc::new(strategy::EventsV1Event),
            schema: Source::typed::<k8s_openapi::api::events::v1::Event>(),
            table: Arc::new(table::EVENTS_V1_EVENT),
            conversion: Some(super::convert::events_v1()),
        },
        Resource {
            kind: Kind::PodDisruptionBudget,
            group: "policy".into(),
            version: "v1".into(),
            kind_name: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
            singular: "poddisruptionbudget".into(),
            short_names: names(&["pdb"]),
            namespaced: true,
            categories: names(&[]),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::policy::PodDisruptionBudget),
            schema: Source::typed::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(),
            table: Arc::new(table::POD_DISRUPTION_BUDGET),
            conversion: None,
        },
        Resource {
            kind: Kind::HorizontalPodAutoscaler,
            group: "autoscaling".into(),
            version: "v2".into(),
            kind_name: "HorizontalPodAutoscaler".into(),
            plural: "horizontalpodautoscalers".into(),
            singular: "horizontalpodautoscaler".into(),
            short_names: names(&["hpa"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::autoscaling::HorizontalPodAutoscaler),
            schema: Source::typed::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>(),
            table: Arc::new(table::HORIZONTAL_POD_AUTOSCALER),
            conversion: None,
        },
        Resource {
            kind: Kind::HorizontalPodAutoscalerV1,
            group: "autoscaling".into(),
            version: "v1".into(),
            kind_name: "HorizontalPodAutoscaler".into(),
            plural: "horizontalpodautoscalers".into(),
            singular: "horizontalpodautoscaler".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(&[]),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::autoscaling::HorizontalPodAutoscalerV1),
            schema: Source::typed::<k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler>(),
            table: Arc::new(table::HORIZONTAL_POD_AUTOSCALER_V1),
            conversion: Some(super::autoscaling::v1()),
        },
        Resource {
            kind: Kind::DeploymentConfig,
            group: "apps.openshift.io".into(),
            version: "v1".into(),
            kind_name: "DeploymentConfig".into(),
            plural: "deploymentconfigs".into(),
            singular: "deploymentconfig".into(),
            short_names: names(&["dc"]),
            namespaced: true,
            categories: names(ALL),
            status: true,
            generation: true,
            scale: true,
            verbs: VERBS,
            subresources: vec![
                sub("instantiate", &["create"], "DeploymentRequest"),
                served_by(sub("log", &["get"], "DeploymentLog"), Serves::DeploymentLog),
                sub("rollback", &["create"], "DeploymentConfigRollback"),
            ],
            selectable: names(&[]),
            strategy: Arc::new(super::deploymentconfig::DeploymentConfig),
            schema: Source::new(
                super::deploymentconfig::schema::name,
                super::deploymentconfig::schema::add_referenced,
            ),
            table: Arc::new(table::DEPLOYMENT_CONFIG),
            conversion: None,
        },
        Resource {
            kind: Kind::CustomResourceDefinition,
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            kind_name: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
            singular: "customresourcedefinition".into(),
            short_names: names(&["crd", "crds"]),
            namespaced: false,
            categories: names(&["api-extensions"]),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: Vec::new(),
            selectable: Vec::new(),
            strategy: Arc::new(super::crd::Definitions),
            schema: Source::typed::<apiextensions::CustomResourceDefinition>(),
            table: Arc::new(table::CUSTOM_RESOURCE_DEFINITION),
            conversion: None,
        },
        Resource {
            kind: Kind::RuntimeClass,
            group: "node.k8s.io".into(),
            version: "v1".into(),
            kind_name: "RuntimeClass".into(),
            plural: "runtimeclasses".into(),
            singular: "runtimeclass".into(),
            short_names: names(&[]),
            namespaced: false,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::node::RuntimeClass),
            schema: Source::typed::<k8s_openapi::api::node::v1::RuntimeClass>(),
            table: Arc::new(table::RUNTIME_CLASS),
            conversion: None,
        },
        Resource {
            kind: Kind::PriorityClass,
            group: "scheduling.k8s.io".into(),
            version: "v1".into(),
            kind_name: "PriorityClass".into(),
            plural: "priorityclasses".into(),
            singular: "priorityclass".into(),
            short_names: names(&["pc"]),
            namespaced: false,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::scheduling::PriorityClass),
            schema: Source::typed::<k8s_openapi::api::scheduling::v1::PriorityClass>(),
            table: Arc::new(table::PRIORITY_CLASS),
            conversion: None,
        },
        Resource {
            kind: Kind::Ingress,
            group: "networking.k8s.io".into(),
            version: "v1".into(),
            kind_name: "Ingress".into(),
            plural: "ingresses".into(),
            singular: "ingress".into(),
            short_names: names(&["ing"]),
            namespaced: true,
            categories: names(&[]),
            status: true,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::networking::Ingress),
            schema: Source::typed::<networking::Ingress>(),
            table: Arc::new(table::INGRESS),
            conversion: None,
        },
        Resource {
            kind: Kind::IngressClass,
            group: "networking.k8s.io".into(),
            version: "v1".into(),
            kind_name: "IngressClass".into(),
            plural: "ingressclasses".into(),
            singular: "ingressclass".into(),
            short_names: names(&[]),
            namespaced: false,
            categories: names(&[]),
            status: false,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::networking::IngressClass),
            schema: Source::typed::<networking::IngressClass>(),
            table: Arc::new(table::INGRESS_CLASS),
            conversion: None,
        },
        Resource {
            kind: Kind::NetworkPolicy,
            group: "networking.k8s.io".into(),
            version: "v1".into(),
            kind_name: "NetworkPolicy".into(),
            plural: "networkpolicies".into(),
            singular: "networkpolicy".into(),
            short_names: names(&["netpol"]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: true,
            scale: false,
            verbs: VERBS,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::networking::NetworkPolicy),
            schema: Source::typed::<networking::NetworkPolicy>(),
            table: Arc::new(table::NETWORK_POLICY),
            conversion: None,
        },
        Resource {
            kind: Kind::NodeMetrics,
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            kind_name: "NodeMetrics".into(),
            plural: "nodes".into(),
            singular: "nodemetrics".into(),
            short_names: names(&[]),
            namespaced: false,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: READ_ONLY,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::metrics::NodeMetrics),
            schema: Source::new(
                super::metrics::node_schema_name,
                super::metrics::add_referenced,
            ),
            table: Arc::new(super::metrics::MetricsTable),
            conversion: None,
        },
        Resource {
            kind: Kind::PodMetrics,
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            kind_name: "PodMetrics".into(),
            plural: "pods".into(),
            singular: "podmetrics".into(),
            short_names: names(&[]),
            namespaced: true,
            categories: names(&[]),
            status: false,
            generation: false,
            scale: false,
            verbs: READ_ONLY,
            subresources: vec![],
            selectable: names(&[]),
            strategy: Arc::new(super::metrics::PodMetrics),
            schema: Source::new(
                super::metrics::pod_schema_name,
                super::metrics::add_referenced,
            ),
            table: Arc::new(super::metrics::MetricsTable),
            conversion: None,
        },
    ]
}

/// Every built-in resource, in discovery order.
pub static RESOURCES: LazyLock<Vec<Arc<Resource>>> = LazyLock::new(|| {
    builtin()
        .into_iter()
        .chain(super::rbac::resources())
        .map(Arc::new)
        .collect()
});

/// The built-in resource served at `group`/`version` under `plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Arc<Resource>> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of a built-in kind.
pub fn of(kind: Kind) -> &'static Arc<Resource> {
    RESOURCES
        .iter()
        .find(|r| r.kind == kind)
        .expect("every kind is in the catalog")
}

/// Whether `res` is the resource whose objects are the namespaces.
pub fn holds_namespaces(res: &Resource) -> bool {
    res.kind == Kind::Namespace
}

/// What one registry serves at one moment: built-in kinds first, then those that
/// definitions add, sorted by group, version and plural. Immutable: a change of the served
/// kinds makes a new set, so every reader (routing, discovery, OpenAPI) sees one whole
/// set, and its generation says whether anything changed.
pub struct Served {
    resources: Vec<Arc<Resource>>,
    /// Where each plural's resources are in `resources`: every request looks one up.
    by_plural: std::collections::HashMap<String, Vec<usize>>,
    generation: u64,
}

/// Generations of served sets, unique across every registry of the process.
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Served {
    fn new(resources: Vec<Arc<Resource>>) -> Self {
        let mut by_plural: std::collections::HashMap<String, Vec<usize>> = Default::default();
        for (i, r) in resources.iter().enumerate() {
            by_plural.entry(r.plural.clone()).or_default().push(i);
        }
        Served {
            resources,
            by_plural,
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Every served resource, in discovery order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.resources.iter()
    }

    /// The resource served at `group`/`version` under `plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<Resource>> {
        self.by_plural
            .get(plural)?
            .iter()
            .map(|&i| &self.resources[i])
            .find(|r| r.group == group && r.version == version)
    }

    /// A number that changes whenever the served set does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The API groups (other than core) with their versions, in discovery order.
    pub fn groups(&self) -> Vec<(&str, Vec<&str>)> {
        let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
        for r in self.resources.iter().filter(|r| !r.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) => {
                    if !versions.contains(&r.version.as_str()) {
                        versions.push(&r.version);
                    }
                }
                None => out.push((&r.group, vec![&r.version])),
            }
        }
        for (_, versions) in &mut out {
            versions.sort_by(|a, b| version_priority(a, b));
        }
        out
    }
}

/// How Kubernetes orders versions, the preferred first: GA before beta before alpha, a
/// higher major version first, then a higher beta or alpha number (`v2`, `v1`, `v2beta1`,
/// `v1beta2`, `v1alpha1`); versions of another shape after them, alphabetically.
pub fn version_priority(a: &str, b: &str) -> std::cmp::Ordering {
    /// (stability: 2 GA, 1 beta, 0 alpha; major; minor) of a Kubernetes-shaped version.
    fn parse(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        if rest[..digits].starts_with('0') {
            return None;
        }
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((2, major, 0));
        }
        let (stability, n) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else {
            (0, tail.strip_prefix("alpha")?)
        };
        let minor: u64 = n.parse().ok()?;
        (!n.starts_with('0')).then_some((stability, major, minor))
    }
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// The kinds a registry serves, changed at run time as definitions come and go; cheap to
/// read (one lock held for an `Arc` clone).
pub struct Catalog {
    current: std::sync::RwLock<Arc<Served>>,
    /// The generation served now, for those who follow changes.
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for Catalog {
    fn default() -> Self {
        let served = Served::new(RESOURCES.clone());
        Catalog {
            changes: tokio::sync::watch::channel(served.generation).0,
            current: std::sync::RwLock::new(Arc::new(served)),
        }
    }
}

impl Catalog {
    /// What is served now.
    pub fn served(&self) -> Arc<Served> {
        self.current.read().expect("catalog lock").clone()
    }

    /// Tells of every change of what is served (by its generation), once it is served.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Serves `resources` (every served version of one custom kind) in place of what was
    /// served under `group` and `plural` before; none stops serving it. Built-in kinds
    /// are never replaced.
    pub fn replace(&self, group: &str, plural: &str, resources: Vec<Arc<Resource>>) {
        let mut current = self.current.write().expect("catalog lock");
        let mut custom: Vec<Arc<Resource>> = current
            .resources
            .iter()
            .filter(|r| r.kind == Kind::Custom && !(r.group == group && r.plural == plural))
            .cloned()
            .chain(resources)
            .collect();
        custom.sort_by(|a, b| {
            (&a.group, &a.version, &a.plural).cmp(&(&b.group, &b.version, &b.plural))
        });
        let all = RESOURCES.iter().cloned().chain(custom).collect();
        let served = Served::new(all);
        let generation = served.generation;
        *current = Arc::new(served);
        drop(current);
        self.changes.send_replace(generation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_storage_version_hash_is_kube_apiservers() {
        // As kube-apiserver's discovery lists them.
        assert_eq!(of(Kind::ConfigMap).storage_version_hash(), "qFsyl6wFWjQ=");
        assert_eq!(of(Kind::Pod).storage_version_hash(), "xPOwRZ+Yhw8=");
        // events.k8s.io Events are stored as core Events.
        assert_eq!(
            of(Kind::EventsV1Event).storage_version_hash(),
            of(Kind::Event).storage_version_hash()
        );
    }

    #[test]
    fn versions_are_ordered_as_kubernetes_prefers_them() {
        let mut v = vec![
            "v1beta1",
            "foo10",
            "v11alpha2",
            "v2",
            "v10beta3",
            "v1",
            "v12alpha1",
            "foo1",
            "v10",
            "v3beta1",
            "v10beta10",
        ];
        v.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            v,
            [
                "v10",
                "v2",
                "v1",
                "v10beta10",
                "v10beta3",
                "v3beta1",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "foo1",
                "foo10"
            ]
        );
    }

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
        for r in RESOURCES.iter() {
            assert!(
                seen.insert((r.group.as_str(), r.version.as_str(), r.plural.as_str())),
                "{} twice",
                r.plural
            );
            for s in &r.short_names {
                assert!(seen.insert(("short", "", s)), "short name {s} twice");
            }
        }
        assert_eq!(
            Catalog::default().served().groups(),
            vec![
                ("apps", vec!["v1"]),
                ("batch", vec!["v1"]),
                ("coordination.k8s.io", vec!["v1"]),
                ("discovery.k8s.io", vec!["v1"]),
                ("events.k8s.io", vec!["v1"]),
                ("policy", vec!["v1"]),
                ("autoscaling", vec!["v2", "v1"]),
                ("apps.openshift.io", vec!["v1"]),
                ("apiextensions.k8s.io", vec!["v1"]),
                ("node.k8s.io", vec!["v1"]),
                ("scheduling.k8s.io", vec!["v1"]),
                ("networking.k8s.io", vec!["v1"]),
                ("metrics.k8s.io", vec!["v1beta1"]),
                ("rbac.authorization.k8s.io", vec!["v1"]),
            ]
        );
        assert_eq!(of(Kind::EventsV1Event).key_prefix(), "/registry/events/");
    }
}
