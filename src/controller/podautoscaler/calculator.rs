//! The replica calculator: each pod's usage and requests of a resource, the pods grouped
//! (ready, unready, missing, ignored), and the replica count that brings usage to the goal.
//! Pods and PodMetrics are read as JSON through `types::json`: the pods come from the
//! informer on every sync, and PodMetrics have no k8s-openapi type.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::controller::claim::is_deleting;
use crate::types::json::{array_at, str_at};
use crate::types::quantity::Quantity;

/// How far from 1 the usage ratio must be for the scale to change.
const TOLERANCE: f64 = 0.1;

/// CPU samples of a pod this young are used only once it is ready and a whole metric
/// window has passed since (`--horizontal-pod-autoscaler-cpu-initialization-period`).
const CPU_INITIALIZATION_PERIOD: SignedDuration = SignedDuration::from_secs(300);

/// A pod that turned unready this soon after it started is taken as never ready yet
/// (`--horizontal-pod-autoscaler-initial-readiness-delay`).
const INITIAL_READINESS_DELAY: SignedDuration = SignedDuration::from_secs(30);

/// A pod's usage of one resource, in thousandths, and the sample it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct PodMetric {
    value: i64,
    at: Timestamp,
    window: SignedDuration,
}

pub(super) type Metrics = BTreeMap<String, PodMetric>;

/// The pods of a calculation sorted as `groupPods` sorts them.
#[derive(Debug, Default, PartialEq)]
struct Groups {
    ready: usize,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
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
pub(super) fn quantity(v: &Value) -> Option<Quantity> {
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
pub(super) fn decimal_milli(milli: i64) -> String {
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
pub(super) fn pod_metrics(
    items: &[Value],
    resource: &str,
    container: Option<&str>,
) -> std::result::Result<Metrics, String> {
    let mut out = Metrics::new();
    for m in items {
        let name = str_at(m, "/metadata/name").to_string();
        let at = timestamp_at(m, "/timestamp").unwrap_or(Timestamp::UNIX_EPOCH);
        let window = parse_go_duration(str_at(m, "/window")).unwrap_or(SignedDuration::ZERO);
        let containers = array_at(m, "/containers");
        let usage = |c: &Value| {
            c.pointer(&format!("/usage/{resource}"))
                .and_then(quantity)
                .map(|q| q.milli() as i64)
        };
        match container {
            Some(wanted) => {
                for c in containers.iter().filter(|c| str_at(c, "/name") == wanted) {
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
            let ready = crate::types::condition(pod, "Ready");
            let start = timestamp_at(pod, "/status/startTime");
            let unready = match (ready, start) {
                (Some(cond), Some(start)) => {
                    let transition =
                        timestamp_at(cond, "/lastTransitionTime").unwrap_or(Timestamp::UNIX_EPOCH);
                    let is_false = str_at(cond, "/status") == "False";
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
        let sidecars = array_at(pod, "/spec/initContainers")
            .iter()
            .filter(|c| str_at(c, "/restartPolicy") == "Always");
        let containers = array_at(pod, "/spec/containers").iter();
        let mut sum = 0i64;
        for c in containers.chain(sidecars) {
            let cname = str_at(c, "/name");
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
pub(super) struct Proposal {
    pub(super) replicas: i64,
    pub(super) utilization: Option<i64>,
    pub(super) average: i64,
}

/// How a target is met: a utilisation of the requests, or an average usage.
#[derive(Debug, Clone, Copy)]
pub(super) enum Goal {
    Utilization(i64),
    Average(i64),
}

/// `GetResourceReplicas` and `GetRawResourceReplicas`: the replica count that brings the
/// pods' usage to the goal.
pub(super) fn resource_replicas(
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
