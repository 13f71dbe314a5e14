//! `get`: kubectl's listing verb. Resource types and names in kubectl's argument forms,
//! label and field selectors, `-A`, the server's Tables laid out by [`super::print`] or
//! any other `-o` format, and `-w` by watch.

use reqwest::Method;
use serde_json::{Value, json};

use crate::client::Resource;
use crate::client::{Client, Event, ListParams, RawRequest, WatchParams};

use super::print::{self, KindTable, Output, TableOptions, WatchPrinter};
use super::resource::{self, Target};
use super::{CliError, Conn, out};

/// What kubectl asks for to get server-side printing.
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

#[derive(Debug, Clone, Default, clap::Args)]
pub struct GetArgs {
    /// `TYPE[,TYPE...] [NAME...]` or `TYPE/NAME...`.
    pub args: Vec<String>,
    /// Output format: wide, json, yaml, name, jsonpath=..., jsonpath-as-json=...,
    /// custom-columns=....
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    /// Keep metadata.managedFields when printing JSON or YAML.
    #[arg(long)]
    pub show_managed_fields: bool,
    /// Only objects with these labels (`app=web,tier!=db`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Only objects whose fields match (`status.phase=Running`).
    #[arg(long)]
    pub field_selector: Option<String>,
    /// The objects of all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// After listing, print the changes as they happen.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Print only the changes, not the current objects.
    #[arg(long)]
    pub watch_only: bool,
    /// With --watch, print the type of each change (ADDED, MODIFIED, DELETED).
    #[arg(long)]
    pub output_watch_events: bool,
    /// Leave out the header line.
    #[arg(long)]
    pub no_headers: bool,
    /// Add a LABELS column.
    #[arg(long)]
    pub show_labels: bool,
    /// Add a column with the value of each of these labels.
    #[arg(short = 'L', long = "label-columns", value_delimiter = ',')]
    pub label_columns: Vec<String>,
    /// Name objects as TYPE/NAME.
    #[arg(long)]
    pub show_kind: bool,
    /// Print nothing, and succeed, for objects that do not exist.
    #[arg(long)]
    pub ignore_not_found: bool,
    /// With jsonpath, print nothing for a missing field instead of failing.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
        action = clap::ArgAction::Set)]
    pub allow_missing_template_keys: bool,
}

impl GetArgs {
    fn namespace<'a>(&self, conn: &'a Conn, res: &Resource) -> Option<&'a str> {
        (res.namespaced && !self.all_namespaces).then_some(conn.namespace.as_str())
    }

    fn selection(&self) -> ListParams {
        ListParams {
            label_selector: self.selector.clone(),
            field_selector: self.field_selector.clone(),
        }
    }

    fn selection_query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(l) = self.selector.as_deref().filter(|s| !s.is_empty()) {
            q.push(("labelSelector", l.to_string()));
        }
        if let Some(f) = self.field_selector.as_deref().filter(|s| !s.is_empty()) {
            q.push(("fieldSelector", f.to_string()));
        }
        q
    }

    fn table_options(&self, conn: &Conn, output: &Output) -> TableOptions {
        TableOptions {
            wide: *output == Output::Wide,
            no_headers: self.no_headers,
            show_labels: self.show_labels,
            label_columns: self.label_columns.clone(),
            all_namespaces: self.all_namespaces,
            show_kind: self.show_kind,
            namespace: conn.namespace.clone(),
        }
    }

    /// Prints one document in a non-table format.
    fn render(&self, output: &Output, doc: &Value) -> Result<String, CliError> {
        if matches!(output, Output::Json | Output::Yaml) && !self.show_managed_fields {
            // As kubectl: who manages which field is noise unless asked for.
            let mut doc = doc.clone();
            print::strip_managed_fields(&mut doc);
            return output.render(&doc, self.no_headers).map_err(CliError::msg);
        }
        match output {
            Output::JsonPath(jp) => {
                print::jsonpath(jp, doc, self.allow_missing_template_keys, false)
            }
            Output::JsonPathAsJson(jp) => {
                print::jsonpath(jp, doc, self.allow_missing_template_keys, true)
            }
            other => other.render(doc, self.no_headers),
        }
        .map_err(CliError::msg)
    }
}

fn object_path(res: &Resource, ns: Option<&str>, name: &str) -> String {
    format!("{}/{name}", Client::collection_path(res, ns))
}

pub async fn get(conn: &Conn, args: &GetArgs) -> Result<i32, CliError> {
    let output =
        Output::parse(args.output.as_deref().unwrap_or_default()).map_err(CliError::msg)?;
    let targets = resource::targets(&args.args)?;
    let named = targets.iter().any(|t| !t.names.is_empty());
    if named && args.all_namespaces {
        return Err(CliError::msg(
            "a resource cannot be retrieved by name across all namespaces",
        ));
    }
    if named && (args.selector.is_some() || args.field_selector.is_some()) {
        return Err(CliError::msg(
            "name cannot be provided when a selector is specified",
        ));
    }
    if args.watch || args.watch_only {
        return watch(conn, args, &output, &targets).await;
    }
    let mut errors = Vec::new();
    let keep = |e: crate::client::Error, errors: &mut Vec<CliError>| {
        if !(args.ignore_not_found && e.is_not_found()) {
            errors.push(conn.error(e));
        }
    };
    if output.is_table() {
        let mut tables: Vec<(&Resource, Value)> = Vec::new();
        for t in &targets {
            let ns = args.namespace(conn, t.res);
            let query = args.selection_query();
            let paths: Vec<String> = if t.names.is_empty() {
                vec![Client::collection_path(t.res, ns)]
            } else {
                t.names.iter().map(|n| object_path(t.res, ns, n)).collect()
            };
            for path in paths {
                let req = RawRequest {
                    query: &query,
                    accept: Some(TABLE_ACCEPT),
                    ..RawRequest::new(Method::GET, &path)
                };
                match conn.client.raw_json(&req).await {
                    Ok(table) => tables.push((t.res, table)),
                    Err(e) => keep(e, &mut errors),
                }
            }
        }
        let kinds: Vec<KindTable<'_>> = tables
            .iter()
            .map(|(res, table)| KindTable {
                group: &res.group,
                kind: &res.kind_name,
                namespaced: res.namespaced,
                table,
            })
            .collect();
        let printed = print::table(&kinds, &args.table_options(conn, &output));
        out(&printed.stdout);
        if errors.is_empty() && !args.ignore_not_found {
            eprint!("{}", printed.stderr);
        }
    } else {
        let mut objects = Vec::new();
        for t in &targets {
            let ns = args.namespace(conn, t.res);
            if t.names.is_empty() {
                match conn.client.list(t.res, ns, &args.selection()).await {
                    Ok(list) => objects.extend(list.items),
                    Err(e) => keep(e, &mut errors),
                }
            }
            for name in &t.names {
                match conn.client.get(t.res, ns, name).await {
                    Ok(obj) => objects.push(obj),
                    Err(e) => keep(e, &mut errors),
                }
            }
        }
        let single = targets.len() == 1 && targets[0].names.len() == 1;
        // A named object that is missing prints only its error; --ignore-not-found with
        // nothing found prints nothing at all.
        let failed_single = single && !errors.is_empty();
        let quiet = objects.is_empty() && args.ignore_not_found;
        if !failed_single && !quiet {
            out(&args.render(&output, &print::document(objects, single))?);
        }
    }
    finish(errors)
}

/// Prints every error but the last, which becomes the verb's failure.
fn finish(mut errors: Vec<CliError>) -> Result<i32, CliError> {
    match errors.pop() {
        None => Ok(0),
        Some(last) => {
            for e in errors {
                eprintln!("{}", e.text());
            }
            Err(last)
        }
    }
}

/// `get -w`: the current objects (unless `--watch-only`), then each change.
async fn watch(
    conn: &Conn,
    args: &GetArgs,
    output: &Output,
    targets: &[Target],
) -> Result<i32, CliError> {
    let [target] = targets else {
        return Err(CliError::msg(
            "watch is only supported on individual resources and resource collections - more \
             than 1 resource was found",
        ));
    };
    if target.names.len() > 1 {
        return Err(CliError::msg(
            "watch is only supported on individual resources and resource collections - more \
             than 1 resource was found",
        ));
    }
    let res = target.res;
    let ns = args.namespace(conn, res);
    let mut query = args.selection_query();
    if let Some(name) = target.names.first() {
        query.push(("fieldSelector", format!("metadata.name={name}")));
    }
    let initial_path = match target.names.first() {
        Some(name) => object_path(res, ns, name),
        None => Client::collection_path(res, ns),
    };
    if output.is_table() {
        let named = !target.names.is_empty();
        watch_tables(conn, args, output, res, (&initial_path, named), query).await
    } else {
        watch_objects(conn, args, output, res, target).await
    }
}

async fn watch_tables(
    conn: &Conn,
    args: &GetArgs,
    output: &Output,
    res: &'static Resource,
    (initial_path, named): (&str, bool),
    mut query: Vec<(&'static str, String)>,
) -> Result<i32, CliError> {
    let opts = args.table_options(conn, output);
    let mut printer = WatchPrinter::new(&opts, &res.group, &res.kind_name, res.namespaced);
    let event = |t: &str| args.output_watch_events.then(|| t.to_string());
    let list_query: Vec<(&str, String)> = if named { Vec::new() } else { query.clone() };
    let req = RawRequest {
        query: &list_query,
        accept: Some(TABLE_ACCEPT),
        ..RawRequest::new(Method::GET, initial_path)
    };
    let first = conn
        .client
        .raw_json(&req)
        .await
        .map_err(|e| conn.error(e))?;
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !args.watch_only {
        out(&printer.print(&first, event("ADDED").as_deref()));
    }
    query.push(("watch", "1".into()));
    query.push(("resourceVersion", rv));
    let path = Client::collection_path(res, args.namespace(conn, res));
    let mut stream = conn
        .client
        .raw_stream_accept(&path, &query, Some(TABLE_ACCEPT))
        .await
        .map_err(|e| conn.error(e))?;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk.map_err(|e| conn.error(e))?);
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let ev: Value = serde_json::from_slice(&line).map_err(|e| {
                CliError::msg(format!(
                    "the server sent a watch event that is not JSON: {e}"
                ))
            })?;
            match ev["type"].as_str().unwrap_or_default() {
                "BOOKMARK" => {}
                "ERROR" => {
                    return Err(CliError::msg(
                        ev["object"]["message"]
                            .as_str()
                            .unwrap_or("the watch failed")
                            .to_string(),
                    ));
                }
                t => out(&printer.print(&ev["object"], event(t).as_deref())),
            }
        }
    }
    Ok(0)
}

async fn watch_objects(
    conn: &Conn,
    args: &GetArgs,
    output: &Output,
    res: &'static Resource,
    target: &Target,
) -> Result<i32, CliError> {
    let ns = args.namespace(conn, res);
    let mut selection = args.selection();
    if let Some(name) = target.names.first() {
        selection.field_selector = Some(format!("metadata.name={name}"));
    }
    let print_one = |t: &str, obj: Value| -> Result<(), CliError> {
        let doc = if args.output_watch_events {
            json!({"type": t, "object": obj})
        } else {
            obj
        };
        out(&args.render(output, &doc)?);
        Ok(())
    };
    let list = conn
        .client
        .list(res, ns, &selection)
        .await
        .map_err(|e| conn.error(e))?;
    if !args.watch_only {
        for obj in list.items {
            print_one("ADDED", obj)?;
        }
    }
    let params = WatchParams {
        selection,
        resource_version: list.resource_version,
        bookmarks: false,
        timeout: None,
    };
    let mut stream = conn
        .client
        .watch(res, ns, &params)
        .await
        .map_err(|e| conn.error(e))?;
    while let Some(event) = stream.next().await {
        match event.map_err(|e| conn.error(e))? {
            Event::Added(o) => print_one("ADDED", o)?,
            Event::Modified(o) => print_one("MODIFIED", o)?,
            Event::Deleted(o) => print_one("DELETED", o)?,
            Event::Bookmark(_) => {}
        }
    }
    Ok(0)
}
