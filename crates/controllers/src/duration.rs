//! Go-style durations (`5m`, `1h30m`, `20m0s`, `1.5h`), as the upstream manifests and Go
//! controllers write them: one parser and one formatter for every controller.

use std::time::Duration;

/// A Go duration (`time.ParseDuration` without a sign); `None` for anything else.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let (unit, seconds) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("\u{b5}s", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .filter(|(unit, _)| rest.starts_with(unit))
        .max_by_key(|(unit, _)| unit.len())?;
        rest = &rest[unit.len()..];
        total += number * seconds;
    }
    // What Go refuses (more than its int64 nanoseconds, about 292 years) is refused too, rather
    // than overflowing `Duration`.
    const GO_MAX_NANOS: u128 = i64::MAX as u128;
    Duration::try_from_secs_f64(total)
        .ok()
        .filter(|d| d.as_nanos() <= GO_MAX_NANOS)
}

/// A duration as Go prints it in messages (`20m0s`), whole seconds.
pub fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_go_writes() {
        assert_eq!(parse_go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("20m0s"), Some(Duration::from_secs(1200)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(
            parse_go_duration("10\u{b5}s"),
            Some(Duration::from_micros(10))
        );
        assert_eq!(parse_go_duration(" 90s "), Some(Duration::from_secs(90)));
    }

    #[test]
    fn refuses_anything_else() {
        assert_eq!(parse_go_duration("5 minutes"), None);
        assert_eq!(parse_go_duration("x"), None);
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn refuses_what_go_cannot_hold() {
        // Found by the go_duration fuzz target: a total beyond `Duration`'s range panicked.
        assert_eq!(
            parse_go_duration("99999999999999999999999999992m2.us\t"),
            None
        );
        assert_eq!(parse_go_duration("99999999999999999999h"), None);
        assert_eq!(parse_go_duration(&format!("{}s", "9".repeat(400))), None);
        // Go's limit: int64 nanoseconds.
        assert_eq!(parse_go_duration("2562048h"), None);
        assert_eq!(
            parse_go_duration("2562047h"),
            Some(Duration::from_secs(2562047 * 3600))
        );
    }

    #[test]
    fn prints_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(1200)), "20m0s");
        assert_eq!(go_duration(Duration::from_secs(7322)), "2h2m2s");
        assert_eq!(go_duration(Duration::from_secs(9)), "9s");
    }
}
