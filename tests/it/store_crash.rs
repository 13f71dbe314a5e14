//! Crash safety: a child process writes concurrently and is killed with SIGKILL in the
//! middle; after reopening, every acknowledged write is there and the revision is not
//! behind any acknowledged one.
//!
//! The child is this same test binary, started on the ignored helper test below.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use berth::store::{Config, Outcome, Preconditions, Store};

use crate::support::object;

const CHILD_ENV: &str = "BERTH_CRASH_CHILD_DIR";

#[test]
#[ignore = "the child half of acknowledged_writes_survive_sigkill"]
fn crash_child_writer() {
    let dir = std::env::var(CHILD_ENV).expect("run by acknowledged_writes_survive_sigkill");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        // Small log files, so that the kill also lands amid moves to the next one.
        let mut config = Config::new(&dir);
        config.log_file_bytes = 64 << 10;
        // Compaction all the time, so that the kill also lands amid the rewrites of the
        // base and the removal of log files that compaction brings.
        config.retain_events = 200;
        config.retain_for = std::time::Duration::ZERO;
        config.compact_every = std::time::Duration::from_millis(20);
        let store = Store::open(config).await.unwrap();
        let mut tasks = Vec::new();
        for w in 0..16u64 {
            let store = store.clone();
            let round = std::process::id();
            tasks.push(tokio::spawn(async move {
                let counter = format!("/crash/counter/{w}");
                for i in 0u64.. {
                    let key = format!("/crash/{round}/{w}/{i}");
                    let Ok(Outcome::Written(r)) = store.create(&key, object(&key, i)).await else {
                        panic!("create {key}")
                    };
                    ack(&key, r.revision);
                    // A read-modify-write chain on one key per writer.
                    let out = match store.get(&counter) {
                        None => store.create(&counter, object(&counter, i)).await,
                        Some(cur) => {
                            store
                                .update(
                                    &counter,
                                    object(&counter, i),
                                    Preconditions::revision(cur.revision),
                                )
                                .await
                        }
                    };
                    if let Ok(Outcome::Written(r)) = out {
                        ack(&counter, r.revision);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

fn ack(key: &str, revision: u64) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ack {key} {revision}").unwrap();
    out.flush().unwrap();
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    // Highest acknowledged revision per key, over every round.
    let mut acked: HashMap<String, u64> = HashMap::new();
    let mut max_acked = 0;
    // Later kills land amid compactions, rewrites of the base and removals of log files.
    for (round, kill_after) in [150usize, 12_000, 4_000].into_iter().enumerate() {
        let mut child = Command::new(&exe)
            .args([
                "store_crash::crash_child_writer",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut seen = 0;
        for line in stdout.lines() {
            let line = line.unwrap();
            let Some(rest) = line.strip_prefix("ack ") else {
                continue;
            };
            let (key, rev) = rest.rsplit_once(' ').unwrap();
            let rev: u64 = rev.parse().unwrap();
            let e = acked.entry(key.to_string()).or_default();
            *e = (*e).max(rev);
            max_acked = max_acked.max(rev);
            seen += 1;
            if seen == kill_after {
                child.kill().unwrap(); // SIGKILL
                break;
            }
        }
        let status = child.wait().unwrap();
        assert!(!status.success(), "round {round}: the child was killed");
        assert_eq!(seen, kill_after, "round {round}: the child stopped early");

        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = Store::open(Config::new(dir.path())).await.unwrap();
            assert!(
                store.revision() >= max_acked,
                "round {round}: revision {} is behind acknowledged {max_acked}",
                store.revision()
            );
            for (key, &rev) in &acked {
                let r = store
                    .get(key)
                    .unwrap_or_else(|| panic!("round {round}: acknowledged {key} is lost"));
                assert!(
                    r.revision >= rev,
                    "round {round}: {key} went back from {rev} to {}",
                    r.revision
                );
                let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
                assert_eq!(v["metadata"]["resourceVersion"], r.revision.to_string());
            }
            // The reopened store takes new writes after everything it recovered.
            let Outcome::Written(r) = store
                .create(&format!("/after/{round}"), object("a", 0))
                .await
                .unwrap()
            else {
                panic!()
            };
            assert_eq!(r.revision, store.revision());
            assert!(r.revision > max_acked);
            max_acked = r.revision;
            store.close().await.unwrap();
        });
    }
}
