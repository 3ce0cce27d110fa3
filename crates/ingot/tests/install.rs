//! Installing ingot: the Helm chart lints clean, the plain manifests are what the chart
//! renders, every rendering applies to the real API server (`--dry-run=server`), and the
//! Harvester Addon applies with Harvester's own Addon CRD. (The chart's RBAC is proven by the
//! pools and seeder end-to-end tests, which run `ingot run` as the chart's ServiceAccount.)

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::path::Path;
use std::process::Command;

use chart_support::{chart_dir, helm, kubectl, kubectl_apply, render, run};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;

const GROUPS: [&str; 4] = ["pools", "rufio", "seeder", "gardener"];

fn repo_file(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// What scripts/render-manifests.sh writes for one controller group.
fn rendered_manifest(group: &str) -> String {
    format!(
        "# ingot with --controllers {group}, rendered from deploy/helm/ingot by scripts/render-manifests.sh.\n\
         # Apply after creating the namespace: kubectl create namespace ingot-system\n{}",
        render(
            "ingot",
            "ingot-system",
            &[format!("controllers={{{group}}}")],
            &["--include-crds"],
        )
    )
}

async fn ensure_namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

/// The kubectl the tests run is the one built from the Kubernetes release the control plane is
/// built from (tools/k8s-testbin), not whatever kubectl the machine has.
#[test]
fn kubectl_is_built_from_the_control_planes_release() {
    let pinned = repo_file("tools/k8s-testbin/go.mod")
        .lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("k8s.io/kubernetes"), Some(version), _)
                | (Some("require"), Some("k8s.io/kubernetes"), Some(version)) => {
                    Some(version.to_owned())
                }
                _ => None,
            }
        })
        .expect("tools/k8s-testbin/go.mod requires k8s.io/kubernetes");
    let out = run(
        Command::new(chart_support::kubectl()).args(["version", "--client", "-o", "json"]),
        None,
    );
    let version: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        version["clientVersion"]["gitVersion"].as_str(),
        Some(pinned.as_str()),
        "{out}"
    );
}

#[test]
fn the_chart_lints_clean() {
    let out = run(
        Command::new(helm())
            .args(["lint", "--strict"])
            .arg(chart_dir()),
        None,
    );
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn the_plain_manifests_are_what_the_chart_renders() {
    for group in GROUPS {
        assert!(
            repo_file(&format!("deploy/manifests/{group}.yaml")) == rendered_manifest(group),
            "deploy/manifests/{group}.yaml differs from the chart: run scripts/render-manifests.sh"
        );
    }
}

#[test]
fn an_unknown_controller_is_refused_by_name() {
    let output = Command::new(helm())
        .arg("template")
        .arg("ingot")
        .arg(chart_dir())
        .args(["--set", "controllers={pools,seeders}"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "controllers: unknown [seeders]; choose among pools, rufio, seeder, gardener"
        ),
        "{stderr}"
    );
}

#[test]
fn the_pods_run_restricted() {
    let deployment = render(
        "ingot",
        "ingot-system",
        &[],
        &["--show-only", "templates/deployment.yaml"],
    );
    let deployment: serde_yaml::Value = serde_yaml::from_str(&deployment).unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["requests"]["memory"].is_string());
}

/// The Secrets rule of a rendered Role or ClusterRole: its verbs.
fn secret_verbs(role: &serde_yaml::Value) -> Option<Vec<String>> {
    role["rules"].as_sequence()?.iter().find_map(|rule| {
        let secrets = rule["resources"]
            .as_sequence()?
            .iter()
            .any(|r| r.as_str() == Some("secrets"));
        secrets.then(|| {
            rule["verbs"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        })
    })
}

#[test]
fn with_rufio_namespace_set_secrets_are_read_through_roles_only() {
    let documents = |sets: &[String]| -> Vec<serde_yaml::Value> {
        render(
            "ingot",
            "ingot-system",
            sets,
            &["--show-only", "templates/rbac.yaml"],
        )
        .split("\n---")
        .map(|d| serde_yaml::from_str(d).unwrap())
        .collect()
    };
    let cluster_role = |docs: &[serde_yaml::Value]| {
        docs.iter()
            .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "ingot-rufio")
            .cloned()
            .unwrap()
    };
    // Every namespace reconciled: each object's own namespace may be any, so cluster-wide.
    let everywhere = documents(&["controllers={rufio}".to_owned()]);
    assert_eq!(
        secret_verbs(&cluster_role(&everywhere)),
        Some(vec!["get".into(), "list".into(), "watch".into()])
    );
    let narrowed = documents(&[
        "controllers={rufio}".to_owned(),
        "rufio.namespace=team-a".to_owned(),
        "rufio.allowCrossNamespace[0]=team-a=bmc-secrets".to_owned(),
        // Another namespace's pair and the watched namespace itself add nothing.
        "rufio.allowCrossNamespace[1]=team-b=shared".to_owned(),
        "rufio.allowCrossNamespace[2]=team-a=team-a".to_owned(),
    ]);
    assert_eq!(secret_verbs(&cluster_role(&narrowed)), None);
    let roles: Vec<(String, Vec<String>)> = narrowed
        .iter()
        .filter(|d| d["kind"] == "Role" && d["metadata"]["name"] == "ingot-rufio-secrets")
        .map(|d| {
            (
                d["metadata"]["namespace"].as_str().unwrap().to_owned(),
                secret_verbs(d).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            (
                "team-a".to_owned(),
                vec!["get".into(), "list".into(), "watch".into()]
            ),
            ("bmc-secrets".to_owned(), vec!["get".into()]),
        ]
    );
    let bindings = narrowed
        .iter()
        .filter(|d| d["kind"] == "RoleBinding" && d["metadata"]["name"] == "ingot-rufio-secrets")
        .count();
    assert_eq!(bindings, 2);
}

#[test]
fn the_bmc_ca_bundle_is_mounted_and_passed_to_ingot_run() {
    let deployment = render(
        "ingot",
        "ingot-system",
        &[
            "controllers={rufio}".to_owned(),
            "rufio.bmcCaBundle.configMap=bmc-ca".to_owned(),
            "rufio.allowCrossNamespace[0]=a=b".to_owned(),
            "rufio.allowCrossNamespace[1]=c=d".to_owned(),
        ],
        &["--show-only", "templates/deployment.yaml"],
    );
    let deployment: serde_yaml::Value = serde_yaml::from_str(&deployment).unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--bmc-ca-bundle=/etc/ingot/bmc-ca/ca.crt"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--rufio-allow-cross-namespace=a=b,c=d"),
        "{args:?}"
    );
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "bmc-ca");
    let mount = &pod["containers"][0]["volumeMounts"][0];
    assert_eq!(mount["mountPath"], "/etc/ingot/bmc-ca");
    assert_eq!(mount["readOnly"], true);
}

#[tokio::test]
async fn every_rendering_applies_to_the_api_server() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    for namespace in ["ingot-system", "harvester-system"] {
        ensure_namespace(&client, namespace).await;
    }
    for group in GROUPS {
        let out = kubectl_apply(
            env.kubeconfig_path(),
            &rendered_manifest(group),
            &["--dry-run=server"],
        );
        assert!(out.contains("deployment.apps/ingot"), "{group}: {out}");
    }
}

#[tokio::test]
async fn the_harvester_addon_applies_with_harvesters_addon_crd() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    ensure_namespace(&client, "harvester-system").await;
    let crd =
        ingot_testenv::shared_dir().join("fixtures/upstream-crds/harvesterhci.io_addons.yaml");
    kubectl_apply(
        env.kubeconfig_path(),
        &std::fs::read_to_string(crd).unwrap(),
        &[],
    );
    run(
        Command::new(chart_support::kubectl())
            .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
            .args([
                "wait",
                "--for=condition=Established",
                "crd/addons.harvesterhci.io",
                "--timeout=30s",
            ]),
        None,
    );
    let addon = repo_file("deploy/harvester/addon.yaml");
    kubectl_apply(env.kubeconfig_path(), &addon, &["--dry-run=server"]);

    // It installs this chart, at its version, with values the chart accepts.
    let addon: serde_yaml::Value = serde_yaml::from_str(&addon).unwrap();
    let chart: serde_yaml::Value =
        serde_yaml::from_str(&repo_file("deploy/helm/ingot/Chart.yaml")).unwrap();
    assert_eq!(addon["spec"]["chart"], chart["name"]);
    assert_eq!(addon["spec"]["version"], chart["version"]);
    let values = addon["spec"]["valuesContent"].as_str().unwrap();
    let values_file = std::env::temp_dir().join("ingot-addon-values.yaml");
    std::fs::write(&values_file, values).unwrap();
    render(
        "ingot",
        "harvester-system",
        &[],
        &["--values", values_file.to_str().unwrap()],
    );
}

/// Builds the image from this test's ingot binary with scripts/build-image.sh; returns the
/// layout directory.
fn build_image(out: &Path) -> std::path::PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-image.sh");
    let printed = run(
        Command::new("bash")
            .arg(script)
            .arg(out)
            .env("INGOT_IMAGE_BINARY", env!("CARGO_BIN_EXE_ingot")),
        None,
    );
    std::path::PathBuf::from(printed.trim())
}

fn json_file(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn blob(layout: &Path, digest: &str) -> std::path::PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap())
}

#[test]
fn the_oci_image_is_reproducible_non_root_and_runs_from_its_own_root_filesystem() {
    let work = std::env::temp_dir().join(format!("ingot-image-{}", std::process::id()));
    let first = build_image(&work.join("a"));
    let second = build_image(&work.join("b"));
    let index = json_file(&first.join("index.json"));
    assert_eq!(
        index,
        json_file(&second.join("index.json")),
        "same inputs, same digests"
    );
    let manifest_digest = index["manifests"][0]["digest"].as_str().unwrap();
    assert_eq!(
        index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
        env!("CARGO_PKG_VERSION")
    );
    let manifest = json_file(&blob(&first, manifest_digest));
    let config = json_file(&blob(
        &first,
        manifest["config"]["digest"].as_str().unwrap(),
    ));
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        config["config"]["Labels"]["org.opencontainers.image.source"]
            .as_str()
            .unwrap()
            .starts_with("ingot")
    );

    // Unpack the one layer and run the binary inside that root filesystem only.
    let rootfs = work.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let layer = blob(&first, manifest["layers"][0]["digest"].as_str().unwrap());
    run(
        Command::new("tar")
            .arg("-xzf")
            .arg(&layer)
            .arg("-C")
            .arg(&rootfs),
        None,
    );
    let version = run(
        Command::new("chroot")
            .arg(&rootfs)
            .args(["/ingot", "--version"]),
        None,
    );
    assert!(
        version.contains(env!("CARGO_PKG_VERSION")),
        "ingot --version in the image: {version}"
    );
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains(":65532:65532:"), "{passwd}");
    let _ = std::fs::remove_dir_all(&work);
}

/// The CRD files as kubectl and Helm read them (YAML 1.1, where an unquoted `on` is a boolean)
/// are exactly the CRDs ingot's types define: what a user applies is what the controllers expect.
#[tokio::test]
async fn the_crd_files_read_by_kubectl_are_the_crds_ingot_defines() {
    let env = ingot_testenv::shared().await;
    for crd in ingot_api::crds::generated() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/helm/ingot/crds")
            .join(ingot_api::crds::file_name(&crd));
        let read = run(
            Command::new(kubectl()).args([
                &format!("--kubeconfig={}", env.kubeconfig_path().display()),
                "create",
                "--dry-run=client",
                "-o",
                "json",
                "-f",
                &file.display().to_string(),
            ]),
            None,
        );
        let read: serde_json::Value = serde_json::from_str(&read).unwrap();
        let defined = serde_json::to_value(&crd).unwrap();
        if let Some(difference) = first_difference(&read["spec"], &defined["spec"], "spec") {
            panic!(
                "{} as kubectl reads it differs from the type's CRD at {difference}",
                file.display()
            );
        }
    }
}

/// Where two JSON values first differ, and how.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}.{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(u, v, &format!("{path}[{i}]"))),
        // `minimum: 0` is read as an integer, the type holds 0.0: the same bound.
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ => (a != b).then(|| format!("{path}: {a} (file) vs {b} (type)")),
    }
}
