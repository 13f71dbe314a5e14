//! The in-process transport: calls into the registry, so every write gets the same
//! defaults, validation and conflict checks as one over HTTP.

use serde_json::Value;

use super::{DeleteParams, Error, Event, Items, ListParams, ObjectList, Result, WatchParams};
use crate::registry::strategy::Acted;
use crate::registry::{
    self, DeleteOptions, ListOptions, Part, Patch, Registry, Resource, WatchEvent, WatchOptions,
    WriteOptions,
};
use crate::types::{fields, labels};

#[derive(Clone)]
pub(super) struct Local {
    registry: Registry,
}

impl From<registry::Error> for Error {
    fn from(e: registry::Error) -> Self {
        use registry::Error as R;
        let message = e.to_string();
        match e {
            R::NotFound { .. } => Error::NotFound(message),
            R::AlreadyExists { .. } => Error::AlreadyExists(message),
            R::Conflict { .. } => Error::Conflict(message),
            R::Invalid { .. } | R::Unprocessable(_) => Error::Invalid(message),
            R::BadRequest(_) | R::UnsupportedMediaType(_) | R::MethodNotAllowed(_) => {
                Error::BadRequest(message)
            }
            R::Forbidden(_) | R::Denied { .. } => Error::Forbidden(message),
            R::Expired(_) | R::ExpiredContinue { .. } => Error::Gone(message),
            R::Timeout(_) | R::TooLargeResourceVersion(_) => Error::Server { code: 504, message },
            R::TooLarge(_) => Error::Server { code: 413, message },
            R::TooManyRequests { .. } => Error::TooManyRequests(message),
            R::Internal(_) | R::Store(_) | R::Unsupported(_) => {
                Error::Server { code: 500, message }
            }
        }
    }
}

fn parse(bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| Error::Transport(format!("stored object: {e}")))
}

fn selection(p: &ListParams) -> Result<(labels::Selector, fields::Selector)> {
    let label = labels::Selector::parse(p.label_selector.as_deref().unwrap_or(""))
        .map_err(|e| Error::BadRequest(format!("label selector: {e}")))?;
    let field = fields::Selector::parse(p.field_selector.as_deref().unwrap_or(""))
        .map_err(|e| Error::BadRequest(format!("field selector: {e}")))?;
    Ok((label, field))
}

impl Local {
    pub(super) fn new(registry: Registry) -> Self {
        Local { registry }
    }

    pub(super) fn get(&self, res: &Resource, ns: Option<&str>, name: &str) -> Result<Value> {
        parse(&self.registry.get(res, ns, name)?)
    }

    pub(super) async fn list(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList> {
        let list = self.stored(res, ns, params).await?;
        Ok(ObjectList {
            items: list.items.iter().map(|b| parse(b)).collect::<Result<_>>()?,
            resource_version: list.revision.to_string(),
        })
    }

    /// [`Local::list`] with the objects left as stored, to be parsed one at a time.
    pub(super) async fn list_stored(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<(Items, String)> {
        let list = self.stored(res, ns, params).await?;
        Ok((Items::stored(list.items), list.revision.to_string()))
    }

    async fn stored(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<registry::List> {
        let (label, field) = selection(params)?;
        let list = self
            .registry
            .list(
                res,
                ns,
                &ListOptions {
                    label,
                    field,
                    ..ListOptions::default()
                },
            )
            .await?;
        Ok(list)
    }

    pub(super) async fn create(
        &self,
        res: &Resource,
        ns: Option<&str>,
        obj: &Value,
    ) -> Result<Value> {
        let w = self
            .registry
            .create(res, ns, obj.clone(), &WriteOptions::default())
            .await?;
        parse(&w.object)
    }

    pub(super) async fn update(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        obj: &Value,
        status: bool,
    ) -> Result<Value> {
        let part = if status { Part::Status } else { Part::Main };
        let w = self
            .registry
            .update(res, ns, name, obj.clone(), part, &WriteOptions::default())
            .await?;
        parse(&w.object)
    }

    pub(super) async fn patch(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        patch: &Patch,
        status: bool,
    ) -> Result<Value> {
        let part = if status { Part::Status } else { Part::Main };
        let w = self
            .registry
            .patch(res, ns, name, patch, part, &WriteOptions::default())
            .await?;
        parse(&w.object)
    }

    pub(super) async fn delete(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Value> {
        let opts = DeleteOptions {
            uid: params.uid.clone(),
            resource_version: params.resource_version.clone(),
            propagation: params.propagation,
            grace_period_seconds: params.grace_period_seconds,
            dry_run: false,
        };
        parse(&self.registry.delete(res, ns, name, &opts).await?)
    }

    pub(super) async fn act(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        sub: &str,
        body: &Value,
    ) -> Result<Value> {
        let opts = crate::registry::WriteOptions::default();
        match self.registry.act(res, ns, name, sub, body, &opts).await? {
            Acted::Created(body) => parse(&body),
            Acted::Written(w) => parse(&w.object),
            Acted::NoContent => Ok(Value::Null),
        }
    }

    pub(super) fn served_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.registry.served_changes()
    }

    pub(super) fn custom_resources(&self) -> Vec<std::sync::Arc<Resource>> {
        self.registry
            .served()
            .iter()
            .filter(|r| r.kind == crate::registry::Kind::Custom)
            .cloned()
            .collect()
    }

    pub(super) fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<std::sync::Arc<Resource>> {
        self.registry.resolve(group, version, plural)
    }

    pub(super) fn watch(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &WatchParams,
    ) -> Result<Events> {
        let (label, field) = selection(&params.selection)?;
        // The registry's own descriptor: a custom kind's is the one served now.
        let res = self
            .registry
            .resolve(&res.group, &res.version, &res.plural)
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "the server does not serve {}",
                    res.qualified_plural()
                ))
            })?;
        let watch = self.registry.watch(
            &res,
            ns,
            WatchOptions {
                resource_version: Some(params.resource_version.clone()),
                allow_bookmarks: params.bookmarks,
                label,
                field,
                ..WatchOptions::default()
            },
        )?;
        let deadline = params.timeout.map(|t| tokio::time::Instant::now() + t);
        Ok(Events { watch, deadline })
    }
}

pub(super) struct Events {
    watch: registry::Watch,
    deadline: Option<tokio::time::Instant>,
}

impl Events {
    pub(super) async fn next(&mut self) -> Option<Result<Event>> {
        let ev = match self.deadline {
            Some(d) => tokio::time::timeout_at(d, self.watch.next()).await.ok()?,
            None => self.watch.next().await,
        }?;
        Some(match ev {
            WatchEvent::Added(b) => parse(&b).map(Event::Added),
            WatchEvent::Modified(b) => parse(&b).map(Event::Modified),
            WatchEvent::Deleted(b) => parse(&b).map(Event::Deleted),
            WatchEvent::Bookmark(b) => parse(&b).map(|v| {
                Event::Bookmark(
                    v.pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                )
            }),
            WatchEvent::Error(e) => Err(e.into()),
        })
    }
}
