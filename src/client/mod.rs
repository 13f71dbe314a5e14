//! The one client interface that controllers, the node agent, the deployer and the CLI use,
//! with two transports: `Local` calls the registry in-process (the same validation,
//! admission and conflict checks as HTTP), `Http` speaks HTTPS with a bearer token.
//!
//! Objects travel as JSON values; [`Client::get_as`] and friends decode them into the
//! k8s-openapi types. The [`watcher`] turns list + watch into a stream that survives 410s
//! and disconnects, and the [`informer`] keeps a shared cache fed by it.

mod http;
pub use http::LogStream;
pub mod informer;
mod local;
pub mod recorder;
pub mod watcher;

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

// The façade through which everything above the registry names kinds and uses the API's
// rules for objects it holds.
pub use crate::registry::{
    Kind, ListMerge, Patch, Propagation, Resource, Shape, catalog, default_pod, validate_pod,
};

/// Why a request failed. Expected outcomes (not found, conflict, gone) are variants a
/// caller matches on; the message is the server's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    /// The requested history is gone (410): re-list.
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    TooManyRequests(String),
    /// Any other answer of the server.
    #[error("server answered {code}: {message}")]
    Server { code: u16, message: String },
    /// The server could not be reached or the answer could not be read.
    #[error("{0}")]
    Transport(String),
    /// An object could not be decoded into the type asked for.
    #[error("decode {kind}: {message}")]
    Decode { kind: &'static str, message: String },
}

impl Error {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::AlreadyExists(_))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a list or watch selects.
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

/// A list: the objects and the revision they reflect.
#[derive(Debug, Clone)]
pub struct ObjectList {
    pub items: Vec<Value>,
    pub resource_version: String,
}

/// The objects of a list, each parsed as it is taken. An in-process list holds the stored
/// bytes (shared with the store's cache), so a consumer that keeps less than whole
/// objects (an informer of metadata) never holds all of them parsed at once.
pub struct Items(ItemsInner);

enum ItemsInner {
    Parsed(std::vec::IntoIter<Value>),
    Stored(std::vec::IntoIter<bytes::Bytes>),
}

impl Iterator for Items {
    type Item = Value;

    fn next(&mut self) -> Option<Value> {
        match &mut self.0 {
            ItemsInner::Parsed(items) => items.next(),
            ItemsInner::Stored(items) => loop {
                match serde_json::from_slice(&items.next()?) {
                    Ok(object) => return Some(object),
                    // The store wrote it; a copy that is not JSON is damage to report,
                    // not a reason to stop serving the rest.
                    Err(e) => {
                        tracing::error!(error = %e, "skipped a stored object that is not JSON")
                    }
                }
            },
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            ItemsInner::Parsed(items) => items.size_hint(),
            ItemsInner::Stored(items) => (0, Some(items.len())),
        }
    }
}

impl Items {
    fn stored(items: Vec<bytes::Bytes>) -> Self {
        Items(ItemsInner::Stored(items.into_iter()))
    }
}

impl From<Vec<Value>> for Items {
    fn from(items: Vec<Value>) -> Self {
        Items(ItemsInner::Parsed(items.into_iter()))
    }
}

impl std::fmt::Debug for Items {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Items")
            .field("at_most", &self.size_hint().1)
            .finish()
    }
}

/// How to start a watch.
#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    pub selection: ListParams,
    /// Changes after this revision; empty means "from now" with the current objects first.
    pub resource_version: String,
    pub bookmarks: bool,
    /// The server ends the watch after this long (the watcher starts a new one).
    pub timeout: Option<Duration>,
}

/// One event of a watch.
#[derive(Debug, Clone)]
pub enum Event {
    Added(Value),
    Modified(Value),
    Deleted(Value),
    /// Only carries a resourceVersion.
    Bookmark(String),
}

/// What a deletion asks for.
#[derive(Debug, Clone, Default)]
pub struct DeleteParams {
    pub propagation: Option<Propagation>,
    /// Delete only the object with this uid (not one re-created under the same name).
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
}

/// The error a non-success answer stands for, from its `Status` body (for answers the
/// client did not receive itself, such as a refused WebSocket upgrade).
pub fn status_error(code: u16, body: &[u8]) -> Error {
    let code = reqwest::StatusCode::from_u16(code).unwrap_or(reqwest::StatusCode::BAD_GATEWAY);
    http::status_error(code, body)
}

/// A TLS client configuration that trusts the CA certificates in `ca_pem` (for
/// connections the client does not make itself, such as WebSocket streams).
pub fn tls_config(ca_pem: &str) -> Result<rustls::ClientConfig> {
    http::tls_config(ca_pem)
}

/// A request by path, for what the typed methods do not cover (tables, subresources,
/// discovery); see [`Client::raw`].
#[derive(Debug, Clone)]
pub struct RawRequest<'a> {
    pub method: reqwest::Method,
    /// From the root: `/apis/apps.openshift.io/v1/namespaces/x/deploymentconfigs/y/log`.
    pub path: &'a str,
    pub query: &'a [(&'a str, String)],
    pub body: Option<&'a Value>,
    pub content_type: Option<&'a str>,
    pub accept: Option<&'a str>,
}

impl<'a> RawRequest<'a> {
    pub fn new(method: reqwest::Method, path: &'a str) -> Self {
        RawRequest {
            method,
            path,
            query: &[],
            body: None,
            content_type: None,
            accept: None,
        }
    }
}

/// A client; cheap to clone.
#[derive(Clone)]
pub struct Client {
    transport: Transport,
}

#[derive(Clone)]
enum Transport {
    Local(local::Local),
    Http(http::Http),
}

/// A running watch.
pub struct EventStream {
    inner: Events,
}

enum Events {
    Local(Box<local::Events>),
    Http(http::Events),
}

impl EventStream {
    /// The next event; `None` when the server ended the watch; `Err(Gone)` when the
    /// history it started from is compacted.
    pub async fn next(&mut self) -> Option<Result<Event>> {
        match &mut self.inner {
            Events::Local(e) => e.next().await,
            Events::Http(e) => e.next().await,
        }
    }
}

/// The catalog entry of a k8s-openapi type.
pub fn resource_of<T: k8s_openapi::Resource>() -> &'static Resource {
    catalog::find(T::GROUP, T::VERSION, T::URL_PATH_SEGMENT)
        .unwrap_or_else(|| panic!("{} is not served by this cluster", T::KIND))
}

/// Decodes an object into a k8s-openapi (or any serde) type.
pub fn decode<T: DeserializeOwned>(kind: &'static str, v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::Decode {
        kind,
        message: e.to_string(),
    })
}

/// `namespace/name` (or `name` for cluster-scoped objects) of an object.
pub fn key_of(obj: &Value) -> String {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Splits a key made by [`key_of`].
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

impl Client {
    /// An in-process client over `registry`, acting as the cluster's own components.
    pub fn local(registry: crate::registry::Registry) -> Self {
        Client {
            transport: Transport::Local(local::Local::new(registry)),
        }
    }

    /// A client of the server at `url` (`https://host:port`) that trusts `ca_pem` and
    /// sends `token`.
    pub fn http(url: &str, ca_pem: &str, token: &str) -> Result<Self> {
        Ok(Client {
            transport: Transport::Http(http::Http::new(url, ca_pem, token)?),
        })
    }

    /// The same client, but one that keeps connecting for up to `budget` while the
    /// server refuses connections (it is restarting), instead of failing at once. A
    /// request that could not be connected never reached the server, so sending it again
    /// is safe for any request. Only the HTTPS transport can be unreachable.
    pub fn reconnecting(mut self, budget: std::time::Duration) -> Self {
        if let Transport::Http(h) = &mut self.transport {
            h.set_reconnect(budget);
        }
        self
    }

    /// Tells of every change of the kinds served, once it is served: in process only (a
    /// client over HTTPS learns of changes from the definitions' watch instead).
    pub fn served_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match &self.transport {
            Transport::Local(l) => Some(l.served_changes()),
            Transport::Http(_) => None,
        }
    }

    /// The kinds that definitions add, as the server serves them now.
    pub async fn custom_resources(&self) -> Result<Vec<std::sync::Arc<Resource>>> {
        match &self.transport {
            Transport::Local(l) => Ok(l.custom_resources()),
            Transport::Http(h) => h.custom_resources().await,
        }
    }

    /// The resource `group`/`version`/`plural` as the server serves it now (a kind that a
    /// definition adds, say), if it does.
    pub async fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Result<Option<std::sync::Arc<Resource>>> {
        match &self.transport {
            Transport::Local(l) => Ok(l.resolve(group, version, plural)),
            Transport::Http(h) => h.resolve(group, version, plural).await,
        }
    }

    pub async fn get(&self, res: &Resource, ns: Option<&str>, name: &str) -> Result<Value> {
        match &self.transport {
            Transport::Local(l) => l.get(res, ns, name),
            Transport::Http(h) => h.get(res, ns, name).await,
        }
    }

    pub async fn list(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList> {
        match &self.transport {
            Transport::Local(l) => l.list(res, ns, params).await,
            Transport::Http(h) => h.list(res, ns, params).await,
        }
    }

    /// A list whose objects are parsed as they are taken, and its revision.
    pub async fn list_items(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<(Items, String)> {
        match &self.transport {
            Transport::Local(l) => l.list_stored(res, ns, params).await,
            Transport::Http(h) => {
                let list = h.list(res, ns, params).await?;
                Ok((list.items.into(), list.resource_version))
            }
        }
    }

    pub async fn create(&self, res: &Resource, ns: Option<&str>, obj: &Value) -> Result<Value> {
        match &self.transport {
            Transport::Local(l) => l.create(res, ns, obj).await,
            Transport::Http(h) => h.create(res, ns, obj).await,
        }
    }

    /// Replaces an object (its `metadata.resourceVersion`, when set, is a precondition).
    pub async fn update(&self, res: &Resource, obj: &Value) -> Result<Value> {
        self.put(res, obj, false).await
    }

    /// Replaces the status of an object.
    pub async fn update_status(&self, res: &Resource, obj: &Value) -> Result<Value> {
        self.put(res, obj, true).await
    }

    async fn put(&self, res: &Resource, obj: &Value, status: bool) -> Result<Value> {
        let (ns, name) = names(obj)?;
        match &self.transport {
            Transport::Local(l) => l.update(res, ns, name, obj, status).await,
            Transport::Http(h) => h.update(res, ns, name, obj, status).await,
        }
    }

    pub async fn patch(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<Value> {
        self.patch_part(res, ns, name, patch, false).await
    }

    pub async fn patch_status(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<Value> {
        self.patch_part(res, ns, name, patch, true).await
    }

    async fn patch_part(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        patch: &Patch,
        status: bool,
    ) -> Result<Value> {
        match &self.transport {
            Transport::Local(l) => l.patch(res, ns, name, patch, status).await,
            Transport::Http(h) => h.patch(res, ns, name, patch, status).await,
        }
    }

    /// Deletes an object; returns its last state (or its state while finalizers hold it).
    pub async fn delete(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Value> {
        match &self.transport {
            Transport::Local(l) => l.delete(res, ns, name, params).await,
            Transport::Http(h) => h.delete(res, ns, name, params).await,
        }
    }

    /// Sets an object's `spec.replicas` through its `scale` subresource; returns the Scale.
    pub async fn scale(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        replicas: i64,
    ) -> Result<Value> {
        match &self.transport {
            Transport::Local(l) => {
                let patch = Patch::Merge(res.strategy.scale_patch(replicas));
                l.patch(res, ns, name, &patch, false).await
            }
            Transport::Http(h) => h.scale(res, ns, name, replicas).await,
        }
    }

    /// Streams the log of a container of a pod (`pods/log`, following it while the
    /// container runs when `follow`). Only over HTTP: in-process components read logs from
    /// the node agent directly.
    pub async fn logs(
        &self,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        follow: bool,
    ) -> Result<LogStream> {
        match &self.transport {
            Transport::Local(_) => Err(Error::BadRequest(
                "pod logs are served over HTTP only".into(),
            )),
            Transport::Http(h) => h.logs(ns, pod, container, follow).await,
        }
    }

    /// Sends `body` to an action subresource of object `name` (one its descriptor lists
    /// as [`Serves::Action`]: a pod's `binding`, a namespace's `finalize`): what it
    /// answers, `Null` when nothing.
    ///
    /// [`Serves::Action`]: crate::registry::catalog::Serves::Action
    pub async fn act(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        sub: &str,
        body: &Value,
    ) -> Result<Value> {
        match &self.transport {
            Transport::Local(l) => l.act(res, ns, name, sub, body).await,
            Transport::Http(h) => h.act(res, ns, name, sub, body).await,
        }
    }

    /// Binds a pod to a node (`pods/binding`).
    pub async fn bind(&self, ns: &str, pod: &str, node: &str) -> Result<()> {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let pods = crate::registry::catalog::of(crate::registry::Kind::Pod);
        self.act(pods, Some(ns), pod, "binding", &body).await?;
        Ok(())
    }

    /// Replaces a namespace's finalizers (`namespaces/finalize`).
    pub async fn finalize_namespace(&self, ns: &Value) -> Result<Value> {
        let (_, name) = names(ns)?;
        let namespaces = crate::registry::catalog::of(crate::registry::Kind::Namespace);
        self.act(namespaces, None, name, "finalize", ns).await
    }

    pub async fn watch(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &WatchParams,
    ) -> Result<EventStream> {
        let inner = match &self.transport {
            Transport::Local(l) => Events::Local(Box::new(l.watch(res, ns, params)?)),
            Transport::Http(h) => Events::Http(h.watch(res, ns, params).await?),
        };
        Ok(EventStream { inner })
    }

    /// Sends any request by path and returns the answer's body. Over HTTP only.
    pub async fn raw(&self, req: &RawRequest<'_>) -> Result<bytes::Bytes> {
        match &self.transport {
            Transport::Local(_) => Err(Error::BadRequest(
                "requests by path are served over HTTP only".into(),
            )),
            Transport::Http(h) => h.raw(req).await,
        }
    }

    /// [`Client::raw`], the answer read as JSON, with the texts of the server's `Warning`
    /// headers (unknown fields under `fieldValidation=Warn`, deprecations).
    pub async fn raw_json_warned(&self, req: &RawRequest<'_>) -> Result<(Value, Vec<String>)> {
        let (body, warnings) = match &self.transport {
            Transport::Local(_) => {
                return Err(Error::BadRequest(
                    "requests by path are served over HTTP only".into(),
                ));
            }
            Transport::Http(h) => h.raw_warned(req).await?,
        };
        if body.is_empty() {
            return Ok((Value::Null, warnings));
        }
        let v = serde_json::from_slice(&body)
            .map_err(|e| Error::Transport(format!("the server's answer is not JSON: {e}")))?;
        Ok((v, warnings))
    }

    /// [`Client::raw`], the answer read as JSON.
    pub async fn raw_json(&self, req: &RawRequest<'_>) -> Result<Value> {
        let body = self.raw(req).await?;
        if body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body)
            .map_err(|e| Error::Transport(format!("the server's answer is not JSON: {e}")))
    }

    /// A GET by path whose answer streams (a followed log). Over HTTP only.
    pub async fn raw_stream(&self, path: &str, query: &[(&str, String)]) -> Result<LogStream> {
        self.raw_stream_accept(path, query, None).await
    }

    /// [`Client::raw_stream`] asking for a media type (a watch of Tables). Over HTTP only.
    pub async fn raw_stream_accept(
        &self,
        path: &str,
        query: &[(&str, String)],
        accept: Option<&str>,
    ) -> Result<LogStream> {
        match &self.transport {
            Transport::Local(_) => Err(Error::BadRequest(
                "streams are served over HTTP only".into(),
            )),
            Transport::Http(h) => h.raw_stream(path, query, accept).await,
        }
    }

    /// The URL path of a collection (`ns` ignored for cluster-scoped resources).
    pub fn collection_path(res: &Resource, ns: Option<&str>) -> String {
        http::collection_path(res, ns)
    }

    /// [`Client::get`], decoded into `T`.
    pub async fn get_as<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: Option<&str>,
        name: &str,
    ) -> Result<T> {
        decode(T::KIND, self.get(resource_of::<T>(), ns, name).await?)
    }

    /// [`Client::list`], decoded into `T`s.
    pub async fn list_as<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<Vec<T>> {
        let list = self.list(resource_of::<T>(), ns, params).await?;
        list.items.into_iter().map(|v| decode(T::KIND, v)).collect()
    }

    /// [`Client::create`] of a typed object.
    pub async fn create_as<T>(&self, obj: &T) -> Result<T>
    where
        T: k8s_openapi::Resource + k8s_openapi::Metadata + serde::Serialize + DeserializeOwned,
    {
        let v = serde_json::to_value(obj).map_err(|e| Error::Decode {
            kind: T::KIND,
            message: e.to_string(),
        })?;
        let ns = v
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        decode(
            T::KIND,
            self.create(resource_of::<T>(), ns.as_deref(), &v).await?,
        )
    }
}

fn names(obj: &Value) -> Result<(Option<&str>, &str)> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::BadRequest("the object has no metadata.name".into()))?;
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    Ok((ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stored_items_are_parsed_as_taken_and_damaged_ones_skipped() {
        let mut items = Items::stored(vec![
            bytes::Bytes::from_static(br#"{"metadata":{"name":"a"}}"#),
            bytes::Bytes::from_static(b"not json"),
            bytes::Bytes::from_static(br#"{"metadata":{"name":"b"}}"#),
        ]);
        assert_eq!(items.size_hint(), (0, Some(3)));
        assert_eq!(items.next(), Some(json!({"metadata": {"name": "a"}})));
        assert_eq!(items.size_hint(), (0, Some(2)));
        assert_eq!(
            items.collect::<Vec<_>>(),
            [json!({"metadata": {"name": "b"}})]
        );
        let parsed: Items = vec![json!(1), json!(2)].into();
        assert_eq!(parsed.size_hint(), (2, Some(2)));
        assert_eq!(parsed.collect::<Vec<_>>(), [json!(1), json!(2)]);
    }
}
