//! What berth's table holds, Service by Service and pod by pod (host ports), and the
//! commands that change it: the
//! whole table in one transaction (`add table; delete table; add table; …`, so nothing
//! of an earlier run survives), or only what changed since the last commands (map
//! elements added and deleted, chains added or flushed and rewritten), as kube-proxy's
//! partial syncs. Pure: the caller runs the commands and, when they fail, starts again
//! from a full table.
//!
//! A chain nothing refers to any more is flushed and deleted [`STALE_AFTER`] later: on
//! kernels before 6.2 a chain that a deleted map element pointed to stays in use for a
//! moment, and deleting it at once would fail the whole transaction.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::time::Instant;

use super::hostport::{self, HostPort};
use super::model::{PortName, ServicePort};
use super::rules::{self, Dest, Fragment, Layout, Map, Shared};

/// How long a chain no longer used waits before it is deleted.
pub const STALE_AFTER: Duration = Duration::from_secs(1);

/// A map element's value before the pending changes (as in the kernel) and after.
#[derive(Debug, Clone)]
struct Pending {
    was: Option<String>,
    now: Option<String>,
}

/// berth's table as the commands made it, and the changes not yet written.
#[derive(Debug)]
pub struct Table {
    layout: Layout,
    fragments: HashMap<String, Fragment>,
    /// The pods' host ports, by pod key.
    pods: HashMap<String, Fragment>,
    /// Who holds each destination: a Service's key, or `pod ` and a pod's key.
    owners: HashMap<Dest, String>,
    shared: BTreeMap<Shared, usize>,
    hairpin: BTreeMap<Ipv4Addr, usize>,
    /// The Services' own chains and sets (affinity), all Services together.
    own_chains: BTreeMap<String, Vec<String>>,
    own_sets: BTreeMap<String, u32>,
    /// The chains (other than the fixed ones) and affinity sets in the kernel.
    kernel_chains: BTreeMap<String, Vec<String>>,
    kernel_sets: BTreeMap<String, u32>,
    /// Chains flushed because nothing uses them, and since when.
    stale: BTreeMap<String, Instant>,
    /// Whether the next commands write the whole table.
    full: bool,
    pending: BTreeMap<(Map, String), Pending>,
    chains_changed: bool,
}

/// What refused a Service or a pod a destination: another one has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The Service's key, or `pod ` and the pod's key.
    pub owner: String,
    pub dest: String,
    pub holder: String,
}

impl Table {
    /// An empty table; its first commands write it whole.
    pub fn new(layout: Layout) -> Self {
        Table {
            layout,
            fragments: HashMap::new(),
            pods: HashMap::new(),
            owners: HashMap::new(),
            shared: BTreeMap::new(),
            hairpin: BTreeMap::new(),
            own_chains: BTreeMap::new(),
            own_sets: BTreeMap::new(),
            kernel_chains: BTreeMap::new(),
            kernel_sets: BTreeMap::new(),
            stale: BTreeMap::new(),
            full: true,
            pending: BTreeMap::new(),
            chains_changed: true,
        }
    }

    /// How many Services it holds.
    pub fn len(&self) -> usize {
        self.fragments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty()
    }

    /// How many pods' host ports it holds.
    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    fn note(&mut self, map: Map, key: &str, was: Option<&str>, now: Option<&str>) {
        if self.full {
            return;
        }
        let p = self
            .pending
            .entry((map, key.to_string()))
            .or_insert_with(|| Pending {
                was: was.map(str::to_string),
                now: None,
            });
        p.now = now.map(str::to_string);
    }

    /// Sets the ports of the Service `key` (none: it is gone). Destinations another
    /// Service holds are left out and returned.
    pub fn set_service(&mut self, key: &str, ports: &[(PortName, ServicePort)]) -> Vec<Refused> {
        let (new, refused) = {
            let owners = &self.owners;
            Fragment::of(ports, &self.layout, |d| {
                owners.get(d).is_some_and(|holder| holder != key)
            })
        };
        let refused = self.refusals(key, refused);
        let old = self.fragments.remove(key).unwrap_or_default();
        self.replace(key, &old, &new);
        if !new.dests.is_empty() {
            self.fragments.insert(key.to_string(), new);
        }
        refused
    }

    /// Sets the host ports of the pod `key` (none: it is gone, or has none any more).
    /// Host ports another pod holds are left out and returned.
    pub fn set_pod(&mut self, key: &str, ports: &[HostPort]) -> Vec<Refused> {
        let owner = format!("pod {key}");
        let (new, refused) = {
            let owners = &self.owners;
            hostport::fragment(ports, |d| {
                owners.get(d).is_some_and(|holder| *holder != owner)
            })
        };
        let refused = self.refusals(&owner, refused);
        let old = self.pods.remove(key).unwrap_or_default();
        self.replace(&owner, &old, &new);
        if !new.dests.is_empty() {
            self.pods.insert(key.to_string(), new);
        }
        refused
    }

    fn refusals(&self, owner: &str, refused: Vec<Dest>) -> Vec<Refused> {
        refused
            .into_iter()
            .map(|d| Refused {
                owner: owner.to_string(),
                dest: d.to_string(),
                holder: self
                    .owners
                    .get(&d)
                    .cloned()
                    .unwrap_or_else(|| owner.to_string()),
            })
            .collect()
    }

    /// Notes the changes from `old` to `new`, the objects of `owner`.
    fn replace(&mut self, owner: &str, old: &Fragment, new: &Fragment) {
        if old == new {
            return;
        }
        for d in &old.dests {
            self.owners.remove(d);
        }
        for d in &new.dests {
            self.owners.insert(*d, owner.to_string());
        }
        // Elements: the old ones that went or changed, the new ones that came or changed.
        for ((map, k), v) in &old.elements {
            match new.elements.get(&(*map, k.clone())) {
                Some(nv) if nv == v => {}
                nv => self.note(*map, k, Some(v), nv.map(String::as_str)),
            }
        }
        for ((map, k), v) in &new.elements {
            if !old.elements.contains_key(&(*map, k.clone())) {
                self.note(*map, k, None, Some(v));
            }
        }
        for ip in old.hairpin.difference(&new.hairpin) {
            let count = self.hairpin.get_mut(ip).expect("counted when added");
            *count -= 1;
            if *count == 0 {
                self.hairpin.remove(ip);
                self.note(Map::Hairpin, &format!("{ip} . {ip}"), Some(""), None);
            }
        }
        for ip in new.hairpin.difference(&old.hairpin) {
            let count = self.hairpin.entry(*ip).or_default();
            *count += 1;
            if *count == 1 {
                self.note(Map::Hairpin, &format!("{ip} . {ip}"), None, Some(""));
            }
        }
        for s in old.shared.difference(&new.shared) {
            let count = self.shared.get_mut(s).expect("counted when added");
            *count -= 1;
            if *count == 0 {
                self.shared.remove(s);
                self.chains_changed = true;
            }
        }
        for s in new.shared.difference(&old.shared) {
            let count = self.shared.entry(*s).or_default();
            *count += 1;
            self.chains_changed |= *count == 1;
        }
        if old.chains != new.chains || old.sets != new.sets {
            for c in old.chains.keys() {
                self.own_chains.remove(c);
            }
            for s in old.sets.keys() {
                self.own_sets.remove(s);
            }
            self.own_chains
                .extend(new.chains.iter().map(|(k, v)| (k.clone(), v.clone())));
            self.own_sets
                .extend(new.sets.iter().map(|(k, v)| (k.clone(), *v)));
            self.chains_changed = true;
        }
    }

    /// The chains the table must have, with their rules.
    fn wanted_chains(&self) -> BTreeMap<String, Vec<String>> {
        let mut out = self.own_chains.clone();
        for s in self.shared.keys() {
            out.insert(s.name(), s.rules(&self.layout));
        }
        out
    }

    /// When a stale chain is next due for deletion.
    pub fn next_cleanup(&self) -> Option<Instant> {
        self.stale.values().min().map(|since| *since + STALE_AFTER)
    }

    /// Whether the next commands write the whole table.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// The commands (one transaction) that bring the kernel to this table, and the
    /// kernel's state as they leave it is taken as done: run them, and on failure drop
    /// this table for a new one. Empty when nothing changed.
    pub fn commands(&mut self, now: Instant) -> Vec<String> {
        let t = format!("ip {}", self.layout.table);
        let mut c = Vec::new();
        let full = std::mem::replace(&mut self.full, false);
        if full {
            c.push(format!("add table {t}"));
            c.push(format!("delete table {t}"));
            c.push(format!("add table {t}"));
            c.extend(rules::base(&self.layout));
            self.kernel_chains.clear();
            self.kernel_sets.clear();
            self.stale.clear();
            self.pending.clear();
            self.chains_changed = true;
        }
        let mut flush_late = Vec::new();
        let mut delete_sets = Vec::new();
        let mut delete_chains = Vec::new();
        if std::mem::take(&mut self.chains_changed) {
            let wanted = self.wanted_chains();
            for (name, timeout) in &self.own_sets {
                if !self.kernel_sets.contains_key(name) {
                    c.push(format!(
                        "add set {t} {name} {{ type ipv4_addr; flags dynamic,timeout; timeout {timeout}s; }}"
                    ));
                }
            }
            let mut rules = Vec::new();
            for (name, want) in &wanted {
                match self.kernel_chains.get(name) {
                    None => c.push(format!("add chain {t} {name}")),
                    Some(have) if have == want => continue,
                    Some(_) => c.push(format!("flush chain {t} {name}")),
                }
                self.stale.remove(name);
                rules.extend(want.iter().map(|r| format!("add rule {t} {name} {r}")));
            }
            c.extend(rules);
            for (name, have) in &self.kernel_chains {
                if !wanted.contains_key(name) && !have.is_empty() {
                    flush_late.push(format!("flush chain {t} {name}"));
                    self.stale.insert(name.clone(), now);
                }
            }
            for name in self.kernel_sets.keys() {
                if !self.own_sets.contains_key(name) {
                    delete_sets.push(format!("delete set {t} {name}"));
                }
            }
            self.kernel_chains = wanted;
            for name in self.stale.keys() {
                self.kernel_chains.entry(name.clone()).or_default();
            }
            self.kernel_sets = self.own_sets.clone();
        }
        let due: Vec<String> = self
            .stale
            .iter()
            .filter(|(_, since)| **since + STALE_AFTER <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            self.stale.remove(&name);
            self.kernel_chains.remove(&name);
            delete_chains.push(format!("delete chain {t} {name}"));
        }
        let mut deletes: BTreeMap<Map, Vec<String>> = BTreeMap::new();
        let mut adds: BTreeMap<Map, Vec<String>> = BTreeMap::new();
        if full {
            for f in self.sorted_fragments() {
                for ((map, k), v) in &f.elements {
                    adds.entry(*map).or_default().push(element(*map, k, v));
                }
            }
            for ip in self.hairpin.keys() {
                adds.entry(Map::Hairpin)
                    .or_default()
                    .push(format!("{ip} . {ip}"));
            }
        } else {
            for ((map, k), p) in std::mem::take(&mut self.pending) {
                if p.was == p.now {
                    continue;
                }
                if p.was.is_some() {
                    deletes.entry(map).or_default().push(k.clone());
                }
                if let Some(v) = &p.now {
                    adds.entry(map).or_default().push(element(map, &k, v));
                }
            }
        }
        for (map, keys) in deletes {
            c.push(format!(
                "delete element {t} {} {{ {} }}",
                map.name(),
                keys.join(", ")
            ));
        }
        for (map, elements) in adds {
            c.push(format!(
                "add element {t} {} {{ {} }}",
                map.name(),
                elements.join(", ")
            ));
        }
        c.extend(flush_late);
        c.extend(delete_sets);
        c.extend(delete_chains);
        c
    }

    /// The fragments in the order of their Services' keys, then the pods' (stable
    /// commands).
    fn sorted_fragments(&self) -> Vec<&Fragment> {
        let mut out = sorted(&self.fragments);
        out.extend(sorted(&self.pods));
        out
    }
}

fn sorted(all: &HashMap<String, Fragment>) -> Vec<&Fragment> {
    let mut keys: Vec<&String> = all.keys().collect();
    keys.sort();
    keys.into_iter().map(|k| &all[k]).collect()
}

fn element(map: Map, key: &str, value: &str) -> String {
    if map.is_set() {
        key.to_string()
    } else {
        format!("{key} : {value}")
    }
}
