//! What a controller asked for and has not seen yet: the creations and deletions of
//! children per controller key, until the children's informer shows them, so that a sync
//! on a stale cache never creates or deletes twice (kube-controller-manager's
//! `ControllerExpectations`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Expectations not met after this long are given up (a lost watch event).
pub const EXPECTATIONS_TTL: Duration = Duration::from_secs(300);

/// Creations and deletions asked for and not yet seen, per controller key.
#[derive(Clone, Default)]
pub struct Expectations {
    inner: Arc<Mutex<HashMap<String, Pending>>>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    adds: i64,
    dels: i64,
    at: Instant,
}

impl Expectations {
    pub fn satisfied(&self, key: &str) -> bool {
        match self.inner.lock().expect("expectations lock").get(key) {
            None => true,
            Some(p) => (p.adds <= 0 && p.dels <= 0) || p.at.elapsed() > EXPECTATIONS_TTL,
        }
    }

    /// How long until `key`'s unmet expectations are given up; `None` when they are met.
    /// A reconcile that waits on them asks to run again then, so that an event lost (or
    /// seen before the expectation was set) delays it by the TTL, never for ever.
    pub fn pending_for(&self, key: &str) -> Option<Duration> {
        if self.satisfied(key) {
            return None;
        }
        let at = self.inner.lock().expect("expectations lock").get(key)?.at;
        Some(EXPECTATIONS_TTL.saturating_sub(at.elapsed()) + Duration::from_millis(1))
    }

    pub fn expect(&self, key: &str, adds: i64, dels: i64) {
        self.inner.lock().expect("expectations lock").insert(
            key.to_string(),
            Pending {
                adds,
                dels,
                at: Instant::now(),
            },
        );
    }

    pub fn observed(&self, key: &str, adds: i64, dels: i64) {
        if let Some(p) = self.inner.lock().expect("expectations lock").get_mut(key) {
            p.adds -= adds;
            p.dels -= dels;
        }
    }

    pub fn forget(&self, key: &str) {
        self.inner.lock().expect("expectations lock").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn unmet_expectations_say_when_they_expire() {
        let e = Expectations::default();
        assert_eq!(e.pending_for("ns/rc"), None);
        e.expect("ns/rc", 1, 0);
        tokio::time::advance(Duration::from_secs(100)).await;
        let left = e.pending_for("ns/rc").unwrap();
        assert!(
            left > Duration::from_secs(199) && left <= Duration::from_secs(201),
            "{left:?}"
        );
        e.observed("ns/rc", 1, 0);
        assert_eq!(e.pending_for("ns/rc"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn expectations_hold_until_observed_or_expired() {
        let e = Expectations::default();
        assert!(e.satisfied("ns/rc"));
        e.expect("ns/rc", 2, 0);
        assert!(!e.satisfied("ns/rc"));
        e.observed("ns/rc", 1, 0);
        assert!(!e.satisfied("ns/rc"));
        e.observed("ns/rc", 1, 0);
        assert!(e.satisfied("ns/rc"));
        e.expect("ns/rc", 0, 3);
        tokio::time::advance(EXPECTATIONS_TTL + Duration::from_secs(1)).await;
        assert!(e.satisfied("ns/rc"), "stale expectations are given up");
    }
}
