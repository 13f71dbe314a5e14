//! The horizontal pod autoscaler controller, as kube-controller-manager's
//! (`pkg/controller/podautoscaler`): every sync period it reads each
//! HorizontalPodAutoscaler's target through its `scale` (replicas and selector), works out
//! a replica count from each metric, stabilizes and limits it, writes the new scale, and
//! records what it saw in the status (`currentMetrics`, `currentReplicas`,
//! `desiredReplicas`, `lastScaleTime`) and its conditions (`AbleToScale`,
//! `ScalingActive`, `ScalingLimited`), with the upstream reasons, messages and events.
//!
//! Resource metrics (`Resource` and `ContainerResource`, CPU and memory) come from
//! `metrics.k8s.io` PodMetrics, which the node agents measure; the utilisation of a pod is
//! its usage over the sum of its containers' requests, as the replica calculator's. Pods
//! being deleted or failed are ignored, pending pods and CPU samples of pods not yet
//! settled count as unready, and pods without metrics are assumed at 100 % on the way
//! down and 0 % on the way up, so an incomplete view never moves the scale the wrong way.
//! A change within the tolerance (10 %) is no change. `Pods`, `Object` and `External`
//! metrics need a custom or external metrics API, which berth does not serve; such a
//! metric is reported as failing, as upstream reports it without an adapter.
//!
//! Without `behavior` a scale-down takes the highest recommendation of the last five
//! minutes (`--horizontal-pod-autoscaler-downscale-stabilization`) and a scale-up at most
//! doubles (at least four); with `behavior` its windows, policies and select policies
//! rule, over the scale events this controller made. Recommendations and scale events are
//! kept in memory per autoscaler, as upstream's are: a restart begins them afresh.
//!
//! A new autoscaler, or one whose spec changed, is synced at once; every sync asks to be
//! run again after the sync period (15 s), failed or not: a metric that cannot be read is
//! a condition and an event, not a reason to hurry.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::claim::{is_deleting, str_at};
use super::{Action, Context, Queue, Result, Supervisor};
use crate::client::informer::{Change, Informer};
use crate::client::recorder::{EventType, Recorder};
use crate::client::{Client, Kind, ListParams, Resource, catalog, key_of};
use crate::types::clock::Clock;
use crate::types::labels::Selector;
use crate::types::quantity::Quantity;

/// How far from 1 the usage ratio must be for the scale to change.
const TOLERANCE: f64 = 0.1;
/// CPU samples of a pod this young are used only once it is ready and a whole metric
/// window has passed since (`--horizontal-pod-autoscaler-cpu-initialization-period`).
const CPU_INITIALIZATION_PERIOD: SignedDuration = SignedDuration::from_secs(300);
/// A pod that turned unready this soon after it started is taken as never ready yet
/// (`--horizontal-pod-autoscaler-initial-readiness-delay`).
const INITIAL_READINESS_DELAY: SignedDuration = SignedDuration::from_secs(30);
/// Without behavior, a scale-up goes to at most this factor of the current replicas...
const SCALE_UP_LIMIT_FACTOR: f64 = 2.0;
/// ...or this many, whichever is more.
const SCALE_UP_LIMIT_MINIMUM: f64 = 4.0;
const WORKERS: usize = 2;

/// The sync period and the scale-down stabilization window.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub sync: Duration,
    pub downscale_window: Duration,
}

/// One recommendation of the replica calculation, kept for stabilization.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Recommendation {
    at: Timestamp,
    replicas: i64,
}

/// A scale this controller made, kept for the behavior policies' periods.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ScaleEvent {
    at: Timestamp,
    change: i64,
    outdated: bool,
}

/// What the controller remembers of one autoscaler between syncs.
#[derive(Debug, Default)]
struct History {
    recommendations: Vec<Recommendation>,
    up: Vec<ScaleEvent>,
    down: Vec<ScaleEvent>,
}

/// One direction's scaling rules of a behavior, defaults applied by the API.
#[derive(Debug, Clone, PartialEq)]
struct Rules {
    window: Option<i64>,
    select: String,
    policies: Vec<Policy>,
}

#[derive(Debug, Clone, PartialEq)]
struct Policy {
    pods: bool,
    value: i64,
    period: i64,
}

impl Rules {
    fn from(v: &Value) -> Rules {
        let policies = v["policies"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| Policy {
                        pods: p["type"] == "Pods",
                        value: p["value"].as_i64().unwrap_or(0),
                        period: p["periodSeconds"].as_i64().unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Rules {
            window: v["stabilizationWindowSeconds"].as_i64(),
            select: v["selectPolicy"].as_str().unwrap_or("Max").to_string(),
            policies,
        }
    }

    fn longest_period(&self) -> i64 {
        self.policies.iter().map(|p| p.period).max().unwrap_or(0)
    }
}

/// A pod's usage of one resource, in thousandths, and the sample it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PodMetric {
    value: i64,
    at: Timestamp,
    window: SignedDuration,
}

type Metrics = BTreeMap<String, PodMetric>;

/// The pods of a calculation sorted as `groupPods` sorts them.
#[derive(Debug, Default, PartialEq)]
struct Groups {
    ready: usize,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
}

/// A condition to set: type, status, reason, message.
type Condition = (&'static str, &'static str, String, String);

/// Why a metric gave no replica count: the error, and the condition it leaves.
#[derive(Debug)]
struct MetricError {
    message: String,
    condition: Condition,
}

fn int_at(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

/// A duration as Go prints it (`15s`, `1m0.5s`, `300ms`), as metrics carry their window.
fn parse_go_duration(s: &str) -> Option<SignedDuration> {
    let mut total = 0f64;
    let mut rest = s;
    if rest == "0" {
        return Some(SignedDuration::ZERO);
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    SignedDuration::try_from_secs_f64(total).ok()
}

/// A quantity given as a string or a number.
fn quantity(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.to_string().parse().ok(),
        _ => None,
    }
}

fn timestamp_at(v: &Value, pointer: &str) -> Option<Timestamp> {
    v.pointer(pointer)?.as_str()?.parse().ok()
}

/// Thousandths as a canonical decimal quantity (`250m`, `2`, `12k`, `100M`).
fn decimal_milli(milli: i64) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let mut units = milli / 1000;
    let mut suffix = "";
    for s in ["k", "M", "G", "T", "P", "E"] {
        if units == 0 || units % 1000 != 0 {
            break;
        }
        units /= 1000;
        suffix = s;
    }
    format!("{units}{suffix}")
}

/// `getPodMetrics` / `getContainerMetrics`: each pod's usage of `resource` in thousandths
/// (all its containers', or the one named), pods missing a container's figure left out.
fn pod_metrics(
    items: &[Value],
    resource: &str,
    container: Option<&str>,
) -> std::result::Result<Metrics, String> {
    let mut out = Metrics::new();
    for m in items {
        let name = str_at(m, "/metadata/name").to_string();
        let at = timestamp_at(m, "/timestamp").unwrap_or(Timestamp::UNIX_EPOCH);
        let window = m["window"]
            .as_str()
            .and_then(parse_go_duration)
            .unwrap_or(SignedDuration::ZERO);
        let containers = m["containers"].as_array().map_or(&[][..], Vec::as_slice);
        let usage = |c: &Value| {
            c.pointer(&format!("/usage/{resource}"))
                .and_then(quantity)
                .map(|q| q.milli() as i64)
        };
        match container {
            Some(wanted) => {
                for c in containers.iter().filter(|c| c["name"] == wanted) {
                    let value = usage(c).ok_or_else(|| {
                        format!(
                            "missing resource metric {resource} for container {wanted} in pod {}/{name}",
                            str_at(m, "/metadata/namespace")
                        )
                    })?;
                    out.insert(name.clone(), PodMetric { value, at, window });
                }
            }
            None => {
                if containers.is_empty() {
                    continue;
                }
                let sum: Option<i64> = containers.iter().map(usage).sum();
                if let Some(value) = sum {
                    out.insert(name, PodMetric { value, at, window });
                }
            }
        }
    }
    Ok(out)
}

fn pod_condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// `groupPods`: which pods count, which are unready, which lack metrics and which are
/// ignored altogether.
fn group_pods(pods: &[&Value], metrics: &Metrics, resource: &str, now: Timestamp) -> Groups {
    let mut g = Groups::default();
    for pod in pods {
        let name = str_at(pod, "/metadata/name").to_string();
        let phase = str_at(pod, "/status/phase");
        if is_deleting(pod) || phase == "Failed" {
            g.ignored.insert(name);
            continue;
        }
        if phase == "Pending" {
            g.unready.insert(name);
            continue;
        }
        let Some(metric) = metrics.get(&name) else {
            g.missing.insert(name);
            continue;
        };
        if resource == "cpu" {
            let ready = pod_condition(pod, "Ready");
            let start = timestamp_at(pod, "/status/startTime");
            let unready = match (ready, start) {
                (Some(cond), Some(start)) => {
                    let transition =
                        timestamp_at(cond, "/lastTransitionTime").unwrap_or(Timestamp::UNIX_EPOCH);
                    let is_false = cond["status"] == "False";
                    if start + CPU_INITIALIZATION_PERIOD > now {
                        is_false || metric.at < transition + metric.window
                    } else {
                        is_false && start + INITIAL_READINESS_DELAY > transition
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.insert(name);
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// `calculateRequests`: each pod's request of `resource` in thousandths, over its
/// containers and sidecars (or the one container named).
fn pod_requests(
    pods: &[&Value],
    resource: &str,
    container: Option<&str>,
) -> std::result::Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let name = str_at(pod, "/metadata/name");
        let spec = &pod["spec"];
        let sidecars = spec["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["restartPolicy"] == "Always");
        let containers = spec["containers"].as_array().into_iter().flatten();
        let mut sum = 0i64;
        for c in containers.chain(sidecars) {
            let cname = c["name"].as_str().unwrap_or("");
            if container.is_some_and(|wanted| wanted != cname) {
                continue;
            }
            let request = c
                .pointer(&format!("/resources/requests/{resource}"))
                .and_then(quantity)
                .ok_or_else(|| {
                    format!("missing request for {resource} in container {cname} of Pod {name}")
                })?;
            sum += request.milli() as i64;
        }
        out.insert(name.to_string(), sum);
    }
    Ok(out)
}

/// `GetResourceUtilizationRatio`: usage over requests against the target, the
/// utilisation in percent and the average usage.
fn utilization_ratio(
    metrics: &Metrics,
    requests: &BTreeMap<String, i64>,
    target: i64,
) -> std::result::Result<(f64, i64, i64), String> {
    let (mut usage, mut requested, mut entries) = (0i64, 0i64, 0i64);
    for (pod, metric) in metrics {
        let Some(request) = requests.get(pod) else {
            continue;
        };
        usage += metric.value;
        requested += request;
        entries += 1;
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = usage * 100 / requested;
    Ok((
        utilization as f64 / target as f64,
        utilization,
        usage / entries,
    ))
}

/// `GetMetricUsageRatio`: the average usage against the target, and the average.
fn usage_ratio(metrics: &Metrics, target: i64) -> (f64, i64) {
    let total: i64 = metrics.values().map(|m| m.value).sum();
    let average = total / (metrics.len().max(1) as i64);
    (average as f64 / target as f64, average)
}

/// What one resource metric proposes: replicas, utilisation (if by utilisation) and the
/// average usage in thousandths.
#[derive(Debug, PartialEq)]
struct Proposal {
    replicas: i64,
    utilization: Option<i64>,
    average: i64,
}

/// How a target is met: a utilisation of the requests, or an average usage.
#[derive(Debug, Clone, Copy)]
enum Goal {
    Utilization(i64),
    Average(i64),
}

/// `GetResourceReplicas` and `GetRawResourceReplicas`: the replica count that brings the
/// pods' usage to the goal.
fn resource_replicas(
    current: i64,
    goal: Goal,
    mut metrics: Metrics,
    pods: &[&Value],
    resource: &str,
    container: Option<&str>,
    now: Timestamp,
) -> std::result::Result<Proposal, String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let groups = group_pods(pods, &metrics, resource, now);
    for name in groups.ignored.iter().chain(&groups.unready) {
        metrics.remove(name);
    }
    let requests = match goal {
        Goal::Utilization(_) => pod_requests(pods, resource, container)?,
        Goal::Average(_) => BTreeMap::new(),
    };
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let ratio = |metrics: &Metrics| -> std::result::Result<(f64, Option<i64>, i64), String> {
        Ok(match goal {
            Goal::Utilization(target) => {
                let (r, u, avg) = utilization_ratio(metrics, &requests, target)?;
                (r, Some(u), avg)
            }
            Goal::Average(target) => {
                let (r, avg) = usage_ratio(metrics, target);
                (r, None, avg)
            }
        })
    };
    let (usage, utilization, average) = ratio(&metrics)?;
    let proposal = |replicas| Proposal {
        replicas,
        utilization,
        average,
    };
    let up_with_unready = !groups.unready.is_empty() && usage > 1.0;
    if !up_with_unready && groups.missing.is_empty() {
        if (1.0 - usage).abs() <= TOLERANCE {
            return Ok(proposal(current));
        }
        return Ok(proposal((usage * groups.ready as f64).ceil() as i64));
    }
    if !groups.missing.is_empty() {
        for name in &groups.missing {
            let value = if usage < 1.0 {
                // On the way down a pod without metrics is taken as using all it asked
                // for (or the target, when that is more).
                match goal {
                    Goal::Utilization(target) => {
                        requests.get(name).copied().unwrap_or(0) * target.max(100) / 100
                    }
                    Goal::Average(target) => target,
                }
            } else {
                0
            };
            if usage != 1.0 {
                metrics.insert(
                    name.clone(),
                    PodMetric {
                        value,
                        at: now,
                        window: SignedDuration::ZERO,
                    },
                );
            }
        }
    }
    if up_with_unready {
        for name in &groups.unready {
            metrics.insert(
                name.clone(),
                PodMetric {
                    value: 0,
                    at: now,
                    window: SignedDuration::ZERO,
                },
            );
        }
    }
    let (new_usage, _, _) = ratio(&metrics)?;
    if (1.0 - new_usage).abs() <= TOLERANCE
        || (usage < 1.0 && new_usage > 1.0)
        || (usage > 1.0 && new_usage < 1.0)
    {
        return Ok(proposal(current));
    }
    let replicas = (new_usage * metrics.len() as f64).ceil() as i64;
    if (new_usage < 1.0 && replicas > current) || (new_usage > 1.0 && replicas < current) {
        return Ok(proposal(current));
    }
    Ok(proposal(replicas))
}

/// The most replicas allowed: the rate's limit or the maximum, whichever is lower, and
/// the condition that names it.
fn upper_bound(limit: i64, max: i64) -> (i64, &'static str, &'static str) {
    if max > limit {
        (
            limit,
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate",
        )
    } else {
        (
            max,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count",
        )
    }
}

/// `convertDesiredReplicasWithRules`, without behavior: within min and max, and a scale-up
/// of at most double (four at least).
fn convert_with_rules(
    current: i64,
    desired: i64,
    min: i64,
    max: i64,
) -> (i64, &'static str, &'static str) {
    let limit = (SCALE_UP_LIMIT_FACTOR * current as f64).max(SCALE_UP_LIMIT_MINIMUM) as i64;
    let (allowed, reason, message) = upper_bound(limit, max);
    if desired < min {
        return (
            min,
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count",
        );
    }
    if desired > allowed {
        return (allowed, reason, message);
    }
    (
        desired,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
}

/// `getReplicasChangePerPeriod`: what the events of the last `period` seconds changed.
fn change_in_period(period: i64, events: &[ScaleEvent], now: Timestamp) -> i64 {
    let cutoff = now - SignedDuration::from_secs(period);
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .sum()
}

/// Which way a limit of the behavior policies is worked out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Direction {
    Up,
    Down,
}

/// `calculateScaleUpLimitWithScalingRules` and `calculateScaleDownLimitWithBehaviors`:
/// what each policy allows from the replicas at the start of its period, the most of
/// them (select policy `Max`: the largest change) or the least (`Min`).
fn policy_limit(
    current: i64,
    (up, down): (&[ScaleEvent], &[ScaleEvent]),
    rules: &Rules,
    direction: Direction,
    now: Timestamp,
) -> i64 {
    if rules.select == "Disabled" {
        return current;
    }
    // The largest change is the highest count up and the lowest count down.
    let highest = (rules.select == "Min") != (direction == Direction::Up);
    let mut result = if highest { i64::MIN } else { i64::MAX };
    for p in &rules.policies {
        let start =
            current - change_in_period(p.period, up, now) + change_in_period(p.period, down, now);
        let proposed = match (direction, p.pods) {
            (Direction::Up, true) => start + p.value,
            (Direction::Up, false) => (start as f64 * (1.0 + p.value as f64 / 100.0)).ceil() as i64,
            (Direction::Down, true) => start - p.value,
            (Direction::Down, false) => (start as f64 * (1.0 - p.value as f64 / 100.0)) as i64,
        };
        result = if highest {
            result.max(proposed)
        } else {
            result.min(proposed)
        };
    }
    result
}

impl History {
    /// `stabilizeRecommendation`: the highest recommendation within the window, and this
    /// one recorded (over the oldest expired one).
    fn stabilize(&mut self, desired: i64, window: SignedDuration, now: Timestamp) -> i64 {
        let cutoff = now - window;
        let mut highest = desired;
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at < cutoff {
                old = Some(i);
            } else if r.replicas > highest {
                highest = r.replicas;
            }
        }
        self.record(old, desired, now);
        highest
    }

    fn record(&mut self, old: Option<usize>, replicas: i64, at: Timestamp) {
        let r = Recommendation { at, replicas };
        match old {
            Some(i) => self.recommendations[i] = r,
            None => self.recommendations.push(r),
        }
    }

    /// `stabilizeRecommendationWithBehaviors`: the recommendation held between the lowest
    /// of the scale-up window and the highest of the scale-down window.
    fn stabilize_with_behavior(
        &mut self,
        current: i64,
        desired: i64,
        up: &Rules,
        down: &Rules,
        now: Timestamp,
    ) -> (i64, &'static str, &'static str) {
        let up_cutoff = now - SignedDuration::from_secs(up.window.unwrap_or(0));
        let down_cutoff = now - SignedDuration::from_secs(down.window.unwrap_or(0));
        let (mut up_rec, mut down_rec) = (desired, desired);
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at > up_cutoff {
                up_rec = up_rec.min(r.replicas);
            }
            if r.at > down_cutoff {
                down_rec = down_rec.max(r.replicas);
            }
            if r.at < up_cutoff && r.at < down_cutoff {
                old = Some(i);
            }
        }
        let recommendation = current.max(up_rec).min(down_rec);
        self.record(old, desired, now);
        if desired >= current {
            (
                recommendation,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            (
                recommendation,
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        }
    }

    /// `storeScaleEvent`: a scale made, over the oldest event past the longest period.
    fn store_event(&mut self, up: &Rules, down: &Rules, from: i64, to: i64, now: Timestamp) {
        let (events, rules, change) = if to > from {
            (&mut self.up, up, to - from)
        } else {
            (&mut self.down, down, from - to)
        };
        let cutoff = now - SignedDuration::from_secs(rules.longest_period());
        for e in events.iter_mut() {
            if e.at < cutoff {
                e.outdated = true;
            }
        }
        let event = ScaleEvent {
            at: now,
            change,
            outdated: false,
        };
        match events.iter_mut().find(|e| e.outdated) {
            Some(slot) => *slot = event,
            None => events.push(event),
        }
    }

    /// `convertDesiredReplicasWithBehaviorRate`: within min and max and what the policies
    /// allow over their periods.
    fn limit_with_behavior(
        &self,
        current: i64,
        desired: i64,
        (min, max): (i64, i64),
        (up, down): (&Rules, &Rules),
        now: Timestamp,
    ) -> (i64, &'static str, &'static str) {
        if desired > current {
            let events = (&self.up[..], &self.down[..]);
            let limit = policy_limit(current, events, up, Direction::Up, now).max(current);
            let (allowed, reason, message) = upper_bound(limit, max);
            if desired > allowed {
                return (allowed, reason, message);
            }
        } else if desired < current {
            let events = (&self.up[..], &self.down[..]);
            let limit = policy_limit(current, events, down, Direction::Down, now).min(current);
            let (allowed, reason, message) = if min < limit {
                (
                    limit,
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate",
                )
            } else {
                (
                    min,
                    "TooFewReplicas",
                    "the desired replica count is less than the minimum replica count",
                )
            };
            if desired < allowed {
                return (allowed, reason, message);
            }
        }
        (
            desired,
            "DesiredWithinRange",
            "the desired count is within the acceptable range",
        )
    }
}

/// Sets a condition on the autoscaler being synced.
fn set(hpa: &mut Value, (kind, status, reason, message): Condition) {
    crate::types::set_condition(
        hpa,
        json!({"type": kind, "status": status, "reason": reason, "message": message}),
    );
}

/// A resource metric's spec: the resource, the container (for `ContainerResource`), the
/// goal, and the status field it reports under.
struct ResourceSpec<'a> {
    name: &'a str,
    container: Option<&'a str>,
    target: &'a Value,
    field: &'static str,
}

#[derive(Clone)]
struct Controller {
    client: Client,
    hpas: Informer,
    pods: Informer,
    recorder: Recorder,
    clock: Arc<dyn Clock>,
    timing: Timing,
    history: Arc<Mutex<HashMap<String, History>>>,
}

/// The scale of a target: its resource, replicas and selector.
struct Target {
    res: Arc<Resource>,
    namespace: String,
    replicas: i64,
    selector: String,
}

impl Controller {
    async fn reconcile(&self, key: String) -> Result<Action> {
        let Some(hpa) = self.hpas.get(&key) else {
            self.history.lock().expect("history lock").remove(&key);
            return Ok(Action::Done);
        };
        self.sync(&key, &hpa).await?;
        Ok(Action::RequeueAfter(self.timing.sync))
    }

    /// `reconcileAutoscaler`. Only a conflict writing the status is an error: everything
    /// else the autoscaler's conditions and events say, and the next sync tries again.
    async fn sync(&self, key: &str, original: &Value) -> Result<()> {
        let mut hpa = original.clone();
        let ns = str_at(original, "/metadata/namespace").to_string();
        let spec = &original["spec"];
        let now = self.clock.now();
        let target = match self.target(&ns, &spec["scaleTargetRef"]).await {
            Ok(t) => t,
            Err(e) => {
                self.recorder
                    .event(original, EventType::Warning, "FailedGetScale", &e)
                    .await;
                set(
                    &mut hpa,
                    (
                        "AbleToScale",
                        "False",
                        "FailedGetScale".into(),
                        format!(
                            "the HPA controller was unable to get the target's current scale: {e}"
                        ),
                    ),
                );
                return self.write_status(original, hpa).await;
            }
        };
        set(
            &mut hpa,
            (
                "AbleToScale",
                "True",
                "SucceededGetScale".into(),
                "the HPA controller was able to get the target's current scale".into(),
            ),
        );
        let current = target.replicas;
        {
            let mut history = self.history.lock().expect("history lock");
            let h = history.entry(key.to_string()).or_default();
            if h.recommendations.is_empty() {
                h.record(None, current, now);
            }
        }
        let min = int_at(spec, "/minReplicas").unwrap_or(1);
        let max = int_at(spec, "/maxReplicas").unwrap_or(0);
        let mut statuses = Vec::new();
        let (desired, reason) = if current == 0 && min != 0 {
            set(
                &mut hpa,
                (
                    "ScalingActive",
                    "False",
                    "ScalingDisabled".into(),
                    "scaling is disabled since the replica count of the target is zero".into(),
                ),
            );
            (current, String::new())
        } else if current > max {
            (
                max,
                "Current number of replicas above Spec.MaxReplicas".into(),
            )
        } else if current < min {
            (
                min,
                "Current number of replicas below Spec.MinReplicas".into(),
            )
        } else {
            let (proposed, metric, errors) = self
                .replicas_for_metrics(original, &mut hpa, &target, &mut statuses, now)
                .await;
            let Some(proposed) = proposed else {
                self.set_replicas_and_metrics(&mut hpa, current, None, statuses);
                self.write_status(original, hpa).await?;
                if let Some(e) = errors {
                    self.recorder
                        .event(
                            original,
                            EventType::Warning,
                            "FailedComputeMetricsReplicas",
                            &e,
                        )
                        .await;
                }
                return Ok(());
            };
            let mut reason = String::new();
            if proposed > current {
                reason = format!("{metric} above target");
            }
            if proposed < current {
                reason = "All metrics below target".into();
            }
            let desired = self.normalize(key, &mut hpa, current, proposed, (min, max), now);
            (desired, reason)
        };
        let rescale = desired != current;
        if rescale {
            let scaled = self
                .client
                .scale(
                    &target.res,
                    Some(&ns),
                    str_at(spec, "/scaleTargetRef/name"),
                    desired,
                )
                .await;
            if let Err(e) = scaled {
                self.recorder
                    .event(
                        original,
                        EventType::Warning,
                        "FailedRescale",
                        &format!("New size: {desired}; reason: {reason}; error: {e}"),
                    )
                    .await;
                set(
                    &mut hpa,
                    (
                        "AbleToScale",
                        "False",
                        "FailedUpdateScale".into(),
                        format!("the HPA controller was unable to update the target scale: {e}"),
                    ),
                );
                self.set_replicas_and_metrics(&mut hpa, current, None, statuses);
                return self.write_status(original, hpa).await;
            }
            set(
                &mut hpa,
                (
                    "AbleToScale",
                    "True",
                    "SucceededRescale".into(),
                    format!("the HPA controller was able to update the target scale to {desired}"),
                ),
            );
            self.recorder
                .event(
                    original,
                    EventType::Normal,
                    "SuccessfulRescale",
                    &format!("New size: {desired}; reason: {reason}"),
                )
                .await;
            if let Some(behavior) = spec.get("behavior").filter(|b| b.is_object()) {
                let (up, down) = (
                    Rules::from(&behavior["scaleUp"]),
                    Rules::from(&behavior["scaleDown"]),
                );
                let mut history = self.history.lock().expect("history lock");
                history
                    .entry(key.to_string())
                    .or_default()
                    .store_event(&up, &down, current, desired, now);
            }
            tracing::info!(hpa = %key, from = current, to = desired, %reason, "rescaled");
        }
        let desired = if rescale { desired } else { current };
        self.set_replicas_and_metrics(&mut hpa, current, Some(desired), statuses);
        if rescale {
            hpa["status"]["lastScaleTime"] = json!(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
        self.write_status(original, hpa).await
    }

    /// `setStatus` / `setCurrentReplicasAndMetricsInStatus`: the figures of this sync
    /// (the desired count stays when it was not worked out).
    fn set_replicas_and_metrics(
        &self,
        hpa: &mut Value,
        current: i64,
        desired: Option<i64>,
        statuses: Vec<Value>,
    ) {
        let status = &mut hpa["status"];
        status["currentReplicas"] = json!(current);
        if let Some(d) = desired {
            status["desiredReplicas"] = json!(d);
        } else if status.get("desiredReplicas").is_none() {
            status["desiredReplicas"] = json!(0);
        }
        if let Some(m) = status.as_object_mut() {
            if statuses.is_empty() {
                m.remove("currentMetrics");
            } else {
                m.insert("currentMetrics".into(), Value::Array(statuses));
            }
        }
    }

    /// `updateStatusIfNeeded`.
    async fn write_status(&self, original: &Value, hpa: Value) -> Result<()> {
        if hpa.get("status") == original.get("status") {
            return Ok(());
        }
        match self.client.update_status(self.hpas.resource(), &hpa).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The target's scale, or why it cannot be read (as the message says it).
    async fn target(&self, ns: &str, r: &Value) -> std::result::Result<Target, String> {
        let kind = r["kind"].as_str().unwrap_or("");
        let name = r["name"].as_str().unwrap_or("");
        let api_version = r["apiVersion"].as_str().unwrap_or("");
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let builtin = catalog::RESOURCES
            .iter()
            .find(|res| res.group == group && res.kind_name == kind && res.scale)
            .cloned();
        let res = match builtin {
            Some(res) => res,
            None => self
                .client
                .custom_resources()
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .find(|res| res.group == group && res.kind_name == kind && res.scale)
                .ok_or_else(|| format!("no matches for kind {kind:?} in group {group:?}"))?,
        };
        let obj = self
            .client
            .get(&res, Some(ns), name)
            .await
            .map_err(|e| e.to_string())?;
        let scale = res.strategy.scale(&obj);
        Ok(Target {
            namespace: ns.to_string(),
            replicas: scale.replicas.as_i64().unwrap_or(0),
            selector: scale.selector,
            res,
        })
    }

    /// `computeReplicasForMetrics`: the highest proposal of the metrics that could be
    /// read, with the metric that made it; `None` when none could, or some failed and the
    /// rest would scale down. The first error, when any metric failed.
    async fn replicas_for_metrics(
        &self,
        original: &Value,
        hpa: &mut Value,
        target: &Target,
        statuses: &mut Vec<Value>,
        now: Timestamp,
    ) -> (Option<i64>, String, Option<String>) {
        let selector = if target.selector.is_empty() {
            self.recorder
                .event(
                    original,
                    EventType::Warning,
                    "SelectorRequired",
                    "selector is required",
                )
                .await;
            set(
                hpa,
                (
                    "ScalingActive",
                    "False",
                    "InvalidSelector".into(),
                    "the HPA target's scale is missing a selector".into(),
                ),
            );
            return (None, String::new(), None);
        } else {
            match Selector::parse(&target.selector) {
                Ok(s) => s,
                Err(e) => {
                    let message = format!(
                        "couldn't convert selector into a corresponding internal selector object: {e}"
                    );
                    self.recorder
                        .event(original, EventType::Warning, "InvalidSelector", &message)
                        .await;
                    set(
                        hpa,
                        ("ScalingActive", "False", "InvalidSelector".into(), message),
                    );
                    return (None, String::new(), None);
                }
            }
        };
        let specs = original
            .pointer("/spec/metrics")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let (mut replicas, mut metric) = (0i64, String::new());
        let mut invalid = 0usize;
        let mut first: Option<MetricError> = None;
        for spec in specs {
            match self
                .replicas_for_metric(spec, target, &selector, &target.selector, now)
                .await
            {
                Ok((proposal, name, status)) => {
                    statuses.push(status);
                    if replicas == 0 || proposal > replicas {
                        replicas = proposal;
                        metric = name;
                    }
                }
                Err(e) => {
                    statuses.push(json!({"type": ""}));
                    self.recorder
                        .event(original, EventType::Warning, &e.condition.2, &e.message)
                        .await;
                    invalid += 1;
                    first.get_or_insert(e);
                }
            }
        }
        let error = first.as_ref().map(|e| {
            format!(
                "invalid metrics ({invalid} invalid out of {}), first error is: {}",
                specs.len(),
                e.message
            )
        });
        if invalid >= specs.len() || (invalid > 0 && replicas < target.replicas) {
            if let Some(e) = first {
                set(hpa, e.condition);
            }
            return (None, String::new(), error);
        }
        set(
            hpa,
            (
                "ScalingActive",
                "True",
                "ValidMetricFound".into(),
                format!("the HPA was able to successfully calculate a replica count from {metric}"),
            ),
        );
        (Some(replicas), metric, error)
    }

    /// `computeReplicasForMetric`: one metric's proposal, the name it goes by and its
    /// status entry.
    async fn replicas_for_metric(
        &self,
        spec: &Value,
        target: &Target,
        selector: &Selector,
        selector_text: &str,
        now: Timestamp,
    ) -> std::result::Result<(i64, String, Value), MetricError> {
        let kind = spec["type"].as_str().unwrap_or("");
        let unable = |reason: &str, message: String| MetricError {
            condition: (
                "ScalingActive",
                "False",
                reason.to_string(),
                format!("the HPA was unable to compute the replica count: {message}"),
            ),
            message,
        };
        let resource = match kind {
            "Resource" => ResourceSpec {
                name: spec
                    .pointer("/resource/name")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                container: None,
                target: &spec["resource"]["target"],
                field: "resource",
            },
            "ContainerResource" => ResourceSpec {
                name: spec
                    .pointer("/containerResource/name")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                container: spec
                    .pointer("/containerResource/container")
                    .and_then(Value::as_str),
                target: &spec["containerResource"]["target"],
                field: "containerResource",
            },
            "Pods" | "Object" | "External" => {
                let (api, what, reason) = match kind {
                    "Pods" => ("custom.metrics.k8s.io", "pods", "FailedGetPodsMetric"),
                    "Object" => ("custom.metrics.k8s.io", "object", "FailedGetObjectMetric"),
                    _ => (
                        "external.metrics.k8s.io",
                        "external",
                        "FailedGetExternalMetric",
                    ),
                };
                let field = match kind {
                    "Pods" => "pods",
                    "Object" => "object",
                    _ => "external",
                };
                let name = spec
                    .pointer(&format!("/{field}/metric/name"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                return Err(unable(
                    reason,
                    format!(
                        "failed to get {what} metric value: unable to get metric {name}: no metrics API ({api}) is served; berth serves resource metrics (cpu, memory) only"
                    ),
                ));
            }
            other => {
                let message = format!("unknown metric source type {other:?}");
                return Err(unable("InvalidMetricSourceType", message));
            }
        };
        let (reason, prefix) = if kind == "Resource" {
            (
                "FailedGetResourceMetric",
                format!("failed to get {} resource metric value", resource.name),
            )
        } else {
            (
                "FailedGetContainerResourceMetric",
                format!(
                    "failed to get {} container resource metric value",
                    resource.name
                ),
            )
        };
        let fail = |e: String| unable(reason, format!("{prefix}: {e}"));
        let goal = if let Some(avg) = resource.target.get("averageValue").and_then(quantity) {
            Goal::Average(avg.milli() as i64)
        } else if let Some(u) = resource.target["averageUtilization"].as_i64() {
            Goal::Utilization(u)
        } else {
            return Err(fail(
                "invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into(),
            ));
        };
        let what = match goal {
            Goal::Utilization(_) => "utilization",
            Goal::Average(_) => "usage",
        };
        let wrap = |e: String| fail(format!("failed to get {} {what}: {e}", resource.name));
        let ns = target.namespace.as_str();
        let metrics = self
            .resource_metrics(ns, selector_text, resource.name, resource.container)
            .await
            .map_err(|e| {
                wrap(format!(
                    "unable to get metrics for resource {}: {e}",
                    resource.name
                ))
            })?;
        let all = self.pods.list_namespace(ns);
        let pods: Vec<&Value> = all
            .iter()
            .map(|p| &**p)
            .filter(|p| selector.matches(&crate::types::labels::map_at(p, "/metadata/labels")))
            .collect();
        let p = resource_replicas(
            target.replicas,
            goal,
            metrics,
            &pods,
            resource.name,
            resource.container,
            now,
        )
        .map_err(wrap)?;
        let mut current = json!({"averageValue": decimal_milli(p.average)});
        if let Some(u) = p.utilization {
            current["averageUtilization"] = json!(u);
        }
        let mut source = json!({"name": resource.name, "current": current});
        if let Some(c) = resource.container {
            source["container"] = json!(c);
        }
        let name = match (goal, kind) {
            (Goal::Average(_), _) => format!("{} resource", resource.name),
            (_, "ContainerResource") => format!(
                "{} container resource utilization (percentage of request)",
                resource.name
            ),
            _ => format!(
                "{} resource utilization (percentage of request)",
                resource.name
            ),
        };
        Ok((
            p.replicas,
            name,
            json!({"type": kind, resource.field: source}),
        ))
    }

    /// `GetResourceMetric`: the pods' usage, from the resource metrics API.
    async fn resource_metrics(
        &self,
        ns: &str,
        selector: &str,
        resource: &str,
        container: Option<&str>,
    ) -> std::result::Result<Metrics, String> {
        let params = ListParams {
            label_selector: Some(selector.to_string()),
            field_selector: None,
        };
        let list = self
            .client
            .list(catalog::of(Kind::PodMetrics), Some(ns), &params)
            .await
            .map_err(|e| format!("unable to fetch metrics from resource metrics API: {e}"))?;
        if list.items.is_empty() {
            return Err("no metrics returned from resource metrics API".into());
        }
        pod_metrics(&list.items, resource, container)
            .map_err(|e| format!("failed to get container metrics: {e}"))
    }

    /// `normalizeDesiredReplicas` and its behavior twin: the proposal stabilized and held
    /// within the limits, with the conditions that say which rule held it.
    fn normalize(
        &self,
        key: &str,
        hpa: &mut Value,
        current: i64,
        proposed: i64,
        (min, max): (i64, i64),
        now: Timestamp,
    ) -> i64 {
        let behavior = hpa["spec"]
            .get("behavior")
            .filter(|b| b.is_object())
            .cloned();
        let mut history = self.history.lock().expect("history lock");
        let h = history.entry(key.to_string()).or_default();
        let (stabilized, held, limited) = match behavior {
            None => {
                let window = SignedDuration::try_from(self.timing.downscale_window)
                    .unwrap_or(SignedDuration::from_secs(300));
                let stabilized = h.stabilize(proposed, window, now);
                let held = (
                    "ScaleDownStabilized",
                    "recent recommendations were higher than current one, applying the highest recent recommendation",
                );
                (
                    stabilized,
                    held,
                    convert_with_rules(current, stabilized, min, max),
                )
            }
            Some(b) => {
                let up = Rules::from(&b["scaleUp"]);
                let mut down = Rules::from(&b["scaleDown"]);
                down.window
                    .get_or_insert(self.timing.downscale_window.as_secs() as i64);
                let (stabilized, reason, message) =
                    h.stabilize_with_behavior(current, proposed, &up, &down, now);
                let limited =
                    h.limit_with_behavior(current, stabilized, (min, max), (&up, &down), now);
                (stabilized, (reason, message), limited)
            }
        };
        drop(history);
        if stabilized != proposed {
            set(hpa, ("AbleToScale", "True", held.0.into(), held.1.into()));
        } else {
            set(
                hpa,
                (
                    "AbleToScale",
                    "True",
                    "ReadyForNewScale".into(),
                    "recommended size matches current size".into(),
                ),
            );
        }
        let (desired, reason, message) = limited;
        let status = if desired == stabilized {
            "False"
        } else {
            "True"
        };
        set(
            hpa,
            ("ScalingLimited", status, reason.into(), message.into()),
        );
        desired
    }
}

/// Registers the autoscaler's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let timing = Timing {
        sync: ctx.config.hpa_sync,
        downscale_window: ctx.config.hpa_downscale_window,
    };
    let hpas = ctx
        .informers
        .get(catalog::of(Kind::HorizontalPodAutoscaler));
    let pods = ctx.informers.get(catalog::of(Kind::Pod));
    let queue = Queue::new();
    hpas.on_change({
        let queue = queue.clone();
        move |change| match change {
            Change::Added(o) | Change::Deleted(o) => queue.add(key_of(o)),
            // Its own status writes come back as updates; only a new spec is news.
            Change::Updated { old, new } => {
                if old.pointer("/metadata/generation") != new.pointer("/metadata/generation") {
                    queue.add(key_of(new));
                }
            }
        }
    });
    let controller = Controller {
        client: ctx.client.clone(),
        hpas,
        pods,
        recorder: ctx.recorder("horizontal-pod-autoscaler"),
        clock: ctx.clock.clone(),
        timing,
        history: Arc::default(),
    };
    sup.spawn("horizontal-pod-autoscaler", move |cancel| {
        let (c, queue) = (controller.clone(), queue.clone());
        async move {
            if !super::synced(&[&c.hpas, &c.pods], &cancel).await {
                return;
            }
            super::run(
                "horizontal-pod-autoscaler",
                queue,
                WORKERS,
                cancel,
                move |key| {
                    let c = c.clone();
                    async move { c.reconcile(key).await }
                },
            )
            .await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-06-01T12:00:00Z".parse().unwrap()
    }

    fn ago(secs: i64) -> String {
        (now() - SignedDuration::from_secs(secs)).to_string()
    }

    /// A running pod started long ago, ready since then, asking for `request` of CPU.
    fn pod(name: &str, request: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": request}}}]},
            "status": {"phase": "Running", "startTime": ago(3600), "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": ago(3600)}]},
        })
    }

    fn usage(pairs: &[(&str, i64)]) -> Metrics {
        pairs
            .iter()
            .map(|(name, value)| {
                let metric = PodMetric {
                    value: *value,
                    at: now() - SignedDuration::from_secs(5),
                    window: SignedDuration::from_secs(15),
                };
                (name.to_string(), metric)
            })
            .collect()
    }

    fn calc(current: i64, target: i64, metrics: Metrics, pods: &[Value]) -> Proposal {
        let refs: Vec<&Value> = pods.iter().collect();
        resource_replicas(
            current,
            Goal::Utilization(target),
            metrics,
            &refs,
            "cpu",
            None,
            now(),
        )
        .unwrap()
    }

    #[test]
    fn utilization_over_the_target_scales_up_in_proportion() {
        let pods = [pod("a", "1"), pod("b", "1"), pod("c", "1")];
        let m = usage(&[("a", 300), ("b", 500), ("c", 700)]);
        // 50 % against 30 %: five pods bring it to the target.
        let p = calc(3, 30, m, &pods);
        assert_eq!(
            p,
            Proposal {
                replicas: 5,
                utilization: Some(50),
                average: 500
            }
        );
    }

    #[test]
    fn a_change_within_the_tolerance_is_none() {
        let pods = [pod("a", "1"), pod("b", "1")];
        let p = calc(2, 50, usage(&[("a", 520), ("b", 530)]), &pods);
        assert_eq!(p.replicas, 2);
        assert_eq!(p.utilization, Some(52));
    }

    #[test]
    fn pods_without_metrics_count_as_full_on_the_way_down() {
        let pods = [pod("a", "1"), pod("b", "1"), pod("c", "1"), pod("d", "1")];
        // d has no sample: taken as using its whole request, (300 + 1000) / 4000 = 32 %.
        let p = calc(4, 50, usage(&[("a", 100), ("b", 100), ("c", 100)]), &pods);
        assert_eq!(p.replicas, 3);
        assert_eq!(
            p.utilization,
            Some(10),
            "the status shows what was measured"
        );
    }

    #[test]
    fn unready_pods_count_as_idle_on_the_way_up() {
        let mut pending = pod("c", "1");
        pending["status"]["phase"] = json!("Pending");
        let mut young = pod("d", "1");
        young["status"]["startTime"] = json!(ago(20));
        young["status"]["conditions"][0]["lastTransitionTime"] = json!(ago(10));
        let pods = [pod("a", "1"), pod("b", "1"), pending, young];
        let m = usage(&[("a", 1000), ("b", 1000), ("d", 1000)]);
        let refs: Vec<&Value> = pods.iter().collect();
        let g = group_pods(&refs, &m, "cpu", now());
        // d turned ready 10 s ago: its sample of 5 s ago reaches back before that.
        assert_eq!(g.ready, 2);
        assert_eq!(g.unready.iter().collect::<Vec<_>>(), ["c", "d"]);
        // 100 % of two against 50 % is four; with c and d at 0 % it is 2000 / 4000.
        let p = calc(4, 25, m, &pods);
        assert_eq!(p.replicas, 8);
    }

    #[test]
    fn deleting_and_failed_pods_are_ignored() {
        let mut gone = pod("b", "1");
        gone["metadata"]["deletionTimestamp"] = json!(ago(1));
        let mut failed = pod("c", "1");
        failed["status"]["phase"] = json!("Failed");
        let pods = [pod("a", "1"), gone, failed];
        let p = calc(3, 50, usage(&[("a", 1000), ("b", 0), ("c", 0)]), &pods);
        assert_eq!((p.replicas, p.utilization), (2, Some(100)));
    }

    #[test]
    fn a_container_without_a_request_is_an_error_that_says_which() {
        let mut bare = pod("a", "1");
        bare["spec"]["containers"][0]["resources"] = json!({});
        let refs = [&bare];
        let e = resource_replicas(
            1,
            Goal::Utilization(50),
            usage(&[("a", 10)]),
            &refs,
            "cpu",
            None,
            now(),
        )
        .unwrap_err();
        assert_eq!(e, "missing request for cpu in container c of Pod a");
        let asked = pod("a", "1");
        let e = resource_replicas(
            1,
            Goal::Utilization(50),
            Metrics::new(),
            &[&asked],
            "cpu",
            None,
            now(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "did not receive metrics for targeted pods (pods might be unready)"
        );
    }

    #[test]
    fn an_average_value_target_divides_the_usage() {
        let pods = [pod("a", "1"), pod("b", "1")];
        let refs: Vec<&Value> = pods.iter().collect();
        let p = resource_replicas(
            2,
            Goal::Average(200),
            usage(&[("a", 500), ("b", 700)]),
            &refs,
            "cpu",
            None,
            now(),
        )
        .unwrap();
        assert_eq!((p.replicas, p.utilization, p.average), (6, None, 600));
    }

    #[test]
    fn sidecars_requests_count_and_containers_can_be_singled_out() {
        let mut p = pod("a", "100m");
        p["spec"]["initContainers"] = json!([
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
            {"name": "init", "resources": {}},
        ]);
        let refs = [&p];
        assert_eq!(pod_requests(&refs, "cpu", None).unwrap()["a"], 150);
        assert_eq!(pod_requests(&refs, "cpu", Some("side")).unwrap()["a"], 50);
        let m = json!([{"metadata": {"name": "a", "namespace": "default"},
            "timestamp": ago(1), "window": "15.002s",
            "containers": [{"name": "c", "usage": {"cpu": "1500000n", "memory": "1Mi"}},
                           {"name": "side", "usage": {"cpu": "2m", "memory": "1Mi"}}]}]);
        let all = pod_metrics(m.as_array().unwrap(), "cpu", None).unwrap();
        assert_eq!(
            all["a"].value, 4,
            "1.5m rounds up to 2m, as MilliValue does"
        );
        assert_eq!(all["a"].window, SignedDuration::from_millis(15_002));
        let one = pod_metrics(m.as_array().unwrap(), "memory", Some("side")).unwrap();
        assert_eq!(one["a"].value, 1024 * 1024 * 1000);
    }

    #[test]
    fn without_behavior_a_scale_up_at_most_doubles_and_min_max_hold() {
        assert_eq!(convert_with_rules(1, 10, 1, 20).0, 4);
        assert_eq!(convert_with_rules(1, 10, 1, 20).1, "ScaleUpLimit");
        assert_eq!(convert_with_rules(5, 10, 1, 20).0, 10);
        assert_eq!(
            convert_with_rules(5, 30, 1, 8),
            (
                8,
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count"
            )
        );
        assert_eq!(convert_with_rules(5, 0, 2, 8).0, 2);
        assert_eq!(convert_with_rules(5, 0, 2, 8).1, "TooFewReplicas");
    }

    #[test]
    fn the_scale_down_window_keeps_the_highest_recent_recommendation() {
        let mut h = History::default();
        let window = SignedDuration::from_secs(300);
        h.record(None, 5, now() - SignedDuration::from_secs(400));
        h.record(None, 4, now() - SignedDuration::from_secs(100));
        assert_eq!(h.stabilize(2, window, now()), 4);
        // The sample past the window was overwritten, not appended to.
        assert_eq!(h.recommendations.len(), 2);
        assert_eq!(
            h.stabilize(1, window, now() + SignedDuration::from_secs(250)),
            2
        );
    }

    fn rules(v: Value) -> Rules {
        Rules::from(&v)
    }

    #[test]
    fn behavior_policies_limit_over_their_periods() {
        let up = rules(
            json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]}),
        );
        // The faster of four pods and doubling.
        assert_eq!(policy_limit(2, (&[], &[]), &up, Direction::Up, now()), 6);
        assert_eq!(policy_limit(10, (&[], &[]), &up, Direction::Up, now()), 20);
        // Two pods were added 10 s ago: the period began at 2.
        let recent = [ScaleEvent {
            at: now() - SignedDuration::from_secs(10),
            change: 2,
            outdated: false,
        }];
        assert_eq!(
            policy_limit(4, (&recent, &[]), &up, Direction::Up, now()),
            6
        );
        let slow = rules(json!({"selectPolicy": "Min", "policies": [
            {"type": "Pods", "value": 1, "periodSeconds": 60},
            {"type": "Percent", "value": 10, "periodSeconds": 60}]}));
        assert_eq!(
            policy_limit(10, (&[], &[]), &slow, Direction::Down, now()),
            9
        );
        let percent = rules(json!({"selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 50, "periodSeconds": 60}]}));
        assert_eq!(
            policy_limit(5, (&[], &[]), &percent, Direction::Down, now()),
            2
        );
        let off = rules(json!({"selectPolicy": "Disabled", "policies": []}));
        assert_eq!(policy_limit(5, (&[], &[]), &off, Direction::Down, now()), 5);

        let mut h = History::default();
        let down = rules(
            json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}),
        );
        assert_eq!(
            h.limit_with_behavior(4, 1, (1, 10), (&up, &down), now()),
            (
                3,
                "ScaleDownLimit",
                "the desired replica count is decreasing faster than the maximum scale rate"
            )
        );
        h.store_event(&up, &down, 4, 3, now());
        let later = now() + SignedDuration::from_secs(30);
        // One pod went within the minute: no more may go yet.
        assert_eq!(
            h.limit_with_behavior(3, 1, (1, 10), (&up, &down), later).0,
            3
        );
        let much_later = now() + SignedDuration::from_secs(61);
        assert_eq!(
            h.limit_with_behavior(3, 1, (1, 10), (&up, &down), much_later)
                .0,
            2
        );
        h.store_event(&up, &down, 3, 2, much_later);
        assert_eq!(h.down.len(), 1, "the outdated event's slot is reused");
    }

    #[test]
    fn behavior_stabilization_holds_between_the_windows() {
        let up =
            rules(json!({"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": []}));
        let down = rules(
            json!({"stabilizationWindowSeconds": 120, "selectPolicy": "Max", "policies": []}),
        );
        let mut h = History::default();
        h.record(None, 3, now() - SignedDuration::from_secs(30));
        // Up to 6 is held at the lowest of the last minute (3)...
        assert_eq!(h.stabilize_with_behavior(3, 6, &up, &down, now()).0, 3);
        // ...and down to 1 at the highest of the last two minutes (6).
        let (n, reason, _) = h.stabilize_with_behavior(6, 1, &up, &down, now());
        assert_eq!((n, reason), (6, "ScaleDownStabilized"));
    }

    #[test]
    fn durations_and_quantities_read_and_print_as_upstream() {
        assert_eq!(
            parse_go_duration("15.002s"),
            Some(SignedDuration::from_millis(15_002))
        );
        assert_eq!(
            parse_go_duration("1m0.5s"),
            Some(SignedDuration::from_millis(60_500))
        );
        assert_eq!(
            parse_go_duration("300ms"),
            Some(SignedDuration::from_millis(300))
        );
        assert_eq!(parse_go_duration("soon"), None);
        assert_eq!(decimal_milli(250), "250m");
        assert_eq!(decimal_milli(2000), "2");
        assert_eq!(decimal_milli(12_000_000), "12k");
        assert_eq!(decimal_milli(12_582_912_000), "12582912");
        assert_eq!(decimal_milli(0), "0");
    }
}
