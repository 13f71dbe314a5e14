//! The Rolling strategy: the new deployment grows while the old one shrinks, never going
//! above `desired + maxSurge` pods nor below `desired − maxUnavailable` available ones.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    Deployer, Until, annotate, by_labels, hooks, name_of, observed, pods, recreate, say, secs,
    selector_of, spec_replicas, status_replicas, uid_of,
};
use crate::types::openshift::{self as os, RollingParams};

/// The limits of one rolling update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fenceposts {
    pub surge: i64,
    pub unavailable: i64,
    pub min_available: i64,
}

/// Surge and unavailability for `desired` pods: percentages of `desired`, surge rounded
/// up and unavailability down; both zero means one may be unavailable. With nothing
/// desired, all of the old pods (`old`) may go at once.
pub(crate) fn fenceposts(p: &RollingParams, desired: i64, old: i64) -> Result<Fenceposts, String> {
    let surge = os::scaled_value(p.max_surge.as_ref(), desired, true)?;
    let mut unavailable = os::scaled_value(p.max_unavailable.as_ref(), desired, false)?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    if desired > 0 && surge == 0 && unavailable == 0 {
        return Err("one of maxSurge or maxUnavailable must be specified".into());
    }
    let mut min_available = (desired - unavailable).max(0);
    if desired == 0 {
        unavailable = old;
        min_available = 0;
    }
    Ok(Fenceposts {
        surge,
        unavailable,
        min_available,
    })
}

/// How many new pods to add: up to the surge limit, or all remaining once the old
/// deployment is gone; never past `desired`. Returns the new target, if it grows.
pub(crate) fn scale_up_to(new: i64, old: i64, desired: i64, surge: i64) -> Option<i64> {
    if new >= desired {
        return None;
    }
    let increment = if old == 0 {
        desired - new
    } else {
        (desired + surge) - (old + new)
    };
    (increment > 0).then(|| (new + increment).min(desired))
}

/// The old deployment's new target given `new_available` available new pods, keeping
/// `min_available` pods available overall; `None` when it cannot shrink yet.
pub(crate) fn scale_down_to(
    new: i64,
    old: i64,
    desired: i64,
    min_available: i64,
    new_available: i64,
) -> Option<i64> {
    if old == 0 {
        return None;
    }
    let decrement = (old + new) - min_available - (new - new_available);
    if decrement <= 0 {
        return None;
    }
    let mut next = (old - decrement).max(0);
    if new == desired && new_available == desired {
        next = 0;
    }
    Some(next)
}

/// Progress of the new deployment towards `desired`, in percent.
pub(crate) fn progress(start: i64, new: i64, desired: i64) -> i64 {
    let goal = (desired - start).abs();
    if goal == 0 {
        return 100;
    }
    (goal - (desired - new).abs()) * 100 / goal
}

/// Pods of `selected` that count as available now: Ready for `min_ready` and not being
/// deleted.
fn available(pods: &BTreeMap<String, Value>, min_ready: i64) -> i64 {
    let now = jiff::Timestamp::now();
    pods.values()
        .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
        .filter(|p| {
            let Some(ready) = crate::types::condition(p, "Ready") else {
                return false;
            };
            if ready["status"] != "True" {
                return false;
            }
            if min_ready <= 0 {
                return true;
            }
            ready["lastTransitionTime"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| now.duration_since(t).as_secs() >= min_ready)
        })
        .count() as i64
}

pub(super) async fn run(
    d: &Deployer,
    from: Option<&Value>,
    to: &Value,
    desired: i64,
) -> super::Result<()> {
    let p = d
        .config
        .spec
        .strategy
        .rolling_params
        .clone()
        .unwrap_or_default();
    let timeout = secs(p.timeout_seconds.unwrap_or(os::DEFAULT_TIMEOUT_SECONDS));
    let Some(from) = from else {
        // The first rollout: nothing to roll from, so recreate.
        return recreate::run(d, None, to, desired, timeout, &p.pre, &None, &p.post).await;
    };
    if let Some(hook) = &p.pre {
        hooks::run(d, hook, to, "pre")
            .await
            .map_err(|e| super::fail!("pre hook failed: {e:#}"))?;
    }
    d.halt_at(Until::Pre, "pre hook succeeded")?;
    d.halt_at(Until::Percent(0), "Reached 0% (before rollout)")?;

    let source = format!("{}:{}", name_of(from), uid_of(from));
    if os::annotation(to, os::UPDATE_SOURCE_ID_ANNOTATION).is_none() {
        annotate(
            d,
            name_of(to),
            json!({os::UPDATE_SOURCE_ID_ANNOTATION: source}),
        )
        .await?;
    }
    update(d, &p, from, to).await?;

    if let Some(hook) = &p.post {
        hooks::run(d, hook, to, "post")
            .await
            .map_err(|e| super::fail!("post hook failed: {e:#}"))?;
    }
    Ok(())
}

/// The rolling update from `from` to `to`.
async fn update(d: &Deployer, p: &RollingParams, from: &Value, to: &Value) -> super::Result<()> {
    let to_name = name_of(to).to_string();
    let from_name = name_of(from).to_string();
    let timeout = secs(p.timeout_seconds.unwrap_or(os::DEFAULT_TIMEOUT_SECONDS));
    let interval = secs(p.interval_seconds.unwrap_or(1));
    let period = secs(p.update_period_seconds.unwrap_or(1));
    let desired: i64 = os::annotation(to, os::DESIRED_REPLICAS_ANNOTATION)
        .ok_or_else(|| super::fail!("unable to parse annotation for {to_name}: missing"))?
        .trim()
        .parse()
        .map_err(|e| super::fail!("unable to parse annotation for {to_name}: {e}"))?;
    if os::annotation(from, os::ORIGINAL_REPLICAS_ANNOTATION).is_none() {
        annotate(
            d,
            &from_name,
            json!({os::ORIGINAL_REPLICAS_ANNOTATION: spec_replicas(from).to_string()}),
        )
        .await?;
    }
    let mut new = spec_replicas(to);
    let mut old = spec_replicas(from);
    let f = fenceposts(p, desired, old).map_err(super::Error::Failed)?;
    say(format_args!(
        "--> Scaling up {to_name} from {new} to {desired}, scaling down {from_name} from {old} \
         to 0 (keep {} pods available, don't exceed {} pods)",
        f.min_available,
        desired + f.surge
    ));
    let start = new;
    let until = d.until.and_then(Until::percent).filter(|n| *n >= 1);
    let check_progress = |new: i64| -> super::Result<()> {
        let pct = progress(start, new, desired);
        if let Some(n) = until
            && pct >= i64::from(n)
        {
            return Err(super::Error::Halt(format!(
                "Reached {n}% (currently {pct}%)"
            )));
        }
        Ok(())
    };
    check_progress(new)?;
    let min_ready = to
        .pointer("/spec/minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let selector = selector_of(to);
    let mut to_rc = to.clone();
    let mut from_rc = from.clone();
    let mut deadline = tokio::time::Instant::now() + timeout;
    while new != desired || old != 0 {
        let before = (new, old);
        if let Some(next) = scale_up_to(new, old, desired, f.surge) {
            say(format_args!("    Scaling {to_name} up to {next}"));
            to_rc = d
                .scale_and_wait(&to_rc, next, timeout.max(interval))
                .await?;
            new = next;
        }
        check_progress(new)?;
        if old > 0 {
            // Wait (at most the update period) until enough new pods are available for
            // the old deployment to shrink.
            let ready = |pods: &BTreeMap<String, Value>| {
                let n = available(pods, min_ready);
                scale_down_to(new, old, desired, f.min_available, n).map(|_| n)
            };
            let new_available = match d
                .watch_until(super::pods(), by_labels(selector.clone()), period, ready)
                .await
            {
                Some(n) => n,
                None => {
                    let list = d
                        .client
                        .list(pods(), Some(&d.ns), &by_labels(selector.clone()))
                        .await?;
                    let pods = list
                        .items
                        .into_iter()
                        .map(|o| (name_of(&o).to_string(), o))
                        .collect();
                    available(&pods, min_ready)
                }
            };
            if let Some(next) = scale_down_to(new, old, desired, f.min_available, new_available) {
                say(format_args!("    Scaling {from_name} down to {next}"));
                from_rc = d
                    .scale_and_wait(&from_rc, next, timeout.max(interval))
                    .await?;
                old = next;
            }
        }
        check_progress(new)?;
        if (new, old) != before {
            deadline = tokio::time::Instant::now() + timeout;
        } else if tokio::time::Instant::now() > deadline {
            return Err(super::fail!(
                "timed out waiting for any update progress to be made"
            ));
        }
    }

    // Clean up: the new deployment no longer needs the update annotations.
    annotate(
        d,
        &to_name,
        json!({os::UPDATE_SOURCE_ID_ANNOTATION: null, os::DESIRED_REPLICAS_ANNOTATION: null}),
    )
    .await?;
    d.watch_rc(&to_name, uid_of(to), timeout, |rc| {
        observed(rc) && status_replicas(rc) == spec_replicas(rc)
    })
    .await?
    .ok_or_else(|| super::fail!("timed out waiting for {to_name} to settle"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn params(surge: Option<IntOrString>, unavailable: Option<IntOrString>) -> RollingParams {
        RollingParams {
            max_surge: surge,
            max_unavailable: unavailable,
            ..Default::default()
        }
    }

    fn pct(s: &str) -> Option<IntOrString> {
        Some(IntOrString::String(s.into()))
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        let p = params(pct("25%"), pct("25%"));
        assert_eq!(
            fenceposts(&p, 4, 4).unwrap(),
            Fenceposts {
                surge: 1,
                unavailable: 1,
                min_available: 3
            }
        );
        assert_eq!(
            fenceposts(&p, 3, 3).unwrap(),
            Fenceposts {
                surge: 1,
                unavailable: 0,
                min_available: 3
            }
        );
        // Both round to zero: one may be unavailable.
        let p = params(pct("10%"), pct("10%"));
        assert_eq!(
            fenceposts(&p, 1, 1).unwrap(),
            Fenceposts {
                surge: 1,
                unavailable: 0,
                min_available: 1
            }
        );
        let p = params(Some(IntOrString::Int(0)), pct("10%"));
        assert_eq!(
            fenceposts(&p, 2, 2).unwrap(),
            Fenceposts {
                surge: 0,
                unavailable: 1,
                min_available: 1
            }
        );
        // Nothing desired: all old pods may go.
        let p = params(pct("25%"), pct("25%"));
        assert_eq!(
            fenceposts(&p, 0, 5).unwrap(),
            Fenceposts {
                surge: 0,
                unavailable: 5,
                min_available: 0
            }
        );
        assert!(fenceposts(&params(pct("a%"), None), 1, 1).is_err());
    }

    #[test]
    fn the_worked_example_never_breaks_the_limits() {
        // desired 4, 25%/25%, old 4 ready: never more than 5 pods, never fewer than 3
        // available, assuming each new pod becomes available once created.
        let f = fenceposts(&params(pct("25%"), pct("25%")), 4, 4).unwrap();
        let (desired, mut new, mut old) = (4, 0, 4);
        let mut steps = 0;
        while new != desired || old != 0 {
            if let Some(n) = scale_up_to(new, old, desired, f.surge) {
                new = n;
            }
            assert!(new + old <= desired + f.surge, "{new}+{old}");
            if let Some(o) = scale_down_to(new, old, desired, f.min_available, new) {
                old = o;
            }
            assert!(new + old >= f.min_available);
            steps += 1;
            assert!(steps < 20);
        }
        assert_eq!(scale_up_to(0, 4, 4, 1), Some(1));
        assert_eq!(scale_down_to(1, 4, 4, 3, 0), Some(3));
        // New pods not available: the old deployment keeps its minimum.
        assert_eq!(scale_down_to(1, 3, 4, 3, 0), None);
        assert_eq!(scale_up_to(1, 3, 4, 1), Some(2));
        assert_eq!(scale_up_to(2, 3, 4, 1), None);
        assert_eq!(scale_down_to(2, 3, 4, 3, 0), None);
        // Fully up and available: old goes to zero at once.
        assert_eq!(scale_down_to(4, 1, 4, 3, 4), Some(0));
        assert_eq!(scale_up_to(2, 0, 4, 1), Some(4));
    }

    #[test]
    fn progress_is_a_percentage_of_the_way() {
        assert_eq!(progress(0, 0, 4), 0);
        assert_eq!(progress(0, 1, 4), 25);
        assert_eq!(progress(0, 3, 4), 75);
        assert_eq!(progress(0, 4, 4), 100);
        assert_eq!(progress(2, 2, 2), 100);
    }
}
