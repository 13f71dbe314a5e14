//! The Recreate strategy: the old deployment down to zero, then the new one up (with
//! pre, mid and post hooks in between). Also the first rollout of a Rolling DC.

use std::time::Duration;

use serde_json::Value;

use super::{Deployer, Until, hooks, name_of, say, spec_replicas};
use crate::types::openshift::LifecycleHook;

#[allow(clippy::too_many_arguments)]
pub(super) async fn run(
    d: &Deployer,
    from: Option<&Value>,
    to: &Value,
    desired: i64,
    timeout: Duration,
    pre: &Option<LifecycleHook>,
    mid: &Option<LifecycleHook>,
    post: &Option<LifecycleHook>,
) -> super::Result<()> {
    let to_name = name_of(to);
    if let Some(hook) = pre {
        hooks::run(d, hook, to, "pre")
            .await
            .map_err(|e| super::fail!("pre hook failed: {e:#}"))?;
    }
    d.halt_at(Until::Pre, "pre hook succeeded")?;

    if let Some(from) = from {
        let from_name = name_of(from);
        say(format_args!("--> Scaling {from_name} down to zero"));
        let scaled = d
            .scale_and_wait(from, 0, timeout)
            .await
            .map_err(|e| super::fail!("couldn't scale {from_name} to 0: {e:#}"))?;
        if let Err(e) = d.wait_pods_gone(&scaled, timeout).await {
            say(format_args!(
                "--> Failed to wait for old pods to be terminated: {e:#}"
            ));
            say("New pods may be scaled up before old pods get terminated!");
        }
    }
    d.halt_at(Until::Percent(0), "Reached 0% (no running pods)")?;

    if let Some(hook) = mid {
        hooks::run(d, hook, to, "mid")
            .await
            .map_err(|e| super::fail!("mid hook failed: {e:#}"))?;
    }
    d.halt_at(Until::Mid, "mid hook succeeded")?;

    let until = d.until.and_then(Until::percent);
    if desired > 0 {
        let mut current = to.clone();
        let mut accepted = false;
        if from.is_some() {
            say(format_args!(
                "--> Scaling {to_name} to 1 before performing acceptance check"
            ));
            current = d
                .scale_and_wait(&current, 1, timeout)
                .await
                .map_err(|e| super::fail!("couldn't scale {to_name} to 1: {e:#}"))?;
            current = d
                .accept(&current, timeout)
                .await
                .map_err(|e| super::fail!("update acceptor rejected {to_name}: {e:#}"))?;
            accepted = desired == 1;
            if let Some(n) = until.filter(|n| (1..100).contains(n)) {
                return Err(super::Error::Halt(format!("Reached {n}%")));
            }
        }
        if spec_replicas(&current) != desired {
            say(format_args!("--> Scaling {to_name} to {desired}"));
            current = d
                .scale_and_wait(&current, desired, timeout)
                .await
                .map_err(|e| super::fail!("couldn't scale {to_name} to {desired}: {e:#}"))?;
        }
        if !accepted {
            d.accept(&current, timeout)
                .await
                .map_err(|e| super::fail!("update acceptor rejected {to_name}: {e:#}"))?;
        }
    }
    match until {
        Some(n) if from.is_none() && (1..=100).contains(&n) => {
            return Err(super::Error::Halt(format!("Reached {n}%")));
        }
        Some(100) => return Err(super::Error::Halt("Reached 100%".into())),
        _ => {}
    }

    if let Some(hook) = post {
        hooks::run(d, hook, to, "post")
            .await
            .map_err(|e| super::fail!("post hook failed: {e:#}"))?;
    }
    Ok(())
}
