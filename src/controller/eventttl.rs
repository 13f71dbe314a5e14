//! Event expiry: an Event is deleted `event_ttl` (1 hour by default) after it was last
//! seen, so the store does not grow without bound. Each event is scheduled on the work
//! queue for its own expiry time; nothing scans on a timer.
//!
//! The events' informer keeps only their metadata and times, which k8s-openapi's `Event`
//! (that requires `involvedObject`) cannot be decoded from: a reconcile decodes its event
//! once as [`Seen`], a typed view of just those fields; the watch handler does the same.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::EventSeries;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use serde::Deserialize;

use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::{Client, DeleteParams, key_of, split_key};
use crate::client::{Kind, catalog};

#[derive(Clone)]
struct Expiry {
    client: Client,
    events: Informer,
    ttl: Duration,
}

/// The top-level fields that tell when an event was seen.
const TIMES: &[&str] = &["series", "lastTimestamp", "eventTime", "firstTimestamp"];

/// What expiry reads of an Event: its metadata and the [`TIMES`].
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Seen {
    #[serde(default)]
    metadata: ObjectMeta,
    series: Option<EventSeries>,
    last_timestamp: Option<Time>,
    event_time: Option<MicroTime>,
    first_timestamp: Option<Time>,
}

/// When an event was last seen: the latest of `series.lastObservedTime`, `lastTimestamp`,
/// `eventTime`, `firstTimestamp` and its creation.
fn last_seen(ev: &Seen) -> Option<jiff::Timestamp> {
    [
        ev.series
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref())
            .map(|t| t.0),
        ev.last_timestamp.as_ref().map(|t| t.0),
        ev.event_time.as_ref().map(|t| t.0),
        ev.first_timestamp.as_ref().map(|t| t.0),
        ev.metadata.creation_timestamp.as_ref().map(|t| t.0),
    ]
    .into_iter()
    .flatten()
    .max()
}

/// How long until `ev` expires (zero if it has).
fn remaining(ev: &Seen, ttl: Duration, now: jiff::Timestamp) -> Duration {
    let Some(seen) = last_seen(ev) else {
        return Duration::ZERO;
    };
    let age = now.duration_since(seen);
    let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
    ttl.saturating_sub(age)
}

impl Expiry {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        let Some(ev) = self.events.get(&key) else {
            return Ok(Action::Done);
        };
        let ev: Seen = decode(&ev)?;
        let left = remaining(&ev, self.ttl, jiff::Timestamp::now());
        if !left.is_zero() {
            return Ok(Action::RequeueAfter(left));
        }
        let (ns, name) = split_key(&key);
        // Only this version: an event bumped meanwhile lives on.
        let params = DeleteParams {
            resource_version: ev.metadata.resource_version,
            ..DeleteParams::default()
        };
        match self
            .client
            .delete(self.events.resource(), ns, name, &params)
            .await
        {
            Ok(_) => Ok(Action::Done),
            Err(e) if e.is_not_found() => Ok(Action::Done),
            Err(e) => Err(e.into()),
        }
    }
}

/// Registers the event-expiry handlers and starts its worker.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    // Only what expiry reads: every event of the last hour is in this cache.
    let events = ctx.informers.with_fields(catalog::of(Kind::Event), TIMES);
    let ttl = ctx.config.event_ttl;
    let expiry = Arc::new(Expiry {
        client: ctx.client.clone(),
        events: events.clone(),
        ttl,
    });
    runtime::Controller::new("event-expiry")
        .watches(&events, move |change, queue| {
            if let Change::Deleted(_) = change {
                return;
            }
            let ev = change.object();
            // An event with no time that reads is due now, as one with no time at all.
            let seen: Seen = decode(ev).unwrap_or_default();
            queue.add_after(key_of(ev), remaining(&seen, ttl, jiff::Timestamp::now()));
        })
        .run_with(sup, expiry, Expiry::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_expires_a_ttl_after_it_was_last_seen() {
        let ttl = Duration::from_secs(3600);
        let now: jiff::Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let ev = json!({
            "metadata": {"creationTimestamp": "2026-01-01T10:00:00Z"},
            "firstTimestamp": "2026-01-01T10:00:00Z",
            "lastTimestamp": "2026-01-01T11:30:00Z",
        });
        assert_eq!(
            remaining(&decode(&ev).unwrap(), ttl, now),
            Duration::from_secs(1800)
        );
        let old = json!({"metadata": {"creationTimestamp": "2026-01-01T10:00:00Z"}});
        assert_eq!(remaining(&decode(&old).unwrap(), ttl, now), Duration::ZERO);
        let series = json!({
            "lastTimestamp": "2026-01-01T10:00:00Z",
            "series": {"lastObservedTime": "2026-01-01T11:59:00.000000Z"},
        });
        assert_eq!(
            remaining(&decode(&series).unwrap(), ttl, now),
            Duration::from_secs(3540)
        );
    }
}
