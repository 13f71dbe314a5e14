//! `cargo bench --bench store`: the object store's figures as one JSON object on stdout.
//!
//! - the disk's raw fsync rate (small write + fsync in a loop), the physical reference;
//! - durable writes/s with 1, 8 and 64 concurrent writers (1 KiB values);
//! - get and list latency (p50/p99) at 10,000 and 100,000 objects, and of a 500-object
//!   page as the objects were before 100 later writes;
//! - watch delivery latency (create call → event at each watcher) with 1,000 watchers;
//! - start-up time with 100,000 stored objects.
//!
//! `BERTH_BENCH_QUICK=1` shrinks every phase (for a smoke run); `BERTH_BENCH_ONLY=watch`
//! (or `writes`, `reads`, comma-separated) runs only those phases.

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::{Unit, phase, quick};

use berth::store::{Config, Outcome, Preconditions, Store, WatchEvent, WatchOptions};
use serde_json::{Value, json};

/// A ~1 KiB object.
fn value(name: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "bench", "uid": "00000000-0000-0000-0000-000000000000"},
        "data": {"payload": "x".repeat(860)},
    }))
    .unwrap()
}

fn percentiles(samples: Vec<Duration>) -> Value {
    common::percentiles(samples, Unit::Micros)
}

fn fsync_rate(dir: &std::path::Path) -> f64 {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).unwrap();
    let run = Duration::from_millis(if quick() { 200 } else { 2000 });
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run {
        f.write_all(&[b'x'; 128]).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let _ = std::fs::remove_file(path);
    n as f64 / start.elapsed().as_secs_f64()
}

async fn open(dir: &std::path::Path) -> Store {
    Store::open(Config::new(dir)).await.unwrap()
}

/// Durable creates per second with `writers` concurrent writers.
async fn write_rate(writers: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let run = Duration::from_millis(if quick() { 300 } else { 3000 });
    let v = value("w");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let v = v.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while start.elapsed() < run {
                let key = format!("/bench/{w}/{n}");
                let out = store.create(&key, v.clone()).await.unwrap();
                assert!(matches!(out, Outcome::Written(_)));
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    store.close().await.unwrap();
    rate
}

/// Fills a store with `n` objects in namespaces of 1,000 each.
async fn fill(store: &Store, n: usize) {
    let per_task = n.div_ceil(64);
    let mut tasks = Vec::new();
    for t in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in t * per_task..((t + 1) * per_task).min(n) {
                let key = format!("/registry/configmaps/ns-{}/cm-{i:06}", i / 1000);
                store.create(&key, value(&key)).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

fn read_latencies(store: &Store, n: usize) -> Value {
    let samples = if quick() { 1000 } else { 20_000 };
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut gets = Vec::with_capacity(samples);
    for _ in 0..samples {
        let i = next() as usize % n;
        let key = format!("/registry/configmaps/ns-{}/cm-{i:06}", i / 1000);
        let t = Instant::now();
        let r = store.get(&key);
        gets.push(t.elapsed());
        assert!(r.is_some());
    }
    let mut lists = Vec::new();
    for _ in 0..(samples / 20) {
        let ns = next() as usize % n.div_ceil(1000);
        let t = Instant::now();
        let (items, _) = store.list(&format!("/registry/configmaps/ns-{ns}/"));
        lists.push(t.elapsed());
        assert!(!items.is_empty());
    }
    let mut list_all = Vec::new();
    for _ in 0..if quick() { 3 } else { 20 } {
        let t = Instant::now();
        let (items, _) = store.list("/registry/configmaps/");
        list_all.push(t.elapsed());
        assert_eq!(items.len(), n);
    }
    json!({
        "get": percentiles(gets),
        "list_1000": percentiles(lists),
        "list_all": percentiles(list_all),
    })
}

/// Latency of a 500-object page of all `n` objects as they were before 100 later
/// writes (a paged list that writes overtook, as kubectl's chunked lists meet).
async fn older_pages(store: &Store, n: usize) -> Value {
    let at = store.revision();
    for i in 0..100 {
        let j = i * 997 % n;
        let key = format!("/registry/configmaps/ns-{}/cm-{j:06}", j / 1000);
        let out = store
            .update(&key, value(&key), Preconditions::default())
            .await
            .unwrap();
        assert!(matches!(out, Outcome::Written(_)), "{key}: {out:?}");
    }
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut pages = Vec::new();
    for _ in 0..if quick() { 20 } else { 200 } {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = rng as usize % n;
        let start = format!("/registry/configmaps/ns-{}/cm-{i:06}", i / 1000);
        let t = Instant::now();
        let page = store
            .list_page_at("/registry/configmaps/", Some(&start), 500, at)
            .await
            .unwrap()
            .expect("history since the page's revision");
        pages.push(t.elapsed());
        assert!(!page.is_empty());
    }
    percentiles(pages)
}

/// Create-call-to-event latency seen by each of `watchers` watchers.
async fn watch_latency(watchers: usize) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let writes = if quick() { 50 } else { 300 };
    // Nanoseconds after `base` at which each write was started (0: not yet).
    let base = Instant::now();
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..writes).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let mut w = store
            .watch(WatchOptions {
                prefix: "/watch/".into(),
                ..Default::default()
            })
            .unwrap();
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(writes);
            while lat.len() < writes {
                match w.next().await {
                    Some(WatchEvent::Event(e)) => {
                        let now = base.elapsed();
                        let seq: usize = e.key["/watch/".len()..].parse().unwrap();
                        let t0 = sent[seq].load(Ordering::Acquire);
                        assert!(t0 > 0, "seen before sent");
                        lat.push(now - Duration::from_nanos(t0));
                    }
                    other => panic!("watch ended: {other:?}"),
                }
            }
            lat
        }));
    }
    let v = value("watch");
    for seq in 0..writes {
        sent[seq].store(base.elapsed().as_nanos() as u64, Ordering::Release);
        store
            .create(&format!("/watch/{seq}"), v.clone())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut all = Vec::with_capacity(watchers * writes);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    store.close().await.unwrap();
    percentiles(all)
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut out = serde_json::Map::new();
    out.insert("fsync_per_s".into(), json!(fsync_rate(scratch.path())));
    rt.block_on(async {
        if phase("writes") {
            let mut writes = serde_json::Map::new();
            for writers in [1, 8, 64] {
                let rate = write_rate(writers).await;
                writes.insert(format!("writers_{writers}"), json!(rate));
            }
            out.insert("durable_writes_per_s".into(), Value::Object(writes));
        }

        if phase("reads") {
            let mut reads = serde_json::Map::new();
            let sizes: &[usize] = if quick() {
                &[2_000, 10_000]
            } else {
                &[10_000, 100_000]
            };
            let dir = tempfile::tempdir().unwrap();
            let mut startup = Value::Null;
            for &n in sizes {
                let dir = dir.path().join(n.to_string());
                let store = open(&dir).await;
                fill(&store, n).await;
                let mut at_n = read_latencies(&store, n);
                at_n["page_500_at_older_revision"] = older_pages(&store, n).await;
                reads.insert(format!("objects_{n}"), at_n);
                store.close().await.unwrap();
                drop(store);
                if n == *sizes.last().unwrap() {
                    let t = Instant::now();
                    let store = open(&dir).await;
                    let took = t.elapsed();
                    assert_eq!(store.count("/registry/configmaps/"), n);
                    startup = json!({"objects": n, "ms": took.as_secs_f64() * 1e3});
                    store.close().await.unwrap();
                }
            }
            out.insert("reads".into(), Value::Object(reads));
            out.insert("startup".into(), startup);
        }

        let watchers = if quick() { 100 } else { 1000 };
        if phase("watch") {
            out.insert(
                "watch_delivery".into(),
                json!({"watchers": watchers, "latency": watch_latency(watchers).await}),
            );
        }
    });
    println!("{}", Value::Object(out));
}
