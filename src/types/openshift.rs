//! Names shared by the DeploymentConfig machinery (the API, the controllers, the node
//! agent and the deployer process).

/// The image of deployer pods: the node agent runs it as `berth deploy`.
pub const DEPLOYER_IMAGE: &str = "berth/deployer";
