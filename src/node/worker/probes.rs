//! Running a pod's due probes (startup, liveness, readiness) in its running app
//! containers: their verdicts, when the next is due, a kill when one fails for good.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::{Worker, grace, min, str_at};
use crate::node::probe::{self, Kind as ProbeKind, Outcome, Tracker};
use crate::runtime::{ContainerStatus, Runtime, State};

impl<R: Runtime + Clone> Worker<R> {
    /// Runs the probes that are due for running app containers; returns the verdicts
    /// (ready, started) per container, when the next probe is due, and whether a
    /// container was killed for failing one.
    pub(super) async fn probe(
        &mut self,
        pod: &Value,
        app_specs: &[Value],
        instances: &[ContainerStatus],
    ) -> (HashMap<String, (bool, bool)>, Option<Duration>, bool) {
        let mut verdicts = HashMap::new();
        let mut next: Option<Duration> = None;
        let mut killed = false;
        let now = tokio::time::Instant::now();
        for c in app_specs {
            let name = c["name"].as_str().unwrap_or("").to_string();
            let Some(latest) = instances
                .iter()
                .filter(|s| s.id.name == name)
                .max_by_key(|s| s.id.attempt)
            else {
                continue;
            };
            if latest.state != State::Running {
                self.probes.retain(|(n, _), _| n != &name);
                continue;
            }
            let running_for = latest
                .started_at
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .and_then(|t| Duration::try_from(self.shared.runtime.now().duration_since(t)).ok())
                .unwrap_or_default();
            for kind in [
                ProbeKind::Startup,
                ProbeKind::Liveness,
                ProbeKind::Readiness,
            ] {
                let key = (name.clone(), kind);
                match c.get(kind.field()).filter(|p| p.is_object()) {
                    Some(spec) => {
                        let fresh = self
                            .probes
                            .get(&key)
                            .is_none_or(|(a, _)| *a != latest.id.attempt);
                        if fresh {
                            let tracker = Tracker::new(spec, running_for);
                            self.probes.insert(key, (latest.id.attempt, tracker));
                        }
                    }
                    None => {
                        self.probes.remove(&key);
                    }
                }
            }
            let verdict = |w: &Self, kind| {
                w.probes
                    .get(&(name.clone(), kind))
                    .map(|(_, t): &(u32, Tracker)| t.result)
            };
            let started = verdict(self, ProbeKind::Startup).is_none_or(|r| r == Some(true));
            let kinds: &[ProbeKind] = if started {
                &[ProbeKind::Liveness, ProbeKind::Readiness]
            } else {
                &[ProbeKind::Startup]
            };
            for kind in kinds {
                let key = (name.clone(), *kind);
                if self.probes.get(&key).is_none_or(|(_, t)| t.due > now) {
                    continue;
                }
                if !self.envs.contains_key(&name) {
                    // Adopted after a restart: resolve the environment again.
                    let env = self.env(pod, c).await.unwrap_or_default();
                    self.envs.insert(name.clone(), env);
                }
                let env = self.envs.get(&name).cloned().unwrap_or_default();
                let inside = crate::runtime::Inside {
                    pid: latest.pid,
                    prefix: self.shared.runtime.exec_prefix(&latest.id),
                };
                let ran = probe::run(&c[kind.field()], c, &env, &inside, &self.pod_ip(pod)).await;
                if let Err(why) = &ran {
                    let message = format!("{} probe failed: {why}", kind.title());
                    self.shared
                        .recorder
                        .warning(pod, "Unhealthy", &message)
                        .await;
                }
                let Some((_, tracker)) = self.probes.get_mut(&key) else {
                    continue;
                };
                let fatal = tracker.record(ran.is_ok()) == Outcome::Became(false)
                    && matches!(kind, ProbeKind::Liveness | ProbeKind::Startup);
                if fatal {
                    let what = if *kind == ProbeKind::Liveness {
                        "liveness"
                    } else {
                        "startup"
                    };
                    let restart = match str_at(pod, "/spec/restartPolicy") {
                        "Never" => "",
                        _ => ", will be restarted",
                    };
                    let message = format!("Container {name} failed {what} probe{restart}");
                    // A probe's own terminationGracePeriodSeconds wins over the pod's.
                    let grace = c[kind.field()]["terminationGracePeriodSeconds"]
                        .as_u64()
                        .map_or_else(|| grace(pod), Duration::from_secs);
                    self.kill(pod, Some(c), &latest.id, grace, &message).await;
                    self.probes.retain(|(n, _), _| n != &name);
                    killed = true;
                    break;
                }
            }
            let started = verdict(self, ProbeKind::Startup).is_none_or(|r| r == Some(true));
            let ready =
                started && verdict(self, ProbeKind::Readiness).is_none_or(|r| r == Some(true));
            verdicts.insert(name.clone(), (ready, started));
            for ((n, _), (_, t)) in &self.probes {
                if n == &name {
                    let wait = t.due.saturating_duration_since(tokio::time::Instant::now());
                    next = min(next, Some(wait));
                }
            }
        }
        (verdicts, next, killed)
    }
}
