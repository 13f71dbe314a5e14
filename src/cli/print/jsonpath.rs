//! kubectl's JSONPath templates (client-go's `util/jsonpath`): text with `{…}` actions;
//! fields, `[i]`/slices/`[*]`, unions, `..`, filters `[?(@.x=="y")]`, string and number
//! literals, and `{range …}…{end}`. Parsing and evaluation follow client-go's rules and
//! error texts, so templates print and fail as they do under kubectl.

use std::borrow::Cow;

use serde_json::{Number, Value};

use super::go;

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    raw: String,
    items: Vec<Item>,
}

#[derive(Debug, Clone, PartialEq)]
enum Item {
    Text(String),
    Expr(Vec<Step>),
    /// `{range steps}body{end}`.
    Range(Vec<Step>, Vec<Item>),
    /// An `{end}` with no `{range}` open: an error when executed.
    StrayEnd,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Wildcard,
    Array([Param; 3]),
    Filter(Box<Filter>),
    Recursive,
    Union(Vec<Vec<Step>>),
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Identifier(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Vec<Step>,
    right: Vec<Step>,
    op: String,
}

/// Top-level nodes as client-go's parser produces them.
enum Node {
    Text(String),
    Action(Vec<Step>),
}

impl JsonPath {
    /// Parses a template; the error is client-go's (`unclosed action`, …).
    pub fn parse(template: &str) -> Result<JsonPath, String> {
        let nodes = Parser::new(template).parse()?;
        let mut iter = nodes.into_iter();
        let items = tree(&mut iter, false);
        Ok(JsonPath {
            raw: template.to_string(),
            items,
        })
    }

    /// The template as written.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The results of each top-level node (text or action) over `data`, as kubectl's
    /// custom-columns printer reads them.
    pub fn find(&self, data: &Value, allow_missing: bool) -> Result<Vec<Vec<Value>>, String> {
        let eval = Eval { allow_missing };
        let mut sets = Vec::new();
        eval.items(&self.items, data, &mut sets)?;
        Ok(sets
            .into_iter()
            .map(|set| set.into_iter().map(Cow::into_owned).collect())
            .collect())
    }

    /// Runs the template over `data`. With `allow_missing`, a missing field gives no output
    /// instead of the error `<field> is not found`. With `as_json`, each action's results
    /// print as one indented JSON array (`-o jsonpath-as-json`).
    pub fn execute(
        &self,
        data: &Value,
        allow_missing: bool,
        as_json: bool,
    ) -> Result<String, String> {
        let eval = Eval { allow_missing };
        let mut sets = Vec::new();
        eval.items(&self.items, data, &mut sets)?;
        let mut out = String::new();
        for set in sets {
            print_results(&mut out, &set, as_json);
        }
        Ok(out)
    }
}

/// Nests `{range}…{end}` blocks.
fn tree(nodes: &mut impl Iterator<Item = Node>, in_range: bool) -> Vec<Item> {
    let mut items = Vec::new();
    while let Some(node) = nodes.next() {
        match node {
            Node::Text(t) => items.push(Item::Text(t)),
            Node::Action(steps) => {
                let is_ident = |s: &Step, name: &str| matches!(s, Step::Identifier(n) if n == name);
                if steps.len() == 1 && is_ident(&steps[0], "end") {
                    if in_range {
                        return items;
                    }
                    items.push(Item::StrayEnd);
                } else if steps.first().is_some_and(|s| is_ident(s, "range")) {
                    let body = tree(nodes, true);
                    items.push(Item::Range(steps[1..].to_vec(), body));
                } else {
                    items.push(Item::Expr(steps));
                }
            }
        }
    }
    items
}

fn print_results(out: &mut String, results: &[Cow<'_, Value>], as_json: bool) {
    if as_json {
        let all = Value::Array(results.iter().map(|r| r.as_ref().clone()).collect());
        out.push_str(&go::json_indent(&all));
        out.push('\n');
        return;
    }
    for (i, r) in results.iter().enumerate() {
        match r.as_ref() {
            v @ (Value::Object(_) | Value::Array(_)) => out.push_str(&go::json_compact(v)),
            v => out.push_str(&go::sprint(v)),
        }
        if i + 1 != results.len() {
            out.push(' ');
        }
    }
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
}

const EOF: char = '\u{0}';

fn is_terminator(r: Option<char>) -> bool {
    match r {
        None => true,
        Some(c) => matches!(
            c,
            ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
        ),
    }
}

fn is_alphanumeric(r: char) -> bool {
    r == '_' || r.is_alphabetic() || r.is_numeric()
}

fn parse_action(text: &str) -> Result<Vec<Step>, String> {
    let nodes = Parser::new(&format!("{{{text}}}")).parse()?;
    Ok(match nodes.into_iter().next() {
        Some(Node::Action(steps)) => steps,
        _ => Vec::new(),
    })
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Parser {
            input,
            pos: 0,
            start: 0,
            width: 0,
        }
    }

    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    fn consume(&mut self) -> &'a str {
        let v = &self.input[self.start..self.pos];
        self.start = self.pos;
        v
    }

    /// The next character, or `None` at the end.
    fn next(&mut self) -> Option<char> {
        match self.rest().chars().next() {
            None => {
                self.width = 0;
                None
            }
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                Some(c)
            }
        }
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn backup(&mut self) {
        self.pos -= self.width;
    }

    fn parse(mut self) -> Result<Vec<Node>, String> {
        let mut nodes = Vec::new();
        loop {
            if self.rest().starts_with('{') {
                if self.pos > self.start {
                    nodes.push(Node::Text(self.consume().to_string()));
                }
                self.pos += 1;
                self.consume();
                let mut steps = Vec::new();
                self.inside_action(&mut steps)?;
                nodes.push(Node::Action(steps));
                continue;
            }
            if self.next().is_none() {
                break;
            }
        }
        if self.pos > self.start {
            nodes.push(Node::Text(self.consume().to_string()));
        }
        Ok(nodes)
    }

    fn inside_action(&mut self, cur: &mut Vec<Step>) -> Result<(), String> {
        loop {
            let rest = self.rest();
            if rest.starts_with('}') {
                self.pos += 1;
                self.consume();
                return Ok(());
            }
            if rest.starts_with("[?(") {
                self.filter(cur)?;
                continue;
            }
            if rest.starts_with("..") {
                self.pos += 2;
                self.consume();
                cur.push(Step::Recursive);
                if self.peek().is_some_and(is_alphanumeric) {
                    self.field(cur);
                }
                continue;
            }
            match self.next() {
                None | Some('\r' | '\n') => return Err("unclosed action".into()),
                Some(' ' | '@' | '$') => {
                    self.consume();
                }
                Some('[') => self.array(cur)?,
                Some(q @ ('"' | '\'')) => self.quote(cur, q)?,
                Some('.') => self.field(cur),
                Some(c) if c == '+' || c == '-' || c.is_ascii_digit() => {
                    self.backup();
                    self.number(cur)?;
                }
                Some(c) if is_alphanumeric(c) => {
                    self.backup();
                    self.identifier(cur);
                }
                Some(c) => {
                    let u = c as u32;
                    return Err(if c.is_control() {
                        format!("unrecognized character in action: U+{u:04X}")
                    } else {
                        format!("unrecognized character in action: U+{u:04X} '{c}'")
                    });
                }
            }
        }
    }

    fn identifier(&mut self, cur: &mut Vec<Step>) {
        loop {
            let r = self.next();
            if is_terminator(r) {
                if r.is_some() {
                    self.backup();
                }
                break;
            }
        }
        let value = self.consume();
        cur.push(match value {
            "true" => Step::Bool(true),
            "false" => Step::Bool(false),
            v => Step::Identifier(v.to_string()),
        });
    }

    fn number(&mut self, cur: &mut Vec<Step>) -> Result<(), String> {
        if matches!(self.peek(), Some('+' | '-')) {
            self.next();
        }
        loop {
            match self.next() {
                Some(c) if c == '.' || c.is_ascii_digit() => {}
                Some(_) => {
                    self.backup();
                    break;
                }
                None => break,
            }
        }
        let value = self.consume();
        if let Ok(i) = value.parse::<i64>() {
            cur.push(Step::Int(i));
        } else if let Ok(f) = value.parse::<f64>().map_err(|_| ()).and_then(|f| {
            // Go's ParseFloat refuses a lone sign or dot, which Rust also does.
            if value.chars().any(|c| c.is_ascii_digit()) {
                Ok(f)
            } else {
                Err(())
            }
        }) {
            cur.push(Step::Float(f));
        } else {
            return Err(format!("cannot parse number {value}"));
        }
        Ok(())
    }

    fn array(&mut self, cur: &mut Vec<Step>) -> Result<(), String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated array".into()),
                Some(']') => break,
                Some(_) => {}
            }
        }
        let text = self.consume();
        let mut text = &text[1..text.len() - 1];
        if text == "*" {
            text = ":";
        }
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > 1 {
            let mut union = Vec::new();
            for part in parts {
                union.push(parse_action(&format!("[{}]", part.trim_matches(' ')))?);
            }
            cur.push(Step::Union(union));
            return Ok(());
        }
        if let Some(key) = text
            .strip_prefix('\'')
            .and_then(|t| t.strip_suffix('\''))
            .filter(|k| !k.contains('\''))
        {
            cur.extend(parse_action(&format!(".{key}"))?);
            return Ok(());
        }
        let Some(groups) = slice_groups(text) else {
            return Err(format!("invalid array index {text}"));
        };
        let mut params = [Param::default(); 3];
        for i in 0..3 {
            let mut v = groups[i];
            if !v.is_empty() {
                if i > 0 {
                    v = &v[1..];
                }
                if i > 0 && v.is_empty() {
                    params[i].known = false;
                } else {
                    params[i].known = true;
                    params[i].value = v
                        .parse()
                        .map_err(|_| format!("array index {v} is not a number"))?;
                }
            } else if i == 1 {
                params[i] = Param {
                    value: params[0].value + 1,
                    known: true,
                    derived: true,
                };
            }
        }
        cur.push(Step::Array(params));
        Ok(())
    }

    fn filter(&mut self, cur: &mut Vec<Step>) -> Result<(), String> {
        self.pos += 3;
        self.consume();
        let (mut begin, mut end) = (false, false);
        let mut pair = EOF;
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated filter".into()),
                Some(r @ ('"' | '\'')) => {
                    if !begin {
                        begin = true;
                        pair = r;
                        continue;
                    }
                    if self.input.as_bytes()[self.pos - 2] != b'\\' && r == pair {
                        end = true;
                    }
                }
                Some(')') if begin == end => break,
                Some(_) => {}
            }
        }
        if self.next() != Some(']') {
            return Err("unclosed array expect ]".into());
        }
        let text = self.consume();
        let text = &text[..text.len() - 2];
        match split_filter(text) {
            None => cur.push(Step::Filter(Box::new(Filter {
                left: parse_action(text)?,
                right: Vec::new(),
                op: "exists".into(),
            }))),
            Some((left, op, right)) => cur.push(Step::Filter(Box::new(Filter {
                left: parse_action(left)?,
                right: parse_action(right)?,
                op: op.to_string(),
            }))),
        }
        Ok(())
    }

    fn quote(&mut self, cur: &mut Vec<Step>, end: char) -> Result<(), String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated quoted string".into()),
                Some(c) if c == end && self.input.as_bytes()[self.pos - 2] != b'\\' => break,
                Some(_) => {}
            }
        }
        let value = self.consume();
        let s = unquote(value).map_err(|e| format!("unquote string {value} error {e}"))?;
        cur.push(Step::Text(s));
        Ok(())
    }

    fn field(&mut self, cur: &mut Vec<Step>) {
        self.consume();
        loop {
            let r = self.next();
            if r == Some('\\') {
                self.next();
            } else if is_terminator(r) {
                if r.is_some() {
                    self.backup();
                }
                break;
            }
        }
        let value = self.consume();
        if value == "*" {
            cur.push(Step::Wildcard);
        } else {
            cur.push(Step::Field(value.replace('\\', "")));
        }
    }
}

/// `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$`: the three groups, empty when absent.
fn slice_groups(text: &str) -> Option<[&str; 3]> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut groups = [""; 3];
    for (g, group) in groups.iter_mut().enumerate() {
        let start = i;
        if g > 0 {
            if b.get(i) != Some(&b':') {
                break;
            }
            i += 1;
        }
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        *group = &text[start..i];
    }
    (i == b.len()).then_some(groups)
}

/// `^([^!<>=]+)([!<>=]+)(.+?)$`.
fn split_filter(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| "!<>=".contains(c);
    let op_start = text.find(is_op)?;
    if op_start == 0 {
        return None;
    }
    let op_len = text[op_start..].find(|c| !is_op(c))?;
    let right = &text[op_start + op_len..];
    if right.is_empty() || right.contains('\n') {
        return None;
    }
    Some((&text[..op_start], &text[op_start..op_start + op_len], right))
}

/// client-go's `UnquoteExtend`: Go's unquoting, for single quotes too.
fn unquote(s: &str) -> Result<String, &'static str> {
    const SYNTAX: &str = "invalid syntax";
    let quote = s.chars().next().ok_or(SYNTAX)?;
    if s.len() < 2 || !s.ends_with(quote) || !(quote == '"' || quote == '\'') {
        return Err(SYNTAX);
    }
    let body = &s[1..s.len() - 1];
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == quote {
            return Err(SYNTAX);
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next().ok_or(SYNTAX)?;
        let hex = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize| {
            let digits: String = (0..n).filter_map(|_| chars.next()).collect();
            if digits.len() != n {
                return Err(SYNTAX);
            }
            u32::from_str_radix(&digits, 16).map_err(|_| SYNTAX)
        };
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' if e == quote => out.push(e),
            'x' => out.push(char::from_u32(hex(&mut chars, 2)?).ok_or(SYNTAX)?),
            'u' => out.push(char::from_u32(hex(&mut chars, 4)?).ok_or(SYNTAX)?),
            'U' => out.push(char::from_u32(hex(&mut chars, 8)?).ok_or(SYNTAX)?),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    let d = chars.next().and_then(|c| c.to_digit(8)).ok_or(SYNTAX)?;
                    v = v * 8 + d;
                }
                if v > 255 {
                    return Err(SYNTAX);
                }
                out.push(char::from_u32(v).ok_or(SYNTAX)?);
            }
            _ => return Err(SYNTAX),
        }
    }
    Ok(out)
}

type Values<'a> = Vec<Cow<'a, Value>>;

struct Eval {
    allow_missing: bool,
}

/// Go's `reflect` type name of a decoded JSON value, for error texts.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "interface {}",
        Value::Bool(_) => "bool",
        Value::Number(n) => match go::num(n) {
            go::Num::Int(_) => "int64",
            go::Num::Float(_) => "float64",
        },
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

impl Eval {
    fn items<'a>(
        &self,
        items: &[Item],
        cur: &'a Value,
        sets: &mut Vec<Values<'a>>,
    ) -> Result<(), String> {
        for item in items {
            match item {
                Item::Text(t) => sets.push(vec![Cow::Owned(Value::String(t.clone()))]),
                Item::Expr(steps) => sets.push(self.list(vec![Cow::Borrowed(cur)], steps)?),
                Item::StrayEnd => return Err("not in range, nothing to end".into()),
                Item::Range(steps, body) => {
                    let results = self.list(vec![Cow::Borrowed(cur)], steps)?;
                    for r in results {
                        match r {
                            Cow::Borrowed(v) => self.items(body, v, sets)?,
                            Cow::Owned(v) => {
                                let mut inner = Vec::new();
                                self.items(body, &v, &mut inner)?;
                                sets.extend(inner.into_iter().map(|set| {
                                    set.into_iter()
                                        .map(|c| Cow::Owned(c.into_owned()))
                                        .collect::<Values<'a>>()
                                }));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn list<'a>(&self, input: Values<'a>, steps: &[Step]) -> Result<Values<'a>, String> {
        let mut cur = input;
        for step in steps {
            cur = self.step(cur, step)?;
        }
        Ok(cur)
    }

    fn step<'a>(&self, input: Values<'a>, step: &Step) -> Result<Values<'a>, String> {
        match step {
            Step::Text(t) => Ok(vec![Cow::Owned(Value::String(t.clone()))]),
            Step::Int(i) => Ok(input.iter().map(|_| Cow::Owned(Value::from(*i))).collect()),
            Step::Float(f) => Ok(input
                .iter()
                .map(|_| Cow::Owned(Number::from_f64(*f).map_or(Value::Null, Value::Number)))
                .collect()),
            Step::Bool(b) => Ok(input.iter().map(|_| Cow::Owned(Value::Bool(*b))).collect()),
            Step::Identifier(name) => match name.as_str() {
                // A `range` inside an expression, or an `end` with more after it.
                "range" => Ok(input),
                "end" => Ok(Vec::new()),
                other => Err(format!("unrecognized identifier {other}")),
            },
            Step::Field(name) => self.field(input, name),
            Step::Wildcard => Ok(input.into_iter().flat_map(children).collect()),
            Step::Recursive => {
                let mut out = Vec::new();
                for v in input {
                    recursive(v, &mut out);
                }
                Ok(out)
            }
            Step::Union(lists) => {
                let mut out = Vec::new();
                for l in lists {
                    out.extend(self.list(input.clone(), l)?);
                }
                Ok(out)
            }
            Step::Array(params) => array(input, params),
            Step::Filter(f) => self.filter(input, f),
        }
    }

    fn field<'a>(&self, input: Values<'a>, name: &str) -> Result<Values<'a>, String> {
        if input.is_empty() {
            return Ok(input);
        }
        let mut out = Vec::new();
        for v in input {
            match v {
                Cow::Borrowed(Value::Object(m)) => {
                    if let Some(x) = m.get(name) {
                        out.push(Cow::Borrowed(x));
                    }
                }
                Cow::Owned(Value::Object(mut m)) => {
                    if let Some(x) = m.remove(name) {
                        out.push(Cow::Owned(x));
                    }
                }
                _ => {}
            }
        }
        if out.is_empty() && !self.allow_missing {
            return Err(format!("{name} is not found"));
        }
        Ok(out)
    }

    fn filter<'a>(&self, input: Values<'a>, f: &Filter) -> Result<Values<'a>, String> {
        let mut out = Vec::new();
        for v in input {
            let elems: Values<'a> = match v {
                Cow::Borrowed(Value::Array(a)) => a.iter().map(Cow::Borrowed).collect(),
                Cow::Owned(Value::Array(a)) => a.into_iter().map(Cow::Owned).collect(),
                other => {
                    return Err(format!(
                        "{} is not array or slice and cannot be filtered",
                        go::sprint(&other)
                    ));
                }
            };
            for elem in elems {
                let lefts = self.list(vec![elem.clone()], &f.left);
                if f.op == "exists" {
                    if lefts.is_ok_and(|l| !l.is_empty()) {
                        out.push(elem);
                    }
                    continue;
                }
                let lefts = lefts?;
                let left = match lefts.len() {
                    0 => continue,
                    1 => lefts[0].clone(),
                    _ => return Err("can only compare one element at a time".into()),
                };
                let rights = self.list(vec![elem.clone()], &f.right)?;
                let right = match rights.len() {
                    0 => continue,
                    1 => rights[0].clone(),
                    _ => return Err("can only compare one element at a time".into()),
                };
                if compare(&f.op, &left, &right)? {
                    out.push(elem);
                }
            }
        }
        Ok(out)
    }
}

fn children(v: Cow<'_, Value>) -> Values<'_> {
    match v {
        Cow::Borrowed(Value::Object(m)) => m.values().map(Cow::Borrowed).collect(),
        Cow::Borrowed(Value::Array(a)) => a.iter().map(Cow::Borrowed).collect(),
        Cow::Owned(Value::Object(m)) => m.into_iter().map(|(_, v)| Cow::Owned(v)).collect(),
        Cow::Owned(Value::Array(a)) => a.into_iter().map(Cow::Owned).collect(),
        // Go's reflection walks a string's bytes.
        v => match v.as_ref() {
            Value::String(s) => s.bytes().map(|b| Cow::Owned(Value::from(b))).collect(),
            _ => Vec::new(),
        },
    }
}

/// `..`: every value that has children, each followed by its descendants.
fn recursive<'a>(v: Cow<'a, Value>, out: &mut Values<'a>) {
    let kids = children(v.clone());
    if kids.is_empty() {
        return;
    }
    out.push(v);
    for k in kids {
        recursive(k, out);
    }
}

fn array<'a>(input: Values<'a>, params: &[Param; 3]) -> Result<Values<'a>, String> {
    let mut out = Vec::new();
    for v in input {
        let elems: Vec<Cow<'a, Value>> = match v {
            Cow::Borrowed(Value::Null) | Cow::Owned(Value::Null) => continue,
            Cow::Borrowed(Value::Array(a)) => a.iter().map(Cow::Borrowed).collect(),
            Cow::Owned(Value::Array(a)) => a.into_iter().map(Cow::Owned).collect(),
            other => return Err(format!("{} is not array or slice", type_name(&other))),
        };
        let len = elems.len() as i64;
        let mut p = *params;
        if !p[0].known {
            p[0].value = 0;
        }
        if p[0].value < 0 {
            p[0].value += len;
        }
        if !p[1].known {
            p[1].value = len;
        }
        if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
            p[1].value += len;
        }
        if p[1].value == p[0].value {
            return Ok(out);
        }
        if p[0].value >= len || p[0].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                p[0].value
            ));
        }
        if p[1].value > len || p[1].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                p[1].value - 1
            ));
        }
        if p[0].value > p[1].value {
            return Err(format!(
                "starting index {} is greater than ending index {}",
                p[0].value, p[1].value
            ));
        }
        let step = if p[2].known {
            if p[2].value <= 0 {
                return Err("step must be > 0".into());
            }
            p[2].value as usize
        } else {
            1
        };
        out.extend(
            elems
                .into_iter()
                .skip(p[0].value as usize)
                .take((p[1].value - p[0].value) as usize)
                .step_by(step),
        );
    }
    Ok(out)
}

#[derive(PartialEq)]
enum Basic<'v> {
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(&'v str),
}

fn basic(v: &Value) -> Result<Basic<'_>, String> {
    match v {
        Value::Bool(b) => Ok(Basic::Bool(*b)),
        Value::Number(n) => Ok(match go::num(n) {
            go::Num::Int(i) => Basic::Int(i),
            go::Num::Float(f) => Basic::Float(f),
        }),
        Value::String(s) => Ok(Basic::Str(s)),
        _ => Err("invalid type for comparison".into()),
    }
}

/// text/template's `eq`/`lt` family, as client-go's filters use them.
fn compare(op: &str, left: &Value, right: &Value) -> Result<bool, String> {
    let (l, r) = (basic(left)?, basic(right)?);
    let eq = || -> Result<bool, String> {
        match (&l, &r) {
            (Basic::Bool(a), Basic::Bool(b)) => Ok(a == b),
            (Basic::Int(a), Basic::Int(b)) => Ok(a == b),
            (Basic::Float(a), Basic::Float(b)) => Ok(a == b),
            (Basic::Str(a), Basic::Str(b)) => Ok(a == b),
            _ => Err("incompatible types for comparison".to_string()),
        }
    };
    let lt = || -> Result<bool, String> {
        match (&l, &r) {
            (Basic::Int(a), Basic::Int(b)) => Ok(a < b),
            (Basic::Float(a), Basic::Float(b)) => Ok(a < b),
            (Basic::Str(a), Basic::Str(b)) => Ok(a < b),
            (Basic::Bool(_), Basic::Bool(_)) => Err("invalid type for comparison".to_string()),
            _ => Err("incompatible types for comparison".to_string()),
        }
    };
    match op {
        "==" => eq(),
        "!=" => eq().map(|b| !b),
        "<" => lt(),
        "<=" => Ok(lt()? || eq()?),
        ">" => Ok(!(lt()? || eq()?)),
        ">=" => lt().map(|b| !b),
        other => Err(format!("unrecognized filter operator {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(template: &str, data: &Value) -> Result<String, String> {
        JsonPath::parse(template)?.execute(data, false, false)
    }

    fn pods() -> Value {
        json!({"kind": "List", "items": [
            {"metadata": {"name": "web-1", "labels": {"app": "web"}},
             "spec": {"containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "nginx"}]},
             "status": {"phase": "Running", "restartCount": 2,
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}},
            {"metadata": {"name": "web-2"},
             "spec": {"containers": [{"name": "c", "image": "redis", "ports": [{"containerPort": 80}]}]},
             "status": {"phase": "Pending", "restartCount": 0,
                "conditions": [{"type": "Ready", "status": "False"}]}}
        ]})
    }

    #[test]
    fn fields_wildcards_and_indexes() {
        let d = pods();
        assert_eq!(run("{.items[*].metadata.name}", &d).unwrap(), "web-1 web-2");
        assert_eq!(run("{.items[0].metadata.name}", &d).unwrap(), "web-1");
        assert_eq!(run("{.items[-1].metadata.name}", &d).unwrap(), "web-2");
        assert_eq!(
            run("{.items[0].spec.containers[0:2].image}", &d).unwrap(),
            "busybox nginx"
        );
        assert_eq!(
            run("{.items[0].spec.containers[1:].name}", &d).unwrap(),
            "b"
        );
        assert_eq!(
            run("{.items[0].metadata.labels}", &d).unwrap(),
            r#"{"app":"web"}"#
        );
        assert_eq!(run("{.items[1].status.restartCount}", &d).unwrap(), "0");
        assert_eq!(run("{..image}", &d).unwrap(), "busybox nginx redis");
        assert_eq!(
            run("{.items[0].spec.containers[*]['name','image']}", &d).unwrap(),
            "a b busybox nginx"
        );
        assert_eq!(run("{.kind}{\"\\n\"}", &d).unwrap(), "List\n");
        assert_eq!(
            run("name: {.items[1].metadata.name}!", &d).unwrap(),
            "name: web-2!"
        );
        // Text outside braces is printed as written, escapes and all, as kubectl does.
        assert_eq!(run("{.kind}\\n", &d).unwrap(), "List\\n");
    }

    #[test]
    fn filters_compare_like_text_template() {
        let d = pods();
        assert_eq!(
            run(
                r#"{.items[0].status.conditions[?(@.type=="Ready")].status}"#,
                &d
            )
            .unwrap(),
            "True"
        );
        assert_eq!(
            run(
                r#"{.items[*].status.conditions[?(@.type != 'Ready')].type}"#,
                &d
            )
            .unwrap(),
            "PodScheduled"
        );
        assert_eq!(
            run("{.items[?(@.status.restartCount>1)].metadata.name}", &d).unwrap(),
            "web-1"
        );
        assert_eq!(
            run("{.items[?(@.status.restartCount<=0)].metadata.name}", &d).unwrap(),
            "web-2"
        );
        assert_eq!(
            run("{.items[?(@.metadata.labels)].metadata.name}", &d).unwrap(),
            "web-1"
        );
        assert_eq!(
            run("{.items[?(@.status.phase==1)].metadata.name}", &d).unwrap_err(),
            "incompatible types for comparison"
        );
    }

    #[test]
    fn ranges_nest_and_iterate() {
        let d = pods();
        assert_eq!(
            run(
                r#"{range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end}"#,
                &d
            )
            .unwrap(),
            "web-1\tRunning\nweb-2\tPending\n"
        );
        assert_eq!(
            run(r#"{range .items[*]}{.metadata.name}:{range .spec.containers[*]} {.name}{end};{end}."#, &d)
                .unwrap(),
            "web-1: a b;web-2: c;."
        );
        assert_eq!(
            run("{end}", &d).unwrap_err(),
            "not in range, nothing to end"
        );
    }

    #[test]
    fn missing_fields_and_bad_indexes_fail_like_client_go() {
        let d = pods();
        assert_eq!(run("{.items[0].x.y}", &d).unwrap_err(), "x is not found");
        let quiet = JsonPath::parse("{.items[0].x.y}").unwrap();
        assert_eq!(quiet.execute(&d, true, false).unwrap(), "");
        assert_eq!(
            run("{.items[5].metadata}", &d).unwrap_err(),
            "array index out of bounds: index 5, length 2"
        );
        assert_eq!(
            run("{.kind[0]}", &d).unwrap_err(),
            "string is not array or slice"
        );
        assert_eq!(
            run("{metadata}", &d).unwrap_err(),
            "unrecognized identifier metadata"
        );
    }

    #[test]
    fn parse_errors_read_like_client_go() {
        assert_eq!(JsonPath::parse("{.a").unwrap_err(), "unclosed action");
        assert_eq!(JsonPath::parse("{.a[1").unwrap_err(), "unterminated array");
        assert_eq!(
            JsonPath::parse("{.a[x]}").unwrap_err(),
            "invalid array index x"
        );
        assert_eq!(
            JsonPath::parse("{#}").unwrap_err(),
            "unrecognized character in action: U+0023 '#'"
        );
        assert_eq!(
            JsonPath::parse("{\"a}").unwrap_err(),
            "unterminated quoted string"
        );
    }

    #[test]
    fn as_json_prints_each_action_as_an_array() {
        let d = pods();
        let jp = JsonPath::parse("{.items[*].metadata.name}").unwrap();
        assert_eq!(
            jp.execute(&d, true, true).unwrap(),
            "[\n    \"web-1\",\n    \"web-2\"\n]\n"
        );
    }
}
