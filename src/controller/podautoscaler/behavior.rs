//! Stabilization and rate limits: the scale-down window and at most doubling without
//! `behavior`; with it, its windows and policies over the scale events kept in memory.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};
use serde_json::Value;

use super::{Controller, set};

/// Without behavior, a scale-up goes to at most this factor of the current replicas...
const SCALE_UP_LIMIT_FACTOR: f64 = 2.0;

/// ...or this many, whichever is more.
const SCALE_UP_LIMIT_MINIMUM: f64 = 4.0;

/// One recommendation of the replica calculation, kept for stabilization.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Recommendation {
    at: Timestamp,
    replicas: i64,
}

/// A scale this controller made, kept for the behavior policies' periods.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ScaleEvent {
    at: Timestamp,
    change: i64,
    outdated: bool,
}

/// What the controller remembers of one autoscaler between syncs.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) recommendations: Vec<Recommendation>,
    up: Vec<ScaleEvent>,
    down: Vec<ScaleEvent>,
}

/// One direction's scaling rules of a behavior, defaults applied by the API.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Rules {
    window: Option<i64>,
    select: String,
    policies: Vec<Policy>,
}

#[derive(Debug, Clone, PartialEq)]
struct Policy {
    pods: bool,
    value: i64,
    period: i64,
}

impl Rules {
    /// One direction's rules of a behavior; absent, no policies and `Max`.
    pub(super) fn from(rules: Option<&HPAScalingRules>) -> Rules {
        let policies = rules
            .and_then(|r| r.policies.as_ref())
            .map(|ps| {
                ps.iter()
                    .map(|p| Policy {
                        pods: p.type_ == "Pods",
                        value: p.value.into(),
                        period: p.period_seconds.into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Rules {
            window: rules
                .and_then(|r| r.stabilization_window_seconds)
                .map(i64::from),
            select: rules
                .and_then(|r| r.select_policy.as_deref())
                .unwrap_or("Max")
                .to_string(),
            policies,
        }
    }

    /// A behavior's scale-up and scale-down rules.
    pub(super) fn of(behavior: &HorizontalPodAutoscalerBehavior) -> (Rules, Rules) {
        (
            Rules::from(behavior.scale_up.as_ref()),
            Rules::from(behavior.scale_down.as_ref()),
        )
    }

    fn longest_period(&self) -> i64 {
        self.policies.iter().map(|p| p.period).max().unwrap_or(0)
    }
}

/// The most replicas allowed: the rate's limit or the maximum, whichever is lower, and
/// the condition that names it.
fn upper_bound(limit: i64, max: i64) -> (i64, &'static str, &'static str) {
    if max > limit {
        (
            limit,
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate",
        )
    } else {
        (
            max,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count",
        )
    }
}

/// `convertDesiredReplicasWithRules`, without behavior: within min and max, and a scale-up
/// of at most double (four at least).
fn convert_with_rules(
    current: i64,
    desired: i64,
    min: i64,
    max: i64,
) -> (i64, &'static str, &'static str) {
    let limit = (SCALE_UP_LIMIT_FACTOR * current as f64).max(SCALE_UP_LIMIT_MINIMUM) as i64;
    let (allowed, reason, message) = upper_bound(limit, max);
    if desired < min {
        return (
            min,
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count",
        );
    }
    if desired > allowed {
        return (allowed, reason, message);
    }
    (
        desired,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
}

/// `getReplicasChangePerPeriod`: what the events of the last `period` seconds changed.
fn change_in_period(period: i64, events: &[ScaleEvent], now: Timestamp) -> i64 {
    let cutoff = now - SignedDuration::from_secs(period);
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .sum()
}

/// Which way a limit of the behavior policies is worked out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Direction {
    Up,
    Down,
}

/// `calculateScaleUpLimitWithScalingRules` and `calculateScaleDownLimitWithBehaviors`:
/// what each policy allows from the replicas at the start of its period, the most of
/// them (select policy `Max`: the largest change) or the least (`Min`).
fn policy_limit(
    current: i64,
    (up, down): (&[ScaleEvent], &[ScaleEvent]),
    rules: &Rules,
    direction: Direction,
    now: Timestamp,
) -> i64 {
    if rules.select == "Disabled" {
        return current;
    }
    // The largest change is the highest count up and the lowest count down.
    let highest = (rules.select == "Min") != (direction == Direction::Up);
    let mut result = if highest { i64::MIN } else { i64::MAX };
    for p in &rules.policies {
        let start =
            current - change_in_period(p.period, up, now) + change_in_period(p.period, down, now);
        let proposed = match (direction, p.pods) {
            (Direction::Up, true) => start + p.value,
            (Direction::Up, false) => (start as f64 * (1.0 + p.value as f64 / 100.0)).ceil() as i64,
            (Direction::Down, true) => start - p.value,
            (Direction::Down, false) => (start as f64 * (1.0 - p.value as f64 / 100.0)) as i64,
        };
        result = if highest {
            result.max(proposed)
        } else {
            result.min(proposed)
        };
    }
    result
}

impl History {
    /// `stabilizeRecommendation`: the highest recommendation within the window, and this
    /// one recorded (over the oldest expired one).
    fn stabilize(&mut self, desired: i64, window: SignedDuration, now: Timestamp) -> i64 {
        let cutoff = now - window;
        let mut highest = desired;
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at < cutoff {
                old = Some(i);
            } else if r.replicas > highest {
                highest = r.replicas;
            }
        }
        self.record(old, desired, now);
        highest
    }

    pub(super) fn record(&mut self, old: Option<usize>, replicas: i64, at: Timestamp) {
        let r = Recommendation { at, replicas };
        match old {
            Some(i) => self.recommendations[i] = r,
            None => self.recommendations.push(r),
        }
    }

    /// `stabilizeRecommendationWithBehaviors`: the recommendation held between the lowest
    /// of the scale-up window and the highest of the scale-down window.
    fn stabilize_with_behavior(
        &mut self,
        current: i64,
        desired: i64,
        up: &Rules,
        down: &Rules,
        now: Timestamp,
    ) -> (i64, &'static str, &'static str) {
        let up_cutoff = now - SignedDuration::from_secs(up.window.unwrap_or(0));
        let down_cutoff = now - SignedDuration::from_secs(down.window.unwrap_or(0));
        let (mut up_rec, mut down_rec) = (desired, desired);
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at > up_cutoff {
                up_rec = up_rec.min(r.replicas);
            }
            if r.at > down_cutoff {
                down_rec = down_rec.max(r.replicas);
            }
            if r.at < up_cutoff && r.at < down_cutoff {
                old = Some(i);
            }
        }
        let recommendation = current.max(up_rec).min(down_rec);
        self.record(old, desired, now);
        if desired >= current {
            (
                recommendation,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            (
                recommendation,
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        }
    }

    /// `storeScaleEvent`: a scale made, over the oldest event past the longest period.
    pub(super) fn store_event(
        &mut self,
        up: &Rules,
        down: &Rules,
        from: i64,
        to: i64,
        now: Timestamp,
    ) {
        let (events, rules, change) = if to > from {
            (&mut self.up, up, to - from)
        } else {
            (&mut self.down, down, from - to)
        };
        let cutoff = now - SignedDuration::from_secs(rules.longest_period());
        for e in events.iter_mut() {
            if e.at < cutoff {
                e.outdated = true;
            }
        }
        let event = ScaleEvent {
            at: now,
            change,
            outdated: false,
        };
        match events.iter_mut().find(|e| e.outdated) {
            Some(slot) => *slot = event,
            None => events.push(event),
        }
    }

    /// `convertDesiredReplicasWithBehaviorRate`: within min and max and what the policies
    /// allow over their periods.
    fn limit_with_behavior(
        &self,
        current: i64,
        desired: i64,
        (min, max): (i64, i64),
        (up, down): (&Rules, &Rules),
        now: Timestamp,
    ) -> (i64, &'static str, &'static str) {
        if desired > current {
            let events = (&self.up[..], &self.down[..]);
            let limit = policy_limit(current, events, up, Direction::Up, now).max(current);
            let (allowed, reason, message) = upper_bound(limit, max);
            if desired > allowed {
                return (allowed, reason, message);
            }
        } else if desired < current {
            let events = (&self.up[..], &self.down[..]);
            let limit = policy_limit(current, events, down, Direction::Down, now).min(current);
            let (allowed, reason, message) = if min < limit {
                (
                    limit,
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate",
                )
            } else {
                (
                    min,
                    "TooFewReplicas",
                    "the desired replica count is less than the minimum replica count",
                )
            };
            if desired < allowed {
                return (allowed, reason, message);
            }
        }
        (
            desired,
            "DesiredWithinRange",
            "the desired count is within the acceptable range",
        )
    }
}

impl Controller {
    /// `normalizeDesiredReplicas` and its behavior twin: the proposal stabilized and held
    /// within the limits, with the conditions that say which rule held it.
    pub(super) fn normalize(
        &self,
        key: &str,
        hpa: &mut Value,
        behavior: Option<&HorizontalPodAutoscalerBehavior>,
        (current, proposed): (i64, i64),
        (min, max): (i64, i64),
        now: Timestamp,
    ) -> i64 {
        let mut history = self.history.lock().expect("history lock");
        let h = history.entry(key.to_string()).or_default();
        let (stabilized, held, limited) = match behavior {
            None => {
                let window = SignedDuration::try_from(self.timing.downscale_window)
                    .unwrap_or(SignedDuration::from_secs(300));
                let stabilized = h.stabilize(proposed, window, now);
                let held = (
                    "ScaleDownStabilized",
                    "recent recommendations were higher than current one, applying the highest recent recommendation",
                );
                (
                    stabilized,
                    held,
                    convert_with_rules(current, stabilized, min, max),
                )
            }
            Some(b) => {
                let (up, mut down) = Rules::of(b);
                down.window
                    .get_or_insert(self.timing.downscale_window.as_secs() as i64);
                let (stabilized, reason, message) =
                    h.stabilize_with_behavior(current, proposed, &up, &down, now);
                let limited =
                    h.limit_with_behavior(current, stabilized, (min, max), (&up, &down), now);
                (stabilized, (reason, message), limited)
            }
        };
        drop(history);
        if stabilized != proposed {
            set(hpa, ("AbleToScale", "True", held.0.into(), held.1.into()));
        } else {
            set(
                hpa,
                (
                    "AbleToScale",
                    "True",
                    "ReadyForNewScale".into(),
                    "recommended size matches current size".into(),
                ),
            );
        }
        let (desired, reason, message) = limited;
        let status = if desired == stabilized {
            "False"
        } else {
            "True"
        };
        set(
            hpa,
            ("ScalingLimited", status, reason.into(), message.into()),
        );
        desired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-06-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn without_behavior_a_scale_up_at_most_doubles_and_min_max_hold() {
        assert_eq!(convert_with_rules(1, 10, 1, 20).0, 4);
        assert_eq!(convert_with_rules(1, 10, 1, 20).1, "ScaleUpLimit");
        assert_eq!(convert_with_rules(5, 10, 1, 20).0, 10);
        assert_eq!(
            convert_with_rules(5, 30, 1, 8),
            (
                8,
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count"
            )
        );
        assert_eq!(convert_with_rules(5, 0, 2, 8).0, 2);
        assert_eq!(convert_with_rules(5, 0, 2, 8).1, "TooFewReplicas");
    }

    #[test]
    fn the_scale_down_window_keeps_the_highest_recent_recommendation() {
        let mut h = History::default();
        let window = SignedDuration::from_secs(300);
        h.record(None, 5, now() - SignedDuration::from_secs(400));
        h.record(None, 4, now() - SignedDuration::from_secs(100));
        assert_eq!(h.stabilize(2, window, now()), 4);
        // The sample past the window was overwritten, not appended to.
        assert_eq!(h.recommendations.len(), 2);
        assert_eq!(
            h.stabilize(1, window, now() + SignedDuration::from_secs(250)),
            2
        );
    }

    fn rules(v: Value) -> Rules {
        Rules::from(Some(&serde_json::from_value(v).unwrap()))
    }

    #[test]
    fn behavior_policies_limit_over_their_periods() {
        let up = rules(
            json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]}),
        );
        // The faster of four pods and doubling.
        assert_eq!(policy_limit(2, (&[], &[]), &up, Direction::Up, now()), 6);
        assert_eq!(policy_limit(10, (&[], &[]), &up, Direction::Up, now()), 20);
        // Two pods were added 10 s ago: the period began at 2.
        let recent = [ScaleEvent {
            at: now() - SignedDuration::from_secs(10),
            change: 2,
            outdated: false,
        }];
        assert_eq!(
            policy_limit(4, (&recent, &[]), &up, Direction::Up, now()),
            6
        );
        let slow = rules(json!({"selectPolicy": "Min", "policies": [
            {"type": "Pods", "value": 1, "periodSeconds": 60},
            {"type": "Percent", "value": 10, "periodSeconds": 60}]}));
        assert_eq!(
            policy_limit(10, (&[], &[]), &slow, Direction::Down, now()),
            9
        );
        let percent = rules(json!({"selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 50, "periodSeconds": 60}]}));
        assert_eq!(
            policy_limit(5, (&[], &[]), &percent, Direction::Down, now()),
            2
        );
        let off = rules(json!({"selectPolicy": "Disabled", "policies": []}));
        assert_eq!(policy_limit(5, (&[], &[]), &off, Direction::Down, now()), 5);

        let mut h = History::default();
        let down = rules(
            json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}),
        );
        assert_eq!(
            h.limit_with_behavior(4, 1, (1, 10), (&up, &down), now()),
            (
                3,
                "ScaleDownLimit",
                "the desired replica count is decreasing faster than the maximum scale rate"
            )
        );
        h.store_event(&up, &down, 4, 3, now());
        let later = now() + SignedDuration::from_secs(30);
        // One pod went within the minute: no more may go yet.
        assert_eq!(
            h.limit_with_behavior(3, 1, (1, 10), (&up, &down), later).0,
            3
        );
        let much_later = now() + SignedDuration::from_secs(61);
        assert_eq!(
            h.limit_with_behavior(3, 1, (1, 10), (&up, &down), much_later)
                .0,
            2
        );
        h.store_event(&up, &down, 3, 2, much_later);
        assert_eq!(h.down.len(), 1, "the outdated event's slot is reused");
    }

    #[test]
    fn behavior_stabilization_holds_between_the_windows() {
        let up =
            rules(json!({"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": []}));
        let down = rules(
            json!({"stabilizationWindowSeconds": 120, "selectPolicy": "Max", "policies": []}),
        );
        let mut h = History::default();
        h.record(None, 3, now() - SignedDuration::from_secs(30));
        // Up to 6 is held at the lowest of the last minute (3)...
        assert_eq!(h.stabilize_with_behavior(3, 6, &up, &down, now()).0, 3);
        // ...and down to 1 at the highest of the last two minutes (6).
        let (n, reason, _) = h.stabilize_with_behavior(6, 1, &up, &down, now());
        assert_eq!((n, reason), (6, "ScaleDownStabilized"));
    }
}
