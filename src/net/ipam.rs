//! The node's pod addresses: one file per address handed out, named by the address and
//! holding the pod's uid (as the CNI host-local plugin keeps them). A file is claimed
//! with `O_EXCL`, so one address never goes to two pods, and the files outlive berth, so
//! a restart hands a running pod its own address again and never gives it to another.
//! Addresses are handed out round-robin from the last one given, so a freed address is
//! not reused at once (connections to the pod that had it have time to end). Each
//! address family has a directory of records of its own ([`Family`]: IPv4, and IPv6
//! for a dual-stack pod network), so a pod holds at most one address of each.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The last address handed out (where the next search starts).
const LAST_FILE: &str = "last";

/// Why an address could not be handed out.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "no address is left in the pod CIDR {0}: delete pods, or give berth a larger one with --pod-cidr"
    )]
    Exhausted(IpNet),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

fn io_error(context: String) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// An address family the records can hold: IPv4 or IPv6 addresses, as numbers.
pub trait Family:
    Copy + Eq + std::hash::Hash + FromStr + std::fmt::Display + Into<IpAddr> + Send + 'static
{
    /// The range type of the family.
    type Net: Copy + std::fmt::Debug + Into<IpNet>;
    /// The address's number.
    fn bits(self) -> u128;
    /// The address of a number (the low bits of it).
    fn from_bits(bits: u128) -> Self;
    /// The range's first address and its prefix length.
    fn range(net: Self::Net) -> (Self, u8);
    /// The addresses of the range never handed out besides the gateway: the network's
    /// own (IPv6's subnet-router anycast address) and IPv4's broadcast address.
    fn reserved(net: Self::Net) -> Vec<Self>;
    /// The width of the family's addresses.
    const WIDTH: u8;
}

impl Family for Ipv4Addr {
    type Net = Ipv4Net;
    fn bits(self) -> u128 {
        u128::from(u32::from(self))
    }
    fn from_bits(bits: u128) -> Self {
        Ipv4Addr::from(bits as u32)
    }
    fn range(net: Ipv4Net) -> (Self, u8) {
        (net.network(), net.prefix_len())
    }
    fn reserved(net: Ipv4Net) -> Vec<Self> {
        vec![net.network(), net.broadcast()]
    }
    const WIDTH: u8 = 32;
}

impl Family for Ipv6Addr {
    type Net = Ipv6Net;
    fn bits(self) -> u128 {
        u128::from(self)
    }
    fn from_bits(bits: u128) -> Self {
        Ipv6Addr::from(bits)
    }
    fn range(net: Ipv6Net) -> (Self, u8) {
        (net.network(), net.prefix_len())
    }
    fn reserved(net: Ipv6Net) -> Vec<Self> {
        vec![net.network()]
    }
    const WIDTH: u8 = 128;
}

/// The addresses of one node's pods of one family (records of each family are kept in
/// a directory of their own).
pub struct Ipam<A: Family> {
    dir: PathBuf,
    range: A::Net,
    /// Addresses never handed out: the network, the gateway (and IPv4's broadcast).
    reserved: Vec<A>,
    state: Mutex<State<A>>,
}

struct State<A> {
    by_uid: HashMap<String, A>,
    last: u128,
}

impl<A: Family> Ipam<A> {
    /// Opens the records in `dir` (made if missing) for addresses of `range`, of which
    /// `gateway` is the bridge's own. A record of an address outside `range` (the range
    /// was changed) is dropped: its pod is given an address of the range when it is
    /// wired again.
    pub fn open(dir: &Path, range: A::Net, gateway: A) -> Result<Ipam<A>, Error> {
        fs::create_dir_all(dir).map_err(io_error(format!("create {}", dir.display())))?;
        let contains = |ip: A| in_range::<A>(range, ip);
        let mut by_uid = HashMap::new();
        let entries = fs::read_dir(dir).map_err(io_error(format!("read {}", dir.display())))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(ip) = name.to_str().and_then(|n| n.parse::<A>().ok()) else {
                continue;
            };
            let uid = fs::read_to_string(entry.path()).unwrap_or_default();
            let uid = uid.trim();
            if uid.is_empty() || !contains(ip) {
                // Claimed, then cut short before the uid was written: nobody has it.
                // Or of a range no longer used: its pod gets one of this range.
                let _ = fs::remove_file(entry.path());
                continue;
            }
            by_uid.insert(uid.to_string(), ip);
        }
        let last = fs::read_to_string(dir.join(LAST_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<A>().ok())
            .filter(|ip| contains(*ip))
            .unwrap_or(gateway)
            .bits();
        let mut reserved = A::reserved(range);
        reserved.push(gateway);
        Ok(Ipam {
            dir: dir.to_path_buf(),
            range,
            reserved,
            state: Mutex::new(State { by_uid, last }),
        })
    }

    /// The address of pod `uid`, if it has one.
    pub fn get(&self, uid: &str) -> Option<A> {
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
    pub fn allocate(&self, uid: &str) -> Result<A, Error> {
        let mut state = self.state.lock().expect("ipam lock");
        if let Some(ip) = state.by_uid.get(uid) {
            return Ok(*ip);
        }
        let (network, prefix) = A::range(self.range);
        let first = network.bits();
        // The number of addresses, less one (a /0 of IPv6 has 2^128).
        let host_bits = u32::from(A::WIDTH.saturating_sub(prefix));
        let last_offset = u128::MAX.checked_shr(128 - host_bits).unwrap_or(0);
        let start = state.last.wrapping_sub(first) & last_offset;
        let mut offset = start;
        loop {
            offset = offset.wrapping_add(1) & last_offset;
            let ip = A::from_bits(first | offset);
            if !self.reserved.contains(&ip) {
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
                        state.last = ip.bits();
                        let _ = fs::write(self.dir.join(LAST_FILE), ip.to_string());
                        return Ok(ip);
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_error(format!("claim {ip} for pod {uid}"))(e)),
                }
            }
            if offset == start {
                return Err(Error::Exhausted(self.range.into()));
            }
        }
    }

    /// Frees the address of pod `uid`, if it has one; returns it.
    pub fn release(&self, uid: &str) -> Option<A> {
        let mut state = self.state.lock().expect("ipam lock");
        let ip = state.by_uid.remove(uid)?;
        if let Err(e) = fs::remove_file(self.dir.join(ip.to_string()))
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(%ip, pod = uid, error = %e, "could not free a pod's address");
        }
        Some(ip)
    }
}

/// Whether `ip` is an address of `range`.
fn in_range<A: Family>(range: A::Net, ip: A) -> bool {
    let (network, prefix) = A::range(range);
    let host_bits = u32::from(A::WIDTH - prefix);
    let mask = u128::MAX.checked_shl(host_bits).unwrap_or(0);
    ip.bits() & mask == network.bits() & mask
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

    fn range6() -> (Ipv6Net, Ipv6Addr) {
        (
            "fd00:9::/125".parse().unwrap(),
            "fd00:9::1".parse().unwrap(),
        )
    }

    fn v6(text: &str) -> Ipv6Addr {
        text.parse().unwrap()
    }

    #[test]
    fn ipv6_addresses_are_unique_survive_a_reopen_and_run_out() {
        let dir = tempfile::tempdir().unwrap();
        let (net, gw) = range6();
        let ipam = Ipam::open(dir.path(), net, gw).unwrap();
        // ::0 (the subnet-router anycast address) and the gateway ::1 are never given;
        // IPv6 has no broadcast address, so ::7 is a pod's.
        let got: Vec<Ipv6Addr> = (0..6)
            .map(|i| ipam.allocate(&format!("p{i}")).unwrap())
            .collect();
        let want: Vec<Ipv6Addr> = (2..8).map(|i| v6(&format!("fd00:9::{i}"))).collect();
        assert_eq!(got, want);
        assert!(
            matches!(ipam.allocate("p6"), Err(Error::Exhausted(n)) if n.to_string() == "fd00:9::/125")
        );
        assert!(dir.path().join("fd00:9::2").exists());
        drop(ipam);
        let ipam = Ipam::open(dir.path(), net, gw).unwrap();
        assert_eq!(ipam.get("p0"), Some(v6("fd00:9::2")));
        assert_eq!(ipam.allocate("p5").unwrap(), v6("fd00:9::7"));
        assert_eq!(ipam.release("p3"), Some(v6("fd00:9::5")));
        assert_eq!(ipam.allocate("q").unwrap(), v6("fd00:9::5"));
    }

    #[test]
    fn a_large_ipv6_range_wraps_around_past_the_network_and_gateway() {
        let dir = tempfile::tempdir().unwrap();
        let net: Ipv6Net = "fd00:9::/64".parse().unwrap();
        let gw = v6("fd00:9::1");
        fs::write(dir.path().join(LAST_FILE), "fd00:9::ffff:ffff:ffff:fffe").unwrap();
        let ipam = Ipam::open(dir.path(), net, gw).unwrap();
        assert_eq!(
            ipam.allocate("a").unwrap(),
            v6("fd00:9::ffff:ffff:ffff:ffff")
        );
        assert_eq!(ipam.allocate("b").unwrap(), v6("fd00:9::2"));
    }

    #[test]
    fn records_of_another_family_or_range_are_not_held() {
        let dir = tempfile::tempdir().unwrap();
        // An IPv6 record in an IPv4 directory is none of its business.
        fs::write(dir.path().join("fd00:9::2"), "x").unwrap();
        // An address of a range no longer used is dropped.
        fs::write(dir.path().join("10.8.0.2"), "y").unwrap();
        let (net, gw) = range();
        let ipam = Ipam::open(dir.path(), net, gw).unwrap();
        assert_eq!(ipam.holders(), Vec::<String>::new());
        assert!(dir.path().join("fd00:9::2").exists());
        assert!(!dir.path().join("10.8.0.2").exists());
        let (net6, gw6) = range6();
        let ipam6 = Ipam::open(dir.path(), net6, gw6).unwrap();
        assert_eq!(ipam6.get("x"), Some(v6("fd00:9::2")));
    }

    #[test]
    fn ranges_contain_what_they_should() {
        let (net, _) = range();
        assert!(in_range::<Ipv4Addr>(net, Ipv4Addr::new(10, 9, 0, 7)));
        assert!(!in_range::<Ipv4Addr>(net, Ipv4Addr::new(10, 9, 0, 8)));
        let (net6, _) = range6();
        assert!(in_range::<Ipv6Addr>(net6, v6("fd00:9::7")));
        assert!(!in_range::<Ipv6Addr>(net6, v6("fd00:9::8")));
        assert!(in_range::<Ipv6Addr>(
            "::/0".parse().unwrap(),
            v6("fd00:9::8")
        ));
    }
}
