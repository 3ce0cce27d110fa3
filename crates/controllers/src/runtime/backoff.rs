//! Error backoff per object: exponential with jitter, reset by a successful reconcile.
//!
//! The table holds only objects whose last reconcile failed; should a fleet-wide outage fill
//! it past [`MAX_TRACKED`], it starts again from empty (every object back to the first delay)
//! rather than grow.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most objects whose failures are remembered at once.
pub const MAX_TRACKED: usize = 100_000;

/// Failures per object key, and the delay they make. Clones share one table, so that a
/// reconciler can ask the delay of its own controller's backoff (a refusal it reports and
/// retries later counts as a failure too).
#[derive(Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Arc<Mutex<HashMap<String, u32>>>,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The delay before retrying `key` after one more failure.
    pub fn failed(&self, key: &str) -> Duration {
        let n = {
            let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            if failures.len() >= MAX_TRACKED && !failures.contains_key(key) {
                failures.clear();
            }
            let n = failures.entry(key.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        delay(self.base, self.max, n, rand_unit())
    }

    /// Forgets `key`'s failures (it succeeded, or is gone).
    pub fn succeeded(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(key);
    }

    /// Forgets the failures of every key `keep` refuses (objects gone or ended, which are
    /// never reconciled again to reset their count).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.retain(|key, _| keep(key));
    }

    /// How many keys have failures remembered.
    pub fn tracked(&self) -> usize {
        self.failures.lock().map_or(0, |f| f.len())
    }
}

fn rand_unit() -> f64 {
    use rand::Rng;
    rand::rng().random_range(0.0..1.0)
}

/// `base * 2^(n-1)`, capped at `max`, then scaled by a jitter factor in [0.5, 1.0].
fn delay(base: Duration, max: Duration, failures: u32, unit: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    let raw = base.saturating_mul(1u32 << exp).min(max);
    raw.mul_f64(0.5 + unit.clamp(0.0, 1.0) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_with_jitter() {
        let base = Duration::from_secs(5);
        let max = Duration::from_secs(300);
        assert_eq!(delay(base, max, 1, 1.0), Duration::from_secs(5));
        assert_eq!(delay(base, max, 2, 1.0), Duration::from_secs(10));
        assert_eq!(delay(base, max, 4, 1.0), Duration::from_secs(40));
        assert_eq!(delay(base, max, 30, 1.0), max);
        assert_eq!(delay(base, max, 2, 0.0), Duration::from_secs(5));
        let backoff = Backoff::new(base, max);
        let first = backoff.failed("a");
        let second = backoff.failed("a");
        assert!(first <= Duration::from_secs(5) && second >= Duration::from_secs(5));
        backoff.succeeded("a");
        assert!(backoff.failed("a") <= Duration::from_secs(5));
    }

    #[test]
    fn retain_forgets_the_keys_refused() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        for key in ["a", "b", "c"] {
            backoff.failed(key);
        }
        backoff.failed("a");
        backoff.retain(|key| key != "b");
        assert_eq!(backoff.tracked(), 2);
        // "a" kept its two failures: the third delay is 4 s with jitter, at least 2 s.
        assert!(backoff.failed("a") >= Duration::from_secs(2));
    }

    #[test]
    fn clones_share_one_table() {
        let base = Duration::from_secs(5);
        let backoff = Backoff::new(base, Duration::from_secs(300));
        let clone = backoff.clone();
        for _ in 0..4 {
            clone.failed("a");
        }
        // The fifth failure, counted across both: 80 s with jitter in [40, 80].
        assert!(backoff.failed("a") >= Duration::from_secs(40));
        clone.succeeded("a");
        assert!(backoff.failed("a") <= base);
    }
}
