//! Least privilege, proven on the API server: every verb on every resource the chart grants was
//! needed by ingot during the end-to-end tests, and nothing ingot asked for was refused.
//!
//! The end-to-end tests run `ingot run` with tokens of the chart's ServiceAccount, and the shared
//! control plane audits every ServiceAccount request with the authorizer's reason (which Role or
//! ClusterRole allowed it). A grant no request used is a permission that can be removed without
//! breaking anything the tests exercise: the check fails and names it.
//!
//! A test that needs a control plane of its own (crates/ingot/tests/fencing_e2e.rs: the node
//! lifecycle controller of kube-controller-manager) leaves its audit log beside the shared one.
//!
//! It reads what the whole suite did, so `scripts/test.sh` runs it after `cargo test --workspace`
//! (`cargo test -p ingot --test rbac_coverage -- --ignored`); the unit tests below run always.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

/// One permission of the chart: a verb on a resource of an API group, in one of its roles.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    /// The role's name without the release's name: `-pools`, `-leader-election`, ...
    role: String,
    api_group: String,
    /// `resource` or `resource/subresource`.
    resource: String,
    verb: String,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.api_group.is_empty() {
            "core"
        } else {
            &self.api_group
        };
        write!(
            f,
            "role *{}: {} {} ({group})",
            self.role, self.verb, self.resource
        )
    }
}

/// The grants of every Role and ClusterRole in rendered manifests, their names stripped of the
/// release name.
fn grants(rendered: &str, release: &str) -> BTreeSet<Grant> {
    let mut grants = BTreeSet::new();
    for document in rendered.split("\n---") {
        let value: serde_yaml::Value = serde_yaml::from_str(document).unwrap();
        let kind = value["kind"].as_str().unwrap_or_default();
        if kind != "Role" && kind != "ClusterRole" {
            continue;
        }
        let name = value["metadata"]["name"].as_str().unwrap();
        let role = name
            .strip_prefix(release)
            .unwrap_or_else(|| panic!("{kind} {name} is not named after the release {release}"));
        let strings = |rule: &serde_yaml::Value, key: &str| -> Vec<String> {
            rule[key]
                .as_sequence()
                .map(|items| {
                    items
                        .iter()
                        .map(|item| item.as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        for rule in value["rules"].as_sequence().unwrap() {
            for api_group in strings(rule, "apiGroups") {
                for resource in strings(rule, "resources") {
                    for verb in strings(rule, "verbs") {
                        assert!(
                            verb != "*" && resource != "*" && api_group != "*",
                            "{kind} {name} grants a wildcard"
                        );
                        grants.insert(Grant {
                            role: role.to_owned(),
                            api_group: api_group.clone(),
                            resource: resource.clone(),
                            verb,
                        });
                    }
                }
            }
        }
    }
    grants
}

/// What one audited request used, or why it was refused.
#[derive(Debug, PartialEq, Eq)]
enum Audited {
    Allowed(Grant),
    Refused { user: String, request: String },
}

/// Reads one audit event of a ServiceAccount named after a release (`ingot-…`), or `None` for
/// every other event.
fn audited(line: &str) -> Option<Audited> {
    let event: Value = serde_json::from_str(line).ok()?;
    let user = event["user"]["username"].as_str()?;
    let account = user
        .strip_prefix("system:serviceaccount:")?
        .split(':')
        .nth(1)?;
    if !account.starts_with("ingot") {
        return None;
    }
    let object = &event["objectRef"];
    let resource = object["resource"].as_str()?;
    let resource = match object["subresource"].as_str() {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_owned(),
    };
    let api_group = object["apiGroup"].as_str().unwrap_or_default().to_owned();
    let verb = event["verb"].as_str()?.to_owned();
    let annotations = &event["annotations"];
    if annotations["authorization.k8s.io/decision"].as_str() != Some("allow") {
        return Some(Audited::Refused {
            user: user.to_owned(),
            request: format!(
                "{verb} {resource} ({}) in {:?}",
                if api_group.is_empty() {
                    "core"
                } else {
                    &api_group
                },
                object["namespace"].as_str().unwrap_or("(cluster)")
            ),
        });
    }
    // `RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "ingot-ns-pools" to ServiceAccount ...`
    let reason = annotations["authorization.k8s.io/reason"].as_str()?;
    let (_, after) = reason
        .split_once(" of ClusterRole \"")
        .or_else(|| reason.split_once(" of Role \""))?;
    let role_name = after.split('"').next()?;
    let role = role_name.strip_prefix(account)?.to_owned();
    Some(Audited::Allowed(Grant {
        role,
        api_group,
        resource,
        verb,
    }))
}

/// The shared control plane's audit log, and those the tests that need a control plane of their
/// own (kube-controller-manager with other controllers) left beside it
/// ([`ingot_testenv::keep_audit_log`]).
fn audit_logs() -> Vec<PathBuf> {
    let kubeconfig = std::env::var("INGOT_TESTENV_KUBECONFIG").expect(
        "INGOT_TESTENV_KUBECONFIG: the shared control plane of the run (scripts/test.sh sets it)",
    );
    let dir = PathBuf::from(kubeconfig).parent().unwrap().to_owned();
    let mut logs = vec![dir.join(ingot_testenv::AUDIT_LOG)];
    let mut kept: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(ingot_testenv::KEPT_AUDIT_LOG_PREFIX))
        })
        .collect();
    kept.sort();
    logs.extend(kept);
    logs
}

#[test]
#[ignore = "reads the audit log of the whole run: scripts/test.sh runs it after the suite"]
fn every_permission_of_the_chart_was_needed_and_none_was_missing() {
    let release = "ingot-coverage";
    let rendered = chart_support::render(
        release,
        "coverage",
        &[
            "controllers={pools,rufio,seeder,provisioning,gardener,fencing}".to_owned(),
            // Tinkerbell mode's grants too (crates/ingot/tests/provisioning_tinkerbell.rs).
            "provisioning.tinkerbell=true".to_owned(),
            // The ClusterRole for medik8s NodeHealthCheck (crates/ingot/tests/nhc_remediation.rs
            // makes NHC's requests with it, as an account named after the release).
            "fencing.nodeHealthCheck.aggregateRole=true".to_owned(),
        ],
        &["--show-only", "templates/rbac.yaml"],
    );
    let granted = grants(&rendered, release);
    assert!(granted.len() > 20, "the chart grants {}", granted.len());

    let logs: Vec<String> = audit_logs()
        .iter()
        .map(|path| {
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect();
    let mut used = BTreeSet::new();
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    for line in logs.iter().flat_map(|log| log.lines()) {
        match audited(line) {
            Some(Audited::Allowed(grant)) => {
                used.insert(grant);
            }
            Some(Audited::Refused { user, request }) => {
                *refused.entry(format!("{user}: {request}")).or_default() += 1;
            }
            None => {}
        }
    }
    let unused: Vec<String> = granted.difference(&used).map(ToString::to_string).collect();
    let mut problems = Vec::new();
    if !refused.is_empty() {
        problems.push(format!(
            "the API server refused ingot requests the chart should allow:\n{refused:#?}"
        ));
    }
    if !unused.is_empty() {
        problems.push(format!(
            "the chart grants permissions no end-to-end test needed (remove them from \
             deploy/helm/ingot/templates/rbac.yaml, or test what needs them):\n  {}",
            unused.join("\n  ")
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    println!(
        "{} grants of the chart, each used by ingot as its ServiceAccount",
        granted.len()
    );
}

#[test]
fn a_role_is_read_grant_by_grant_without_the_release_name() {
    let rendered = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ingot-x-pools}
rules:
  - apiGroups: [\"\", apps]
    resources: [nodes]
    verbs: [get, patch]
---
kind: RoleBinding
metadata: {name: ingot-x-pools}
";
    let found = grants(rendered, "ingot-x");
    let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "role *-pools: get nodes (core)",
            "role *-pools: patch nodes (core)",
            "role *-pools: get nodes (apps)",
            "role *-pools: patch nodes (apps)",
        ]
    );
}

#[test]
fn an_allowed_request_names_the_role_and_a_refused_one_is_reported() {
    let allowed = r#"{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"patch",
        "user":{"username":"system:serviceaccount:ns1:ingot-ns1"},
        "objectRef":{"resource":"instances","subresource":"status","namespace":"ns1","apiGroup":"equinix.harvesterhci.io"},
        "annotations":{"authorization.k8s.io/decision":"allow",
        "authorization.k8s.io/reason":"RBAC: allowed by ClusterRoleBinding \"ingot-ns1-pools\" of ClusterRole \"ingot-ns1-pools\" to ServiceAccount \"ingot-ns1/ns1\""}}"#
        .replace('\n', "");
    assert_eq!(
        audited(&allowed),
        Some(Audited::Allowed(Grant {
            role: "-pools".into(),
            api_group: "equinix.harvesterhci.io".into(),
            resource: "instances/status".into(),
            verb: "patch".into(),
        }))
    );
    let in_namespace = allowed
        .replace(
            "of ClusterRole \\\"ingot-ns1-pools",
            "of Role \\\"ingot-ns1-pools-secrets",
        )
        .replace("\"instances\",\"subresource\":\"status\"", "\"secrets\"")
        .replace(
            "\"apiGroup\":\"equinix.harvesterhci.io\"",
            "\"apiGroup\":\"\"",
        );
    assert_eq!(
        audited(&in_namespace),
        Some(Audited::Allowed(Grant {
            role: "-pools-secrets".into(),
            api_group: String::new(),
            resource: "secrets".into(),
            verb: "patch".into(),
        }))
    );
    let refused = allowed.replace("\"allow\"", "\"forbid\"");
    assert!(matches!(
        audited(&refused),
        Some(Audited::Refused { request, .. }) if request == "patch instances/status (equinix.harvesterhci.io) in \"ns1\""
    ));
    let someone_else = allowed.replace("ns1:ingot-ns1", "kube-system:replicaset-controller");
    assert_eq!(audited(&someone_else), None);
}
