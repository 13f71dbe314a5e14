//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! decoded to the JSON objects the rest of berth works with. Typed clients, and so kubectl's
//! generators (`kubectl create configmap|secret|namespace|serviceaccount`) and `kubectl
//! drain`'s DeleteOptions, send them.
//!
//! A body is the magic `k8s\0` followed by a `runtime.Unknown` message: the object's
//! apiVersion and kind, and its own message in `raw`. That message is read against the
//! descriptors of `protobuf_schema` (field number → JSON name and encoding); what the
//! descriptors do not know is skipped by its wire type. Answers stay JSON.
//!
//! The JSON is the one kube-apiserver's Go types would give for the same message. Go's
//! gogo-protobuf writes every non-pointer scalar, zero or not, but a Go field that is not a
//! pointer and has `omitempty` in its json tag leaves a zero out of JSON (`stdin: false`,
//! `metadata.generation: 0`): such fields are `omitempty` in the descriptors and their zero
//! values are left out here too. Pointer fields (`*int32 replicas`) and fields without
//! `omitempty` keep them. One difference remains: a zero `metav1.Time` is left out, where Go
//! writes `null` unless the field is `omitzero` (as `metadata.creationTimestamp` is).

use base64::Engine;
use serde_json::{Map, Number, Value};

use super::protobuf_schema::ROOTS;

/// The first bytes of every protobuf-encoded Kubernetes object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Nesting deeper than this is refused rather than followed (the deepest real object is
/// about a dozen levels deep).
const MAX_DEPTH: usize = 64;

/// How many distinct unknown fields the log of one body names.
const MAX_SKIPPED_NAMED: usize = 16;

/// How a field's value is encoded, and what it becomes in JSON.
#[derive(Clone, Copy)]
pub enum Kind {
    /// `string`: a JSON string.
    Str,
    /// `int32`/`int64` varint: a JSON number.
    Int,
    /// `bool` varint.
    Bool,
    /// `bytes`: a base64 JSON string.
    Bytes,
    /// `resource.Quantity` {string}: its string.
    Quantity,
    /// `intstr.IntOrString` {type, intVal, strVal}: a JSON number or string.
    IntOrString,
    /// `metav1.Time` {seconds, nanos}: RFC 3339 in whole seconds; empty is the zero time.
    Time,
    /// `metav1.MicroTime` {seconds, nanos}: RFC 3339 with microseconds.
    MicroTime,
    /// `runtime.RawExtension` / `metav1.FieldsV1` {bytes raw}: the JSON it holds.
    RawJson,
    /// A nested message: a JSON object.
    Message(&'static Message),
}

/// How often a field occurs.
#[derive(Clone, Copy)]
enum Card {
    One,
    Repeated,
    /// `map<string, V>`: repeated entries {1: key, 2: value}, a JSON object.
    Map,
    /// A Go struct embedded in its parent: its fields join the parent's JSON object.
    Inline,
}

/// One field of a message.
pub struct Field {
    number: u32,
    json: &'static str,
    kind: Kind,
    card: Card,
    /// A zero value (false, 0, empty string or bytes) is left out of the JSON: the Go field is
    /// a non-pointer scalar with `omitempty`.
    omit_zero: bool,
}

/// A message: its fields, sorted by number.
pub struct Message {
    /// The proto name, for error messages and logs.
    pub name: &'static str,
    pub fields: &'static [Field],
}

impl Message {
    fn field(&self, number: u32) -> Option<&Field> {
        self.fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &self.fields[i])
    }
}

/// A field that occurs once and keeps its value in JSON even when it is the zero value.
pub const fn one(number: u32, json: &'static str, kind: Kind) -> Field {
    Field {
        number,
        json,
        kind,
        card: Card::One,
        omit_zero: false,
    }
}

/// A scalar field that occurs once and is left out of JSON when it is the zero value, as a
/// non-pointer Go field with `json:",omitempty"` is.
pub const fn omitempty(number: u32, json: &'static str, kind: Kind) -> Field {
    Field {
        number,
        json,
        kind,
        card: Card::One,
        omit_zero: true,
    }
}

pub const fn rep(number: u32, json: &'static str, kind: Kind) -> Field {
    Field {
        number,
        json,
        kind,
        card: Card::Repeated,
        omit_zero: false,
    }
}

pub const fn map(number: u32, json: &'static str, value: Kind) -> Field {
    Field {
        number,
        json,
        kind: value,
        card: Card::Map,
        omit_zero: false,
    }
}

pub const fn inline(number: u32, embedded: &'static Message) -> Field {
    Field {
        number,
        json: "",
        kind: Kind::Message(embedded),
        card: Card::Inline,
        omit_zero: false,
    }
}

/// Why a protobuf body could not be read.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// Not the protobuf encoding, or broken: a 400.
    #[error("the body of the request is not a valid protobuf-encoded object: {0}")]
    Malformed(String),
    /// A kind berth has no protobuf descriptors for: a 415.
    #[error(
        "protobuf request bodies of kind {kind:?} (apiVersion {api_version:?}) are not supported - send the object as JSON instead (with kubectl: kubectl apply -f FILE, or kubectl create ... --dry-run=client -o json | kubectl apply -f -)"
    )]
    UnknownKind { api_version: String, kind: String },
    /// An encoding inside the envelope berth does not read: a 415.
    #[error(
        "protobuf request bodies with content encoding {0:?} are not supported - send the object as JSON"
    )]
    ContentEncoding(String),
}

fn malformed(msg: impl Into<String>) -> DecodeError {
    DecodeError::Malformed(msg.into())
}

/// Whether a body is a protobuf-encoded object.
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(MAGIC)
}

/// Decodes a protobuf-encoded object into its JSON form, `apiVersion` and `kind` included.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| malformed("it does not start with the protobuf magic \"k8s\\0\""))?;
    let (api_version, kind, raw, encoding) = unknown(envelope)?;
    if !encoding.is_empty() {
        return Err(DecodeError::ContentEncoding(encoding));
    }
    let msg = ROOTS
        .iter()
        .find(|(v, k, _)| (*v == api_version || *v == "*") && *k == kind)
        .map(|(_, _, m)| *m)
        .ok_or_else(|| DecodeError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let mut skipped = Vec::new();
    let fields = message(msg, raw, 0, &mut skipped)?;
    if !skipped.is_empty() {
        tracing::warn!(
            %kind,
            skipped = %skipped.join(", "),
            "a protobuf body had fields this server does not know; they were left out"
        );
    }
    let mut obj = Map::with_capacity(fields.len() + 2);
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind));
    obj.extend(fields);
    Ok(Value::Object(obj))
}

/// The parts of a `runtime.Unknown`: apiVersion, kind, raw and contentEncoding.
fn unknown(buf: &[u8]) -> Result<(String, String, &[u8], String), DecodeError> {
    let (mut api_version, mut kind, mut raw, mut encoding) =
        (String::new(), String::new(), &[][..], String::new());
    let mut r = Reader::new(buf);
    while let Some((number, wire)) = r.key()? {
        match (number, wire) {
            (1, LEN) => {
                let mut t = Reader::new(r.len_delimited()?);
                while let Some((number, wire)) = t.key()? {
                    match (number, wire) {
                        (1, LEN) => api_version = string(t.len_delimited()?, "apiVersion")?,
                        (2, LEN) => kind = string(t.len_delimited()?, "kind")?,
                        _ => t.skip(wire)?,
                    }
                }
            }
            (2, LEN) => raw = r.len_delimited()?,
            (3, LEN) => encoding = string(r.len_delimited()?, "contentEncoding")?,
            _ => r.skip(wire)?,
        }
    }
    if kind.is_empty() {
        return Err(malformed("the envelope names no kind"));
    }
    Ok((api_version, kind, raw, encoding))
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// The protobuf wire format, read from a byte slice.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for (i, &b) in self.buf.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.buf = &self.buf[i + 1..];
                return Ok(v);
            }
        }
        Err(malformed(if self.buf.len() < 10 {
            "a varint is cut short"
        } else {
            "a varint is longer than 10 bytes"
        }))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(malformed(format!(
                "a field of {n} bytes is cut short ({} left)",
                self.buf.len()
            )));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| malformed("a length does not fit in memory"))?;
        self.take(n)
    }

    /// The next field's number and wire type; None at the end.
    fn key(&mut self) -> Result<Option<(u32, u8)>, DecodeError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n > 0 && *n < (1 << 29))
            .ok_or_else(|| malformed(format!("field number {} is out of range", key >> 3)))?;
        Ok(Some((number, (key & 7) as u8)))
    }

    /// Steps over a value of a field this decoder does not know.
    fn skip(&mut self, wire: u8) -> Result<(), DecodeError> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.len_delimited().map(drop),
            FIXED32 => self.take(4).map(drop),
            other => Err(malformed(format!(
                "wire type {other} is not used by Kubernetes objects"
            ))),
        }
    }
}

fn string(b: &[u8], what: &str) -> Result<String, DecodeError> {
    String::from_utf8(b.to_vec()).map_err(|_| malformed(format!("{what} is not valid UTF-8")))
}

/// The JSON fields of one message.
fn message(
    msg: &Message,
    buf: &[u8],
    depth: usize,
    skipped: &mut Vec<String>,
) -> Result<Map<String, Value>, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(malformed(format!(
            "messages are nested more than {MAX_DEPTH} deep"
        )));
    }
    let mut out = Map::new();
    let mut r = Reader::new(buf);
    while let Some((number, wire)) = r.key()? {
        let Some(field) = msg.field(number) else {
            r.skip(wire)?;
            let name = format!("{} field {number}", msg.name);
            if skipped.len() < MAX_SKIPPED_NAMED && !skipped.contains(&name) {
                skipped.push(name);
            }
            continue;
        };
        let what = || format!("{}.{}", msg.name, field.json);
        match field.card {
            Card::One => {
                let Some(v) = single(field.kind, wire, &mut r, depth, skipped, &what)? else {
                    continue;
                };
                if field.omit_zero && is_zero(&v) {
                    // Go writes every non-pointer scalar; its JSON leaves this one out.
                    out.remove(field.json);
                    continue;
                }
                match out.get_mut(field.json) {
                    // A message that comes in parts is merged, as protobuf does.
                    Some(Value::Object(old)) if v.is_object() => {
                        if let Value::Object(new) = v {
                            old.extend(new);
                        }
                    }
                    _ => {
                        out.insert(field.json.to_string(), v);
                    }
                }
            }
            Card::Repeated => {
                let mut list = match out.remove(field.json) {
                    Some(Value::Array(list)) => list,
                    _ => Vec::new(),
                };
                match (field.kind, wire) {
                    // Packed numbers and booleans.
                    (Kind::Int | Kind::Bool, LEN) => {
                        let mut p = Reader::new(r.len_delimited()?);
                        while !p.buf.is_empty() {
                            list.push(scalar(field.kind, p.varint()?));
                        }
                    }
                    _ => {
                        let v = single(field.kind, wire, &mut r, depth, skipped, &what)?;
                        list.push(v.unwrap_or(Value::Null));
                    }
                }
                out.insert(field.json.to_string(), Value::Array(list));
            }
            Card::Map => {
                expect(wire, LEN, &what)?;
                let (key, value) = entry(field.kind, r.len_delimited()?, depth, skipped, &what)?;
                let map = out
                    .entry(field.json)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
            Card::Inline => {
                expect(wire, LEN, &what)?;
                let Kind::Message(inner) = field.kind else {
                    unreachable!("only messages are inlined")
                };
                let fields = message(inner, r.len_delimited()?, depth + 1, skipped)?;
                out.extend(fields);
            }
        }
    }
    Ok(out)
}

/// Whether a scalar's JSON is its zero value: false, 0 or an empty string (or bytes).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn expect(wire: u8, want: u8, what: &dyn Fn() -> String) -> Result<(), DecodeError> {
    if wire == want {
        Ok(())
    } else {
        Err(malformed(format!(
            "{} has wire type {wire}, not {want}",
            what()
        )))
    }
}

fn scalar(kind: Kind, v: u64) -> Value {
    match kind {
        Kind::Bool => Value::Bool(v != 0),
        // int32 and int64 are both sent as the 64-bit two's complement.
        _ => Value::Number((v as i64).into()),
    }
}

/// One value of a field; None for a zero time, which JSON leaves out.
fn single(
    kind: Kind,
    wire: u8,
    r: &mut Reader,
    depth: usize,
    skipped: &mut Vec<String>,
    what: &dyn Fn() -> String,
) -> Result<Option<Value>, DecodeError> {
    if let Kind::Int | Kind::Bool = kind {
        expect(wire, VARINT, what)?;
        return Ok(Some(scalar(kind, r.varint()?)));
    }
    expect(wire, LEN, what)?;
    value(kind, r.len_delimited()?, depth, skipped, what)
}

/// A length-delimited value.
fn value(
    kind: Kind,
    b: &[u8],
    depth: usize,
    skipped: &mut Vec<String>,
    what: &dyn Fn() -> String,
) -> Result<Option<Value>, DecodeError> {
    Ok(Some(match kind {
        Kind::Str => Value::String(string(b, &what())?),
        Kind::Bytes => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Kind::Quantity => {
            let mut q = String::new();
            let mut r = Reader::new(b);
            while let Some((number, wire)) = r.key()? {
                match (number, wire) {
                    (1, LEN) => q = string(r.len_delimited()?, &what())?,
                    _ => r.skip(wire)?,
                }
            }
            Value::String(if q.is_empty() { "0".into() } else { q })
        }
        Kind::IntOrString => {
            let (mut ty, mut int, mut text) = (0, 0, String::new());
            let mut r = Reader::new(b);
            while let Some((number, wire)) = r.key()? {
                match (number, wire) {
                    (1, VARINT) => ty = r.varint()? as i64,
                    (2, VARINT) => int = r.varint()? as i64 as i32,
                    (3, LEN) => text = string(r.len_delimited()?, &what())?,
                    _ => r.skip(wire)?,
                }
            }
            match ty {
                1 => Value::String(text),
                _ => Value::Number(int.into()),
            }
        }
        Kind::Time | Kind::MicroTime => {
            if b.is_empty() {
                return Ok(None);
            }
            let (mut seconds, mut nanos) = (0i64, 0i32);
            let mut r = Reader::new(b);
            while let Some((number, wire)) = r.key()? {
                match (number, wire) {
                    (1, VARINT) => seconds = r.varint()? as i64,
                    (2, VARINT) => nanos = r.varint()? as i64 as i32,
                    _ => r.skip(wire)?,
                }
            }
            Value::String(
                timestamp(kind, seconds, nanos).ok_or_else(|| {
                    malformed(format!("{} is not a valid time ({seconds}s)", what()))
                })?,
            )
        }
        Kind::RawJson => {
            let mut raw: &[u8] = &[];
            let mut r = Reader::new(b);
            while let Some((number, wire)) = r.key()? {
                match (number, wire) {
                    (1, LEN) => raw = r.len_delimited()?,
                    _ => r.skip(wire)?,
                }
            }
            if raw.is_empty() {
                return Ok(None);
            }
            serde_json::from_slice(raw)
                .map_err(|e| malformed(format!("{} does not hold JSON: {e}", what())))?
        }
        Kind::Message(inner) => Value::Object(message(inner, b, depth + 1, skipped)?),
        Kind::Int | Kind::Bool => unreachable!("varints are read by `single`"),
    }))
}

/// Time: whole seconds (as the API server keeps them); MicroTime: microseconds.
fn timestamp(kind: Kind, seconds: i64, nanos: i32) -> Option<String> {
    let nanos = if let Kind::MicroTime = kind {
        nanos / 1000 * 1000
    } else {
        0
    };
    let t = jiff::Timestamp::new(seconds, nanos).ok()?;
    let format = if let Kind::MicroTime = kind {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Some(t.strftime(format).to_string())
}

/// A map entry {1: key, 2: value}; a missing value is the zero value of its kind.
fn entry(
    kind: Kind,
    b: &[u8],
    depth: usize,
    skipped: &mut Vec<String>,
    what: &dyn Fn() -> String,
) -> Result<(String, Value), DecodeError> {
    let (mut key, mut val) = (String::new(), None);
    let mut r = Reader::new(b);
    while let Some((number, wire)) = r.key()? {
        match number {
            1 => {
                expect(wire, LEN, what)?;
                key = string(r.len_delimited()?, &what())?;
            }
            2 => val = single(kind, wire, &mut r, depth, skipped, what)?,
            _ => r.skip(wire)?,
        }
    }
    let val = match val {
        Some(v) => v,
        None => match kind {
            Kind::Str | Kind::Bytes => Value::String(String::new()),
            Kind::Int => Value::Number(Number::from(0)),
            Kind::Bool => Value::Bool(false),
            Kind::Quantity => Value::String("0".into()),
            Kind::IntOrString => Value::Number(Number::from(0)),
            Kind::Message(_) => Value::Object(Map::new()),
            Kind::Time | Kind::MicroTime | Kind::RawJson => Value::Null,
        },
    };
    Ok((key, val))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A body kubectl sent, by name, from the recordings in `protobuf_kubectl.hex`.
    fn recorded(name: &str) -> &'static str {
        include_str!("protobuf_kubectl.hex")
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no recording {name}"))
    }

    /// The DeleteOptions of `kubectl drain NODE --disable-eviction --grace-period=3`.
    const KUBECTL_DELETE_OPTIONS: &str =
        "6b3873000a130a027631120d44656c6574654f7074696f6e73120208031a002200";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // A small encoder for hand-built messages.
    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }
    fn key(number: u32, wire: u8) -> Vec<u8> {
        varint(u64::from(number) << 3 | u64::from(wire))
    }
    fn num(number: u32, v: i64) -> Vec<u8> {
        [key(number, VARINT), varint(v as u64)].concat()
    }
    fn ld(number: u32, b: impl AsRef<[u8]>) -> Vec<u8> {
        let b = b.as_ref();
        [key(number, LEN), varint(b.len() as u64), b.to_vec()].concat()
    }
    fn entry(number: u32, k: &str, v: impl AsRef<[u8]>) -> Vec<u8> {
        ld(number, [ld(1, k), ld(2, v)].concat())
    }
    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [ld(1, api_version), ld(2, kind)].concat();
        [
            &MAGIC[..],
            &ld(1, type_meta),
            &ld(2, raw),
            &ld(3, ""),
            &ld(4, ""),
        ]
        .concat()
    }

    #[test]
    fn kubectl_configmaps_decode_with_data_and_binary_data() {
        let v = decode(&hex(recorded("KUBECTL_CONFIGMAP"))).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                   "data": {"a": "b", "c": "d"}})
        );
        let v = decode(&hex(recorded("KUBECTL_CONFIGMAP_BINARY"))).unwrap();
        assert_eq!(v["binaryData"], json!({"bin": "AAH/"}));
        assert_eq!(v.get("data"), None);
    }

    #[test]
    fn kubectl_secrets_decode_with_base64_data_and_type() {
        let v = decode(&hex(recorded("KUBECTL_SECRET"))).unwrap();
        assert_eq!(v["data"], json!({"k": "dg=="}));
        assert_eq!(v.get("type"), None, "an empty type is an unset one");
        let v = decode(&hex(recorded("KUBECTL_DOCKER_SECRET"))).unwrap();
        assert_eq!(v["type"], "kubernetes.io/dockerconfigjson");
        let config = base64::engine::general_purpose::STANDARD
            .decode(v["data"][".dockerconfigjson"].as_str().unwrap())
            .unwrap();
        let config: Value = serde_json::from_slice(&config).unwrap();
        assert_eq!(config["auths"]["r.example"]["username"], "u");
    }

    #[test]
    fn kubectl_namespaces_service_accounts_and_delete_options_decode() {
        assert_eq!(
            decode(&hex(recorded("KUBECTL_NAMESPACE"))).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"},
                   "spec": {}, "status": {}})
        );
        assert_eq!(
            decode(&hex(recorded("KUBECTL_SERVICE_ACCOUNT"))).unwrap(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}})
        );
        assert_eq!(
            decode(&hex(KUBECTL_DELETE_OPTIONS)).unwrap(),
            json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 3})
        );
    }

    #[test]
    fn kubectl_debug_pods_decode() {
        let v = decode(&hex(recorded("KUBECTL_DEBUG_COPY"))).unwrap();
        assert_eq!(v["metadata"], json!({"name": "p2", "namespace": "default"}));
        let spec = &v["spec"];
        assert_eq!(
            spec["containers"][0]["command"],
            json!(["sh", "-c", "echo hi; sleep 30"])
        );
        assert_eq!(
            spec["containers"][0]["terminationMessagePath"],
            "/dev/termination-log"
        );
        assert_eq!(spec["containers"][0]["resources"], json!({}));
        assert_eq!(spec["containers"][1]["name"], "dbg");
        assert_eq!(
            spec["containers"][1]["securityContext"],
            json!({"capabilities": {"add": ["SYS_PTRACE"]}})
        );
        assert_eq!(
            (
                &spec["shareProcessNamespace"],
                &spec["terminationGracePeriodSeconds"]
            ),
            (&json!(true), &json!(30))
        );
        // kubectl wrote hostNetwork, hostPID, hostIPC, stdin, stdinOnce and tty as false and
        // generation as 0; kube-apiserver's JSON leaves such zeros out, and so does berth.
        for key in ["hostNetwork", "hostPID", "hostIPC"] {
            assert_eq!(spec.get(key), None, "{key}");
        }
        for c in spec["containers"].as_array().unwrap() {
            for key in ["stdin", "stdinOnce", "tty"] {
                assert_eq!(c.get(key), None, "{key}");
            }
        }
        assert_eq!(spec["serviceAccountName"], "default");

        let v = decode(&hex(recorded("KUBECTL_DEBUG_NODE"))).unwrap();
        assert_eq!(
            v["metadata"]["labels"],
            json!({"app.kubernetes.io/managed-by": "kubectl-debug"})
        );
        let spec = &v["spec"];
        assert_eq!(spec["nodeName"], "n1");
        assert_eq!(spec["hostPID"], true);
        assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
        assert_eq!(
            spec["volumes"],
            json!([{"name": "host-root", "hostPath": {"path": "/"}}])
        );
        assert_eq!(
            spec["containers"][0]["volumeMounts"],
            json!([{"name": "host-root", "mountPath": "/host"}])
        );
        assert_eq!(spec.get("dnsPolicy"), None);
    }

    /// ObjectMeta as Go writes it: every string and the generation, empty or not.
    fn go_meta(name: &str, labels: &[u8]) -> Vec<u8> {
        let strings: Vec<u8> = (2..=6).flat_map(|n| ld(n, "")).collect();
        [ld(1, name), strings, num(7, 0), ld(8, ""), labels.to_vec()].concat()
    }

    #[test]
    fn zeros_of_non_pointer_omitempty_fields_are_left_out_as_go_json_does() {
        // `kubectl create deployment web --image=busybox --replicas=0 -- sleep 3600` as
        // gogo-protobuf writes it: every non-pointer scalar, zero or not.
        let container = [
            ld(1, "busybox"),
            ld(2, "busybox"),
            ld(3, "sleep"),
            ld(3, "3600"),
            ld(5, ""),
            ld(8, ""),
            ld(13, ""),
            ld(14, ""),
            num(16, 0),
            num(17, 0),
            num(18, 0),
            ld(20, ""),
        ]
        .concat();
        let pod_spec = [
            ld(2, container),
            ld(3, ""),
            // Pointers set to zero: *int64 terminationGracePeriodSeconds, *bool
            // automountServiceAccountToken.
            num(4, 0),
            ld(6, ""),
            ld(8, ""),
            ld(9, ""),
            ld(10, ""),
            num(11, 0),
            num(12, 0),
            num(13, 0),
            ld(16, ""),
            ld(17, ""),
            ld(19, ""),
            num(21, 0),
            ld(24, ""),
        ]
        .concat();
        let labels = entry(11, "app", "web");
        let template = [ld(1, go_meta("", &labels)), ld(2, pod_spec)].concat();
        let spec = [
            // *int32 replicas: 0
            num(1, 0),
            ld(2, entry(1, "app", "web")),
            ld(3, template),
            ld(4, ld(1, "")),
            num(5, 0),
            num(7, 0),
        ]
        .concat();
        let status: Vec<u8> = [1, 2, 3, 4, 5, 7].iter().flat_map(|n| num(*n, 0)).collect();
        let raw = [ld(1, go_meta("web", &labels)), ld(2, spec), ld(3, status)].concat();
        let v = decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "containers": [{
                                "name": "busybox", "image": "busybox", "command": ["sleep", "3600"],
                                "resources": {},
                            }],
                            "terminationGracePeriodSeconds": 0,
                            "automountServiceAccountToken": false,
                        },
                    },
                    "strategy": {},
                },
                "status": {},
            })
        );
    }

    #[test]
    fn zeros_of_pointer_fields_and_of_fields_without_omitempty_are_kept() {
        // ReplicaSetStatus: `replicas int32 json:"replicas"` keeps its 0, readyReplicas
        // (omitempty) does not; ContainerPort: `containerPort` keeps it, hostPort does not.
        let port = [ld(1, ""), num(2, 0), num(3, 0), ld(4, "TCP"), ld(5, "")].concat();
        let container = [ld(1, ""), ld(2, "busybox"), ld(6, port)].concat();
        let template = ld(2, ld(2, container));
        let status = [num(1, 0), num(2, 0), num(3, 0), num(4, 0), num(5, 0)].concat();
        let raw = [ld(2, ld(3, template)), ld(3, status)].concat();
        let v = decode(&envelope("apps/v1", "ReplicaSet", &raw)).unwrap();
        assert_eq!(v["status"], json!({"replicas": 0}));
        assert_eq!(
            v["spec"]["template"]["spec"]["containers"],
            json!([{"name": "", "image": "busybox", "ports": [{"containerPort": 0, "protocol": "TCP"}]}]),
            "`name string json:\"name\"` keeps its empty string"
        );
        // A *string set to "": a StatefulSet's claim that asks for no storage class, and
        // `serviceName string json:"serviceName"`.
        let claim = ld(2, [ld(3, ""), ld(5, "")].concat());
        let raw = ld(2, [ld(4, claim), ld(5, "")].concat());
        let v = decode(&envelope("apps/v1", "StatefulSet", &raw)).unwrap();
        assert_eq!(
            v["spec"],
            json!({"volumeClaimTemplates": [{"spec": {"storageClassName": ""}}], "serviceName": ""})
        );
        // A value that comes twice is the last one, zero or not.
        let raw = ld(2, [num(5, 5), num(5, 0)].concat());
        let v = decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
        assert_eq!(v["spec"], json!({}));
    }

    #[test]
    fn a_pod_decodes_with_nested_repeated_maps_quantities_and_int_or_string() {
        let meta = [
            ld(1, "web"),
            ld(3, "default"),
            ld(8, [num(1, 1_700_000_000), num(2, 999)].concat()),
            entry(11, "app", "web"),
            ld(14, "example.com/keep"),
        ]
        .concat();
        let probe = [
            // ProbeHandler is embedded: httpGet joins the probe's own fields.
            ld(
                1,
                ld(
                    2,
                    [
                        ld(1, "/healthz"),
                        ld(2, [num(1, 1), ld(3, "http")].concat()),
                    ]
                    .concat(),
                ),
            ),
            num(2, 5),
        ]
        .concat();
        let container = [
            ld(1, "main"),
            ld(2, "busybox"),
            ld(3, "sh"),
            ld(3, "-c"),
            ld(4, "echo hi"),
            ld(6, [num(3, 8080), ld(4, "TCP")].concat()),
            ld(7, [ld(1, "X"), ld(2, "1")].concat()),
            ld(8, entry(1, "memory", ld(1, "32Mi"))),
            ld(10, probe),
        ]
        .concat();
        // Volume{name, VolumeSource{configMap{LocalObjectReference{name}, defaultMode}}}
        let volume = [
            ld(1, "cfg"),
            ld(
                2,
                ld(19, [ld(1, ld(1, "settings")), num(3, 0o644)].concat()),
            ),
        ]
        .concat();
        let security = [
            // supplementalGroups, once unpacked and once packed; runAsUser 0 is kept.
            num(4, 10),
            ld(4, [varint(20), varint(30)].concat()),
            num(2, 0),
        ]
        .concat();
        let spec = [
            ld(1, volume),
            ld(2, container),
            ld(3, "Never"),
            num(4, -1),
            ld(14, security),
        ]
        .concat();
        let body = envelope("v1", "Pod", &[ld(1, meta), ld(2, spec)].concat());
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "default",
                             "creationTimestamp": "2023-11-14T22:13:20Z",
                             "labels": {"app": "web"}, "finalizers": ["example.com/keep"]},
                "spec": {
                    "volumes": [{"name": "cfg", "configMap": {"name": "settings", "defaultMode": 420}}],
                    "containers": [{
                        "name": "main", "image": "busybox", "command": ["sh", "-c"], "args": ["echo hi"],
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "env": [{"name": "X", "value": "1"}],
                        "resources": {"limits": {"memory": "32Mi"}},
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 5},
                    }],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": -1,
                    "securityContext": {"supplementalGroups": [10, 20, 30], "runAsUser": 0},
                },
            })
        );
    }

    #[test]
    fn int_or_string_and_micro_time_have_their_json_forms() {
        // A Service port with a numeric targetPort, and an events.k8s.io Event's eventTime.
        let port = [ld(1, "web"), num(3, 80), ld(4, num(2, 8080))].concat();
        let v = decode(&envelope("v1", "Service", &ld(2, ld(1, port)))).unwrap();
        assert_eq!(
            v["spec"]["ports"],
            json!([{"name": "web", "port": 80, "targetPort": 8080}])
        );
        let time = [num(1, 1_700_000_000), num(2, 123_456_789)].concat();
        let v = decode(&envelope("events.k8s.io/v1", "Event", &ld(2, time))).unwrap();
        assert_eq!(v["eventTime"], "2023-11-14T22:13:20.123456Z");
        // managedFields carry their fieldsV1 as JSON.
        let managed = [
            ld(1, "kubectl"),
            ld(6, "FieldsV1"),
            ld(7, ld(1, r#"{"f:data":{}}"#)),
        ]
        .concat();
        let v = decode(&envelope("v1", "ConfigMap", &ld(1, ld(17, managed)))).unwrap();
        assert_eq!(
            v["metadata"]["managedFields"],
            json!([{"manager": "kubectl", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}])
        );
    }

    #[test]
    fn unknown_fields_of_every_wire_type_are_skipped() {
        let raw = [
            num(99, 7),
            ld(
                1,
                [ld(1, "x"), [key(50, FIXED64), vec![0; 8]].concat()].concat(),
            ),
            [key(98, FIXED32), vec![1, 2, 3, 4]].concat(),
            ld(97, envelope("v1", "Pod", b"")),
            entry(2, "a", "b"),
        ]
        .concat();
        let v = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}})
        );
        // The log names each unknown field once, and only so many of them.
        let many: Vec<u8> = (100..200)
            .flat_map(|n| [num(n, 1), num(n, 2)].concat())
            .collect();
        let mut skipped = Vec::new();
        message(
            &crate::api::protobuf_schema::CORE_V1_CONFIG_MAP,
            &many,
            0,
            &mut skipped,
        )
        .unwrap();
        assert_eq!(skipped.len(), MAX_SKIPPED_NAMED);
        assert_eq!(skipped[1], "api.core.v1.ConfigMap field 101");
        // Unknown fields of the envelope are skipped too.
        let mut body = hex(recorded("KUBECTL_SERVICE_ACCOUNT"));
        body.extend(num(15, 1));
        assert_eq!(decode(&body).unwrap()["metadata"]["name"], "sa");
    }

    #[test]
    fn a_message_in_parts_is_merged_and_a_map_entry_without_value_is_zero() {
        let raw = [
            ld(1, ld(1, "x")),
            ld(1, entry(11, "a", "b")),
            ld(2, ld(1, "k")),
        ]
        .concat();
        let v = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(v["metadata"], json!({"name": "x", "labels": {"a": "b"}}));
        assert_eq!(v["data"], json!({"k": ""}));
    }

    #[test]
    fn kinds_and_encodings_it_does_not_know_are_named() {
        let err = decode(&envelope("example.com/v1", "Widget", b"")).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownKind {
                api_version: "example.com/v1".into(),
                kind: "Widget".into()
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("\"Widget\"") && text.contains("kubectl apply -f"),
            "{text}"
        );
        let mut body = MAGIC.to_vec();
        body.extend(ld(1, [ld(1, "v1"), ld(2, "ConfigMap")].concat()));
        body.extend(ld(3, "gzip"));
        assert_eq!(
            decode(&body).unwrap_err(),
            DecodeError::ContentEncoding("gzip".into())
        );
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        let is_malformed = |b: &[u8]| matches!(decode(b), Err(DecodeError::Malformed(_)));
        assert!(is_malformed(b""));
        assert!(is_malformed(b"{\"kind\":\"ConfigMap\"}"));
        assert!(is_malformed(b"k8s\x00"), "no kind");
        // Every cut of a real body inside its object is an error.
        let body = hex(recorded("KUBECTL_CONFIGMAP"));
        let (header_end, raw_end) = (4 + 2 + 15, body.len() - 4);
        for n in (0..raw_end).filter(|n| *n != header_end) {
            assert!(is_malformed(&body[..n]), "cut at {n} of {}", body.len());
        }
        // A known field with the wrong wire type.
        assert!(is_malformed(&envelope("v1", "ConfigMap", &num(1, 3))));
        // A varint of 11 bytes, a length past the end, a group, an invalid string.
        let long = [key(99, VARINT), vec![0xff; 10], vec![1]].concat();
        assert!(is_malformed(&envelope("v1", "ConfigMap", &long)));
        assert!(is_malformed(&envelope(
            "v1",
            "ConfigMap",
            &[0x0a, 0x05, 0x0a]
        )));
        assert!(is_malformed(&envelope("v1", "ConfigMap", &key(3, 3))));
        assert!(is_malformed(&envelope(
            "v1",
            "ConfigMap",
            &ld(1, ld(1, [0xff, 0xfe]))
        )));
        assert!(is_malformed(&envelope("v1", "ConfigMap", &key(0, LEN))));
        // Times before year -9999 do not exist; a managed field with no JSON in it.
        let t = ld(8, num(1, i64::MIN));
        assert!(is_malformed(&envelope("v1", "ConfigMap", &ld(1, t))));
        let managed = ld(17, ld(7, ld(1, "{not json")));
        assert!(is_malformed(&envelope("v1", "ConfigMap", &ld(1, managed))));
    }

    static NESTED: Message = Message {
        name: "test.Nested",
        fields: &[one(1, "child", Kind::Message(&NESTED))],
    };

    #[test]
    fn nesting_is_bounded() {
        let mut b = Vec::new();
        for _ in 0..10 {
            b = ld(1, b);
        }
        assert!(message(&NESTED, &b, 0, &mut Vec::new()).is_ok());
        for _ in 0..MAX_DEPTH {
            b = ld(1, b);
        }
        let err = message(&NESTED, &b, 0, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("nested"), "{err}");
    }

    /// Protobuf bodies are served for every built-in kind, not a hand-picked list: each
    /// resource of the catalog decodes, but for the groups Kubernetes has no protobuf
    /// definitions of (OpenShift's, metrics and the definitions of custom resources).
    #[test]
    fn every_built_in_kind_decodes_from_protobuf() {
        const WITHOUT_PROTOBUF: &[&str] = &[
            "apps.openshift.io",
            "metrics.k8s.io",
            "apiextensions.k8s.io",
        ];
        let mut missing = Vec::new();
        for r in crate::registry::catalog::RESOURCES.iter() {
            if WITHOUT_PROTOBUF.contains(&r.group.as_str()) {
                continue;
            }
            let api_version = r.api_version();
            let found = ROOTS
                .iter()
                .any(|(v, k, _)| *v == api_version && *k == r.kind_name);
            if !found {
                missing.push(format!("{api_version} {}", r.kind_name));
            }
        }
        assert!(missing.is_empty(), "no protobuf message for {missing:?}");
    }

    #[test]
    fn every_message_has_its_fields_sorted_and_its_json_names_unique() {
        fn check(m: &'static Message, seen: &mut Vec<&'static str>) {
            if seen.contains(&m.name) {
                return;
            }
            seen.push(m.name);
            names(m, &mut Vec::new());
            for pair in m.fields.windows(2) {
                assert!(
                    pair[0].number < pair[1].number,
                    "{}: {}",
                    m.name,
                    pair[1].number
                );
            }
            for f in m.fields {
                if let Kind::Message(inner) = f.kind {
                    check(inner, seen);
                }
                assert!(matches!(f.card, Card::Inline) || !f.json.is_empty());
                assert!(
                    !f.omit_zero
                        || matches!(
                            (f.card, f.kind),
                            (Card::One, Kind::Str | Kind::Int | Kind::Bool | Kind::Bytes)
                        ),
                    "{}: {} is not a scalar to leave out",
                    m.name,
                    f.json
                );
            }
        }
        /// The JSON names of a message's object, inlined messages' included.
        fn names(m: &Message, out: &mut Vec<&'static str>) {
            for f in m.fields {
                match (f.card, f.kind) {
                    (Card::Inline, Kind::Message(inner)) => names(inner, out),
                    _ => {
                        assert!(!out.contains(&f.json), "{}: {} twice", m.name, f.json);
                        out.push(f.json);
                    }
                }
            }
        }
        let mut seen = Vec::new();
        for (_, _, m) in ROOTS {
            check(m, &mut seen);
        }
        assert!(seen.len() > 100, "{}", seen.len());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panicking(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = decode(&[&MAGIC[..], &tail].concat());
        }

        #[test]
        fn damaged_kubectl_bodies_decode_or_fail_without_panicking(
            at in 0usize..1000, byte in proptest::num::u8::ANY, which in 0usize..8,
        ) {
            let mut body = hex([recorded("KUBECTL_CONFIGMAP"), recorded("KUBECTL_CONFIGMAP_BINARY"), recorded("KUBECTL_SECRET"),
                recorded("KUBECTL_DOCKER_SECRET"), recorded("KUBECTL_NAMESPACE"), recorded("KUBECTL_SERVICE_ACCOUNT"), recorded("KUBECTL_DEBUG_COPY"),
                recorded("KUBECTL_DEBUG_NODE")][which]);
            let at = 4 + at % (body.len() - 4);
            body[at] = byte;
            let _ = decode(&body);
        }
    }
}
