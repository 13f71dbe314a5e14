//! Container images on this node: references as Docker and the kubelet normalize them
//! ([`reference`]), the content-addressed store in the data directory ([`store`]), layers
//! applied in overlayfs' form ([`layer`]), offline import of OCI and docker archives
//! ([`archive`]), and the `berth image` commands that work on the store ([`command`]).

pub mod archive;
pub mod command;
pub mod incoming;
pub mod layer;
pub mod pull;
pub mod reference;
pub mod store;

pub use store::{Image, Store};

/// Where the image store lives in a data directory.
pub fn store_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("oci")
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} is not what its digest says: expected {expected}, got {got}")]
    DigestMismatch {
        what: String,
        expected: String,
        got: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("{0} not found")]
    NotFound(String),
}

pub type Result<T> = std::result::Result<T, Error>;
