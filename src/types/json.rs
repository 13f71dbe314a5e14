//! Reading fields of an object that stays JSON (a stored object not decoded into its
//! k8s-openapi type): one accessor per shape, each a JSON pointer with the value Go's
//! zero value gives an absent field (`""`, `0`, `false`), as the API's readers expect.

use serde_json::Value;

/// The string at `pointer`, or `""` when absent or not a string.
pub fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The integer at `pointer`, or 0 when absent or not an integer.
pub fn int_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// The boolean at `pointer`, or false when absent or not a boolean.
pub fn bool_at(obj: &Value, pointer: &str) -> bool {
    obj.pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The array at `pointer`, or none when absent or not an array.
pub fn array_at<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_or_mistyped_fields_read_as_go_zero_values() {
        let obj = json!({"spec": {"name": "a", "n": 3, "on": true, "items": [1, 2]}});
        assert_eq!(str_at(&obj, "/spec/name"), "a");
        assert_eq!(str_at(&obj, "/spec/n"), "");
        assert_eq!(str_at(&obj, "/spec/missing"), "");
        assert_eq!(int_at(&obj, "/spec/n"), 3);
        assert_eq!(int_at(&obj, "/spec/name"), 0);
        assert!(bool_at(&obj, "/spec/on"));
        assert!(!bool_at(&obj, "/spec/missing"));
        assert_eq!(array_at(&obj, "/spec/items").len(), 2);
        assert!(array_at(&obj, "/spec/name").is_empty());
    }
}
