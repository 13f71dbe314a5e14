//! Stamping `metadata.resourceVersion` into stored JSON objects without decoding them.
//!
//! The store promises that an object's `metadata.resourceVersion` is the revision of its
//! last write, but the revision is only known inside the committer. To keep the single
//! committer thread cheap, callers [`prepare`] a value in their own task: the value is
//! checked to be a JSON object, any existing `resourceVersion` is cut out and the place
//! to put the new one is remembered. The committer then only splices bytes ([`Template::stamp`]).

use bytes::Bytes;

/// Why a value cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidValue {
    #[error("value is not valid JSON: {0}")]
    Json(String),
    #[error("value is not a JSON object")]
    NotAnObject,
    #[error("metadata is not a JSON object")]
    MetadataNotAnObject,
}

/// A JSON object ready to receive its resourceVersion: `head ++ member ++ tail`.
#[derive(Debug, Clone)]
pub struct Template {
    bytes: Bytes,
    /// Bytes of `bytes` that come before the inserted member.
    head: std::ops::Range<usize>,
    /// Bytes of `bytes` that come after the inserted member.
    tail: std::ops::Range<usize>,
    /// How the member is inserted.
    shape: Shape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Inside an existing `metadata` object; `comma` when other members follow.
    InMetadata { comma: bool },
    /// No `metadata` member exists: add one to the top level object.
    NewMetadata { comma: bool },
}

impl Template {
    /// The stamped object, with `metadata.resourceVersion` set to `revision`.
    pub fn stamp(&self, revision: u64) -> Bytes {
        let head = &self.bytes[self.head.clone()];
        let tail = &self.bytes[self.tail.clone()];
        let mut out = Vec::with_capacity(head.len() + tail.len() + 48);
        out.extend_from_slice(head);
        let (open, close, comma) = match self.shape {
            Shape::InMetadata { comma } => ("", "", comma),
            Shape::NewMetadata { comma } => ("\"metadata\":{", "}", comma),
        };
        out.extend_from_slice(open.as_bytes());
        out.extend_from_slice(b"\"resourceVersion\":\"");
        out.extend_from_slice(revision.to_string().as_bytes());
        out.push(b'"');
        out.extend_from_slice(close.as_bytes());
        if comma {
            out.push(b',');
        }
        out.extend_from_slice(tail);
        Bytes::from(out)
    }
}

/// Checks that `value` is a JSON object and finds where its resourceVersion goes.
pub fn prepare(value: Bytes) -> Result<Template, InvalidValue> {
    serde_json::from_slice::<serde::de::IgnoredAny>(&value)
        .map_err(|e| InvalidValue::Json(e.to_string()))?;
    let mut s = Scanner::new(&value);
    s.ws();
    if s.peek() != Some(b'{') {
        return Err(InvalidValue::NotAnObject);
    }
    let open = s.pos + 1;
    let top = s.object_members()?;
    let Some(meta) = top.iter().find(|m| m.key == b"metadata") else {
        let comma = !top.is_empty();
        return Ok(Template {
            head: 0..open,
            tail: open..value.len(),
            shape: Shape::NewMetadata { comma },
            bytes: value,
        });
    };
    let mut s = Scanner::new(&value);
    s.pos = meta.value.start;
    if s.peek() != Some(b'{') {
        return Err(InvalidValue::MetadataNotAnObject);
    }
    let meta_open = s.pos + 1;
    let members = s.object_members()?;
    let others: Vec<&Member> = members
        .iter()
        .filter(|m| m.key != b"resourceVersion")
        .collect();
    if others.len() == members.len() {
        // No resourceVersion yet: insert as the first member.
        return Ok(Template {
            head: 0..meta_open,
            tail: meta_open..value.len(),
            shape: Shape::InMetadata {
                comma: !members.is_empty(),
            },
            bytes: value,
        });
    }
    // Cut the old member(s) out by rebuilding metadata from the others.
    let mut out = Vec::with_capacity(value.len());
    out.extend_from_slice(&value[..meta_open]);
    for (i, m) in others.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&value[m.span.clone()]);
    }
    let close = members.last().map_or(meta_open, |m| m.end_of_object);
    out.extend_from_slice(&value[close..]);
    let len = out.len();
    Ok(Template {
        bytes: Bytes::from(out),
        head: 0..meta_open,
        tail: meta_open..len,
        shape: Shape::InMetadata {
            comma: !others.is_empty(),
        },
    })
}

/// Reads the revision stamped in a stored object (`metadata.resourceVersion`).
pub fn revision(value: &[u8]) -> Option<u64> {
    metadata_string(value, b"resourceVersion")?.parse().ok()
}

/// Reads `metadata.uid` of a stored object, if it has one.
pub fn uid(value: &[u8]) -> Option<String> {
    metadata_string(value, b"uid")
}

/// The string member `key` of a stored object's metadata.
fn metadata_string(value: &[u8], key: &[u8]) -> Option<String> {
    let mut s = Scanner::new(value);
    s.ws();
    let top = s.object_members().ok()?;
    let meta = top.iter().find(|m| m.key == b"metadata")?;
    let mut s = Scanner::new(value);
    s.pos = meta.value.start;
    let members = s.object_members().ok()?;
    let member = members.iter().find(|m| m.key == key)?;
    serde_json::from_slice::<String>(&value[member.value.clone()]).ok()
}

/// One `"key": value` member of an object.
struct Member<'a> {
    key: &'a [u8],
    /// The member from the opening quote of its key to the end of its value.
    span: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
    /// Position of the object's closing brace (the same for every member).
    end_of_object: usize,
}

/// A forward-only walker over JSON that is already known to be valid.
struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
}

const BAD: InvalidValue = InvalidValue::Json(String::new());

impl<'a> Scanner<'a> {
    fn new(b: &'a [u8]) -> Self {
        Self { b, pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), InvalidValue> {
        self.ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(BAD)
        }
    }

    /// The members of the object starting at `pos`; leaves `pos` after its closing brace.
    fn object_members(&mut self) -> Result<Vec<Member<'a>>, InvalidValue> {
        self.expect(b'{')?;
        let mut out = Vec::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(out);
        }
        loop {
            self.ws();
            let start = self.pos;
            let key = self.string()?;
            self.expect(b':')?;
            self.ws();
            let vstart = self.pos;
            self.value()?;
            let vend = self.pos;
            out.push(Member {
                key,
                span: start..vend,
                value: vstart..vend,
                end_of_object: 0,
            });
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    let close = self.pos;
                    self.pos += 1;
                    for m in &mut out {
                        m.end_of_object = close;
                    }
                    return Ok(out);
                }
                _ => return Err(BAD),
            }
        }
    }

    /// A string's raw contents (escapes left as they are); `pos` ends after the quote.
    fn string(&mut self) -> Result<&'a [u8], InvalidValue> {
        if self.peek() != Some(b'"') {
            return Err(BAD);
        }
        let start = self.pos + 1;
        let mut i = start;
        loop {
            let off = memchr::memchr2(b'"', b'\\', &self.b[i..]).ok_or(BAD)?;
            i += off;
            if self.b[i] == b'\\' {
                i += 2;
                if i > self.b.len() {
                    return Err(BAD);
                }
            } else {
                self.pos = i + 1;
                return Ok(&self.b[start..i]);
            }
        }
    }

    fn value(&mut self) -> Result<(), InvalidValue> {
        self.ws();
        match self.peek().ok_or(BAD)? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object_members().map(|_| ()),
            b'[' => {
                self.pos += 1;
                self.ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    return Ok(());
                }
                loop {
                    self.value()?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(());
                        }
                        _ => return Err(BAD),
                    }
                }
            }
            _ => {
                // number, true, false or null: up to the next delimiter.
                let start = self.pos;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.pos += 1;
                }
                if self.pos == start {
                    return Err(BAD);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn stamped(v: Value, rev: u64) -> Value {
        let t = prepare(Bytes::from(serde_json::to_vec(&v).unwrap())).unwrap();
        serde_json::from_slice(&t.stamp(rev)).unwrap()
    }

    #[test]
    fn stamp_inserts_into_existing_metadata() {
        let out = stamped(json!({"kind":"Pod","metadata":{"name":"a"},"spec":{}}), 7);
        assert_eq!(
            out,
            json!({"kind":"Pod","metadata":{"name":"a","resourceVersion":"7"},"spec":{}})
        );
    }

    #[test]
    fn stamp_replaces_an_old_resource_version_wherever_it_stands() {
        for meta in [
            json!({"resourceVersion":"1"}),
            json!({"resourceVersion":"1","name":"a"}),
            json!({"name":"a","resourceVersion":"1"}),
            json!({"a":1,"resourceVersion":"1","z":[1,{"resourceVersion":"x"}]}),
        ] {
            let mut want = meta.clone();
            want["resourceVersion"] = json!("42");
            let out = stamped(json!({"metadata": meta, "b": "c"}), 42);
            assert_eq!(out, json!({"metadata": want, "b": "c"}));
        }
    }

    #[test]
    fn stamp_adds_metadata_when_missing() {
        assert_eq!(
            stamped(json!({}), 3),
            json!({"metadata":{"resourceVersion":"3"}})
        );
        assert_eq!(
            stamped(json!({"a":1}), 3),
            json!({"a":1,"metadata":{"resourceVersion":"3"}})
        );
    }

    #[test]
    fn lookalike_keys_elsewhere_are_left_alone() {
        let v = json!({
            "spec": {"metadata": {"resourceVersion": "9"}},
            "involvedObject": {"resourceVersion": "5"},
            "metadata": {"annotations": {"resourceVersion": "x", "q": "\"resourceVersion\":\"1\""}},
        });
        let out = stamped(v.clone(), 11);
        let mut want = v;
        want["metadata"]["resourceVersion"] = json!("11");
        assert_eq!(out, want);
    }

    #[test]
    fn whitespace_and_escapes_are_handled() {
        let raw = br#" { "metadata" : { "name" : "a\"b\\" , "resourceVersion" : "1" } , "x" : [ 1 , 2.5e3 , true , null ] } "#;
        let t = prepare(Bytes::from_static(raw)).unwrap();
        let out: Value = serde_json::from_slice(&t.stamp(5)).unwrap();
        assert_eq!(
            out,
            json!({"metadata":{"name":"a\"b\\","resourceVersion":"5"},"x":[1,2500.0,true,null]})
        );
    }

    #[test]
    fn non_objects_are_rejected() {
        assert_eq!(
            prepare(Bytes::from_static(b"[1]")).unwrap_err(),
            InvalidValue::NotAnObject
        );
        assert_eq!(
            prepare(Bytes::from_static(br#"{"metadata":3}"#)).unwrap_err(),
            InvalidValue::MetadataNotAnObject
        );
        assert!(matches!(
            prepare(Bytes::from_static(b"{\"a\":")).unwrap_err(),
            InvalidValue::Json(_)
        ));
    }

    #[test]
    fn uid_is_read_from_metadata_only() {
        assert_eq!(
            uid(br#"{"spec":{"uid":"no"},"metadata":{"uid":"u-1"}}"#).as_deref(),
            Some("u-1")
        );
        assert_eq!(uid(br#"{"metadata":{}}"#), None);
        assert_eq!(uid(b"not json"), None);
    }

    #[test]
    fn the_revision_is_read_from_metadata_only() {
        let v = br#"{"spec":{"resourceVersion":"9"},"metadata":{"resourceVersion":"42"}}"#;
        assert_eq!(revision(v), Some(42));
        assert_eq!(revision(br#"{"metadata":{"resourceVersion":"x"}}"#), None);
        assert_eq!(revision(b"[]"), None);
    }

    proptest::proptest! {
        #[test]
        fn stamping_any_object_matches_setting_the_field(
            name in "[a-z\"\\\\ ]{0,8}", rev in 0u64..u64::MAX, with_rv in proptest::bool::ANY,
            extra in proptest::collection::btree_map("[a-zA-Z]{1,6}", "[ -~]{0,6}", 0..4)
        ) {
            let mut v = json!({"metadata": {"name": name}, "extra": extra});
            if with_rv { v["metadata"]["resourceVersion"] = json!("old"); }
            let out = stamped(v.clone(), rev);
            v["metadata"]["resourceVersion"] = json!(rev.to_string());
            proptest::prop_assert_eq!(out, v);
        }
    }
}
