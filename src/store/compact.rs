//! Compaction of the event log: explicit ([`compact_to`]) and by the retention policy
//! (keep the last `retain_events` events or the last `retain_for`, whichever keeps more,
//! but never more than `retain_bytes` of them). The log's bytes are measured (from the
//! newest down, no further than the bound) only when what was written since the last
//! measurement may have taken it past the bound.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::sync::oneshot;

use super::{Config, Error, Result, Shared, now_ms};

/// Events dropped per step, so a large compaction never holds the disk for long.
const DROP_CHUNK: usize = 10_000;

/// Raises the compaction floor to `revision` (capped at the current revision), records it
/// durably and then drops the events below it. Returns the floor.
pub(super) async fn compact_to(shared: &Arc<Shared>, revision: u64) -> Result<u64> {
    let floor = revision.min(shared.cache.revision());
    let before = shared.compacted.fetch_max(floor, Ordering::AcqRel);
    if floor <= before {
        return Ok(before);
    }
    let backend = shared.backend.clone();
    tokio::task::spawn_blocking(move || {
        backend.set_compacted(floor)?;
        while backend.drop_events(floor, DROP_CHUNK)? > 0 {}
        Ok::<_, Error>(())
    })
    .await
    .map_err(|e| Error::Backend {
        context: "compact".into(),
        message: e.to_string(),
    })??;
    shared
        .metrics
        .disk_bytes
        .set(shared.backend.disk_bytes() as i64);
    tracing::debug!(floor, "event log compacted");
    Ok(floor)
}

/// What compaction knows of the log's bytes: measured at some point, plus what the hub
/// has published since.
#[derive(Debug, Clone, Copy)]
struct LogBytes {
    /// The log's bytes when last measured (`None`: never yet).
    measured: Option<u64>,
    /// The hub's published bytes then.
    appended_then: u64,
}

/// The floor the byte bound asks for, measuring the log when it may be past it.
fn bytes_floor(shared: &Shared, config: &Config, log: &mut LogBytes) -> Result<u64> {
    if config.retain_bytes == 0 {
        return Ok(0);
    }
    let appended = shared.hub.appended();
    if let Some(m) = log.measured
        && m + appended.saturating_sub(log.appended_then) <= config.retain_bytes
    {
        return Ok(0);
    }
    let (floor, retained) = shared.backend.event_bytes_floor(config.retain_bytes)?;
    *log = LogBytes {
        measured: Some(retained),
        appended_then: appended,
    };
    shared.metrics.log_bytes.set(retained as i64);
    Ok(floor)
}

/// The floor that the retention policy allows now.
fn policy_floor(shared: &Shared, config: &Config, log: &mut LogBytes) -> Result<u64> {
    let by_bytes = bytes_floor(shared, config, log)?;
    Ok(count_and_age_floor(shared, config)?.max(by_bytes))
}

/// The floor of the count and age rules: the last `retain_events` or the last
/// `retain_for`, whichever keeps more.
fn count_and_age_floor(shared: &Shared, config: &Config) -> Result<u64> {
    let revision = shared.cache.revision();
    let by_count = revision.saturating_sub(config.retain_events);
    let low = shared.compacted();
    if by_count <= low {
        return Ok(low);
    }
    // Events are in commit-time order, so binary search for the newest one older than
    // the cutoff among those the count would drop.
    let cutoff = now_ms().saturating_sub(config.retain_for.as_millis() as u64);
    let (mut lo, mut hi) = (low, by_count);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        match shared.backend.event_time(mid)? {
            Some(t) if t < cutoff => lo = mid,
            Some(_) => hi = mid - 1,
            // Already gone: below the floor some other compaction set.
            None => lo = mid,
        }
    }
    Ok(lo)
}

/// Enforces the retention policy every `config.compact_every` until stopped.
pub(super) async fn run(shared: Weak<Shared>, config: Config, mut stop: oneshot::Receiver<()>) {
    let mut tick = tokio::time::interval(config.compact_every);
    tick.tick().await;
    let mut log = LogBytes {
        measured: None,
        appended_then: 0,
    };
    // Held apart from `shared`, so that waiting keeps no store open.
    let Some(now) = shared.upgrade().map(|s| s.compact_now.clone()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
            _ = now.notified() => {}
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let expired = shared
            .hub
            .expire(now_ms().saturating_sub(config.history_for.as_millis() as u64));
        if expired > 0 {
            tokio::task::spawn_blocking(super::release_freed_memory);
        }
        // Past the quota, history goes first (as an etcd operator compacts to free space):
        // otherwise deleting objects would free nothing until their events age out.
        let used = shared.backend.disk_bytes();
        let floor = if config.quota_bytes > 0 && used >= config.quota_bytes {
            tracing::warn!(
                used,
                quota = config.quota_bytes,
                "the store is past its quota: compacting all of its history"
            );
            shared.cache.revision()
        } else {
            let (s, c) = (shared.clone(), config.clone());
            let measured = tokio::task::spawn_blocking(move || {
                let floor = policy_floor(&s, &c, &mut log);
                (floor, log)
            })
            .await;
            match measured.map(|(floor, measured)| {
                log = measured;
                floor
            }) {
                Ok(Ok(floor)) => floor,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "compaction: read event log");
                    continue;
                }
                Err(_) => continue,
            }
        };
        if floor > shared.compacted() {
            match compact_to(&shared, floor).await {
                // What the dropped history and a rewritten base held goes back.
                Ok(_) => drop(tokio::task::spawn_blocking(super::release_freed_memory)),
                Err(e) => tracing::warn!(error = %e, "compaction failed; will retry"),
            }
        }
    }
}

#[cfg(test)]
pub(super) fn floor_for_test(shared: &Shared, config: &Config) -> u64 {
    let mut log = LogBytes {
        measured: None,
        appended_then: 0,
    };
    policy_floor(shared, config, &mut log).unwrap()
}
