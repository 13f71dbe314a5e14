//! Many writers and many watchers at once: every watcher sees every event exactly once,
//! in revision order, and every write is acknowledged with a distinct revision.

use std::collections::HashSet;

use berth::store::{Config, Outcome, Preconditions, Store, WatchEvent, WatchOptions};

use crate::support::{object, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_sees_every_event_once_in_order() {
    const WRITERS: u64 = 32;
    const PER_WRITER: u64 = 40;
    const WATCHERS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Config::new(dir.path())).await.unwrap();
    let start = store.revision();

    let mut watchers = Vec::new();
    for i in 0..WATCHERS {
        // Half start before the writes from "now", half replay from a past revision.
        let after = if i % 2 == 0 { None } else { Some(start) };
        let mut w = store
            .watch(WatchOptions {
                after,
                ..Default::default()
            })
            .unwrap();
        watchers.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            while revs.len() < (WRITERS * PER_WRITER * 2) as usize {
                match w.next().await {
                    Some(WatchEvent::Event(e)) => revs.push(e.revision),
                    other => panic!("watcher {i}: unexpected {other:?}"),
                }
            }
            revs
        }));
    }

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..PER_WRITER {
                let key = format!("/c/{w}/{i}");
                let Outcome::Written(r) = store.create(&key, object(&key, i)).await.unwrap() else {
                    panic!("create {key}")
                };
                revs.push(r.revision);
                let Outcome::Written(r) = store
                    .update(
                        &key,
                        object(&key, i + 1),
                        Preconditions::revision(r.revision),
                    )
                    .await
                    .unwrap()
                else {
                    panic!("update {key}")
                };
                revs.push(r.revision);
            }
            revs
        }));
    }
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(within(60, w).await.unwrap());
    }
    let distinct: HashSet<u64> = acked.iter().copied().collect();
    assert_eq!(distinct.len(), acked.len(), "revisions are never shared");
    let total = WRITERS * PER_WRITER * 2;
    assert_eq!(store.revision(), start + total);

    let want: Vec<u64> = (start + 1..=start + total).collect();
    for (i, w) in watchers.into_iter().enumerate() {
        let got = within(60, w).await.unwrap();
        assert_eq!(got, want, "watcher {i}");
    }
    store.close().await.unwrap();
}
