//! `describe`: the texts `kubectl describe` (pods, replication controllers, nodes,
//! namespaces) and `oc describe dc` print, byte for byte, as pure functions of the
//! objects the caller fetched, their events and the current time.
//!
//! The `describe` verb at the end fetches the object, its events and the related objects
//! each describer needs, and prints the texts.
//!
//! Each describer writes `label:\tvalue` lines, indented two spaces per level like
//! kubectl's `PrefixWriter`, and lays them out with Go's tabwriter rules
//! ([`Layout::DESCRIBE`] for kubectl, [`Layout::TABS`] for oc's DeploymentConfig
//! describer, which pads with tabs).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::Value;

use crate::cli::tabwriter::{Layout, align};
use crate::cli::{CliError, Conn};
use crate::client::{Kind, Resource, catalog};
use crate::client::{ListParams, RawRequest};
use crate::types::human_duration;
use crate::types::labels::{Selector, map_at};
use crate::types::openshift;
use crate::types::quantity::Quantity;

/// The current time and the zone timestamps are shown in (kubectl prints local time).
#[derive(Debug, Clone)]
pub struct Clock {
    pub now: Timestamp,
    pub zone: TimeZone,
}

impl Clock {
    /// The wall clock and the machine's time zone, as kubectl uses them.
    pub fn system() -> Self {
        Clock {
            now: Timestamp::now(),
            zone: TimeZone::system(),
        }
    }

    /// A fixed instant shown in UTC (tests).
    pub fn utc(now: Timestamp) -> Self {
        Clock {
            now,
            zone: TimeZone::UTC,
        }
    }

    /// Whole seconds from `t` to now (negative when `t` is in the future).
    fn seconds_since(&self, t: Timestamp) -> i64 {
        let nanos = self.now.as_nanosecond() - t.as_nanosecond();
        i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX)
    }

    /// `translateTimestampSince`: a kubectl age, `<unknown>` without a timestamp.
    fn since(&self, timestamp: Option<&str>) -> String {
        match timestamp.and_then(parse_time) {
            None => "<unknown>".to_string(),
            Some(t) => kube_age(self.seconds_since(t)),
        }
    }

    /// Go's `time.RFC1123Z` in the clock's zone; a missing time is Go's zero time.
    fn rfc1123z(&self, timestamp: Option<&str>) -> String {
        match timestamp.and_then(parse_time) {
            None => "Mon, 01 Jan 0001 00:00:00 +0000".to_string(),
            Some(t) => t
                .to_zoned(self.zone.clone())
                .strftime("%a, %d %b %Y %H:%M:%S %z")
                .to_string(),
        }
    }
}

fn parse_time(s: &str) -> Option<Timestamp> {
    if s.is_empty() {
        return None;
    }
    s.parse().ok()
}

/// kubectl's `duration.HumanDuration`: `<invalid>` for more than a second in the future.
fn kube_age(seconds: i64) -> String {
    if seconds < -1 {
        "<invalid>".to_string()
    } else {
        human_duration(seconds)
    }
}

pub use super::print::oc_age;

// ---------------------------------------------------------------------------------------
// Reading JSON objects

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn opt_text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

fn flag(v: &Value, pointer: &str) -> bool {
    v.pointer(pointer).and_then(Value::as_bool).unwrap_or(false)
}

fn list<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Go's `%v` of a JSON scalar (`true`, `5`, `x`; `null` prints `<nil>`).
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_string(),
        other => other.to_string(),
    }
}

/// An IntOrString as Go's `String()` prints it.
fn int_or_string(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => plain(other),
    }
}

/// Go's `%v` of a string slice: `[a b c]`.
fn go_slice(items: &[Value]) -> String {
    let words: Vec<String> = items.iter().map(plain).collect();
    format!("[{}]", words.join(" "))
}

/// `labels.FormatLabels`: `k=v,k2=v2` sorted by key, `<none>` when empty.
fn format_labels(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        "<none>".to_string()
    } else {
        labels_string(map)
    }
}

/// `labels.Set.String()`: `k=v,k2=v2` sorted by key, empty when empty.
fn labels_string(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `Kind/name` of the controller owner reference, if any.
fn controlled_by(obj: &Value) -> Option<String> {
    list(obj, "/metadata/ownerReferences")
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .map(|r| format!("{}/{}", text(r, "/kind"), text(r, "/name")))
}

fn controller_uid(obj: &Value) -> Option<&str> {
    list(obj, "/metadata/ownerReferences")
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .and_then(|r| r["uid"].as_str())
}

// ---------------------------------------------------------------------------------------
// Go's sort.Sort

/// Go's `sort.Sort` and `sort.Slice` (pattern-defeating quicksort), ported step for step:
/// they are not stable, and kubectl's order of equal elements (events of the same second,
/// tolerations with one key) is whatever this algorithm leaves.
fn go_sort<T>(data: &mut [T], less: impl Fn(&T, &T) -> bool) {
    let n = data.len();
    if n <= 1 {
        return;
    }
    let limit = usize::BITS - n.leading_zeros();
    let mut s = GoSorter { data, less };
    s.pdqsort(0, n, limit);
}

struct GoSorter<'a, T, F> {
    data: &'a mut [T],
    less: F,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum SortedHint {
    Unknown,
    Increasing,
    Decreasing,
}

impl<T, F: Fn(&T, &T) -> bool> GoSorter<'_, T, F> {
    fn less(&self, i: usize, j: usize) -> bool {
        (self.less)(&self.data[i], &self.data[j])
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.data.swap(i, j);
    }

    fn insertion_sort(&mut self, a: usize, b: usize) {
        for i in a + 1..b {
            let mut j = i;
            while j > a && self.less(j, j - 1) {
                self.swap(j, j - 1);
                j -= 1;
            }
        }
    }

    fn sift_down(&mut self, lo: usize, hi: usize, first: usize) {
        let mut root = lo;
        loop {
            let mut child = 2 * root + 1;
            if child >= hi {
                return;
            }
            if child + 1 < hi && self.less(first + child, first + child + 1) {
                child += 1;
            }
            if !self.less(first + root, first + child) {
                return;
            }
            self.swap(first + root, first + child);
            root = child;
        }
    }

    fn heap_sort(&mut self, a: usize, b: usize) {
        let (first, lo, hi) = (a, 0, b - a);
        for i in (0..=(hi - 1) / 2).rev() {
            self.sift_down(i, hi, first);
        }
        for i in (0..hi).rev() {
            self.swap(first, first + i);
            self.sift_down(lo, i, first);
        }
    }

    fn pdqsort(&mut self, mut a: usize, mut b: usize, mut limit: u32) {
        const MAX_INSERTION: usize = 12;
        let (mut was_balanced, mut was_partitioned) = (true, true);
        loop {
            let length = b - a;
            if length <= MAX_INSERTION {
                self.insertion_sort(a, b);
                return;
            }
            if limit == 0 {
                self.heap_sort(a, b);
                return;
            }
            if !was_balanced {
                self.break_patterns(a, b);
                limit -= 1;
            }
            let (mut pivot, mut hint) = self.choose_pivot(a, b);
            if hint == SortedHint::Decreasing {
                self.reverse_range(a, b);
                pivot = (b - 1) - (pivot - a);
                hint = SortedHint::Increasing;
            }
            if was_balanced
                && was_partitioned
                && hint == SortedHint::Increasing
                && self.partial_insertion_sort(a, b)
            {
                return;
            }
            if a > 0 && !self.less(a - 1, pivot) {
                a = self.partition_equal(a, b, pivot);
                continue;
            }
            let (mid, already) = self.partition(a, b, pivot);
            was_partitioned = already;
            let (left, right) = (mid - a, b - mid);
            let threshold = length / 8;
            if left < right {
                was_balanced = left >= threshold;
                self.pdqsort(a, mid, limit);
                a = mid + 1;
            } else {
                was_balanced = right >= threshold;
                self.pdqsort(mid + 1, b, limit);
                b = mid;
            }
        }
    }

    fn partition(&mut self, a: usize, b: usize, pivot: usize) -> (usize, bool) {
        self.swap(a, pivot);
        let (mut i, mut j) = (a as isize + 1, b as isize - 1);
        let at = |x: isize| x as usize;
        while i <= j && self.less(at(i), a) {
            i += 1;
        }
        while i <= j && !self.less(at(j), a) {
            j -= 1;
        }
        if i > j {
            self.swap(at(j), a);
            return (at(j), true);
        }
        self.swap(at(i), at(j));
        i += 1;
        j -= 1;
        loop {
            while i <= j && self.less(at(i), a) {
                i += 1;
            }
            while i <= j && !self.less(at(j), a) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(at(i), at(j));
            i += 1;
            j -= 1;
        }
        self.swap(at(j), a);
        (at(j), false)
    }

    fn partition_equal(&mut self, a: usize, b: usize, pivot: usize) -> usize {
        self.swap(a, pivot);
        let (mut i, mut j) = (a as isize + 1, b as isize - 1);
        let at = |x: isize| x as usize;
        loop {
            while i <= j && !self.less(a, at(i)) {
                i += 1;
            }
            while i <= j && self.less(a, at(j)) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(at(i), at(j));
            i += 1;
            j -= 1;
        }
        at(i)
    }

    fn partial_insertion_sort(&mut self, a: usize, b: usize) -> bool {
        const MAX_STEPS: usize = 5;
        const SHORTEST_SHIFTING: usize = 50;
        let mut i = a + 1;
        for _ in 0..MAX_STEPS {
            while i < b && !self.less(i, i - 1) {
                i += 1;
            }
            if i == b {
                return true;
            }
            if b - a < SHORTEST_SHIFTING {
                return false;
            }
            self.swap(i, i - 1);
            if i - a >= 2 {
                let mut j = i - 1;
                while j >= 1 {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j -= 1;
                }
            }
            if b - i >= 2 {
                let mut j = i + 1;
                while j < b {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j += 1;
                }
            }
        }
        false
    }

    fn break_patterns(&mut self, a: usize, b: usize) {
        let length = b - a;
        if length >= 8 {
            let mut random = length as u64;
            let modulus = 1usize << (usize::BITS - length.leading_zeros());
            let start = a + (length / 4) * 2 - 1;
            for idx in start..=start + 2 {
                random ^= random << 13;
                random ^= random >> 17;
                random ^= random << 5;
                let mut other = (random as usize) & (modulus - 1);
                if other >= length {
                    other -= length;
                }
                self.swap(idx, a + other);
            }
        }
    }

    fn choose_pivot(&mut self, a: usize, b: usize) -> (usize, SortedHint) {
        const SHORTEST_NINTHER: usize = 50;
        const MAX_SWAPS: usize = 4 * 3;
        let l = b - a;
        let mut swaps = 0;
        let (mut i, mut j, mut k) = (a + l / 4, a + l / 4 * 2, a + l / 4 * 3);
        if l >= 8 {
            if l >= SHORTEST_NINTHER {
                i = self.median(i - 1, i, i + 1, &mut swaps);
                j = self.median(j - 1, j, j + 1, &mut swaps);
                k = self.median(k - 1, k, k + 1, &mut swaps);
            }
            j = self.median(i, j, k, &mut swaps);
        }
        match swaps {
            0 => (j, SortedHint::Increasing),
            MAX_SWAPS => (j, SortedHint::Decreasing),
            _ => (j, SortedHint::Unknown),
        }
    }

    fn order2(&self, a: usize, b: usize, swaps: &mut usize) -> (usize, usize) {
        if self.less(b, a) {
            *swaps += 1;
            (b, a)
        } else {
            (a, b)
        }
    }

    fn median(&self, a: usize, b: usize, c: usize, swaps: &mut usize) -> usize {
        let (a, b) = self.order2(a, b, swaps);
        let (b, c) = self.order2(b, c, swaps);
        let _ = c;
        let (_a, b) = self.order2(a, b, swaps);
        b
    }

    fn reverse_range(&mut self, a: usize, b: usize) {
        let (mut i, mut j) = (a, b - 1);
        while i < j {
            self.swap(i, j);
            i += 1;
            j -= 1;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Quantities as Kubernetes prints them

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuantityFormat {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// A quantity with the format of its suffix, printed in canonical form (`100m`, `128Mi`,
/// `1500m`, `2`, `1k`), as `resource.Quantity.String()` does.
#[derive(Debug, Clone, Copy)]
struct Amount {
    value: Quantity,
    format: QuantityFormat,
}

impl Amount {
    const ZERO: Amount = Amount {
        value: Quantity::ZERO,
        format: QuantityFormat::DecimalSi,
    };

    fn parse(v: &Value) -> Option<Amount> {
        let s = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        let value: Quantity = s.trim().parse().ok()?;
        let format = if s.ends_with('i') {
            QuantityFormat::BinarySi
        } else if s.contains(['e', 'E']) {
            QuantityFormat::DecimalExponent
        } else {
            QuantityFormat::DecimalSi
        };
        Some(Amount { value, format })
    }

    /// The sum, in the format of `self` (Go's `Quantity.Add`).
    fn add(self, other: Amount) -> Amount {
        Amount {
            value: Quantity::from_milli(self.value.milli() + other.value.milli()),
            format: self.format,
        }
    }

    fn milli(self) -> i128 {
        self.value.milli()
    }

    fn units(self) -> i128 {
        self.value.value()
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let milli = self.value.milli();
        if milli == 0 {
            return f.write_str("0");
        }
        let sign = if milli < 0 { "-" } else { "" };
        let milli = milli.abs();
        if milli % 1000 != 0 {
            return write!(f, "{sign}{milli}m");
        }
        let units = milli / 1000;
        if self.format == QuantityFormat::BinarySi && units >= 1024 {
            const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            for (i, suffix) in SUFFIXES.iter().enumerate().rev() {
                let unit = 1024i128.pow(i as u32 + 1);
                if units % unit == 0 {
                    return write!(f, "{sign}{}{suffix}", units / unit);
                }
            }
            return write!(f, "{sign}{units}");
        }
        for exp in [18u32, 15, 12, 9, 6, 3] {
            let unit = 10i128.pow(exp);
            if units % unit == 0 {
                let suffix = match (self.format, exp) {
                    (QuantityFormat::DecimalExponent, e) => format!("e{e}"),
                    (_, 3) => "k".to_string(),
                    (_, 6) => "M".to_string(),
                    (_, 9) => "G".to_string(),
                    (_, 12) => "T".to_string(),
                    (_, 15) => "P".to_string(),
                    _ => "E".to_string(),
                };
                return write!(f, "{sign}{}{suffix}", units / unit);
            }
        }
        write!(f, "{sign}{units}")
    }
}

/// A resource list (`requests`, `capacity`) by resource name.
fn resource_list(v: &Value, pointer: &str) -> BTreeMap<String, Amount> {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, q)| Some((k.clone(), Amount::parse(q)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The raw text of each entry of a resource list, by name.
fn resource_texts(v: &Value, pointer: &str) -> BTreeMap<String, String> {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, q)| {
                    let shown = Amount::parse(q)
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| plain(q));
                    (k.clone(), shown)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `resourcehelper.PodRequestsAndLimits`: containers summed, each init container taken
/// when larger, the pod overhead added.
fn pod_requests_and_limits(pod: &Value) -> (BTreeMap<String, Amount>, BTreeMap<String, Amount>) {
    let mut reqs = BTreeMap::new();
    let mut limits = BTreeMap::new();
    fn add_all(into: &mut BTreeMap<String, Amount>, from: BTreeMap<String, Amount>) {
        for (name, q) in from {
            match into.get(&name).copied() {
                Some(have) => {
                    into.insert(name, have.add(q));
                }
                None => {
                    into.insert(name, q);
                }
            }
        }
    }
    fn max_all(into: &mut BTreeMap<String, Amount>, from: BTreeMap<String, Amount>) {
        for (name, q) in from {
            match into.get(&name) {
                Some(have) if have.milli() >= q.milli() => {}
                _ => {
                    into.insert(name, q);
                }
            }
        }
    }
    for c in list(pod, "/spec/containers") {
        add_all(&mut reqs, resource_list(c, "/resources/requests"));
        add_all(&mut limits, resource_list(c, "/resources/limits"));
    }
    for c in list(pod, "/spec/initContainers") {
        max_all(&mut reqs, resource_list(c, "/resources/requests"));
        max_all(&mut limits, resource_list(c, "/resources/limits"));
    }
    let overhead = resource_list(pod, "/spec/overhead");
    if !overhead.is_empty() {
        add_all(&mut reqs, overhead.clone());
        for (name, q) in overhead {
            if let Some(have) = limits.get(&name).copied() {
                limits.insert(name, have.add(q));
            }
        }
    }
    (reqs, limits)
}

/// `qos.GetPodQOS`: the recorded class, else computed from the containers' resources.
fn qos_class(pod: &Value) -> String {
    if let Some(class) = opt_text(pod, "/status/qosClass").filter(|c| !c.is_empty()) {
        return class.to_string();
    }
    let mut requests: BTreeMap<String, i128> = BTreeMap::new();
    let mut limits: BTreeMap<String, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = list(pod, "/spec/containers")
        .iter()
        .chain(list(pod, "/spec/initContainers"));
    for c in containers {
        for (name, q) in resource_list(c, "/resources/requests") {
            if (name == "cpu" || name == "memory") && q.milli() > 0 {
                *requests.entry(name).or_default() += q.milli();
            }
        }
        let mut found = BTreeSet::new();
        for (name, q) in resource_list(c, "/resources/limits") {
            if (name == "cpu" || name == "memory") && q.milli() > 0 {
                found.insert(name.clone());
                *limits.entry(name).or_default() += q.milli();
            }
        }
        if !(found.contains("cpu") && found.contains("memory")) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort".to_string();
    }
    if guaranteed {
        guaranteed = requests.iter().all(|(name, r)| limits.get(name) == Some(r));
    }
    if guaranteed && requests.len() == limits.len() {
        "Guaranteed".to_string()
    } else {
        "Burstable".to_string()
    }
}

// ---------------------------------------------------------------------------------------
// The prefix writer and kubectl's shared printers

/// kubectl's `PrefixWriter`: text collected for the tabwriter, two spaces per level.
#[derive(Default)]
struct Out {
    buf: String,
}

impl Out {
    /// Writes at an indentation level, escaping terminal control sequences (kubectl's
    /// `printers.WriteEscaped`: ESC as `^[`, CR as `\\r`).
    fn w(&mut self, level: usize, text: &str) {
        for _ in 0..level {
            self.buf.push_str("  ");
        }
        for c in text.chars() {
            match c {
                '\x1b' => self.buf.push_str("^["),
                '\r' => self.buf.push_str("\\r"),
                c => self.buf.push(c),
            }
        }
    }

    /// Writes as is (oc's own lines go straight to its tabwriter).
    fn raw(&mut self, text: &str) {
        self.buf.push_str(text);
    }

    fn finish(self, layout: Layout) -> String {
        align(layout, &self.buf)
    }
}

/// `printLabelsMultilineWithIndent`.
fn labels_multiline(
    out: &mut Out,
    initial_indent: &str,
    title: &str,
    inner_indent: &str,
    labels: &BTreeMap<String, String>,
) {
    out.w(0, &format!("{initial_indent}{title}:{inner_indent}"));
    if labels.is_empty() {
        out.w(0, "<none>\n");
        return;
    }
    for (i, (k, v)) in labels.iter().enumerate() {
        if i != 0 {
            out.w(0, initial_indent);
            out.w(0, inner_indent);
        }
        out.w(0, &format!("{k}={v}\n"));
    }
}

fn labels_multiline_simple(out: &mut Out, title: &str, labels: &BTreeMap<String, String>) {
    labels_multiline(out, "", title, "\t", labels);
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const MAX_ANNOTATION_LEN: usize = 140;

/// `printAnnotationsMultiline`: `key: value` lines; long or multi-line values go below
/// their key, cut at 140 characters.
fn annotations_multiline(out: &mut Out, title: &str, annotations: &BTreeMap<String, String>) {
    out.w(0, &format!("{title}:\t"));
    let keys: Vec<&String> = annotations.keys().filter(|k| *k != LAST_APPLIED).collect();
    if keys.is_empty() {
        out.w(0, "<none>\n");
        return;
    }
    let indent = "\t";
    for (i, key) in keys.into_iter().enumerate() {
        if i != 0 {
            out.w(0, indent);
        }
        let value = annotations[key]
            .strip_suffix('\n')
            .unwrap_or(&annotations[key]);
        if value.len() + key.len() + 2 > MAX_ANNOTATION_LEN || value.contains('\n') {
            out.w(0, &format!("{key}:\n"));
            for line in value.split('\n') {
                out.w(
                    0,
                    &format!("{indent}  {}\n", shorten(line, MAX_ANNOTATION_LEN - 2)),
                );
            }
        } else {
            out.w(0, &format!("{key}: {value}\n"));
        }
    }
}

/// Go's `s[:max] + "..."` on bytes, kept on a character boundary.
fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// `printTolerationsMultilineWithIndent`.
fn tolerations_multiline(out: &mut Out, title: &str, tolerations: &[Value]) {
    out.w(0, &format!("{title}:\t"));
    if tolerations.is_empty() {
        out.w(0, "<none>\n");
        return;
    }
    let mut sorted: Vec<&Value> = tolerations.iter().collect();
    go_sort(&mut sorted, |a, b| text(a, "/key") < text(b, "/key"));
    for (i, t) in sorted.into_iter().enumerate() {
        if i != 0 {
            out.w(0, "\t");
        }
        let (key, value, effect) = (text(t, "/key"), text(t, "/value"), text(t, "/effect"));
        let mut line = key.to_string();
        if !value.is_empty() {
            let _ = write!(line, "={value}");
        }
        if !effect.is_empty() {
            let _ = write!(line, ":{effect}");
        }
        if text(t, "/operator") == "Exists" && value.is_empty() {
            if !key.is_empty() || !effect.is_empty() {
                line.push_str(" op=Exists");
            } else {
                line.push_str("op=Exists");
            }
        }
        if let Some(s) = int(t, "/tolerationSeconds") {
            let _ = write!(line, " for {s}s");
        }
        out.w(0, &format!("{line}\n"));
    }
}

/// `printNodeTaintsMultiline`: sorted by effect, then key.
fn taints_multiline(out: &mut Out, title: &str, taints: &[Value]) {
    out.w(0, &format!("{title}:\t"));
    if taints.is_empty() {
        out.w(0, "<none>\n");
        return;
    }
    let mut sorted: Vec<&Value> = taints.iter().collect();
    let key = |t: &Value| format!("{},{}", text(t, "/effect"), text(t, "/key"));
    go_sort(&mut sorted, |a, b| key(a) < key(b));
    for (i, t) in sorted.into_iter().enumerate() {
        if i != 0 {
            out.w(0, "\t");
        }
        let value = text(t, "/value");
        let shown = if value.is_empty() {
            format!("{}:{}", text(t, "/key"), text(t, "/effect"))
        } else {
            format!("{}={value}:{}", text(t, "/key"), text(t, "/effect"))
        };
        out.w(0, &format!("{shown}\n"));
    }
}

/// `DescribeEvents`: oldest first by when last seen; repeated events show
/// `<last> (xN over <first>)`.
fn describe_events(out: &mut Out, events: &[Value], clock: &Clock) {
    if events.is_empty() {
        out.w(0, "Events:\t<none>\n");
        return;
    }
    let mut sorted: Vec<&Value> = events.iter().collect();
    // kubectl's `eventTime`: the series' last sighting, else the last timestamp, else the
    // event time. Missing timestamps are Go's zero time, before every other.
    let at = |e: &Value| {
        let series = e.pointer("/series").filter(|v| v.is_object());
        match series {
            Some(s) => opt_text(s, "/lastObservedTime").and_then(parse_time),
            None => opt_text(e, "/lastTimestamp")
                .and_then(parse_time)
                .or_else(|| opt_text(e, "/eventTime").and_then(parse_time)),
        }
    };
    go_sort(&mut sorted, |a, b| at(a) < at(b));
    out.w(0, "Events:\n  Type\tReason\tAge\tFrom\tMessage\n");
    out.w(1, "----\t------\t----\t----\t-------\n");
    for e in sorted {
        let first = match opt_text(e, "/eventTime").and_then(parse_time) {
            Some(_) => clock.since(opt_text(e, "/eventTime")),
            None => clock.since(opt_text(e, "/firstTimestamp")),
        };
        let count = int(e, "/count").unwrap_or(0);
        let interval = if e.pointer("/series").is_some_and(Value::is_object) {
            format!(
                "{} (x{} over {first})",
                clock.since(opt_text(e, "/series/lastObservedTime")),
                int(e, "/series/count").unwrap_or(0),
            )
        } else if count > 1 {
            format!(
                "{} (x{count} over {first})",
                clock.since(opt_text(e, "/lastTimestamp"))
            )
        } else {
            first
        };
        let mut source = text(e, "/source/component");
        if source.is_empty() {
            source = text(e, "/reportingComponent");
        }
        out.w(
            1,
            &format!(
                "{}\t{}\t{interval}\t{source}\t{}\n",
                text(e, "/type"),
                text(e, "/reason"),
                text(e, "/message").trim(),
            ),
        );
    }
}

// ---------------------------------------------------------------------------------------
// Containers, probes, volumes and the pod template

/// Resolves a `fieldRef` env var from the pod (only metadata fields resolve, as in
/// kubectl's `fieldpath.ExtractFieldPathAsString`).
fn field_ref_value(pod: &Value, path: &str) -> String {
    let quoted_map = |pointer: &str| {
        map_at(pod, pointer)
            .iter()
            .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
            .collect::<Vec<_>>()
            .join("\n")
    };
    match path {
        "metadata.name" => text(pod, "/metadata/name").to_string(),
        "metadata.namespace" => text(pod, "/metadata/namespace").to_string(),
        "metadata.uid" => text(pod, "/metadata/uid").to_string(),
        "metadata.labels" => quoted_map("/metadata/labels"),
        "metadata.annotations" => quoted_map("/metadata/annotations"),
        _ => {
            let subscript = |prefix: &str| {
                path.strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix("['"))
                    .and_then(|r| r.strip_suffix("']"))
                    .map(str::to_string)
            };
            if let Some(key) = subscript("metadata.labels") {
                map_at(pod, "/metadata/labels")
                    .get(&key)
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(key) = subscript("metadata.annotations") {
                map_at(pod, "/metadata/annotations")
                    .get(&key)
                    .cloned()
                    .unwrap_or_default()
            } else {
                String::new()
            }
        }
    }
}

/// `resourcehelper.ExtractContainerResourceValue` for `resourceFieldRef` env vars.
fn resource_field_value(container: &Value, field: &Value) -> String {
    let resource = text(field, "/resource");
    let divisor = field
        .get("divisor")
        .and_then(Amount::parse)
        .filter(|d| d.milli() != 0);
    let (list_name, name) = match resource.split_once('.') {
        Some((l, n)) => (l, n),
        None => return String::new(),
    };
    let pointer = match list_name {
        "limits" => "/resources/limits",
        "requests" => "/resources/requests",
        _ => return String::new(),
    };
    let q = resource_list(container, pointer)
        .get(name)
        .copied()
        .unwrap_or(Amount::ZERO);
    let ceil_div = |n: i128, d: i128| {
        if d == 0 { 0 } else { (n + d - 1).div_euclid(d) }
    };
    match name {
        "cpu" => {
            let d = divisor.map(Amount::milli).unwrap_or(1000);
            ceil_div(q.milli(), d).to_string()
        }
        _ => {
            let d = divisor.map(Amount::units).unwrap_or(1);
            ceil_div(q.units(), d).to_string()
        }
    }
}

/// `DescribeProbe`, as kubectl 1.37 prints it:
/// `exec [true] delay=0s timeout=1s period=10s successThreshold=1 failureThreshold=3`.
/// Like every field here, unset numbers print as Go's zero values: the server defaults
/// them.
fn describe_probe(probe: &Value) -> String {
    let attrs = format!(
        "delay={}s timeout={}s period={}s successThreshold={} failureThreshold={}",
        int(probe, "/initialDelaySeconds").unwrap_or(0),
        int(probe, "/timeoutSeconds").unwrap_or(0),
        int(probe, "/periodSeconds").unwrap_or(0),
        int(probe, "/successThreshold").unwrap_or(0),
        int(probe, "/failureThreshold").unwrap_or(0),
    );
    if let Some(exec) = probe.get("exec").filter(|v| v.is_object()) {
        return format!("exec {} {attrs}", go_slice(list(exec, "/command")));
    }
    if let Some(get) = probe.get("httpGet").filter(|v| v.is_object()) {
        let scheme = text(get, "/scheme").to_lowercase();
        let host = text(get, "/host");
        let port = get.get("port").map(int_or_string).unwrap_or_default();
        let host = if port.is_empty() {
            host.to_string()
        } else if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let path = text(get, "/path");
        // net/url's String() for scheme, host and path.
        let mut url = String::new();
        if !scheme.is_empty() {
            let _ = write!(url, "{scheme}:");
        }
        if (!scheme.is_empty() || !host.is_empty()) && (!host.is_empty() || !path.is_empty()) {
            let _ = write!(url, "//{host}");
        }
        if !path.is_empty() && !path.starts_with('/') && !host.is_empty() {
            url.push('/');
        }
        url.push_str(path);
        return format!("http-get {url} {attrs}");
    }
    if let Some(tcp) = probe.get("tcpSocket").filter(|v| v.is_object()) {
        let port = tcp.get("port").map(int_or_string).unwrap_or_default();
        return format!("tcp-socket {}:{port} {attrs}", text(tcp, "/host"));
    }
    if let Some(grpc) = probe.get("grpc").filter(|v| v.is_object()) {
        return format!(
            "grpc <pod>:{} {} {attrs}",
            int(grpc, "/port").unwrap_or(0),
            text(grpc, "/service")
        );
    }
    format!("unknown {attrs}")
}

fn describe_state(out: &mut Out, name: &str, state: &Value, clock: &Clock) {
    if let Some(running) = state.get("running").filter(|v| v.is_object()) {
        out.w(2, &format!("{name}:\tRunning\n"));
        out.w(
            3,
            &format!(
                "Started:\t{}\n",
                clock.rfc1123z(opt_text(running, "/startedAt"))
            ),
        );
    } else if let Some(waiting) = state.get("waiting").filter(|v| v.is_object()) {
        out.w(2, &format!("{name}:\tWaiting\n"));
        let reason = text(waiting, "/reason");
        if !reason.is_empty() {
            out.w(3, &format!("Reason:\t{reason}\n"));
        }
    } else if let Some(t) = state.get("terminated").filter(|v| v.is_object()) {
        out.w(2, &format!("{name}:\tTerminated\n"));
        let reason = text(t, "/reason");
        if !reason.is_empty() {
            out.w(3, &format!("Reason:\t{reason}\n"));
        }
        let message = text(t, "/message");
        if !message.is_empty() {
            out.w(3, &format!("Message:\t{message}\n"));
        }
        out.w(
            3,
            &format!("Exit Code:\t{}\n", int(t, "/exitCode").unwrap_or(0)),
        );
        if let Some(signal) = int(t, "/signal").filter(|s| *s > 0) {
            out.w(3, &format!("Signal:\t{signal}\n"));
        }
        out.w(
            3,
            &format!("Started:\t{}\n", clock.rfc1123z(opt_text(t, "/startedAt"))),
        );
        out.w(
            3,
            &format!(
                "Finished:\t{}\n",
                clock.rfc1123z(opt_text(t, "/finishedAt"))
            ),
        );
    } else {
        out.w(2, &format!("{name}:\tWaiting\n"));
    }
}

fn describe_resources(out: &mut Out, resources: &Value, level: usize) {
    let limits = resource_texts(resources, "/limits");
    if !limits.is_empty() {
        out.w(level, "Limits:\n");
    }
    for (name, q) in &limits {
        out.w(level + 1, &format!("{name}:\t{q}\n"));
    }
    let requests = resource_texts(resources, "/requests");
    if !requests.is_empty() {
        out.w(level, "Requests:\n");
    }
    for (name, q) in &requests {
        out.w(level + 1, &format!("{name}:\t{q}\n"));
    }
}

/// Where env vars with a `fieldRef` get their values: the pod, or nothing for templates.
type Resolver<'a> = Option<&'a Value>;

/// `describeContainers`.
fn describe_containers(
    out: &mut Out,
    label: &str,
    containers: &[Value],
    statuses: &[Value],
    resolver: Resolver<'_>,
    space: &str,
    clock: &Clock,
) {
    let none = if containers.is_empty() { " <none>" } else { "" };
    out.w(0, &format!("{space}{label}:{none}\n"));
    let name_indent = if space.is_empty() { "" } else { " " };
    for c in containers {
        let name = text(c, "/name");
        let status = statuses.iter().find(|s| text(s, "/name") == name);
        out.w(1, &format!("{name_indent}{name}:\n"));
        if let Some(s) = status {
            out.w(2, &format!("Container ID:\t{}\n", text(s, "/containerID")));
        }
        out.w(2, &format!("Image:\t{}\n", text(c, "/image")));
        if let Some(s) = status {
            out.w(2, &format!("Image ID:\t{}\n", text(s, "/imageID")));
        }
        let ports = list(c, "/ports");
        let protocol = |p: &Value| text(p, "/protocol").to_string();
        let port_list: Vec<String> = ports
            .iter()
            .map(|p| format!("{}/{}", int(p, "/containerPort").unwrap_or(0), protocol(p)))
            .collect();
        let host_list: Vec<String> = ports
            .iter()
            .map(|p| format!("{}/{}", int(p, "/hostPort").unwrap_or(0), protocol(p)))
            .collect();
        let (ports, host_ports) = (port_list.join(", "), host_list.join(", "));
        let or_none = |s: &str| {
            if s.is_empty() {
                "<none>".to_string()
            } else {
                s.to_string()
            }
        };
        if ports.contains(',') {
            out.w(2, &format!("Ports:\t{ports}\n"));
        } else {
            out.w(2, &format!("Port:\t{}\n", or_none(&ports)));
        }
        if host_ports.contains(',') {
            out.w(2, &format!("Host Ports:\t{host_ports}\n"));
        } else {
            out.w(2, &format!("Host Port:\t{}\n", or_none(&host_ports)));
        }
        if let Some(kind) = opt_text(c, "/securityContext/seccompProfile/type") {
            out.w(2, &format!("SeccompProfile:\t{kind}\n"));
            if kind == "Localhost" {
                out.w(
                    3,
                    &format!(
                        "LocalhostProfile:\t{}\n",
                        text(c, "/securityContext/seccompProfile/localhostProfile")
                    ),
                );
            }
        }
        for (field, title) in [("/command", "Command"), ("/args", "Args")] {
            let items = list(c, field);
            if !items.is_empty() {
                out.w(2, &format!("{title}:\n"));
                for item in items {
                    for line in plain(item).split('\n') {
                        out.w(3, &format!("{line}\n"));
                    }
                }
            }
        }
        if let Some(s) = status {
            describe_state(out, "State", &s["state"], clock);
            if s.pointer("/lastState/terminated")
                .is_some_and(Value::is_object)
            {
                describe_state(out, "Last State", &s["lastState"], clock);
            }
            let ready = if flag(s, "/ready") { "True" } else { "False" };
            out.w(2, &format!("Ready:\t{ready}\n"));
            out.w(
                2,
                &format!("Restart Count:\t{}\n", int(s, "/restartCount").unwrap_or(0)),
            );
        }
        describe_resources(out, &c["resources"], 2);
        for (field, title) in [
            ("livenessProbe", "Liveness"),
            ("readinessProbe", "Readiness"),
            ("startupProbe", "Startup"),
        ] {
            if let Some(probe) = c.get(field).filter(|p| p.is_object()) {
                out.w(2, &format!("{title}:\t{}\n", describe_probe(probe)));
            }
        }
        let env_from = list(c, "/envFrom");
        if !env_from.is_empty() {
            out.w(2, "Environment Variables from:\n");
            for e in env_from {
                let (from, r) = if e.get("configMapRef").is_some_and(Value::is_object) {
                    ("ConfigMap", &e["configMapRef"])
                } else if e.get("secretRef").is_some_and(Value::is_object) {
                    ("Secret", &e["secretRef"])
                } else {
                    ("", &Value::Null)
                };
                let optional = flag(r, "/optional");
                let prefix = text(e, "/prefix");
                let name = text(r, "/name");
                if prefix.is_empty() {
                    out.w(3, &format!("{name}\t{from}\tOptional: {optional}\n"));
                } else {
                    out.w(
                        3,
                        &format!("{name}\t{from} with prefix '{prefix}'\tOptional: {optional}\n"),
                    );
                }
            }
        }
        let env = list(c, "/env");
        let none = if env.is_empty() { "\t<none>" } else { "" };
        out.w(2, &format!("Environment:{none}\n"));
        for e in env {
            let name = text(e, "/name");
            let from = &e["valueFrom"];
            if !from.is_object() {
                for (i, line) in text(e, "/value").split('\n').enumerate() {
                    if i == 0 {
                        out.w(3, &format!("{name}:\t{line}\n"));
                    } else {
                        out.w(3, &format!("\t{line}\n"));
                    }
                }
                continue;
            }
            if let Some(f) = from.get("fieldRef").filter(|v| v.is_object()) {
                let path = text(f, "/fieldPath");
                let value = resolver
                    .map(|pod| field_ref_value(pod, path))
                    .unwrap_or_default();
                out.w(
                    3,
                    &format!("{name}:\t{value} ({}:{path})\n", text(f, "/apiVersion")),
                );
            } else if let Some(f) = from.get("resourceFieldRef").filter(|v| v.is_object()) {
                let resource = text(f, "/resource");
                let mut value = resource_field_value(c, f);
                if value == "0" && (resource == "limits.cpu" || resource == "limits.memory") {
                    value = "node allocatable".to_string();
                }
                out.w(3, &format!("{name}:\t{value} ({resource})\n"));
            } else if let Some(f) = from.get("secretKeyRef").filter(|v| v.is_object()) {
                out.w(
                    3,
                    &format!(
                        "{name}:\t<set to the key '{}' in secret '{}'>\tOptional: {}\n",
                        text(f, "/key"),
                        text(f, "/name"),
                        flag(f, "/optional")
                    ),
                );
            } else if let Some(f) = from.get("configMapKeyRef").filter(|v| v.is_object()) {
                out.w(
                    3,
                    &format!(
                        "{name}:\t<set to the key '{}' of config map '{}'>\tOptional: {}\n",
                        text(f, "/key"),
                        text(f, "/name"),
                        flag(f, "/optional")
                    ),
                );
            }
        }
        let mounts = list(c, "/volumeMounts");
        let none = if mounts.is_empty() { "\t<none>" } else { "" };
        out.w(2, &format!("Mounts:{none}\n"));
        let mut sorted: Vec<&Value> = mounts.iter().collect();
        go_sort(&mut sorted, |a, b| {
            text(a, "/mountPath") < text(b, "/mountPath")
        });
        for m in sorted {
            let mut flags = vec![if flag(m, "/readOnly") { "ro" } else { "rw" }.to_string()];
            let sub = text(m, "/subPath");
            if !sub.is_empty() {
                flags.push(format!("path={}", Value::String(sub.to_string())));
            }
            out.w(
                3,
                &format!(
                    "{} from {} ({})\n",
                    text(m, "/mountPath"),
                    text(m, "/name"),
                    flags.join(",")
                ),
            );
        }
        let devices = list(c, "/volumeDevices");
        if !devices.is_empty() {
            out.w(2, &format!("Devices:{none}\n"));
            let mut sorted: Vec<&Value> = devices.iter().collect();
            go_sort(&mut sorted, |a, b| {
                text(a, "/devicePath") < text(b, "/devicePath")
            });
            for d in sorted {
                out.w(
                    3,
                    &format!("{} from {}\n", text(d, "/devicePath"), text(d, "/name")),
                );
            }
        }
    }
}

/// `describeVolumes` for the volume types berth runs; others print `<unknown>`.
fn describe_volumes(out: &mut Out, volumes: &[Value], space: &str) {
    if volumes.is_empty() {
        out.w(0, &format!("{space}Volumes:\t<none>\n"));
        return;
    }
    out.w(0, &format!("{space}Volumes:\n"));
    let name_indent = if space.is_empty() { "" } else { " " };
    for v in volumes {
        out.w(1, &format!("{name_indent}{}:\n", text(v, "/name")));
        let source = |key: &str| v.get(key).filter(|s| s.is_object());
        if let Some(s) = source("hostPath") {
            let kind = opt_text(s, "/type").unwrap_or("<none>");
            out.w(
                2,
                &format!(
                    "Type:\tHostPath (bare host directory volume)\n    Path:\t{}\n    HostPathType:\t{kind}\n",
                    text(s, "/path")
                ),
            );
        } else if let Some(s) = source("emptyDir") {
            let limit = s
                .get("sizeLimit")
                .and_then(Amount::parse)
                .filter(|q| q.milli() > 0)
                .map(|q| q.to_string())
                .unwrap_or_else(|| "<unset>".to_string());
            out.w(
                2,
                &format!(
                    "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n    Medium:\t{}\n    SizeLimit:\t{limit}\n",
                    text(s, "/medium")
                ),
            );
        } else if let Some(s) = source("secret") {
            out.w(
                2,
                &format!(
                    "Type:\tSecret (a volume populated by a Secret)\n    SecretName:\t{}\n    Optional:\t{}\n",
                    text(s, "/secretName"),
                    flag(s, "/optional")
                ),
            );
        } else if let Some(s) = source("configMap") {
            out.w(
                2,
                &format!(
                    "Type:\tConfigMap (a volume populated by a ConfigMap)\n    Name:\t{}\n    Optional:\t{}\n",
                    text(s, "/name"),
                    flag(s, "/optional")
                ),
            );
        } else if let Some(s) = source("nfs") {
            out.w(
                2,
                &format!(
                    "Type:\tNFS (an NFS mount that lasts the lifetime of a pod)\n    Server:\t{}\n    Path:\t{}\n    ReadOnly:\t{}\n",
                    text(s, "/server"),
                    text(s, "/path"),
                    flag(s, "/readOnly")
                ),
            );
        } else if let Some(s) = source("persistentVolumeClaim") {
            out.w(
                2,
                &format!(
                    "Type:\tPersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)\n    ClaimName:\t{}\n    ReadOnly:\t{}\n",
                    text(s, "/claimName"),
                    flag(s, "/readOnly")
                ),
            );
        } else if let Some(s) = source("downwardAPI") {
            out.w(
                2,
                "Type:\tDownwardAPI (a volume populated by information about the pod)\n    Items:\n",
            );
            for item in list(s, "/items") {
                let path = text(item, "/path");
                if let Some(f) = item.get("fieldRef").filter(|f| f.is_object()) {
                    out.w(3, &format!("{} -> {path}\n", text(f, "/fieldPath")));
                }
                if let Some(f) = item.get("resourceFieldRef").filter(|f| f.is_object()) {
                    out.w(3, &format!("{} -> {path}\n", text(f, "/resource")));
                }
            }
        } else if let Some(s) = source("projected") {
            out.w(
                2,
                "Type:\tProjected (a volume that contains injected data from multiple sources)\n",
            );
            for src in list(s, "/sources") {
                if let Some(x) = src.get("secret").filter(|x| x.is_object()) {
                    out.w(
                        2,
                        &format!(
                            "SecretName:\t{}\n    Optional:\t{}\n",
                            text(x, "/name"),
                            flag(x, "/optional")
                        ),
                    );
                } else if src.get("downwardAPI").is_some_and(Value::is_object) {
                    out.w(2, "DownwardAPI:\ttrue\n");
                } else if let Some(x) = src.get("configMap").filter(|x| x.is_object()) {
                    out.w(
                        2,
                        &format!(
                            "ConfigMapName:\t{}\n    Optional:\t{}\n",
                            text(x, "/name"),
                            flag(x, "/optional")
                        ),
                    );
                } else if let Some(x) = src.get("serviceAccountToken").filter(|x| x.is_object()) {
                    out.w(
                        2,
                        &format!(
                            "TokenExpirationSeconds:\t{}\n",
                            int(x, "/expirationSeconds").unwrap_or(0)
                        ),
                    );
                }
            }
        } else {
            out.w(1, "<unknown>\n");
        }
    }
}

/// `describeTopologySpreadConstraints`.
fn describe_topology_spread(out: &mut Out, constraints: &[Value], space: &str) {
    if constraints.is_empty() {
        return;
    }
    let mut sorted: Vec<&Value> = constraints.iter().collect();
    go_sort(&mut sorted, |a, b| {
        text(a, "/topologyKey") < text(b, "/topologyKey")
    });
    out.w(0, &format!("{space}Topology Spread Constraints:\t"));
    for (i, c) in sorted.into_iter().enumerate() {
        if i != 0 {
            out.w(0, space);
            out.w(0, "\t");
        }
        out.w(
            0,
            &format!(
                "{}:{} when max skew {} is exceeded",
                text(c, "/topologyKey"),
                text(c, "/whenUnsatisfiable"),
                int(c, "/maxSkew").unwrap_or(0)
            ),
        );
        if let Some(sel) = c.get("labelSelector").filter(|s| s.is_object()) {
            out.w(0, &format!(" for selector {}", format_label_selector(sel)));
        }
        out.w(0, "\n");
    }
}

/// `metav1.FormatLabelSelector`.
fn format_label_selector(sel: &Value) -> String {
    match Selector::from_label_selector(sel) {
        Ok(s) if s.is_empty() => "<none>".to_string(),
        Ok(s) => s.to_string(),
        Err(_) => "<error>".to_string(),
    }
}

/// kubectl's `DescribePodTemplate` (also used by `oc describe dc`).
fn describe_pod_template(out: &mut Out, template: &Value, clock: &Clock) {
    out.w(0, "Pod Template:\n");
    if !template.is_object() {
        out.w(1, "<unset>");
        return;
    }
    labels_multiline_simple(out, "  Labels", &map_at(template, "/metadata/labels"));
    let annotations = map_at(template, "/metadata/annotations");
    if !annotations.is_empty() {
        annotations_multiline(out, "  Annotations", &annotations);
    }
    let account = text(template, "/spec/serviceAccountName");
    if !account.is_empty() {
        out.w(1, &format!("Service Account:\t{account}\n"));
    }
    let init = list(template, "/spec/initContainers");
    if !init.is_empty() {
        describe_containers(out, "Init Containers", init, &[], None, "  ", clock);
    }
    let containers = list(template, "/spec/containers");
    describe_containers(out, "Containers", containers, &[], None, "  ", clock);
    describe_volumes(out, list(template, "/spec/volumes"), "  ");
    describe_topology_spread(out, list(template, "/spec/topologySpreadConstraints"), "  ");
    let priority_class = text(template, "/spec/priorityClassName");
    if !priority_class.is_empty() {
        out.w(1, &format!("Priority Class Name:\t{priority_class}\n"));
    }
    labels_multiline_simple(
        out,
        "  Node-Selectors",
        &map_at(template, "/spec/nodeSelector"),
    );
    tolerations_multiline(out, "  Tolerations", list(template, "/spec/tolerations"));
}

/// The pod template description alone, as `oc rollout history --revision=N` prints it.
pub fn pod_template(template: &Value, clock: &Clock) -> String {
    let mut out = Out::default();
    describe_pod_template(&mut out, template, clock);
    out.finish(Layout::DESCRIBE)
}

/// The `Name:` and `Namespace:` lines most describers open with.
fn name_and_namespace(out: &mut Out, obj: &Value) {
    out.w(0, &format!("Name:\t{}\n", text(obj, "/metadata/name")));
    out.w(
        0,
        &format!("Namespace:\t{}\n", text(obj, "/metadata/namespace")),
    );
}

// ---------------------------------------------------------------------------------------
// Pods

/// `kubectl describe pod`. `events` is `None` with `--show-events=false`.
pub fn pod(pod: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, pod);
    if let Some(priority) = int(pod, "/spec/priority") {
        out.w(0, &format!("Priority:\t{priority}\n"));
    }
    let priority_class = text(pod, "/spec/priorityClassName");
    if !priority_class.is_empty() {
        out.w(0, &format!("Priority Class Name:\t{priority_class}\n"));
    }
    let runtime_class = text(pod, "/spec/runtimeClassName");
    if !runtime_class.is_empty() {
        out.w(0, &format!("Runtime Class Name:\t{runtime_class}\n"));
    }
    let account = text(pod, "/spec/serviceAccountName");
    if !account.is_empty() {
        out.w(0, &format!("Service Account:\t{account}\n"));
    }
    let node = text(pod, "/spec/nodeName");
    if node.is_empty() {
        out.w(0, "Node:\t<none>\n");
    } else {
        out.w(
            0,
            &format!("Node:\t{node}/{}\n", text(pod, "/status/hostIP")),
        );
    }
    if let Some(start) = opt_text(pod, "/status/startTime") {
        out.w(
            0,
            &format!("Start Time:\t{}\n", clock.rfc1123z(Some(start))),
        );
    }
    labels_multiline_simple(&mut out, "Labels", &map_at(pod, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(pod, "/metadata/annotations"),
    );
    let phase = text(pod, "/status/phase");
    let deletion = opt_text(pod, "/metadata/deletionTimestamp");
    if deletion.is_some() && phase != "Failed" && phase != "Succeeded" {
        out.w(
            0,
            &format!("Status:\tTerminating (lasts {})\n", clock.since(deletion)),
        );
        out.w(
            0,
            &format!(
                "Termination Grace Period:\t{}s\n",
                int(pod, "/metadata/deletionGracePeriodSeconds").unwrap_or(0)
            ),
        );
    } else {
        out.w(0, &format!("Status:\t{phase}\n"));
    }
    for (field, title) in [("/status/reason", "Reason"), ("/status/message", "Message")] {
        let value = text(pod, field);
        if !value.is_empty() {
            out.w(0, &format!("{title}:\t{value}\n"));
        }
    }
    if let Some(kind) = opt_text(pod, "/spec/securityContext/seccompProfile/type") {
        out.w(0, &format!("SeccompProfile:\t{kind}\n"));
        if kind == "Localhost" {
            out.w(
                0,
                &format!(
                    "LocalhostProfile:\t{}\n",
                    text(pod, "/spec/securityContext/seccompProfile/localhostProfile")
                ),
            );
        }
    }
    out.w(0, &format!("IP:\t{}\n", text(pod, "/status/podIP")));
    let ips = list(pod, "/status/podIPs");
    if ips.is_empty() {
        out.w(0, "IPs:\t<none>\n");
    } else {
        out.w(0, "IPs:\n");
        for ip in ips {
            out.w(1, &format!("IP:\t{}\n", text(ip, "/ip")));
        }
    }
    if let Some(owner) = controlled_by(pod) {
        out.w(0, &format!("Controlled By:\t{owner}\n"));
    }
    let nominated = text(pod, "/status/nominatedNodeName");
    if !nominated.is_empty() {
        out.w(0, &format!("NominatedNodeName:\t{nominated}\n"));
    }
    if pod.pointer("/spec/resources").is_some_and(Value::is_object) {
        out.w(0, "Resources:\n");
        describe_resources(&mut out, &pod["spec"]["resources"], 1);
    }
    let init = list(pod, "/spec/initContainers");
    if !init.is_empty() {
        describe_containers(
            &mut out,
            "Init Containers",
            init,
            list(pod, "/status/initContainerStatuses"),
            Some(pod),
            "",
            clock,
        );
    }
    describe_containers(
        &mut out,
        "Containers",
        list(pod, "/spec/containers"),
        list(pod, "/status/containerStatuses"),
        Some(pod),
        "",
        clock,
    );
    let ephemeral = list(pod, "/spec/ephemeralContainers");
    if !ephemeral.is_empty() {
        describe_containers(
            &mut out,
            "Ephemeral Containers",
            ephemeral,
            list(pod, "/status/ephemeralContainerStatuses"),
            Some(pod),
            "",
            clock,
        );
    }
    let conditions = list(pod, "/status/conditions");
    let gates = list(pod, "/spec/readinessGates");
    if !gates.is_empty() {
        out.w(0, "Readiness Gates:\n  Type\tStatus\n");
        for g in gates {
            let kind = text(g, "/conditionType");
            let status = conditions
                .iter()
                .find(|c| text(c, "/type") == kind)
                .map(|c| text(c, "/status").to_string())
                .unwrap_or_else(|| "<none>".to_string());
            out.w(1, &format!("{kind} \t{status} \n"));
        }
    }
    if !conditions.is_empty() {
        out.w(0, "Conditions:\n  Type\tStatus\n");
        for c in conditions {
            out.w(
                1,
                &format!("{} \t{} \n", text(c, "/type"), text(c, "/status")),
            );
        }
    }
    describe_volumes(&mut out, list(pod, "/spec/volumes"), "");
    out.w(0, &format!("QoS Class:\t{}\n", qos_class(pod)));
    labels_multiline_simple(
        &mut out,
        "Node-Selectors",
        &map_at(pod, "/spec/nodeSelector"),
    );
    tolerations_multiline(&mut out, "Tolerations", list(pod, "/spec/tolerations"));
    describe_topology_spread(&mut out, list(pod, "/spec/topologySpreadConstraints"), "");
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

// ---------------------------------------------------------------------------------------
// Replication controllers

/// Phase counts of pods: running, waiting (pending), succeeded, failed.
fn phase_counts<'a>(pods: impl Iterator<Item = &'a Value>) -> [usize; 4] {
    let mut counts = [0; 4];
    for p in pods {
        match text(p, "/status/phase") {
            "Running" => counts[0] += 1,
            "Pending" => counts[1] += 1,
            "Succeeded" => counts[2] += 1,
            "Failed" => counts[3] += 1,
            _ => {}
        }
    }
    counts
}

fn matches_selector(pod: &Value, selector: &BTreeMap<String, String>) -> bool {
    Selector::from_map(selector).matches(&map_at(pod, "/metadata/labels"))
}

/// A ReplicaSet's selector as a label selector query.
fn rs_selector(rs: &Value) -> String {
    rs.pointer("/spec/selector")
        .map(crate::types::labels::format_label_selector)
        .unwrap_or_default()
}

/// `kubectl describe rc`. `pods` are the pods the RC's selector picks; only those the RC
/// controls are counted.
pub fn replication_controller(
    rc: &Value,
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let selector = map_at(rc, "/spec/selector");
    replicated(
        rc,
        &format_labels(&selector),
        &Selector::from_map(&selector),
        None,
        pods,
        events,
        clock,
    )
}

/// `kubectl describe rs`: an RC's text, with the LabelSelector as kubectl formats it and
/// the controller that owns the set.
pub fn replica_set(rs: &Value, pods: &[Value], events: Option<&[Value]>, clock: &Clock) -> String {
    let selector = rs
        .pointer("/spec/selector")
        .and_then(|s| Selector::from_label_selector(s).ok())
        .unwrap_or_default();
    let shown = Some(rs_selector(rs))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "<none>".into());
    let owner = controlled_by(rs);
    replicated(rs, &shown, &selector, owner.as_deref(), pods, events, clock)
}

/// `kubectl describe daemonset`: the node counts of its status and its pods by phase.
pub fn daemon_set(ds: &Value, pods: &[Value], events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    // As current kubectl (1.37) prints it; older ones named no namespace here.
    out.w(0, &format!("Name:\t{}\n", text(ds, "/metadata/name")));
    out.w(
        0,
        &format!("Namespace:\t{}\n", text(ds, "/metadata/namespace")),
    );
    out.w(0, &format!("Selector:\t{}\n", rs_selector(ds)));
    let node_selector = labels_string(&map_at(ds, "/spec/template/spec/nodeSelector"));
    out.w(
        0,
        &format!(
            "Node-Selector:\t{}\n",
            if node_selector.is_empty() {
                "<none>"
            } else {
                &node_selector
            }
        ),
    );
    labels_multiline_simple(&mut out, "Labels", &map_at(ds, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(ds, "/metadata/annotations"),
    );
    let n = |p: &str| int(ds, p).unwrap_or(0);
    for (what, field) in [
        (
            "Desired Number of Nodes Scheduled",
            "desiredNumberScheduled",
        ),
        (
            "Current Number of Nodes Scheduled",
            "currentNumberScheduled",
        ),
        (
            "Number of Nodes Scheduled with Up-to-date Pods",
            "updatedNumberScheduled",
        ),
        (
            "Number of Nodes Scheduled with Available Pods",
            "numberAvailable",
        ),
        ("Number of Nodes Misscheduled", "numberMisscheduled"),
    ] {
        out.w(0, &format!("{what}: {}\n", n(&format!("/status/{field}"))));
    }
    let uid = text(ds, "/metadata/uid");
    let owned = pods.iter().filter(|p| controller_uid(p) == Some(uid));
    let [running, waiting, succeeded, failed] = phase_counts(owned);
    out.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    describe_pod_template(&mut out, &ds["spec"]["template"], clock);
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe statefulset`: its replicas, update strategy, pods by phase, pod
/// template and claim templates.
pub fn stateful_set(
    sts: &Value,
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, sts);
    out.w(
        0,
        &format!(
            "CreationTimestamp:\t{}\n",
            clock.rfc1123z(opt_text(sts, "/metadata/creationTimestamp"))
        ),
    );
    out.w(0, &format!("Selector:\t{}\n", rs_selector(sts)));
    labels_multiline_simple(&mut out, "Labels", &map_at(sts, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(sts, "/metadata/annotations"),
    );
    let service = text(sts, "/spec/serviceName");
    if !service.is_empty() {
        out.w(0, &format!("Service Name:\t{service}\n"));
    }
    let policy = text(sts, "/spec/podManagementPolicy");
    if !policy.is_empty() {
        out.w(0, &format!("Pod Management Policy:\t{policy}\n"));
    }
    out.w(
        0,
        &format!(
            "Replicas:\t{} desired | {} total\n",
            int(sts, "/spec/replicas").unwrap_or(1),
            int(sts, "/status/replicas").unwrap_or(0)
        ),
    );
    out.w(
        0,
        &format!(
            "Update Strategy:\t{}\n",
            text(sts, "/spec/updateStrategy/type")
        ),
    );
    if let Some(partition) = int(sts, "/spec/updateStrategy/rollingUpdate/partition") {
        out.w(1, &format!("Partition:\t{partition}\n"));
        if let Some(v) = sts
            .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
            .filter(|v| !v.is_null())
        {
            let shown = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            out.w(1, &format!("MaxUnavailable:\t{shown}\n"));
        }
    }
    if let Some(retention) = sts
        .pointer("/spec/persistentVolumeClaimRetentionPolicy")
        .filter(|v| v.is_object())
    {
        out.w(0, "Persistent Volume Claim Retention Policy:\n");
        out.w(
            1,
            &format!("WhenDeleted:\t{}\n", text(retention, "/whenDeleted")),
        );
        out.w(
            1,
            &format!("WhenScaled:\t{}\n", text(retention, "/whenScaled")),
        );
    }
    let uid = text(sts, "/metadata/uid");
    let owned = pods.iter().filter(|p| controller_uid(p) == Some(uid));
    let [running, waiting, succeeded, failed] = phase_counts(owned);
    out.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    describe_pod_template(&mut out, &sts["spec"]["template"], clock);
    let claims = sts
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty());
    match claims {
        None => out.w(0, "Volume Claims:\t<none>\n"),
        Some(claims) => {
            out.w(0, "Volume Claims:\n");
            for c in claims {
                out.w(1, &format!("Name:\t{}\n", text(c, "/metadata/name")));
                let class = c
                    .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
                    .or_else(|| c.pointer("/spec/storageClassName"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                out.w(1, &format!("StorageClass:\t{class}\n"));
                labels_multiline(
                    &mut out,
                    "  ",
                    "Labels",
                    "\t",
                    &map_at(c, "/metadata/labels"),
                );
                labels_multiline(
                    &mut out,
                    "  ",
                    "Annotations",
                    "\t",
                    &map_at(c, "/metadata/annotations"),
                );
                let capacity =
                    opt_text(c, "/spec/resources/requests/storage").unwrap_or("<default>");
                out.w(1, &format!("Capacity:\t{capacity}\n"));
                let modes: Vec<&str> = c
                    .pointer("/spec/accessModes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                out.w(1, &format!("Access Modes:\t[{}]\n", modes.join(" ")));
            }
        }
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// Seconds between two RFC 3339 timestamps.
fn seconds_between(from: &str, to: &str) -> Option<i64> {
    let a: jiff::Timestamp = from.parse().ok()?;
    let b: jiff::Timestamp = to.parse().ok()?;
    Some(b.as_second() - a.as_second())
}

/// `capIndexesListOrNone`: a list of indexes cut after the first comma past 50
/// characters.
fn cap_indexes(indexes: &str, soft_limit: usize) -> String {
    if indexes.is_empty() {
        return "<none>".into();
    }
    match indexes
        .char_indices()
        .skip(soft_limit)
        .find(|(_, c)| *c == ',')
    {
        Some((i, _)) => format!("{}...", &indexes[..=i]),
        None => indexes.to_string(),
    }
}

/// `kubectl describe job`.
pub fn job(job: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, job);
    out.w(0, &format!("Selector:\t{}\n", rs_selector(job)));
    labels_multiline_simple(&mut out, "Labels", &map_at(job, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(job, "/metadata/annotations"),
    );
    if let Some(owner) = controlled_by(job) {
        out.w(0, &format!("Controlled By:\t{owner}\n"));
    }
    if let Some(p) = int(job, "/spec/parallelism") {
        out.w(0, &format!("Parallelism:\t{p}\n"));
    }
    match int(job, "/spec/completions") {
        Some(c) => out.w(0, &format!("Completions:\t{c}\n")),
        None => out.w(0, "Completions:\t<unset>\n"),
    }
    if let Some(mode) = opt_text(job, "/spec/completionMode") {
        out.w(0, &format!("Completion Mode:\t{mode}\n"));
    }
    if let Some(suspend) = job.pointer("/spec/suspend").and_then(Value::as_bool) {
        out.w(0, &format!("Suspend:\t{suspend}\n"));
    }
    if let Some(limit) = int(job, "/spec/backoffLimit") {
        out.w(0, &format!("Backoff Limit:\t{limit}\n"));
    }
    if let Some(ttl) = int(job, "/spec/ttlSecondsAfterFinished") {
        out.w(0, &format!("TTL Seconds After Finished:\t{ttl}\n"));
    }
    let start = opt_text(job, "/status/startTime");
    let done = opt_text(job, "/status/completionTime");
    if start.is_some() {
        out.w(0, &format!("Start Time:\t{}\n", clock.rfc1123z(start)));
    }
    if done.is_some() {
        out.w(0, &format!("Completed At:\t{}\n", clock.rfc1123z(done)));
    }
    if let Some(secs) = start.zip(done).and_then(|(a, b)| seconds_between(a, b)) {
        out.w(
            0,
            &format!("Duration:\t{}\n", crate::types::human_duration(secs)),
        );
    }
    if let Some(d) = int(job, "/spec/activeDeadlineSeconds") {
        out.w(0, &format!("Active Deadline Seconds:\t{d}s\n"));
    }
    let n = |p: &str| int(job, p).unwrap_or(0);
    let (active, succeeded, failed) = (
        n("/status/active"),
        n("/status/succeeded"),
        n("/status/failed"),
    );
    match int(job, "/status/ready") {
        None => out.w(
            0,
            &format!("Pods Statuses:\t{active} Active / {succeeded} Succeeded / {failed} Failed\n"),
        ),
        Some(ready) => out.w(
            0,
            &format!(
                "Pods Statuses:\t{active} Active ({ready} Ready) / {succeeded} Succeeded / {failed} Failed\n"
            ),
        ),
    }
    if opt_text(job, "/spec/completionMode") == Some("Indexed") {
        let indexes = text(job, "/status/completedIndexes");
        out.w(
            0,
            &format!("Completed Indexes:\t{}\n", cap_indexes(indexes, 50)),
        );
    }
    describe_pod_template(&mut out, &job["spec"]["template"], clock);
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe cronjob`.
pub fn cron_job(cj: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, cj);
    labels_multiline_simple(&mut out, "Labels", &map_at(cj, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(cj, "/metadata/annotations"),
    );
    out.w(0, &format!("Schedule:\t{}\n", text(cj, "/spec/schedule")));
    out.w(
        0,
        &format!(
            "Concurrency Policy:\t{}\n",
            text(cj, "/spec/concurrencyPolicy")
        ),
    );
    let suspend = match cj.pointer("/spec/suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    out.w(0, &format!("Suspend:\t{suspend}\n"));
    match cj.pointer("/spec/timeZone").and_then(Value::as_str) {
        Some(zone) => out.w(0, &format!("Time Zone:\t{zone}\n")),
        None => out.w(0, "Time Zone:\t<unset>\n"),
    }
    let or_unset =
        |v: Option<i64>, unit: &str| v.map_or("<unset>".to_string(), |v| format!("{v}{unit}"));
    out.w(
        0,
        &format!(
            "Successful Job History Limit:\t{}\n",
            or_unset(int(cj, "/spec/successfulJobsHistoryLimit"), "")
        ),
    );
    out.w(
        0,
        &format!(
            "Failed Job History Limit:\t{}\n",
            or_unset(int(cj, "/spec/failedJobsHistoryLimit"), "")
        ),
    );
    out.w(
        0,
        &format!(
            "Starting Deadline Seconds:\t{}\n",
            or_unset(int(cj, "/spec/startingDeadlineSeconds"), "s")
        ),
    );
    let spec = &cj["spec"]["jobTemplate"]["spec"];
    match spec.get("selector").filter(|s| !s.is_null()) {
        Some(sel) => out.w(
            0,
            &format!(
                "Selector:\t{}\n",
                crate::types::labels::format_label_selector(sel)
            ),
        ),
        None => out.w(0, "Selector:\t<unset>\n"),
    }
    out.w(
        0,
        &format!(
            "Parallelism:\t{}\n",
            or_unset(int(spec, "/parallelism"), "")
        ),
    );
    out.w(
        0,
        &format!(
            "Completions:\t{}\n",
            or_unset(int(spec, "/completions"), "")
        ),
    );
    if let Some(d) = int(spec, "/activeDeadlineSeconds") {
        out.w(0, &format!("Active Deadline Seconds:\t{d}s\n"));
    }
    describe_pod_template(&mut out, &spec["template"], clock);
    match opt_text(cj, "/status/lastScheduleTime") {
        Some(t) => out.w(
            0,
            &format!("Last Schedule Time:\t{}\n", clock.rfc1123z(Some(t))),
        ),
        None => out.w(0, "Last Schedule Time:\t<unset>\n"),
    }
    let active: Vec<&str> = list(cj, "/status/active")
        .iter()
        .map(|r| text(r, "/name"))
        .collect();
    if active.is_empty() {
        out.w(0, "Active Jobs:\t<none>\n");
    } else {
        out.w(0, &format!("Active Jobs:\t{}\n", active.join(", ")));
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe poddisruptionbudget`.
pub fn pod_disruption_budget(pdb: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    out.w(0, &format!("Name:\t{}\n", text(pdb, "/metadata/name")));
    out.w(
        0,
        &format!("Namespace:\t{}\n", text(pdb, "/metadata/namespace")),
    );
    let set = |p: &str| pdb.pointer(p).filter(|v| !v.is_null());
    if let Some(min) = set("/spec/minAvailable") {
        out.w(0, &format!("Min available:\t{}\n", int_or_string(min)));
    } else if let Some(max) = set("/spec/maxUnavailable") {
        out.w(0, &format!("Max unavailable:\t{}\n", int_or_string(max)));
    }
    match set("/spec/selector") {
        Some(sel) => out.w(
            0,
            &format!(
                "Selector:\t{}\n",
                crate::types::labels::format_label_selector(sel)
            ),
        ),
        None => out.w(0, "Selector:\t<unset>\n"),
    }
    out.w(0, "Status:\n");
    let n = |p: &str| int(pdb, p).unwrap_or(0);
    out.w(
        2,
        &format!(
            "Allowed disruptions:\t{}\n",
            n("/status/disruptionsAllowed")
        ),
    );
    out.w(2, &format!("Current:\t{}\n", n("/status/currentHealthy")));
    out.w(2, &format!("Desired:\t{}\n", n("/status/desiredHealthy")));
    out.w(2, &format!("Total:\t{}\n", n("/status/expectedPods")));
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe hpa` (`describeHorizontalPodAutoscalerV2`): each metric's current
/// value over its target, the limits, the behavior, and the conditions.
pub fn horizontal_pod_autoscaler(hpa: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, hpa);
    labels_multiline_simple(&mut out, "Labels", &map_at(hpa, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(hpa, "/metadata/annotations"),
    );
    out.w(
        0,
        &format!(
            "CreationTimestamp:\t{}\n",
            clock.rfc1123z(opt_text(hpa, "/metadata/creationTimestamp"))
        ),
    );
    let kind = text(hpa, "/spec/scaleTargetRef/kind");
    out.w(
        0,
        &format!(
            "Reference:\t{kind}/{}\n",
            text(hpa, "/spec/scaleTargetRef/name")
        ),
    );
    out.w(0, "Metrics:\t( current / target )\n");
    let statuses = list(hpa, "/status/currentMetrics");
    for (i, m) in list(hpa, "/spec/metrics").iter().enumerate() {
        let q = |v: &Value, p: &str| v.pointer(p).map(plain).unwrap_or_default();
        let current = |field: &str, p: &str| {
            statuses
                .get(i)
                .and_then(|s| s.get(field))
                .and_then(|s| s.pointer(p))
                .map_or_else(|| "<unknown>".to_string(), plain)
        };
        match text(m, "/type") {
            "External" => {
                let name = text(m, "/external/metric/name");
                if m.pointer("/external/target/averageValue").is_some() {
                    out.w(
                        1,
                        &format!(
                            "{name:?} (target average value):\t{} / {}\n",
                            current("external", "/current/averageValue"),
                            q(m, "/external/target/averageValue")
                        ),
                    );
                } else {
                    out.w(
                        1,
                        &format!(
                            "{name:?} (target value):\t{} / {}\n",
                            current("external", "/current/value"),
                            q(m, "/external/target/value")
                        ),
                    );
                }
            }
            "Pods" => out.w(
                1,
                &format!(
                    "{:?} on pods:\t{} / {}\n",
                    text(m, "/pods/metric/name"),
                    current("pods", "/current/averageValue"),
                    q(m, "/pods/target/averageValue")
                ),
            ),
            "Object" => {
                out.w(
                    1,
                    &format!(
                        "\"{}\" on {}/{} ",
                        text(m, "/object/metric/name"),
                        text(m, "/object/describedObject/kind"),
                        text(m, "/object/describedObject/name")
                    ),
                );
                if text(m, "/object/target/type") == "AverageValue" {
                    out.w(
                        0,
                        &format!(
                            "(target average value):\t{} / {}\n",
                            current("object", "/current/averageValue"),
                            q(m, "/object/target/averageValue")
                        ),
                    );
                } else {
                    out.w(
                        0,
                        &format!(
                            "(target value):\t{} / {}\n",
                            current("object", "/current/value"),
                            q(m, "/object/target/value")
                        ),
                    );
                }
            }
            kind @ ("Resource" | "ContainerResource") => {
                let field = if kind == "Resource" {
                    "resource"
                } else {
                    "containerResource"
                };
                let name = text(m, &format!("/{field}/name"));
                if kind == "Resource" {
                    out.w(1, &format!("resource {name} on pods"));
                } else {
                    let container = text(m, "/containerResource/container");
                    out.w(
                        1,
                        &format!("resource {name} of container \"{container}\" on pods"),
                    );
                }
                let target = &m[field]["target"];
                if target.get("averageValue").is_some() {
                    out.w(
                        0,
                        &format!(
                            ":\t{} / {}\n",
                            current(field, "/current/averageValue"),
                            q(target, "/averageValue")
                        ),
                    );
                } else {
                    let status = statuses.get(i).and_then(|s| s.get(field));
                    let now = match status.and_then(|s| s.pointer("/current/averageUtilization")) {
                        Some(u) => format!(
                            "{}% ({})",
                            plain(u),
                            status
                                .and_then(|s| s.pointer("/current/averageValue"))
                                .map_or_else(|| "0".into(), plain)
                        ),
                        None => "<unknown>".into(),
                    };
                    let goal = target
                        .get("averageUtilization")
                        .map_or_else(|| "<auto>".into(), |u| format!("{}%", plain(u)));
                    out.w(
                        1,
                        &format!("(as a percentage of request):\t{now} / {goal}\n"),
                    );
                }
            }
            other => out.w(1, &format!("<unknown metric type {other:?}>\n")),
        }
    }
    let min = int(hpa, "/spec/minReplicas").map_or_else(|| "<unset>".into(), |n| n.to_string());
    out.w(0, &format!("Min replicas:\t{min}\n"));
    out.w(
        0,
        &format!(
            "Max replicas:\t{}\n",
            int(hpa, "/spec/maxReplicas").unwrap_or(0)
        ),
    );
    if let Some(b) = hpa.pointer("/spec/behavior").filter(|b| b.is_object()) {
        out.w(0, "Behavior:\n");
        for (title, field) in [("Scale Up", "scaleUp"), ("Scale Down", "scaleDown")] {
            let Some(rules) = b.get(field).filter(|r| r.is_object()) else {
                continue;
            };
            out.w(1, &format!("{title}:\n"));
            if let Some(w) = int(rules, "/stabilizationWindowSeconds") {
                out.w(2, &format!("Stabilization Window: {w} seconds\n"));
            }
            let policies = list(rules, "/policies");
            if !policies.is_empty() {
                let select = opt_text(rules, "/selectPolicy").unwrap_or("Max");
                out.w(2, &format!("Select Policy: {select}\n"));
                out.w(2, "Policies:\n");
                for p in policies {
                    out.w(
                        3,
                        &format!(
                            "- Type: {}\tValue: {}\tPeriod: {} seconds\n",
                            text(p, "/type"),
                            int(p, "/value").unwrap_or(0),
                            int(p, "/periodSeconds").unwrap_or(0)
                        ),
                    );
                }
            }
        }
    }
    out.w(0, &format!("{kind} pods:\t"));
    out.w(
        0,
        &format!(
            "{} current / {} desired\n",
            int(hpa, "/status/currentReplicas").unwrap_or(0),
            int(hpa, "/status/desiredReplicas").unwrap_or(0)
        ),
    );
    let conditions = list(hpa, "/status/conditions");
    if !conditions.is_empty() {
        out.w(0, "Conditions:\n");
        out.w(1, "Type\tStatus\tReason\tMessage\n");
        out.w(1, "----\t------\t------\t-------\n");
        for c in conditions {
            out.w(
                1,
                &format!(
                    "{}\t{}\t{}\t{}\n",
                    text(c, "/type"),
                    text(c, "/status"),
                    text(c, "/reason"),
                    text(c, "/message")
                ),
            );
        }
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe deployment`. `rss` are the ReplicaSets its selector picks; only
/// those it controls are shown, the one with its template as the new one.
pub fn deployment(d: &Value, rss: &[Value], events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, d);
    out.w(
        0,
        &format!(
            "CreationTimestamp:\t{}\n",
            clock.rfc1123z(opt_text(d, "/metadata/creationTimestamp"))
        ),
    );
    labels_multiline_simple(&mut out, "Labels", &map_at(d, "/metadata/labels"));
    annotations_multiline(&mut out, "Annotations", &map_at(d, "/metadata/annotations"));
    out.w(0, &format!("Selector:\t{}\n", rs_selector(d)));
    let n = |p: &str| int(d, p).unwrap_or(0);
    out.w(
        0,
        &format!(
            "Replicas:\t{} desired | {} updated | {} total | {} available | {} unavailable\n",
            int(d, "/spec/replicas").unwrap_or(1),
            n("/status/updatedReplicas"),
            n("/status/replicas"),
            n("/status/availableReplicas"),
            n("/status/unavailableReplicas"),
        ),
    );
    out.w(
        0,
        &format!("StrategyType:\t{}\n", text(d, "/spec/strategy/type")),
    );
    out.w(
        0,
        &format!("MinReadySeconds:\t{}\n", n("/spec/minReadySeconds")),
    );
    if let Some(ru) = d
        .pointer("/spec/strategy/rollingUpdate")
        .filter(|r| r.is_object())
    {
        out.w(
            0,
            &format!(
                "RollingUpdateStrategy:\t{} max unavailable, {} max surge\n",
                int_or_string(&ru["maxUnavailable"]),
                int_or_string(&ru["maxSurge"])
            ),
        );
    }
    describe_pod_template(&mut out, &d["spec"]["template"], clock);
    conditions_with_reasons(&mut out, d);
    let uid = text(d, "/metadata/uid");
    let mut owned: Vec<&Value> = rss
        .iter()
        .filter(|rs| controller_uid(rs) == Some(uid))
        .collect();
    owned.sort_by(|a, b| {
        text(a, "/metadata/creationTimestamp")
            .cmp(text(b, "/metadata/creationTimestamp"))
            .then(text(a, "/metadata/name").cmp(text(b, "/metadata/name")))
    });
    if !owned.is_empty() {
        let new = owned.iter().position(|rs| {
            crate::types::same_template_ignoring_hash(
                &rs["spec"]["template"],
                &d["spec"]["template"],
            )
        });
        let shown = |sets: Vec<&Value>| {
            if sets.is_empty() {
                return "<none>".to_string();
            }
            sets.iter()
                .map(|rs| {
                    format!(
                        "{} ({}/{} replicas created)",
                        text(rs, "/metadata/name"),
                        int(rs, "/status/replicas").unwrap_or(0),
                        int(rs, "/spec/replicas").unwrap_or(0)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let old: Vec<&Value> = owned
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != new)
            .map(|(_, rs)| *rs)
            .collect();
        out.w(0, &format!("OldReplicaSets:\t{}\n", shown(old)));
        out.w(
            0,
            &format!(
                "NewReplicaSet:\t{}\n",
                shown(new.map(|i| owned[i]).into_iter().collect())
            ),
        );
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// A workload's conditions: type, status and reason of each.
fn conditions_with_reasons(out: &mut Out, obj: &Value) {
    let conditions = list(obj, "/status/conditions");
    if conditions.is_empty() {
        return;
    }
    out.w(0, "Conditions:\n  Type\tStatus\tReason\n");
    out.w(1, "----\t------\t------\n");
    for c in conditions {
        out.w(
            1,
            &format!(
                "{} \t{}\t{}\n",
                text(c, "/type"),
                text(c, "/status"),
                text(c, "/reason")
            ),
        );
    }
}

/// The describer of a kind that keeps replicas of a pod template.
fn replicated(
    rc: &Value,
    shown_selector: &str,
    selector: &Selector,
    controlled_by: Option<&str>,
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, rc);
    out.w(0, &format!("Selector:\t{shown_selector}\n"));
    labels_multiline_simple(&mut out, "Labels", &map_at(rc, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(rc, "/metadata/annotations"),
    );
    if let Some(owner) = controlled_by {
        out.w(0, &format!("Controlled By:\t{owner}\n"));
    }
    out.w(
        0,
        &format!(
            "Replicas:\t{} current / {} desired\n",
            int(rc, "/status/replicas").unwrap_or(0),
            int(rc, "/spec/replicas").unwrap_or(1)
        ),
    );
    let uid = text(rc, "/metadata/uid");
    let owned = pods.iter().filter(|p| {
        selector.matches(&map_at(p, "/metadata/labels")) && controller_uid(p) == Some(uid)
    });
    let [running, waiting, succeeded, failed] = phase_counts(owned);
    out.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    describe_pod_template(&mut out, &rc["spec"]["template"], clock);
    conditions_with_reasons(&mut out, rc);
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

// ---------------------------------------------------------------------------------------
// DeploymentConfigs (oc's describer)

/// How many deployments `oc describe dc` shows, the latest included.
const MAX_DISPLAY_DEPLOYMENTS: usize = 3;
/// How many of the DC's events it shows.
const MAX_DISPLAY_EVENTS: usize = 8;

/// oc's `formatString`: `label:` then the value, one tab-led line per line of it.
fn oc_string(out: &mut Out, label: &str, value: &str) {
    let value = if value.is_empty() { "<none>" } else { value };
    out.raw(&format!("{label}:"));
    for line in value.split('\n') {
        out.raw(&format!("\t{line}\n"));
    }
}

/// oc's `formatMapStringString`: the first pair on the label's line, the rest below.
fn oc_map(out: &mut Out, label: &str, map: &BTreeMap<String, String>) {
    if map.is_empty() {
        oc_string(out, label, "");
        return;
    }
    for (i, (k, v)) in map.iter().enumerate() {
        if i == 0 {
            oc_string(out, label, &format!("{k}={v}"));
        } else {
            out.raw(&format!("\t{k}={v}\n"));
        }
    }
}

/// oc's `multilineStringArray(" ", "\t  ", args...)`.
fn oc_multiline_args(args: &[Value]) -> String {
    args.iter()
        .map(|a| {
            let s = plain(a);
            let s = s.strip_suffix('\n').unwrap_or(&s);
            if s.contains('\n') {
                format!("\n\t  {}", s.split('\n').collect::<Vec<_>>().join("\n\t  "))
            } else {
                s.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// oc's `formatLabels(convertEnv(env))`: `k=v,...` sorted, an empty value as `<none>`.
fn oc_env(env: &[Value]) -> String {
    let map: BTreeMap<String, String> = env
        .iter()
        .map(|e| {
            let v = text(e, "/value");
            let v = if v.is_empty() { "<none>" } else { v };
            (text(e, "/name").to_string(), v.to_string())
        })
        .collect();
    labels_string(&map)
}

fn oc_hook(out: &mut Out, prefix: &str, hook: &Value, indent: &str) {
    let policy = text(hook, "/failurePolicy");
    if let Some(exec) = hook.get("execNewPod").filter(|e| e.is_object()) {
        out.raw(&format!(
            "{indent}{prefix} hook (pod type, failure policy: {policy}):\n"
        ));
        out.raw(&format!(
            "{indent}  Container:\t{}\n",
            text(exec, "/containerName")
        ));
        out.raw(&format!(
            "{indent}  Command:\t{}\n",
            oc_multiline_args(list(exec, "/command"))
        ));
        let env = list(exec, "/env");
        if !env.is_empty() {
            out.raw(&format!("{indent}  Env:\t{}\n", oc_env(env)));
        }
    }
    let tags = list(hook, "/tagImages");
    if !tags.is_empty() {
        out.raw(&format!(
            "{indent}{prefix} hook (tag images, failure policy: {policy}):\n"
        ));
        for t in tags {
            out.raw(&format!(
                "{indent}  Tag:\tcontainer {} to {} {} {}\n",
                text(t, "/containerName"),
                text(t, "/to/kind"),
                text(t, "/to/name"),
                text(t, "/to/namespace")
            ));
        }
    }
}

fn oc_strategy(out: &mut Out, strategy: &Value, indent: &str) {
    if let Some(custom) = strategy.get("customParams").filter(|c| c.is_object()) {
        let image = text(custom, "/image");
        let image = if image.is_empty() { "<default>" } else { image };
        out.raw(&format!("{indent}Image:\t{image}\n"));
        let env = list(custom, "/environment");
        if !env.is_empty() {
            out.raw(&format!("{indent}Environment:\t{}\n", oc_env(env)));
        }
        let command = list(custom, "/command");
        if !command.is_empty() {
            out.raw(&format!(
                "{indent}Command:\t{}\n",
                oc_multiline_args(command)
            ));
        }
    }
    let hooks: &[(&str, &str)] = &[
        ("/recreateParams/pre", "Pre-deployment"),
        ("/recreateParams/mid", "Mid-deployment"),
        ("/recreateParams/post", "Post-deployment"),
        ("/rollingParams/pre", "Pre-deployment"),
        ("/rollingParams/post", "Post-deployment"),
    ];
    for (pointer, prefix) in hooks {
        if let Some(hook) = strategy.pointer(pointer).filter(|h| h.is_object()) {
            oc_hook(out, prefix, hook, indent);
        }
    }
}

fn oc_triggers(out: &mut Out, triggers: &[Value]) {
    if triggers.is_empty() {
        oc_string(out, "Triggers", "<none>");
        return;
    }
    let mut shown = Vec::new();
    for t in triggers {
        match text(t, "/type") {
            "ConfigChange" => shown.push("Config".to_string()),
            "ImageChange" => {
                let from = text(t, "/imageChangeParams/from/name");
                if !from.is_empty() {
                    let (name, tag) = from.split_once(':').unwrap_or((from, ""));
                    let tag = if tag.is_empty() { "latest" } else { tag };
                    shown.push(format!(
                        "Image({name}@{tag}, auto={})",
                        flag(t, "/imageChangeParams/automatic")
                    ));
                }
            }
            _ => {}
        }
    }
    oc_string(out, "Triggers", &shown.join(", "));
}

/// oc's `printDeploymentRc`: one `Deployment #N:` block.
fn oc_deployment(
    out: &mut Out,
    rc: &Value,
    pods: &[Value],
    header: &str,
    verbose: bool,
    clock: &Clock,
) {
    out.raw(&format!("{header}:\n"));
    if verbose {
        out.raw(&format!("\tName:\t{}\n", text(rc, "/metadata/name")));
    }
    out.raw(&format!(
        "\tCreated:\t{} ago\n",
        oc_age_since(clock, opt_text(rc, "/metadata/creationTimestamp")).to_lowercase()
    ));
    out.raw(&format!(
        "\tStatus:\t{}\n",
        openshift::annotation(rc, openshift::DEPLOYMENT_PHASE_ANNOTATION).unwrap_or("")
    ));
    if let Some(replicas) = int(rc, "/spec/replicas") {
        out.raw(&format!(
            "\tReplicas:\t{} current / {replicas} desired\n",
            int(rc, "/status/replicas").unwrap_or(0)
        ));
    }
    if verbose {
        let selector = map_at(rc, "/spec/selector");
        out.raw(&format!("\tSelector:\t{}\n", labels_string(&selector)));
        out.raw(&format!(
            "\tLabels:\t{}\n",
            labels_string(&map_at(rc, "/metadata/labels"))
        ));
        let selected = pods.iter().filter(|p| matches_selector(p, &selector));
        let [running, waiting, succeeded, failed] = phase_counts(selected);
        out.raw(&format!(
                "\tPods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
            ),
        );
    }
}

/// `appsutil.DeploymentVersionFor`: the version annotation, -1 when absent or invalid.
fn oc_version(rc: &Value) -> i64 {
    openshift::annotation(rc, openshift::DEPLOYMENT_VERSION_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

fn oc_age_since(clock: &Clock, timestamp: Option<&str>) -> String {
    let seconds = timestamp
        .and_then(parse_time)
        .map(|t| clock.seconds_since(t))
        .unwrap_or(0);
    oc_age(seconds)
}

/// `oc describe dc`: the DC, its pod template, its latest deployment and up to two older
/// ones, and its most recent events. `rcs` are the RCs labelled with the DC's name, `pods`
/// the pods their selectors pick (for `Pods Status`), `events` the DC's events in the
/// order the server listed them (`None` with `--show-events=false`).
pub fn deployment_config(
    dc: &Value,
    rcs: &[Value],
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    let name = text(dc, "/metadata/name");
    oc_string(&mut out, "Name", name);
    let namespace = text(dc, "/metadata/namespace");
    if !namespace.is_empty() {
        oc_string(&mut out, "Namespace", namespace);
    }
    if let Some(created) = opt_text(dc, "/metadata/creationTimestamp").filter(|c| !c.is_empty()) {
        out.raw(&format!(
            "Created:\t{} ago\n",
            oc_age_since(clock, Some(created))
        ));
    }
    oc_map(&mut out, "Labels", &map_at(dc, "/metadata/labels"));
    let mut annotations = map_at(dc, "/metadata/annotations");
    if let Some(description) = annotations.remove("description").filter(|d| !d.is_empty()) {
        oc_string(&mut out, "Description", &description);
    }
    oc_map(&mut out, "Annotations", &annotations);

    let latest_version = int(dc, "/status/latestVersion").unwrap_or(0);
    if latest_version == 0 {
        oc_string(&mut out, "Latest Version", "Not deployed");
    } else {
        oc_string(&mut out, "Latest Version", &latest_version.to_string());
    }
    oc_string(
        &mut out,
        "Selector",
        &labels_string(&map_at(dc, "/spec/selector")),
    );
    let test = if flag(dc, "/spec/test") {
        " (test, will be scaled down between deployments)"
    } else {
        ""
    };
    oc_string(
        &mut out,
        "Replicas",
        &format!("{}{test}", int(dc, "/spec/replicas").unwrap_or(0)),
    );
    if flag(dc, "/spec/paused") {
        oc_string(&mut out, "Paused", "yes");
    }
    oc_triggers(&mut out, list(dc, "/spec/triggers"));
    let strategy = &dc["spec"]["strategy"];
    oc_string(&mut out, "Strategy", text(strategy, "/type"));
    oc_strategy(&mut out, strategy, "  ");
    if let Some(min_ready) = int(dc, "/spec/minReadySeconds").filter(|m| *m > 0) {
        oc_string(&mut out, "MinReadySeconds", &min_ready.to_string());
    }
    out.raw("Template:\n");
    describe_pod_template(&mut out, &dc["spec"]["template"], clock);
    out.raw("\n");

    let latest_name = openshift::deployment_name(name, latest_version);
    // The active deployment: the newest Complete one.
    let active = rcs
        .iter()
        .filter(|rc| openshift::deployment_phase(rc) == openshift::Phase::Complete)
        .max_by_key(|rc| openshift::deployment_version(rc))
        .filter(|rc| openshift::deployment_version(rc) > 0)
        .map(|rc| text(rc, "/metadata/name"));
    let latest = rcs
        .iter()
        .find(|rc| text(rc, "/metadata/name") == latest_name);
    match latest {
        None => oc_string(&mut out, "Latest Deployment", "<none>"),
        Some(rc) => {
            let header = format!("Deployment #{} (latest)", oc_version(rc));
            let verbose = active == Some(latest_name.as_str()) || rcs.len() == 1;
            oc_deployment(&mut out, rc, pods, &header, verbose, clock);
            // Older deployments, newest first by creation time then name.
            let mut sorted: Vec<&Value> = rcs.iter().collect();
            sorted.sort_by(|a, b| {
                let created =
                    |v: &Value| opt_text(v, "/metadata/creationTimestamp").and_then(parse_time);
                created(b)
                    .cmp(&created(a))
                    .then_with(|| text(b, "/metadata/name").cmp(text(a, "/metadata/name")))
            });
            let mut shown = 1;
            for rc in sorted {
                let rc_name = text(rc, "/metadata/name");
                let of_dc = openshift::annotation(rc, openshift::DEPLOYMENT_CONFIG_ANNOTATION)
                    == Some(name);
                if rc_name != latest_name && of_dc {
                    let header = format!("Deployment #{}", oc_version(rc));
                    oc_deployment(&mut out, rc, pods, &header, active == Some(rc_name), clock);
                    shown += 1;
                }
                if shown == MAX_DISPLAY_DEPLOYMENTS {
                    break;
                }
            }
        }
    }

    if let Some(events) = events {
        // The last ones listed, newest listed first; DescribeEvents sorts them again.
        let recent: Vec<Value> = events
            .iter()
            .rev()
            .take(MAX_DISPLAY_EVENTS)
            .cloned()
            .collect();
        out.raw("\n");
        describe_events(&mut out, &recent, clock);
    }
    out.finish(Layout::TABS)
}

// ---------------------------------------------------------------------------------------
// Nodes

const NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
const NODE_ROLE_LABEL: &str = "kubernetes.io/role";

/// `kubectl describe node`. `lease` is the node's Lease in `kube-node-lease`, `pods` its
/// pods (terminated ones are left out here), `events` those about the node.
pub fn node(
    node: &Value,
    lease: Option<&Value>,
    pods: &[Value],
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    let name = text(node, "/metadata/name");
    out.w(0, &format!("Name:\t{name}\n"));
    let labels = map_at(node, "/metadata/labels");
    let roles: BTreeSet<String> = labels
        .iter()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix(NODE_ROLE_PREFIX) {
                (!role.is_empty()).then(|| role.to_string())
            } else if k == NODE_ROLE_LABEL && !v.is_empty() {
                Some(v.clone())
            } else {
                None
            }
        })
        .collect();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };
    out.w(0, &format!("Roles:\t{roles}\n"));
    labels_multiline_simple(&mut out, "Labels", &labels);
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(node, "/metadata/annotations"),
    );
    out.w(
        0,
        &format!(
            "CreationTimestamp:\t{}\n",
            clock.rfc1123z(opt_text(node, "/metadata/creationTimestamp"))
        ),
    );
    taints_multiline(&mut out, "Taints", list(node, "/spec/taints"));
    out.w(
        0,
        &format!("Unschedulable:\t{}\n", flag(node, "/spec/unschedulable")),
    );
    out.w(0, "Lease:\n");
    let lease_field = |pointer: &str, time: bool| match lease.and_then(|l| opt_text(l, pointer)) {
        None => "<unset>".to_string(),
        Some(v) if time => clock.rfc1123z(Some(v)),
        Some(v) => v.to_string(),
    };
    out.w(
        1,
        &format!(
            "HolderIdentity:\t{}\n",
            lease_field("/spec/holderIdentity", false)
        ),
    );
    out.w(
        1,
        &format!("AcquireTime:\t{}\n", lease_field("/spec/acquireTime", true)),
    );
    out.w(
        1,
        &format!("RenewTime:\t{}\n", lease_field("/spec/renewTime", true)),
    );
    let conditions = list(node, "/status/conditions");
    if !conditions.is_empty() {
        out.w(
            0,
            "Conditions:\n  Type\tStatus\tLastHeartbeatTime\tLastTransitionTime\tReason\tMessage\n",
        );
        out.w(
            1,
            "----\t------\t-----------------\t------------------\t------\t-------\n",
        );
        for c in conditions {
            out.w(
                1,
                &format!(
                    "{} \t{} \t{} \t{} \t{} \t{}\n",
                    text(c, "/type"),
                    text(c, "/status"),
                    clock.rfc1123z(opt_text(c, "/lastHeartbeatTime")),
                    clock.rfc1123z(opt_text(c, "/lastTransitionTime")),
                    text(c, "/reason"),
                    text(c, "/message"),
                ),
            );
        }
    }
    out.w(0, "Addresses:\n");
    for a in list(node, "/status/addresses") {
        out.w(
            1,
            &format!("{}:\t{}\n", text(a, "/type"), text(a, "/address")),
        );
    }
    for (pointer, title) in [
        ("/status/capacity", "Capacity"),
        ("/status/allocatable", "Allocatable"),
    ] {
        let resources = resource_texts(node, pointer);
        if !resources.is_empty() {
            out.w(0, &format!("{title}:\n"));
            for (r, q) in resources {
                out.w(0, &format!("  {r}:\t{q}\n"));
            }
        }
    }
    out.w(0, "System Info:\n");
    for (field, title) in [
        ("machineID", "Machine ID"),
        ("systemUUID", "System UUID"),
        ("bootID", "Boot ID"),
        ("kernelVersion", "Kernel Version"),
        ("osImage", "OS Image"),
        ("operatingSystem", "Operating System"),
        ("architecture", "Architecture"),
        ("containerRuntimeVersion", "Container Runtime Version"),
        ("kubeletVersion", "Kubelet Version"),
        ("kubeProxyVersion", "Kube-Proxy Version"),
    ] {
        let value = text(node, &format!("/status/nodeInfo/{field}"));
        // kubectl 1.37 leaves out the deprecated kube-proxy version when it is empty.
        if field == "kubeProxyVersion" && value.is_empty() {
            continue;
        }
        out.w(0, &format!("  {title}:\t{value}\n"));
    }
    let cidr = text(node, "/spec/podCIDR");
    if !cidr.is_empty() {
        out.w(0, &format!("PodCIDR:\t{cidr}\n"));
    }
    let cidrs: Vec<String> = list(node, "/spec/podCIDRs").iter().map(plain).collect();
    if !cidrs.is_empty() {
        out.w(0, &format!("PodCIDRs:\t{}\n", cidrs.join(",")));
    }
    let provider = text(node, "/spec/providerID");
    if !provider.is_empty() {
        out.w(0, &format!("ProviderID:\t{provider}\n"));
    }
    let running: Vec<&Value> = pods
        .iter()
        .filter(|p| {
            text(p, "/spec/nodeName") == name
                && !matches!(text(p, "/status/phase"), "Succeeded" | "Failed")
        })
        .collect();
    describe_node_resource(&mut out, node, &running, clock);
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// Integer percentage as kubectl computes it (`int64(float64(a) / float64(b) * 100)`).
fn percent(part: i128, whole: i128) -> i64 {
    if whole == 0 {
        return 0;
    }
    (part as f64 / whole as f64 * 100.0) as i64
}

/// `describeNodeResource`: the non-terminated pods table and the allocated totals.
fn describe_node_resource(out: &mut Out, node: &Value, pods: &[&Value], clock: &Clock) {
    out.w(
        0,
        &format!("Non-terminated Pods:\t({} in total)\n", pods.len()),
    );
    out.w(
        1,
        "Namespace\tName\t\tCPU Requests\tCPU Limits\tMemory Requests\tMemory Limits\tAge\n",
    );
    out.w(
        1,
        "---------\t----\t\t------------\t----------\t---------------\t-------------\t---\n",
    );
    let mut allocatable = resource_list(node, "/status/allocatable");
    if allocatable.is_empty() {
        allocatable = resource_list(node, "/status/capacity");
    }
    let alloc = |r: &str| allocatable.get(r).copied().unwrap_or(Amount::ZERO);
    let (cpu_alloc, mem_alloc) = (alloc("cpu").milli(), alloc("memory").units());
    let get = |m: &BTreeMap<String, Amount>, r: &str| m.get(r).copied().unwrap_or(Amount::ZERO);
    let mut total_reqs: BTreeMap<String, Amount> = BTreeMap::new();
    let mut total_limits: BTreeMap<String, Amount> = BTreeMap::new();
    for pod in pods {
        let (reqs, limits) = pod_requests_and_limits(pod);
        let (cpu_req, cpu_lim) = (get(&reqs, "cpu"), get(&limits, "cpu"));
        let (mem_req, mem_lim) = (get(&reqs, "memory"), get(&limits, "memory"));
        out.w(
            1,
            &format!(
                "{}\t{}\t\t{cpu_req} ({}%)\t{cpu_lim} ({}%)\t{mem_req} ({}%)\t{mem_lim} ({}%)\t{}\n",
                text(pod, "/metadata/namespace"),
                text(pod, "/metadata/name"),
                percent(cpu_req.milli(), cpu_alloc),
                percent(cpu_lim.milli(), cpu_alloc),
                percent(mem_req.units(), mem_alloc),
                percent(mem_lim.units(), mem_alloc),
                clock.since(opt_text(pod, "/metadata/creationTimestamp")),
            ),
        );
        for (total, part) in [(&mut total_reqs, reqs), (&mut total_limits, limits)] {
            for (r, q) in part {
                let sum = match total.get(&r) {
                    Some(have) => have.add(q),
                    None => q,
                };
                total.insert(r, sum);
            }
        }
    }
    out.w(
        0,
        "Allocated resources:\n  (Total limits may be over 100 percent, i.e., overcommitted.)\n",
    );
    out.w(1, "Resource\tRequests\tLimits\n");
    out.w(1, "--------\t--------\t------\n");
    let row = |out: &mut Out, r: &str, in_milli: bool| {
        let (req, lim) = (get(&total_reqs, r), get(&total_limits, r));
        let (req_n, lim_n, whole) = if in_milli {
            (req.milli(), lim.milli(), alloc(r).milli())
        } else {
            (req.units(), lim.units(), alloc(r).units())
        };
        out.w(
            1,
            &format!(
                "{r}\t{req} ({}%)\t{lim} ({}%)\n",
                percent(req_n, whole),
                percent(lim_n, whole)
            ),
        );
    };
    row(out, "cpu", true);
    row(out, "memory", false);
    row(out, "ephemeral-storage", false);
    let huge_pages: Vec<&String> = allocatable
        .keys()
        .filter(|r| r.starts_with("hugepages-"))
        .collect();
    for r in huge_pages {
        row(out, r, false);
    }
    let extended: Vec<&String> = allocatable
        .keys()
        .filter(|r| {
            !r.starts_with("hugepages-")
                && !matches!(r.as_str(), "cpu" | "memory" | "ephemeral-storage" | "pods")
        })
        .collect();
    for r in extended {
        out.w(
            1,
            &format!("{r}\t{}\t{}\n", get(&total_reqs, r), get(&total_limits, r)),
        );
    }
}

// ---------------------------------------------------------------------------------------
// Namespaces

/// `kubectl describe namespace`. `quotas` and `limit_ranges` are the namespace's
/// ResourceQuotas and LimitRanges, `None` when the server does not serve those types
/// (kubectl then leaves their sections out).
pub fn namespace(
    ns: &Value,
    quotas: Option<&[Value]>,
    limit_ranges: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    out.w(0, &format!("Name:\t{}\n", text(ns, "/metadata/name")));
    labels_multiline_simple(&mut out, "Labels", &map_at(ns, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(ns, "/metadata/annotations"),
    );
    out.w(0, &format!("Status:\t{}\n", text(ns, "/status/phase")));
    let conditions = list(ns, "/status/conditions");
    if !conditions.is_empty() {
        out.w(0, "Conditions:\n");
        out.w(1, "Type\tStatus\tLastTransitionTime\tReason\tMessage\n");
        out.w(1, "----\t------\t------------------\t------\t-------\n");
        for c in conditions {
            out.w(
                1,
                &format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    text(c, "/type"),
                    text(c, "/status"),
                    clock.rfc1123z(opt_text(c, "/lastTransitionTime")),
                    text(c, "/reason"),
                    text(c, "/message"),
                ),
            );
        }
    }
    if let Some(quotas) = quotas {
        out.w(0, "\n");
        describe_quotas(&mut out, quotas);
    }
    if let Some(limit_ranges) = limit_ranges {
        out.w(0, "\n");
        describe_limit_ranges(&mut out, limit_ranges);
    }
    out.finish(Layout::DESCRIBE)
}

/// `DescribeResourceQuotas`: each quota's used and hard amounts.
fn describe_quotas(out: &mut Out, quotas: &[Value]) {
    if quotas.is_empty() {
        out.w(0, "No resource quota.\n");
        return;
    }
    let mut sorted: Vec<&Value> = quotas.iter().collect();
    sorted.sort_by(|a, b| text(a, "/metadata/name").cmp(text(b, "/metadata/name")));
    out.w(0, "Resource Quotas\n");
    for q in sorted {
        out.w(1, &format!("Name:\t{}\n", text(q, "/metadata/name")));
        let mut scopes: Vec<String> = list(q, "/spec/scopes").iter().map(plain).collect();
        if !scopes.is_empty() {
            scopes.sort();
            out.w(1, &format!("Scopes:\t{}\n", scopes.join(", ")));
            for scope in &scopes {
                if let Some(help) = quota_scope_help(scope) {
                    out.w(1, &format!("* {help}\n"));
                }
            }
        }
        out.w(1, "Resource\tUsed\tHard\n");
        out.w(1, "--------\t---\t---\n");
        let hard = resource_texts(q, "/status/hard");
        let used = resource_texts(q, "/status/used");
        for (name, h) in &hard {
            let u = used.get(name).map(String::as_str).unwrap_or("0");
            out.w(1, &format!("{name}\t{u}\t{h}\n"));
        }
    }
}

fn quota_scope_help(scope: &str) -> Option<&'static str> {
    Some(match scope {
        "Terminating" => {
            "Matches all pods that have an active deadline. These pods have a limited lifespan on a node before being actively terminated by the system."
        }
        "NotTerminating" => {
            "Matches all pods that do not have an active deadline. These pods usually include long running pods whose container command is not expected to terminate."
        }
        "BestEffort" => {
            "Matches all pods that do not have resource requirements set. These pods have a best effort quality of service."
        }
        "NotBestEffort" => {
            "Matches all pods that have at least one resource requirement set. These pods have a burstable or guaranteed quality of service."
        }
        _ => return None,
    })
}

/// `DescribeLimitRanges`: one row per limit type and resource.
fn describe_limit_ranges(out: &mut Out, ranges: &[Value]) {
    if ranges.is_empty() {
        out.w(0, "No LimitRange resource.\n");
        return;
    }
    out.w(
        0,
        "Resource Limits\n Type\tResource\tMin\tMax\tDefault Request\tDefault Limit\tMax Limit/Request Ratio\n",
    );
    out.w(
        0,
        " ----\t--------\t---\t---\t---------------\t-------------\t-----------------------\n",
    );
    for range in ranges {
        for item in list(range, "/spec/limits") {
            let columns = [
                resource_texts(item, "/min"),
                resource_texts(item, "/max"),
                resource_texts(item, "/defaultRequest"),
                resource_texts(item, "/default"),
                resource_texts(item, "/maxLimitRequestRatio"),
            ];
            let names: BTreeSet<&String> = columns.iter().flat_map(|c| c.keys()).collect();
            for name in names {
                let cell = |i: usize| columns[i].get(name).map(String::as_str).unwrap_or("-");
                out.w(
                    0,
                    &format!(
                        " {}\t{name}\t{}\t{}\t{}\t{}\t{}\n",
                        text(item, "/type"),
                        cell(0),
                        cell(1),
                        cell(2),
                        cell(3),
                        cell(4)
                    ),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Config maps, secrets, service accounts and any other kind

/// `kubectl describe configmap`: each key's value below a `----` rule, then the sizes of
/// the binary entries.
pub fn config_map(cm: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, cm);
    labels_multiline_simple(&mut out, "Labels", &map_at(cm, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(cm, "/metadata/annotations"),
    );
    out.w(0, "\nData\n====\n");
    for (k, v) in map_at(cm, "/data") {
        out.w(0, &format!("{k}:\n----\n"));
        out.w(0, &format!("{v}\n"));
        out.w(0, "\n");
    }
    out.w(0, "\nBinaryData\n====\n");
    for (k, v) in map_at(cm, "/binaryData") {
        out.w(0, &format!("{k}: {} bytes\n", decoded_len(&v)));
    }
    out.w(0, "\n");
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// The length of base64 data once decoded.
fn decoded_len(encoded: &str) -> usize {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map(|b| b.len())
        .unwrap_or(0)
}

const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";

/// `kubectl describe secret`: the sizes of the entries, a service account token in clear.
pub fn secret(secret: &Value) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, secret);
    labels_multiline_simple(&mut out, "Labels", &map_at(secret, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(secret, "/metadata/annotations"),
    );
    let kind = text(secret, "/type");
    out.w(0, &format!("\nType:\t{kind}\n"));
    out.w(0, "\nData\n====\n");
    for (k, v) in map_at(secret, "/data") {
        if k == "token" && kind == SERVICE_ACCOUNT_TOKEN {
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD
                .decode(&v)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            out.w(0, &format!("{k}:\t{token}\n"));
        } else {
            out.w(0, &format!("{k}:\t{} bytes\n", decoded_len(&v)));
        }
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe serviceaccount`. `secrets` are the namespace's secrets (`None` when
/// they could not be listed): tokens are those bound to the account, and named secrets
/// that do not exist are marked `(not found)`.
pub fn service_account(
    sa: &Value,
    secrets: Option<&[Value]>,
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    let name = text(sa, "/metadata/name");
    out.w(0, &format!("Name:\t{name}\n"));
    out.w(
        0,
        &format!("Namespace:\t{}\n", text(sa, "/metadata/namespace")),
    );
    labels_multiline_simple(&mut out, "Labels", &map_at(sa, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(sa, "/metadata/annotations"),
    );
    let names = |pointer: &str| -> Vec<String> {
        list(sa, pointer)
            .iter()
            .map(|r| text(r, "/name").to_string())
            .collect()
    };
    let (pull, mount) = (names("/imagePullSecrets"), names("/secrets"));
    let mut tokens = Vec::new();
    let mut missing = BTreeSet::new();
    if let Some(secrets) = secrets {
        let uid = text(sa, "/metadata/uid");
        for s in secrets {
            let annotations = map_at(s, "/metadata/annotations");
            let bound = annotations
                .get("kubernetes.io/service-account.name")
                .map(String::as_str)
                == Some(name)
                && annotations
                    .get("kubernetes.io/service-account.uid")
                    .map(String::as_str)
                    == Some(uid);
            if text(s, "/type") == SERVICE_ACCOUNT_TOKEN && bound {
                tokens.push(text(s, "/metadata/name").to_string());
            }
        }
        let existing: BTreeSet<&str> = secrets.iter().map(|s| text(s, "/metadata/name")).collect();
        for n in pull.iter().chain(&mount) {
            if !existing.contains(n.as_str()) {
                missing.insert(n.clone());
            }
        }
    }
    let sections = [
        ("Image pull secrets:", pull),
        ("Mountable secrets: ", mount),
        ("Tokens:            ", tokens),
    ];
    for (header, names) in sections {
        if names.is_empty() {
            out.w(0, &format!("{header}\t<none>\n"));
            continue;
        }
        let mut prefix = header;
        for n in names {
            let note = if missing.contains(&n) {
                " (not found)"
            } else {
                ""
            };
            out.w(0, &format!("{prefix}\t{n}{note}\n"));
            prefix = "                   ";
        }
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// kubectl's describer for kinds without their own: metadata, then every other field as
/// `Smart Label:` lines, nested by indentation.
pub fn generic(obj: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, obj);
    labels_multiline_simple(&mut out, "Labels", &map_at(obj, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(obj, "/metadata/annotations"),
    );
    if let Some(content) = obj.as_object() {
        print_content(&mut out, 0, content, "");
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// The fields the generic describer has already shown or never shows.
const GENERIC_SKIPPED: [&str; 5] = [
    ".metadata.managedFields",
    ".metadata.name",
    ".metadata.namespace",
    ".metadata.labels",
    ".metadata.annotations",
];

/// `printUnstructuredContent`.
fn print_content(
    out: &mut Out,
    level: usize,
    content: &serde_json::Map<String, Value>,
    prefix: &str,
) {
    let mut fields: Vec<&String> = content.keys().collect();
    fields.sort();
    for field in fields {
        let path = format!("{prefix}.{field}");
        if GENERIC_SKIPPED.contains(&path.as_str()) {
            continue;
        }
        match &content[field] {
            Value::Object(map) => {
                out.w(level, &format!("{}:\n", smart_label(field)));
                print_content(out, level + 1, map, &path);
            }
            Value::Array(items) => {
                out.w(level, &format!("{}:\n", smart_label(field)));
                for item in items {
                    match item {
                        Value::Object(map) => print_content(out, level + 1, map, &path),
                        Value::Array(inner) => out.w(level + 1, &format!("{}\n", go_slice(inner))),
                        other => out.w(level + 1, &format!("{}\n", plain(other))),
                    }
                }
            }
            other => out.w(
                level,
                &format!("{}:\t{}\n", smart_label(field), plain(other)),
            ),
        }
    }
}

/// `smartLabelFor`: `apiVersion` → `API Version`, `lastObservedTime` → `Last Observed
/// Time`; names with characters other than letters and `-` stay as they are.
fn smart_label(field: &str) -> String {
    if field.chars().any(|c| !c.is_alphabetic() && c != '-') {
        return field.to_string();
    }
    const ACRONYMS: [&str; 5] = ["API", "URL", "UID", "OSB", "GUID"];
    camel_case_split(field)
        .into_iter()
        .filter(|p| p != "_")
        .map(|p| {
            let upper = p.to_uppercase();
            if ACRONYMS.contains(&upper.as_str()) {
                upper
            } else {
                let mut chars = p.chars();
                match chars.next() {
                    Some(first) => first.to_uppercase().chain(chars).collect(),
                    None => p,
                }
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `camelcase.Split`: runs of lower case, upper case, digits and other characters, an
/// upper-case run giving its last letter to a lower-case run after it (`HTTPServer` →
/// `HTTP`, `Server`).
fn camel_case_split(s: &str) -> Vec<String> {
    fn class(c: char) -> u8 {
        if c.is_lowercase() {
            1
        } else if c.is_uppercase() {
            2
        } else if c.is_numeric() {
            3
        } else {
            4
        }
    }
    let mut runs: Vec<Vec<char>> = Vec::new();
    let mut last = 0;
    for c in s.chars() {
        let k = class(c);
        match runs.last_mut() {
            Some(run) if k == last => run.push(c),
            _ => runs.push(vec![c]),
        }
        last = k;
    }
    for i in 0..runs.len().saturating_sub(1) {
        let (upper, lower) = (
            runs[i].first().map(|c| class(*c)) == Some(2),
            runs[i + 1].first().map(|c| class(*c)) == Some(1),
        );
        if upper && lower {
            if let Some(c) = runs[i].pop() {
                runs[i + 1].insert(0, c);
            }
        }
    }
    runs.into_iter()
        .filter(|r| !r.is_empty())
        .map(|r| r.into_iter().collect())
        .collect()
}

// ---------------------------------------------------------------------------------------
// The `describe` verb: fetching what the describers need

/// `describe (TYPE [NAME_PREFIX...] | TYPE/NAME...) [-l selector]`.
#[derive(Debug, Clone, clap::Args)]
pub struct DescribeArgs {
    /// `TYPE [NAME_PREFIX...]` or `TYPE/NAME...`.
    pub args: Vec<String>,
    /// Describe the objects with these labels (`app=web,tier!=db`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Describe objects of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Show the objects' events.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub show_events: bool,
}

/// Describes the objects the arguments name, one after the other, like `kubectl describe`:
/// with a single `TYPE NAME` that names no object, the objects whose names start with
/// `NAME` are described instead.
pub async fn describe(conn: &Conn, args: &DescribeArgs) -> Result<i32, CliError> {
    let targets = super::resource::targets(&args.args)?;
    let clock = Clock::system();
    let by_prefix = args.args.len() == 2 && !args.args.iter().any(|a| a.contains('/'));
    if !args.args.iter().any(|a| a.contains('/')) && targets.len() > 1 && args.args.len() > 1 {
        return Err(CliError::msg("you may only specify a single resource type"));
    }
    let mut texts = Vec::new();
    // Objects that could not be fetched are reported after the others are printed.
    let mut errors = Vec::new();
    for t in &targets {
        let ns = if args.all_namespaces {
            None
        } else {
            t.res.namespaced.then(|| conn.namespace.clone())
        };
        if t.names.is_empty() {
            let params = ListParams {
                label_selector: args.selector.clone(),
                field_selector: None,
            };
            let list = conn
                .client
                .list(t.res, ns.as_deref(), &params)
                .await
                .map_err(|e| conn.error(e))?;
            for obj in &list.items {
                texts.push(describe_object(conn, t.res, obj, args.show_events, &clock).await?);
            }
            continue;
        }
        if args.selector.is_some() {
            return Err(CliError::msg(
                "name cannot be provided when a selector is specified",
            ));
        }
        for name in &t.names {
            match conn.client.get(t.res, ns.as_deref(), name).await {
                Ok(obj) => {
                    texts.push(describe_object(conn, t.res, &obj, args.show_events, &clock).await?)
                }
                Err(e) if e.is_not_found() && by_prefix => {
                    let list = conn
                        .client
                        .list(t.res, ns.as_deref(), &ListParams::default())
                        .await
                        .map_err(|e| conn.error(e))?;
                    let matching: Vec<&Value> = list
                        .items
                        .iter()
                        .filter(|o| text(o, "/metadata/name").starts_with(name.as_str()))
                        .collect();
                    if matching.is_empty() {
                        return Err(conn.error(e));
                    }
                    // kubectl prints each match with a newline after it, no separator.
                    for obj in matching {
                        let text =
                            describe_object(conn, t.res, obj, args.show_events, &clock).await?;
                        super::out(&format!("{text}\n"));
                    }
                    return Ok(0);
                }
                Err(e) => errors.push(conn.error(e).text()),
            }
        }
    }
    if texts.is_empty() && errors.is_empty() {
        if args.all_namespaces {
            eprintln!("No resources found");
        } else {
            eprintln!("No resources found in {} namespace.", conn.namespace);
        }
    }
    super::out(&texts.join("\n\n"));
    for e in &errors {
        eprintln!("{e}");
    }
    Ok(i32::from(!errors.is_empty()))
}

/// Fetches what the describer of `obj` needs and describes it.
async fn describe_object(
    conn: &Conn,
    res: &'static Resource,
    obj: &Value,
    show_events: bool,
    clock: &Clock,
) -> Result<String, CliError> {
    let ns = opt_text(obj, "/metadata/namespace");
    let name = text(obj, "/metadata/name");
    let uid = text(obj, "/metadata/uid");
    let events = |kind: Option<&'static str>, uid: String| {
        let namespace = ns.unwrap_or("");
        async move {
            if !show_events {
                return None;
            }
            Some(events_about(conn, name, namespace, kind, &uid).await)
        }
    };
    Ok(match res.kind {
        Kind::Pod => {
            // A mirror pod's events are about the static pod it mirrors.
            let uid = openshift::annotation(obj, MIRROR_ANNOTATION).unwrap_or(uid);
            let events = events(None, uid.to_string()).await;
            pod(obj, events.as_deref(), clock)
        }
        Kind::ReplicationController => {
            let selector = labels_string(&map_at(obj, "/spec/selector"));
            let pods = list_or_empty(conn, Kind::Pod, ns, Some(selector)).await?;
            let events = events(Some("ReplicationController"), uid.to_string()).await;
            replication_controller(obj, &pods, events.as_deref(), clock)
        }
        Kind::ReplicaSet => {
            let selector = rs_selector(obj);
            let pods = list_or_empty(conn, Kind::Pod, ns, Some(selector)).await?;
            let events = events(Some("ReplicaSet"), uid.to_string()).await;
            replica_set(obj, &pods, events.as_deref(), clock)
        }
        Kind::Deployment => {
            let rss = list_or_empty(conn, Kind::ReplicaSet, ns, Some(rs_selector(obj))).await?;
            let events = events(Some("Deployment"), uid.to_string()).await;
            deployment(obj, &rss, events.as_deref(), clock)
        }
        Kind::DaemonSet => {
            let pods = list_or_empty(conn, Kind::Pod, ns, Some(rs_selector(obj))).await?;
            let events = events(Some("DaemonSet"), uid.to_string()).await;
            daemon_set(obj, &pods, events.as_deref(), clock)
        }
        Kind::Job => {
            let events = events(Some("Job"), uid.to_string()).await;
            job(obj, events.as_deref(), clock)
        }
        Kind::CronJob => {
            let events = events(Some("CronJob"), uid.to_string()).await;
            cron_job(obj, events.as_deref(), clock)
        }
        Kind::StatefulSet => {
            let pods = list_or_empty(conn, Kind::Pod, ns, Some(rs_selector(obj))).await?;
            let events = events(Some("StatefulSet"), uid.to_string()).await;
            stateful_set(obj, &pods, events.as_deref(), clock)
        }
        Kind::PodDisruptionBudget => {
            let events = events(Some("PodDisruptionBudget"), uid.to_string()).await;
            pod_disruption_budget(obj, events.as_deref(), clock)
        }
        Kind::HorizontalPodAutoscaler => {
            let events = events(Some("HorizontalPodAutoscaler"), uid.to_string()).await;
            horizontal_pod_autoscaler(obj, events.as_deref(), clock)
        }
        Kind::DeploymentConfig => {
            let by_dc = format!("{}={name}", openshift::DEPLOYMENT_CONFIG_LABEL);
            let rcs = list_or_empty(conn, Kind::ReplicationController, ns, Some(by_dc)).await?;
            let pods = list_or_empty(conn, Kind::Pod, ns, None).await?;
            let events = events(Some("DeploymentConfig"), uid.to_string()).await;
            deployment_config(obj, &rcs, &pods, events.as_deref(), clock)
        }
        Kind::Node => {
            let lease = conn
                .client
                .get(catalog::of(Kind::Lease), Some(NODE_LEASE_NAMESPACE), name)
                .await
                .ok();
            let params = ListParams {
                label_selector: None,
                field_selector: Some(format!(
                    "spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed"
                )),
            };
            let pods = conn
                .client
                .list(catalog::of(Kind::Pod), None, &params)
                .await
                .map_err(|e| conn.error(e))?
                .items;
            // The node's events name it by uid (controllers) or by name (the node agent).
            let events = match events(Some("Node"), uid.to_string()).await {
                Some(mut by_uid) => {
                    if let Some(by_name) = events(Some("Node"), name.to_string()).await {
                        by_uid.extend(by_name);
                    }
                    Some(by_uid)
                }
                None => None,
            };
            node(obj, lease.as_ref(), &pods, events.as_deref(), clock)
        }
        Kind::ConfigMap => {
            let events = events(Some(&res.kind_name), uid.to_string()).await;
            config_map(obj, events.as_deref(), clock)
        }
        Kind::Secret => secret(obj),
        Kind::ServiceAccount => {
            let secrets = conn
                .client
                .list(catalog::of(Kind::Secret), ns, &ListParams::default())
                .await
                .ok()
                .map(|l| l.items);
            let events = events(Some(&res.kind_name), uid.to_string()).await;
            service_account(obj, secrets.as_deref(), events.as_deref(), clock)
        }
        Kind::Namespace => {
            let quotas =
                optional_list(conn, &format!("/api/v1/namespaces/{name}/resourcequotas")).await?;
            let limits =
                optional_list(conn, &format!("/api/v1/namespaces/{name}/limitranges")).await?;
            namespace(obj, quotas.as_deref(), limits.as_deref(), clock)
        }
        _ => {
            let events = events(Some(&res.kind_name), uid.to_string()).await;
            generic(obj, events.as_deref(), clock)
        }
    })
}

/// The annotation that holds the uid of the static pod a mirror pod stands for.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Where node leases live.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The items at a list path, `None` when the server does not serve it.
async fn optional_list(conn: &Conn, path: &str) -> Result<Option<Vec<Value>>, CliError> {
    let req = RawRequest::new(reqwest::Method::GET, path);
    match conn.client.raw_json(&req).await {
        Ok(list) => Ok(Some(list["items"].as_array().cloned().unwrap_or_default())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(conn.error(e)),
    }
}

async fn list_or_empty(
    conn: &Conn,
    kind: Kind,
    ns: Option<&str>,
    label_selector: Option<String>,
) -> Result<Vec<Value>, CliError> {
    let params = ListParams {
        label_selector,
        field_selector: None,
    };
    conn.client
        .list(catalog::of(kind), ns, &params)
        .await
        .map(|l| l.items)
        .map_err(|e| conn.error(e))
}

/// The events about one object, in the order the server lists them; none when they
/// cannot be read (kubectl describes the object anyway).
async fn events_about(
    conn: &Conn,
    name: &str,
    namespace: &str,
    kind: Option<&str>,
    uid: &str,
) -> Vec<Value> {
    let mut selector = format!("involvedObject.name={name},involvedObject.namespace={namespace}");
    if let Some(kind) = kind {
        let _ = write!(selector, ",involvedObject.kind={kind}");
    }
    if !uid.is_empty() {
        let _ = write!(selector, ",involvedObject.uid={uid}");
    }
    let params = ListParams {
        label_selector: None,
        field_selector: Some(selector),
    };
    let ns = (!namespace.is_empty()).then_some(namespace);
    match conn
        .client
        .list(catalog::of(Kind::Event), ns, &params)
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list events");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn clock() -> Clock {
        Clock::utc("2026-11-30T21:05:00Z".parse().expect("a timestamp"))
    }

    fn running_pod() -> Value {
        json!({
            "metadata": {
                "name": "web-1", "namespace": "default", "uid": "u-web-1",
                "labels": {"app": "web", "tier": "front"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "note": "hello"
                },
                "ownerReferences": [{"apiVersion": "v1", "kind": "ReplicationController",
                    "name": "web", "uid": "u-web", "controller": true}],
                "creationTimestamp": "2026-11-30T20:59:58Z"
            },
            "spec": {
                "priority": 0,
                "serviceAccountName": "default",
                "nodeName": "berth",
                "containers": [{
                    "name": "app",
                    "image": "busybox",
                    "command": ["sleep", "infinity"],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "readinessProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 1,
                        "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
                    "env": [{"name": "MODE", "value": "fast"},
                            {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                }],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "tolerations": [
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                ]
            },
            "status": {
                "phase": "Running",
                "hostIP": "10.0.0.5",
                "podIP": "10.88.0.7",
                "podIPs": [{"ip": "10.88.0.7"}],
                "startTime": "2026-11-30T21:00:00Z",
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}
                ],
                "containerStatuses": [{
                    "name": "app", "ready": true, "restartCount": 0,
                    "containerID": "berth://0123abcd", "imageID": "busybox",
                    "state": {"running": {"startedAt": "2026-11-30T21:00:02Z"}}
                }],
                "qosClass": "Burstable"
            }
        })
    }

    fn pod_events() -> Vec<Value> {
        vec![
            json!({"type": "Normal", "reason": "Started", "message": "Started container app",
                   "source": {"component": "kubelet"}, "count": 3,
                   "firstTimestamp": "2026-11-30T21:00:02Z", "lastTimestamp": "2026-11-30T21:02:30Z"}),
            json!({"type": "Normal", "reason": "Scheduled", "message": "Successfully assigned default/web-1 to berth",
                   "source": {"component": "default-scheduler"}, "count": 1,
                   "firstTimestamp": "2026-11-30T21:00:00Z", "lastTimestamp": "2026-11-30T21:00:00Z"}),
        ]
    }

    fn simple_dc() -> Value {
        json!({
            "metadata": {"name": "deployment-simple", "namespace": "test", "uid": "u-dc",
                         "creationTimestamp": "2026-11-30T21:00:00Z", "generation": 2},
            "spec": {
                "replicas": 1,
                "selector": {"name": "deployment-simple"},
                "strategy": {"type": "Rolling", "activeDeadlineSeconds": 21600,
                    "rollingParams": {"intervalSeconds": 1, "updatePeriodSeconds": 1,
                        "timeoutSeconds": 600, "maxSurge": "25%", "maxUnavailable": "25%"}},
                "triggers": [{"type": "ConfigChange"}],
                "revisionHistoryLimit": 10,
                "template": {
                    "metadata": {"labels": {"name": "deployment-simple"}},
                    "spec": {"containers": [{
                        "name": "myapp", "image": "busybox",
                        "command": ["sleep", "infinity"],
                        "env": [{"name": "TRY", "value": "ONCE"}],
                        "readinessProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 1,
                            "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
                    }]}
                }
            },
            "status": {"latestVersion": 2, "replicas": 1}
        })
    }

    fn deployment(version: i64, created: &str, replicas: i64, phase: &str) -> Value {
        let name = format!("deployment-simple-{version}");
        json!({
            "metadata": {
                "name": name, "namespace": "test", "uid": format!("u-rc-{version}"),
                "creationTimestamp": created,
                "labels": {"openshift.io/deployment-config.name": "deployment-simple"},
                "annotations": {
                    "openshift.io/deployment-config.name": "deployment-simple",
                    "openshift.io/deployment-config.latest-version": version.to_string(),
                    "openshift.io/deployment.phase": phase
                }
            },
            "spec": {"replicas": replicas, "selector": {"deployment": name,
                "deploymentconfig": "deployment-simple", "name": "deployment-simple"}},
            "status": {"replicas": replicas}
        })
    }

    fn dc_events() -> Vec<Value> {
        let event = |reason: &str, message: &str, at: &str| {
            json!({"type": "Normal", "reason": reason, "message": message,
                   "source": {"component": "deploymentconfig-controller"}, "count": 1,
                   "firstTimestamp": at, "lastTimestamp": at})
        };
        vec![
            event(
                "DeploymentCreated",
                "Created new replication controller \"deployment-simple-1\" for version 1",
                "2026-11-30T21:00:00Z",
            ),
            event(
                "DeploymentCreated",
                "Created new replication controller \"deployment-simple-2\" for version 2",
                "2026-11-30T21:03:00Z",
            ),
            event(
                "ReplicationControllerScaled",
                "Scaled replication controller \"deployment-simple-1\" from 1 to 0",
                "2026-11-30T21:03:20Z",
            ),
        ]
    }

    fn hooked_dc() -> Value {
        json!({
            "metadata": {"name": "deployment-test", "namespace": "test",
                "creationTimestamp": "2026-11-30T21:04:59Z",
                "labels": {"app": "t", "tier": "back"},
                "annotations": {"description": "A test deployment", "team": "edge"}},
            "spec": {
                "replicas": 2, "test": true, "paused": true, "minReadySeconds": 5,
                "selector": {"app": "t"},
                "strategy": {"type": "Rolling",
                    "customParams": {"environment": [{"name": "A", "value": "1"}],
                        "command": ["/bin/sh", "-c", "openshift-deploy"]},
                    "rollingParams": {"pre": {"failurePolicy": "Abort", "execNewPod": {
                        "containerName": "myapp", "command": ["/bin/echo", "test pre hook executed"],
                        "env": [{"name": "X", "value": "y"}]}},
                        "post": {"failurePolicy": "Ignore", "tagImages": [{"containerName": "myapp",
                            "to": {"kind": "ImageStreamTag", "name": "app:prod", "namespace": "test"}}]}}},
                "triggers": [{"type": "ConfigChange"}, {"type": "ImageChange",
                    "imageChangeParams": {"automatic": true, "containerNames": ["myapp"],
                        "from": {"kind": "ImageStreamTag", "name": "app:latest"}}}],
                "template": {"metadata": {"labels": {"app": "t"}},
                    "spec": {"containers": [{"name": "myapp", "image": "busybox"}]}}
            },
            "status": {"latestVersion": 0}
        })
    }

    /// Compares line by line first, so a failure names the line that differs.
    fn assert_text(actual: &str, expected: &str) {
        for (i, (a, e)) in actual.lines().zip(expected.lines()).enumerate() {
            assert_eq!(a, e, "line {} differs", i + 1);
        }
        assert_eq!(actual, expected);
    }

    #[test]
    fn a_running_pod_with_a_readiness_probe_and_two_events_reads_like_kubectl() {
        let out = pod(&running_pod(), Some(&pod_events()), &clock());
        let expected = [
            "Name:             web-1",
            "Namespace:        default",
            "Priority:         0",
            "Service Account:  default",
            "Node:             berth/10.0.0.5",
            "Start Time:       Mon, 30 Nov 2026 21:00:00 +0000",
            "Labels:           app=web",
            "                  tier=front",
            "Annotations:      note: hello",
            "Status:           Running",
            "IP:               10.88.0.7",
            "IPs:",
            "  IP:           10.88.0.7",
            "Controlled By:  ReplicationController/web",
            "Containers:",
            "  app:",
            "    Container ID:  berth://0123abcd",
            "    Image:         busybox",
            "    Image ID:      busybox",
            "    Port:          8080/TCP",
            "    Host Port:     0/TCP",
            "    Command:",
            "      sleep",
            "      infinity",
            "    State:          Running",
            "      Started:      Mon, 30 Nov 2026 21:00:02 +0000",
            "    Ready:          True",
            "    Restart Count:  0",
            "    Requests:",
            "      cpu:      100m",
            "      memory:   64Mi",
            "    Readiness:  exec [true] delay=0s timeout=1s period=10s successThreshold=1 failureThreshold=3",
            "    Environment:",
            "      MODE:  fast",
            "      POD:   web-1 (v1:metadata.name)",
            "    Mounts:",
            "      /data from data (rw)",
            "Conditions:",
            "  Type              Status",
            "  Initialized       True ",
            "  Ready             True ",
            "  ContainersReady   True ",
            "  PodScheduled      True ",
            "Volumes:",
            "  data:",
            "    Type:        EmptyDir (a temporary directory that shares a pod's lifetime)",
            "    Medium:      ",
            "    SizeLimit:   <unset>",
            "QoS Class:       Burstable",
            "Node-Selectors:  <none>",
            "Tolerations:     node.kubernetes.io/not-ready:NoExecute op=Exists for 300s",
            "                 node.kubernetes.io/unreachable:NoExecute op=Exists for 300s",
            "Events:",
            "  Type    Reason     Age                    From               Message",
            "  ----    ------     ----                   ----               -------",
            "  Normal  Scheduled  5m                     default-scheduler  Successfully assigned default/web-1 to berth",
            "  Normal  Started    2m30s (x3 over 4m58s)  kubelet            Started container app",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_deployment_config_after_a_config_change_reads_like_oc() {
        // Scenario 4's end state: version 2 complete and active, version 1 scaled down.
        let rcs = vec![
            deployment(1, "2026-11-30T21:00:00Z", 0, "Complete"),
            deployment(2, "2026-11-30T21:03:00Z", 1, "Complete"),
        ];
        let app = json!({"metadata": {"name": "deployment-simple-2-abcde", "labels": {
            "deployment": "deployment-simple-2", "deploymentconfig": "deployment-simple",
            "name": "deployment-simple"}}, "status": {"phase": "Running"}});
        let out = deployment_config(&simple_dc(), &rcs, &[app], Some(&dc_events()), &clock());
        let expected = [
            "Name:\t\tdeployment-simple",
            "Namespace:\ttest",
            "Created:\t5 minutes ago",
            "Labels:\t\t<none>",
            "Annotations:\t<none>",
            "Latest Version:\t2",
            "Selector:\tname=deployment-simple",
            "Replicas:\t1",
            "Triggers:\tConfig",
            "Strategy:\tRolling",
            "Template:",
            "Pod Template:",
            "  Labels:\tname=deployment-simple",
            "  Containers:",
            "   myapp:",
            "    Image:\tbusybox",
            "    Port:\t<none>",
            "    Host Port:\t<none>",
            "    Command:",
            "      sleep",
            "      infinity",
            "    Readiness:\texec [true] delay=0s timeout=1s period=10s successThreshold=1 failureThreshold=3",
            "    Environment:",
            "      TRY:\t\tONCE",
            "    Mounts:\t\t<none>",
            "  Volumes:\t\t<none>",
            "  Node-Selectors:\t<none>",
            "  Tolerations:\t\t<none>",
            "",
            "Deployment #2 (latest):",
            "\tName:\t\tdeployment-simple-2",
            "\tCreated:\t2 minutes ago",
            "\tStatus:\t\tComplete",
            "\tReplicas:\t1 current / 1 desired",
            "\tSelector:\tdeployment=deployment-simple-2,deploymentconfig=deployment-simple,name=deployment-simple",
            "\tLabels:\t\topenshift.io/deployment-config.name=deployment-simple",
            "\tPods Status:\t1 Running / 0 Waiting / 0 Succeeded / 0 Failed",
            "Deployment #1:",
            "\tCreated:\t5 minutes ago",
            "\tStatus:\t\tComplete",
            "\tReplicas:\t0 current / 0 desired",
            "",
            "Events:",
            "  Type\t\tReason\t\t\t\tAge\tFrom\t\t\t\tMessage",
            "  ----\t\t------\t\t\t\t----\t----\t\t\t\t-------",
            "  Normal\tDeploymentCreated\t\t5m\tdeploymentconfig-controller\tCreated new replication controller \"deployment-simple-1\" for version 1",
            "  Normal\tDeploymentCreated\t\t2m\tdeploymentconfig-controller\tCreated new replication controller \"deployment-simple-2\" for version 2",
            "  Normal\tReplicationControllerScaled\t100s\tdeploymentconfig-controller\tScaled replication controller \"deployment-simple-1\" from 1 to 0",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
        // Scenario 32's lines.
        for line in [
            "Latest Version:\t2",
            "Triggers:\tConfig",
            "Strategy:\tRolling",
            "Deployment #2 (latest):",
            "\tStatus:\t\tComplete",
            "\tReplicas:\t1 current / 1 desired",
            "Deployment #1:",
            "\tReplicas:\t0 current / 0 desired",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?}");
        }
    }

    #[test]
    fn an_undeployed_test_dc_shows_hooks_custom_params_and_no_deployment() {
        let out = deployment_config(&hooked_dc(), &[], &[], Some(&[]), &clock());
        let expected = [
            "Name:\t\tdeployment-test",
            "Namespace:\ttest",
            "Created:\t1 second ago",
            "Labels:\t\tapp=t",
            "\t\ttier=back",
            "Description:\tA test deployment",
            "Annotations:\tteam=edge",
            "Latest Version:\tNot deployed",
            "Selector:\tapp=t",
            "Replicas:\t2 (test, will be scaled down between deployments)",
            "Paused:\t\tyes",
            "Triggers:\tConfig, Image(app@latest, auto=true)",
            "Strategy:\tRolling",
            "  Image:\t<default>",
            "  Environment:\tA=1",
            "  Command:\t/bin/sh -c openshift-deploy",
            "  Pre-deployment hook (pod type, failure policy: Abort):",
            "    Container:\tmyapp",
            "    Command:\t/bin/echo test pre hook executed",
            "    Env:\tX=y",
            "  Post-deployment hook (tag images, failure policy: Ignore):",
            "    Tag:\t\tcontainer myapp to ImageStreamTag app:prod test",
            "MinReadySeconds:\t5",
            "Template:",
            "Pod Template:",
            "  Labels:\tapp=t",
            "  Containers:",
            "   myapp:",
            "    Image:\t\tbusybox",
            "    Port:\t\t<none>",
            "    Host Port:\t\t<none>",
            "    Environment:\t<none>",
            "    Mounts:\t\t<none>",
            "  Volumes:\t\t<none>",
            "  Node-Selectors:\t<none>",
            "  Tolerations:\t\t<none>",
            "",
            "Latest Deployment:\t<none>",
            "",
            "Events:\t<none>",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_dc_shows_at_most_two_older_deployments_and_eight_events() {
        let rcs: Vec<Value> = (1..=5)
            .map(|v| {
                let phase = if v == 5 { "Running" } else { "Complete" };
                deployment(v, &format!("2026-11-30T21:0{v}:00Z"), 1, phase)
            })
            .collect();
        let mut dc = simple_dc();
        dc["status"]["latestVersion"] = json!(5);
        let events: Vec<Value> = (0..10)
            .map(|i| {
                json!({"type": "Normal", "reason": format!("R{i}"), "message": "m",
                    "source": {"component": "c"}, "count": 1,
                    "firstTimestamp": format!("2026-11-30T21:00:{i:02}Z"),
                    "lastTimestamp": format!("2026-11-30T21:00:{i:02}Z")})
            })
            .collect();
        let out = deployment_config(&dc, &rcs, &[], Some(&events), &clock());
        let headers: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("Deployment #"))
            .collect();
        assert_eq!(
            headers,
            [
                "Deployment #5 (latest):",
                "Deployment #4:",
                "Deployment #3:"
            ]
        );
        // The running latest is not the active one, so only #4 (newest complete) is verbose.
        let names: Vec<&str> = out.lines().filter(|l| l.starts_with("\tName:")).collect();
        assert_eq!(names, ["\tName:\t\tdeployment-simple-4"]);
        let reasons: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("  Normal\t"))
            .map(|l| l.split('\t').next().unwrap_or(""))
            .collect();
        assert_eq!(reasons, ["R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9"]);
    }

    #[test]
    fn a_replication_controller_counts_only_the_pods_it_controls() {
        let rc = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u-web",
                "labels": {"app": "web"}},
            "spec": {"replicas": 1, "selector": {"app": "web"},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "busybox",
                        "ports": [{"containerPort": 80, "protocol": "TCP"},
                                  {"containerPort": 443, "protocol": "TCP"}]}]}}},
            "status": {"replicas": 1}
        });
        let events = vec![json!({"type": "Normal", "reason": "SuccessfulCreate",
            "message": "Created pod: web-1", "source": {"component": "replication-controller"},
            "count": 1, "firstTimestamp": "2026-11-30T20:59:58Z",
            "lastTimestamp": "2026-11-30T20:59:58Z"})];
        let mut orphan = running_pod();
        orphan["metadata"]["ownerReferences"] = json!([]);
        let out = replication_controller(&rc, &[running_pod(), orphan], Some(&events), &clock());
        let expected = [
            "Name:         web",
            "Namespace:    default",
            "Selector:     app=web",
            "Labels:       app=web",
            "Annotations:  <none>",
            "Replicas:     1 current / 1 desired",
            "Pods Status:  1 Running / 0 Waiting / 0 Succeeded / 0 Failed",
            "Pod Template:",
            "  Labels:  app=web",
            "  Containers:",
            "   app:",
            "    Image:         busybox",
            "    Ports:         80/TCP, 443/TCP",
            "    Host Ports:    0/TCP, 0/TCP",
            "    Environment:   <none>",
            "    Mounts:        <none>",
            "  Volumes:         <none>",
            "  Node-Selectors:  <none>",
            "  Tolerations:     <none>",
            "Events:",
            "  Type    Reason            Age   From                    Message",
            "  ----    ------            ----  ----                    -------",
            "  Normal  SuccessfulCreate  5m2s  replication-controller  Created pod: web-1",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_node_shows_its_pods_requests_and_limits_against_allocatable() {
        let n = json!({
            "metadata": {"name": "berth", "creationTimestamp": "2026-11-30T20:00:00Z",
                "labels": {"kubernetes.io/hostname": "berth",
                    "node-role.kubernetes.io/control-plane": ""},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"podCIDR": "10.88.0.0/16", "podCIDRs": ["10.88.0.0/16"]},
            "status": {
                "capacity": {"cpu": "2", "memory": "4026300Ki", "pods": "110",
                    "ephemeral-storage": "41152812Ki"},
                "allocatable": {"cpu": "2", "memory": "4026300Ki", "pods": "110",
                    "ephemeral-storage": "41152812Ki"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "berth is posting ready status",
                    "lastHeartbeatTime": "2026-11-30T21:04:50Z",
                    "lastTransitionTime": "2026-11-30T20:00:05Z"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.5"},
                    {"type": "Hostname", "address": "berth"}],
                "nodeInfo": {"machineID": "m1", "systemUUID": "s1", "bootID": "b1",
                    "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "operatingSystem": "linux", "architecture": "amd64",
                    "containerRuntimeVersion": "berth://0.1.0", "kubeletVersion": "v1.31.0",
                    "kubeProxyVersion": ""}
            }
        });
        let lease = json!({"spec": {"holderIdentity": "berth",
            "renewTime": "2026-11-30T21:04:58.000000Z"}});
        let mut p = running_pod();
        p["spec"]["containers"][0]["resources"]["limits"] =
            json!({"cpu": "500m", "memory": "128Mi"});
        let mut done = running_pod();
        done["metadata"]["name"] = json!("web-0");
        done["status"]["phase"] = json!("Succeeded");
        let out = node(&n, Some(&lease), &[p, done], Some(&[]), &clock());
        let expected = [
            "Name:               berth",
            "Roles:              control-plane",
            "Labels:             kubernetes.io/hostname=berth",
            "                    node-role.kubernetes.io/control-plane=",
            "Annotations:        node.alpha.kubernetes.io/ttl: 0",
            "CreationTimestamp:  Mon, 30 Nov 2026 20:00:00 +0000",
            "Taints:             <none>",
            "Unschedulable:      false",
            "Lease:",
            "  HolderIdentity:  berth",
            "  AcquireTime:     <unset>",
            "  RenewTime:       Mon, 30 Nov 2026 21:04:58 +0000",
            "Conditions:",
            "  Type    Status  LastHeartbeatTime                 LastTransitionTime                Reason         Message",
            "  ----    ------  -----------------                 ------------------                ------         -------",
            "  Ready   True    Mon, 30 Nov 2026 21:04:50 +0000   Mon, 30 Nov 2026 20:00:05 +0000   KubeletReady   berth is posting ready status",
            "Addresses:",
            "  InternalIP:  10.0.0.5",
            "  Hostname:    berth",
            "Capacity:",
            "  cpu:                2",
            "  ephemeral-storage:  41152812Ki",
            "  memory:             4026300Ki",
            "  pods:               110",
            "Allocatable:",
            "  cpu:                2",
            "  ephemeral-storage:  41152812Ki",
            "  memory:             4026300Ki",
            "  pods:               110",
            "System Info:",
            "  Machine ID:                 m1",
            "  System UUID:                s1",
            "  Boot ID:                    b1",
            "  Kernel Version:             6.1.0",
            "  OS Image:                   Debian GNU/Linux 12 (bookworm)",
            "  Operating System:           linux",
            "  Architecture:               amd64",
            "  Container Runtime Version:  berth://0.1.0",
            "  Kubelet Version:            v1.31.0",
            "PodCIDR:                      10.88.0.0/16",
            "PodCIDRs:                     10.88.0.0/16",
            "Non-terminated Pods:          (1 in total)",
            "  Namespace                   Name     CPU Requests  CPU Limits  Memory Requests  Memory Limits  Age",
            "  ---------                   ----     ------------  ----------  ---------------  -------------  ---",
            "  default                     web-1    100m (5%)     500m (25%)  64Mi (1%)        128Mi (3%)     5m2s",
            "Allocated resources:",
            "  (Total limits may be over 100 percent, i.e., overcommitted.)",
            "  Resource           Requests   Limits",
            "  --------           --------   ------",
            "  cpu                100m (5%)  500m (25%)",
            "  memory             64Mi (1%)  128Mi (3%)",
            "  ephemeral-storage  0 (0%)     0 (0%)",
            "Events:              <none>",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_namespace_has_no_quota_and_no_limit_range() {
        let ns = json!({"metadata": {"name": "default",
            "labels": {"kubernetes.io/metadata.name": "default"}}, "status": {"phase": "Active"}});
        let out = namespace(&ns, Some(&[]), Some(&[]), &clock());
        let expected = [
            "Name:         default",
            "Labels:       kubernetes.io/metadata.name=default",
            "Annotations:  <none>",
            "Status:       Active",
            "",
            "No resource quota.",
            "",
            "No LimitRange resource.",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn quantities_print_in_canonical_form() {
        let shown = |s: &str| Amount::parse(&json!(s)).expect("a quantity").to_string();
        assert_eq!(shown("100m"), "100m");
        assert_eq!(shown("0.5"), "500m");
        assert_eq!(shown("2000m"), "2");
        assert_eq!(shown("128Mi"), "128Mi");
        assert_eq!(shown("1024Mi"), "1Gi");
        assert_eq!(shown("1536Mi"), "1536Mi");
        assert_eq!(shown("1000Ki"), "1000Ki");
        assert_eq!(shown("1000"), "1k");
        assert_eq!(shown("1200"), "1200");
        assert_eq!(shown("128M"), "128M");
        assert_eq!(shown("1e3"), "1e3");
        assert_eq!(shown("0"), "0");
        let sum = Amount::parse(&json!("64Mi"))
            .and_then(|a| Some(a.add(Amount::parse(&json!("64Mi"))?)))
            .expect("quantities");
        assert_eq!(sum.to_string(), "128Mi");
    }

    #[test]
    fn qos_class_is_computed_when_the_status_has_none() {
        let with = |resources: Value| json!({"spec": {"containers": [{"name": "a", "resources": resources}]}});
        assert_eq!(qos_class(&with(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&with(json!({"requests": {"cpu": "100m"}}))),
            "Burstable"
        );
        let both = json!({"cpu": "1", "memory": "1Gi"});
        assert_eq!(
            qos_class(&with(json!({"requests": both, "limits": both}))),
            "Guaranteed"
        );
    }

    #[test]
    fn probes_describe_their_action_and_timing() {
        let http = json!({"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "initialDelaySeconds": 5, "timeoutSeconds": 2, "periodSeconds": 3,
            "successThreshold": 1, "failureThreshold": 4});
        assert_eq!(
            describe_probe(&http),
            "http-get http://:8080/healthz delay=5s timeout=2s period=3s successThreshold=1 failureThreshold=4"
        );
        let tcp = json!({"tcpSocket": {"port": "web"}});
        assert_eq!(
            describe_probe(&tcp),
            "tcp-socket :web delay=0s timeout=0s period=0s successThreshold=0 failureThreshold=0"
        );
        let exec = json!({"exec": {"command": ["/bin/sh", "-c", "true"]}});
        assert!(describe_probe(&exec).starts_with("exec [/bin/sh -c true] delay=0s"));
    }

    #[test]
    fn a_restarted_container_shows_its_last_state_and_a_deleted_pod_is_terminating() {
        let mut p = running_pod();
        p["status"]["containerStatuses"][0]["restartCount"] = json!(2);
        p["status"]["containerStatuses"][0]["lastState"] = json!({"terminated": {
            "exitCode": 137, "reason": "Error", "startedAt": "2026-11-30T21:00:02Z",
            "finishedAt": "2026-11-30T21:01:00Z"}});
        p["metadata"]["deletionTimestamp"] = json!("2026-11-30T21:05:30Z");
        p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        let out = pod(&p, None, &clock());
        let text = out.replace(' ', "");
        for wanted in [
            "Status:Terminating(lasts<invalid>)",
            "TerminationGracePeriod:30s",
            "LastState:Terminated",
            "Reason:Error",
            "ExitCode:137",
            "Started:Mon,30Nov202621:00:02+0000",
            "Finished:Mon,30Nov202621:01:00+0000",
            "RestartCount:2",
        ] {
            assert!(
                text.lines().any(|l| l == wanted),
                "missing {wanted:?} in\n{out}"
            );
        }
        assert!(!out.contains("Events:"), "no events section without events");
    }

    #[test]
    fn event_series_and_missing_timestamps_read_like_kubectl() {
        let events = [
            json!({"type": "Warning", "reason": "BackOff", "message": " Back-off \n",
            "reportingComponent": "kubelet", "eventTime": "2026-11-30T21:00:00.000000Z",
            "series": {"count": 7, "lastObservedTime": "2026-11-30T21:04:00.000000Z"}}),
        ];
        let mut out = Out::default();
        describe_events(&mut out, &events, &clock());
        assert_eq!(
            out.finish(Layout::DESCRIBE),
            "Events:\n  Type     Reason   Age               From     Message\n  \
             ----     ------   ----              ----     -------\n  \
             Warning  BackOff  60s (x7 over 5m)  kubelet  Back-off\n"
        );
    }

    #[test]
    fn terminal_control_characters_are_escaped() {
        let ns = json!({"metadata": {"name": "x", "annotations": {"a": "\u{1b}[31mred\r"}},
            "status": {"phase": "Active"}});
        let out = namespace(&ns, Some(&[]), Some(&[]), &clock());
        assert!(out.contains("Annotations:  a: ^[[31mred\\r\n"), "{out}");
    }

    #[test]
    fn a_namespace_lists_its_quotas_and_limit_ranges_or_leaves_unserved_ones_out() {
        let ns = json!({"metadata": {"name": "team"}, "status": {"phase": "Active"}});
        assert_eq!(
            namespace(&ns, None, None, &clock()),
            "Name:         team\nLabels:       <none>\nAnnotations:  <none>\nStatus:       Active\n"
        );
        let quota = json!({"metadata": {"name": "q"}, "spec": {"scopes": ["BestEffort"]},
            "status": {"hard": {"pods": "10", "requests.cpu": "2"}, "used": {"pods": "3"}}});
        let limits = json!({"spec": {"limits": [{"type": "Container",
            "max": {"cpu": "1"}, "default": {"cpu": "500m", "memory": "256Mi"}}]}});
        let out = namespace(&ns, Some(&[quota]), Some(&[limits]), &clock());
        let expected = [
            "Name:         team",
            "Labels:       <none>",
            "Annotations:  <none>",
            "Status:       Active",
            "",
            "Resource Quotas",
            "  Name:    q",
            "  Scopes:  BestEffort",
            "  * Matches all pods that do not have resource requirements set. These pods have a best effort quality of service.",
            "  Resource      Used  Hard",
            "  --------      ---   ---",
            "  pods          3     10",
            "  requests.cpu  0     2",
            "",
            "Resource Limits",
            " Type       Resource  Min  Max  Default Request  Default Limit  Max Limit/Request Ratio",
            " ----       --------  ---  ---  ---------------  -------------  -----------------------",
            " Container  cpu       -    1    -                500m           -",
            " Container  memory    -    -    -                256Mi          -",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    /// An object and what kubectl 1.32 printed for it (`--show-events=false`), both
    /// recorded from a berth server.
    fn recorded(json: &str) -> Value {
        serde_json::from_str(json).expect("recorded JSON")
    }

    fn items(json: &str) -> Vec<Value> {
        recorded(json)["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn output_matches_what_kubectl_printed_for_the_same_objects() {
        let at = |t: &str| Clock::utc(t.parse().expect("a timestamp"));
        let clock = at("2026-11-30T21:34:00Z");
        let cases: [(&str, String, &str); 10] = [
            (
                "crash-looping pod",
                pod(
                    &recorded(include_str!("testdata/pod-crash.json")),
                    None,
                    &clock,
                ),
                include_str!("testdata/pod-crash.txt"),
            ),
            (
                "unschedulable pod",
                pod(
                    &recorded(include_str!("testdata/pod-stuck.json")),
                    None,
                    &clock,
                ),
                include_str!("testdata/pod-stuck.txt"),
            ),
            (
                "pod of an RC",
                pod(
                    &recorded(include_str!("testdata/pod-web.json")),
                    None,
                    &clock,
                ),
                include_str!("testdata/pod-web.txt"),
            ),
            (
                "RC",
                replication_controller(
                    &recorded(include_str!("testdata/rc-web.json")),
                    &items(include_str!("testdata/rc-web-pods.json")),
                    None,
                    &clock,
                ),
                include_str!("testdata/rc-web.txt"),
            ),
            (
                "autoscaler with three metrics and a behavior",
                horizontal_pod_autoscaler(
                    &recorded(include_str!("testdata/hpa.json")),
                    None,
                    &clock,
                ),
                include_str!("testdata/hpa.txt"),
            ),
            (
                "config map",
                config_map(&recorded(include_str!("testdata/cm.json")), None, &clock),
                include_str!("testdata/cm.txt"),
            ),
            (
                "secret",
                secret(&recorded(include_str!("testdata/secret.json"))),
                include_str!("testdata/secret.txt"),
            ),
            (
                "service account",
                service_account(
                    &recorded(include_str!("testdata/sa.json")),
                    Some(&items(include_str!("testdata/sa-secrets.json"))),
                    None,
                    &clock,
                ),
                include_str!("testdata/sa.txt"),
            ),
            (
                "lease (generic describer)",
                generic(&recorded(include_str!("testdata/lease.json")), None, &clock),
                include_str!("testdata/lease.txt"),
            ),
            (
                "namespace on a server without quotas",
                namespace(
                    &recorded(include_str!("testdata/ns.json")),
                    None,
                    None,
                    &clock,
                ),
                include_str!("testdata/ns.txt"),
            ),
        ];
        for (what, actual, expected) in cases {
            for (n, (a, e)) in actual.lines().zip(expected.lines()).enumerate() {
                assert_eq!(a, e, "{what}: line {} differs", n + 1);
            }
            assert_eq!(actual, expected, "{what}");
        }
    }

    #[test]
    fn field_names_become_kubectls_smart_labels() {
        assert_eq!(smart_label("apiVersion"), "API Version");
        assert_eq!(smart_label("lastObservedTime"), "Last Observed Time");
        assert_eq!(smart_label("uid"), "UID");
        assert_eq!(
            smart_label("leaseDurationSeconds"),
            "Lease Duration Seconds"
        );
        assert_eq!(smart_label("HTTPServer"), "HTTP Server");
        assert_eq!(smart_label("podIPs"), "Pod I Ps");
        assert_eq!(smart_label("x.y"), "x.y");
        assert_eq!(camel_case_split("GL11Version"), ["GL", "11", "Version"]);
    }

    #[test]
    fn a_service_account_marks_secrets_that_do_not_exist() {
        let sa = json!({"metadata": {"name": "app", "namespace": "default", "uid": "u1"},
            "secrets": [{"name": "gone"}, {"name": "here"}],
            "imagePullSecrets": [{"name": "pull"}]});
        let secrets = [
            json!({"metadata": {"name": "here"}, "type": "Opaque"}),
            json!({"metadata": {"name": "pull"}, "type": "kubernetes.io/dockerconfigjson"}),
            json!({"metadata": {"name": "app-token", "annotations": {
                "kubernetes.io/service-account.name": "app",
                "kubernetes.io/service-account.uid": "u1"}},
                "type": "kubernetes.io/service-account-token"}),
        ];
        let out = service_account(&sa, Some(&secrets), Some(&[]), &clock());
        let expected = [
            "Name:                app",
            "Namespace:           default",
            "Labels:              <none>",
            "Annotations:         <none>",
            "Image pull secrets:  pull",
            "Mountable secrets:   gone (not found)",
            "                     here",
            "Tokens:              app-token",
            "Events:              <none>",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }

    #[test]
    fn a_dc_whose_latest_rc_is_missing_shows_no_deployments() {
        let rcs = [deployment(1, "2026-11-30T21:00:00Z", 1, "Complete")];
        let mut dc = simple_dc();
        dc["status"]["latestVersion"] = json!(2);
        let out = deployment_config(&dc, &rcs, &[], None, &clock());
        assert!(
            out.ends_with("Tolerations:\t\t<none>\n\nLatest Deployment:\t<none>\n"),
            "{out}"
        );
    }

    #[test]
    fn the_only_deployment_is_shown_in_full_even_while_running() {
        let rcs = [deployment(1, "2026-11-30T21:04:00Z", 1, "Running")];
        let mut dc = simple_dc();
        dc["status"]["latestVersion"] = json!(1);
        let out = deployment_config(&dc, &rcs, &[], Some(&[]), &clock());
        let tail = [
            "Deployment #1 (latest):",
            "\tName:\t\tdeployment-simple-1",
            "\tCreated:\tabout a minute ago",
            "\tStatus:\t\tRunning",
            "\tReplicas:\t1 current / 1 desired",
            "\tSelector:\tdeployment=deployment-simple-1,deploymentconfig=deployment-simple,name=deployment-simple",
            "\tLabels:\t\topenshift.io/deployment-config.name=deployment-simple",
            "\tPods Status:\t0 Running / 0 Waiting / 0 Succeeded / 0 Failed",
            "",
            "Events:\t<none>",
            "",
        ]
        .join("\n");
        assert!(out.ends_with(&tail), "{out}");
    }

    #[test]
    fn events_of_the_same_second_come_in_the_order_kubectls_unstable_sort_leaves() {
        // 60 events listed R00..R59, seen at these seconds past 21:00, then a later one;
        // the expected order is what kubectl 1.32 printed for them.
        let seconds = "01 00 01 02 00 00 02 00 01 02 00 02 00 00 00 01 01 00 00 00 02 01 00 02 00 \
                       00 02 02 02 00 02 02 01 00 00 00 02 00 01 01 00 02 00 02 01 02 02 00 00 02 \
                       02 02 00 01 00 02 02 00 02 00";
        let mut events: Vec<Value> = seconds
            .split_whitespace()
            .enumerate()
            .map(|(i, s)| {
                let at = format!("2026-11-30T21:00:{s}Z");
                json!({"type": "Normal", "reason": format!("R{i:02}"), "message": "m",
                    "source": {"component": "c"}, "count": 1,
                    "firstTimestamp": at, "lastTimestamp": at})
            })
            .collect();
        events.push(json!({"type": "Warning", "reason": "Last", "message": "m",
            "source": {"component": "c"}, "count": 1,
            "firstTimestamp": "2026-11-30T21:00:12Z", "lastTimestamp": "2026-11-30T21:00:12Z"}));
        let mut out = Out::default();
        describe_events(&mut out, &events, &clock());
        let text = out.finish(Layout::DESCRIBE);
        let order: Vec<&str> = text
            .lines()
            .skip(3)
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        let expected = "R18 R42 R05 R07 R37 R19 R35 R59 R34 R54 R10 R33 R12 R13 R14 R40 R01 R17 \
                        R57 R29 R25 R04 R22 R48 R24 R52 R47 R44 R21 R39 R16 R15 R32 R53 R38 R08 \
                        R02 R00 R30 R36 R31 R41 R28 R43 R27 R45 R46 R26 R23 R49 R50 R51 R20 R11 \
                        R09 R55 R56 R06 R58 R03 Last";
        assert_eq!(
            order.join(" "),
            expected.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }

    #[test]
    fn go_sort_sorts_like_any_sort_apart_from_ties() {
        let mut v: Vec<u32> = (0..500).map(|i| (i * 7919 + 13) % 101).collect();
        let mut want = v.clone();
        want.sort();
        go_sort(&mut v, |a, b| a < b);
        assert_eq!(v, want);
        let mut desc: Vec<u32> = (0..300).rev().collect();
        go_sort(&mut desc, |a, b| a < b);
        assert_eq!(desc, (0..300).collect::<Vec<_>>());
    }

    #[test]
    fn a_job_names_its_counts_and_indexes_as_kubectl() {
        assert_eq!(cap_indexes("", 50), "<none>");
        assert_eq!(cap_indexes("1,3-5", 50), "1,3-5");
        let long: Vec<String> = (0..40).map(|i| (i * 2).to_string()).collect();
        let capped = cap_indexes(&long.join(","), 50);
        assert!(capped.ends_with(",..."), "{capped}");
        assert!(capped.len() > 50 && capped.len() < 60, "{capped}");
        let job = json!({
            "metadata": {"name": "pi", "namespace": "default",
                         "ownerReferences": [{"kind": "CronJob", "name": "tick", "controller": true}]},
            "spec": {"parallelism": 2, "completions": 4, "completionMode": "Indexed",
                     "suspend": false, "backoffLimit": 6, "template": {"spec": {"containers": []}}},
            "status": {"startTime": "2026-12-03T10:00:00Z", "completionTime": "2026-12-03T10:01:30Z",
                       "active": 1, "ready": 1, "succeeded": 3, "completedIndexes": "0-2"},
        });
        let text = job_text(&job);
        for want in [
            "Controlled By:  CronJob/tick",
            "Completion Mode:  Indexed",
            "Duration:  90s",
            "Pods Statuses:  1 Active (1 Ready) / 3 Succeeded / 0 Failed",
            "Completed Indexes:  0-2",
        ] {
            let squeezed: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let want: String = want.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(squeezed.contains(&want), "{want} in {text}");
        }
    }

    fn job_text(j: &Value) -> String {
        job(j, None, &Clock::system())
    }
}
