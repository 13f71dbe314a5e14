//! Network namespaces a test (or bench) makes for itself: a "node" with a bridge and an
//! uplink to an "outside" namespace, and "pods" on the bridge, each with servers that
//! answer who they are and whom they saw. Never the machine's own namespace: every link
//! is made inside the namespaces, and dropping the lab deletes them all (and stops the
//! servers), even when the test panicked.

#![allow(dead_code)] // shared with the net bench, which uses part of it

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// The TCP port every pod serves on, and the UDP one.
pub const TCP_PORT: u16 = 8080;
pub const UDP_PORT: u16 = 8081;

static LABS: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`, panicking with its error when it fails.
pub fn ip(args: &[&str]) {
    run("ip", args);
}

pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether this machine can run the lab (root, `ip` and `nft`).
pub fn available() -> bool {
    let ok = |p: &str, a: &str| {
        Command::new(p)
            .arg(a)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let root = rustix::process::geteuid().is_root();
    root && ok("ip", "-V") && ok("nft", "--version")
}

/// Runs `f` on a thread inside the network namespace `ns`.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns);
            f()
        })
        .join()
        .expect("the thread in the namespace panicked")
    })
}

/// Moves this thread into the network namespace `ns`.
fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/run/netns/{ns}"))
        .unwrap_or_else(|e| panic!("namespace {ns}: {e}"));
    rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&f),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .unwrap_or_else(|e| panic!("entering {ns}: {e}"));
}

/// One pod: its namespace and address.
pub struct Pod {
    pub ns: String,
    pub ip: Ipv4Addr,
    pub name: String,
}

/// A node namespace with a bridge, an uplink and pods.
pub struct Lab {
    pub node: String,
    pub outside: String,
    pub bridge: String,
    pub uplink: String,
    /// The pods' /24: the bridge has `.1`, pod `i` has `.10 + i`.
    pub pod_cidr: String,
    pub gateway: Ipv4Addr,
    /// The node's own address (on the uplink) and the outside's.
    pub node_ip: Ipv4Addr,
    pub outside_ip: Ipv4Addr,
    pub pods: Vec<Pod>,
    stop: Arc<AtomicBool>,
    servers: Vec<std::thread::JoinHandle<()>>,
}

impl Lab {
    /// A node with `pods` pods, each serving on [`TCP_PORT`] and [`UDP_PORT`].
    pub fn new(pods: usize) -> Lab {
        let n = LABS.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{n}", std::process::id());
        let k = (std::process::id() * 7 + n) % 200 + 20;
        let mut lab = Lab {
            node: format!("bn{id}"),
            outside: format!("bo{id}"),
            bridge: format!("bt{id}"),
            uplink: format!("bu{id}"),
            pod_cidr: format!("10.250.{k}.0/24"),
            gateway: Ipv4Addr::new(10, 250, k as u8, 1),
            node_ip: Ipv4Addr::new(172, 31, k as u8, 1),
            outside_ip: Ipv4Addr::new(172, 31, k as u8, 2),
            pods: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            servers: Vec::new(),
        };
        // From here on, Drop deletes whatever was made.
        let (node, outside, bridge, uplink) = (
            lab.node.clone(),
            lab.outside.clone(),
            lab.bridge.clone(),
            lab.uplink.clone(),
        );
        ip(&["netns", "add", &node]);
        ip(&["netns", "add", &outside]);
        ip(&["-n", &node, "link", "set", "lo", "up"]);
        ip(&["-n", &outside, "link", "set", "lo", "up"]);
        ip(&["-n", &node, "link", "add", &bridge, "type", "bridge"]);
        ip(&[
            "-n",
            &node,
            "addr",
            "add",
            &format!("{}/24", lab.gateway),
            "dev",
            &bridge,
        ]);
        ip(&["-n", &node, "link", "set", &bridge, "up"]);
        ip(&[
            "link", "add", &uplink, "netns", &node, "type", "veth", "peer", "name", "eth0",
            "netns", &outside,
        ]);
        // No IPv6 chatter on the uplink: a test counts what leaves through it.
        let sysctl = |ns: &str, kv: &str| {
            run("ip", &["netns", "exec", ns, "sysctl", "-qw", kv]);
        };
        sysctl(&node, &format!("net/ipv6/conf/{uplink}/disable_ipv6=1"));
        sysctl(&outside, "net/ipv6/conf/eth0/disable_ipv6=1");
        ip(&[
            "-n",
            &node,
            "addr",
            "add",
            &format!("{}/24", lab.node_ip),
            "dev",
            &uplink,
        ]);
        ip(&["-n", &node, "link", "set", &uplink, "up"]);
        ip(&[
            "-n",
            &outside,
            "addr",
            "add",
            &format!("{}/24", lab.outside_ip),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &outside, "link", "set", "eth0", "up"]);
        ip(&[
            "-n",
            &node,
            "route",
            "add",
            "default",
            "via",
            &lab.outside_ip.to_string(),
        ]);
        // What the pod network sets up on a node (the proxy needs it).
        sysctl(&node, "net/ipv4/ip_forward=1");
        sysctl(&node, "net/bridge/bridge-nf-call-iptables=1");
        sysctl(&node, &format!("net/ipv4/conf/{bridge}/route_localnet=1"));
        for i in 0..pods {
            lab.add_pod(i);
        }
        lab
    }

    fn add_pod(&mut self, i: usize) {
        let ns = format!("{}x{i}", self.node.replacen("bn", "bp", 1));
        let port = format!("{}p{i}", self.bridge);
        let k = self.gateway.octets()[2];
        let addr = Ipv4Addr::new(10, 250, k, 10 + i as u8);
        ip(&["netns", "add", &ns]);
        self.pods.push(Pod {
            ns: ns.clone(),
            ip: addr,
            name: format!("pod{i}"),
        });
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&[
            "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port, "netns",
            &self.node,
        ]);
        ip(&[
            "-n",
            &self.node,
            "link",
            "set",
            &port,
            "master",
            &self.bridge,
        ]);
        // As the CNI bridge plugin's `hairpinMode`: a pod's packet DNATed back to itself
        // is bridged out of the port it came in through.
        ip(&[
            "-n",
            &self.node,
            "link",
            "set",
            &port,
            "type",
            "bridge_slave",
            "hairpin",
            "on",
        ]);
        ip(&["-n", &self.node, "link", "set", &port, "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&[
            "-n",
            &ns,
            "route",
            "add",
            "default",
            "via",
            &self.gateway.to_string(),
        ]);
        self.serve(i);
    }

    /// Starts pod `i`'s servers: TCP answers `<pod> <peer address>` and closes, UDP
    /// answers each datagram the same way.
    fn serve(&mut self, i: usize) {
        let ns = self.pods[i].ns.clone();
        let name = self.pods[i].name.clone();
        let (tcp, udp) = in_netns(&ns, || {
            let tcp = TcpListener::bind(("0.0.0.0", TCP_PORT)).unwrap();
            let udp = UdpSocket::bind(("0.0.0.0", UDP_PORT)).unwrap();
            (tcp, udp)
        });
        udp.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let stop = self.stop.clone();
        let who = name.clone();
        // Blocking accepts (a bench measures through them); Drop wakes the last one.
        self.servers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok((mut c, peer)) = tcp.accept() {
                    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    let _ = c.set_nodelay(true);
                    let mut buf = [0u8; 64];
                    let _ = c.read(&mut buf);
                    let _ = c.write_all(format!("{who} {}", peer.ip()).as_bytes());
                }
            }
        }));
        let stop = self.stop.clone();
        self.servers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((_, peer)) = udp.recv_from(&mut buf) {
                    let _ = udp.send_to(format!("{name} {}", peer.ip()).as_bytes(), peer);
                }
            }
        }));
    }

    /// `nft ARGS` in the node's namespace, as the proxy is told to run it.
    pub fn nft(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.node, "nft"]
            .map(String::from)
            .to_vec()
    }

    /// Packets sent out through the uplink so far.
    pub fn uplink_tx_packets(&self) -> u64 {
        let out = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.node,
                "cat",
                &format!("/sys/class/net/{}/statistics/tx_packets", self.uplink),
            ],
        );
        out.trim().parse().unwrap()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for pod in &self.pods {
            let ns = pod.ns.clone();
            let _ = std::thread::spawn(move || {
                let Ok(f) = std::fs::File::open(format!("/run/netns/{ns}")) else {
                    return;
                };
                let entered = rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&f),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                );
                if entered.is_ok() {
                    let _ = TcpStream::connect_timeout(
                        &SocketAddr::from(([127, 0, 0, 1], TCP_PORT)),
                        Duration::from_secs(1),
                    );
                }
            })
            .join();
        }
        for s in self.servers.drain(..) {
            let _ = s.join();
        }
        let mut all: Vec<String> = self.pods.iter().map(|p| p.ns.clone()).collect();
        all.push(self.node.clone());
        all.push(self.outside.clone());
        for ns in all {
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        }
    }
}

/// A TCP request to `addr` from the namespace `ns`: what the server answered.
pub fn tcp(ns: &str, addr: SocketAddr) -> std::io::Result<String> {
    in_netns(ns, || {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(2)))?;
        c.write_all(b"hi")?;
        let mut out = String::new();
        c.read_to_string(&mut out)?;
        Ok(out)
    })
}

/// A UDP datagram to `addr` from `ns`: the answer.
pub fn udp(ns: &str, addr: SocketAddr) -> std::io::Result<String> {
    in_netns(ns, || {
        let s = UdpSocket::bind(("0.0.0.0", 0))?;
        s.connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.send(b"hi")?;
        let mut buf = [0u8; 64];
        let n = s.recv(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    })
}
