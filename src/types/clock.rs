//! Where controllers read the time: a [`Clock`] they are given rather than the system's
//! clock directly, so that a test of a schedule moves time forward instead of sleeping
//! through it.

use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};

/// The current time, as a controller sees it.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct System;

impl Clock for System {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug, Clone)]
pub struct Manual(Arc<Mutex<Timestamp>>);

impl Manual {
    pub fn at(t: Timestamp) -> Self {
        Manual(Arc::new(Mutex::new(t)))
    }

    pub fn set(&self, t: Timestamp) {
        *self.0.lock().expect("clock lock") = t;
    }

    pub fn advance(&self, by: SignedDuration) {
        let mut t = self.0.lock().expect("clock lock");
        *t = t.saturating_add(by).expect("a time within jiff's range");
    }
}

impl Clock for Manual {
    fn now(&self) -> Timestamp {
        *self.0.lock().expect("clock lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let t: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let c = Manual::at(t);
        assert_eq!(c.now(), t);
        c.advance(SignedDuration::from_secs(90));
        assert_eq!(c.now().to_string(), "2026-01-01T00:01:30Z");
        assert!(System.now() > t);
    }
}
