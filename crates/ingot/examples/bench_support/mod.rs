//! What the benchmarks of this directory share: free ports, the operator's metrics read and
//! summed, the emulated BMCs' request counters, and a bounded wait. Included by each
//! (`#[path = "bench_support/mod.rs"] mod bench_support;`), not an example itself.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ingot_bmc_sim::Fleet;
use serde_json::Value;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

pub fn inventory_name(i: usize) -> String {
    format!("node-{i:03}")
}

/// The operator's metrics text.
pub async fn metrics(http_port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{http_port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

pub fn label(line: &str, name: &str) -> Option<String> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let len = line[start..].find('"')?;
    Some(line[start..start + len].to_string())
}

/// The samples of `metric`, summed by what `key` makes of each line (`None`: left out).
pub fn sum_by(
    text: &str,
    metric: &str,
    key: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, f64> {
    let mut sums = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
    {
        let (Some(k), Some(value)) = (
            key(line),
            line.rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok()),
        ) else {
            continue;
        };
        *sums.entry(k).or_insert(0.0) += value;
    }
    sums
}

/// The operator's counters: write requests to the API server by `verb resource` (its own
/// `ingot_kube_requests_total`), reconciles and their seconds by controller.
pub struct Counters {
    pub writes: BTreeMap<String, f64>,
    pub reconciles: BTreeMap<String, f64>,
    pub reconcile_seconds: BTreeMap<String, f64>,
}

impl Counters {
    pub async fn read(http_port: u16) -> Self {
        let text = metrics(http_port).await;
        let writes = sum_by(&text, "ingot_kube_requests_total", |line| {
            let verb = label(line, "verb")?;
            ["create", "update", "patch", "delete"]
                .contains(&verb.as_str())
                .then(|| format!("{verb} {}", label(line, "resource").unwrap_or_default()))
        });
        let controller = |line: &str| label(line, "controller");
        Counters {
            writes,
            reconciles: sum_by(&text, "ingot_reconciliations_total", controller),
            reconcile_seconds: sum_by(&text, "ingot_reconcile_duration_seconds_sum", controller),
        }
    }

    /// What was counted since `before`.
    pub fn since(mut self, before: &Counters) -> Self {
        let minus = |now: &mut BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            for (k, v) in now.iter_mut() {
                *v -= then.get(k).copied().unwrap_or(0.0);
            }
            now.retain(|_, v| *v > 0.0);
        };
        minus(&mut self.writes, &before.writes);
        minus(&mut self.reconciles, &before.reconciles);
        minus(&mut self.reconcile_seconds, &before.reconcile_seconds);
        self
    }
}

pub fn bmc_requests(fleet: &Fleet) -> u64 {
    fleet
        .bmcs
        .iter()
        .map(|b| {
            b.state
                .counters
                .requests
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum()
}

/// Polls until `done` says so, or gives up after `limit`.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
