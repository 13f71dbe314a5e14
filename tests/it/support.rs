//! Helpers shared by the end-to-end tests.

use std::future::Future;
use std::time::Duration;

use serde_json::json;

/// A small JSON object with a name and a counter.
pub fn object(name: &str, n: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"n": n.to_string(), "pad": "x".repeat(64)},
    }))
    .unwrap()
}

/// Awaits `f`, failing the test if it takes longer than `secs` (a hang, not a slow run).
pub async fn within<T>(secs: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("operation hung")
}
