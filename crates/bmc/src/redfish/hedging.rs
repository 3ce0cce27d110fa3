//! Hedged reads ("The Tail at Scale"): answer times per BMC and over the fleet, the budget of
//! copies, and the read that sends copies while no answer came.

use super::RedfishClient;
use super::sessions::Auth;
use super::transport::{Response, acquire};
use crate::error::BmcError;
use reqwest::Method;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters shared by clients (the session manager sums them over the fleet).
#[derive(Debug, Default)]
pub struct RedfishStats {
    pub sessions_opened: AtomicU64,
    pub sessions_closed: AtomicU64,
    pub relogins: AtomicU64,
    pub requests: AtomicU64,
    /// Second requests sent for reads that had no answer yet.
    pub hedged: AtomicU64,
    /// Answer times over the clients sharing these counters (the hedge delay of a BMC not
    /// heard from yet).
    pub answers: AnswerTime,
}

impl RedfishStats {
    /// Whether one more hedged copy stays within the budget: ten copies, and beyond them one
    /// in twenty of the requests sent. When a whole fleet slows down at once (the operator's
    /// own machine saturated), copies would add load where it hurts; past the budget a read
    /// waits for its answer or its timeout.
    pub(super) fn copy_allowed(&self) -> bool {
        let copies = self.hedged.load(Ordering::Relaxed);
        let requests = self.requests.load(Ordering::Relaxed);
        copies < 10 || copies.saturating_add(1).saturating_mul(20) <= requests
    }
}

/// Smoothed answer time and its mean deviation, in microseconds, as TCP estimates a round
/// trip (RFC 6298: 1/8 and 1/4 weights). A read is hedged once it has waited longer than the
/// smoothed time plus four deviations: BMCs that answer steadily are hedged soon after their
/// usual time, erratic ones only well beyond their spread.
#[derive(Debug, Default)]
pub struct AnswerTime {
    smoothed_us: AtomicU64,
    deviation_us: AtomicU64,
}

impl AnswerTime {
    /// Folds in one answer time. (The two values are updated one after the other; a racing
    /// update costs only some precision.)
    pub(super) fn fold(&self, took_us: u64) {
        let took_us = took_us.max(1);
        let smoothed = self.smoothed_us.load(Ordering::Relaxed);
        if smoothed == 0 {
            self.smoothed_us.store(took_us, Ordering::Relaxed);
            self.deviation_us.store(took_us / 2, Ordering::Relaxed);
            return;
        }
        let deviation = self.deviation_us.load(Ordering::Relaxed);
        let error = smoothed.abs_diff(took_us);
        self.deviation_us
            .store((deviation * 3 + error) / 4, Ordering::Relaxed);
        self.smoothed_us
            .store(((smoothed * 7 + took_us) / 8).max(1), Ordering::Relaxed);
    }

    /// How long a read waits before its copy goes: the smoothed time plus four deviations,
    /// and at least twice the smoothed time (scheduling jitter on a steady BMC sends no
    /// copies); `None` before any answer.
    pub(super) fn hedge_after(&self) -> Option<Duration> {
        let smoothed = self.smoothed_us.load(Ordering::Relaxed);
        if smoothed == 0 {
            return None;
        }
        let margin = (self.deviation_us.load(Ordering::Relaxed) * 4).max(smoothed);
        Some(Duration::from_micros(smoothed.saturating_add(margin)))
    }
}

impl RedfishClient {
    /// One request; a GET is hedged and, if it still times out, tried once more.
    pub(super) async fn send_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        if method != Method::GET {
            return self.send_once(method, path, body, auth, headers).await;
        }
        self.send_idempotent(method, path, auth, headers).await
    }

    /// A request without body that may be sent more than once (GET, the DELETE of our own
    /// session): hedged.
    pub(super) async fn send_idempotent(
        &self,
        method: Method,
        path: &str,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        if self.options.hedge_after.is_none() {
            return self.send_once(method, path, None, auth, headers).await;
        }
        self.send_hedged(method, path, auth, headers).await
    }

    /// Sends the request; while no answer came, a copy follows after the hedge delay, another
    /// after twice that and a last one after three times (the delay is at most half the
    /// timeout). The first answer wins. When every request out has timed out, the next copy
    /// goes at once instead of at its time; any other error, or a timeout with no copy left,
    /// is returned. With 1% of requests lost, three copies fail a read once in 10^8 (two did
    /// once in 10^6: a BMC failed in about one 10,000-BMC sweep of twenty).
    async fn send_hedged(
        &self,
        method: Method,
        path: &str,
        auth: &Auth,
        headers: &[(&'static str, String)],
    ) -> Result<Response, BmcError> {
        // The read and its three copies.
        const ATTEMPTS: u32 = 4;
        let delay = self.hedge_delay();
        // One fleet permit covers the read and its copies: a copy goes out because its read
        // is already late, and must not queue behind every other BMC's requests (with 1% of
        // requests lost, copies waiting for permits of their own kept their lost originals'
        // permits for the whole timeout and cost a 10,000-BMC sweep a fifth of its time).
        // The hedge clock starts once the first request is out, not while it waits.
        let _permit = acquire(&self.gate).await?;
        let started = tokio::time::Instant::now();
        let copy = || self.send_permitted(None, true, method.clone(), path, None, auth, headers);
        let mut pending = futures::stream::FuturesUnordered::new();
        pending.push(self.send_permitted(None, false, method.clone(), path, None, auth, headers));
        let mut sent = 1;
        let mut last_error = None;
        loop {
            if pending.is_empty() {
                // Nothing is out: after a timeout the next copy goes now rather than at its
                // time (one due as the first request timed out must not be lost to it).
                let timed_out = matches!(last_error, Some(BmcError::Timeout(_)));
                if timed_out && sent < ATTEMPTS && self.stats.copy_allowed() {
                    sent += 1;
                    pending.push(copy());
                    continue;
                }
                return Err(last_error.unwrap_or(BmcError::Timeout(self.options.timeout)));
            }
            // Copies are due at fixed times from the first request, whatever happens between.
            let due = started + delay * sent;
            tokio::select! {
                r = futures::StreamExt::next(&mut pending) => match r {
                    Some(Ok(r)) => return Ok(r),
                    Some(Err(e)) => last_error = Some(e),
                    None => {}
                },
                () = tokio::time::sleep_until(due), if sent < ATTEMPTS => {
                    sent += 1;
                    if self.stats.copy_allowed() {
                        pending.push(copy());
                    }
                }
            }
        }
    }

    /// The BMC's smoothed answer time plus four deviations (else the fleet's), at least
    /// 20 ms, at most `hedge_after` and half the timeout.
    fn hedge_delay(&self) -> Duration {
        let cap = self
            .options
            .hedge_after
            .unwrap_or(self.options.timeout)
            .min(self.options.timeout / 2);
        match self
            .answers
            .hedge_after()
            .or_else(|| self.stats.answers.hedge_after())
        {
            Some(delay) => delay.clamp(Duration::from_millis(20).min(cap), cap),
            None => cap,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn copies_stay_within_ten_and_one_in_twenty_requests() {
        let stats = RedfishStats::default();
        stats.requests.store(12, Ordering::Relaxed);
        stats.hedged.store(9, Ordering::Relaxed);
        assert!(stats.copy_allowed());
        stats.hedged.store(10, Ordering::Relaxed);
        assert!(!stats.copy_allowed());
        stats.requests.store(219, Ordering::Relaxed);
        assert!(!stats.copy_allowed());
        stats.requests.store(220, Ordering::Relaxed);
        assert!(stats.copy_allowed());
    }

    #[test]
    fn a_steady_bmc_is_hedged_soon_after_its_usual_time_and_an_erratic_one_beyond_its_spread() {
        let steady = AnswerTime::default();
        assert_eq!(steady.hedge_after(), None);
        for _ in 0..40 {
            steady.fold(50_000);
        }
        let after = steady.hedge_after().unwrap();
        assert_eq!(after, Duration::from_millis(100));
        // Answers of 20 ms and 200 ms in turn: a copy only well beyond the slow ones.
        let erratic = AnswerTime::default();
        for i in 0..40 {
            erratic.fold(if i % 2 == 0 { 20_000 } else { 200_000 });
        }
        let after = erratic.hedge_after().unwrap();
        assert!(after > Duration::from_millis(400), "{after:?}");
    }
}
