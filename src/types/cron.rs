//! CronJob schedules as Kubernetes reads them (robfig/cron's standard parser): five
//! fields (minute, hour, day of month, month, day of week) with lists, ranges, steps
//! (`*/5`, `1-10/2`, `5/15`), `?`, month and weekday names, 0 or 7 for Sunday, day of
//! month and day of week combined by OR when both are restricted; the descriptors
//! `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`, and
//! `@every <duration>`. The fields themselves are parsed and searched by the `croner`
//! crate; its extensions that Kubernetes refuses (`L`, `W`, `#`, seconds, years) are
//! refused here.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    Fields(Box<croner::Cron>),
    /// `@every`: a constant interval after the previous run.
    Every(SignedDuration),
}

const NAMES: [&str; 19] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", "SUN",
    "MON", "TUE", "WED", "THU", "FRI", "SAT",
];

/// Parses a schedule; the error is the message Kubernetes' validation reports.
pub fn parse(spec: &str) -> Result<Schedule, String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let fields = if let Some(rest) = spec.strip_prefix('@') {
        if let Some(d) = rest.strip_prefix("every ") {
            let every = go_duration(d.trim()).ok_or_else(|| {
                format!(
                    "failed to parse duration {spec}: time: invalid duration {:?}",
                    d.trim()
                )
            })?;
            // robfig rounds up to a whole second, and to at least one.
            let secs = every.as_secs() + i64::from(every.subsec_nanos() > 0);
            return Ok(Schedule::Every(SignedDuration::from_secs(secs.max(1))));
        }
        match rest {
            "yearly" | "annually" => "0 0 1 1 *",
            "monthly" => "0 0 1 * *",
            "weekly" => "0 0 * * 0",
            "daily" | "midnight" => "0 0 * * *",
            "hourly" => "0 * * * *",
            _ => return Err(format!("unrecognized descriptor: {spec}")),
        }
        .to_string()
    } else {
        spec.to_string()
    };
    let parts: Vec<&str> = fields.split_whitespace().collect();
    if parts.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            parts.len(),
            parts.join(" ")
        ));
    }
    for part in &parts {
        let mut rest = part.to_uppercase();
        for name in NAMES {
            rest = rest.replace(name, "");
        }
        if let Some(c) = rest
            .chars()
            .find(|c| !(c.is_ascii_digit() || matches!(c, '*' | '?' | ',' | '-' | '/')))
        {
            return Err(format!(
                "failed to parse {part:?}: unexpected character {c:?}"
            ));
        }
    }
    let parser = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .sloppy_ranges(true)
        .build();
    parser
        .parse(&fields)
        .map(|c| Schedule::Fields(Box::new(c)))
        .map_err(|e| e.to_string())
}

impl Schedule {
    /// The first time strictly after `after` that the schedule names, read in `tz`.
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        match self {
            Schedule::Every(d) => {
                // robfig: the interval from `after`, with its fraction of a second dropped.
                let whole = Timestamp::from_second(after.as_second()).ok()?;
                whole.checked_add(*d).ok()
            }
            Schedule::Fields(cron) => {
                let start = Zoned::new(after, tz.clone());
                cron.find_next_occurrence(&start, false)
                    .ok()
                    .map(|z| z.timestamp())
            }
        }
    }
}

/// A Go `time.Duration` string: `1h30m`, `90s`, `1.5h`, `300ms`.
fn go_duration(s: &str) -> Option<SignedDuration> {
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&n| n > 0)?;
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = tail;
    }
    SignedDuration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> String {
        parse(spec)
            .unwrap()
            .next_after(t(after), &TimeZone::UTC)
            .unwrap()
            .to_string()
    }

    #[test]
    fn standard_fields_and_descriptors() {
        assert_eq!(
            next("*/5 * * * *", "2026-03-01T10:02:00Z"),
            "2026-03-01T10:05:00Z"
        );
        assert_eq!(
            next("*/5 * * * *", "2026-03-01T10:05:00Z"),
            "2026-03-01T10:10:00Z"
        );
        assert_eq!(
            next("@hourly", "2026-03-01T10:02:00Z"),
            "2026-03-01T11:00:00Z"
        );
        assert_eq!(
            next("@daily", "2026-03-01T10:02:00Z"),
            "2026-03-02T00:00:00Z"
        );
        assert_eq!(
            next("@weekly", "2026-03-04T10:00:00Z"),
            "2026-03-08T00:00:00Z"
        );
        assert_eq!(
            next("@yearly", "2026-03-01T00:00:00Z"),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            next("0 9 * * MON-FRI", "2026-03-07T10:00:00Z"),
            "2026-03-09T09:00:00Z"
        );
        // 7 is Sunday too; 5/15 is 5, 20, 35, 50.
        assert_eq!(
            next("0 0 * * 7", "2026-03-02T00:00:00Z"),
            "2026-03-08T00:00:00Z"
        );
        assert_eq!(
            next("5/15 * * * *", "2026-03-01T10:21:00Z"),
            "2026-03-01T10:35:00Z"
        );
        // Both days restricted: either matches (1st of the month or a Monday).
        assert_eq!(
            next("0 0 1 * 1", "2026-03-02T01:00:00Z"),
            "2026-03-09T00:00:00Z"
        );
        assert_eq!(
            next("@every 90s", "2026-03-01T10:00:00.5Z"),
            "2026-03-01T10:01:30Z"
        );
    }

    #[test]
    fn schedules_are_read_in_their_time_zone() {
        let tz = jiff::tz::db().get("America/New_York").unwrap();
        let at = parse("0 9 * * *")
            .unwrap()
            .next_after(t("2026-03-01T00:00:00Z"), &tz)
            .unwrap();
        assert_eq!(at.to_string(), "2026-03-01T14:00:00Z");
    }

    #[test]
    fn what_kubernetes_refuses_is_refused() {
        for bad in [
            "* * * *",
            "0 0 * * * *",
            "61 * * * *",
            "0 0 L * *",
            "0 0 * * 5#3",
            "@fortnightly",
            "@every soon",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            parse("* * * *").unwrap_err(),
            "expected exactly 5 fields, found 4: [* * * *]"
        );
    }
}
