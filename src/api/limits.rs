//! What the server allows its clients, so that bad ones cannot stall the others: how long
//! a client may take to send a request's header or leave a connection idle, how many
//! connections one address and all of them may hold, and how many requests may be in
//! flight at once (as kube-apiserver's `--max-requests-inflight` and
//! `--max-mutating-requests-inflight`; long-running requests are not counted).

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::error::Error;

/// The server's limits; [`Limits::default`] holds the production values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to complete the TLS handshake, and to send a request's
    /// header once it has begun (HTTP/1.1), or the first one on a new connection.
    pub header_read: Duration,
    /// How long an HTTP/1.1 connection may wait for its next request, or an HTTP/2
    /// connection stay without streams, before it is closed.
    pub idle: Duration,
    /// How long an HTTP/2 client may take to send its preface and first SETTINGS.
    pub h2_preface: Duration,
    /// After this long without a frame from the client, an HTTP/2 connection sends a
    /// PING; without any answer within `h2_ping_timeout` it is closed.
    pub h2_ping_after: Duration,
    pub h2_ping_timeout: Duration,
    /// Open connections one client address may hold; more are closed at once.
    pub connections_per_address: usize,
    /// Open connections in all; more are closed at once.
    pub connections: usize,
    /// Reads (GET, HEAD, OPTIONS) in flight at once; more are answered 429. Long-running
    /// requests (watches, exec, attach, port forwarding, proxy, followed logs) are not
    /// counted.
    pub max_requests_inflight: usize,
    /// Writes in flight at once; more are answered 429.
    pub max_mutating_requests_inflight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(90),
            h2_preface: Duration::from_secs(10),
            h2_ping_after: Duration::from_secs(30),
            h2_ping_timeout: Duration::from_secs(15),
            connections_per_address: 256,
            connections: 4096,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
        }
    }
}

/// How often a refusal (a connection over a cap, a request over the in-flight limit) is
/// logged at most; the others in between are counted into the next line.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// A warning that is logged at most once per [`LOG_EVERY`], with how many times it
/// happened since the last line.
#[derive(Default)]
struct RateLimitedLog {
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimitedLog {
    /// Counts one occurrence; returns how many to log now (since the last line), if the
    /// time has come.
    fn hit(&self) -> Option<u64> {
        let mut s = self.state.lock().expect("log state");
        s.1 += 1;
        let now = Instant::now();
        if s.0.is_some_and(|at| now.duration_since(at) < LOG_EVERY) {
            return None;
        }
        s.0 = Some(now);
        Some(std::mem::take(&mut s.1))
    }
}

/// The open connections, by client address.
pub(super) struct Connections {
    per_address: usize,
    total: usize,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
    log: RateLimitedLog,
}

/// One admitted connection: counted until dropped.
pub(super) struct Admitted {
    of: Arc<Connections>,
    ip: IpAddr,
}

impl Connections {
    pub(super) fn new(limits: &Limits) -> Arc<Self> {
        Arc::new(Connections {
            per_address: limits.connections_per_address,
            total: limits.connections,
            open: Mutex::new((0, HashMap::new())),
            log: RateLimitedLog::default(),
        })
    }

    /// Counts a new connection from `ip`, or refuses it (logged, rate-limited) when its
    /// address or the server holds as many as allowed.
    pub(super) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Admitted> {
        let refused = {
            let mut open = self.open.lock().expect("connection counts");
            let of_ip = open.1.get(&ip).copied().unwrap_or(0);
            if open.0 >= self.total {
                Some("the server holds as many connections as allowed")
            } else if of_ip >= self.per_address {
                Some("this client address holds as many connections as allowed")
            } else {
                open.0 += 1;
                *open.1.entry(ip).or_default() += 1;
                None
            }
        };
        match refused {
            None => Some(Admitted {
                of: self.clone(),
                ip,
            }),
            Some(why) => {
                if let Some(n) = self.log.hit() {
                    tracing::warn!(
                        client = %ip,
                        refused = n,
                        per_address = self.per_address,
                        total = self.total,
                        "connections refused: {why}"
                    );
                }
                None
            }
        }
    }

    #[cfg(test)]
    fn open(&self) -> usize {
        self.open.lock().expect("connection counts").0
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.of.open.lock().expect("connection counts");
        open.0 -= 1;
        if let Some(n) = open.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.ip);
            }
        }
    }
}

/// The requests in flight, reads and writes apart.
pub(super) struct InFlight {
    reads: (AtomicUsize, usize),
    writes: (AtomicUsize, usize),
    log: RateLimitedLog,
}

struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl InFlight {
    pub(super) fn new(limits: &Limits) -> Arc<Self> {
        Arc::new(InFlight {
            reads: (AtomicUsize::new(0), limits.max_requests_inflight),
            writes: (AtomicUsize::new(0), limits.max_mutating_requests_inflight),
            log: RateLimitedLog::default(),
        })
    }

    fn take(&self, mutating: bool) -> Option<Slot<'_>> {
        let (count, max) = if mutating { &self.writes } else { &self.reads };
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < *max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(count))
    }

    /// Serves `req` if a slot of its kind is free (or it needs none), else answers 429
    /// with `Retry-After: 1`, as kube-apiserver does.
    pub(super) async fn serve(
        self: Arc<Self>,
        req: Request<Body>,
        next: axum::middleware::Next,
    ) -> Response {
        if !counted(req.method(), req.uri()) {
            return next.run(req).await;
        }
        let mutating = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let Some(_slot) = self.take(mutating) else {
            if let Some(n) = self.log.hit() {
                let (kind, max) = match mutating {
                    true => ("mutating", self.writes.1),
                    false => ("read-only", self.reads.1),
                };
                tracing::warn!(
                    refused = n,
                    max,
                    "{kind} requests refused with 429: as many are in flight as allowed"
                );
            }
            return Error::Registry(crate::registry::Error::TooManyRequests {
                message: "Too many requests, please try again later.".into(),
                cause: None,
                retry_after: 1,
            })
            .into_response();
        };
        next.run(req).await
    }
}

/// The middleware of [`InFlight`].
pub(super) async fn limit_in_flight(
    axum::extract::State(in_flight): axum::extract::State<Arc<InFlight>>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    in_flight.serve(req, next).await
}

/// Whether a request takes an in-flight slot: not the health checks, and not
/// long-running requests (as kube-apiserver's `--long-running-request-regexp` and
/// verbs: watches, exec, attach, port forwarding, proxy, followed logs).
fn counted(method: &Method, uri: &axum::http::Uri) -> bool {
    let path = uri.path();
    if matches!(path, "/healthz" | "/livez" | "/readyz" | "/version") {
        return false;
    }
    let flag = |name: &str| {
        form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .any(|(k, v)| k == name && super::resources::truthy(&v))
    };
    let long_running = (method == Method::GET && (flag("watch") || path.contains("/watch/")))
        || path.ends_with("/exec")
        || path.ends_with("/attach")
        || path.ends_with("/portforward")
        || path.contains("/proxy")
        || (path.ends_with("/log") && flag("follow"));
    !long_running
}

/// An HTTP/1.1 connection's clock for hyper's header-read timeout, which hyper starts
/// whenever it waits for a request's head, the next one on a kept-alive connection too.
/// The first request's header must come within `header`; after that, a connection may
/// wait `idle` for the first byte of the next request, and then has `header` to send
/// the rest of it. What arrived is learnt from the connection's [`Counted`] reader.
#[derive(Clone)]
pub(super) struct HeaderClock {
    read: Arc<AtomicU64>,
    first: Arc<AtomicBool>,
    header: Duration,
    idle: Duration,
}

impl HeaderClock {
    pub(super) fn new(limits: &Limits) -> Self {
        HeaderClock {
            read: Arc::default(),
            first: Arc::new(AtomicBool::new(true)),
            header: limits.header_read,
            idle: limits.idle,
        }
    }

    /// The connection, counting the bytes read from it for this clock.
    pub(super) fn count<IO>(&self, io: IO) -> Counted<IO> {
        Counted {
            io,
            read: self.read.clone(),
        }
    }

    fn wait(&self) -> HeaderWait {
        let first = self.first.swap(false, Ordering::AcqRel);
        let started = Instant::now();
        let deadline = started + if first { self.header } else { self.idle };
        HeaderWait {
            read: self.read.clone(),
            read_before: self.read.load(Ordering::Acquire),
            first,
            started,
            header: self.header,
            idle: self.idle,
            began: None,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
        }
    }
}

// hyper's timer interface speaks std's `Instant`; its deadlines are not used (each wait
// works out its own from tokio's clock).
#[allow(clippy::disallowed_types)]
impl hyper::rt::Timer for HeaderClock {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Plain(Box::pin(tokio::time::sleep(duration))))
    }

    fn sleep_until(&self, _deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(self.wait())
    }
}

/// A plain sleep, for whatever else hyper might time.
struct Plain(Pin<Box<tokio::time::Sleep>>);

impl Future for Plain {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for Plain {}

/// One wait for a request's head (see [`HeaderClock`]).
struct HeaderWait {
    read: Arc<AtomicU64>,
    read_before: u64,
    first: bool,
    started: Instant,
    header: Duration,
    idle: Duration,
    /// When the first byte of the head was seen.
    began: Option<Instant>,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Future for HeaderWait {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let deadline = if this.first {
            this.started + this.header
        } else if this.read.load(Ordering::Acquire) == this.read_before {
            this.started + this.idle
        } else {
            // hyper polls its timer each time it read and found the head incomplete, so
            // the first poll after bytes came is when the head began.
            *this.began.get_or_insert_with(Instant::now) + this.header
        };
        if this.sleep.deadline() != deadline {
            this.sleep.as_mut().reset(deadline);
        }
        this.sleep.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for HeaderWait {}

/// A connection that counts the bytes read from it.
pub(super) struct Counted<IO> {
    io: IO,
    read: Arc<AtomicU64>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read.fetch_add(n as u64, Ordering::AcqRel);
        }
        r
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_capped_per_address_and_in_all_and_freed_when_dropped() {
        let limits = Limits {
            connections_per_address: 2,
            connections: 3,
            ..Limits::default()
        };
        let conns = Connections::new(&limits);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = conns.admit(a).unwrap();
        let _a2 = conns.admit(a).unwrap();
        assert!(conns.admit(a).is_none(), "a third from one address");
        let _b1 = conns.admit(b).unwrap();
        assert!(conns.admit(b).is_none(), "a fourth in all");
        drop(a1);
        assert_eq!(conns.open(), 2);
        let _b2 = conns.admit(b).unwrap();
        assert_eq!(conns.open(), 3);
    }

    #[test]
    fn long_running_requests_and_health_checks_take_no_slot() {
        let c = |m: Method, uri: &str| counted(&m, &uri.parse().unwrap());
        assert!(c(Method::GET, "/api/v1/pods"));
        assert!(c(Method::POST, "/api/v1/namespaces/a/pods"));
        assert!(c(Method::GET, "/api/v1/namespaces/a/pods/p/log"));
        assert!(!c(Method::GET, "/api/v1/pods?watch=true"));
        assert!(!c(Method::GET, "/api/v1/pods?watch=1&timeoutSeconds=5"));
        assert!(c(Method::GET, "/api/v1/pods?watch=false"));
        assert!(!c(Method::GET, "/api/v1/watch/pods"));
        assert!(!c(
            Method::GET,
            "/api/v1/namespaces/a/pods/p/log?follow=true"
        ));
        assert!(!c(Method::POST, "/api/v1/namespaces/a/pods/p/exec"));
        assert!(!c(Method::GET, "/api/v1/namespaces/a/pods/p/portforward"));
        assert!(!c(Method::GET, "/api/v1/namespaces/a/services/s/proxy/x"));
        assert!(!c(Method::GET, "/readyz"));
    }

    #[test]
    fn in_flight_slots_are_apart_for_reads_and_writes() {
        let limits = Limits {
            max_requests_inflight: 1,
            max_mutating_requests_inflight: 1,
            ..Limits::default()
        };
        let f = InFlight::new(&limits);
        let r = f.take(false).unwrap();
        assert!(f.take(false).is_none());
        let w = f.take(true).unwrap();
        assert!(f.take(true).is_none());
        drop(r);
        drop(w);
        assert!(f.take(false).is_some() && f.take(true).is_some());
    }

    #[test]
    fn a_refusal_is_logged_once_per_period_with_the_count() {
        let log = RateLimitedLog::default();
        assert_eq!(log.hit(), Some(1));
        assert_eq!(log.hit(), None);
        assert_eq!(log.hit(), None);
        log.state.lock().unwrap().0 = Instant::now().checked_sub(LOG_EVERY);
        assert_eq!(log.hit(), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_header_has_its_time_once_begun_and_an_idle_connection_longer() {
        let limits = Limits {
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(90),
            ..Limits::default()
        };
        let clock = HeaderClock::new(&limits);
        // The first request: its header within 10 s.
        let first = clock.wait();
        let t0 = Instant::now();
        first.await;
        assert_eq!(Instant::now() - t0, Duration::from_secs(10));
        // The next: 90 s idle...
        let t0 = Instant::now();
        clock.wait().await;
        assert_eq!(Instant::now() - t0, Duration::from_secs(90));
        // ... or 10 s from the first byte of its head.
        let t0 = Instant::now();
        let mut wait = Box::pin(clock.wait());
        tokio::time::sleep(Duration::from_secs(50)).await;
        assert!(futures_util::poll!(wait.as_mut()).is_pending());
        clock.read.fetch_add(1, Ordering::AcqRel);
        assert!(futures_util::poll!(wait.as_mut()).is_pending());
        wait.await;
        assert_eq!(Instant::now() - t0, Duration::from_secs(60));
    }
}
