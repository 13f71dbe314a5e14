//! Indexed completion: index sets as Kubernetes writes them (`1,3-5,7`) and the success
//! policy that succeeded indexes meet.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::JobSpec;

/// Indexes as Kubernetes writes them: `1,3-5,7`.
pub fn format_indexes(set: &BTreeSet<i64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last = iter.next().expect("peeked");
        }
        out.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
    }
    out.join(",")
}

/// The indexes of `1,3-5,7` below `completions` (a bad part is skipped, as upstream).
pub fn parse_indexes(s: &str, completions: i64) -> BTreeSet<i64> {
    let mut set = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) else {
            continue;
        };
        set.extend((a.max(0)..=b.min(completions - 1)).filter(|_| a <= b));
    }
    set
}

/// `matchSuccessPolicy`: the first rule of the Job's success policy that its succeeded
/// indexes meet, as the message of its `SuccessCriteriaMet` (`Matched rules at index 0`).
/// A rule with indexes needs all of them, or `succeededCount` of them; a rule with a count
/// alone needs that many indexes.
pub(super) fn match_success_policy(
    spec: &JobSpec,
    succeeded: &BTreeSet<i64>,
    completions: i64,
) -> Option<String> {
    let rules = &spec.success_policy.as_ref()?.rules;
    if succeeded.is_empty() {
        return None;
    }
    rules.iter().enumerate().find_map(|(i, rule)| {
        let count = rule.succeeded_count.map(i64::from);
        let met = match rule.succeeded_indexes.as_deref() {
            Some(text) => {
                let wanted = parse_indexes(text, completions);
                let have = wanted.intersection(succeeded).count() as i64;
                !wanted.is_empty()
                    && match count {
                        Some(n) => have >= n,
                        None => have == wanted.len() as i64,
                    }
            }
            None => count.is_some_and(|n| succeeded.len() as i64 >= n),
        };
        met.then(|| format!("Matched rules at index {i}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A JobSpec with these fields (and the template it cannot be without).
    fn spec_of(fields: Value) -> JobSpec {
        let mut spec = json!({"template": {}});
        spec.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn a_success_policy_is_met_by_the_first_rule_its_indexes_satisfy() {
        let job = |rules: Value| spec_of(json!({"successPolicy": {"rules": rules}}));
        let done: BTreeSet<i64> = [0, 2, 3].into_iter().collect();
        let m = |rules: Value| match_success_policy(&job(rules), &done, 5);
        assert_eq!(
            m(json!([{"succeededIndexes": "0,2"}])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(
            m(json!([{"succeededIndexes": "0-1"}])),
            None,
            "1 has not succeeded"
        );
        assert_eq!(
            m(json!([{"succeededIndexes": "0-1"}, {"succeededIndexes": "1-4", "succeededCount": 2}])).as_deref(),
            Some("Matched rules at index 1")
        );
        assert_eq!(m(json!([{"succeededCount": 4}])), None);
        assert_eq!(
            m(json!([{"succeededCount": 3}])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(match_success_policy(&spec_of(json!({})), &done, 5), None);
    }

    #[test]
    fn indexes_are_written_as_intervals() {
        let set: BTreeSet<i64> = [0, 1, 2, 4, 6, 7].into_iter().collect();
        assert_eq!(format_indexes(&set), "0-2,4,6-7");
        assert_eq!(parse_indexes("0-2,4,6-7", 10), set);
        assert_eq!(parse_indexes("1,3-9", 5), [1, 3, 4].into_iter().collect());
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }
}
