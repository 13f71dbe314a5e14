//! The custom kinds served now, each followed by one metadata informer that every
//! controller caring about custom objects shares (the garbage collector, the namespace
//! controller, the definitions' cleanup): when the served set changes, an informer is
//! started for each kind newly served and stopped for each kind no longer served (or no
//! longer in the version it was read in), and the controllers are told through the
//! handlers they registered at start, before the informer runs, so none misses its
//! first list. Nothing looks again on a timer: a custom object's change reaches the
//! controllers as any built-in object's does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use super::Supervisor;
use crate::client::informer::Informer;
use crate::client::{Client, Resource};

/// What a controller hears of the custom kinds.
pub enum KindChange<'a> {
    /// `res` is followed from now on; `informer` has not run yet, and `stopped` is
    /// cancelled when it stops.
    Followed {
        res: &'a Arc<Resource>,
        informer: &'a Informer,
        stopped: &'a CancellationToken,
    },
    /// `res` is no longer served (in that version); `informer` holds its last objects.
    Dropped {
        res: &'a Arc<Resource>,
        informer: &'a Informer,
    },
}

impl KindChange<'_> {
    /// For a kind newly followed, runs `f` once its informer has listed, unless it stops
    /// first: objects that went before the list tell of nothing, so a controller waiting
    /// for them looks again then.
    pub fn when_listed(&self, f: impl FnOnce() + Send + 'static) {
        let KindChange::Followed {
            informer, stopped, ..
        } = self
        else {
            return;
        };
        let (informer, stopped) = (Informer::clone(informer), CancellationToken::clone(stopped));
        tokio::spawn(async move {
            tokio::select! {
                () = informer.synced() => f(),
                () = stopped.cancelled() => {}
            }
        });
    }
}

type Handler = Arc<dyn Fn(&KindChange<'_>) + Send + Sync>;

struct Followed {
    res: Arc<Resource>,
    informer: Informer,
    stop: CancellationToken,
}

#[derive(Default)]
struct Inner {
    /// The custom kinds followed now, by group and plural.
    followed: Mutex<HashMap<(String, String), Followed>>,
    handlers: Mutex<Vec<Handler>>,
    /// Set once the kinds served at start are followed.
    first: tokio::sync::watch::Sender<bool>,
}

/// The shared follower of custom kinds (cheap to clone).
#[derive(Clone, Default)]
pub struct CustomKinds {
    inner: Arc<Inner>,
}

impl CustomKinds {
    fn followed(&self) -> MutexGuard<'_, HashMap<(String, String), Followed>> {
        self.inner.followed.lock().expect("custom kinds lock")
    }

    /// Registers `f` for every kind followed or dropped from now on (at start, before
    /// the follower runs).
    pub fn on_change(&self, f: impl Fn(&KindChange<'_>) + Send + Sync + 'static) {
        self.inner
            .handlers
            .lock()
            .expect("custom kind handlers lock")
            .push(Arc::new(f));
    }

    /// Whether any controller asked to hear of custom kinds.
    fn wanted(&self) -> bool {
        !self
            .inner
            .handlers
            .lock()
            .expect("custom kind handlers lock")
            .is_empty()
    }

    /// The custom kinds followed now.
    pub fn kinds(&self) -> Vec<Arc<Resource>> {
        self.followed().values().map(|f| f.res.clone()).collect()
    }

    /// The informers of the custom kinds followed now.
    pub fn informers(&self) -> Vec<Informer> {
        self.followed()
            .values()
            .map(|f| f.informer.clone())
            .collect()
    }

    /// Waits until the kinds served at start are followed and their informers have
    /// listed.
    pub async fn synced(&self) {
        let mut first = self.inner.first.subscribe();
        // The sender lives in `inner`, which `self` holds: the wait cannot fail.
        let _ = first.wait_for(|done| *done).await;
        for informer in self.informers() {
            informer.synced().await;
        }
    }

    /// Starts the follower (when some controller registered a handler): it follows the
    /// kinds served now, then each change of what is served, until `sup` stops.
    pub fn start(&self, client: &Client, definitions: Informer, sup: &mut Supervisor) {
        if !self.wanted() {
            return;
        }
        // Over HTTPS no catalog tells of a change: the definitions' informer does.
        let notify = Arc::new(tokio::sync::Notify::new());
        let told = notify.clone();
        definitions.on_change(move |_| told.notify_one());
        let (kinds, client, stop) = (self.clone(), client.clone(), sup.token().child_token());
        sup.spawn("custom-kinds", move |cancel| {
            let (kinds, client, stop, notify) =
                (kinds.clone(), client.clone(), stop.clone(), notify.clone());
            async move {
                let mut served = client.served_changes();
                loop {
                    kinds.follow(&client, &stop).await;
                    let changed = async {
                        match served.as_mut() {
                            Some(rx) => {
                                if rx.changed().await.is_err() {
                                    std::future::pending::<()>().await;
                                }
                            }
                            None => notify.notified().await,
                        }
                    };
                    tokio::select! {
                        () = changed => {}
                        () = cancel.cancelled() => return,
                    }
                }
            }
        });
    }

    /// Brings the followed kinds in line with those served now.
    async fn follow(&self, client: &Client, stop: &CancellationToken) {
        let served = match client.custom_resources().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "custom kinds unknown for now; they are looked up again at the next change of a definition");
                self.inner.first.send_replace(true);
                return;
            }
        };
        let mut wanted: HashMap<(String, String), Arc<Resource>> = HashMap::new();
        for res in served {
            wanted
                .entry((res.group.clone(), res.plural.clone()))
                .or_insert(res);
        }
        let (mut started, mut dropped) = (Vec::new(), Vec::new());
        {
            let mut followed = self.followed();
            let gone: Vec<(String, String)> = followed
                .iter()
                .filter(|(key, f)| wanted.get(*key).is_none_or(|w| w.version != f.res.version))
                .map(|(key, _)| key.clone())
                .collect();
            for key in gone {
                if let Some(f) = followed.remove(&key) {
                    f.stop.cancel();
                    tracing::info!(resource = %format!("{}.{}", key.1, key.0), "custom kind no longer followed");
                    dropped.push(f);
                }
            }
            for (key, res) in wanted {
                if followed.contains_key(&key) {
                    continue;
                }
                let f = Followed {
                    informer: Informer::metadata_only(&res),
                    res,
                    stop: stop.child_token(),
                };
                tracing::info!(resource = %format!("{}.{}", key.1, key.0), "custom kind followed");
                started.push((f.informer.clone(), f.res.clone(), f.stop.clone()));
                followed.insert(key, f);
            }
        }
        let handlers: Vec<Handler> = self
            .inner
            .handlers
            .lock()
            .expect("custom kind handlers lock")
            .clone();
        for f in &dropped {
            let change = KindChange::Dropped {
                res: &f.res,
                informer: &f.informer,
            };
            handlers.iter().for_each(|h| h(&change));
        }
        for (informer, res, stop) in started {
            let change = KindChange::Followed {
                res: &res,
                informer: &informer,
                stopped: &stop,
            };
            handlers.iter().for_each(|h| h(&change));
            tokio::spawn(informer.run(client.clone(), stop));
        }
        self.inner.first.send_replace(true);
    }
}
