//! A client-side rate limiter shared by every controller that talks to the API.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Spaces requests to at most `rate` per second with a burst of `burst`, and holds every
/// request while the API asked to wait (429 `Retry-After`, `X-RateLimit-Remaining: 0`).
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    burst: u32,
    state: Mutex<LimiterState>,
}

#[derive(Debug)]
struct LimiterState {
    /// Theoretical arrival time of the next request (GCRA).
    tat: Instant,
    paused_until: Option<Instant>,
}

impl RateLimiter {
    /// `rate` requests per second (at least a tiny positive rate), `burst` at once.
    pub fn new(rate_per_sec: f64, burst: u32) -> Self {
        let rate = if rate_per_sec.is_finite() && rate_per_sec > 0.0 {
            rate_per_sec
        } else {
            1e-3
        };
        RateLimiter {
            interval: Duration::from_secs_f64(1.0 / rate),
            burst: burst.max(1),
            state: Mutex::new(LimiterState {
                tat: Instant::now(),
                paused_until: None,
            }),
        }
    }

    /// No limit (still honours pauses asked by the API).
    pub fn unlimited() -> Self {
        RateLimiter {
            interval: Duration::ZERO,
            burst: 1,
            state: Mutex::new(LimiterState {
                tat: Instant::now(),
                paused_until: None,
            }),
        }
    }

    /// Reserves a slot and returns how long to wait for it.
    fn reserve(&self, now: Instant) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let window = self.interval * self.burst.saturating_sub(1);
        let mut start = now;
        if let Some(tat) = s.tat.checked_sub(window)
            && tat > start
        {
            start = tat;
        }
        if let Some(p) = s.paused_until {
            if p > start {
                start = p;
            } else if p <= now {
                s.paused_until = None;
            }
        }
        s.tat = s.tat.max(start) + self.interval;
        start.saturating_duration_since(now)
    }

    /// Waits for the right to send one request; returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        wait
    }

    /// Holds every request until `until` (the API said to come back then).
    pub fn pause_until(&self, until: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.paused_until.is_none_or(|p| p < until) {
            s.paused_until = Some(until);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_requests_after_the_burst() {
        let l = RateLimiter::new(10.0, 2);
        let now = Instant::now();
        assert_eq!(l.reserve(now), Duration::ZERO);
        assert_eq!(l.reserve(now), Duration::ZERO);
        let third = l.reserve(now);
        assert!(third >= Duration::from_millis(99), "{third:?}");
        let fourth = l.reserve(now);
        assert!(fourth >= Duration::from_millis(199), "{fourth:?}");
    }

    #[test]
    fn pause_holds_requests() {
        let l = RateLimiter::unlimited();
        let now = Instant::now();
        l.pause_until(now + Duration::from_secs(2));
        assert!(l.reserve(now) >= Duration::from_millis(1999));
        assert_eq!(l.reserve(now + Duration::from_secs(3)), Duration::ZERO);
    }
}
