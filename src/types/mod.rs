//! API object helpers shared by every layer above the store: timestamps, name and label
//! syntax, label and field selectors. Imports nothing else from the crate.

pub mod fields;
pub mod labels;
pub mod names;

/// The current time as an API timestamp (RFC 3339, UTC, whole seconds). Every object
/// timestamp comes from here.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The current time with microseconds (RFC 3339, UTC), as MicroTime fields use.
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Seconds since an API timestamp, if it parses.
pub fn age_seconds(timestamp: &str) -> Option<i64> {
    let t: jiff::Timestamp = timestamp.parse().ok()?;
    Some(jiff::Timestamp::now().as_second() - t.as_second())
}

/// A duration the way kubectl prints ages: `45s`, `12m`, `3h15m`, `5d`.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=599 => format!("{}m{}s", s / 60, s % 60).replace("m0s", "m"),
        600..=10799 => format!("{}m", s / 60),
        10800..=28799 => {
            let (h, m) = (s / 3600, (s % 3600) / 60);
            if m == 0 {
                format!("{h}h")
            } else {
                format!("{h}h{m}m")
            }
        }
        28800..=172799 => format!("{}h", s / 3600),
        _ => {
            let d = s / 86400;
            let h = (s % 86400) / 3600;
            if d < 8 && h > 0 {
                format!("{d}d{h}h")
            } else {
                format!("{d}d")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(180), "3m");
        assert_eq!(human_duration(720), "12m");
        assert_eq!(human_duration(3 * 3600 + 15 * 60), "3h15m");
        assert_eq!(human_duration(10 * 3600), "10h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(30 * 86400), "30d");
    }

    #[test]
    fn timestamps_round_trip() {
        let t = now();
        assert!(t.ends_with('Z') && t.len() == 20, "{t}");
        assert!(age_seconds(&t).unwrap().abs() <= 1);
        assert!(now_micro().contains('.'));
    }
}
