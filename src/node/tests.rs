//! The agent against a real registry and the scripted [`FakeRuntime`], whose clock moves
//! only when a test advances it: back-off delays, retries and grace periods are checked
//! exactly (not a moment early, and on time), however slow the machine is.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Config, start};
use crate::client::{Client, DeleteParams};
use crate::client::{Kind, catalog};
use crate::registry::Registry;
use crate::runtime::Runtime;
use crate::runtime::fake::{Call, FakeRuntime, Step};
use crate::supervisor::Supervisor;

const NODE: &str = "n1";
/// How long a test waits in real time for the agent to act (a hang, not a slow run).
const HANG: Duration = Duration::from_secs(20);
/// How long a test lets the agent work before checking that it did not act.
const QUIET: Duration = Duration::from_millis(200);
const MS: Duration = Duration::from_millis(1);

struct Agent {
    client: Client,
    fake: FakeRuntime,
    sup: Supervisor,
    _dir: tempfile::TempDir,
}

impl Agent {
    async fn start(tune: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(crate::store::Config::new(dir.path().join("data")))
            .await
            .unwrap();
        let client = Client::local(Registry::new(store));
        let fake = FakeRuntime::new(dir.path());
        let mut config = Config::new(NODE, "127.0.0.1");
        // The fake runs nothing, so nothing is mounted (and no token is asked for).
        config.mount_namespaces = false;
        tune(&mut config);
        let mut sup = Supervisor::new();
        start(&mut sup, &client, fake.clone(), config);
        Agent {
            client,
            fake,
            sup,
            _dir: dir,
        }
    }

    async fn create(&self, name: &str, policy: &str, grace: i64) -> Value {
        let pod = json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": NODE,
                "restartPolicy": policy,
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "c", "image": "img", "command": ["run"]}],
            },
        });
        self.client
            .create(catalog::of(Kind::Pod), Some("default"), &pod)
            .await
            .unwrap()
    }

    async fn get(&self, name: &str) -> Option<Value> {
        self.client
            .get(catalog::of(Kind::Pod), Some("default"), name)
            .await
            .ok()
    }

    async fn delete(&self, name: &str, grace: Option<i64>) {
        let params = DeleteParams {
            grace_period_seconds: grace,
            ..Default::default()
        };
        self.client
            .delete(catalog::of(Kind::Pod), Some("default"), name, &params)
            .await
            .unwrap();
    }

    /// Waits (in real time) until `check` holds for the pod.
    async fn until(&self, name: &str, what: &str, check: impl Fn(Option<&Value>) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + HANG;
        loop {
            let pod = self.get(name).await;
            if check(pod.as_ref()) {
                return pod.unwrap_or(Value::Null);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not true; last seen {pod:?}; calls {:?}",
                self.fake.calls()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (in real time) until the runtime saw `n` starts.
    async fn starts_reach(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + HANG;
        while self.starts().len() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} starts expected: {:?}",
                self.fake.calls()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// When each start happened on the runtime's clock.
    fn starts(&self) -> Vec<Duration> {
        self.fake
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Start(_, at) => Some(at),
                Call::Stop(..) => None,
            })
            .collect()
    }

    fn stops(&self) -> Vec<(Duration, Duration)> {
        self.fake
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Stop(_, grace, at) => Some((grace, at)),
                Call::Start(..) => None,
            })
            .collect()
    }

    async fn stop(self) {
        self.sup.shutdown(Duration::from_secs(5)).await;
    }
}

fn waiting(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]["state"]["waiting"]
}

fn restarts(p: Option<&Value>) -> u64 {
    p.and_then(|p| p.pointer("/status/containerStatuses/0/restartCount"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn crash(after: u64) -> Step {
    Step::Exit {
        after: Duration::from_secs(after),
        code: 1,
    }
}

#[tokio::test]
async fn crash_loop_back_off_doubles_to_its_cap_and_a_long_run_resets_it() {
    let agent = Agent::start(|c| c.backoff_max = Duration::from_secs(40)).await;
    // Six quick crashes, one run longer than twice the cap, then one more quick crash.
    let runs = [1, 1, 1, 1, 1, 1, 100, 1];
    agent.fake.script("c", runs.iter().map(|r| crash(*r)));
    let made = agent.create("p", "Always", 30).await;
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    agent.starts_reach(1).await;
    let waits = [0, 10, 20, 40, 40, 40, 0, 10];
    for (i, (run, wait)) in runs.iter().zip(waits).enumerate() {
        agent.fake.advance(Duration::from_secs(*run));
        if wait > 0 {
            let p = agent
                .until("p", "backing off", |p| {
                    restarts(p) == i as u64
                        && p.is_some_and(|p| waiting(p)["reason"] == "CrashLoopBackOff")
                })
                .await;
            assert_eq!(
                waiting(&p)["message"],
                format!("back-off {wait}s restarting failed container=c pod=p_default({uid})")
            );
            assert_eq!(p["status"]["phase"], "Running");
            let last = &p["status"]["containerStatuses"][0]["lastState"]["terminated"];
            assert_eq!(
                (&last["exitCode"], &last["reason"]),
                (&json!(1), &json!("Error"))
            );
            // Not a moment early ...
            agent.fake.advance(Duration::from_secs(wait) - MS);
            tokio::time::sleep(QUIET).await;
            assert_eq!(agent.starts().len(), i + 1, "restart {} came early", i + 1);
            agent.fake.advance(MS);
        }
        // ... and on time.
        agent.starts_reach(i + 2).await;
    }
    let starts = agent.starts();
    let gaps: Vec<u64> = (0..8)
        .map(|i| (starts[i + 1] - starts[i]).as_secs() - runs[i])
        .collect();
    assert_eq!(gaps, waits);
    // Only the newest instance and the one before it are kept. The sync that started the
    // last one prunes after it has recorded the start, so allow it that moment.
    let kept = || -> Vec<u32> {
        let status = agent.fake.pod_status(&uid).unwrap();
        status.iter().map(|s| s.id.attempt).collect()
    };
    let deadline = tokio::time::Instant::now() + HANG;
    while kept() != [7, 8] && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(kept(), [7, 8]);
    agent.stop().await;
}

#[tokio::test]
async fn a_container_that_cannot_start_is_tried_again_after_the_retry_delay() {
    let agent = Agent::start(|_| {}).await;
    agent.fake.script(
        "c",
        [Step::Refuse("boom".into()), Step::Refuse("boom".into())],
    );
    agent.create("p", "Always", 30).await;
    for n in 1..=2 {
        let p = agent
            .until("p", "failing to start", |p| {
                p.is_some_and(|p| waiting(p)["reason"] == "RunContainerError")
            })
            .await;
        assert_eq!(waiting(&p)["message"], "boom");
        agent.starts_reach(n).await;
        agent.fake.advance(Duration::from_secs(10) - MS);
        tokio::time::sleep(QUIET).await;
        assert_eq!(agent.starts().len(), n, "tried again early");
        agent.fake.advance(MS);
        agent.starts_reach(n + 1).await;
    }
    agent
        .until("p", "running", |p| {
            p.is_some_and(|p| p["status"]["containerStatuses"][0]["state"]["running"].is_object())
        })
        .await;
    assert_eq!(
        agent.starts(),
        [
            Duration::ZERO,
            Duration::from_secs(10),
            Duration::from_secs(20)
        ]
    );
    agent.stop().await;
}

#[tokio::test]
async fn a_container_ignoring_sigterm_is_killed_at_the_end_of_the_grace_period() {
    let agent = Agent::start(|_| {}).await;
    agent.fake.script("c", [Step::IgnoreTerm]);
    agent.create("p", "Always", 30).await;
    agent
        .until("p", "running", |p| {
            p.is_some_and(|p| p["status"]["phase"] == "Running")
        })
        .await;
    agent.delete("p", Some(5)).await;
    while agent.stops().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(agent.stops(), [(Duration::from_secs(5), Duration::ZERO)]);
    agent.fake.advance(Duration::from_secs(5) - MS);
    tokio::time::sleep(QUIET).await;
    assert!(agent.get("p").await.is_some(), "gone before SIGKILL");
    agent.fake.advance(MS);
    agent.until("p", "removed", |p| p.is_none()).await;
    agent.stop().await;
}

#[tokio::test]
async fn a_grace_period_of_zero_still_gives_the_container_two_seconds() {
    let agent = Agent::start(|_| {}).await;
    agent.fake.script("c", [Step::IgnoreTerm]);
    agent.create("p", "Always", 0).await;
    agent
        .until("p", "running", |p| {
            p.is_some_and(|p| p["status"]["phase"] == "Running")
        })
        .await;
    // Grace 0: the object goes at once; the agent still stops the container gently.
    agent.delete("p", None).await;
    agent.until("p", "removed", |p| p.is_none()).await;
    while agent.stops().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(agent.stops(), [(Duration::from_secs(2), Duration::ZERO)]);
    agent.stop().await;
}

#[tokio::test]
async fn a_pod_whose_container_will_not_die_stays_until_it_does() {
    let agent = Agent::start(|_| {}).await;
    agent.fake.script("c", [Step::Hang]);
    let made = agent.create("p", "Always", 1).await;
    agent
        .until("p", "running", |p| {
            p.is_some_and(|p| p["status"]["phase"] == "Running")
        })
        .await;
    agent.delete("p", None).await;
    // Each attempt gives up 10 s after SIGKILL; then the agent tries again 10 s later.
    for attempt in 1..=3 {
        while agent.stops().len() < attempt {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        agent.fake.advance(Duration::from_secs(11));
        tokio::time::sleep(QUIET).await;
        agent.fake.advance(Duration::from_secs(10));
    }
    // Neither reported finished nor removed while it runs.
    let p = agent.get("p").await.expect("still there");
    assert_eq!(p["status"]["phase"], "Running", "{p}");
    let uid = made["metadata"]["uid"].as_str().unwrap();
    let id = agent.fake.pod_status(uid).unwrap()[0].id.clone();
    agent.fake.release(&id);
    agent.fake.advance(Duration::from_secs(10));
    agent.until("p", "removed", |p| p.is_none()).await;
    agent.stop().await;
}
