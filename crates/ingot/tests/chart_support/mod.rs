//! The Helm chart in tests: rendered with the helm the test command builds (`INGOT_HELM`),
//! applied with the kubectl it builds (`INGOT_KUBECTL`), and the chart's ServiceAccount as the
//! identity `ingot run` uses, so that a permission the chart lacks fails the test that needs it.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/ingot")
}

pub fn helm() -> PathBuf {
    let dir = std::env::var("INGOT_HELM")
        .expect("INGOT_HELM: the directory of the helm built by tools/helm/build.sh (scripts/test.sh sets it)");
    Path::new(&dir).join("helm")
}

pub fn kubectl() -> String {
    std::env::var("INGOT_KUBECTL").expect(
        "INGOT_KUBECTL: the kubectl built by tools/k8s-testbin/build.sh kubectl (scripts/test.sh sets it)",
    )
}

/// Runs a command and returns its standard output; panics with its standard error.
pub fn run(command: &mut Command, stdin: Option<&str>) -> String {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{shown} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `helm template <release> <chart> --namespace <namespace>` with `--set` values.
pub fn render(release: &str, namespace: &str, sets: &[String], extra: &[&str]) -> String {
    let mut command = Command::new(helm());
    command
        .arg("template")
        .arg(release)
        .arg(chart_dir())
        .arg("--namespace")
        .arg(namespace);
    for set in sets {
        command.arg("--set").arg(set);
    }
    command.args(extra);
    run(&mut command, None)
}

pub fn kubectl_apply(kubeconfig: &Path, yaml: &str, extra: &[&str]) -> String {
    let mut command = Command::new(kubectl());
    command
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["apply", "-f", "-"])
        .args(extra);
    run(&mut command, Some(yaml))
}

/// Applies the chart's ServiceAccount and RBAC for these controllers (release namespace and
/// credentials namespace `namespace`) and returns a kubeconfig holding a token of that
/// ServiceAccount, issued by the API server (TokenRequest).
pub fn service_account_kubeconfig(admin: &Path, namespace: &str, controllers: &str) -> PathBuf {
    service_account_kubeconfig_with(admin, namespace, controllers, &[])
}

/// [`service_account_kubeconfig`] with more chart values (`--set`).
pub fn service_account_kubeconfig_with(
    admin: &Path,
    namespace: &str,
    controllers: &str,
    more: &[String],
) -> PathBuf {
    let release = format!("ingot-{namespace}");
    let mut sets = vec![
        format!("controllers={{{controllers}}}"),
        format!("pools.credentialsSecret.namespace={namespace}"),
        format!("gardener.namespace={namespace}"),
    ];
    sets.extend(more.iter().cloned());
    let identity = render(
        &release,
        namespace,
        &sets,
        &[
            "--show-only",
            "templates/serviceaccount.yaml",
            "--show-only",
            "templates/rbac.yaml",
        ],
    );
    kubectl_apply(admin, &identity, &[]);
    token_kubeconfig(admin, &release, namespace, &release)
}

/// A kubeconfig holding a token of the ServiceAccount `namespace/account`, issued by the API
/// server (TokenRequest), written as `<file>.kubeconfig` in the temporary directory.
pub fn token_kubeconfig(admin: &Path, account: &str, namespace: &str, file: &str) -> PathBuf {
    let token = run(
        Command::new(kubectl())
            .arg(format!("--kubeconfig={}", admin.display()))
            .args(["create", "token", account, "-n", namespace, "--duration=4h"]),
        None,
    );
    let admin_config = std::fs::read_to_string(admin).unwrap();
    let config: String = admin_config
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("token:") {
                format!("    token: {}", token.trim())
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(
        config, admin_config,
        "the admin kubeconfig holds a token to replace"
    );
    // Per process: test binaries run at once must not read each other's API server.
    let path = std::env::temp_dir().join(format!("{file}-{}.kubeconfig", std::process::id()));
    std::fs::write(&path, config + "\n").unwrap();
    path
}

/// The namespace the plain manifests install into.
pub const MANIFESTS_NAMESPACE: &str = "ingot-system";

/// Installs ingot as a user without Helm does (docs/install.md, the migration guides): creates
/// `ingot-system`, applies `deploy/manifests/<group>.yaml` as it is, and returns a kubeconfig
/// holding a token of its ServiceAccount `ingot-system/ingot`, the identity the manifests'
/// Deployment runs with.
pub fn install_from_manifests(admin: &Path, group: &str) -> PathBuf {
    let manifests =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../deploy/manifests/{group}.yaml"));
    let manifests = std::fs::read_to_string(&manifests)
        .unwrap_or_else(|e| panic!("{}: {e}", manifests.display()));
    // The namespaces the manifests name must exist: ingot's own and the credentials' one.
    let namespaces: String = [MANIFESTS_NAMESPACE, "harvester-system"]
        .iter()
        .map(|ns| format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\n"))
        .collect();
    kubectl_apply(admin, &namespaces, &[]);
    // One group at a time, as a user switching manifests: the bindings another group's
    // manifests left are removed, so that the ServiceAccount holds this group's RBAC only
    // (rbac_coverage attributes every request to the role that allowed it).
    run(
        Command::new(kubectl())
            .arg(format!("--kubeconfig={}", admin.display()))
            .args([
                "delete",
                "clusterrolebindings,rolebindings",
                "--all-namespaces",
                "-l",
                "app.kubernetes.io/instance=ingot",
                "--ignore-not-found",
            ]),
        None,
    );
    // Server-side with --force-conflicts, as the migration guides install: the CRDs may be
    // there already, with fields of another manager.
    kubectl_apply(
        admin,
        &manifests,
        &[
            "--server-side",
            "--force-conflicts",
            "--field-manager=ingot-install",
        ],
    );
    token_kubeconfig(
        admin,
        "ingot",
        MANIFESTS_NAMESPACE,
        &format!("ingot-manifests-{group}"),
    )
}
