//! A scripted runtime for tests of the node agent: each start of a container follows the
//! next step of its script (refuse to start, exit after a while with a code, run until
//! stopped, ignore SIGTERM, hang even through SIGKILL). Its clock moves only when the test
//! says ([`FakeRuntime::advance`]), and the agent's timers run on it, so tests check
//! back-off, retries and grace periods exactly, however slow the machine.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::{ContainerId, ContainerSpec, ContainerStatus, Error, Event, Result, Runtime, State};

/// What one start of a container does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `start` fails with this message; nothing runs.
    Refuse(String),
    /// Runs, then exits with `code` after `after`.
    Exit { after: Duration, code: i32 },
    /// Runs until stopped; exits 143 on SIGTERM.
    Run,
    /// Runs until stopped, ignoring SIGTERM: only the SIGKILL at the end of the grace
    /// period ends it (137).
    IgnoreTerm,
    /// Runs and survives even SIGKILL (a process stuck in the kernel) until
    /// [`FakeRuntime::release`].
    Hang,
}

/// A call the agent made, for tests to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// A start, at this time on the runtime's clock (since its creation).
    Start(ContainerId, Duration),
    /// A stop with this grace period, at this time.
    Stop(ContainerId, Duration, Duration),
}

struct Instance {
    spec: ContainerSpec,
    step: Step,
    state: State,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    exit_code: Option<i32>,
    /// Ends the instance's scripted exit early (it was stopped).
    timer: Option<tokio::task::AbortHandle>,
}

#[derive(Default)]
struct Inner {
    scripts: HashMap<String, VecDeque<Step>>,
    instances: BTreeMap<ContainerId, Instance>,
    calls: Vec<Call>,
}

/// The fake runtime; cheap to clone.
#[derive(Clone)]
pub struct FakeRuntime {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<Event>,
    /// Wall time at creation: `now` is this plus the clock.
    epoch: jiff::Timestamp,
    /// How far the test has moved the clock.
    clock: Arc<watch::Sender<Duration>>,
    logs: PathBuf,
}

impl FakeRuntime {
    /// A runtime whose (empty) log files live under `logs`. Containers without a script
    /// [`Step::Run`].
    pub fn new(logs: &Path) -> Self {
        FakeRuntime {
            inner: Arc::default(),
            events: broadcast::channel(1024).0,
            epoch: jiff::Timestamp::now(),
            clock: Arc::new(watch::channel(Duration::ZERO).0),
            logs: logs.to_path_buf(),
        }
    }

    /// Moves the clock on: sleepers whose time has come wake up.
    pub fn advance(&self, d: Duration) {
        self.clock.send_modify(|t| *t += d);
    }

    /// A wait of `d` on the clock, measured from this call (not from the first poll).
    fn timer(&self, d: Duration) -> impl Future<Output = ()> + Send + 'static + use<> {
        let until = self.elapsed() + d;
        let mut clock = self.clock.subscribe();
        async move {
            let _ = clock.wait_for(|t| *t >= until).await;
        }
    }

    /// How far the clock has moved since the runtime was made.
    pub fn elapsed(&self) -> Duration {
        *self.clock.borrow()
    }

    /// The steps the next starts of container `name` (in any pod) follow, in order; once
    /// they are used up, starts [`Step::Run`].
    pub fn script(&self, name: &str, steps: impl IntoIterator<Item = Step>) {
        self.lock()
            .scripts
            .entry(name.to_string())
            .or_default()
            .extend(steps);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// How often container `name` was started.
    pub fn starts(&self, name: &str) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| matches!(c, Call::Start(id, _) if id.name == name))
            .count()
    }

    /// Lets a [`Step::Hang`] instance end (as if killed at last).
    pub fn release(&self, id: &ContainerId) {
        self.finish(id, 137);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("fake runtime lock")
    }

    fn stamp(&self) -> String {
        self.now().strftime("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
    }

    /// Ends a running instance with `code`, once.
    fn finish(&self, id: &ContainerId, code: i32) {
        let stamp = self.stamp();
        let ended = {
            let mut inner = self.lock();
            match inner.instances.get_mut(id) {
                Some(i) if i.state == State::Running => {
                    i.state = State::Exited;
                    i.exit_code = Some(code);
                    i.finished_at = Some(stamp);
                    if let Some(t) = i.timer.take() {
                        t.abort();
                    }
                    true
                }
                _ => false,
            }
        };
        if ended {
            let _ = self.events.send(Event::Exited(id.clone()));
        }
    }

    fn exited(&self, id: &ContainerId) -> bool {
        self.lock()
            .instances
            .get(id)
            .is_none_or(|i| i.state != State::Running)
    }
}

impl Runtime for FakeRuntime {
    async fn start(&self, spec: &ContainerSpec) -> Result<ContainerId> {
        let id = ContainerId {
            pod_uid: spec.pod_uid.clone(),
            name: spec.name.clone(),
            attempt: spec.attempt,
        };
        let stamp = self.stamp();
        let step = {
            let mut inner = self.lock();
            if inner.instances.contains_key(&id) {
                return Err(Error::Invalid(format!("container {id} exists already")));
            }
            inner.calls.push(Call::Start(id.clone(), self.elapsed()));
            let step = inner
                .scripts
                .get_mut(&spec.name)
                .and_then(VecDeque::pop_front)
                .unwrap_or(Step::Run);
            if let Step::Refuse(why) = &step {
                return Err(Error::Invalid(why.clone()));
            }
            inner.instances.insert(
                id.clone(),
                Instance {
                    spec: spec.clone(),
                    step: step.clone(),
                    state: State::Running,
                    created_at: stamp.clone(),
                    started_at: Some(stamp),
                    finished_at: None,
                    exit_code: None,
                    timer: None,
                },
            );
            step
        };
        if let Step::Exit { after, code } = step {
            let me = self.clone();
            let ends = id.clone();
            let ran = self.timer(after);
            let timer = tokio::spawn(async move {
                ran.await;
                me.finish(&ends, code);
            });
            if let Some(i) = self.lock().instances.get_mut(&id) {
                i.timer = Some(timer.abort_handle());
            }
        }
        let _ = self.events.send(Event::Started(id.clone()));
        Ok(id)
    }

    async fn stop(&self, id: &ContainerId, grace: Duration) -> Result<()> {
        let step = {
            let mut inner = self.lock();
            inner
                .calls
                .push(Call::Stop(id.clone(), grace, self.elapsed()));
            match inner.instances.get(id) {
                Some(i) if i.state == State::Running => i.step.clone(),
                _ => return Ok(()),
            }
        };
        match step {
            Step::IgnoreTerm => {
                self.sleep(grace).await;
                self.finish(id, 137);
                Ok(())
            }
            Step::Hang => {
                // SIGTERM and SIGKILL both go unanswered, unless released meanwhile.
                let mut events = self.events.subscribe();
                let wait = async {
                    while !self.exited(id) {
                        let _ = events.recv().await;
                    }
                };
                tokio::select! {
                    () = wait => Ok(()),
                    () = self.sleep(grace + Duration::from_secs(10)) => Err(Error::Invalid(
                        format!("container {id} did not end after SIGKILL"),
                    )),
                }
            }
            _ => {
                self.finish(id, 143);
                Ok(())
            }
        }
    }

    fn pod_status(&self, pod_uid: &str) -> Result<Vec<ContainerStatus>> {
        Ok(self
            .lock()
            .instances
            .iter()
            .filter(|(id, _)| id.pod_uid == pod_uid)
            .map(|(id, i)| ContainerStatus {
                id: id.clone(),
                hash: i.spec.hash.clone(),
                image: i.spec.image.clone(),
                state: i.state,
                created_at: i.created_at.clone(),
                started_at: i.started_at.clone(),
                finished_at: i.finished_at.clone(),
                exit_code: i.exit_code,
                signal: None,
                error: None,
                reason: None,
                message: None,
                pid: None,
            })
            .collect())
    }

    fn pods(&self) -> Result<Vec<String>> {
        let mut uids: Vec<String> = self
            .lock()
            .instances
            .keys()
            .map(|id| id.pod_uid.clone())
            .collect();
        uids.dedup();
        Ok(uids)
    }

    fn remove_container(&self, id: &ContainerId) -> Result<()> {
        let mut inner = self.lock();
        if inner
            .instances
            .get(id)
            .is_some_and(|i| i.state == State::Running)
        {
            return Err(Error::Invalid(format!(
                "container {id} still runs; stop it first"
            )));
        }
        inner.instances.remove(id);
        Ok(())
    }

    fn remove_pod(&self, pod_uid: &str) -> Result<()> {
        let mut inner = self.lock();
        if let Some((id, _)) = inner
            .instances
            .iter()
            .find(|(id, i)| id.pod_uid == pod_uid && i.state == State::Running)
        {
            return Err(Error::Invalid(format!(
                "container {id} still runs; stop it first"
            )));
        }
        inner.instances.retain(|id, _| id.pod_uid != pod_uid);
        Ok(())
    }

    fn limits_unenforced(&self) -> Option<String> {
        Some("the fake runtime runs nothing".to_string())
    }

    fn volumes_dir(&self, pod_uid: &str) -> PathBuf {
        self.logs.join(pod_uid).join("volumes")
    }

    fn log_path(&self, id: &ContainerId) -> PathBuf {
        self.logs
            .join(format!("{}-{}-{}.log", id.pod_uid, id.name, id.attempt))
    }

    fn events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    fn now(&self) -> jiff::Timestamp {
        let ran = jiff::SignedDuration::try_from(self.elapsed()).unwrap_or_default();
        self.epoch + ran
    }

    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        self.timer(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, attempt: u32) -> ContainerSpec {
        ContainerSpec {
            pod_uid: "u".into(),
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            name: name.into(),
            attempt,
            hash: "h".into(),
            image: "i".into(),
            argv: vec!["x".into()],
            env: Vec::new(),
            working_dir: None,
            mounts: Vec::new(),
            resources: Default::default(),
            pod_resources: Default::default(),
            stdio: Default::default(),
            termination_message: Default::default(),
            rootfs: None,
            sandbox: None,
            etc: None,
        }
    }

    /// Lets spawned tasks run (the test and the runtime share one thread).
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn starts_follow_the_script_on_the_runtime_clock() {
        let dir = tempfile::tempdir().unwrap();
        let rt = FakeRuntime::new(dir.path());
        rt.script(
            "c",
            [
                Step::Refuse("no".into()),
                Step::Exit {
                    after: Duration::from_secs(5),
                    code: 3,
                },
                Step::IgnoreTerm,
            ],
        );
        assert!(rt.start(&spec("c", 0)).await.is_err());
        let id = rt.start(&spec("c", 1)).await.unwrap();
        let began = rt.now();
        rt.advance(Duration::from_millis(4999));
        settle().await;
        assert_eq!(rt.pod_status("u").unwrap()[0].state, State::Running);
        rt.advance(Duration::from_millis(1));
        settle().await;
        let st = &rt.pod_status("u").unwrap()[0];
        assert_eq!((st.state, st.exit_code), (State::Exited, Some(3)));
        let finished: jiff::Timestamp = st.finished_at.as_deref().unwrap().parse().unwrap();
        assert_eq!(finished.duration_since(began).as_secs(), 5);
        assert_eq!(id.attempt, 1);
        let stubborn = rt.start(&spec("c", 2)).await.unwrap();
        let stop = tokio::spawn({
            let rt = rt.clone();
            async move { rt.stop(&stubborn, Duration::from_secs(3)).await }
        });
        settle().await;
        assert!(!stop.is_finished());
        rt.advance(Duration::from_secs(3));
        stop.await.unwrap().unwrap();
        assert_eq!(rt.pod_status("u").unwrap()[1].exit_code, Some(137));
        assert_eq!(rt.starts("c"), 3);
    }

    #[tokio::test]
    async fn a_hung_container_fails_to_stop_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let rt = FakeRuntime::new(dir.path());
        rt.script("c", [Step::Hang]);
        let id = rt.start(&spec("c", 0)).await.unwrap();
        let stop = tokio::spawn({
            let (rt, id) = (rt.clone(), id.clone());
            async move { rt.stop(&id, Duration::from_secs(1)).await }
        });
        settle().await;
        rt.advance(Duration::from_secs(11));
        assert!(stop.await.unwrap().is_err());
        assert!(rt.remove_pod("u").is_err());
        rt.release(&id);
        rt.stop(&id, Duration::from_secs(1)).await.unwrap();
        rt.remove_pod("u").unwrap();
        assert!(rt.pods().unwrap().is_empty());
    }
}
