//! YAML as kubectl prints it: `sigs.k8s.io/yaml` turns the object into JSON and hands it to
//! go-yaml v2, whose emitter (a port of libyaml) picks each scalar's style, sorts map keys
//! in its "natural" order and folds long lines at 80 columns. serde_yaml_ng's emitter quotes
//! differently (`''` where go-yaml writes `""`, unquoted timestamps), so this emitter
//! follows go-yaml's rules instead.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::go::{self, Num};

const BEST_INDENT: usize = 2;
const BEST_WIDTH: usize = 80;

/// The YAML document of `v`, ending with a newline.
pub fn to_string(v: &Value) -> String {
    let mut e = Emitter {
        out: String::new(),
        column: 0,
        whitespace: true,
        indention: true,
    };
    e.node(v, Context::Root);
    // Document end: finish the last line.
    e.write_indent(0);
    e.out
}

#[derive(Clone, Copy)]
enum Context {
    Root,
    /// The value of a block mapping whose keys are at this indent.
    MappingValue(usize),
    /// An item of a block sequence whose dashes are at this indent.
    SequenceItem(usize),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
}

struct Emitter {
    out: String,
    column: usize,
    whitespace: bool,
    indention: bool,
}

impl Emitter {
    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    fn write_indent(&mut self, indent: usize) {
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    fn write_indicator(
        &mut self,
        s: &str,
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        for c in s.chars() {
            self.put(c);
        }
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    fn node(&mut self, v: &Value, ctx: Context) {
        // The indent of this node's own block, or of a scalar's continuation lines.
        let (block_indent, scalar_indent) = match ctx {
            Context::Root => (0, BEST_INDENT),
            Context::MappingValue(m) => (m + BEST_INDENT, m + BEST_INDENT),
            Context::SequenceItem(s) => (s + BEST_INDENT, s + BEST_INDENT),
        };
        match v {
            Value::Object(m) if !m.is_empty() => self.mapping(m, block_indent),
            Value::Array(a) if !a.is_empty() => {
                // A sequence inside a mapping is "indentless": its dashes line up with the keys.
                let indent = match ctx {
                    Context::MappingValue(m) => m,
                    _ => block_indent,
                };
                self.sequence(a, indent);
            }
            Value::Object(_) => {
                self.write_indicator("{", true, true, false);
                self.write_indicator("}", false, false, false);
            }
            Value::Array(_) => {
                self.write_indicator("[", true, true, false);
                self.write_indicator("]", false, false, false);
            }
            Value::Null => self.plain("null", scalar_indent, false),
            Value::Bool(b) => self.plain(if *b { "true" } else { "false" }, scalar_indent, false),
            Value::Number(n) => {
                let text = number(n);
                self.plain(&text, scalar_indent, false);
            }
            Value::String(s) => self.string(s, scalar_indent, false),
        }
    }

    fn mapping(&mut self, m: &Map<String, Value>, indent: usize) {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort_by(|a, b| natural(a, b));
        for k in keys {
            self.write_indent(indent);
            self.string(k, indent + BEST_INDENT, true);
            self.write_indicator(":", false, false, false);
            self.node(&m[k.as_str()], Context::MappingValue(indent));
        }
    }

    fn sequence(&mut self, a: &[Value], indent: usize) {
        for item in a {
            self.write_indent(indent);
            self.write_indicator("-", true, false, true);
            self.node(item, Context::SequenceItem(indent));
        }
    }

    fn string(&mut self, s: &str, indent: usize, simple_key: bool) {
        let a = analyze(s);
        let mut style = if s.contains('\n') {
            Style::Literal
        } else if resolves_to_string(s) {
            Style::Plain
        } else {
            Style::DoubleQuoted
        };
        if style == Style::Plain && (!a.block_plain_allowed || (s.is_empty() && simple_key)) {
            style = Style::SingleQuoted;
        }
        if style == Style::SingleQuoted && !a.single_quoted_allowed {
            style = Style::DoubleQuoted;
        }
        if style == Style::Literal && (!a.block_allowed || simple_key) {
            style = Style::DoubleQuoted;
        }
        let allow_breaks = !simple_key;
        match style {
            Style::Plain => self.plain(s, indent, allow_breaks),
            Style::SingleQuoted => self.single_quoted(s, indent, allow_breaks),
            Style::DoubleQuoted => self.double_quoted(s, indent, allow_breaks),
            Style::Literal => self.literal(s, indent),
        }
    }

    fn plain(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        if !self.whitespace {
            self.put(' ');
        }
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let next_space = chars.get(i + 1) == Some(&' ');
                if allow_breaks && !spaces && self.column > BEST_WIDTH && !next_space {
                    self.write_indent(indent);
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                self.indention = false;
                spaces = false;
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn single_quoted(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        self.write_indicator("'", true, false, false);
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let inner = i != 0 && i + 1 != chars.len();
                let next_space = chars.get(i + 1) == Some(&' ');
                if allow_breaks && !spaces && self.column > BEST_WIDTH && inner && !next_space {
                    self.write_indent(indent);
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                if c == '\'' {
                    self.put('\'');
                }
                self.put(c);
                self.indention = false;
                spaces = false;
            }
        }
        self.write_indicator("'", false, false, false);
    }

    fn double_quoted(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        self.write_indicator("\"", true, false, false);
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if !printable(c) || c == '\u{feff}' || is_break(c) || c == '"' || c == '\\' {
                self.put('\\');
                let escaped = match c {
                    '\0' => "0".to_string(),
                    '\u{7}' => "a".to_string(),
                    '\u{8}' => "b".to_string(),
                    '\t' => "t".to_string(),
                    '\n' => "n".to_string(),
                    '\u{b}' => "v".to_string(),
                    '\u{c}' => "f".to_string(),
                    '\r' => "r".to_string(),
                    '\u{1b}' => "e".to_string(),
                    '"' => "\"".to_string(),
                    '\\' => "\\".to_string(),
                    '\u{85}' => "N".to_string(),
                    '\u{a0}' => "_".to_string(),
                    '\u{2028}' => "L".to_string(),
                    '\u{2029}' => "P".to_string(),
                    c if (c as u32) <= 0xff => format!("x{:02X}", c as u32),
                    c if (c as u32) <= 0xffff => format!("u{:04X}", c as u32),
                    c => format!("U{:08X}", c as u32),
                };
                for e in escaped.chars() {
                    self.put(e);
                }
                spaces = false;
            } else if c == ' ' {
                let inner = i != 0 && i + 1 != chars.len();
                if allow_breaks && !spaces && self.column > BEST_WIDTH && inner {
                    self.write_indent(indent);
                    if chars.get(i + 1) == Some(&' ') {
                        self.put('\\');
                    }
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                spaces = false;
            }
        }
        self.write_indicator("\"", false, false, false);
    }

    fn literal(&mut self, s: &str, indent: usize) {
        self.write_indicator("|", true, false, false);
        let chars: Vec<char> = s.chars().collect();
        if chars.first().is_some_and(|&c| c == ' ' || is_break(c)) {
            self.write_indicator(&BEST_INDENT.to_string(), false, false, false);
        }
        let n = chars.len();
        let chomp = if n == 0 || !is_break(chars[n - 1]) {
            Some("-")
        } else if n == 1 || is_break(chars[n - 2]) {
            Some("+")
        } else {
            None
        };
        if let Some(h) = chomp {
            self.write_indicator(h, false, false, false);
        }
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        for &c in &chars {
            if is_break(c) {
                if c == '\n' {
                    self.put_break();
                } else {
                    self.out.push(c);
                    self.column = 0;
                }
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent(indent);
                }
                self.put(c);
                self.indention = false;
                breaks = false;
            }
        }
    }
}

/// A number as go-yaml writes what `encoding/json` wrote: integers stay integers (a float
/// with an integral value comes back from JSON as one), other floats use `%g`.
fn number(n: &serde_json::Number) -> String {
    match go::num(n) {
        Num::Int(i) => i.to_string(),
        Num::Float(f) => {
            let j = go::float_json(f);
            if j.trim_start_matches('-')
                .chars()
                .all(|c| c.is_ascii_digit())
                && j.parse::<i64>().is_ok()
            {
                j
            } else {
                go::float_g(f)
            }
        }
    }
}

/// libyaml's `IS_PRINTABLE`.
fn printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0a
        || (0x20..=0x7e).contains(&u)
        || (0xa0..=0xd7ff).contains(&u)
        || ((0xe000..=0xfffd).contains(&u) && u != 0xfeff)
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blankz(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => c == ' ' || c == '\t' || c == '\0' || is_break(c),
    }
}

struct Analysis {
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

/// libyaml's `yaml_emitter_analyze_scalar`, for block context.
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break, mut previous_space, mut previous_break) =
        (false, false, false, false);
    let (mut line_breaks, mut special) = (false, false);
    let mut preceded_by_whitespace = true;
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_whitespace = is_blankz(chars.get(i + 1).copied());
        let first = i == 0;
        let last = i + 1 == chars.len();
        if first {
            if "#,[]{}&*!|>'\"%@`".contains(c) {
                block_indicators = true;
            }
            if (c == '?' || c == ':' || c == '-') && followed_by_whitespace {
                block_indicators = true;
            }
        } else if (c == ':' && followed_by_whitespace) || (c == '#' && preceded_by_whitespace) {
            block_indicators = true;
        }
        if !printable(c) || c == '\u{feff}' {
            special = true;
        }
        if is_break(c) {
            line_breaks = true;
        }
        if c == ' ' {
            leading_space |= first;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            leading_break |= first;
            trailing_break |= last;
            space_break |= previous_space;
            previous_break = true;
            previous_space = false;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = is_blankz(Some(c));
    }
    let mut a = Analysis {
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks || block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// Whether go-yaml reads `s`, written plain, back as a string (not a bool, null, number or
/// timestamp, nor a YAML 1.1 base-60 float).
fn resolves_to_string(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", "n", "N", "no",
        "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", "", "~", "null", "Null",
        "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF",
    ];
    if SPECIAL.contains(&s) {
        return false;
    }
    let Some(first) = s.chars().next() else {
        return false;
    };
    match first {
        '.' => !go_parse_float(s),
        '+' | '-' | '0'..='9' => {
            if timestamp(s) {
                return false;
            }
            let plain = s.replace('_', "");
            !(go_int(&plain) || yaml_float(&plain) || binary(&plain) || base60(s))
        }
        _ => !base60(s),
    }
}

fn all(s: &str, f: impl Fn(char) -> bool) -> bool {
    !s.is_empty() && s.chars().all(f)
}

/// `strconv.ParseInt(s, 0, 64)` or `ParseUint` succeeding (ranges aside).
fn go_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = body.to_ascii_lowercase();
    if let Some(h) = lower.strip_prefix("0x") {
        all(h, |c| c.is_ascii_hexdigit())
    } else if let Some(o) = lower.strip_prefix("0o") {
        all(o, |c| ('0'..='7').contains(&c))
    } else if let Some(b) = lower.strip_prefix("0b") {
        all(b, |c| c == '0' || c == '1')
    } else if body.starts_with('0') && body.len() > 1 {
        all(&body[1..], |c| ('0'..='7').contains(&c))
    } else {
        all(body, |c| c.is_ascii_digit())
    }
}

fn binary(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    body.strip_prefix("0b")
        .is_some_and(|b| all(b, |c| c == '0' || c == '1'))
}

/// go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mantissa_ok = if let Some(frac) = mantissa.strip_prefix('.') {
        all(frac, |c| c.is_ascii_digit())
    } else {
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        all(int, |c| c.is_ascii_digit()) && frac.chars().all(|c| c.is_ascii_digit())
    };
    let exp_ok = exp.is_none_or(|e| {
        all(e.strip_prefix(['+', '-']).unwrap_or(e), |c| {
            c.is_ascii_digit()
        })
    });
    mantissa_ok && exp_ok
}

/// `strconv.ParseFloat` for text starting with a dot.
fn go_parse_float(s: &str) -> bool {
    yaml_float(s)
}

/// go-yaml's base-60 float `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
fn base60(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = match s.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (s, None),
    };
    if frac.is_some_and(|f| !f.chars().all(|c| c.is_ascii_digit() || c == '_')) {
        return false;
    }
    let mut parts = main.split(':');
    let head = parts.next().unwrap_or("");
    if !head.starts_with(|c: char| c.is_ascii_digit())
        || !head.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return false;
    }
    let rest: Vec<&str> = parts.collect();
    !rest.is_empty()
        && rest.iter().all(|p| {
            let b = p.as_bytes();
            match b.len() {
                1 => b[0].is_ascii_digit(),
                2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
                _ => false,
            }
        })
}

/// go-yaml's timestamp forms: `2006-1-2`, `2006-1-2T15:4:5.999999999Z07:00` (also `t`) and
/// `2006-1-2 15:4:5.999999999`.
fn timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let mut p = Cursor { b, i: 5 };
    let Some(month) = p.num(1, 2) else {
        return false;
    };
    if !p.eat(b'-') {
        return false;
    }
    let Some(day) = p.num(1, 2) else {
        return false;
    };
    let year: u32 = s[..4].parse().unwrap_or(0);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return false;
    }
    if p.done() {
        return true;
    }
    let zoned = match b[p.i] {
        b'T' | b't' => true,
        b' ' => false,
        _ => return false,
    };
    p.i += 1;
    let (Some(h), true, Some(m), true, Some(sec)) = (
        p.num(1, 2),
        p.eat(b':'),
        p.num(1, 2),
        p.eat(b':'),
        p.num(1, 2),
    ) else {
        return false;
    };
    if h > 23 || m > 59 || sec > 59 {
        return false;
    }
    if p.eat(b'.') && p.num(1, 9).is_none() {
        return false;
    }
    if !zoned {
        return p.done();
    }
    if p.eat(b'Z') {
        return p.done();
    }
    if !(p.eat(b'+') || p.eat(b'-')) {
        return false;
    }
    let (Some(zh), true, Some(zm)) = (p.num(2, 2), p.eat(b':'), p.num(2, 2)) else {
        return false;
    };
    zh <= 24 && zm <= 59 && p.done()
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn num(&mut self, min: usize, max: usize) -> Option<u32> {
        let start = self.i;
        while self.i < self.b.len() && self.i - start < max && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        if self.i - start < min {
            return None;
        }
        std::str::from_utf8(&self.b[start..self.i])
            .ok()?
            .parse()
            .ok()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn done(&self) -> bool {
        self.i == self.b.len()
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// go-yaml's key order: letters compare as characters, but a run of digits compares as a
/// number, and a non-letter sorts before a letter.
fn natural(a: &str, b: &str) -> Ordering {
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            continue;
        }
        let al = ar[i].is_alphabetic();
        let bl = br[i].is_alphabetic();
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an
                .saturating_mul(10)
                .saturating_add(i64::from(ar[ai] as u8 - b'0'));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn
                .saturating_mul(10)
                .saturating_add(i64::from(br[bi] as u8 - b'0'));
            bi += 1;
        }
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_prints_like_kubectl_get_o_yaml() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "resourceVersion": "12",
                "creationTimestamp": "2024-05-01T10:00:00Z", "labels": {"app": "web"},
                "annotations": {"note": "line one\nline two\n"}},
            "spec": {"containers": [{"name": "app", "image": "busybox",
                "command": ["sh", "-c", "sleep 3600"], "resources": {}, "ports": [{"containerPort": 80}]}],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 30},
            "status": {"phase": "Running", "podIP": "", "startTime": null, "ready": true}
        });
        assert_eq!(
            to_string(&pod),
            "apiVersion: v1
kind: Pod
metadata:
  annotations:
    note: |
      line one
      line two
  creationTimestamp: \"2024-05-01T10:00:00Z\"
  labels:
    app: web
  name: web-1
  namespace: default
  resourceVersion: \"12\"
spec:
  containers:
  - command:
    - sh
    - -c
    - sleep 3600
    image: busybox
    name: app
    ports:
    - containerPort: 80
    resources: {}
  restartPolicy: Always
  terminationGracePeriodSeconds: 30
status:
  phase: Running
  podIP: \"\"
  ready: true
  startTime: null
"
        );
    }

    #[test]
    fn ambiguous_strings_are_double_quoted_and_indicators_single_quoted() {
        let v = json!({"a": "true", "b": "yes", "c": "1.5", "d": "0x1F", "e": "*", "f": "a: b",
            "g": "- x", "h": "it's", "i": "tab\there", "j": "1:20", "k": "2024-01-02", "l": "v1.2"});
        assert_eq!(
            to_string(&v),
            "a: \"true\"\nb: \"yes\"\nc: \"1.5\"\nd: \"0x1F\"\ne: '*'\nf: 'a: b'\ng: '- x'\nh: it's\ni: \"tab\\there\"\nj: \"1:20\"\nk: \"2024-01-02\"\nl: v1.2\n"
        );
    }

    #[test]
    fn long_lines_fold_past_eighty_columns() {
        // libyaml breaks at the first space once the line is longer than 80 columns.
        let msg = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.";
        let v = json!({"status": {"conditions": [{"message": msg, "type": "PodScheduled"}]}});
        assert_eq!(
            to_string(&v),
            "status:\n  conditions:\n  - message: '0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are\n      available: 3 No preemption victims found for incoming pod.'\n    type: PodScheduled\n"
        );
    }

    #[test]
    fn nested_sequences_top_level_values_and_chomping() {
        assert_eq!(
            to_string(&json!([[1, 2], {"a": []}])),
            "- - 1\n  - 2\n- a: []\n"
        );
        assert_eq!(to_string(&json!({})), "{}\n");
        assert_eq!(to_string(&json!("x")), "x\n");
        assert_eq!(to_string(&json!({"s": "a\nb"})), "s: |-\n  a\n  b\n");
        assert_eq!(
            to_string(&json!({"s": "a\n\nb\n\n"})),
            "s: |+\n  a\n\n  b\n\n"
        );
        assert_eq!(to_string(&json!({"s": " x\ny"})), "s: |2-\n   x\n  y\n");
        assert_eq!(
            to_string(&json!({"f": 2.5, "g": 1e21, "i": -3})),
            "f: 2.5\ng: 1e+21\ni: -3\n"
        );
    }

    #[test]
    fn keys_sort_in_go_yaml_natural_order() {
        let v = json!({"a10": 1, "a2": 2, "a_b": 3, "aB": 4, "\"q": 5});
        assert_eq!(to_string(&v), "'\"q': 5\na_b: 3\na2: 2\na10: 1\naB: 4\n");
    }
}
