//! The HTTP API: an axum router over the registry, served over TLS with bearer-token
//! authentication. Routes: health and version (open), discovery, and resource requests
//! under `/api/v1` and `/apis/{group}/{version}`.

pub mod agent;
mod authz;
mod console;
mod dclog;
pub mod discovery;
pub mod error;
pub mod exec;
mod http2;
mod limits;
pub mod logs;
pub mod metrics;
mod negotiate;
pub mod openapi;
pub mod portforward;
mod protobuf;
mod protobuf_schema;
mod proxy;
mod resources;
mod review;
pub mod tls;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::registry::{Registry, User};
use error::Error;

pub use limits::Limits;
pub use resources::MAX_BODY;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub registry: Registry,
    /// `host:port` clients reach the server at (for legacy discovery).
    pub server_address: String,
    /// Turns true when the server shuts down; open watches end.
    pub shutdown: watch::Receiver<bool>,
    pub metrics: metrics::Metrics,
    /// Logs and exec for the pods this process's node runs.
    pub node: Option<Arc<dyn logs::NodeAccess>>,
    /// The node agent of this process (its endpoints, through the node proxy).
    pub agent: Option<Arc<dyn agent::Agent>>,
    /// The OpenAPI documents of the kinds served.
    pub openapi: Arc<openapi::Cache>,
}

/// The router, without TLS or a socket: testable with `oneshot`.
pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        // Discovery answers with or without the trailing slash, as kube-apiserver does.
        .route("/api", get(api))
        .route("/api/", get(api))
        .route("/apis", get(apis))
        .route("/apis/", get(apis))
        .route("/api/v1", get(core_resources))
        .route("/api/v1/", get(core_resources))
        .route("/apis/{group}", get(api_group))
        .route("/apis/{group}/", get(api_group))
        .route("/apis/{group}/{version}", get(group_resources))
        .route("/apis/{group}/{version}/", get(group_resources))
        .route("/metrics", get(serve_metrics))
        .route(
            "/openapi/v2",
            get(
                |State(state): State<AppState>, headers: HeaderMap| async move {
                    openapi::v2(&state.openapi, &state.registry.served(), &headers)
                },
            ),
        )
        .route("/openapi/v3", get(openapi_root))
        .route("/openapi/v3/{*path}", get(openapi_document))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}/exec",
            any(exec_request),
        )
        .route("/api/v1/nodes/{node}/proxy", any(node_proxy_root))
        .route("/api/v1/nodes/{node}/proxy/{*path}", any(node_proxy))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}/attach",
            any(attach_request),
        )
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}/portforward",
            any(portforward_request),
        )
        .route("/api/v1/namespaces/{ns}/pods/{name}/log", any(log_request))
        .route("/api/v1/namespaces/{ns}/pods/{name}/proxy", any(pod_proxy))
        .route("/api/v1/namespaces/{ns}/pods/{name}/proxy/", any(pod_proxy))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}/proxy/{*path}",
            any(pod_proxy),
        )
        .route(
            "/api/v1/namespaces/{ns}/services/{name}/proxy",
            any(service_proxy),
        )
        .route(
            "/api/v1/namespaces/{ns}/services/{name}/proxy/",
            any(service_proxy),
        )
        .route(
            "/api/v1/namespaces/{ns}/services/{name}/proxy/{*path}",
            any(service_proxy),
        )
        .route("/api/v1/{*rest}", any(core_request))
        .route("/apis/{group}/{version}/{*rest}", any(group_request))
        .fallback(|| async { Error::NoRoute })
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let routes = Router::new()
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .route("/version", get(|| async { discovery::version() }))
        .route("/", get(console::root))
        .route("/console", get(console::bare))
        .route("/console/", get(console::index))
        .route("/console/{file}", get(console::file))
        .merge(protected)
        .fallback(|| async { Error::NoRoute })
        .with_state(state);
    outer_layers(routes)
}

/// What wraps every route: a handler that panics answers 500 like any internal error
/// (rather than dropping the connection), and every request is traced.
fn outer_layers(routes: Router) -> Router {
    routes
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked))
        .layer(middleware::from_fn(traced))
}

/// Runs a request's handler in a `request` span (debug level) and logs its status and
/// latency. The response body is left as it is: a streaming body (a watch, a log) is not
/// wrapped, so its chunks cost no clock reads or extra layers.
async fn traced(req: Request<Body>, next: middleware::Next) -> Response {
    use tracing::Instrument;
    let span = tracing::debug_span!(
        "request",
        method = %req.method(),
        uri = %req.uri(),
        version = ?req.version(),
    );
    let started = tokio::time::Instant::now();
    let response = next.run(req).instrument(span.clone()).await;
    tracing::debug!(
        parent: &span,
        status = response.status().as_u16(),
        latency_ms = started.elapsed().as_secs_f64() * 1e3,
        "answered"
    );
    response
}

/// The answer of a handler that panicked: a 500 Status without internals; the panic's
/// message goes to the log.
fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("no message");
    Error::Registry(crate::registry::Error::Internal(format!(
        "a request handler panicked: {message}"
    )))
    .into_response()
}

async fn ok() -> &'static str {
    "ok"
}

/// Every request but health and version needs a valid bearer token.
async fn authenticate(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(user) = token.and_then(|t| state.registry.authenticate(t)) else {
        return Error::Unauthorized.into_response();
    };
    // Who the request acts as, and, for what is no resource request, whether it may.
    let acting = authz::impersonate(&state.registry, user, req.headers()).and_then(|user| {
        authz::check_path(&state.registry, &user, req.method(), req.uri().path())?;
        Ok(user)
    });
    match acting {
        Ok(user) => {
            let mut req = req;
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

async fn api(State(state): State<AppState>, headers: HeaderMap) -> Response {
    discovery::core(&state.registry.served(), &headers, &state.server_address)
}

async fn apis(State(state): State<AppState>, headers: HeaderMap) -> Response {
    discovery::groups(&state.registry.served(), &headers)
}

async fn core_resources(State(state): State<AppState>) -> Response {
    discovery::resources(&state.registry.served(), "", "v1").expect("the core group is served")
}

async fn api_group(State(state): State<AppState>, Path(group): Path<String>) -> Response {
    discovery::group(&state.registry.served(), &group)
        .unwrap_or_else(|| Error::NoRoute.into_response())
}

async fn group_resources(
    State(state): State<AppState>,
    Path((group, version)): Path<(String, String)>,
) -> Response {
    discovery::resources(&state.registry.served(), &group, &version)
        .unwrap_or_else(|| Error::NoRoute.into_response())
}

async fn serve_metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (content_type, body) = state.metrics.render(accept);
    let mut r = body.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(content_type),
    );
    r
}

async fn openapi_root(State(state): State<AppState>) -> Response {
    openapi::root(&state.openapi, &state.registry.served())
}

async fn openapi_document(
    State(state): State<AppState>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    openapi::document_at(&state.openapi, &state.registry.served(), &path, &headers)
        .unwrap_or_else(|| Error::NoRoute.into_response())
}

async fn read_body(body: Body) -> Result<bytes::Bytes, Error> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| Error::TooLarge(MAX_BODY))
}

/// Where a resource request goes: `/api/v1/{rest}` or `/apis/{group}/{version}/{rest}`.
struct Route {
    group: String,
    version: String,
    rest: String,
}

/// Path and query rejections become Status answers like every other error.
fn bad_path(e: axum::extract::rejection::PathRejection) -> Response {
    Error::BadRequest(format!("invalid request path: {e}")).into_response()
}

fn bad_query(e: axum::extract::rejection::QueryRejection) -> Response {
    Error::BadRequest(format!("invalid query string: {e}")).into_response()
}

type PathResult<T> = Result<Path<T>, axum::extract::rejection::PathRejection>;
type QueryResult = Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>;

/// `pods/{name}/exec`: checks, then the WebSocket upgrade (see [`exec`]).
async fn exec_request(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    Path((ns, name)): Path<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    ws: Result<exec::Upgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    stream_request(&state, &user, &ns, &name, query.as_deref(), ws, false)
        .unwrap_or_else(IntoResponse::into_response)
}

/// `pods/{name}/attach`: checks, then the WebSocket upgrade (see [`exec`]).
async fn attach_request(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    Path((ns, name)): Path<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    ws: Result<exec::Upgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    stream_request(&state, &user, &ns, &name, query.as_deref(), ws, true)
        .unwrap_or_else(IntoResponse::into_response)
}

/// What exec and attach check before the upgrade, in Kubernetes' order and words.
fn stream_request(
    state: &AppState,
    user: &User,
    ns: &str,
    name: &str,
    query: Option<&str>,
    ws: Result<exec::Upgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
    attach: bool,
) -> Result<Response, Error> {
    let (what, verb) = if attach {
        ("pods/attach", "attach to")
    } else {
        ("pods/exec", "exec into")
    };
    let sub = what.trim_start_matches("pods/");
    authz::check(
        &state.registry,
        user,
        &authz::resource("create", "", "pods", Some(sub), Some(ns), Some(name)),
    )?;
    let req = exec::Request::parse(query);
    if !attach && req.command.is_empty() {
        return Err(Error::BadRequest(
            "you must specify at least one command for the container".into(),
        ));
    }
    req.check_streams()?;
    let pods = crate::registry::catalog::of(crate::registry::Kind::Pod);
    let pod: serde_json::Value =
        serde_json::from_slice(&state.registry.get(pods, Some(ns), name)?)
            .map_err(|e| Error::BadRequest(e.to_string()))?;
    if let Some(phase @ ("Succeeded" | "Failed")) = pod["status"]["phase"].as_str() {
        return Err(Error::BadRequest(format!(
            "cannot {verb} a container in a completed pod; current phase is {phase}"
        )));
    }
    if pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
        return Err(Error::BadRequest(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let container = exec::container(&pod, req.container.as_deref())?;
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    let not_found = || Error::BadRequest(format!("container not found ({container:?})"));
    let ws = ws.map_err(|_| {
        Error::BadRequest(format!(
            "{what} needs a WebSocket upgrade offering one of [{}]",
            exec::Protocol::SERVED.map(|(n, _)| n).join(" ")
        ))
    });
    let node = state.node.as_ref();
    if attach {
        let target = node
            .and_then(|n| n.attach_target(uid, &container))
            .ok_or_else(not_found)?;
        Ok(exec::serve_attach(ws?, exec::Attach::new(&req, target)))
    } else {
        let ctx = node
            .and_then(|n| n.exec_context(uid, &container))
            .ok_or_else(not_found)?;
        Ok(exec::serve(ws?, exec::Session::new(req, ctx)))
    }
}

/// `pods/{name}/portforward`: checks, then the upgrade to one of the port-forward
/// protocols (see [`portforward`]).
async fn portforward_request(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    Path((ns, name)): Path<(String, String)>,
    req: Request,
) -> Response {
    let (mut parts, _) = req.into_parts();
    async {
        if parts.method != Method::GET && parts.method != Method::POST {
            return Err(Error::MethodNotAllowed(
                parts.method.to_string(),
                "GET, POST",
            ));
        }
        authz::check(
            &state.registry,
            &user,
            &authz::resource(
                "create",
                "",
                "pods",
                Some("portforward"),
                Some(&ns),
                Some(&name),
            ),
        )?;
        let pods = crate::registry::catalog::of(crate::registry::Kind::Pod);
        let pod: serde_json::Value =
            serde_json::from_slice(&state.registry.get(pods, Some(&ns), &name)?)
                .map_err(|e| Error::BadRequest(e.to_string()))?;
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        if node.is_empty() {
            return Err(Error::BadRequest(format!(
                "pod {name} does not have a host assigned"
            )));
        }
        if state.agent.as_ref().is_none_or(|a| a.node_name() != node) {
            return Err(Error::Unavailable(format!(
                "node {node:?} is not run by this berth process: pod {name} cannot be reached"
            )));
        }
        let query = parts.uri.query().map(str::to_string);
        let netns = state
            .agent
            .as_ref()
            .and_then(|a| a.pod_netns(crate::types::json::str_at(&pod, "/metadata/uid")));
        let target = portforward::Target::new(pod).with_netns(netns);
        portforward::serve(&mut parts, query.as_deref(), target).await
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// `pods/{name}/proxy[/{path}]` (see [`proxy`]).
async fn pod_proxy(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    Path(path): Path<HashMap<String, String>>,
    req: Request,
) -> Response {
    let (ns, name) = (path["ns"].clone(), path["name"].clone());
    proxy::serve(state, user, proxy::Through::Pod, ns, name, req).await
}

/// `services/{name}/proxy[/{path}]` (see [`proxy`]).
async fn service_proxy(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    Path(path): Path<HashMap<String, String>>,
    req: Request,
) -> Response {
    let (ns, name) = (path["ns"].clone(), path["name"].clone());
    proxy::serve(state, user, proxy::Through::Service, ns, name, req).await
}

type Upgrade = Result<exec::Upgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>;

async fn node_proxy_root(
    state: State<AppState>,
    user: Extension<User>,
    Path(node): Path<String>,
    req: Request,
) -> Response {
    node_proxy(state, user, Path((node, String::new())), req).await
}

/// `nodes/{node}/proxy/{path}`: the node agent's endpoints (see [`agent`]), for admins.
async fn node_proxy(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    Path((node, path)): Path<(String, String)>,
    req: Request,
) -> Response {
    let verb = authz::verb(req.method(), true, false);
    let asked = authz::resource(verb, "", "nodes", Some("proxy"), None, Some(&node));
    if let Err(e) = authz::check(&state.registry, &user, &asked) {
        return e.into_response();
    }
    let nodes = crate::registry::catalog::of(crate::registry::Kind::Node);
    if let Err(e) = state.registry.get(nodes, None, &node) {
        return Error::from(e).into_response();
    }
    let Some(agent) = state.agent.as_ref().filter(|a| a.node_name() == node) else {
        return Error::Unavailable(format!(
            "node {node:?} is not run by this berth process: its agent cannot be reached"
        ))
        .into_response();
    };
    let (mut parts, _) = req.into_parts();
    let query = parts.uri.query().map(str::to_string);
    // Port forwarding reads the upgrade itself; exec takes a WebSocket.
    let ws = if path.starts_with("portForward") {
        None
    } else {
        exec::Upgrade::from_request_parts(&mut parts, &state)
            .await
            .ok()
    };
    agent::serve(agent::Request {
        agent,
        node: state.node.as_ref(),
        method: parts.method.clone(),
        path: &path,
        query: query.as_deref(),
        ws,
        parts: Some(parts),
    })
    .await
}

async fn core_request(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    rest: PathResult<String>,
    method: Method,
    query: QueryResult,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let route = rest.map(|Path(rest)| Route {
        group: String::new(),
        version: "v1".into(),
        rest,
    });
    routed(state, user, route, method, query, headers, body).await
}

/// `pods/{name}/log`: served as any subresource, then, when the client asked for a
/// WebSocket upgrade and the log is there, streamed over the WebSocket (see [`logs`]).
#[allow(clippy::too_many_arguments)]
async fn log_request(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    path: PathResult<(String, String)>,
    method: Method,
    query: QueryResult,
    headers: HeaderMap,
    ws: Upgrade,
    body: Body,
) -> Response {
    let route = path.map(|Path((ns, name))| Route {
        group: String::new(),
        version: "v1".into(),
        rest: format!("namespaces/{ns}/pods/{name}/log"),
    });
    let answer = routed(state, user, route, method, query, headers, body).await;
    match ws {
        Ok(ws) if answer.status() == axum::http::StatusCode::OK => logs::websocket(ws, answer),
        _ => answer,
    }
}

async fn group_request(
    State(state): State<AppState>,
    Extension(user): Extension<User>,
    path: PathResult<(String, String, String)>,
    method: Method,
    query: QueryResult,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let route = path.map(|Path((group, version, rest))| Route {
        group,
        version,
        rest,
    });
    routed(state, user, route, method, query, headers, body).await
}

/// Turns path and query rejections into Status answers, then serves the request.
async fn routed(
    state: AppState,
    user: User,
    route: Result<Route, axum::extract::rejection::PathRejection>,
    method: Method,
    query: QueryResult,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let route = match route {
        Ok(r) => r,
        Err(e) => return bad_path(e),
    };
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => return bad_query(e),
    };
    resource_request(state, user, route, (method, query, headers), body).await
}

/// Serves a resource request and counts it in the metrics.
async fn resource_request(
    state: AppState,
    user: User,
    route: Route,
    (method, query, headers): (Method, HashMap<String, String>, HeaderMap),
    body: Body,
) -> Response {
    let started = tokio::time::Instant::now();
    let (verb, resource) = resources::describe(
        &state.registry.served(),
        &route.group,
        &route.version,
        &route.rest,
        &method,
        &query,
    );
    let metrics = state.metrics.clone();
    let stream = query.get("watch").is_some_and(|v| resources::truthy(v))
        || route.rest.starts_with("watch/");
    // A pod's log is text, whatever the client takes.
    let answer = if route.rest.ends_with("/log") {
        Ok(negotiate::Answer::Json)
    } else {
        negotiate::negotiate(&headers, stream)
    };
    let response = match answer {
        // Refused before anything is done.
        Err(e) => e.into_response(),
        Ok(answer) => {
            let result = async {
                let body = read_body(body).await?;
                let call = resources::Call {
                    user,
                    method,
                    query,
                    headers,
                    body,
                };
                resources::handle(state, &route.group, &route.version, &route.rest, call).await
            };
            let response = result.await.unwrap_or_else(IntoResponse::into_response);
            match answer {
                negotiate::Answer::Yaml => negotiate::to_yaml(response).await,
                negotiate::Answer::Json => response,
            }
        }
    };
    metrics.observe(
        verb,
        &resource,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// Serves `router` over TLS on `listener` until `shutdown` completes; then stops
/// accepting, ends open watches (through `stop`) and waits for requests in flight.
/// `limits` bounds what clients may hold: connections, requests in flight, how long a
/// connection may take to send a request or stay idle.
pub async fn serve(
    listeners: Vec<TcpListener>,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    stop: watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let router = router.layer(middleware::from_fn_with_state(
        limits::InFlight::new(&limits),
        limits::limit_in_flight,
    ));
    let connections = limits::Connections::new(&limits);
    // Every connection task holds a clone of `alive`; when all are gone, so are they.
    let (alive, mut all_done) = tokio::sync::mpsc::channel::<()>(1);
    let stopping = stop.subscribe();
    tokio::pin!(shutdown);
    loop {
        let accept_any =
            futures_util::future::select_all(listeners.iter().map(|l| Box::pin(l.accept())));
        let (tcp, peer) = tokio::select! {
            (accepted, _, _) = accept_any => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Over a cap: closed at once, before the handshake costs anything.
        let Some(admitted) = connections.admit(peer.ip()) else {
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let router = router.clone();
        let alive = alive.clone();
        let mut stopping = stopping.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _alive = alive;
            let _admitted = admitted;
            let tls = match tokio::time::timeout(limits.header_read, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let stop_requested = async move {
                let _ = stopping.wait_for(|s| *s).await;
            };
            // HTTP/2 when the client offers it (many watches share one connection),
            // HTTP/1.1 otherwise and for upgrades.
            let result = if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                http2::serve_connection(
                    tls,
                    move |req| {
                        let response = router.clone().oneshot(req);
                        async move {
                            match response.await {
                                Ok(r) => r,
                                Err(e) => match e {},
                            }
                        }
                    },
                    stop_requested,
                    limits,
                )
                .await
                .map_err(|e| e.to_string())
            } else {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        router.clone().oneshot(req.map(Body::new))
                    },
                );
                // A head must come whole within `header_read` (slowloris), and a kept-alive
                // connection waits `idle` for the next.
                let clock = limits::HeaderClock::new(&limits);
                let io = TokioIo::new(clock.count(tls));
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(clock)
                    .header_read_timeout(limits.header_read)
                    .serve_connection(io, service)
                    .with_upgrades();
                tokio::pin!(conn);
                tokio::select! {
                    r = conn.as_mut() => r,
                    () = stop_requested => {
                        // Finish the request in flight, then close.
                        conn.as_mut().graceful_shutdown();
                        conn.as_mut().await
                    }
                }
                .map_err(|e| e.to_string())
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listeners);
    drop(alive);
    let _ = stop.send(true);
    if tokio::time::timeout(Duration::from_secs(10), all_done.recv())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after 10 s; closing anyway");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handler_that_panics_answers_a_500_status_without_internals() {
        let routes = Router::new().route(
            "/boom",
            get(|| async {
                if true {
                    panic!("secret detail");
                }
                "unreachable"
            }),
        );
        let req = Request::builder().uri("/boom").body(Body::empty()).unwrap();
        let resp = outer_layers(routes).oneshot(req).await.unwrap();
        assert_eq!(resp.status(), axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "InternalError");
        assert!(!status["message"].as_str().unwrap().contains("secret"));
    }
}
