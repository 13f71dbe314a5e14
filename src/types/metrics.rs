//! Resource metrics: what node agents measure (cumulative CPU time and the memory working
//! set of the machine, of each pod and of each running container) and the rates made of
//! two measurements in a row, as metrics-server keeps them for `metrics.k8s.io`.
//!
//! An agent records one sample of its node every interval, and one at once when a
//! container starts ([`Board::record`]); the rates are worked out then, once, so that a
//! read only copies them. A container's CPU counter starts again with each instance, so a
//! rate is made of two samples of the same instance, or (for its first sample, as
//! metrics-server does) of its sample and its start, when its counter was zero; a pod is
//! shown only when every container it runs has one.

use std::collections::HashMap;
use std::sync::RwLock;

use jiff::Timestamp;

/// The shortest window a container's first rate (since its start) is made over: over
/// less, the few milliseconds of CPU a process takes to start make a rate of cores.
const FIRST_WINDOW_MIN_MS: u64 = 100;

/// One container instance's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSample {
    pub name: String,
    /// Which instance (restart attempt) the counters are of.
    pub instance: u32,
    pub cpu_ns: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// When the instance started (its counters were zero then).
    pub started_at: Option<Timestamp>,
}

/// One pod's containers at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSample {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub containers: Vec<ContainerSample>,
    /// When its counters were read, when not at the node's sample time: on a busy
    /// machine the reads of many pods take a while, and a rate over a window of a few
    /// hundred milliseconds must be of the moments its counters were read.
    pub read_at: Option<Timestamp>,
}

/// Usage over a window: CPU in nanocores (CPU nanoseconds per second), memory in bytes
/// at the window's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

/// A node's usage over the last window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMetrics {
    pub name: String,
    /// When the window ended.
    pub timestamp: Timestamp,
    pub window_ms: u64,
    pub usage: Rate,
}

/// A pod's usage over the last window, per container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMetrics {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub timestamp: Timestamp,
    pub window_ms: u64,
    pub containers: Vec<(String, Rate)>,
}

/// Counters as last read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Point {
    at: Timestamp,
    cpu_ns: u64,
    memory_bytes: u64,
}

impl Point {
    fn new(at: Timestamp, cpu_ns: Option<u64>, memory_bytes: Option<u64>) -> Option<Point> {
        Some(Point {
            at,
            cpu_ns: cpu_ns?,
            memory_bytes: memory_bytes?,
        })
    }

    /// The usage from `earlier` to this point; none when the counter went back (another
    /// instance) or no time passed.
    fn since(&self, earlier: &Point) -> Option<(u64, Rate)> {
        let elapsed = self.at.duration_since(earlier.at).as_nanos();
        let used = self.cpu_ns.checked_sub(earlier.cpu_ns)?;
        if elapsed <= 0 {
            return None;
        }
        let nanocores = (u128::from(used) * 1_000_000_000 / elapsed as u128) as u64;
        let window_ms = (elapsed / 1_000_000) as u64;
        Some((
            window_ms,
            Rate {
                cpu_nanocores: nanocores,
                memory_bytes: self.memory_bytes,
            },
        ))
    }
}

/// What the board keeps of one node: its last counters and its rates.
#[derive(Debug, Default)]
struct NodeEntry {
    last: Option<Point>,
    metrics: Option<NodeMetrics>,
    /// Per pod uid: the last counters of each container instance, and the pod's rates.
    pods: HashMap<String, PodEntry>,
}

#[derive(Debug, Default)]
struct PodEntry {
    last: HashMap<(String, u32), Point>,
    metrics: Option<PodMetrics>,
}

/// The latest resource metrics of every node, shared by the agents that record them and
/// the API that serves them. Memory is bounded by what the nodes run: a pod a node no
/// longer reports is forgotten at its next sample.
#[derive(Debug, Default)]
pub struct Board {
    nodes: RwLock<HashMap<String, NodeEntry>>,
}

impl Board {
    /// Records one sample of `node` taken at `at`: the machine's counters and those of
    /// every pod it runs now.
    pub fn record(
        &self,
        node: &str,
        at: Timestamp,
        machine_cpu_ns: Option<u64>,
        machine_memory_bytes: Option<u64>,
        pods: Vec<PodSample>,
    ) {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        let entry = nodes.entry(node.to_string()).or_default();
        let point = Point::new(at, machine_cpu_ns, machine_memory_bytes);
        entry.metrics = match (point, entry.last) {
            (Some(now), Some(before)) => now.since(&before).map(|(window_ms, usage)| NodeMetrics {
                name: node.to_string(),
                timestamp: at,
                window_ms,
                usage,
            }),
            _ => None,
        };
        entry.last = point;
        let mut next = HashMap::with_capacity(pods.len());
        for pod in pods {
            let at = pod.read_at.unwrap_or(at);
            let old = entry.pods.remove(&pod.uid).unwrap_or_default();
            let mut last = HashMap::with_capacity(pod.containers.len());
            let mut rates = Vec::with_capacity(pod.containers.len());
            let mut window = None;
            let mut complete = !pod.containers.is_empty();
            for c in &pod.containers {
                let key = (c.name.clone(), c.instance);
                let Some(now) = Point::new(at, c.cpu_ns, c.memory_bytes) else {
                    complete = false;
                    continue;
                };
                // An instance seen for the first time: since its start.
                let start = c.started_at.map(|t| Point {
                    at: t,
                    cpu_ns: 0,
                    memory_bytes: 0,
                });
                let seen = old.last.get(&key).copied();
                let before = seen.or(start);
                match before.and_then(|before| now.since(&before)) {
                    // A first window too short to tell a rate is not shown yet.
                    Some((window_ms, rate))
                        if seen.is_some() || window_ms >= FIRST_WINDOW_MIN_MS =>
                    {
                        window = Some(window.map_or(window_ms, |w: u64| w.min(window_ms)));
                        rates.push((c.name.clone(), rate));
                    }
                    _ => complete = false,
                }
                last.insert(key, now);
            }
            let metrics = match (complete, window) {
                (true, Some(window_ms)) => Some(PodMetrics {
                    namespace: pod.namespace,
                    name: pod.name,
                    uid: pod.uid.clone(),
                    node: node.to_string(),
                    timestamp: at,
                    window_ms,
                    containers: rates,
                }),
                _ => None,
            };
            next.insert(pod.uid, PodEntry { last, metrics });
        }
        entry.pods = next;
    }

    /// Forgets a node (it is gone, or its agent stopped).
    pub fn forget(&self, node: &str) {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        nodes.remove(node);
    }

    /// Every node with a window measured, by name.
    pub fn nodes(&self) -> Vec<NodeMetrics> {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<NodeMetrics> = nodes.values().filter_map(|n| n.metrics.clone()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Every pod with a window measured (in `namespace`, or all), by namespace and name.
    pub fn pods(&self, namespace: Option<&str>) -> Vec<PodMetrics> {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<PodMetrics> = nodes
            .values()
            .flat_map(|n| n.pods.values())
            .filter_map(|p| p.metrics.as_ref())
            .filter(|p| namespace.is_none_or(|ns| p.namespace == ns))
            .cloned()
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn pod(name: &str, containers: &[(&str, u32, u64, u64)]) -> PodSample {
        PodSample {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            containers: containers
                .iter()
                .map(|(n, i, cpu, mem)| ContainerSample {
                    name: n.to_string(),
                    instance: *i,
                    cpu_ns: Some(*cpu),
                    memory_bytes: Some(*mem),
                    started_at: None,
                })
                .collect(),
            read_at: None,
        }
    }

    #[test]
    fn a_new_instance_is_measured_from_its_start() {
        let board = Board::default();
        let mut first = pod("web", &[("app", 0, 2_000_000_000, 10)]);
        first.containers[0].started_at = Some(at(-4));
        board.record("n1", at(0), Some(0), Some(100), vec![first]);
        let m = board.pods(None);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].window_ms, 4_000);
        assert_eq!(m[0].containers[0].1.cpu_nanocores, 500_000_000);
        assert_eq!(m[0].containers[0].1.memory_bytes, 10);
    }

    #[test]
    fn a_pod_read_after_the_machine_is_measured_at_its_own_read() {
        let board = Board::default();
        board.record(
            "n1",
            at(0),
            Some(0),
            Some(1),
            vec![pod("web", &[("app", 0, 0, 1)])],
        );
        // The node's sample is taken at 10 s, but this pod's counters only at 11 s (a
        // busy machine): its 3 CPU-seconds are over 11 s, not 10.
        let mut late = pod("web", &[("app", 0, 3_300_000_000, 1)]);
        late.read_at = Some(at(11));
        board.record("n1", at(10), Some(0), Some(1), vec![late]);
        let m = board.pods(None);
        assert_eq!(m[0].window_ms, 11_000);
        assert_eq!(m[0].containers[0].1.cpu_nanocores, 300_000_000);
        assert_eq!(m[0].timestamp, at(11));
    }

    #[test]
    fn a_first_window_too_short_shows_no_rate_yet() {
        let board = Board::default();
        let mut first = pod("web", &[("app", 0, 3_000_000, 10)]);
        first.containers[0].started_at = Some(at(0));
        let just_after = at(0)
            .checked_add(jiff::SignedDuration::from_micros(500))
            .unwrap();
        board.record("n1", just_after, Some(0), Some(100), vec![first]);
        assert!(
            board.pods(None).is_empty(),
            "3 ms of CPU in 0.5 ms is no rate"
        );
    }

    #[test]
    fn rates_come_from_two_samples_of_the_same_instance() {
        let board = Board::default();
        board.record(
            "n1",
            at(0),
            Some(0),
            Some(100),
            vec![pod("web", &[("app", 0, 1_000, 10)])],
        );
        assert!(board.nodes().is_empty(), "one sample makes no rate");
        assert!(board.pods(None).is_empty());
        // 15 s later: the machine used 3 CPU-seconds, the container 1.5.
        board.record(
            "n1",
            at(15),
            Some(3_000_000_000),
            Some(200),
            vec![pod("web", &[("app", 0, 1_500_001_000, 20)])],
        );
        let nodes = board.nodes();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].window_ms, 15_000);
        assert_eq!(nodes[0].usage.cpu_nanocores, 200_000_000);
        assert_eq!(nodes[0].usage.memory_bytes, 200);
        let pods = board.pods(Some("default"));
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].containers[0].1.cpu_nanocores, 100_000_000);
        assert_eq!(pods[0].containers[0].1.memory_bytes, 20);
        assert!(board.pods(Some("other")).is_empty());
        // The container restarted: its new instance has no rate yet, so the pod has none.
        board.record(
            "n1",
            at(30),
            Some(3_000_000_000),
            Some(200),
            vec![pod("web", &[("app", 1, 10, 20)])],
        );
        assert!(board.pods(None).is_empty());
        assert_eq!(board.nodes()[0].usage.cpu_nanocores, 0);
        // A pod the node no longer runs is forgotten.
        board.record("n1", at(45), Some(3_000_000_000), Some(200), vec![]);
        board.record(
            "n1",
            at(60),
            Some(3_000_000_000),
            Some(200),
            vec![pod("web", &[("app", 1, 20, 20)])],
        );
        assert!(board.pods(None).is_empty(), "its old counters went");
        board.forget("n1");
        assert!(board.nodes().is_empty());
    }

    #[test]
    fn a_pod_is_shown_only_when_every_container_has_a_rate() {
        let board = Board::default();
        board.record("n1", at(0), None, None, vec![pod("two", &[("a", 0, 0, 1)])]);
        board.record(
            "n1",
            at(10),
            None,
            None,
            vec![pod("two", &[("a", 0, 10, 1), ("b", 0, 0, 1)])],
        );
        assert!(board.pods(None).is_empty());
        assert!(
            board.nodes().is_empty(),
            "no machine counters, no node metrics"
        );
        board.record(
            "n1",
            at(20),
            None,
            None,
            vec![pod("two", &[("a", 0, 20, 1), ("b", 0, 5_000_000_000, 2)])],
        );
        let pods = board.pods(None);
        assert_eq!(pods[0].containers.len(), 2);
        assert_eq!(pods[0].containers[1].1.cpu_nanocores, 500_000_000);
        assert_eq!(pods[0].node, "n1");
    }
}
