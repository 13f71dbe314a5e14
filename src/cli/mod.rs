//! The client half of the `berth` binary: kubectl-style verbs and OpenShift's rollout
//! verbs, speaking to a berth (or any Kubernetes) API server over HTTPS.

pub mod describe;
pub mod tabwriter;
