//! The observability files (deploy/observability: the Grafana dashboard and the Prometheus
//! rules, also in the chart) name only metrics `ingot run` serves: every metric name in the
//! dashboard's PromQL and the rules' `expr` is looked up in a real scrape of /metrics, with
//! every controller running against the real control plane. The same run proves the BMC
//! metrics move: one Machine on an emulated Redfish BMC, one on a port where nothing listens;
//! and that every part's controllers (pools, gardener, rufio, seeder) export the same reconcile
//! series.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod rufio_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions};
use kube::Api;
use kube::api::DeleteParams;
use rufio_support::*;
use serde_json::{Value, json};

const DASHBOARD: &str = "deploy/observability/grafana-dashboard.json";
const RULES: &str = "deploy/observability/prometheus-rules.yaml";
const CHART_RULES: &str = "deploy/helm/ingot/files/prometheus-rules.yaml";

fn repo_file(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// PromQL words that are not metric names: aggregations, operators, modifiers.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
];

/// Keywords followed by a list of label names in parentheses.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: identifiers outside label matchers (`{...}`),
/// ranges (`[...]`), strings and label lists (`by (...)`), that are neither functions (followed
/// by `(`) nor keywords, nor numbers, durations or Grafana variables.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Skips from an opening character to its closing one (no nesting needed for {}, []).
    let skip_to = |i: usize, close: char| -> usize {
        let mut j = i + 1;
        let mut quote: Option<char> = None;
        while j < chars.len() {
            let c = chars[j];
            match quote {
                Some(_) if c == '\\' => j += 1,
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
                None if c == close => return j + 1,
                None => {}
            }
            j += 1;
        }
        j
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != c {
                    if chars[j] == '\\' {
                        j += 1;
                    }
                    j += 1;
                }
                i = j + 1;
            }
            '{' => i = skip_to(i, '}'),
            '[' => i = skip_to(i, ']'),
            '$' => {
                i += 1;
                while i < chars.len() && (is_ident(chars[i]) || chars[i] == '{' || chars[i] == '}')
                {
                    i += 1;
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number or a duration (5m, 1e3, 0.9).
                while i < chars.len() && (is_ident(chars[i]) || chars[i] == '.') {
                    i += 1;
                }
            }
            c if is_ident(c) => {
                let start = i;
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let called = chars.get(next) == Some(&'(');
                if LABEL_LISTS.contains(&word.to_ascii_lowercase().as_str()) {
                    if called {
                        i = skip_to(next, ')');
                    }
                } else if !called && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// The families of a scrape (OpenMetrics text): name -> type, from the `# TYPE` lines, which
/// are there for every registered family, sampled or not.
fn families(scrape: &str) -> BTreeMap<String, String> {
    scrape
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("# TYPE ")?.split_whitespace();
            Some((words.next()?.to_owned(), words.next()?.to_owned()))
        })
        .collect()
}

/// Whether a metric name in PromQL selects samples of a served family: a gauge by its name, a
/// counter by `<name>_total`, a histogram by `<name>_bucket`, `_sum` or `_count`.
fn served(name: &str, families: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(kind) = families.get(name) {
        return match kind.as_str() {
            "counter" | "histogram" | "summary" => Err(format!(
                "{name} is a {kind}: its samples are {name}_total, _bucket, _sum or _count"
            )),
            _ => Ok(()),
        };
    }
    let suffixes: [(&str, &[&str]); 4] = [
        ("_total", &["counter"]),
        ("_bucket", &["histogram"]),
        ("_sum", &["histogram", "summary"]),
        ("_count", &["histogram", "summary"]),
    ];
    for (suffix, kinds) in suffixes {
        if let Some(base) = name.strip_suffix(suffix)
            && let Some(kind) = families.get(base)
        {
            return if kinds.contains(&kind.as_str()) {
                Ok(())
            } else {
                Err(format!("{name}: {base} is a {kind}, which has no {suffix}"))
            };
        }
    }
    Err(format!("{name} is not served at /metrics"))
}

/// Every PromQL expression of the dashboard (each `expr` of its panels' targets) and of the
/// rules (each `expr`), with where it is.
fn expressions() -> Vec<(String, String)> {
    fn walk(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                let title = map
                    .get("title")
                    .and_then(Value::as_str)
                    .map_or(at.to_owned(), |t| format!("{at} / {t}"));
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("expr", Value::String(e)) => out.push((title.clone(), e.clone())),
                        _ => walk(v, &title, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, at, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    let dashboard: Value = serde_json::from_str(&repo_file(DASHBOARD)).unwrap();
    walk(&dashboard, DASHBOARD, &mut out);
    let dashboard_exprs = out.len();
    let rules: serde_yaml::Value = serde_yaml::from_str(&repo_file(RULES)).unwrap();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"]
                .as_str()
                .or(rule["record"].as_str())
                .unwrap_or("?");
            let expr = rule["expr"].as_str().expect("every rule has an expr");
            out.push((format!("{RULES} / {name}"), expr.to_owned()));
        }
    }
    assert!(
        dashboard_exprs >= 10 && out.len() > dashboard_exprs + 5,
        "the files were read: {out:?}"
    );
    out
}

#[test]
fn metric_names_are_taken_from_promql() {
    let cases: [(&str, &[&str]); 9] = [
        ("ingot_leader", &["ingot_leader"]),
        (
            r#"sum by (reason) (rate(ingot_pool_replacements_blocked_total{reason!="x", a=~"b|c"}[10m])) > 0"#,
            &["ingot_pool_replacements_blocked_total"],
        ),
        (
            "histogram_quantile(0.9, sum by (le, operation) (rate(ingot_metal_request_duration_seconds_bucket[$__rate_interval])))",
            &["ingot_metal_request_duration_seconds_bucket"],
        ),
        (
            "max(ingot_bmc_fleet_in_flight) / max(ingot_bmc_fleet_limit) >= 0.9",
            &["ingot_bmc_fleet_in_flight", "ingot_bmc_fleet_limit"],
        ),
        (
            "sum(rate(a_total[5m] offset 1h)) by (job) / on(job) group_left(team) b unless c",
            &["a_total", "b", "c"],
        ),
        (
            r#"up{job="ingot"} == bool 1 and absent(nothing_here)"#,
            &["nothing_here", "up"],
        ),
        ("1e3 * x:recorded:rate5m", &["x:recorded:rate5m"]),
        (r#"label_replace(m, "dst", "$1", "src", "(.*)")"#, &["m"]),
        ("sum without (pod) (ingot_pools)", &["ingot_pools"]),
    ];
    for (expr, want) in cases {
        let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(metric_names(expr), want, "{expr}");
    }
}

#[test]
fn names_map_to_families_by_type() {
    let scrape = "# HELP ingot_leader 1 while leading.\n# TYPE ingot_leader gauge\ningot_leader 1\n\
                  # TYPE ingot_drains counter\n\
                  # TYPE ingot_metal_request_duration_seconds histogram\n# EOF\n";
    let f = families(scrape);
    assert_eq!(f.len(), 3);
    for ok in [
        "ingot_leader",
        "ingot_drains_total",
        "ingot_metal_request_duration_seconds_bucket",
        "ingot_metal_request_duration_seconds_count",
        "ingot_metal_request_duration_seconds_sum",
    ] {
        assert_eq!(served(ok, &f), Ok(()), "{ok}");
    }
    for missing in [
        "ingot_drains",
        "ingot_leader_total",
        "ingot_drains_bucket",
        "ingot_metal_request_duration_seconds",
        "ingot_nothing_total",
        "ingot_nothing",
    ] {
        assert!(served(missing, &f).is_err(), "{missing}");
    }
    assert!(
        served("ingot_nothing_total", &f)
            .unwrap_err()
            .contains("ingot_nothing_total is not served")
    );
}

#[test]
fn the_chart_carries_the_same_rules() {
    assert!(
        repo_file(CHART_RULES) == repo_file(RULES),
        "{CHART_RULES} differs from {RULES}: run scripts/render-manifests.sh"
    );
    // Off by default; on, a PrometheusRule with exactly the file's groups.
    let off = chart_support::render("ingot", "ingot-system", &[], &[]);
    assert!(!off.contains("kind: PrometheusRule"), "{off}");
    let on = chart_support::render(
        "ingot",
        "ingot-system",
        &["prometheusRule.enabled=true".to_owned()],
        &["--show-only", "templates/prometheusrule.yaml"],
    );
    let rendered: serde_yaml::Value = serde_yaml::from_str(&on).unwrap();
    assert_eq!(rendered["kind"].as_str(), Some("PrometheusRule"), "{on}");
    let file: serde_yaml::Value = serde_yaml::from_str(&repo_file(RULES)).unwrap();
    assert_eq!(rendered["spec"]["groups"], file["groups"], "{on}");
}

async fn scrape(http: &reqwest::Client, port: u16) -> Option<String> {
    let resp = http
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .ok()?;
    resp.status().is_success().then_some(())?;
    resp.text().await.ok()
}

/// Series (name with labels) -> value.
fn samples(scrape: &str) -> BTreeMap<String, f64> {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

// `ingot run` with every controller, one behaviour per test, over one fixture (`Observed`): one
// healthy Redfish BMC, a Machine whose BMC port has nothing behind it, a Gardener Machine
// without its class; the tests read its /metrics, in this order (`ingot_testenv::scenario!`).
ingot_testenv::scenario!(mod observed: Observed {
    unreachable_bmc_calls_are_counted,
    every_metric_the_dashboard_and_the_alerts_name_is_served,
    bmc_calls_are_counted_by_protocol_operation_and_outcome,
    the_replica_that_took_the_lease_once_says_so,
    every_part_exports_the_same_reconcile_series,
});

/// The BMCs and Machines, `ingot run` with every controller on one Lease, and the scrape taken
/// once the failed BMC calls were counted.
struct Observed {
    client: kube::Client,
    ns: String,
    _fleet: Fleet,
    ingot: ingot_testenv::Operator,
    port: u16,
    http: reqwest::Client,
    /// /metrics once the failed BMC calls were counted.
    text: String,
    pool_name: String,
}

impl Observed {
    async fn start() -> Self {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let ns = env.namespace("observability").await.unwrap();

        // One healthy Redfish BMC, and a Machine whose BMC port has nothing behind it.
        let spec = BmcSpec {
            username: "admin".into(),
            password: "t0p-Secret".into(),
            ..BmcSpec::default()
        };
        let fleet = Fleet::uniform(
            FleetOptions {
                tls: true,
                ..FleetOptions::default()
            },
            1,
            spec,
        )
        .await
        .unwrap();
        create_secret(&client, &ns, "bmc-auth", "admin", "t0p-Secret").await;
        let good = machine_sample(
            &ns,
            "good",
            "bmc-auth",
            "127.0.0.1",
            json!({"redfish": {"port": fleet.bmcs[0].addr.port()}}),
        );
        create(&client, &ns, &good).await;
        let refused = machine_sample(
            &ns,
            "refused",
            "bmc-auth",
            "127.0.0.1",
            json!({"redfish": {"port": closed_port()}}),
        );
        create(&client, &ns, &refused).await;

        // Seeder's embedded mode keeps its local Cluster in harvester-system, as Harvester does.
        let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
        let harvester_system =
            serde_json::from_value(json!({"metadata": {"name": "harvester-system"}})).unwrap();
        let _ = namespaces
            .create(&kube::api::PostParams::default(), &harvester_system)
            .await;

        let ingot = ingot_testenv::Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .tag("observability")
            .kubeconfig(env.kubeconfig_path())
            .arg(format!("--lease-namespace={ns}"))
            .arg("--lease-name=ingot-observability")
            .arg("--lease-duration-seconds=3")
            .controllers("pools,rufio,seeder,gardener")
            .arg(format!("--rufio-namespace={ns}"))
            .arg(format!("--seeder-namespace={ns}"))
            .arg(format!("--namespace={ns}"))
            .arg("--rufio-machine-interval-seconds=2")
            .arg("--rufio-redfish-timeout-seconds=3")
            .env("NAMESPACE", &ns)
            .start();
        let port = ingot.http_addr().await.port();

        // A Gardener Machine whose MachineClass does not exist: the machine controller looks at it
        // (and leaves it, as upstream does) without any Equinix Metal call.
        let gardener_machine: ingot_api::gardener::Machine = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": "no-class", "namespace": ns},
            "spec": {"class": {"kind": "MachineClass", "name": "absent"}},
        }))
        .unwrap();
        create(&client, &ns, &gardener_machine).await;
        let http = reqwest::Client::new();
        Observed {
            client,
            ns: ns.clone(),
            _fleet: fleet,
            ingot,
            port,
            http,
            text: String::new(),
            pool_name: format!("{ns}-pool"),
        }
    }

    async fn finish(self) {
        let (client, ns, pools) = (
            &self.client,
            &self.ns,
            Api::<ingot_api::equinix::InstancePool>::all(self.client.clone()),
        );
        let pool_name = &self.pool_name;
        let _ = pools.delete(pool_name, &DeleteParams::default()).await;
        let _ = Api::<ingot_api::seeder::Inventory>::namespaced(client.clone(), ns)
            .delete_collection(&DeleteParams::default(), &Default::default())
            .await;
        let _ = Api::<ingot_api::gardener::Machine>::namespaced(client.clone(), ns)
            .delete_collection(&DeleteParams::default(), &Default::default())
            .await;

        delete_all(client, ns).await;
        drop(self.ingot);
    }

    /// The healthy Machine is contactable, and the calls to the closed port are counted as
    /// unreachable (or timed out).
    async fn unreachable_bmc_calls_are_counted(&mut self) {
        let (client, ns, http, port) = (&self.client, &self.ns, &self.http, self.port);
        wait_contactable(client, ns, "good", "on", Duration::from_secs(60)).await;
        let bmc_failed = |s: &BTreeMap<String, f64>| {
            s.iter().any(|(series, v)| {
                series.starts_with("ingot_bmc_requests_total{")
                    && (series.contains("outcome=\"unreachable\"")
                        || series.contains("outcome=\"timeout\""))
                    && *v > 0.0
            })
        };
        let text = wait_for(
            "the failed BMC calls to be counted",
            Duration::from_secs(60),
            || async {
                let text = scrape(http, port).await?;
                bmc_failed(&samples(&text)).then_some(text)
            },
        )
        .await;
        self.text = text;
    }

    /// Every metric the Grafana dashboard and the Prometheus alerts name is served.
    async fn every_metric_the_dashboard_and_the_alerts_name_is_served(&mut self) {
        let (text, ingot) = (&self.text, &self.ingot);
        let expressions = expressions();
        let served_families = families(text);

        let mut missing = Vec::new();
        for (at, expr) in &expressions {
            for name in metric_names(expr) {
                if let Err(problem) = served(&name, &served_families) {
                    missing.push(format!("{at}: {problem}\n    in {expr}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "the observability files name metrics /metrics does not serve:\n{}\n\nserved families: {:?}\n{}",
            missing.join("\n"),
            served_families.keys().collect::<Vec<_>>(),
            ingot.log_tail()
        );
    }

    /// The BMC metrics moved: calls by protocol, operation and outcome, their duration, the
    /// session open, the fleet limit.
    async fn bmc_calls_are_counted_by_protocol_operation_and_outcome(&mut self) {
        let text = &self.text;
        let values = samples(text);
        let value = |series: &str| values.get(series).copied().unwrap_or_default();
        assert!(
            value(
                r#"ingot_bmc_requests_total{protocol="redfish",operation="power_state",outcome="ok"}"#
            ) >= 1.0,
            "{text}"
        );
        assert!(
            value(
                r#"ingot_bmc_request_duration_seconds_count{protocol="redfish",operation="power_state"}"#
            ) >= 1.0,
            "{text}"
        );
        assert!(
            value(r#"ingot_bmc_sessions_open{protocol="redfish"}"#) >= 1.0,
            "{text}"
        );
        assert_eq!(value("ingot_bmc_fleet_limit"), 256.0, "{text}");
    }

    /// This replica took the lease once and leads.
    async fn the_replica_that_took_the_lease_once_says_so(&mut self) {
        let text = &self.text;
        let values = samples(text);
        let value = |series: &str| values.get(series).copied().unwrap_or_default();
        assert_eq!(
            value(r#"ingot_leader_transitions_total{transition="acquired"}"#),
            1.0,
            "{text}"
        );
        assert_eq!(value("ingot_leader"), 1.0, "{text}");
    }

    /// Every controller runs on the one runtime, so each part exports the same reconcile series:
    /// a pool (count 0), an Inventory, the Machines above and the Gardener Machine are enough
    /// for each part's controller to reconcile once.
    async fn every_part_exports_the_same_reconcile_series(&mut self) {
        let (client, ns, http, port, ingot) =
            (&self.client, &self.ns, &self.http, self.port, &self.ingot);
        let pool_name = &self.pool_name;
        let pool: ingot_api::equinix::InstancePool = serde_json::from_value(json!({
            "apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
            "metadata": {"name": pool_name}, "spec": {"count": 0},
        }))
        .unwrap();
        let pools = Api::<ingot_api::equinix::InstancePool>::all(client.clone());
        pools
            .create(&kube::api::PostParams::default(), &pool)
            .await
            .unwrap();
        let inventory: ingot_api::seeder::Inventory = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "observed", "namespace": ns},
            "spec": {
                "primaryDisk": "/dev/sda",
                "managementInterfaceMacAddress": "aa:bb:cc:00:00:01",
                "events": {"enabled": false},
                "baseboardSpec": {"connection": {"host": "127.0.0.1", "port": 623, "insecureTLS": true,
                    "authSecretRef": {"name": "bmc-auth", "namespace": ns}}},
            },
        }))
        .unwrap();
        create(client, ns, &inventory).await;
        let parts = [
            "instancepool",
            "gardener-machine",
            "rufio-machine",
            "seeder-inventory",
        ];
        let unreconciled = |s: &BTreeMap<String, f64>| -> Vec<&str> {
            let value = |series: String| s.get(&series).copied().unwrap_or_default();
            parts
                .iter()
                .copied()
                .filter(|c| {
                    value(format!(
                        r#"ingot_reconciliations_total{{controller="{c}"}}"#
                    )) < 1.0
                        || value(format!(
                            r#"ingot_reconcile_duration_seconds_count{{controller="{c}"}}"#
                        )) < 1.0
                })
                .collect()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let text = scrape(http, port).await.unwrap_or_default();
            let missing = unreconciled(&samples(&text));
            if missing.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no reconcile series for {missing:?} within 60 s:\n{text}\n{}",
                ingot.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
