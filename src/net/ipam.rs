//! The node's pod addresses: one file per address handed out, named by the address and
//! holding the pod's uid (as the CNI host-local plugin keeps them). A file is claimed
//! with `O_EXCL`, so one address never goes to two pods, and the files outlive berth, so
//! a restart hands a running pod its own address again and never gives it to another.
//! Addresses are handed out round-robin from the last one given, so a freed address is
//! not reused at once (connections to the pod that had it have time to end).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ipnet::Ipv4Net;

/// The last address handed out (where the next search starts).
const LAST_FILE: &str = "last";

/// Why an address could not be handed out.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "no address is left in the pod CIDR {0}: delete pods, or give berth a larger one with --pod-cidr"
    )]
    Exhausted(Ipv4Net),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

fn io_error(context: String) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// The addresses of one node's pods.
pub struct Ipam {
    dir: PathBuf,
    range: Ipv4Net,
    /// Addresses never handed out: the network, the gateway and the broadcast address.
    reserved: Vec<Ipv4Addr>,
    state: Mutex<State>,
}

struct State {
    by_uid: HashMap<String, Ipv4Addr>,
    last: u32,
}

impl Ipam {
    /// Opens the records in `dir` (made if missing) for addresses of `range`, of which
    /// `gateway` is the bridge's own.
    pub fn open(dir: &Path, range: Ipv4Net, gateway: Ipv4Addr) -> Result<Ipam, Error> {
        fs::create_dir_all(dir).map_err(io_error(format!("create {}", dir.display())))?;
        let mut by_uid = HashMap::new();
        let entries = fs::read_dir(dir).map_err(io_error(format!("read {}", dir.display())))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(ip) = name.to_str().and_then(|n| n.parse::<Ipv4Addr>().ok()) else {
                continue;
            };
            let uid = fs::read_to_string(entry.path()).unwrap_or_default();
            let uid = uid.trim();
            if uid.is_empty() {
                // Claimed, then cut short before the uid was written: nobody has it.
                let _ = fs::remove_file(entry.path());
                continue;
            }
            by_uid.insert(uid.to_string(), ip);
        }
        let last = fs::read_to_string(dir.join(LAST_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<Ipv4Addr>().ok())
            .filter(|ip| range.contains(ip))
            .map_or(u32::from(gateway), u32::from);
        Ok(Ipam {
            dir: dir.to_path_buf(),
            range,
            reserved: vec![range.network(), gateway, range.broadcast()],
            state: Mutex::new(State { by_uid, last }),
        })
    }

    /// The address of pod `uid`, if it has one.
    pub fn get(&self, uid: &str) -> Option<Ipv4Addr> {
        self.state
            .lock()
            .expect("ipam lock")
            .by_uid
            .get(uid)
            .copied()
    }

    /// The pod uids that hold an address.
    pub fn holders(&self) -> Vec<String> {
        let state = self.state.lock().expect("ipam lock");
        state.by_uid.keys().cloned().collect()
    }

    /// The address of pod `uid`: the one it holds, else the next free one after the last
    /// handed out.
    pub fn allocate(&self, uid: &str) -> Result<Ipv4Addr, Error> {
        let mut state = self.state.lock().expect("ipam lock");
        if let Some(ip) = state.by_uid.get(uid) {
            return Ok(*ip);
        }
        let first = u32::from(self.range.network());
        let size = 1u64 << (32 - self.range.prefix_len());
        let start = state.last.saturating_sub(first) as u64;
        for step in 1..=size {
            let ip = Ipv4Addr::from(first + ((start + step) % size) as u32);
            if self.reserved.contains(&ip) {
                continue;
            }
            let path = self.dir.join(ip.to_string());
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    use std::io::Write;
                    file.write_all(uid.as_bytes())
                        .and_then(|()| file.sync_all())
                        .map_err(io_error(format!("record {ip} for pod {uid}")))?;
                    state.by_uid.insert(uid.to_string(), ip);
                    state.last = u32::from(ip);
                    let _ = fs::write(self.dir.join(LAST_FILE), ip.to_string());
                    return Ok(ip);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_error(format!("claim {ip} for pod {uid}"))(e)),
            }
        }
        Err(Error::Exhausted(self.range))
    }

    /// Frees the address of pod `uid`, if it has one; returns it.
    pub fn release(&self, uid: &str) -> Option<Ipv4Addr> {
        let mut state = self.state.lock().expect("ipam lock");
        let ip = state.by_uid.remove(uid)?;
        if let Err(e) = fs::remove_file(self.dir.join(ip.to_string())) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(%ip, pod = uid, error = %e, "could not free a pod's address");
            }
        }
        Some(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> (Ipv4Net, Ipv4Addr) {
        ("10.9.0.0/29".parse().unwrap(), Ipv4Addr::new(10, 9, 0, 1))
    }

    #[test]
    fn addresses_are_unique_stable_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (net, gw) = range();
        let ipam = Ipam::open(dir.path(), net, gw).unwrap();
        let a = ipam.allocate("a").unwrap();
        let b = ipam.allocate("b").unwrap();
        assert_eq!(a, Ipv4Addr::new(10, 9, 0, 2));
        assert_eq!(b, Ipv4Addr::new(10, 9, 0, 3));
        assert_eq!(ipam.allocate("a").unwrap(), a, "a pod keeps its address");
        drop(ipam);
        let ipam = Ipam::open(dir.path(), net, gw).unwrap();
        assert_eq!(ipam.get("a"), Some(a));
        assert_eq!(ipam.get("b"), Some(b));
        let c = ipam.allocate("c").unwrap();
        assert_eq!(
            c,
            Ipv4Addr::new(10, 9, 0, 4),
            "the search goes on after the last"
        );
    }

    #[test]
    fn a_freed_address_comes_back_last_and_the_range_runs_out() {
        let dir = tempfile::tempdir().unwrap();
        let (net, gw) = range();
        let ipam = Ipam::open(dir.path(), net, gw).unwrap();
        // .2 to .6: five addresses (.0 network, .1 gateway, .7 broadcast).
        let got: Vec<Ipv4Addr> = (0..5)
            .map(|i| ipam.allocate(&format!("p{i}")).unwrap())
            .collect();
        assert_eq!(got.len(), 5);
        assert!(matches!(ipam.allocate("p5"), Err(Error::Exhausted(_))));
        assert_eq!(ipam.release("p0"), Some(Ipv4Addr::new(10, 9, 0, 2)));
        assert_eq!(ipam.release("p0"), None);
        assert_eq!(ipam.allocate("p6").unwrap(), Ipv4Addr::new(10, 9, 0, 2));
    }

    #[test]
    fn a_claim_cut_short_is_no_claim() {
        let dir = tempfile::tempdir().unwrap();
        let (net, gw) = range();
        fs::write(dir.path().join("10.9.0.2"), "").unwrap();
        let ipam = Ipam::open(dir.path(), net, gw).unwrap();
        assert_eq!(ipam.allocate("a").unwrap(), Ipv4Addr::new(10, 9, 0, 2));
    }
}
