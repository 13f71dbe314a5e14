//! The output printers of the client verbs, as kubectl 1.3x prints: the server's
//! `meta.k8s.io/v1` Tables laid out like `kubectl get` (also while watching), `-o json`,
//! `-o yaml`, `-o name`, `-o jsonpath=…` and `-o custom-columns=…`, and OpenShift's ages.
//! Pure functions over `serde_json::Value`; the verbs do the I/O.

mod go;
pub mod jsonpath;
mod yaml;

use serde_json::{Value, json};

pub use jsonpath::JsonPath;

use super::tabwriter::{Layout, TabWriter};

/// The formats `-o` accepts in kubectl, in the order its error message lists them.
pub const ALLOWED_FORMATS: &str = "custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,jsonpath-as-json,jsonpath-file,name,template,templatefile,wide,yaml";

/// What `-o` asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The server's Table (no `-o`).
    Table,
    /// The server's Table with its priority columns.
    Wide,
    Json,
    Yaml,
    Name,
    JsonPath(JsonPath),
    /// `-o jsonpath-as-json=…`: each action's results as a JSON array.
    JsonPathAsJson(JsonPath),
    CustomColumns(Vec<Column>),
}

/// One column of `-o custom-columns`.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub header: String,
    pub path: JsonPath,
}

impl Output {
    /// Parses the value of `-o`; errors are kubectl's texts (without `error: `).
    pub fn parse(s: &str) -> Result<Output, String> {
        match s {
            "" => return Ok(Output::Table),
            "wide" => return Ok(Output::Wide),
            "json" => return Ok(Output::Json),
            "yaml" => return Ok(Output::Yaml),
            "name" => return Ok(Output::Name),
            _ => {}
        }
        let (format, arg) = s.split_once('=').unwrap_or((s, ""));
        let arg = unquote_arg(arg);
        match format {
            "jsonpath" | "jsonpath-as-json" => {
                if arg.is_empty() {
                    return Err("template format specified but no template given".into());
                }
                let jp = JsonPath::parse(arg)
                    .map_err(|e| format!("error parsing jsonpath {arg}, {e}"))?;
                Ok(if format == "jsonpath" {
                    Output::JsonPath(jp)
                } else {
                    Output::JsonPathAsJson(jp)
                })
            }
            "custom-columns" => custom_columns_spec(arg).map(Output::CustomColumns),
            "go-template" | "template" => Err(format!(
                "berth does not implement Go templates (-o {format}); use -o jsonpath=... instead"
            )),
            "go-template-file" | "templatefile" | "jsonpath-file" | "custom-columns-file" => {
                Err(format!(
                    "berth does not read templates from files (-o {format}); pass the template \
                     inline with -o jsonpath=... or -o custom-columns=..."
                ))
            }
            _ => Err(format!(
                "unable to match a printer suitable for the output format {}, allowed formats \
                 are: {ALLOWED_FORMATS}",
                go::go_quote(s)
            )),
        }
    }

    /// Whether this output prints the server's Table (and so needs one).
    pub fn is_table(&self) -> bool {
        matches!(self, Output::Table | Output::Wide)
    }

    /// Prints `doc` (see [`document`]) in a format other than the table formats: JSON,
    /// YAML, names, JSONPath or custom columns. The error is kubectl's text.
    pub fn render(&self, doc: &Value, no_headers: bool) -> Result<String, String> {
        match self {
            Output::Table | Output::Wide => {
                Err("the table formats print the server's Table; use print::table".into())
            }
            Output::Json => Ok(json(doc)),
            Output::Yaml => Ok(yaml(doc)),
            Output::Name => name(doc),
            Output::JsonPath(jp) => jsonpath(jp, doc, true, false),
            Output::JsonPathAsJson(jp) => jsonpath(jp, doc, true, true),
            Output::CustomColumns(cols) => custom_columns(cols, doc, no_headers),
        }
    }
}

/// A template argument given with its shell quotes still on (`jsonpath='{.a}'`).
fn unquote_arg(arg: &str) -> &str {
    for q in ['\'', '"'] {
        if arg.len() >= 2 && arg.starts_with(q) && arg.ends_with(q) {
            return &arg[1..arg.len() - 1];
        }
    }
    arg
}

/// What `get` prints in the generic formats: one object when the user named exactly one
/// (`get pod x`), otherwise every object in kubectl's `List` wrapper, so that
/// `{.items[*]…}` works.
pub fn document(mut objects: Vec<Value>, single: bool) -> Value {
    if single && objects.len() == 1 {
        return objects.remove(0);
    }
    json!({
        "apiVersion": "v1",
        "items": objects,
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    })
}

/// `-o json`: four-space indent, sorted keys, a final newline.
pub fn json(doc: &Value) -> String {
    let mut s = go::json_indent(doc);
    s.push('\n');
    s
}

/// Drops `metadata.managedFields` from an object, or from each item of a list.
pub fn strip_managed_fields(doc: &mut Value) {
    if let Some(m) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    if let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip_managed_fields);
    }
}

/// `-o yaml`.
pub fn yaml(doc: &Value) -> String {
    yaml::to_string(doc)
}

/// The objects of a document: a List's items, or the object itself.
fn objects(doc: &Value) -> Vec<&Value> {
    match doc.get("items").and_then(Value::as_array) {
        Some(items) if doc["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
            items.iter().collect()
        }
        _ => vec![doc],
    }
}

/// The group of an `apiVersion` (`""` for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// `kind` or `kind.group`, lower-case: how `-o name` and `--show-kind` name a type.
pub fn kind_prefix(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_lowercase()
    } else {
        format!("{}.{group}", kind.to_lowercase())
    }
}

/// `-o name`: `pod/web-1`, `deploymentconfig.apps.openshift.io/x`, one a line.
pub fn name(doc: &Value) -> Result<String, String> {
    let mut out = String::new();
    for obj in objects(doc) {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = obj["kind"].as_str().unwrap_or("");
        if kind.is_empty() {
            return Err(format!("missing kind for resource with name {name}"));
        }
        let group = group_of(obj["apiVersion"].as_str().unwrap_or(""));
        out.push_str(&format!("{}/{name}\n", kind_prefix(group, kind)));
    }
    Ok(out)
}

/// `-o jsonpath=…`: the template over the document; errors as kubectl reports them.
pub fn jsonpath(
    jp: &JsonPath,
    doc: &Value,
    allow_missing: bool,
    as_json: bool,
) -> Result<String, String> {
    jp.execute(doc, allow_missing, as_json).map_err(|e| {
        format!(
            "error executing jsonpath {}: Error executing template: {e}. Printing more \
             information for debugging the template:\n\ttemplate was:\n\t\t{}\n\tobject given \
             to jsonpath engine was:\n\t\t{}\n\n",
            go::go_quote(jp.raw()),
            jp.raw(),
            go::sharp_v(doc)
        )
    })
}

const PATH_HINT: &str = "unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'";

/// kubectl's `RelaxedJSONPathExpression`: `a.b`, `.a.b`, `{a.b}` and `{.a.b}` all mean
/// `{.a.b}`.
fn relaxed_path(expr: &str) -> Result<String, String> {
    if expr.is_empty() {
        return Ok(String::new());
    }
    let inner = expr
        .strip_prefix('{')
        .and_then(|e| e.strip_suffix('}'))
        .unwrap_or(expr);
    let inner = inner.strip_prefix('.').unwrap_or(inner);
    if inner.is_empty() || inner.contains(['{', '}']) {
        return Err(PATH_HINT.into());
    }
    Ok(format!("{{.{inner}}}"))
}

fn custom_columns_spec(spec: &str) -> Result<Vec<Column>, String> {
    if spec.is_empty() {
        return Err("custom-columns format specified but no custom columns given".into());
    }
    spec.split(',')
        .map(|part| {
            let (header, path) = part.split_once(':').ok_or_else(|| {
                format!(
                    "unexpected custom-columns spec: {part}, expected <header>:<json-path-expr>"
                )
            })?;
            let path = JsonPath::parse(&relaxed_path(path)?)?;
            Ok(Column {
                header: header.to_string(),
                path,
            })
        })
        .collect()
}

/// kubectl's `EscapeTerminal`: no terminal escapes reach the screen.
fn escape_terminal(s: &str) -> String {
    s.replace('\u{1b}', "^[").replace('\r', "\\r")
}

/// `-o custom-columns=…`: a header line, then a line per object, `<none>` where nothing
/// matched, several matches joined by commas.
pub fn custom_columns(cols: &[Column], doc: &Value, no_headers: bool) -> Result<String, String> {
    let mut text = String::new();
    if !no_headers {
        let headers: Vec<&str> = cols.iter().map(|c| c.header.as_str()).collect();
        text.push_str(&headers.join("\t"));
        text.push('\n');
    }
    for obj in objects(doc) {
        let mut cells = Vec::new();
        for c in cols {
            let sets = c.path.find(obj, true)?;
            let values: Vec<String> = sets
                .iter()
                .flatten()
                .map(|v| escape_terminal(&go::sprint(v)))
                .collect();
            if sets.first().is_none_or(Vec::is_empty) {
                let mut all = vec!["<none>".to_string()];
                all.extend(values);
                cells.push(all.join(","));
            } else {
                cells.push(values.join(","));
            }
        }
        text.push_str(&cells.join("\t"));
        text.push('\n');
    }
    let mut w = TabWriter::new(Layout::TABLE).remember_widths();
    w.write(&text);
    Ok(w.finish())
}

/// How `get` lays out the server's Tables.
#[derive(Debug, Clone, Default)]
pub struct TableOptions {
    /// `-o wide`: also the columns of priority above 0.
    pub wide: bool,
    pub no_headers: bool,
    /// `--show-labels`: a LABELS column.
    pub show_labels: bool,
    /// `-L`: a column per label key.
    pub label_columns: Vec<String>,
    /// `-A`: a leading NAMESPACE column for namespaced kinds.
    pub all_namespaces: bool,
    /// `--show-kind`: names as `kind/name` (also when several kinds are printed).
    pub show_kind: bool,
    /// The namespace of "No resources found in <ns> namespace.".
    pub namespace: String,
}

/// One server Table and what it lists.
#[derive(Debug, Clone, Copy)]
pub struct KindTable<'a> {
    /// The API group (`""` for the core group).
    pub group: &'a str,
    pub kind: &'a str,
    pub namespaced: bool,
    pub table: &'a Value,
}

/// What a printer produced: `stdout` for standard output, `stderr` (kubectl's
/// "No resources found" notice) for standard error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
}

/// kubectl's `HumanReadablePrinter` for server Tables of one kind.
#[derive(Debug)]
struct Human {
    opts: TableOptions,
    /// `kind/` prefix for the name column.
    kind: Option<String>,
    with_namespace: bool,
    last_columns: Option<Vec<Value>>,
    printed_headers: bool,
}

/// kubectl flushes its tabwriter every this many rows, so later rows may not widen the
/// columns of earlier ones.
const FLUSH_ROWS: usize = 100;

impl Human {
    fn new(
        opts: &TableOptions,
        group: &str,
        kind: &str,
        namespaced: bool,
        with_kind: bool,
    ) -> Self {
        Human {
            opts: opts.clone(),
            kind: (with_kind && !kind.is_empty()).then(|| kind_prefix(group, kind)),
            with_namespace: opts.all_namespaces && namespaced,
            last_columns: None,
            printed_headers: false,
        }
    }

    /// Prints one Table into `w`; rows past each [`FLUSH_ROWS`] are flushed into `sink`.
    fn print(&mut self, table: &Value, event: Option<&str>, w: &mut TabWriter, sink: &mut String) {
        let given: Vec<Value> = table["columnDefinitions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut no_headers = self.opts.no_headers;
        if self.printed_headers && (given.is_empty() || Some(&given) == self.last_columns.as_ref())
        {
            no_headers = true;
        }
        let columns = if given.is_empty() {
            self.last_columns.clone().unwrap_or_default()
        } else {
            if Some(&given) != self.last_columns.as_ref() {
                self.last_columns = Some(given.clone());
                self.printed_headers = false;
            }
            given
        };
        let rows: Vec<Value> = table["rows"].as_array().cloned().unwrap_or_default();
        if !rows.is_empty() {
            self.printed_headers = true;
        }
        let (mut cols, mut cells) = self.decorate(&columns, &rows);
        if let Some(e) = event {
            cols.insert(0, ("Event".to_string(), 0));
            for row in &mut cells {
                row.insert(0, Value::String(event_type(e).to_string()));
            }
        }
        if !no_headers {
            if cells.is_empty() {
                return;
            }
            let names: Vec<String> = cols
                .iter()
                .filter(|(_, p)| self.opts.wide || *p == 0)
                .map(|(n, _)| n.to_uppercase())
                .collect();
            w.write(&names.join("\t"));
            w.write("\n");
        }
        for (ri, row) in cells.iter().enumerate() {
            let mut line = String::new();
            let mut first = true;
            for (i, cell) in row.iter().enumerate() {
                let Some((_, priority)) = cols.get(i) else {
                    break;
                };
                if !self.opts.wide && *priority != 0 {
                    continue;
                }
                if !first {
                    line.push('\t');
                }
                first = false;
                match cell {
                    Value::Null => {}
                    Value::String(s) => line.push_str(&cell_text(s)),
                    other => line.push_str(&cell_text(&go::sprint(other))),
                }
            }
            line.push('\n');
            w.write(&line);
            if (ri + 1) % FLUSH_ROWS == 0 {
                sink.push_str(&w.take());
            }
        }
    }

    /// kubectl's `decorateTable`: NAMESPACE, label and LABELS columns and `kind/` names.
    fn decorate(&self, columns: &[Value], rows: &[Value]) -> (Vec<(String, i64)>, Vec<Vec<Value>>) {
        let o = &self.opts;
        let base: Vec<(String, i64)> = columns
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    c["priority"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        let width = base.len()
            + o.label_columns.len()
            + usize::from(self.with_namespace)
            + usize::from(o.show_labels);
        let mut cols = Vec::with_capacity(width);
        if self.with_namespace {
            cols.push(("Namespace".to_string(), 0));
        }
        cols.extend(base);
        for l in &o.label_columns {
            cols.push((l.rsplit('/').next().unwrap_or(l).to_uppercase(), 0));
        }
        if o.show_labels {
            cols.push(("Labels".to_string(), 0));
        }
        let name_column = self.kind.as_ref().and_then(|_| {
            columns
                .iter()
                .position(|c| c["format"] == "name" && c["type"] == "string")
        });
        let include_labels = !o.label_columns.is_empty() || o.show_labels;
        let cells = rows
            .iter()
            .map(|row| {
                let mut cells: Vec<Value> = row["cells"].as_array().cloned().unwrap_or_default();
                if !(include_labels || self.with_namespace || name_column.is_some()) {
                    return cells;
                }
                if let (Some(i), Some(kind)) = (name_column, &self.kind)
                    && let Some(c) = cells.get_mut(i)
                {
                    let name = match &*c {
                        Value::String(s) => s.clone(),
                        other => go::sprint(other),
                    };
                    *c = Value::String(format!("{kind}/{name}"));
                }
                let object = &row["object"];
                if !object.is_object() {
                    if self.with_namespace {
                        cells.insert(0, Value::Null);
                    }
                    // Go's loop re-reads the length as it appends.
                    let mut j = 0;
                    while j < width.saturating_sub(cells.len()) {
                        cells.push(Value::Null);
                        j += 1;
                    }
                    return cells;
                }
                if self.with_namespace {
                    let ns = object.pointer("/metadata/namespace").cloned();
                    cells.insert(0, ns.unwrap_or_else(|| json!("")));
                }
                if include_labels {
                    let labels = object
                        .pointer("/metadata/labels")
                        .and_then(Value::as_object);
                    for key in &o.label_columns {
                        let v = labels.and_then(|l| l.get(key)).cloned();
                        cells.push(v.unwrap_or_else(|| json!("")));
                    }
                    if o.show_labels {
                        cells.push(Value::String(format_labels(labels)));
                    }
                }
                cells
            })
            .collect();
        (cols, cells)
    }
}

/// `labels.FormatLabels`: `a=b,c=d` in key order, `<none>` when empty.
fn format_labels(labels: Option<&serde_json::Map<String, Value>>) -> String {
    let pairs: Vec<String> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A cell as kubectl prints it: cut at the first line break (marked `...`), terminal
/// escapes defused.
fn cell_text(s: &str) -> String {
    match s.find(['\u{c}', '\n', '\r']) {
        Some(i) => format!("{}...", escape_terminal(&s[..i])),
        None => escape_terminal(s),
    }
}

/// The EVENT column of `--output-watch-events`.
fn event_type(e: &str) -> &str {
    match e {
        "ADDED" => "ADDED   ",
        "MODIFIED" => "MODIFIED",
        "DELETED" => "DELETED ",
        "ERROR" => "ERROR   ",
        other => other,
    }
}

/// `kubectl get` of one or more server Tables: consecutive tables of the same kind share
/// a header and column widths; a blank line separates kinds. When nothing was printed,
/// `stderr` carries kubectl's "No resources found" notice.
pub fn table(tables: &[KindTable<'_>], opts: &TableOptions) -> Printed {
    let several_kinds = tables
        .iter()
        .any(|t| (t.group, t.kind) != (tables[0].group, tables[0].kind));
    let with_kind = opts.show_kind || several_kinds;
    let mut out = String::new();
    let mut separator_ready = false;
    let emit = |out: &mut String, ready: &mut bool, chunk: String| {
        if !chunk.is_empty() {
            if *ready {
                out.push('\n');
                *ready = false;
            }
            out.push_str(&chunk);
        }
    };
    let mut w = TabWriter::new(Layout::TABLE).remember_widths();
    let mut printer: Option<(Human, &str, &str)> = None;
    for t in tables {
        let same = printer
            .as_ref()
            .is_some_and(|(_, g, k)| (*g, *k) == (t.group, t.kind));
        if !same {
            let chunk =
                std::mem::replace(&mut w, TabWriter::new(Layout::TABLE).remember_widths()).finish();
            emit(&mut out, &mut separator_ready, chunk);
            if printer.is_some() && !opts.no_headers && !out.is_empty() {
                separator_ready = true;
            }
            printer = Some((
                Human::new(opts, t.group, t.kind, t.namespaced, with_kind),
                t.group,
                t.kind,
            ));
        }
        let (human, _, _) = printer.as_mut().expect("a printer was just made");
        let mut sink = String::new();
        human.print(t.table, None, &mut w, &mut sink);
        emit(&mut out, &mut separator_ready, sink);
    }
    emit(&mut out, &mut separator_ready, w.finish());
    let mut stderr = String::new();
    if out.is_empty() {
        let all_namespaced = !opts.all_namespaces && tables.iter().all(|t| t.namespaced);
        stderr = if all_namespaced {
            format!("No resources found in {} namespace.\n", opts.namespace)
        } else {
            "No resources found\n".to_string()
        };
    }
    Printed {
        stdout: out,
        stderr,
    }
}

/// `kubectl get -w` in the table formats: the first Table (the list), then the Table of
/// each watch event, lined up with what was printed before.
#[derive(Debug)]
pub struct WatchPrinter {
    human: Human,
    w: TabWriter,
}

impl WatchPrinter {
    pub fn new(opts: &TableOptions, group: &str, kind: &str, namespaced: bool) -> Self {
        WatchPrinter {
            human: Human::new(opts, group, kind, namespaced, opts.show_kind),
            w: TabWriter::new(Layout::TABLE).remember_widths(),
        }
    }

    /// Prints one Table; `event` (`ADDED`, `MODIFIED`, …) adds the EVENT column of
    /// `--output-watch-events`. Returns the text to write now.
    pub fn print(&mut self, table: &Value, event: Option<&str>) -> String {
        let mut out = String::new();
        self.human.print(table, event, &mut self.w, &mut out);
        out.push_str(&self.w.take());
        out
    }
}

/// OpenShift's ages ("%s ago" in `oc` texts), from docker's `HumanDuration`.
pub fn oc_age(seconds: i64) -> String {
    let s = seconds;
    if s < 1 {
        return "Less than a second".into();
    }
    if s == 1 {
        return "1 second".into();
    }
    if s < 60 {
        return format!("{s} seconds");
    }
    let minutes = s / 60;
    if minutes == 1 {
        return "About a minute".into();
    }
    if minutes < 60 {
        return format!("{minutes} minutes");
    }
    let hours = (s as f64 / 3600.0).round() as i64;
    if hours == 1 {
        "About an hour".into()
    } else if hours < 48 {
        format!("{hours} hours")
    } else if hours < 24 * 7 * 2 {
        format!("{} days", hours / 24)
    } else if hours < 24 * 30 * 2 {
        format!("{} weeks", hours / 24 / 7)
    } else if hours < 24 * 365 * 2 {
        format!("{} months", hours / 24 / 30)
    } else {
        format!("{} years", s / 3600 / 24 / 365)
    }
}

#[cfg(test)]
mod tests;
