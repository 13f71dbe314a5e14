//! Patches: JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

use serde_json::{Map, Value};

use super::Resource;

/// A patch as a client sent it.
#[derive(Debug, Clone)]
pub enum Patch {
    /// `application/merge-patch+json`
    Merge(Value),
    /// `application/json-patch+json`
    Json(Value),
}

impl Patch {
    /// The patched object; errors are messages for a 400 answer.
    pub fn apply(&self, _res: &Resource, current: &Value) -> Result<Value, String> {
        match self {
            Patch::Merge(p) => {
                if !p.is_object() {
                    return Err("a merge patch must be a JSON object".into());
                }
                let mut out = current.clone();
                merge(&mut out, p);
                Ok(out)
            }
            Patch::Json(p) => {
                let ops: json_patch::Patch = serde_json::from_value(p.clone())
                    .map_err(|e| format!("invalid JSON patch: {e}"))?;
                let mut out = current.clone();
                json_patch::patch(&mut out, &ops)
                    .map_err(|e| format!("the JSON patch could not be applied: {e}"))?;
                Ok(out)
            }
        }
    }
}

/// RFC 7386: objects merge recursively, `null` removes, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("just made an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        // The examples of RFC 7386, appendix A.
        for (target, patch, want) in [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ] {
            let mut t = target.clone();
            merge(&mut t, &patch);
            assert_eq!(t, want, "{target} + {patch}");
        }
    }

    #[test]
    fn json_patch_applies_and_reports_failures() {
        let res = super::super::catalog::of(super::super::Kind::ConfigMap);
        let cur = json!({"data": {"a": "1"}});
        let p = Patch::Json(
            json!([{"op":"add","path":"/data/b","value":"2"},{"op":"remove","path":"/data/a"}]),
        );
        assert_eq!(p.apply(res, &cur).unwrap(), json!({"data": {"b": "2"}}));
        let bad = Patch::Json(json!([{"op":"test","path":"/data/a","value":"9"}]));
        assert!(bad.apply(res, &cur).is_err());
        assert!(Patch::Json(json!({"op":"x"})).apply(res, &cur).is_err());
        assert!(Patch::Merge(json!([1])).apply(res, &cur).is_err());
    }
}
