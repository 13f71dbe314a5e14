//! The pod network end to end: a real `berth serve` as root in a network namespace the
//! test makes (so its bridge, veths and addresses never touch this machine's own
//! network), driven by the `berth` CLI run in that namespace. Pods are process pods
//! serving with busybox's httpd.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::support::CliRun;

static NEXT: AtomicU32 = AtomicU32::new(0);

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

fn busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox", "/usr/sbin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Skips a test that needs root, `ip` and busybox, saying so.
fn can_run(test: &str) -> bool {
    let ip = Command::new("ip").arg("-V").output().is_ok();
    if root() && ip && busybox().is_some() {
        return true;
    }
    eprintln!("skipping {test}: it needs root, iproute2 and busybox");
    false
}

fn run(cmd: &mut Command) -> CliRun {
    let o = cmd.stdin(Stdio::null()).output().expect("run a command");
    CliRun {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// A network namespace of the test's own, deleted when dropped.
pub struct Netns(pub String);

impl Netns {
    pub fn new() -> Netns {
        let name = format!(
            "bt-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let made = run(Command::new("ip").args(["netns", "add", &name]));
        assert_eq!(made.code, 0, "{made:?}");
        let ns = Netns(name);
        ns.sh("ip link set lo up");
        ns
    }

    /// Runs `script` with `sh -c` in the namespace.
    pub fn sh(&self, script: &str) -> CliRun {
        run(Command::new("ip").args(["netns", "exec", &self.0, "sh", "-c", script]))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(Command::new("ip").args(["netns", "del", &self.0]));
    }
}

/// `berth serve` in a namespace of its own with a temporary data directory. Dropped, it
/// stops, its pods are ended (`berth node reset`) and the namespace goes.
pub struct NetNode {
    dir: tempfile::TempDir,
    args: Vec<String>,
    child: Option<Child>,
    // Dropped last: after the server and its pods.
    pub ns: Netns,
}

impl NetNode {
    /// Starts `berth serve` with `args` added in a new namespace, and waits until its
    /// node is Ready.
    pub fn start(args: &[&str]) -> NetNode {
        let mut node = NetNode {
            dir: crate::support::private_dir(),
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
            ns: Netns::new(),
        };
        node.spawn();
        node.until_ready();
        node
    }

    /// Runs `berth serve` in the namespace; returns what it printed if it ended within
    /// `wait` (it could not start).
    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("serve.log")).unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns.0,
                env!("CARGO_BIN_EXE_berth"),
                "serve",
            ])
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(["--listen", "127.0.0.1:6443"])
            .args(&self.args)
            .env_remove("BERTH_NO_POD_NETWORK")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// What the server logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    fn until_ready(&mut self) {
        for _ in 0..600 {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("berth serve ended ({status}): {}", self.log());
            }
            let ready = self.cli(&[
                "get",
                "nodes",
                "-o",
                "jsonpath={.items[0].status.conditions[?(@.type==\"Ready\")].status}",
            ]);
            if ready.code == 0 && ready.stdout == "True" {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the node did not get ready: {}", self.log());
    }

    /// Runs the `berth` CLI in the namespace against this server.
    pub fn cli(&self, args: &[&str]) -> CliRun {
        run(Command::new("ip")
            .args(["netns", "exec", &self.ns.0, env!("CARGO_BIN_EXE_berth")])
            .args(args)
            .env("KUBECONFIG", self.data_dir().join("kubeconfig"))
            .env_remove("BERTH_LOG"))
    }

    /// Creates an object from its JSON.
    pub fn create(&self, object: &serde_json::Value) {
        let file = self.dir.path().join(format!(
            "object-{}.json",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&file, object.to_string()).unwrap();
        let made = self.cli(&["create", "-f", file.to_str().unwrap()]);
        assert_eq!(made.code, 0, "{made:?}");
    }

    /// Lets the pods of the `default` namespace use the host (the `privileged` Pod
    /// Security level).
    pub fn allow_privileged(&self) {
        let file = self.dir.path().join(format!(
            "object-{}.json",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "default",
                "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}});
        std::fs::write(&file, ns.to_string()).unwrap();
        let made = self.cli(&["apply", "-f", file.to_str().unwrap()]);
        assert_eq!(made.code, 0, "{made:?}");
    }

    /// A directory of the test's for a pod's files.
    pub fn web_root(&self, name: &str) -> PathBuf {
        let dir = self.dir.path().join("www").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), format!("{name}\n")).unwrap();
        dir
    }

    /// Waits until `check` holds of the pod `name` (as JSON), returning the pod.
    pub fn pod_until(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let mut last = serde_json::Value::Null;
        for _ in 0..600 {
            let got = self.cli(&["get", "pod", name, "-o", "json"]);
            if got.code == 0 {
                last = serde_json::from_str(&got.stdout).unwrap();
                if check(&last) {
                    return last;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "pod {name}: {what} did not happen: {last:#}\n{}",
            self.log()
        );
    }

    /// Stops the server gracefully (its pods run on).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
                rustix::process::Signal::TERM,
            );
            let _ = child.wait();
        }
    }

    /// Starts the server again on its data directory.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
        self.until_ready();
    }

    /// The links in the namespace, by name.
    pub fn links(&self) -> Vec<String> {
        self.ns
            .sh("ip -o link show")
            .stdout
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect()
    }

    pub fn ipam_entries(&self) -> Vec<String> {
        self.address_records("ipam")
    }

    /// The address records of one family (`ipam`, `ipam6`), by address.
    pub fn address_records(&self, family_dir: &str) -> Vec<String> {
        let dir = self.data_dir().join("net").join(family_dir);
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "last")
            .collect();
        names.sort();
        names
    }
}

impl Drop for NetNode {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // In the namespace: the pod network it removes is the node's there.
        let reset = run(Command::new("ip")
            .args(["netns", "exec", &self.ns.0, env!("CARGO_BIN_EXE_berth")])
            .args(["node", "reset", "--data-dir"])
            .arg(self.data_dir()));
        if reset.code != 0 {
            eprintln!("berth node reset failed: {reset:?}");
        }
    }
}

/// `method path` against the node's API from inside its namespace (a thread that
/// entered it opens the connection), as the admin: the status and the body.
pub fn api_call(node: &NetNode, method: &str, path: &str) -> (u16, String) {
    let ns = std::fs::File::open(format!("/run/netns/{}", node.ns.0)).unwrap();
    let ca = std::fs::read_to_string(node.data_dir().join("ca.crt")).unwrap();
    let token = std::fs::read_to_string(node.data_dir().join("admin.token")).unwrap();
    let (method, path) = (
        reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
        path.to_string(),
    );
    std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&ns),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let c = crate::https::client_with(&ca, false);
            let r = c
                .request(method, format!("https://127.0.0.1:6443{path}"))
                .bearer_auth(token.trim())
                .timeout(Duration::from_secs(20))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        })
    })
    .join()
    .unwrap()
}

/// A process pod serving its name over HTTP on port 8080 with busybox's httpd.
pub fn web_pod(node: &NetNode, name: &str, labels: serde_json::Value) -> serde_json::Value {
    let root = node.web_root(name);
    let busybox = busybox().unwrap();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "runtimeClassName": "process",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "web", "image": "busybox",
                "command": [busybox, "httpd", "-f", "-p", "8080", "-h", root],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }],
        },
    })
}

fn running(p: &serde_json::Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn pod_ip(p: &serde_json::Value) -> String {
    p["status"]["podIP"].as_str().unwrap_or("").to_string()
}

/// A shell command that prints the body of `GET /` from `host`:`port` (busybox's `nc`;
/// its static `wget` cannot be used).
pub fn get_script(host: &str, port: u16) -> String {
    format!(
        "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | {} nc -w 5 {host} {port}",
        busybox().unwrap().display()
    )
}

/// The body of an HTTP response `run` printed (empty when there was none).
pub fn body(run: &CliRun) -> String {
    run.stdout
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// `GET /` of `host`:`port` from inside pod `from` (through `berth exec`).
fn fetch_from(node: &NetNode, from: &str, host: &str, port: u16) -> CliRun {
    node.cli(&["exec", from, "--", "sh", "-c", &get_script(host, port)])
}

#[test]
fn pods_get_addresses_of_their_own_and_reach_each_other() {
    if !can_run("pods_get_addresses_of_their_own_and_reach_each_other") {
        return;
    }
    let node = NetNode::start(&["--pod-cidr", "10.244.0.0/16"]);
    node.allow_privileged();
    node.create(&web_pod(&node, "a", serde_json::json!({"app": "web"})));
    node.create(&web_pod(&node, "b", serde_json::json!({"app": "web"})));
    let a = node.pod_until("a", "runs and is ready", running);
    let b = node.pod_until("b", "runs and is ready", running);
    let (ip_a, ip_b) = (pod_ip(&a), pod_ip(&b));
    // Two pods listening on one port: each in a network of its own, with an address of
    // the pod CIDR (the gateway .1 is the bridge's).
    assert_ne!(ip_a, ip_b);
    for ip in [&ip_a, &ip_b] {
        let parsed: std::net::Ipv4Addr = ip.parse().unwrap();
        assert_eq!(parsed.octets()[..2], [10, 244], "{ip}");
        assert_ne!(ip, "10.244.0.1");
    }
    assert_eq!(a["status"]["podIPs"][0]["ip"], ip_a.as_str());
    // Pod to pod, and the node to a pod.
    let got = fetch_from(&node, "a", &ip_b, 8080);
    assert_eq!((got.code, body(&got).as_str()), (0, "b\n"), "{got:?}");
    let got = node.ns.sh(&get_script(&ip_a, 8080));
    assert_eq!((got.code, body(&got).as_str()), (0, "a\n"), "{got:?}");
    // The pod's host name is its own; its interface is eth0 with its address.
    let host = node.cli(&["exec", "a", "--", "hostname"]);
    assert_eq!(host.stdout.trim(), "a", "{host:?}");
    let addr = node.cli(&["exec", "a", "--", "ip", "-o", "-4", "addr", "show", "eth0"]);
    assert!(addr.stdout.contains(&format!("{ip_a}/16")), "{addr:?}");
    // Its /etc/hosts is the pod's own, over this machine's.
    let hosts = node.cli(&["exec", "a", "--", "cat", "/etc/hosts"]);
    assert!(
        hosts.stdout.starts_with("# Kubernetes-managed hosts file.")
            && hosts.stdout.contains(&format!("{ip_a}\ta\n")),
        "{hosts:?}"
    );
    // Its resolver is the cluster DNS (ClusterFirst), which answers at the gateway.
    let resolv = node.cli(&["exec", "a", "--", "cat", "/etc/resolv.conf"]);
    assert!(
        resolv.stdout.contains("nameserver 10.96.0.10\n")
            && resolv
                .stdout
                .contains("search default.svc.cluster.local svc.cluster.local cluster.local")
            && resolv.stdout.contains("options ndots:5"),
        "{resolv:?}"
    );
    let busybox_path = busybox().unwrap();
    let lookup = node.cli(&[
        "exec",
        "a",
        "--",
        busybox_path.to_str().unwrap(),
        "nslookup",
        "kubernetes.default.svc.cluster.local",
        "10.244.0.1",
    ]);
    assert!(lookup.stdout.contains("Address: 10.96.0.1"), "{lookup:?}");
    // The API is reachable from the pod where its environment says.
    let env = node.cli(&["exec", "a", "--", "printenv", "KUBERNETES_SERVICE_HOST"]);
    assert_eq!(env.stdout.trim(), "10.244.0.1", "{env:?}");
    let connect = format!(
        "{} nc -w 5 10.244.0.1 6443 </dev/null",
        busybox().unwrap().display()
    );
    let healthz = node.cli(&["exec", "a", "--", "sh", "-c", &connect]);
    assert_eq!(
        healthz.code, 0,
        "the API answers pods at the gateway: {healthz:?}"
    );
    // A pod on the host's network has the node's address.
    node.create(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "host"},
        "spec": {"hostNetwork": true, "runtimeClassName": "process",
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]},
    }));
    let host = node.pod_until("host", "runs", |p| p["status"]["phase"] == "Running");
    assert_eq!(host["status"]["podIP"], host["status"]["hostIP"]);
}

#[test]
fn addresses_outlive_a_restart_and_everything_goes_with_the_pods() {
    if !can_run("addresses_outlive_a_restart_and_everything_goes_with_the_pods") {
        return;
    }
    let mut node = NetNode::start(&[]);
    node.create(&web_pod(&node, "a", serde_json::json!({})));
    let a = node.pod_until("a", "runs and is ready", running);
    let ip_a = pod_ip(&a);
    assert!(ip_a.starts_with("10.42."), "the default pod CIDR: {ip_a}");
    node.restart();
    // The running pod keeps its address and its network across the restart ...
    let again = node.pod_until("a", "runs after the restart", running);
    assert_eq!(pod_ip(&again), ip_a);
    let got = node.ns.sh(&get_script(&ip_a, 8080));
    assert_eq!(body(&got), "a\n", "{got:?}");
    // ... and a new pod gets another one.
    node.create(&web_pod(&node, "b", serde_json::json!({})));
    let b = node.pod_until("b", "runs and is ready", running);
    assert_ne!(pod_ip(&b), ip_a);
    assert_eq!(node.ipam_entries().len(), 2);
    let veths = |node: &NetNode| {
        node.links()
            .into_iter()
            .filter(|l| l.starts_with("veth"))
            .count()
    };
    assert_eq!(veths(&node), 2);
    // Deleted, the pods take their links and addresses with them.
    let deleted = node.cli(&["delete", "pod", "a", "b", "--wait"]);
    assert_eq!(deleted.code, 0, "{deleted:?}");
    for _ in 0..100 {
        if veths(&node) == 0 && node.ipam_entries().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(veths(&node), 0, "{:?}", node.links());
    assert!(node.ipam_entries().is_empty(), "{:?}", node.ipam_entries());
    // Stopped, the node keeps its network (pods would keep theirs); `berth node reset`
    // then removes the bridge, the tables and the records.
    node.stop();
    assert!(node.links().contains(&"berth0".to_string()));
    let reset = node.cli(&[
        "node",
        "reset",
        "--data-dir",
        node.data_dir().to_str().unwrap(),
    ]);
    assert_eq!(reset.code, 0, "{reset:?}");
    assert!(
        reset.stdout.contains("removed the pod network"),
        "{reset:?}"
    );
    assert!(
        !node.links().contains(&"berth0".to_string()),
        "{:?}",
        node.links()
    );
    let tables = node.ns.sh("nft list tables");
    assert!(!tables.stdout.contains("berth"), "{tables:?}");
    assert!(!node.data_dir().join("net").exists());
    let again = node.cli(&[
        "node",
        "reset",
        "--data-dir",
        node.data_dir().to_str().unwrap(),
    ]);
    assert!(
        !again.stdout.contains("removed the pod network"),
        "{again:?}"
    );
}

#[test]
fn a_pod_cidr_that_overlaps_a_route_is_refused() {
    if !can_run("a_pod_cidr_that_overlaps_a_route_is_refused") {
        return;
    }
    let ns = Netns::new();
    let made = ns.sh(
        "ip link add d0 type veth peer name d1 && ip addr add 10.244.5.1/24 dev d0 && ip link set d0 up && ip link set d1 up",
    );
    assert_eq!(made.code, 0, "{made:?}");
    let dir = crate::support::private_dir();
    let out = run(Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_berth"), "serve"])
        .env_remove("BERTH_NO_POD_NETWORK")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:6443", "--pod-cidr", "10.244.0.0/16"]));
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("10.244.0.0/16 overlaps")
            && out.stderr.contains("10.244.5.0/24 via d0")
            && out.stderr.contains("--pod-cidr"),
        "{out:?}"
    );
    // Nothing was made.
    let links = ns.sh("ip -o link show").stdout;
    assert!(!links.contains("berth0"), "{links}");
    assert!(!Path::new(&dir.path().join("data/net")).exists());
}

#[test]
fn port_forward_reaches_a_server_on_the_pods_own_loopback() {
    if !can_run("port_forward_reaches_a_server_on_the_pods_own_loopback") {
        return;
    }
    let Some(kubectl) = crate::portforward::kubectl() else {
        eprintln!("no kubectl: port-forward into a pod's namespace is not tried");
        return;
    };
    let node = NetNode::start(&[]);
    let root = node.web_root("lo");
    // Listening on the pod's loopback only: not reachable at the pod's address.
    node.create(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "lo"},
        "spec": {"runtimeClassName": "process", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "web", "image": "busybox",
                     "command": [busybox().unwrap(), "httpd", "-f", "-p", "127.0.0.1:8081", "-h", root],
                     "readinessProbe": {"exec": {"command": ["sh", "-c", get_script("127.0.0.1", 8081)]},
                                        "periodSeconds": 1}}]},
    }));
    node.pod_until("lo", "runs and is ready", running);
    let port = 20_000 + (std::process::id() % 10_000) as u16;
    let mut forward = Command::new("ip")
        .args(["netns", "exec", &node.ns.0])
        .arg(&kubectl)
        .arg("--kubeconfig")
        .arg(node.data_dir().join("kubeconfig"))
        .args(["port-forward", "pod/lo", &format!("{port}:8081")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut got = CliRun {
        code: -1,
        stdout: String::new(),
        stderr: String::new(),
    };
    for _ in 0..100 {
        got = node.ns.sh(&get_script("127.0.0.1", port));
        if body(&got) == "lo\n" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = forward.kill();
    let _ = forward.wait();
    assert_eq!(body(&got), "lo\n", "{got:?}");
}

#[test]
fn a_pod_calls_a_service_by_name_and_the_node_reaches_its_node_port() {
    if !can_run("a_pod_calls_a_service_by_name_and_the_node_reaches_its_node_port") {
        return;
    }
    if !Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipping: nft is not installed");
        return;
    }
    let node = NetNode::start(&[]);
    node.create(&web_pod(
        &node,
        "backend",
        serde_json::json!({"app": "backend"}),
    ));
    node.create(&serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "backend"},
        "spec": {"type": "NodePort", "selector": {"app": "backend"},
                 "ports": [{"port": 80, "targetPort": 8080}]},
    }));
    node.create(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"runtimeClassName": "process", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]},
    }));
    node.pod_until("backend", "runs and is ready", running);
    node.pod_until("web", "runs", |p| p["status"]["phase"] == "Running");
    // The web pod finds the backend by its Service's name (the cluster DNS through its
    // Service address, then the Service's cluster IP), as a two-tier application does.
    let mut got = fetch_from(&node, "web", "backend", 80);
    for _ in 0..50 {
        if body(&got) == "backend\n" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        got = fetch_from(&node, "web", "backend", 80);
    }
    assert_eq!(body(&got), "backend\n", "{got:?}");
    // The node reaches the Service at its node port on 127.0.0.1, and at its cluster IP.
    let svc = node.cli(&["get", "svc", "backend", "-o", "json"]);
    let svc: serde_json::Value = serde_json::from_str(&svc.stdout).unwrap();
    let node_port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap() as u16;
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let got = node.ns.sh(&get_script("127.0.0.1", node_port));
    assert_eq!(body(&got), "backend\n", "{got:?}");
    let got = node.ns.sh(&get_script(&cluster_ip, 80));
    assert_eq!(body(&got), "backend\n", "{got:?}");
    // The API reaches the pod's port through the pods and services proxy, a
    // redirect of the pod's (busybox's httpd sends one for a directory) kept inside it.
    let dir = node.web_root("backend").join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("index.html"), "inner\n").unwrap();
    let base = "/api/v1/namespaces/default";
    for path in [
        "pods/backend:8080/proxy/",
        "pods/backend/proxy/",
        "pods/http:backend:8080/proxy/index.html",
        "services/backend/proxy/",
        "services/backend:80/proxy/",
    ] {
        let got = api_call(&node, "GET", &format!("{base}/{path}"));
        assert_eq!(got, (200, "backend\n".to_string()), "{path}");
    }
    let got = api_call(&node, "GET", &format!("{base}/pods/backend:8080/proxy/dir"));
    assert_eq!(got, (200, "inner\n".to_string()));
    let (code, _) = api_call(
        &node,
        "GET",
        &format!("{base}/services/backend/proxy/missing"),
    );
    assert_eq!(code, 404);
    let (code, body) = api_call(&node, "GET", &format!("{base}/services/backend:81/proxy/"));
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("no service port 81"), "{body}");
}

/// Runs `get` (a `GET /`) until the body it prints is `want`: the proxy programs a new
/// pod's host port a moment after the pod has its address.
fn until_body(what: &str, want: &str, get: impl Fn() -> CliRun) {
    let mut got = get();
    for _ in 0..100 {
        if body(&got) == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
        got = get();
    }
    panic!("{what}: {got:?}");
}

#[test]
fn a_pods_host_port_is_reached_at_the_nodes_addresses() {
    if !can_run("a_pods_host_port_is_reached_at_the_nodes_addresses") {
        return;
    }
    if !Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipping: nft is not installed");
        return;
    }
    let node = NetNode::start(&[]);
    node.allow_privileged();
    // The node's address, on an uplink of its own (the namespace has only loopback).
    let node_ip = "192.0.2.10";
    let made = node.ns.sh(&format!(
        "ip link add up0 type veth peer name up1 && ip addr add {node_ip}/24 dev up0 && ip link set up0 up && ip link set up1 up"
    ));
    assert_eq!(made.code, 0, "{made:?}");
    let mut hp = web_pod(&node, "hp", serde_json::json!({}));
    hp["spec"]["containers"][0]["ports"] =
        serde_json::json!([{"containerPort": 8080, "hostPort": 18080}]);
    let mut local = web_pod(&node, "local", serde_json::json!({}));
    local["spec"]["containers"][0]["ports"] = serde_json::json!([
        {"containerPort": 8080, "hostPort": 18081, "hostIP": "127.0.0.1"}]);
    node.create(&hp);
    node.create(&local);
    node.create(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "client"},
        "spec": {"runtimeClassName": "process", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]},
    }));
    node.pod_until("hp", "runs and is ready", running);
    node.pod_until("local", "runs and is ready", running);
    node.pod_until("client", "runs", |p| p["status"]["phase"] == "Running");
    // From the node: on 127.0.0.1, its address and the bridge's.
    for host in ["127.0.0.1", node_ip, "10.42.0.1"] {
        until_body(&format!("the host port on {host}"), "hp\n", || {
            node.ns.sh(&get_script(host, 18080))
        });
    }
    // From another pod and from the pod itself, through the node's address.
    for from in ["client", "hp"] {
        until_body(&format!("the host port from pod {from}"), "hp\n", || {
            fetch_from(&node, from, node_ip, 18080)
        });
    }
    // A host port on 127.0.0.1 only.
    until_body("the host port on 127.0.0.1", "local\n", || {
        node.ns.sh(&get_script("127.0.0.1", 18081))
    });
    let elsewhere = node.ns.sh(&get_script(node_ip, 18081));
    assert_eq!(body(&elsewhere), "", "{elsewhere:?}");
    // Deleted, the pod takes its host port with it.
    let deleted = node.cli(&["delete", "pod", "hp", "--wait"]);
    assert_eq!(deleted.code, 0, "{deleted:?}");
    let mut got = node.ns.sh(&get_script("127.0.0.1", 18080));
    for _ in 0..50 {
        if body(&got).is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        got = node.ns.sh(&get_script("127.0.0.1", 18080));
    }
    assert_eq!(body(&got), "", "{got:?}");
}

fn nft_installed() -> bool {
    Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A process the test started, ended when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The addresses of `status.podIPs`.
fn pod_ips(p: &serde_json::Value) -> Vec<String> {
    p["status"]["podIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["ip"].as_str().map(str::to_string))
        .collect()
}

/// Runs `check` until it is true or about ten seconds have passed; its last answer.
fn eventually(mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..50 {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

#[test]
fn dual_stack_pods_have_an_ipv6_address_too_and_reach_each_other_and_the_world_over_it() {
    let test =
        "dual_stack_pods_have_an_ipv6_address_too_and_reach_each_other_and_the_world_over_it";
    if !can_run(test) {
        return;
    }
    if !nft_installed() {
        eprintln!("skipping {test}: nft is not installed");
        return;
    }
    let mut node = NetNode::start(&["--pod-cidr", "10.245.0.0/16,fd00:245::/64"]);
    node.create(&web_pod(&node, "a", serde_json::json!({"app": "dual"})));
    node.create(&web_pod(&node, "b", serde_json::json!({"app": "dual"})));
    let a = node.pod_until("a", "runs and is ready", running);
    let b = node.pod_until("b", "runs and is ready", running);
    // Both families, IPv4 first (the primary one, which podIP stays).
    let (ips_a, ips_b) = (pod_ips(&a), pod_ips(&b));
    assert_eq!(ips_a.len(), 2, "{a:#}");
    assert_eq!(pod_ip(&a), ips_a[0]);
    assert!(ips_a[0].starts_with("10.245."), "{ips_a:?}");
    let (v6_a, v6_b) = (ips_a[1].clone(), ips_b[1].clone());
    for ip in [&v6_a, &v6_b] {
        let parsed: std::net::Ipv6Addr = ip.parse().unwrap();
        assert_eq!(parsed.segments()[..4], [0xfd00, 0x245, 0, 0], "{ip}");
        assert_ne!(ip, "fd00:245::1", "the bridge's own");
    }
    assert_ne!(v6_a, v6_b);
    // The pod's eth0 has the address ready for use (no duplicate address detection to
    // wait out), and the bridge has the gateway.
    let addr = node.cli(&["exec", "a", "--", "ip", "-o", "-6", "addr", "show", "eth0"]);
    let line = addr
        .stdout
        .lines()
        .find(|l| l.contains(&format!("{v6_a}/64")));
    assert!(line.is_some_and(|l| !l.contains("tentative")), "{addr:?}");
    let bridge = node.ns.sh("ip -o -6 addr show berth0");
    assert!(bridge.stdout.contains("fd00:245::1/64"), "{bridge:?}");
    // Pod to pod and node to pod over IPv6 (busybox's httpd listens on both families).
    let got = fetch_from(&node, "a", &v6_b, 8080);
    assert_eq!((got.code, body(&got).as_str()), (0, "b\n"), "{got:?}");
    let got = node.ns.sh(&get_script(&v6_a, 8080));
    assert_eq!((got.code, body(&got).as_str()), (0, "a\n"), "{got:?}");
    // The hosts file names the pod at both addresses, as the kubelet writes it.
    let hosts = node.cli(&["exec", "a", "--", "cat", "/etc/hosts"]);
    assert!(
        hosts
            .stdout
            .contains(&format!("{}\ta\n{v6_a}\ta\n", ips_a[0])),
        "{hosts:?}"
    );
    // The cluster DNS: the pod's IPv6 name, and a headless Service asking for both
    // families answers AAAA with its pods' IPv6 addresses (from its IPv6 slice).
    node.create(&serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "dual"},
        "spec": {"clusterIP": "None", "selector": {"app": "dual"},
                 "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"],
                 "ports": [{"port": 8080}]},
    }));
    let busybox_path = busybox().unwrap();
    let lookup = |name: &str| {
        node.cli(&[
            "exec",
            "a",
            "--",
            busybox_path.to_str().unwrap(),
            "nslookup",
            "-type=AAAA",
            name,
            "10.245.0.1",
        ])
    };
    let pod_name = format!("{}.default.pod.cluster.local", v6_b.replace(':', "-"));
    let got = lookup(&pod_name);
    assert!(got.stdout.contains(&format!("Address: {v6_b}")), "{got:?}");
    let mut got = lookup("dual.default.svc.cluster.local");
    let answered = eventually(|| {
        got = lookup("dual.default.svc.cluster.local");
        got.stdout.contains(&format!("Address: {v6_a}"))
            && got.stdout.contains(&format!("Address: {v6_b}"))
    });
    assert!(answered, "{got:?}");
    // The world (a namespace beyond an uplink, with no route back to the pods) is
    // reached masqueraded.
    let outside = Netns::new();
    let wired = node.ns.sh(&format!(
        "ip link add up0 type veth peer name up1 netns {} && ip -6 addr add fd99:245::1/64 dev up0 nodad && ip link set up0 up",
        outside.0
    ));
    assert_eq!(wired.code, 0, "{wired:?}");
    let wired = outside.sh("ip -6 addr add fd99:245::2/64 dev up1 nodad && ip link set up1 up");
    assert_eq!(wired.code, 0, "{wired:?}");
    let root = node.web_root("outside");
    let _server = Killed(
        Command::new("ip")
            .args(["netns", "exec", &outside.0])
            .arg(busybox().unwrap())
            .args(["httpd", "-f", "-p", "8080", "-h"])
            .arg(&root)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut got = fetch_from(&node, "a", "fd99:245::2", 8080);
    let reached = eventually(|| {
        got = fetch_from(&node, "a", "fd99:245::2", 8080);
        body(&got) == "outside\n"
    });
    assert!(reached, "{got:?}");
    let rules = node.ns.sh("nft list table ip6 berth");
    assert!(
        rules.stdout.contains("masquerade")
            && rules
                .stdout
                .contains("ip6 daddr fd00:245::/64 oifname != \"berth0\" drop"),
        "{rules:?}"
    );
    // A restart keeps both addresses, and the network of the running pods.
    node.restart();
    let again = node.pod_until("a", "runs after the restart", running);
    assert_eq!(pod_ips(&again), ips_a);
    let got = node.ns.sh(&get_script(&v6_a, 8080));
    assert_eq!(body(&got), "a\n", "{got:?}");
    assert_eq!(node.address_records("ipam6").len(), 2);
    // Deleted, the pods take their links and both addresses with them.
    let deleted = node.cli(&["delete", "pod", "a", "b", "--wait"]);
    assert_eq!(deleted.code, 0, "{deleted:?}");
    let gone = eventually(|| {
        !node.links().iter().any(|l| l.starts_with("veth"))
            && node.ipam_entries().is_empty()
            && node.address_records("ipam6").is_empty()
    });
    assert!(
        gone,
        "{:?} {:?} {:?}",
        node.links(),
        node.ipam_entries(),
        node.address_records("ipam6")
    );
    // The IPv6 table stays when berth stops (pods running on keep their traffic) ...
    node.stop();
    assert_eq!(node.ns.sh("nft list table ip6 berth").code, 0);
    // ... and goes when berth comes back without IPv6 ...
    node.args = vec!["--pod-cidr".into(), "10.245.0.0/16".into()];
    node.restart();
    assert_ne!(node.ns.sh("nft list table ip6 berth").code, 0);
    // ... or with its removal, which finds nothing left to remove now.
    node.stop();
    let nft = ["ip", "netns", "exec", &node.ns.0, "nft"].map(str::to_string);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(berth::net::pod::remove_ipv6_rules(&nft, "berth"))
        .unwrap();
}

#[test]
fn an_ipv6_pod_cidr_that_overlaps_a_route_is_refused() {
    if !can_run("an_ipv6_pod_cidr_that_overlaps_a_route_is_refused") {
        return;
    }
    let ns = Netns::new();
    let made = ns.sh(
        "ip link add d0 type veth peer name d1 && ip -6 addr add fd00:246:0:0:5::1/80 dev d0 nodad && ip link set d0 up && ip link set d1 up",
    );
    assert_eq!(made.code, 0, "{made:?}");
    let dir = crate::support::private_dir();
    let out = run(Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_berth"), "serve"])
        .env_remove("BERTH_NO_POD_NETWORK")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:6443"])
        .args(["--pod-cidr", "10.246.0.0/16,fd00:246::/64"]));
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("fd00:246::/64 overlaps")
            && out.stderr.contains("fd00:246:0:0:5::/80 via d0")
            && out.stderr.contains("--pod-cidr"),
        "{out:?}"
    );
    let links = ns.sh("ip -o link show").stdout;
    assert!(!links.contains("berth0"), "{links}");
}
