//! Watch streams: a resource's watch as newline-delimited events, each line made once
//! and shared by every watcher of the same object (or as a Table row, or object
//! metadata), bookmarks, and the end of the stream when the client or the server goes.

use super::*;

fn event_line(type_name: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(type_name.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// The last event line made and the object it was made from. The watches of one
/// resource all send the same line for an event, so it is made once: a line is reused only
/// for the very same object bytes (held here, so their address cannot be reused).
static LAST_LINE: Mutex<Option<(&'static str, Bytes, Bytes)>> = Mutex::new(None);

fn shared_event_line(type_name: &'static str, object: &Bytes) -> Bytes {
    if let Some((t, o, line)) = &*LAST_LINE.lock().expect("line lock")
        && *t == type_name
        && o.as_ptr() == object.as_ptr()
        && o.len() == object.len()
    {
        return line.clone();
    }
    let line = event_line(type_name, object);
    *LAST_LINE.lock().expect("line lock") = Some((type_name, object.clone(), line.clone()));
    line
}

/// A watch response's body: the event lines, until the watch ends, its timeout passes or
/// the server stops. The end is only polled when it has woken the body, not for every
/// line: a thousand watches share one server-stop signal.
struct WatchBody {
    watch: registry::Watch,
    res: Arc<Resource>,
    view: View,
    /// Counts the stream as open while it lives.
    _open: OpenStream,
    end: Pin<Box<dyn Future<Output = ()> + Send>>,
    end_wake: Arc<EndWake>,
    /// The task waker last handed to `end_wake`; it stays there until replaced.
    registered: Option<Waker>,
    done: bool,
}

/// The waker the end of a watch is polled with: notes that it woke, then wakes the body.
struct EndWake {
    woken: AtomicBool,
    task: std::sync::Mutex<Option<Waker>>,
}

impl Wake for EndWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Some(task) = &*self.task.lock().expect("watch end waker") {
            task.wake_by_ref();
        }
    }
}

impl http_body::Body for WatchBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        // The body's task rarely changes; hand its waker over only when it does.
        if !this
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            let task = cx.waker().clone();
            *this.end_wake.task.lock().expect("watch end waker") = Some(task.clone());
            this.registered = Some(task);
        }
        if this.end_wake.woken.load(Ordering::Acquire)
            && this.end_wake.woken.swap(false, Ordering::AcqRel)
        {
            let waker = Waker::from(this.end_wake.clone());
            if this
                .end
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
            {
                this.done = true;
                return Poll::Ready(None);
            }
        }
        match this.watch.poll_next(cx) {
            Poll::Ready(Some(ev)) => {
                let (line, last) = watch_line(&ev, &this.res, this.view);
                // An ERROR event is the last.
                this.done = last;
                Poll::Ready(Some(Ok(http_body::Frame::data(line))))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// A watch: a chunked stream of `{"type","object"}` lines.
pub(super) fn serve(
    state: AppState,
    res: &Arc<Resource>,
    ns: Option<&str>,
    q: &Query,
    view: View,
) -> Result<Response> {
    let lo = list_options(q)?;
    let send_initial_events = q.get("sendInitialEvents").map(|v| truthy(v));
    let opts = WatchOptions {
        resource_version: lo.resource_version,
        resource_version_match: lo.resource_version_match,
        send_initial_events,
        allow_bookmarks: flag(q, "allowWatchBookmarks"),
        label: lo.label,
        field: lo.field,
    };
    let timeout = watch_timeout(q)?;
    let w = state.registry.watch(res, ns, opts)?;
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let open = OpenStream::new(state.metrics.watches.clone());
    let mut shutdown = state.shutdown.clone();
    // The stream ends at its timeout or when the server stops: one future for its whole
    // life, rather than one per event.
    let end = async move {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
        }
    };
    let mut r = Response::new(Body::new(WatchBody {
        watch: w,
        res: res.clone(),
        view,
        _open: open,
        end: Box::pin(end),
        end_wake: Arc::new(EndWake {
            woken: AtomicBool::new(true),
            task: std::sync::Mutex::new(None),
        }),
        registered: None,
        done: false,
    }));
    let content_type = match view {
        View::Table(_) => TABLE_TYPE,
        View::Metadata => PARTIAL_TYPE,
        View::Object => "application/json",
    };
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(r)
}

/// The longest a watch may ask to last ([`watch_timeout`]).
pub const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// How long a watch lasts: its `timeoutSeconds`, 0 (or none) for no timeout of the
/// client's own (as in Kubernetes), at most [`MAX_WATCH_TIMEOUT`]: a longer one is cut
/// to it (a client watches again when its watch ends), so no deadline overflows.
fn watch_timeout(q: &Query) -> Result<Option<Duration>> {
    let Some(t) = q.get("timeoutSeconds").filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let secs = match t.trim().parse::<u64>() {
        Ok(secs) => secs,
        // Beyond any integer type: as long as allowed.
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => u64::MAX,
        Err(_) if t.trim().parse::<i128>().is_ok() || t.trim().starts_with('-') => {
            return Err(Error::BadRequest(format!(
                "invalid timeoutSeconds {t:?}: must be 0 or more"
            )));
        }
        Err(_) => {
            return Err(Error::BadRequest(format!(
                "invalid timeoutSeconds {t:?}: not a number"
            )));
        }
    };
    Ok((secs > 0).then(|| Duration::from_secs(secs).min(MAX_WATCH_TIMEOUT)))
}

/// The line a watch sends for an event, and whether it is the last (an ERROR ends it).
fn watch_line(ev: &WatchEvent, res: &Resource, view: View) -> (Bytes, bool) {
    match ev {
        WatchEvent::Error(e) => {
            let (_, status) = Error::Registry(clone_expired(e)).status();
            (
                event_line("ERROR", &crate::api::error::encode_status(&status)),
                true,
            )
        }
        WatchEvent::Bookmark(o) => match view {
            View::Metadata => (
                event_line("BOOKMARK", &table::partial_metadata_bytes(o)),
                false,
            ),
            _ => (event_line("BOOKMARK", o), false),
        },
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
            let line = match view {
                View::Object => shared_event_line(ev.type_name(), o),
                View::Metadata => event_line(ev.type_name(), &table::partial_metadata_bytes(o)),
                // One-row tables, at the event's own revision.
                View::Table(include) => {
                    let rv = serde_json::from_slice::<Value>(o)
                        .ok()
                        .and_then(|v| {
                            v.pointer("/metadata/resourceVersion")?
                                .as_str()?
                                .parse()
                                .ok()
                        })
                        .unwrap_or(0);
                    event_line(
                        ev.type_name(),
                        &table::table(res, std::slice::from_ref(o), rv, None, include),
                    )
                }
            };
            (line, false)
        }
    }
}

/// Counts an open watch stream for as long as it lives.
struct OpenStream(prometheus_client::metrics::gauge::Gauge);

impl OpenStream {
    fn new(gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Watch errors end the stream as an ERROR event; only Expired occurs there.
fn clone_expired(e: &registry::Error) -> registry::Error {
    match e {
        registry::Error::Expired(m) => registry::Error::Expired(m.clone()),
        other => registry::Error::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_timeout_is_clamped_and_never_overflows() {
        let q = |t: &str| Query::from([("timeoutSeconds".to_string(), t.to_string())]);
        assert_eq!(watch_timeout(&Query::new()).unwrap(), None);
        assert_eq!(watch_timeout(&q("0")).unwrap(), None);
        assert_eq!(
            watch_timeout(&q("30")).unwrap(),
            Some(Duration::from_secs(30))
        );
        for huge in [
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999",
        ] {
            assert_eq!(watch_timeout(&q(huge)).unwrap(), Some(MAX_WATCH_TIMEOUT));
        }
        for bad in ["-1", "-99999999999999999999999", "soon", "1.5"] {
            assert!(
                matches!(watch_timeout(&q(bad)), Err(Error::BadRequest(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_event_line_is_made_once_per_object_and_type() {
        let a = Bytes::from(br#"{"metadata":{"name":"a"}}"#.to_vec());
        let first = shared_event_line("ADDED", &a);
        assert_eq!(
            &first[..],
            b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"
        );
        // The same object again: the very same line.
        let again = shared_event_line("ADDED", &a.clone());
        assert_eq!(again.as_ptr(), first.as_ptr());
        // Another type, or equal bytes elsewhere, make lines of their own.
        let modified = shared_event_line("MODIFIED", &a);
        assert!(modified.starts_with(b"{\"type\":\"MODIFIED\""));
        let b = Bytes::from(br#"{"metadata":{"name":"b"}}"#.to_vec());
        assert!(shared_event_line("MODIFIED", &b).ends_with(b"\"b\"}}}\n"));
    }
}
