//! Go-style durations (`5m`, `1h30m`, `90s`, `1.5h`), as the original's manifests write them,
//! and `maxUnhealthy` (a count or a percentage, as Cluster API's MachineHealthCheck takes it).

use std::time::Duration;

/// A Go duration; the CRD already refuses anything else, so `None` only for hand-edited data.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text;
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
            ("µs", 1e-6),
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
    Some(Duration::from_secs_f64(total))
}

/// How many unhealthy Nodes a pool tolerates before it stops replacing any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnhealthy {
    Count(u32),
    /// Percent of the pool's members, rounded down (Cluster API's rule).
    Percent(u32),
}

impl Default for MaxUnhealthy {
    fn default() -> Self {
        MaxUnhealthy::Count(1)
    }
}

impl MaxUnhealthy {
    /// `"2"` or `"40%"`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if let Some(percent) = text.strip_suffix('%') {
            return percent
                .parse()
                .ok()
                .filter(|p| *p <= 100)
                .map(MaxUnhealthy::Percent);
        }
        text.parse().ok().map(MaxUnhealthy::Count)
    }

    /// The number of unhealthy members allowed out of `total`.
    pub fn allowed(self, total: usize) -> usize {
        match self {
            MaxUnhealthy::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            MaxUnhealthy::Percent(p) => total * usize::try_from(p).unwrap_or(0) / 100,
        }
    }
}

impl std::fmt::Display for MaxUnhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxUnhealthy::Count(n) => write!(f, "{n}"),
            MaxUnhealthy::Percent(p) => write!(f, "{p}%"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("5m0s"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("5 minutes"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn max_unhealthy_counts_and_percentages() {
        assert_eq!(MaxUnhealthy::parse("1"), Some(MaxUnhealthy::Count(1)));
        assert_eq!(MaxUnhealthy::parse("40%"), Some(MaxUnhealthy::Percent(40)));
        assert_eq!(MaxUnhealthy::parse("140%"), None);
        assert_eq!(MaxUnhealthy::parse("one"), None);
        assert_eq!(MaxUnhealthy::Percent(40).allowed(5), 2);
        assert_eq!(MaxUnhealthy::Percent(40).allowed(2), 0);
        assert_eq!(MaxUnhealthy::Count(1).allowed(5), 1);
        assert_eq!(MaxUnhealthy::default(), MaxUnhealthy::Count(1));
    }
}
