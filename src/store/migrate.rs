//! Storage migrations: numbered JSON files in `migrations/`, embedded in the binary. The
//! data directory records how many have been applied (its schema version). Opening a
//! store backs the database up, then applies every pending migration in one atomic,
//! durable commit; a directory written by a newer berth is refused.
//!
//! A migration file is `{"description": "...", "steps": [...]}` where a step is
//! `{"create": {"key": K, "value": OBJECT}}` (skipped when K exists) or
//! `{"delete": {"key": K}}`. In values, the strings `${uid}` and `${now}` become a fresh
//! UUID and the current time (RFC 3339, seconds).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::backend::{Backend, CommitBatch, Event, EventKind, Record};
use super::{Error, Result, now_ms, stamp};

/// One embedded migration.
pub struct Migration {
    pub number: u32,
    pub name: &'static str,
    source: &'static str,
}

/// Every migration, in order; `number` is the schema version it brings the store to.
pub const MIGRATIONS: &[Migration] = &[Migration {
    number: 1,
    name: "default_namespaces",
    source: include_str!("../../migrations/0001_default_namespaces.json"),
}];

/// The schema version this berth writes.
pub fn latest() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.number)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[allow(dead_code)]
    description: String,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
enum Step {
    Create { key: String, value: Value },
    Delete { key: String },
}

impl Migration {
    fn parse(&self) -> Result<File> {
        serde_json::from_str(self.source).map_err(|e| Error::Migration {
            number: self.number,
            message: format!("invalid migration file: {e}"),
        })
    }
}

/// Where the data directory stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub current: u32,
    pub latest: u32,
    /// `(number, name)` of each migration not yet applied.
    pub pending: Vec<(u32, &'static str)>,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "storage schema version: {}", self.current)?;
        writeln!(f, "latest known version:   {}", self.latest)?;
        if self.current > self.latest {
            writeln!(f, "written by a newer berth: this berth cannot open it")
        } else if self.pending.is_empty() {
            writeln!(f, "pending migrations:     none")
        } else {
            writeln!(f, "pending migrations:")?;
            for (n, name) in &self.pending {
                writeln!(f, "  {n:04}_{name}")?;
            }
            Ok(())
        }
    }
}

fn pending(current: u32) -> Vec<&'static Migration> {
    MIGRATIONS.iter().filter(|m| m.number > current).collect()
}

/// Reads the schema version of the store in `data_dir` without changing anything.
pub fn status(data_dir: &Path) -> Result<Status> {
    let dir = super::store_dir(data_dir);
    // A directory without a store is at version 0; do not create one just to look.
    let current = if dir.exists() {
        super::open_backend(&dir, super::Config::new(data_dir).log_file_bytes)?
            .meta()?
            .schema
    } else {
        0
    };
    Ok(Status {
        current,
        latest: latest(),
        pending: pending(current)
            .iter()
            .map(|m| (m.number, m.name))
            .collect(),
    })
}

/// Backs up and migrates an open backend to [`latest`]; refuses newer schemas.
pub(super) fn apply_pending(backend: &dyn Backend, data_dir: &Path) -> Result<()> {
    let meta = backend.meta()?;
    if meta.schema > latest() {
        return Err(Error::NewerSchema {
            dir: data_dir.display().to_string(),
            found: meta.schema,
            known: latest(),
        });
    }
    let todo = pending(meta.schema);
    if todo.is_empty() {
        return Ok(());
    }
    let files = todo
        .iter()
        .map(|m| m.parse().map(|f| (m.number, f)))
        .collect::<Result<Vec<_>>>()?;
    if meta.revision > 0 || meta.schema > 0 {
        let path = backup_path(data_dir, meta.schema);
        super::snapshot::write(backend, &path)?;
        tracing::info!(backup = %path.display(), "backed up the store before migrating");
    }
    let mut current: BTreeMap<Arc<str>, Record> = backend.objects()?.into_iter().collect();
    let mut events = Vec::new();
    let mut revision = meta.revision;
    let time_ms = now_ms();
    for (number, file) in files {
        for step in file.steps {
            let (key, kind, object) = match step {
                Step::Create { key, value } => {
                    if current.contains_key(key.as_str()) {
                        continue;
                    }
                    let value = serde_json::to_vec(&fill(value)).expect("JSON values serialize");
                    let template = stamp::prepare(value.into()).map_err(|e| Error::Migration {
                        number,
                        message: format!("{key}: {e}"),
                    })?;
                    (key, EventKind::Created, template.stamp(revision + 1))
                }
                Step::Delete { key } => {
                    let Some(cur) = current.get(key.as_str()) else {
                        continue;
                    };
                    let last = stamp::prepare(cur.value.clone())
                        .map_or_else(|_| cur.value.clone(), |t| t.stamp(revision + 1));
                    (key, EventKind::Deleted, last)
                }
            };
            revision += 1;
            let key: Arc<str> = Arc::from(key);
            let prev = match kind {
                EventKind::Deleted => current.remove(&key),
                _ => {
                    current.insert(
                        key.clone(),
                        Record {
                            revision,
                            value: object.clone(),
                        },
                    );
                    None
                }
            };
            events.push(Arc::new(Event {
                revision,
                key,
                kind,
                object,
                prev,
                time_ms,
            }));
        }
        tracing::info!(migration = number, "applying storage migration");
    }
    backend.commit(&CommitBatch {
        revision,
        events: &events,
        schema: Some(latest()),
    })
}

fn backup_path(data_dir: &Path, schema: u32) -> PathBuf {
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ");
    let dir = data_dir.join("backups");
    let mut path = dir.join(format!("{stamp}-v{schema}"));
    let mut n = 1;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{stamp}-v{schema}.{n}"));
    }
    path
}

/// Replaces the `${uid}` and `${now}` placeholders.
fn fill(value: Value) -> Value {
    match value {
        Value::String(s) if s == "${uid}" => Value::String(uuid::Uuid::new_v4().to_string()),
        Value::String(s) if s == "${now}" => Value::String(
            jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(fill).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, fill(v))).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_file_is_embedded_in_order() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let embedded: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{:04}_{}.json", m.number, m.name))
            .collect();
        assert_eq!(files, embedded);
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.number as usize, i + 1, "migrations are numbered from 1");
            m.parse().unwrap();
        }
    }

    #[test]
    fn placeholders_are_filled() {
        let v = fill(serde_json::json!({"a": ["${uid}", {"t": "${now}"}], "b": "x"}));
        assert_eq!(v["a"][0].as_str().unwrap().len(), 36);
        assert!(v["a"][1]["t"].as_str().unwrap().ends_with('Z'));
        assert_eq!(v["b"], "x");
    }
}
