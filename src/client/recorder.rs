//! The event recorder every component uses. Repeats of one (object, type, reason, message,
//! source) become one Event whose `count`, `lastTimestamp` and `series` move; each object
//! may cause a burst of events and then one per five minutes (as client-go's spam filter),
//! so a crash-looping object cannot flood the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Client, Patch};
use crate::registry::{Kind, catalog};

/// Events an object may cause at once.
const BURST: f64 = 25.0;
/// One more event is allowed per this long.
const REFILL: Duration = Duration::from_secs(300);
/// Aggregation entries kept (the oldest are forgotten first).
const REMEMBERED: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[derive(Hash, PartialEq, Eq, Clone)]
struct Repeat {
    object: String,
    kind: &'static str,
    reason: String,
    message: String,
}

struct Seen {
    namespace: String,
    name: String,
    count: u64,
    /// When this entry was last used (for forgetting the oldest).
    used: Instant,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Default)]
struct State {
    seen: HashMap<Repeat, Seen>,
    buckets: HashMap<String, Bucket>,
}

/// Records events for one component; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    component: Arc<str>,
    host: Option<Arc<str>>,
    state: Arc<Mutex<State>>,
}

/// What the recorder does with one event.
enum Plan {
    Create,
    Bump {
        namespace: String,
        name: String,
        count: u64,
    },
    Drop,
}

impl Recorder {
    pub fn new(client: Client, component: &str, host: Option<&str>) -> Self {
        Recorder {
            client,
            component: component.into(),
            host: host.map(Into::into),
            state: Arc::default(),
        }
    }

    /// [`Recorder::event`] of type `Normal`.
    pub async fn normal(&self, obj: &Value, reason: &str, message: &str) {
        self.event(obj, EventType::Normal, reason, message).await;
    }

    /// [`Recorder::event`] of type `Warning`.
    pub async fn warning(&self, obj: &Value, reason: &str, message: &str) {
        self.event(obj, EventType::Warning, reason, message).await;
    }

    /// Records an event about `obj`. Failures are logged, never returned: an event is
    /// never worth failing the work it reports on.
    pub async fn event(&self, obj: &Value, kind: EventType, reason: &str, message: &str) {
        let uid = obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        let object = format!(
            "{}/{}/{}/{}",
            obj["kind"].as_str().unwrap_or(""),
            obj.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or(""),
            obj.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(""),
            uid
        );
        let repeat = Repeat {
            object,
            kind: kind.as_str(),
            reason: reason.to_string(),
            message: message.to_string(),
        };
        let plan = self.plan(&repeat);
        let res = catalog::of(Kind::Event);
        match plan {
            Plan::Drop => {
                tracing::debug!(
                    reason,
                    message,
                    "event dropped by the per-object rate limit"
                );
            }
            Plan::Bump {
                namespace,
                name,
                count,
            } => {
                let now = crate::types::now();
                let patch = json!({
                    "count": count,
                    "lastTimestamp": now,
                    "series": {"count": count, "lastObservedTime": crate::types::now_micro()},
                });
                match self
                    .client
                    .patch(res, Some(&namespace), &name, &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => {}
                    // Expired or deleted meanwhile: start a new one.
                    Err(e) if e.is_not_found() => {
                        self.forget(&repeat);
                        self.create(obj, &repeat).await;
                    }
                    Err(e) => tracing::warn!(reason, error = %e, "could not update an event"),
                }
            }
            Plan::Create => self.create(obj, &repeat).await,
        }
    }

    fn plan(&self, repeat: &Repeat) -> Plan {
        let mut st = self.state.lock().expect("recorder lock");
        let now = Instant::now();
        let bucket = st.buckets.entry(repeat.object.clone()).or_insert(Bucket {
            tokens: BURST,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() / REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + refill).min(BURST);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return Plan::Drop;
        }
        bucket.tokens -= 1.0;
        match st.seen.get_mut(repeat) {
            Some(seen) => {
                seen.count += 1;
                seen.used = now;
                Plan::Bump {
                    namespace: seen.namespace.clone(),
                    name: seen.name.clone(),
                    count: seen.count,
                }
            }
            None => Plan::Create,
        }
    }

    fn forget(&self, repeat: &Repeat) {
        self.state
            .lock()
            .expect("recorder lock")
            .seen
            .remove(repeat);
    }

    async fn create(&self, obj: &Value, repeat: &Repeat) {
        let meta = &obj["metadata"];
        let obj_name = meta["name"].as_str().unwrap_or("");
        let namespace = meta["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_string();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("{obj_name}.{nanos:x}");
        let now = crate::types::now();
        let mut involved = json!({
            "kind": obj["kind"],
            "apiVersion": obj["apiVersion"],
            "name": obj_name,
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
        });
        if let Some(ns) = meta["namespace"].as_str() {
            involved["namespace"] = json!(ns);
        }
        let mut source = json!({"component": &*self.component});
        if let Some(h) = &self.host {
            source["host"] = json!(&**h);
        }
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": repeat.reason,
            "message": repeat.message,
            "type": repeat.kind,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": &*self.component,
            "reportingInstance": self.host.as_deref().unwrap_or(&*self.component),
        });
        let res = catalog::of(Kind::Event);
        match self.client.create(res, Some(&namespace), &event).await {
            Ok(_) => {
                let mut st = self.state.lock().expect("recorder lock");
                if st.seen.len() >= REMEMBERED {
                    // Forget the least recently used entry.
                    if let Some(oldest) = st
                        .seen
                        .iter()
                        .min_by_key(|(_, s)| s.used)
                        .map(|(k, _)| k.clone())
                    {
                        st.seen.remove(&oldest);
                    }
                }
                st.seen.insert(
                    repeat.clone(),
                    Seen {
                        namespace,
                        name,
                        count: 1,
                        used: Instant::now(),
                    },
                );
                // Buckets of objects that have not spoken for a long time are full
                // again; drop them so the map does not grow without bound.
                if st.buckets.len() > REMEMBERED {
                    let now = Instant::now();
                    st.buckets
                        .retain(|_, b| now.duration_since(b.at) < REFILL.mul_f64(BURST));
                }
            }
            // The namespace is going away: nobody will read the event.
            Err(super::Error::Forbidden(_) | super::Error::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(reason = %repeat.reason, error = %e, "could not record an event")
            }
        }
    }
}
