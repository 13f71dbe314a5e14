//! List, then watch from the list's revision; re-watch from the last seen revision when a
//! watch ends, re-list when the server says the history is gone (410), back off on errors.
//! The state machine is [`State`] with one [`Watcher::step`].

use std::sync::Arc;

use std::time::Duration;

use serde_json::Value;

use super::{Client, Event as WatchEvent, EventStream, Items, ListParams, Result, WatchParams};
use crate::registry::Resource;

/// What a watcher tells its consumer.
#[derive(Debug)]
pub enum Event {
    /// A fresh list: the complete set of objects now (the first event, and after a 410),
    /// each parsed as it is taken.
    Restarted(Items),
    /// An object was added or changed.
    Applied(Value),
    Deleted(Value),
}

enum State {
    /// Nothing known: list next.
    Empty,
    /// Listed or watched up to `rv`: start a watch from there.
    Resume { rv: String },
    Watching {
        rv: String,
        stream: Box<EventStream>,
    },
}

/// A list-then-watch loop over one resource; never ends on its own.
pub struct Watcher {
    client: Client,
    res: Arc<Resource>,
    namespace: Option<String>,
    selection: ListParams,
    state: State,
    backoff: Duration,
}

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Watches are renewed this often, so a half-open connection is noticed.
const WATCH_TIMEOUT: Duration = Duration::from_secs(300);

impl Watcher {
    pub fn new(
        client: Client,
        res: &Arc<Resource>,
        namespace: Option<&str>,
        selection: ListParams,
    ) -> Self {
        Watcher {
            client,
            res: res.clone(),
            namespace: namespace.map(str::to_string),
            selection,
            state: State::Empty,
            backoff: BACKOFF_FIRST,
        }
    }

    /// A watcher that resumes after revision `rv` (changes only, no list) while that
    /// history is retained, and lists afresh when it is not.
    pub fn from_revision(
        client: Client,
        res: &Arc<Resource>,
        namespace: Option<&str>,
        selection: ListParams,
        rv: &str,
    ) -> Self {
        let mut w = Self::new(client, res, namespace, selection);
        w.state = State::Resume { rv: rv.to_string() };
        w
    }

    /// The next event.
    pub async fn next(&mut self) -> Event {
        loop {
            match self.step().await {
                Ok(Some(ev)) => {
                    self.backoff = BACKOFF_FIRST;
                    return ev;
                }
                // Moving between states may not wait at all in-process; stay fair.
                Ok(None) => tokio::task::yield_now().await,
                Err(e) => {
                    tracing::warn!(
                        resource = self.res.plural,
                        error = %e,
                        retry_in_ms = self.backoff.as_millis() as u64,
                        "watch failed; retrying"
                    );
                    tokio::time::sleep(self.backoff).await;
                    self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    /// One transition. `Ok(None)` means "moved on, nothing to report".
    async fn step(&mut self) -> Result<Option<Event>> {
        let ns = self.namespace.as_deref();
        match std::mem::replace(&mut self.state, State::Empty) {
            State::Empty => {
                let (items, rv) = self
                    .client
                    .list_items(&self.res, ns, &self.selection)
                    .await?;
                self.state = State::Resume { rv };
                Ok(Some(Event::Restarted(items)))
            }
            State::Resume { rv } => {
                let params = WatchParams {
                    selection: self.selection.clone(),
                    resource_version: rv.clone(),
                    bookmarks: true,
                    timeout: Some(WATCH_TIMEOUT),
                };
                match self.client.watch(&self.res, ns, &params).await {
                    Ok(stream) => {
                        self.state = State::Watching {
                            rv,
                            stream: Box::new(stream),
                        };
                        Ok(None)
                    }
                    // The history is gone: list again (state stays Empty).
                    Err(super::Error::Gone(_)) => Ok(None),
                    Err(e) => {
                        self.state = State::Resume { rv };
                        Err(e)
                    }
                }
            }
            State::Watching { mut rv, mut stream } => {
                let out = match stream.next().await {
                    None => {
                        // The server ended the watch (timeout, restart): resume.
                        self.state = State::Resume { rv };
                        return Ok(None);
                    }
                    Some(Err(super::Error::Gone(_))) => return Ok(None),
                    Some(Err(e)) => {
                        self.state = State::Resume { rv };
                        return Err(e);
                    }
                    Some(Ok(WatchEvent::Bookmark(b))) => {
                        if !b.is_empty() {
                            rv = b;
                        }
                        None
                    }
                    Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                        rv = revision_of(&o).unwrap_or(rv);
                        Some(Event::Applied(o))
                    }
                    Some(Ok(WatchEvent::Deleted(o))) => {
                        rv = revision_of(&o).unwrap_or(rv);
                        Some(Event::Deleted(o))
                    }
                };
                self.state = State::Watching { rv, stream };
                Ok(out)
            }
        }
    }
}

fn revision_of(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}
