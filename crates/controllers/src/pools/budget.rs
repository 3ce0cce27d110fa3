//! `maxUnhealthy`: a count or a percentage, as Cluster API's MachineHealthCheck takes it.

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
