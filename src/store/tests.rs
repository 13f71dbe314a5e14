//! Store tests on a real temporary database: the rules one by one, then a model-based
//! property test against a `BTreeMap` model with random operations and reopens.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

fn obj(name: &str, n: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "ConfigMap",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "data": {"n": n.to_string()},
    }))
    .unwrap()
}

fn parse(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

fn rv(b: &[u8]) -> u64 {
    parse(b)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn config(dir: &Path) -> Config {
    Config::new(dir)
}

async fn open(dir: &Path) -> Store {
    Store::open(config(dir)).await.unwrap()
}

/// The revision a fresh store starts at: the bootstrap migration's writes.
fn bootstrap_revision() -> u64 {
    4
}

async fn next(w: &mut Watch) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("watch event in time")
        .expect("watch still open")
}

fn written(o: Outcome) -> Record {
    match o {
        Outcome::Written(r) => r,
        other => panic!("expected a write, got {other:?}"),
    }
}

/// The log files (written or ready) in the store's directory.
fn log_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(store_dir(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("log-"))
        .collect()
}

#[tokio::test]
async fn the_log_moves_on_to_new_files_and_a_reopen_finds_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.log_file_bytes = 4 << 10;
    let s = Store::open(c.clone()).await.unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..300 {
        written(s.create(&format!("/j/{i:03}"), obj("j", i)).await.unwrap());
        seen.extend(log_files(dir.path()));
    }
    assert!(seen.len() > 5, "the log moved on to new files: {seen:?}");
    let revision = s.revision();
    s.close().await.unwrap();
    drop(s);
    let s = Store::open(c).await.unwrap();
    assert_eq!(s.revision(), revision);
    let (items, _) = s.list("/j/");
    assert_eq!(items.len(), 300);
    assert_eq!(rv(&items[299].1.value), revision);
}

#[tokio::test]
async fn a_new_store_holds_the_default_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let (items, rev) = s.list("/registry/namespaces/");
    let names: Vec<&str> = items.iter().map(|(k, _)| &k[21..]).collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    assert_eq!(rev, bootstrap_revision());
    let ns = parse(&items[0].1.value);
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(ns["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert_eq!(rv(&items[0].1.value), items[0].1.revision);
    s.close().await.unwrap();
}

#[tokio::test]
async fn create_stamps_the_revision_and_refuses_an_existing_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let r = written(s.create("/a", obj("a", 1)).await.unwrap());
    assert_eq!(r.revision, bootstrap_revision() + 1);
    assert_eq!(rv(&r.value), r.revision);
    assert_eq!(s.get("/a"), Some(r.clone()));
    assert_eq!(s.revision(), r.revision);
    assert_eq!(
        s.create("/a", obj("a", 2)).await.unwrap(),
        Outcome::AlreadyExists(r.clone())
    );
    assert_eq!(
        s.revision(),
        r.revision,
        "a refused write takes no revision"
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn update_with_stale_resource_version_is_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let r1 = written(s.create("/a", obj("a", 1)).await.unwrap());
    let r2 = written(
        s.update("/a", obj("a", 2), Preconditions::revision(r1.revision))
            .await
            .unwrap(),
    );
    assert!(r2.revision > r1.revision);
    assert_eq!(
        s.update("/a", obj("a", 3), Preconditions::revision(r1.revision))
            .await
            .unwrap(),
        Outcome::Conflict(r2.clone())
    );
    assert_eq!(parse(&s.get("/a").unwrap().value)["data"]["n"], "2");
    // No precondition: last writer wins.
    let r3 = written(
        s.update("/a", obj("a", 3), Preconditions::default())
            .await
            .unwrap(),
    );
    assert_eq!(r3.revision, r2.revision + 1);
    assert_eq!(
        s.update("/missing", obj("m", 1), Preconditions::default())
            .await
            .unwrap(),
        Outcome::NotFound
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn delete_checks_uid_and_returns_the_last_state_at_the_delete_revision() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let r1 = written(s.create("/a", obj("a", 1)).await.unwrap());
    let wrong = Preconditions {
        revision: None,
        uid: Some("uid-other".into()),
    };
    assert_eq!(
        s.delete("/a", wrong).await.unwrap(),
        Outcome::Conflict(r1.clone())
    );
    let right = Preconditions {
        revision: Some(r1.revision),
        uid: Some("uid-a".into()),
    };
    let gone = written(s.delete("/a", right).await.unwrap());
    assert_eq!(gone.revision, r1.revision + 1);
    assert_eq!(rv(&gone.value), gone.revision);
    assert_eq!(parse(&gone.value)["data"]["n"], "1");
    assert_eq!(s.get("/a"), None);
    assert_eq!(
        s.delete("/a", Preconditions::default()).await.unwrap(),
        Outcome::NotFound
    );
    // A deletion may record the state a last change left: the answer and the event
    // carry it, at the deletion's revision, with the stored object as `prev`.
    let b = written(s.create("/b", obj("b", 1)).await.unwrap());
    let mut w = s
        .watch(WatchOptions {
            after: Some(b.revision),
            ..Default::default()
        })
        .unwrap();
    let gone = written(
        s.delete_as("/b", obj("b", 2), Preconditions::revision(b.revision))
            .await
            .unwrap(),
    );
    assert_eq!(parse(&gone.value)["data"]["n"], "2");
    assert_eq!(rv(&gone.value), b.revision + 1);
    let WatchEvent::Event(e) = next(&mut w).await else {
        panic!("the deletion")
    };
    assert_eq!((e.kind, &e.object), (EventKind::Deleted, &gone.value));
    assert_eq!(e.prev.as_ref().map(|p| &p.value), Some(&b.value));
    assert_eq!(s.get("/b"), None);
    s.close().await.unwrap();
}

#[tokio::test]
async fn invalid_values_are_refused_before_they_reach_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    for bad in [&b"[1,2]"[..], b"{\"a\":", b"\"str\"", b"{\"metadata\":[]}"] {
        let err = s.create("/bad", bad.to_vec()).await.unwrap_err();
        assert!(matches!(err, Error::InvalidValue { .. }), "{err}");
    }
    assert_eq!(s.revision(), bootstrap_revision());
    s.close().await.unwrap();
}

#[tokio::test]
async fn list_pages_by_prefix_at_one_revision() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    for i in 0..5 {
        s.create(&format!("/p/{i}"), obj("x", i)).await.unwrap();
    }
    s.create("/q/0", obj("y", 0)).await.unwrap();
    let (all, rev) = s.list("/p/");
    assert_eq!(all.len(), 5);
    assert_eq!(rev, s.revision());
    assert_eq!(s.count("/p/"), 5);
    let (page1, _) = s.list_page("/p/", None, 2);
    let (page2, _) = s.list_page("/p/", Some(&page1[1].0), 2);
    let (page3, _) = s.list_page("/p/", Some(&page2[1].0), 2);
    let keys: Vec<String> = [page1, page2, page3]
        .concat()
        .into_iter()
        .map(|(k, _)| k.to_string())
        .collect();
    assert_eq!(keys, ["/p/0", "/p/1", "/p/2", "/p/3", "/p/4"]);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_page_at_an_older_revision_shows_that_moment() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let mut then = BTreeMap::new();
    for i in 0..5 {
        let r = written(s.create(&format!("/p/{i}"), obj("x", i)).await.unwrap());
        then.insert(format!("/p/{i}"), r.value);
    }
    let at = s.revision();
    // Changes after `at`: inside the page's range, before it, and under another prefix.
    s.update("/p/1", obj("x", 10), Preconditions::default())
        .await
        .unwrap();
    s.delete("/p/2", Preconditions::default()).await.unwrap();
    s.create("/p/25", obj("x", 25)).await.unwrap();
    s.update("/p/1", obj("x", 11), Preconditions::default())
        .await
        .unwrap();
    s.delete("/p/0", Preconditions::default()).await.unwrap();
    s.create("/q/0", obj("y", 0)).await.unwrap();
    let page = |start: Option<&'static str>, limit| {
        let s = s.clone();
        async move {
            s.list_page_at("/p/", start, limit, at)
                .await
                .unwrap()
                .unwrap()
                .into_iter()
                .map(|(k, r)| (k.to_string(), r.value))
                .collect::<Vec<_>>()
        }
    };
    let want = |keys: &[&str]| {
        keys.iter()
            .map(|k| (k.to_string(), then[*k].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        page(Some("/p/0"), 10).await,
        want(&["/p/1", "/p/2", "/p/3", "/p/4"])
    );
    assert_eq!(page(None, 2).await, want(&["/p/0", "/p/1"]));
    // At the current revision it is the plain page.
    let now = s
        .list_page_at("/p/", None, 10, s.revision())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now, s.list_page("/p/", None, 10).0);
    // Once that history is compacted away, the moment cannot be shown.
    s.compact(at + 2).await.unwrap();
    assert!(s.list_page_at("/p/", None, 10, at).await.unwrap().is_none());
    s.close().await.unwrap();
}

#[test]
fn a_page_is_undone_only_from_a_fetch_that_made_room_for_every_change() {
    let rec = |n: u64| Record {
        revision: n,
        value: Bytes::from(obj("x", n)),
    };
    let entry = |k: &str, n: u64| (Arc::<str>::from(k), rec(n));
    // Now: a, b, c, d (b and c changed since: b was made after, c replaced).
    let now = vec![entry("a", 1), entry("b", 9), entry("c", 8), entry("d", 2)];
    let mut then: BTreeMap<Arc<str>, Option<Record>> = BTreeMap::new();
    then.insert("b".into(), None);
    then.insert("c".into(), Some(rec(3)));
    let keys = |page: Vec<(Arc<str>, Record)>| {
        page.into_iter()
            .map(|(k, r)| format!("{k}{}", r.revision))
            .collect::<Vec<_>>()
    };
    // Fetched with room for both changes (limit 2 + 2): a1 c3.
    let page = undo(now.clone(), 4, 2, &then, 2).unwrap();
    assert_eq!(keys(page), ["a1", "c3"]);
    // Fetched with room for one, and full: a later key might belong; fetch again.
    assert!(undo(now[..3].to_vec(), 3, 1, &then, 2).is_none());
    // ... unless the fetch took the rest of the range.
    let page = undo(now.clone(), 5, 1, &then, 3).unwrap();
    assert_eq!(keys(page), ["a1", "c3", "d2"]);
}

/// A commit reaches the disk and the cache a moment before the watch hub hears of it.
/// A page at an older revision that sees it in the cache reads its history from disk.
#[tokio::test]
async fn a_page_in_the_moment_before_a_commit_is_published_finds_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    s.create("/h/a", obj("a", 1)).await.unwrap();
    let at = s.revision();
    // The committer's steps, stopped before it publishes to the hub.
    let event = Arc::new(backend::Event {
        revision: at + 1,
        key: Arc::from("/h/b"),
        kind: EventKind::Created,
        object: restamp(&Bytes::from(obj("b", 1)), at + 1).unwrap(),
        prev: None,
        time_ms: 1,
    });
    let events = [event];
    let shared = &s.shared;
    shared
        .backend
        .commit(&backend::CommitBatch {
            revision: at + 1,
            events: &events,
            schema: None,
        })
        .unwrap();
    shared.cache.apply(&events, at + 1);
    assert_eq!(s.revision(), at + 1);

    let page = s
        .list_page_at("/h/", None, 10, at)
        .await
        .unwrap()
        .expect("the history since the page's revision is on disk");
    let keys: Vec<_> = page.iter().map(|(k, _)| k.to_string()).collect();
    assert_eq!(keys, ["/h/a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_at_one_revision_hold_while_writers_change_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    for i in 0..200 {
        s.create(&format!("/p/{i:03}"), obj("x", i)).await.unwrap();
    }
    let (then, at) = s.list("/p/");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (s, stop, written) = (s.clone(), stop.clone(), written.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let k = format!("/p/{:03}", n * 7 % 200);
                match n % 3 {
                    0 => drop(s.update(&k, obj("y", n), Preconditions::default()).await),
                    1 => drop(s.delete(&k, Preconditions::default()).await),
                    _ => drop(s.create(&format!("{k}-new"), obj("z", n)).await),
                }
                n += 1;
                written.store(n, std::sync::atomic::Ordering::Relaxed);
            }
            n
        })
    };
    // Page through the range at least five times, and on until the writer has
    // changed it a good deal: on a busy machine it may start late.
    let mut rounds = 0;
    while rounds < 5 || written.load(std::sync::atomic::Ordering::Relaxed) < 60 {
        rounds += 1;
        tokio::task::yield_now().await;
        let mut pages = Vec::new();
        let mut start: Option<Arc<str>> = None;
        loop {
            let page = s
                .list_page_at("/p/", start.as_deref(), 7, at)
                .await
                .unwrap()
                .expect("history since the first page");
            if page.is_empty() {
                break;
            }
            start = page.last().map(|(k, _)| k.clone());
            pages.extend(page);
        }
        assert_eq!(pages, then);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(writer.await.unwrap() >= 60);
    s.close().await.unwrap();
}

#[tokio::test]
async fn watch_replays_history_then_follows_live_writes_with_prev_objects() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let start = s.revision();
    let a = written(s.create("/w/a", obj("a", 1)).await.unwrap());
    s.create("/other", obj("o", 1)).await.unwrap();
    let mut w = s
        .watch(WatchOptions {
            prefix: "/w/".into(),
            after: Some(start),
            ..Default::default()
        })
        .unwrap();
    let WatchEvent::Event(e) = next(&mut w).await else {
        panic!()
    };
    assert_eq!(
        (e.kind, e.revision, e.prev.clone()),
        (EventKind::Created, a.revision, None)
    );
    let b = written(
        s.update("/w/a", obj("a", 2), Preconditions::default())
            .await
            .unwrap(),
    );
    let WatchEvent::Event(e) = next(&mut w).await else {
        panic!()
    };
    assert_eq!((e.kind, e.revision), (EventKind::Updated, b.revision));
    assert_eq!(e.prev, Some(a.clone()));
    let d = written(s.delete("/w/a", Preconditions::default()).await.unwrap());
    let WatchEvent::Event(e) = next(&mut w).await else {
        panic!()
    };
    assert_eq!((e.kind, e.revision), (EventKind::Deleted, d.revision));
    assert_eq!(e.object, d.value);
    assert_eq!(e.prev.as_ref().map(|p| p.revision), Some(b.revision));
    s.close().await.unwrap();
    assert!(w.next().await.is_none(), "closing the store ends watches");
}

#[tokio::test]
async fn watch_resumes_from_the_disk_log_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let start = s.revision();
    for i in 0..20 {
        s.create(&format!("/k/{i}"), obj("k", i)).await.unwrap();
    }
    s.close().await.unwrap();
    drop(s);
    let s = open(dir.path()).await;
    assert_eq!(s.revision(), start + 20);
    let mut w = s
        .watch(WatchOptions {
            after: Some(start + 5),
            ..Default::default()
        })
        .unwrap();
    for want in start + 6..=start + 20 {
        let WatchEvent::Event(e) = next(&mut w).await else {
            panic!()
        };
        assert_eq!(e.revision, want);
    }
    let live = written(s.create("/k/live", obj("k", 99)).await.unwrap());
    let WatchEvent::Event(e) = next(&mut w).await else {
        panic!()
    };
    assert_eq!(e.revision, live.revision);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_watch_from_before_the_compaction_floor_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    for i in 0..10 {
        s.create(&format!("/c/{i}"), obj("c", i)).await.unwrap();
    }
    let floor = s.compact(s.revision() - 3).await.unwrap();
    assert_eq!(floor, s.revision() - 3);
    assert_eq!(s.compacted(), floor);
    let mut w = s
        .watch(WatchOptions {
            after: Some(floor - 1),
            ..Default::default()
        })
        .unwrap();
    assert!(
        matches!(next(&mut w).await, WatchEvent::Compacted { compacted } if compacted == floor)
    );
    assert!(w.next().await.is_none());
    // Exactly at the floor is still fine.
    let mut w = s
        .watch(WatchOptions {
            after: Some(floor),
            ..Default::default()
        })
        .unwrap();
    let WatchEvent::Event(e) = next(&mut w).await else {
        panic!()
    };
    assert_eq!(e.revision, floor + 1);
    // The floor survives a restart.
    s.close().await.unwrap();
    drop((s, w));
    let s = open(dir.path()).await;
    assert_eq!(s.compacted(), floor);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_slow_watcher_catches_up_from_the_log_without_holding_up_writers() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.history = 8;
    let s = Store::open(c).await.unwrap();
    let mut slow = s.watch(WatchOptions::default()).unwrap();
    let start = s.revision();
    for i in 0..50 {
        s.create(&format!("/s/{i}"), obj("s", i)).await.unwrap();
    }
    // Memory holds the last 8 events; the other 42 come from the log, in order.
    for i in 0..50u64 {
        let WatchEvent::Event(e) = next(&mut slow).await else {
            panic!("event {i}")
        };
        assert_eq!(e.revision, start + 1 + i);
        assert_eq!(&*e.key, format!("/s/{i}"));
    }
    s.close().await.unwrap();
    assert!(slow.next().await.is_none());
}

#[tokio::test]
async fn a_watch_skips_other_prefixes_without_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.history = 4;
    let s = Store::open(c).await.unwrap();
    let mut a = s
        .watch(WatchOptions {
            prefix: "/a/".into(),
            ..Default::default()
        })
        .unwrap();
    // Far more writes elsewhere than memory holds: the watch of /a/ skips them without
    // reading the log.
    for i in 0..40 {
        s.create(&format!("/b/{i}"), obj("b", i)).await.unwrap();
    }
    // Compacting them away does not end the watch: it never needed them.
    s.compact(s.revision()).await.unwrap();
    s.create("/a/x", obj("x", 1)).await.unwrap();
    let WatchEvent::Event(e) = next(&mut a).await else {
        panic!()
    };
    assert_eq!(&*e.key, "/a/x");
    assert_eq!(e.revision, s.revision());
    for i in 0..40 {
        s.create(&format!("/b/more-{i}"), obj("b", i))
            .await
            .unwrap();
    }
    let idle = futures_util::FutureExt::now_or_never(a.next());
    assert!(idle.is_none(), "an event of another prefix came: {idle:?}");
    s.create("/a/y", obj("y", 2)).await.unwrap();
    let WatchEvent::Event(e) = next(&mut a).await else {
        panic!()
    };
    assert_eq!(&*e.key, "/a/y");
    s.close().await.unwrap();
}

/// Enough watchers on one prefix that a publish hands its wake list to the waker
/// thread: every one of them is woken for every event, none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_to_many_watchers_wakes_every_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let mut w = s
            .watch(WatchOptions {
                prefix: "/many/".into(),
                ..Default::default()
            })
            .unwrap();
        tasks.push(tokio::spawn(async move {
            // No timeout of its own: a timer that fires polls the watch, which would
            // hide a lost wakeup.
            let mut keys = Vec::new();
            for _ in 0..3 {
                let Some(WatchEvent::Event(e)) = w.next().await else {
                    panic!("expected an event")
                };
                keys.push(e.key.to_string());
            }
            keys
        }));
    }
    // Let the watchers park, so that each event has to wake them.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..3 {
        s.create(&format!("/many/{i}"), obj("m", i)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        let keys = tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("every watcher woken")
            .unwrap();
        assert_eq!(keys, ["/many/0", "/many/1", "/many/2"]);
    }
    s.close().await.unwrap();
}

#[tokio::test]
async fn live_watches_of_many_prefixes_see_exactly_their_events() {
    use futures_util::FutureExt;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    // Little memory, so that idle watches fall behind it.
    c.history = 4;
    let s = Store::open(c).await.unwrap();
    let prefixes = ["/a/", "/b/", "/c/", "/a/x/", ""];
    let keys = ["/a/1", "/a/2", "/b/1", "/c/1", "/a/x/1", "/d/1"];
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut roll = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    /// (revision, key) of an event.
    type Seen = Vec<(u64, String)>;
    // (prefix, revision it started after, the watch, what it delivered)
    let mut watches: Vec<(&str, u64, Watch, Seen)> = Vec::new();
    let mut log: Seen = Vec::new();
    let mut n = 0;
    for _ in 0..600 {
        match roll(10) {
            0 => {
                let prefix = prefixes[roll(prefixes.len() as u64) as usize];
                let from = s.revision();
                let w = s
                    .watch(WatchOptions {
                        prefix: prefix.into(),
                        ..Default::default()
                    })
                    .unwrap();
                watches.push((prefix, from, w, Vec::new()));
            }
            1 | 2 if !watches.is_empty() => {
                // Take what a watch has ready, without waiting.
                let i = roll(watches.len() as u64) as usize;
                let (_, _, w, got) = &mut watches[i];
                while let Some(ev) = w.next().now_or_never() {
                    let Some(WatchEvent::Event(e)) = ev else {
                        panic!("unexpected {ev:?}")
                    };
                    got.push((e.revision, e.key.to_string()));
                }
            }
            _ => {
                let key = keys[roll(keys.len() as u64) as usize];
                n += 1;
                let out = s.create(&format!("{key}-{n}"), obj("o", n)).await.unwrap();
                let Outcome::Written(r) = out else {
                    panic!("{out:?}")
                };
                log.push((r.revision, format!("{key}-{n}")));
            }
        }
    }
    assert!(watches.len() > 20, "a fair test has many watches");
    for (prefix, from, w, got) in &mut watches {
        let want: Seen = log
            .iter()
            .filter(|(r, k)| *r > *from && k.starts_with(*prefix))
            .cloned()
            .collect();
        while got.len() < want.len() {
            let WatchEvent::Event(e) = next(w).await else {
                panic!("watch of {prefix:?}: not an event")
            };
            got.push((e.revision, e.key.to_string()));
        }
        assert_eq!(*got, want, "watch of {prefix:?} from {from}");
        assert!(w.next().now_or_never().is_none(), "more than its events");
    }
    s.close().await.unwrap();
}

/// Watches read the hub without its lock while the committer publishes on another thread:
/// each must still deliver exactly its events, and a progress report must never claim a
/// revision whose events it has not delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watches_racing_concurrent_writers_miss_nothing() {
    #[derive(Debug)]
    enum Seen {
        Event(u64, String),
        Progress(u64),
    }
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let prefixes = ["/a/", "/b/", "/a/x/", ""];
    let from = s.revision();
    let mut watchers = Vec::new();
    for prefix in prefixes.iter().cycle().take(12) {
        let mut w = s
            .watch(WatchOptions {
                prefix: (*prefix).into(),
                after: Some(from),
                progress_every: Some(Duration::from_millis(1)),
            })
            .unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(ev) = w.next().await {
                let seen = match ev {
                    WatchEvent::Event(e) => Seen::Event(e.revision, e.key.to_string()),
                    WatchEvent::Progress(r) => Seen::Progress(r),
                    other => panic!("unexpected {other:?}"),
                };
                if tx.send(seen).is_err() {
                    return;
                }
            }
        });
        watchers.push((*prefix, rx));
    }
    let keys = ["/a/", "/a/x/", "/b/", "/c/"];
    let mut writers = Vec::new();
    for t in 0..4u64 {
        let s = s.clone();
        writers.push(tokio::spawn(async move {
            let mut log = Vec::new();
            for i in 0..150u64 {
                let key = format!("{}{t}-{i}", keys[((t + i) % 4) as usize]);
                let out = s.create(&key, obj("o", i)).await.unwrap();
                log.push((written(out).revision, key));
                if i % 16 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            log
        }));
    }
    let mut log = Vec::new();
    for w in writers {
        log.extend(w.await.unwrap());
    }
    log.sort();
    for (prefix, rx) in &mut watchers {
        let want: Vec<(u64, String)> = log
            .iter()
            .filter(|(_, k)| k.starts_with(*prefix))
            .cloned()
            .collect();
        let mut got = Vec::new();
        while got.len() < want.len() {
            let seen = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("the watch's events in time")
                .expect("the watch still open");
            match seen {
                Seen::Event(r, k) => got.push((r, k)),
                Seen::Progress(r) => {
                    let due = want.iter().take_while(|(w, _)| *w <= r).count();
                    assert!(
                        got.len() >= due,
                        "watch of {prefix:?} reported progress to {r} with {} of its {due} events up to there",
                        got.len()
                    );
                }
            }
        }
        assert_eq!(got, want, "watch of {prefix:?}");
    }
    drop(watchers);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_quiet_watch_reports_progress() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let mut w = s
        .watch(WatchOptions {
            prefix: "/quiet/".into(),
            progress_every: Some(Duration::from_millis(20)),
            ..Default::default()
        })
        .unwrap();
    s.create("/loud/a", obj("a", 1)).await.unwrap();
    let want = s.revision();
    // Progress may come before the unrelated write was seen; it must reach it.
    loop {
        match next(&mut w).await {
            WatchEvent::Progress(r) if r == want => break,
            WatchEvent::Progress(r) => assert!(r < want),
            other => panic!("unexpected {other:?}"),
        }
    }
    s.close().await.unwrap();
}

#[tokio::test]
async fn retention_keeps_the_larger_of_the_count_and_time_windows() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    for i in 0..30 {
        s.create(&format!("/r/{i}"), obj("r", i)).await.unwrap();
    }
    let mut c = config(dir.path());
    c.retain_events = 10;
    // Everything is younger than an hour: the time window keeps all of it.
    assert_eq!(compact::floor_for_test(&s.shared, &c), 0);
    // With no time window, only the count applies.
    c.retain_for = Duration::ZERO;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(compact::floor_for_test(&s.shared, &c), s.revision() - 10);
    s.close().await.unwrap();
}

#[tokio::test]
async fn the_retention_policy_runs_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.retain_events = 5;
    c.retain_for = Duration::ZERO;
    c.compact_every = Duration::from_millis(10);
    let s = Store::open(c).await.unwrap();
    for i in 0..20 {
        s.create(&format!("/r/{i}"), obj("r", i)).await.unwrap();
    }
    let want = s.revision() - 5;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.compacted() < want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "compaction did not run"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(s.compacted(), want);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_directory_from_a_newer_berth_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let b = sled_backend::SledBackend::open(&store_dir(dir.path()), 1 << 20).unwrap();
        b.commit(&backend::CommitBatch {
            revision: 0,
            events: &[],
            schema: Some(migrate::latest() + 1),
        })
        .unwrap();
    }
    let err = Store::open(config(dir.path())).await.err().unwrap();
    assert!(matches!(err, Error::NewerSchema { .. }), "{err}");
    assert!(err.to_string().contains("newer berth"), "{err}");
    let status = migrate::status(dir.path()).unwrap();
    assert_eq!(status.current, migrate::latest() + 1);
}

#[tokio::test]
async fn pending_migrations_are_applied_after_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    // A store at schema 0 that already holds data (as an older berth would leave it).
    {
        let b = sled_backend::SledBackend::open(&store_dir(dir.path()), 1 << 20).unwrap();
        let e = std::sync::Arc::new(Event {
            revision: 1,
            key: "/old".into(),
            kind: EventKind::Created,
            object: bytes::Bytes::from_static(b"{\"metadata\":{\"resourceVersion\":\"1\"}}"),
            prev: None,
            time_ms: 1,
        });
        b.commit(&backend::CommitBatch {
            revision: 1,
            events: &[e],
            schema: None,
        })
        .unwrap();
    }
    assert_eq!(migrate::status(dir.path()).unwrap().pending.len(), 1);
    let s = open(dir.path()).await;
    assert_eq!(s.revision(), 1 + bootstrap_revision());
    assert!(s.get("/old").is_some());
    assert_eq!(s.count("/registry/namespaces/"), 4);
    s.close().await.unwrap();
    drop(s);
    let backups: Vec<_> = std::fs::read_dir(dir.path().join("backups"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(backups.len(), 1);
    assert!(backups[0].ends_with("-v0"), "{backups:?}");
    // The backup restores to the pre-migration state.
    let restored = tempfile::tempdir().unwrap();
    let info = snapshot::restore(
        &dir.path().join("backups").join(&backups[0]),
        restored.path(),
    )
    .unwrap();
    assert_eq!((info.revision, info.schema), (1, 0));
    let status = migrate::status(dir.path()).unwrap();
    assert!(status.pending.is_empty());
}

#[tokio::test]
async fn snapshots_round_trip_and_damage_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    for i in 0..50 {
        s.create(&format!("/snap/{i}"), obj("s", i)).await.unwrap();
    }
    let (want, rev) = s.list("");
    s.close().await.unwrap();
    drop(s);
    let file = dir.path().join("out.snap");
    let info = snapshot::save(dir.path(), &file).unwrap();
    assert_eq!(info.revision, rev);
    // It holds every Secret: readable by its owner only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    let target = tempfile::tempdir().unwrap();
    snapshot::restore(&file, target.path()).unwrap();
    let s = open(target.path()).await;
    assert_eq!(s.list(""), (want, rev));
    // Revisions continue where they were.
    let r = written(s.create("/after", obj("a", 1)).await.unwrap());
    assert_eq!(r.revision, rev + 1);
    s.close().await.unwrap();
    drop(s);

    // Restoring over an existing store is refused.
    let err = snapshot::restore(&file, target.path()).unwrap_err();
    assert!(err.to_string().contains("already holds a store"), "{err}");

    // A flipped byte or a cut file is refused and leaves nothing behind.
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    let damaged = dir.path().join("damaged.snap");
    std::fs::write(&damaged, &bytes).unwrap();
    let empty = tempfile::tempdir().unwrap();
    assert!(snapshot::restore(&damaged, empty.path()).is_err());
    assert!(!store_dir(empty.path()).exists());
    let cut = dir.path().join("cut.snap");
    std::fs::write(&cut, &std::fs::read(&file).unwrap()[..mid]).unwrap();
    let err = snapshot::restore(&cut, empty.path()).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    assert!(!store_dir(empty.path()).exists());
}

#[tokio::test]
async fn a_second_process_cannot_open_a_store_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let err = migrate::status(dir.path()).unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    s.close().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// The model-based property test.

mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    pub enum Step {
        Create(u8),
        Update {
            key: u8,
            stale: bool,
        },
        Delete {
            key: u8,
            stale: bool,
        },
        Get(u8),
        List(u8),
        Watch {
            back: u8,
            prefix: u8,
        },
        /// A page of the objects as they were `back` revisions ago.
        PageAt {
            back: u8,
            prefix: u8,
            start: Option<u8>,
            limit: u8,
        },
        Compact {
            back: u8,
        },
        Reopen,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u8..6).prop_map(Step::Create),
            4 => (0u8..6, any::<bool>()).prop_map(|(key, stale)| Step::Update { key, stale }),
            2 => (0u8..6, any::<bool>()).prop_map(|(key, stale)| Step::Delete { key, stale }),
            1 => (0u8..6).prop_map(Step::Get),
            1 => (0u8..3).prop_map(Step::List),
            2 => (0u8..12, 0u8..3).prop_map(|(back, prefix)| Step::Watch { back, prefix }),
            2 => (0u8..12, 1u8..3, proptest::option::of(0u8..6), 1u8..5).prop_map(
                |(back, prefix, start, limit)| Step::PageAt { back, prefix, start, limit }
            ),
            1 => (0u8..12).prop_map(|back| Step::Compact { back }),
            1 => Just(Step::Reopen),
        ]
    }

    fn key(k: u8) -> String {
        format!(
            "/{}/{}",
            if k.is_multiple_of(2) { "even" } else { "odd" },
            k
        )
    }

    fn prefix(p: u8) -> &'static str {
        ["", "/even/", "/odd/"][p as usize]
    }

    /// What the store should hold.
    #[derive(Default)]
    struct Model {
        objects: BTreeMap<String, (u64, u64)>, // key -> (revision, payload)
        revision: u64,
        compacted: u64,
        /// (revision, key, kind)
        events: Vec<(u64, String, EventKind)>,
        payload: u64,
        /// `objects` after each revision that changed them.
        past: BTreeMap<u64, BTreeMap<String, (u64, u64)>>,
    }

    /// The payload number of an object written by [`obj`].
    fn payload(r: &Record) -> u64 {
        parse(&r.value)["data"]["n"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    async fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Some(open(dir.path()).await);
        let mut m = Model {
            revision: bootstrap_revision(),
            ..Default::default()
        };
        m.past.insert(0, BTreeMap::new());
        for (i, ns) in ["default", "kube-system", "kube-public", "kube-node-lease"]
            .iter()
            .enumerate()
        {
            let k = format!("/registry/namespaces/{ns}");
            m.events.push((i as u64 + 1, k, EventKind::Created));
        }
        for step in steps {
            let s = store.as_ref().unwrap();
            match step {
                Step::Create(k) => {
                    m.payload += 1;
                    let out = s.create(&key(k), obj("o", m.payload)).await.unwrap();
                    match m.objects.get(&key(k)) {
                        Some(&(rev, _)) => {
                            prop_assert!(
                                matches!(out, Outcome::AlreadyExists(r) if r.revision == rev)
                            )
                        }
                        None => {
                            m.revision += 1;
                            let r = written(out);
                            prop_assert_eq!(r.revision, m.revision);
                            m.objects.insert(key(k), (m.revision, m.payload));
                            m.events.push((m.revision, key(k), EventKind::Created));
                            m.past.insert(m.revision, m.objects.clone());
                        }
                    }
                }
                Step::Update { key: k, stale } | Step::Delete { key: k, stale } => {
                    let is_update = matches!(step, Step::Update { .. });
                    let current = m.objects.get(&key(k)).copied();
                    let expect = current.map(|(rev, _)| if stale { rev - 1 } else { rev });
                    let pre = Preconditions {
                        revision: expect,
                        uid: None,
                    };
                    m.payload += 1;
                    let out = if is_update {
                        s.update(&key(k), obj("o", m.payload), pre).await.unwrap()
                    } else {
                        s.delete(&key(k), pre).await.unwrap()
                    };
                    match current {
                        None => prop_assert_eq!(out, Outcome::NotFound),
                        Some((rev, _)) if stale => {
                            prop_assert!(matches!(out, Outcome::Conflict(r) if r.revision == rev))
                        }
                        Some(_) => {
                            m.revision += 1;
                            prop_assert_eq!(written(out).revision, m.revision);
                            let kind = if is_update {
                                m.objects.insert(key(k), (m.revision, m.payload));
                                EventKind::Updated
                            } else {
                                m.objects.remove(&key(k));
                                EventKind::Deleted
                            };
                            m.events.push((m.revision, key(k), kind));
                            m.past.insert(m.revision, m.objects.clone());
                        }
                    }
                }
                Step::Get(k) => {
                    let got = s.get(&key(k)).map(|r| (r.revision, payload(&r)));
                    prop_assert_eq!(got, m.objects.get(&key(k)).copied());
                }
                Step::List(p) => {
                    let (items, rev) = s.list(prefix(p));
                    prop_assert_eq!(rev, m.revision);
                    let got: Vec<(String, u64)> = items
                        .iter()
                        .map(|(k, r)| (k.to_string(), r.revision))
                        .collect();
                    let want: Vec<(String, u64)> = m
                        .objects
                        .iter()
                        .filter(|(k, _)| k.starts_with(prefix(p)))
                        .map(|(k, &(r, _))| (k.clone(), r))
                        .collect();
                    let got: Vec<_> = got
                        .into_iter()
                        .filter(|(k, _)| !k.starts_with("/registry/"))
                        .collect();
                    prop_assert_eq!(got, want);
                }
                Step::Watch { back, prefix: p } => {
                    let after = m.revision.saturating_sub(back as u64);
                    let mut w = s
                        .watch(WatchOptions {
                            prefix: prefix(p).into(),
                            after: Some(after),
                            ..Default::default()
                        })
                        .unwrap();
                    if after < m.compacted {
                        let ev = next(&mut w).await;
                        prop_assert!(matches!(ev, WatchEvent::Compacted { .. }), "{:?}", ev);
                    } else {
                        let want: Vec<_> = m
                            .events
                            .iter()
                            .filter(|(r, k, _)| *r > after && k.starts_with(prefix(p)))
                            .cloned()
                            .collect();
                        for (rev, k, kind) in want {
                            let WatchEvent::Event(e) = next(&mut w).await else {
                                return Err(TestCaseError::fail("expected an event"));
                            };
                            prop_assert_eq!(
                                (e.revision, e.key.to_string(), e.kind),
                                (rev, k, kind)
                            );
                        }
                        // Nothing more: the next write must be the next thing seen.
                        let probe = s.create("/probe/x", obj("p", 0)).await.unwrap();
                        m.revision += 1;
                        prop_assert_eq!(written(probe).revision, m.revision);
                        s.delete("/probe/x", Preconditions::default())
                            .await
                            .unwrap();
                        m.revision += 1;
                        m.events
                            .push((m.revision - 1, "/probe/x".into(), EventKind::Created));
                        m.events
                            .push((m.revision, "/probe/x".into(), EventKind::Deleted));
                        if prefix(p).is_empty() {
                            let WatchEvent::Event(e) = next(&mut w).await else {
                                return Err(TestCaseError::fail("expected the probe"));
                            };
                            prop_assert_eq!(e.revision, m.revision - 1);
                        }
                    }
                }
                Step::PageAt {
                    back,
                    prefix: p,
                    start,
                    limit,
                } => {
                    let at = m.revision.saturating_sub(back as u64);
                    let start = start.map(key);
                    let got = s
                        .list_page_at(prefix(p), start.as_deref(), limit.into(), at)
                        .await
                        .unwrap();
                    if at < m.compacted {
                        prop_assert!(got.is_none(), "a page from compacted history");
                    } else {
                        let got: Vec<(String, u64, u64)> = got
                            .expect("history since the page's revision")
                            .iter()
                            .map(|(k, r)| (k.to_string(), r.revision, payload(r)))
                            .collect();
                        let then = m.past.range(..=at).next_back().map(|(_, o)| o).unwrap();
                        let want: Vec<(String, u64, u64)> = then
                            .iter()
                            .filter(|(k, _)| {
                                k.starts_with(prefix(p)) && start.as_ref().is_none_or(|s| *k > s)
                            })
                            .take(limit.into())
                            .map(|(k, &(r, n))| (k.clone(), r, n))
                            .collect();
                        prop_assert_eq!(got, want);
                    }
                }
                Step::Compact { back } => {
                    let to = m.revision.saturating_sub(back as u64);
                    let floor = s.compact(to).await.unwrap();
                    m.compacted = m.compacted.max(to);
                    prop_assert_eq!(floor, m.compacted);
                }
                Step::Reopen => {
                    let s = store.take().unwrap();
                    s.close().await.unwrap();
                    drop(s);
                    let s = open(dir.path()).await;
                    prop_assert_eq!(s.revision(), m.revision);
                    prop_assert_eq!(s.compacted(), m.compacted);
                    store = Some(s);
                }
            }
        }
        store.unwrap().close().await.unwrap();
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
        #[test]
        fn the_store_behaves_like_its_model(steps in proptest::collection::vec(step(), 1..40)) {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(steps))?;
        }
    }
}

/// An object of about `kib` KiB.
fn big(name: &str, n: u64, kib: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "ConfigMap",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "data": {"n": n.to_string(), "blob": "x".repeat(kib << 10)},
    }))
    .unwrap()
}

/// A client rewriting a large object cannot grow the retained history past its byte
/// bound, whatever the count and age rules would keep.
#[tokio::test]
async fn retention_is_bounded_by_bytes_too() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    s.create("/big/a", big("a", 0, 100)).await.unwrap();
    for i in 1..40 {
        s.update("/big/a", big("a", i, 100), Preconditions::default())
            .await
            .unwrap();
    }
    let mut c = config(dir.path());
    c.retain_events = 100_000;
    c.retain_for = Duration::from_secs(3600);
    c.retain_bytes = 0;
    assert_eq!(compact::floor_for_test(&s.shared, &c), 0, "no byte bound");
    c.retain_bytes = 1 << 20;
    let floor = compact::floor_for_test(&s.shared, &c);
    assert!(
        floor > 0 && floor < s.revision(),
        "{floor} of {}",
        s.revision()
    );
    s.compact(floor).await.unwrap();
    let (_, kept) = s.shared.backend.event_bytes_floor(u64::MAX).unwrap();
    assert!(kept <= 1 << 20, "{kept}");
    // Each event holds the object and its previous state: about 200 KiB, so 4 or 5 of
    // them fit, and the newest are the ones kept.
    assert!(kept >= 600 << 10, "{kept}");
    s.close().await.unwrap();
}

/// The recent events held in memory for watches are bounded by bytes as well as count;
/// a watcher behind them reads the rest from the log.
#[tokio::test]
async fn the_watch_cache_is_bounded_by_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.history_bytes = 1 << 20;
    let s = Store::open(c).await.unwrap();
    let mut slow = s.watch(WatchOptions::default()).unwrap();
    let start = s.revision();
    s.create("/big/a", big("a", 0, 100)).await.unwrap();
    for i in 1..30 {
        s.update("/big/a", big("a", i, 100), Preconditions::default())
            .await
            .unwrap();
    }
    let held = s.shared.metrics.history_bytes.get();
    assert!(held > 0 && held <= 1 << 20, "{held}");
    for i in 0..30u64 {
        let WatchEvent::Event(e) = next(&mut slow).await else {
            panic!("event {i}")
        };
        assert_eq!(e.revision, start + 1 + i);
    }
    s.close().await.unwrap();
}
