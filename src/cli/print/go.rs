//! How Go prints JSON values: `encoding/json` (sorted keys, HTML-safe escapes), `fmt.Sprint`
//! (`map[a:b]`, `[x y]`), `%#v` and `strconv`'s float formats, so that kubectl's output can
//! be reproduced byte for byte from a `serde_json::Value`.

use serde_json::{Map, Number, Value};

/// `json.Marshal` (compact) of a decoded object.
pub fn json_compact(v: &Value) -> String {
    let mut out = String::new();
    write_json(&mut out, v, None, 0);
    out
}

/// `json.MarshalIndent(v, "", "    ")`.
pub fn json_indent(v: &Value) -> String {
    let mut out = String::new();
    write_json(&mut out, v, Some("    "), 0);
    out
}

fn newline(out: &mut String, indent: Option<&str>, depth: usize) {
    if let Some(unit) = indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(unit);
        }
    }
}

fn write_json(out: &mut String, v: &Value, indent: Option<&str>, depth: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&json_number(n)),
        Value::String(s) => json_string(out, s),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                write_json(out, item, indent, depth + 1);
            }
            newline(out, indent, depth);
            out.push(']');
        }
        Value::Object(m) if m.is_empty() => out.push_str("{}"),
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                json_string(out, k);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write_json(out, item, indent, depth + 1);
            }
            newline(out, indent, depth);
            out.push('}');
        }
    }
}

/// A JSON string as `encoding/json` writes it: `<`, `>`, `&`, U+2028 and U+2029 escaped.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Whether a number is what Go's unstructured decoding keeps as an `int64`.
pub enum Num {
    Int(i128),
    Float(f64),
}

pub fn num(n: &Number) -> Num {
    if let Some(i) = n.as_i64() {
        Num::Int(i.into())
    } else if let Some(u) = n.as_u64() {
        Num::Int(u.into())
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        // Go re-reads "2.0" as float64 2, which it prints as "2".
        Num::Float(f)
    }
}

fn json_number(n: &Number) -> String {
    match num(n) {
        Num::Int(i) => i.to_string(),
        Num::Float(f) => float_json(f),
    }
}

/// The shortest decimal digits of `f` and its decimal exponent: `f = 0.d1d2d3… × 10^exp`.
fn digits(f: f64) -> (String, i32) {
    let e = format!("{:e}", f.abs());
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    (digits, exp + 1)
}

/// `strconv.FormatFloat(f, 'e', -1, 64)`.
fn float_e(f: f64) -> String {
    let (d, dp) = digits(f);
    let mut s = String::new();
    if f.is_sign_negative() {
        s.push('-');
    }
    s.push_str(&d[..1]);
    if d.len() > 1 {
        s.push('.');
        s.push_str(&d[1..]);
    }
    let x = if f == 0.0 { 0 } else { dp - 1 };
    s.push('e');
    s.push(if x < 0 { '-' } else { '+' });
    s.push_str(&format!("{:02}", x.abs()));
    s
}

/// `strconv.FormatFloat(f, 'f', -1, 64)`.
fn float_f(f: f64) -> String {
    // Rust's Display is the shortest round-trip form, never in exponent notation.
    format!("{f}")
}

fn special(f: f64) -> Option<&'static str> {
    if f.is_nan() {
        Some("NaN")
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" })
    } else {
        None
    }
}

/// `encoding/json`'s float64 format.
pub fn float_json(f: f64) -> String {
    if let Some(s) = special(f) {
        return s.to_string();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = float_e(f);
        // Go cleans e-09 to e-9.
        match s.rfind("e-0") {
            Some(i) if i + 4 == s.len() => format!("{}e-{}", &s[..i], &s[i + 3..]),
            _ => s,
        }
    } else {
        float_f(f)
    }
}

/// `strconv.FormatFloat(f, 'g', -1, 64)`, which is also `fmt`'s `%v`.
pub fn float_g(f: f64) -> String {
    if let Some(s) = special(f) {
        return s.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let (_, dp) = digits(f);
    let x = dp - 1;
    if !(-4..6).contains(&x) {
        float_e(f)
    } else {
        float_f(f)
    }
}

/// `fmt.Sprint` of a decoded JSON value.
pub fn sprint(v: &Value) -> String {
    let mut out = String::new();
    write_sprint(&mut out, v);
    out
}

fn write_sprint(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match num(n) {
            Num::Int(i) => out.push_str(&i.to_string()),
            Num::Float(f) => out.push_str(&float_g(f)),
        },
        Value::String(s) => out.push_str(s),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_sprint(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push_str("map[");
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_sprint(out, item);
            }
            out.push(']');
        }
    }
}

/// `fmt.Sprintf("%#v", v)` of a decoded JSON value (`map[string]interface {}{"a":"b"}`).
pub fn sharp_v(v: &Value) -> String {
    let mut out = String::new();
    write_sharp_v(&mut out, v, true);
    out
}

fn write_sharp_v(out: &mut String, v: &Value, top: bool) {
    match v {
        Value::Null if top => out.push_str("<nil>"),
        Value::Null => out.push_str("interface {}(nil)"),
        Value::Bool(_) | Value::Number(_) => write_sprint(out, v),
        Value::String(s) => out.push_str(&go_quote(s)),
        Value::Array(a) => {
            out.push_str("[]interface {}{");
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_sharp_v(out, item, false);
            }
            out.push('}');
        }
        Value::Object(m) => write_sharp_map(out, m),
    }
}

fn write_sharp_map(out: &mut String, m: &Map<String, Value>) {
    out.push_str("map[string]interface {}{");
    for (i, (k, item)) in m.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&go_quote(k));
        out.push(':');
        write_sharp_v(out, item, false);
    }
    out.push('}');
}

/// `strconv.Quote`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_indented_with_four_spaces_and_html_safe() {
        let v = json!({"b": [1, {"c": "<a&b>"}], "a": {}, "e": [], "f": 1.5, "g": null});
        assert_eq!(
            json_indent(&v),
            "{\n    \"a\": {},\n    \"b\": [\n        1,\n        {\n            \"c\": \"\\u003ca\\u0026b\\u003e\"\n        }\n    ],\n    \"e\": [],\n    \"f\": 1.5,\n    \"g\": null\n}"
        );
        assert_eq!(json_compact(&json!({"a": ["x", 2]})), r#"{"a":["x",2]}"#);
        assert_eq!(json_compact(&json!("\u{1b}\t")), r#""\u001b\t""#);
    }

    #[test]
    fn floats_print_like_go() {
        assert_eq!(float_json(2.0), "2");
        assert_eq!(float_json(0.5), "0.5");
        assert_eq!(float_json(1e21), "1e+21");
        assert_eq!(float_json(1e-7), "1e-7");
        assert_eq!(float_g(1234567.0), "1.234567e+06");
        assert_eq!(float_g(100000.0), "100000");
        assert_eq!(float_g(0.0001), "0.0001");
        assert_eq!(float_g(0.00001), "1e-05");
        assert_eq!(float_g(-2.5), "-2.5");
    }

    #[test]
    fn sprint_and_sharp_v_follow_fmt() {
        let v = json!({"b": [1, "x"], "a": {"c": null}});
        assert_eq!(sprint(&v), "map[a:map[c:<nil>] b:[1 x]]");
        assert_eq!(
            sharp_v(&v),
            r#"map[string]interface {}{"a":map[string]interface {}{"c":interface {}(nil)}, "b":[]interface {}{1, "x"}}"#
        );
    }
}
