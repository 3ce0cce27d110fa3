//! Installing ingot: the Helm chart lints clean, the plain manifests are what the chart
//! renders, every rendering applies to the API server (`--dry-run=server`), README.md's install
//! commands run a pool past its join token with `ingot run` as the installed pod, and the
//! Harvester files (the chart inline in a HelmChart, byte for byte, and the Addon) apply with
//! helm-controller's and Harvester's own CRDs. (The chart's RBAC is proven by the end-to-end
//! tests, which run `ingot run` as the chart's ServiceAccount.)

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use chart_support::{chart_dir, helm, kubectl, kubectl_apply, render, run};
use ingot_api::equinix::{Instance, InstancePool};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use std::time::{Duration, Instant};

const GROUPS: [&str; 6] = [
    "pools",
    "rufio",
    "seeder",
    "provisioning",
    "gardener",
    "fencing",
];

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
            "controllers: unknown [seeders]; choose among pools, rufio, seeder, provisioning, gardener, fencing"
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
    // With rufio, and with fencing, which starts the Rufio controllers too.
    for group in ["rufio", "fencing"] {
        let deployment = render(
            "ingot",
            "ingot-system",
            &[
                format!("controllers={{{group}}}"),
                "rufio.bmcCaBundle.configMap=bmc-ca".to_owned(),
                "rufio.namespace=a".to_owned(),
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
            "{group}: {args:?}"
        );
        assert!(
            args.contains(&"--rufio-allow-cross-namespace=a=b,c=d"),
            "{group}: {args:?}"
        );
        assert!(args.contains(&"--rufio-namespace=a"), "{group}: {args:?}");
        assert_eq!(pod["volumes"][0]["configMap"]["name"], "bmc-ca", "{group}");
        let mount = &pod["containers"][0]["volumeMounts"][0];
        assert_eq!(mount["mountPath"], "/etc/ingot/bmc-ca", "{group}");
        assert_eq!(mount["readOnly"], true, "{group}");
    }
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

fn repo_root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Applies a CRD (server-side: some are larger than client-side apply's annotation allows) and
/// waits until the API server serves it.
fn apply_crd(kubeconfig: &Path, yaml: &str, name: &str) {
    kubectl_apply(
        kubeconfig,
        yaml,
        &[
            "--server-side",
            "--force-conflicts",
            "--field-manager=ingot-install-test",
        ],
    );
    run(
        Command::new(kubectl())
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "wait",
                "--for=condition=Established",
                &format!("crd/{name}"),
                "--timeout=60s",
            ]),
        None,
    );
}

/// helm-controller's HelmChart CRD as its Go module (pinned in tools/helm-controller) ships it.
fn helmchart_crd() -> String {
    let path = run(
        Command::new("bash").arg(repo_root().join("tools/helm-controller/crd.sh")),
        None,
    );
    std::fs::read_to_string(path.trim()).unwrap_or_else(|e| panic!("{}: {e}", path.trim()))
}

/// The chart archive deploy/harvester/helmchart.yaml carries, unpacked into `dir`.
fn unpack_inline_chart(dir: &Path) -> serde_yaml::Value {
    let file: serde_yaml::Value =
        serde_yaml::from_str(&repo_file("deploy/harvester/helmchart.yaml")).unwrap();
    let content = file["spec"]["chartContent"].as_str().unwrap().to_owned();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("chart.tgz.b64"), &content).unwrap();
    run(
        Command::new("sh")
            .arg("-c")
            .arg("base64 -d chart.tgz.b64 >chart.tgz && mkdir unpacked && tar -xzf chart.tgz -C unpacked")
            .current_dir(dir),
        None,
    );
    file
}

/// Every file under `dir`, by path relative to it.
fn files_under(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, into: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, into);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                into.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut files = std::collections::BTreeMap::new();
    walk(dir, dir, &mut files);
    files
}

/// The HelmChart's `chartContent` is deploy/helm/ingot: every file, byte for byte, none missing
/// and none extra (scripts/render-manifests.sh writes it).
#[test]
fn the_inline_chart_of_the_helmchart_is_the_chart_byte_for_byte() {
    let dir = std::env::temp_dir().join(format!("ingot-inline-chart-{}", std::process::id()));
    unpack_inline_chart(&dir);
    let unpacked = dir.join("unpacked");
    let top: Vec<String> = std::fs::read_dir(&unpacked)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        top,
        ["ingot"],
        "the archive holds one directory, the chart's"
    );
    let inline = files_under(&unpacked.join("ingot"));
    let chart = files_under(&chart_dir());
    let missing: Vec<&String> = chart.keys().filter(|k| !inline.contains_key(*k)).collect();
    let extra: Vec<&String> = inline.keys().filter(|k| !chart.contains_key(*k)).collect();
    let differ: Vec<&String> = chart
        .iter()
        .filter(|(k, v)| inline.get(*k).is_some_and(|i| i != *v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "deploy/harvester/helmchart.yaml is not deploy/helm/ingot (missing {missing:?}, extra \
         {extra:?}, different {differ:?}): run scripts/render-manifests.sh"
    );
    assert!(chart.contains_key("templates/deployment.yaml") && chart.len() > 10);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rendered Deployment's environment variable `name`.
fn env_var<'a>(deployment: &'a serde_yaml::Value, name: &str) -> Option<&'a serde_yaml::Value> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"] == name)
}

#[test]
fn the_namespaces_pools_and_machines_may_draw_inventories_from_are_passed_to_ingot_run() {
    let args = |sets: &[String]| -> Vec<String> {
        let deployment = render(
            "ingot",
            "ingot-system",
            sets,
            &["--show-only", "templates/deployment.yaml"],
        );
        container_args(&serde_yaml::from_str(&deployment).unwrap())
    };
    let set = args(&[
        "controllers={pools,provisioning}".to_owned(),
        "pools.inventoryNamespaces={racks,lab}".to_owned(),
    ]);
    assert!(
        set.contains(&"--pool-inventory-namespaces=racks,lab".to_owned()),
        "{set:?}"
    );
    let unset = args(&["controllers={pools,provisioning}".to_owned()]);
    assert!(
        !unset
            .iter()
            .any(|a| a.starts_with("--pool-inventory-namespaces")),
        "{unset:?}"
    );
    let machines = args(&[
        "controllers={gardener,provisioning}".to_owned(),
        "gardener.inventoryNamespaces={racks}".to_owned(),
    ]);
    assert!(
        machines.contains(&"--machine-inventory-namespaces=racks".to_owned()),
        "{machines:?}"
    );
    let unset = args(&["controllers={gardener,provisioning}".to_owned()]);
    assert!(
        !unset
            .iter()
            .any(|a| a.starts_with("--machine-inventory-namespaces")),
        "{unset:?}"
    );
}

/// With `provisioning.boot.url`, the chart runs the boot server on `provisioning.boot.port`
/// of the pods and the Service, with its allowed sources, the site's wipe image and the boot
/// CD's programs (a volume); without it, none. Half a wipe image is refused, naming the values.
#[test]
fn the_boot_server_and_the_wipe_image_are_chart_values() {
    let rendered = |sets: &[&str], only: &str| -> serde_yaml::Value {
        let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
        serde_yaml::from_str(&render(
            "ingot",
            "ingot-system",
            &sets,
            &["--show-only", only],
        ))
        .unwrap()
    };
    let booting = [
        "controllers={pools,provisioning}",
        "provisioning.boot.url=http://10.0.0.5:8082",
        "provisioning.boot.allowSources={10.9.0.0/16}",
        "provisioning.wipeImage.kernelUrl=http://10.0.0.5/wipe/vmlinuz",
        "provisioning.wipeImage.initrdUrl=http://10.0.0.5/wipe/initrd.img",
        "provisioning.bootMedia.persistentVolumeClaim.claimName=boot-media",
    ];
    let deployment = rendered(&booting, "templates/deployment.yaml");
    let set = container_args(&deployment);
    for expected in [
        "--boot-addr=0.0.0.0:8082",
        "--boot-url=http://10.0.0.5:8082",
        "--boot-allow-source=10.9.0.0/16",
        "--wipe-kernel-url=http://10.0.0.5/wipe/vmlinuz",
        "--wipe-initrd-url=http://10.0.0.5/wipe/initrd.img",
        "--boot-media-dir=/etc/ingot/boot-media",
    ] {
        assert!(set.contains(&expected.to_owned()), "{expected}: {set:?}");
    }
    // The boot CD's programs: the volume given, mounted read-only where the flag points.
    let pod = &deployment["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "boot-media")
        .unwrap();
    assert_eq!(volume["persistentVolumeClaim"]["claimName"], "boot-media");
    let mount = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "boot-media")
        .unwrap();
    assert_eq!(
        (&mount["mountPath"], &mount["readOnly"]),
        (
            &serde_yaml::Value::from("/etc/ingot/boot-media"),
            &serde_yaml::Value::from(true)
        )
    );
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert!(
        ports
            .as_sequence()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "boot" && p["containerPort"] == 8082),
        "{ports:?}"
    );
    let service = rendered(&booting, "templates/service.yaml");
    assert!(
        service["spec"]["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "boot" && p["port"] == 8082 && p["targetPort"] == "boot"),
        "{service:?}"
    );
    let unset = container_args(&rendered(
        &["controllers={pools,provisioning}"],
        "templates/deployment.yaml",
    ));
    assert!(
        !unset
            .iter()
            .any(|a| a.starts_with("--boot-") || a.starts_with("--wipe-")),
        "{unset:?}"
    );
    // Without a boot server, the boot CD's volume is not mounted either.
    let no_server = rendered(
        &[
            "controllers={pools,provisioning}",
            "provisioning.bootMedia.persistentVolumeClaim.claimName=boot-media",
        ],
        "templates/deployment.yaml",
    );
    assert!(
        !container_args(&no_server)
            .iter()
            .any(|a| a.starts_with("--boot-"))
    );
    assert!(
        no_server["spec"]["template"]["spec"]["volumes"].is_null(),
        "{no_server:?}"
    );
    let half = Command::new(helm())
        .args(["template", "ingot"])
        .arg(chart_dir())
        .args(["--set", "controllers={provisioning}"])
        .args(["--set", "provisioning.boot.url=http://10.0.0.5:8082"])
        .args([
            "--set",
            "provisioning.wipeImage.kernelUrl=http://10.0.0.5/wipe/vmlinuz",
        ])
        .output()
        .unwrap();
    assert!(!half.status.success());
    let stderr = String::from_utf8_lossy(&half.stderr);
    assert!(
        stderr.contains("provisioning.wipeImage: set both kernelUrl and initrdUrl"),
        "{stderr}"
    );
}

/// Renders `chart` (a directory or archive) with a values file's text; returns the Deployment.
fn render_deployment_with_values(chart: &Path, namespace: &str, values: &str) -> serde_yaml::Value {
    let values_file = std::env::temp_dir().join(format!(
        "ingot-values-{}-{}.yaml",
        std::process::id(),
        ingot_testenv::random_suffix(6)
    ));
    std::fs::write(&values_file, values).unwrap();
    let out = run(
        Command::new(helm())
            .args(["template", "ingot"])
            .arg(chart)
            .args(["--namespace", namespace, "--values"])
            .arg(&values_file)
            .args(["--show-only", "templates/deployment.yaml"]),
        None,
    );
    let _ = std::fs::remove_file(&values_file);
    serde_yaml::from_str(&out).unwrap()
}

#[test]
fn provisioning_tinkerbell_boots_through_tinkerbell_with_its_rbac() {
    let args_and_rules = |sets: &[String]| {
        let deployment = render(
            "ingot",
            "ingot-system",
            sets,
            &["--show-only", "templates/deployment.yaml"],
        );
        let deployment: serde_yaml::Value = serde_yaml::from_str(&deployment).unwrap();
        let args: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        let rbac = render(
            "ingot",
            "ingot-system",
            sets,
            &["--show-only", "templates/rbac.yaml"],
        );
        let stack = rbac.contains("resources: [\"services\", \"configmaps\"]");
        (args, rbac.contains("[\"tinkerbell.org\"]"), stack)
    };
    let provisioning = "controllers={provisioning}".to_owned();
    let (args, tinkerbell_rbac, stack_rbac) = args_and_rules(std::slice::from_ref(&provisioning));
    assert!(
        !args.iter().any(|a| a.starts_with("--provisioning-boot")),
        "{args:?}"
    );
    assert!(!tinkerbell_rbac, "tinkerbell.org granted by default");
    assert!(!stack_rbac, "Services and ConfigMaps granted by default");
    let (args, tinkerbell_rbac, stack_rbac) =
        args_and_rules(&[provisioning, "provisioning.tinkerbell=true".to_owned()]);
    assert!(
        args.contains(&"--provisioning-boot=tinkerbell".to_owned()),
        "{args:?}"
    );
    // The chart has no value for the stack's address: it gives no --provisioning-tink-address.
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--provisioning-tink-address")),
        "{args:?}"
    );
    assert!(tinkerbell_rbac, "tinkerbell.org not granted");
    assert!(
        stack_rbac,
        "the stack's Service and ConfigMap not watchable"
    );
}

/// Both Harvester files apply to the real API server (`dryRun=All`, the schema checked
/// strictly) with the real CRDs: helm-controller's HelmChart (RKE2's, Harvester's) and
/// Harvester's Addon; their values render the chart they install, the join token from the
/// Secret the docs name.
#[tokio::test]
async fn the_harvester_files_apply_with_helm_controllers_and_harvesters_crds() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    ensure_namespace(&client, "harvester-system").await;
    let addon_crd =
        ingot_testenv::shared_dir().join("fixtures/upstream-crds/harvesterhci.io_addons.yaml");
    apply_crd(
        env.kubeconfig_path(),
        &std::fs::read_to_string(addon_crd).unwrap(),
        "addons.harvesterhci.io",
    );
    apply_crd(
        env.kubeconfig_path(),
        &helmchart_crd(),
        "helmcharts.helm.cattle.io",
    );
    for (file, applied) in [
        (
            "deploy/harvester/helmchart.yaml",
            "helmchart.helm.cattle.io/ingot",
        ),
        ("deploy/harvester/addon.yaml", "addon.harvesterhci.io/ingot"),
    ] {
        // As the docs say (`kubectl apply -f`), and as server-side apply: both a dry run on the
        // server (`dryRun=All`), the fields checked against the CRD's schema.
        for how in [
            &["--dry-run=server"][..],
            &["--server-side", "--dry-run=server"],
        ] {
            let out = kubectl_apply(env.kubeconfig_path(), &repo_file(file), how);
            assert!(out.contains(applied), "{file}: {out}");
        }
    }

    let dir = std::env::temp_dir().join(format!("ingot-harvester-{}", std::process::id()));
    let helmchart = unpack_inline_chart(&dir);
    let addon: serde_yaml::Value =
        serde_yaml::from_str(&repo_file("deploy/harvester/addon.yaml")).unwrap();
    let chart: serde_yaml::Value =
        serde_yaml::from_str(&repo_file("deploy/helm/ingot/Chart.yaml")).unwrap();
    // RKE2's helm-controller installs HelmCharts of kube-system; the release goes where the
    // Secrets the docs make are.
    assert_eq!(helmchart["metadata"]["namespace"], "kube-system");
    assert_eq!(helmchart["spec"]["targetNamespace"], "harvester-system");
    assert_eq!(addon["metadata"]["namespace"], "harvester-system");
    // The Addon installs this chart at its version, from a repository the user sets: the
    // placeholder resolves nowhere (a reserved name), Harvester's own repository has no ingot.
    assert_eq!(addon["spec"]["chart"], chart["name"]);
    assert_eq!(addon["spec"]["version"], chart["version"]);
    let repo = addon["spec"]["repo"].as_str().unwrap();
    assert!(
        repo.contains(".invalid/") && !repo.contains("harvester-cluster-repo"),
        "{repo}"
    );
    let values = helmchart["spec"]["valuesContent"].as_str().unwrap();
    assert_eq!(
        Some(values),
        addon["spec"]["valuesContent"].as_str(),
        "the two files install with the same values"
    );
    for chart in [dir.join("chart.tgz"), chart_dir()] {
        let deployment = render_deployment_with_values(&chart, "harvester-system", values);
        let token = env_var(&deployment, "TOKEN").expect("TOKEN");
        assert_eq!(
            token["valueFrom"]["secretKeyRef"]["name"],
            "ingot-join-token",
            "{}",
            chart.display()
        );
        assert_eq!(token["valueFrom"]["secretKeyRef"]["key"], "token");
        assert_eq!(
            env_var(&deployment, "NAMESPACE").unwrap()["value"],
            "harvester-system"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a join-token Secret the chart does not render pools (the pod cannot read the node's
/// rancherd config): the message names the value and how to make the Secret. Other groups do
/// not need it.
#[test]
fn without_a_join_token_secret_the_chart_refuses_pools_naming_the_value() {
    let output = Command::new(helm())
        .args(["template", "ingot"])
        .arg(chart_dir())
        .args(["--set", "pools.joinTokenSecret.name="])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for part in [
        "pools.joinTokenSecret.name is empty",
        "/etc/rancher/rancherd/config.yaml",
        "kubectl create secret generic ingot-join-token --from-literal=token=<token>",
    ] {
        assert!(stderr.contains(part), "{part}: {stderr}");
    }
    let output = Command::new(helm())
        .args(["template", "ingot"])
        .arg(chart_dir())
        .args(["--set", "pools.joinTokenSecret.key="])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("pools.joinTokenSecret.key is empty"));
    for group in ["rufio", "seeder", "gardener"] {
        let deployment: serde_yaml::Value = serde_yaml::from_str(&render(
            "ingot",
            "ingot-system",
            &[
                format!("controllers={{{group}}}"),
                "pools.joinTokenSecret.name=".to_owned(),
            ],
            &["--show-only", "templates/deployment.yaml"],
        ))
        .unwrap();
        assert!(env_var(&deployment, "TOKEN").is_none(), "{group}");
    }
}

/// The commands of README.md's install block (the first `sh` block of "Install into a
/// cluster"), comments dropped and continued lines joined, with its placeholders replaced.
fn readme_install_commands(placeholders: &[(&str, &str)]) -> Vec<String> {
    let readme = repo_file("README.md");
    let section = &readme[readme
        .find("## Install into a cluster")
        .expect("README.md has an Install section")..];
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the Install section has an sh block");
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands
        .into_iter()
        .map(|mut command| {
            for (placeholder, value) in placeholders {
                command = command.replace(placeholder, value);
            }
            assert!(
                !command.contains('<'),
                "README.md's install line has a placeholder this test does not know: {command}"
            );
            command
        })
        .collect()
}

/// A command line split into words as sh splits it (single quotes; nothing else is used).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut started) = (false, false);
    for c in line.chars() {
        match c {
            '\'' => (quoted, started) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                assert!(
                    quoted || !"\"$`|&;<>()\\".contains(c),
                    "unexpected shell syntax in {line}"
                );
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quote in {line}");
    if started {
        words.push(word);
    }
    words
}

/// docs/install.md's command that reads the join token from a node's rancherd config gives
/// the token, quoted as Harvester's installer writes it or not.
#[test]
fn the_documented_token_command_reads_the_rancherd_config() {
    let doc = repo_file("docs/install.md");
    let section = &doc[doc.find("### The join token").unwrap()..];
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let line = block
        .lines()
        .find(|l| l.starts_with("token=$("))
        .expect("the block sets token");
    let dir = std::env::temp_dir().join(format!("ingot-rancherd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    for (written, token) in [
        ("token: \"K10ab::server:cd\"\n", "K10ab::server:cd"),
        ("token: plain-token\n", "plain-token"),
    ] {
        std::fs::write(
            &config,
            format!(
                "server: https://192.0.2.1:443\n{written}role: cluster-init\nos:\n  hostname: n1\n"
            ),
        )
        .unwrap();
        let script = format!(
            "{}\nprintf '%s' \"$token\"",
            line.replace(
                "/etc/rancher/rancherd/config.yaml",
                &config.display().to_string()
            )
        );
        let out = run(Command::new("sh").arg("-c").arg(script), None);
        assert_eq!(out, token);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// README.md's install commands, as a newcomer types them, on the real API server: the
/// namespace, the two Secrets, `helm install` of the chart. Then `ingot run` as the pod the
/// installed Deployment describes (its arguments, its environment resolved as the kubelet does,
/// a token of the installed ServiceAccount) runs a pool past its join token: JoinReady=True and
/// a server created. Only what a cluster gives differs: the namespace and release are the
/// test's own (the chart's cluster-wide names carry the release), the Equinix Metal API is the
/// emulator, the HTTP address is loopback, and kube-system/ingress-expose has the VIP as on
/// Harvester.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_helm_install_runs_a_pool_past_its_join_token() {
    let _serial = HARVESTER_SYSTEM.lock().await;
    let env = ingot_testenv::shared().await;
    let admin = env.kubeconfig_path();
    let client = env.client().unwrap();
    let suffix = ingot_testenv::random_suffix(6);
    let namespace = format!("readme-{suffix}");
    let release = format!("ingot-readme-{suffix}");
    // Harvester has harvester-system; a Secret another test left there would make the README's
    // `kubectl create secret` fail.
    ensure_namespace(&client, "harvester-system").await;
    let credentials: Api<Secret> = Api::namespaced(client.clone(), "harvester-system");
    let _ = credentials
        .delete("equinix-addon", &DeleteParams::default())
        .await;
    ingot_testenv::wait_for(
        "the old credentials Secret to be gone",
        Duration::from_secs(60),
        async || {
            credentials
                .get_opt("equinix-addon")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;

    let commands = readme_install_commands(&[
        ("<Equinix Metal API token>", METAL_TOKEN),
        ("<project ID>", PROJECT),
        ("<join token>", JOIN_TOKEN),
        (
            "<address where servers reach the ingot Service>",
            "127.0.0.1",
        ),
    ]);
    let mut installed = false;
    for command in &commands {
        let mut words: Vec<String> = shell_words(command)
            .into_iter()
            .map(|w| {
                if w == "ingot-system" {
                    namespace.clone()
                } else {
                    w
                }
            })
            .collect();
        let mut process = match words[0].as_str() {
            "kubectl" => Command::new(kubectl()),
            "helm" => {
                assert_eq!(words[1..3], ["install", "ingot"], "{command}");
                words[2] = release.clone();
                installed = true;
                Command::new(helm())
            }
            other => panic!("README.md's install block runs {other}: {command}"),
        };
        process
            .current_dir(repo_root())
            .args(&words[1..])
            .arg(format!("--kubeconfig={}", admin.display()));
        run(&mut process, None);
    }
    assert!(
        installed,
        "README.md's install block runs helm install: {commands:?}"
    );

    the_installed_pod_runs_a_pool_past_its_join_token(&client, admin, &namespace, &release).await;
}

/// The HelmChart's chart and values installed as helm-controller installs them (rendered, then
/// applied server-side: release `ingot` in harvester-system, `pools.ipxeBaseUrl` set as the docs
/// say), after the two Secrets docs/install.md has a Harvester user make in harvester-system.
/// `ingot run` as the installed pod runs a pool past its join token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helmcharts_chart_and_values_run_a_pool_on_harvester() {
    let _serial = HARVESTER_SYSTEM.lock().await;
    let env = ingot_testenv::shared().await;
    let admin = env.kubeconfig_path();
    let client = env.client().unwrap();
    ensure_namespace(&client, "harvester-system").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "harvester-system");
    let apply = PatchParams::apply("ingot-install-test").force();
    for (name, data) in [
        (
            "equinix-addon",
            serde_json::json!({"METAL_AUTH_TOKEN": METAL_TOKEN, "PROJECT_ID": PROJECT}),
        ),
        ("ingot-join-token", serde_json::json!({"token": JOIN_TOKEN})),
    ] {
        secrets
            .patch(
                name,
                &apply,
                &Patch::Apply(serde_json::json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "namespace": "harvester-system"},
                    "stringData": data
                })),
            )
            .await
            .unwrap();
    }
    let dir = std::env::temp_dir().join(format!("ingot-helmchart-{}", std::process::id()));
    let helmchart = unpack_inline_chart(&dir);
    let name = helmchart["metadata"]["name"].as_str().unwrap();
    let namespace = helmchart["spec"]["targetNamespace"].as_str().unwrap();
    let values = dir.join("values.yaml");
    std::fs::write(
        &values,
        helmchart["spec"]["valuesContent"].as_str().unwrap(),
    )
    .unwrap();
    let rendered = run(
        Command::new(helm())
            .args(["template", name])
            .arg(dir.join("chart.tgz"))
            .args(["--namespace", namespace, "--include-crds", "--values"])
            .arg(&values)
            .args(["--set", "pools.ipxeBaseUrl=http://127.0.0.1:8080"]),
        None,
    );
    kubectl_apply(
        admin,
        &rendered,
        &[
            "--server-side",
            "--force-conflicts",
            "--field-manager=ingot-install-test",
        ],
    );
    the_installed_pod_runs_a_pool_past_its_join_token(&client, admin, namespace, name).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The two tests that install into harvester-system (its Secrets, kube-system/ingress-expose),
/// one at a time.
static HARVESTER_SYSTEM: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const METAL_TOKEN: &str = "metal-token-install";
const PROJECT: &str = "5b0e8a6c-3f1d-4e2a-8c7b-9d6e5f4a3b21";
const JOIN_TOKEN: &str = "K10-install-join-token";
const VIP: &str = "192.0.2.45";

/// `ingot run` as the pod the installed Deployment `namespace/release` describes (its
/// arguments, its environment resolved as the kubelet resolves it, a token of its
/// ServiceAccount), with the Equinix Metal emulator for the API and kube-system/ingress-expose
/// holding the VIP as on Harvester: a pool of one gets JoinReady=True (the token from the
/// installed Secret) and CredentialsReady=True, and its server is created; the pool is then
/// deleted with its server.
async fn the_installed_pod_runs_a_pool_past_its_join_token(
    client: &kube::Client,
    admin: &Path,
    namespace: &str,
    release: &str,
) {
    let (namespace, release) = (namespace.to_owned(), release.to_owned());
    let suffix = ingot_testenv::random_suffix(6);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let deployment = deployments.get(&release).await.unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(release.as_str()));
    let container = &pod.containers[0];
    let sim = ingot_metal_sim::SimServer::start(
        ingot_metal_sim::SimConfig::single(METAL_TOKEN, PROJECT),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    // The container's arguments and environment, on a port of its own choosing.
    let args = container.args.clone().unwrap();
    assert_eq!(args[0], "run");
    let mut operator = ingot_testenv::Operator::builder(env!("CARGO_BIN_EXE_ingot"))
        .clear_env()
        .log_file(std::env::temp_dir().join(format!("{release}.log")))
        .args(
            args[1..]
                .iter()
                .filter(|a| !a.starts_with("--http-addr="))
                .cloned(),
        )
        .arg(format!(
            "--kubeconfig={}",
            chart_support::token_kubeconfig(admin, &release, &namespace, &release).display()
        ))
        .arg(format!("--metal-api-url={}", sim.base_url()));
    let mut token_from_secret = false;
    for var in container.env.clone().unwrap() {
        let value = match (var.value, var.value_from) {
            (Some(value), _) => value,
            (None, Some(from)) => match (from.field_ref, from.secret_key_ref) {
                (Some(field), _) if field.field_path == "metadata.name" => format!("{release}-pod"),
                (Some(field), _) if field.field_path == "metadata.namespace" => namespace.clone(),
                (None, Some(key)) => {
                    // Required: the kubelet starts the container only once the Secret has it.
                    assert_ne!(key.optional, Some(true), "{}", var.name);
                    let secret = Api::<Secret>::namespaced(client.clone(), &namespace)
                        .get(&key.name)
                        .await
                        .unwrap_or_else(|e| panic!("the pod's Secret {}: {e}", key.name));
                    let bytes = secret.data.unwrap().remove(&key.key).unwrap().0;
                    token_from_secret |= var.name == "TOKEN";
                    String::from_utf8(bytes).unwrap()
                }
                other => panic!("{}: unexpected source {other:?}", var.name),
            },
            (None, None) => String::new(),
        };
        operator = operator.env(&var.name, value);
    }
    assert!(token_from_secret, "TOKEN comes from the README's Secret");

    // The cluster VIP, where Harvester publishes it.
    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let apply = PatchParams::apply("ingot-install-test").force();
    services
        .patch(
            "ingress-expose",
            &apply,
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "ingress-expose", "namespace": "kube-system"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 443}]}
            })),
        )
        .await
        .unwrap();
    services
        .patch_status(
            "ingress-expose",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "status": {"loadBalancer": {"ingress": [{"ip": VIP}]}}
            })),
        )
        .await
        .unwrap();

    let log_path = std::env::temp_dir().join(format!("{release}.log"));
    let _ = std::fs::remove_file(&log_path);
    let child = operator.start();
    let log_tail = || child.log_tail();

    let pools: Api<InstancePool> = Api::all(client.clone());
    let name = format!("install-{suffix}");
    let mut manifest = ingot_compat::readme_pool();
    manifest["metadata"]["name"] = serde_json::json!(name);
    manifest["spec"]["count"] = serde_json::json!(1);
    pools
        .create(
            &PostParams::default(),
            &serde_json::from_value(manifest).unwrap(),
        )
        .await
        .unwrap();
    let condition = async |type_: &str| -> Option<(String, String)> {
        let pool = serde_json::to_value(pools.get(&name).await.ok()?).unwrap();
        pool["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or_default().to_owned(),
                    c["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let join = condition("JoinReady").await;
        if join.as_ref().is_some_and(|(status, _)| status == "True") {
            let (_, message) = join.unwrap();
            assert!(message.contains(VIP), "{message}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool's JoinReady is {join:?}, not True\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        condition("CredentialsReady").await.map(|c| c.0).as_deref(),
        Some("True")
    );
    let instances: Api<Instance> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let list = instances
            .list(&ListParams::default().labels(&format!("instancePool={name}")))
            .await
            .unwrap();
        if list
            .items
            .iter()
            .any(|i| i.status.as_ref().is_some_and(|s| !s.instance_id.is_empty()))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no server created for the pool\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Gone with its server, while the operator runs, so that no other test meets it.
    pools
        .delete(&name, &DeleteParams::background())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while pools.get_opt(&name).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the pool was not deleted\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(child);
    let _ = services
        .delete("ingress-expose", &DeleteParams::default())
        .await;
    let _ = std::fs::remove_file(&log_path);
}

/// The binary the image is built from: the one built as shipped (`INGOT_SHIPPED_BINARY`, which
/// scripts/test.sh sets), or this test's when it was built without the test-only crash points.
fn image_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("INGOT_SHIPPED_BINARY") {
        return Some(PathBuf::from(path));
    }
    if !cfg!(feature = "crash-points") {
        return Some(PathBuf::from(env!("CARGO_BIN_EXE_ingot")));
    }
    assert!(
        std::env::var_os("INGOT_FULL_SUITE").is_none(),
        "scripts/test.sh must set INGOT_SHIPPED_BINARY to the binary built without test features"
    );
    eprintln!("skipped: INGOT_SHIPPED_BINARY is not set and this build has the crash points");
    None
}

/// Builds the image from `binary` with scripts/build-image.sh; returns the layout directory.
fn build_image(out: &Path, binary: &Path) -> std::path::PathBuf {
    let printed = run(&mut build_image_command(out, binary), None);
    std::path::PathBuf::from(printed.trim())
}

fn build_image_command(out: &Path, binary: &Path) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-image.sh");
    let mut command = Command::new("bash");
    command
        .arg(script)
        .arg(out)
        .env("INGOT_IMAGE_BINARY", binary);
    command
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
    if cfg!(feature = "crash-points") {
        // A test build is refused: the image never ships the crash points.
        let refused = build_image_command(
            &work.join("refused"),
            Path::new(env!("CARGO_BIN_EXE_ingot")),
        )
        .output()
        .unwrap();
        assert_eq!(refused.status.code(), Some(1), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("crash-points"),
            "{refused:?}"
        );
    }
    let Some(binary) = image_binary() else {
        return;
    };
    let first = build_image(&work.join("a"), &binary);
    let second = build_image(&work.join("b"), &binary);
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

/// A migration guide's `kubectl apply` of `target`, split into words (its trailing comment
/// dropped).
fn guide_apply_command(guide: &str, target: &str) -> Vec<String> {
    let text = repo_file(guide);
    let lines: Vec<String> = ingot_compat::fenced_blocks(&text, "sh")
        .iter()
        .flat_map(|block| block.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|line| line.trim().starts_with("kubectl apply") && line.contains(target))
        .collect();
    assert_eq!(lines.len(), 1, "{guide}: one `kubectl apply` of {target}");
    let line = lines[0].split(" #").next().unwrap();
    let words = shell_words(line);
    assert!(
        words.windows(2).any(|w| w[0] == "-f" && w[1] == target),
        "{guide}: {words:?}"
    );
    words
}

/// The CRD `name` of a rendered manifest, or of an upstream CRD file, moved to API group
/// `group` (a copy the shared control plane's own CRDs never meet).
fn crd_in_group(yaml: &str, name: &str, group: &str) -> String {
    let mut crd = serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "CustomResourceDefinition" && doc["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no CRD {name}"));
    let plural = crd["spec"]["names"]["plural"].as_str().unwrap().to_owned();
    crd["spec"]["group"] = group.into();
    crd["metadata"]["name"] = format!("{plural}.{group}").into();
    serde_yaml::to_string(&crd).unwrap()
}

/// The migration guides install the plain manifests where the Go system left its CRDs (Seeder,
/// Rufio and the Equinix addon apply theirs at start): their fields then have another manager,
/// and a server-side apply of ingot's CRDs must take them over. Played under an API group of
/// this test, so that the control plane's own CRDs are untouched: Seeder's Inventory CRD
/// (upstream's file) created by another field manager, then ingot's from
/// `deploy/manifests/seeder.yaml` with the guide's command. Without `--force-conflicts` the API
/// server refuses it (so the copies do differ); the Equinix guide's command, and both guides'
/// apply of the chart's CRDs before Helm, have the same flags.
#[tokio::test]
async fn the_migration_guides_apply_the_manifests_over_the_go_systems_crds() {
    let env = ingot_testenv::shared().await;
    let seeder = guide_apply_command(
        "docs/migrate-from-seeder.md",
        "deploy/manifests/seeder.yaml",
    );
    let pools = guide_apply_command(
        "docs/migrate-from-equinix-addon.md",
        "deploy/manifests/pools.yaml",
    );
    // Before Helm: the chart's CRDs, taken over alike.
    let crds = "deploy/helm/ingot/crds/";
    let helm_first = [
        guide_apply_command("docs/migrate-from-seeder.md", crds),
        guide_apply_command("docs/migrate-from-equinix-addon.md", crds),
    ];
    assert!(
        chart_dir()
            .join("crds/metal.harvesterhci.io_inventories.yaml")
            .is_file()
    );
    let flags = |words: &[String]| -> Vec<String> {
        words
            .iter()
            .filter(|w| w.starts_with("--"))
            .cloned()
            .collect()
    };
    assert_eq!(seeder[..2], ["kubectl", "apply"], "{seeder:?}");
    assert_eq!(flags(&seeder), flags(&pools), "the guides install alike");
    for words in &helm_first {
        assert_eq!(flags(words), flags(&seeder), "{words:?}");
    }

    let group = format!("migrate-{}.test.ingot.dev", ingot_testenv::random_suffix(6));
    let upstream = crd_in_group(
        &std::fs::read_to_string(
            ingot_testenv::shared_dir()
                .join("fixtures/upstream-crds/metal.harvesterhci.io_inventories.yaml"),
        )
        .unwrap(),
        "inventories.metal.harvesterhci.io",
        &group,
    );
    let ours = crd_in_group(
        &repo_file("deploy/manifests/seeder.yaml"),
        "inventories.metal.harvesterhci.io",
        &group,
    );
    let kubeconfig = format!("--kubeconfig={}", env.kubeconfig_path().display());
    run(
        Command::new(kubectl()).args([&kubeconfig, "create", "--field-manager=seeder", "-f", "-"]),
        Some(&upstream),
    );
    // The guide's command, the manifest on standard input.
    let apply = |words: &[String]| {
        let mut args: Vec<String> = words[1..].to_vec();
        let file = args.iter().position(|w| w == "-f").unwrap() + 1;
        args[file] = "-".to_owned();
        let mut child = Command::new(kubectl())
            .arg(&kubeconfig)
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(ours.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let without: Vec<String> = seeder
        .iter()
        .filter(|w| *w != "--force-conflicts")
        .cloned()
        .collect();
    let refused = apply(&without);
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("conflict"),
        "{without:?}: {refused:?}"
    );
    let applied = apply(&seeder);
    let name = format!("inventories.{group}");
    let _ = Command::new(kubectl())
        .args([&kubeconfig, "delete", "crd", &name, "--wait=false"])
        .output();
    assert!(
        applied.status.success(),
        "{seeder:?}: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
}

/// Gardener owns `machine.sapcloud.io`: `ingot crds`, the chart's `crds/` and the plain
/// manifests carry no CRD of that group (README.md; MCM's installation brings Gardener's).
#[test]
fn no_crd_of_gardeners_group_is_shipped() {
    let output = Command::new(env!("CARGO_BIN_EXE_ingot"))
        .arg("crds")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let mut shipped = vec![(
        "ingot crds".to_owned(),
        String::from_utf8(output.stdout).unwrap(),
    )];
    for group in GROUPS {
        let file = format!("deploy/manifests/{group}.yaml");
        shipped.push((file.clone(), repo_file(&file)));
    }
    for entry in std::fs::read_dir(chart_dir().join("crds")).unwrap() {
        let path = entry.unwrap().path();
        shipped.push((
            path.display().to_string(),
            std::fs::read_to_string(&path).unwrap(),
        ));
    }
    for (what, yaml) in shipped {
        let groups: Vec<String> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|doc| <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap())
            .filter(|doc| doc["kind"] == "CustomResourceDefinition")
            .map(|crd| crd["spec"]["group"].as_str().unwrap().to_owned())
            .collect();
        assert!(!groups.is_empty(), "{what}: no CRD at all");
        assert!(
            !groups.iter().any(|g| g == "machine.sapcloud.io"),
            "{what}: {groups:?}"
        );
    }
}

/// docs/install.md's `<release>`: the chart names its objects after the release when the
/// release name contains `ingot`, else `<release>-ingot` (the Lease, the Service, the power
/// action API's Secret and the power-caller ClusterRole with it).
#[test]
fn the_charts_objects_are_named_after_the_release() {
    for (release, name) in [
        ("ingot", "ingot"),
        ("ingot-prod", "ingot-prod"),
        ("bmc", "bmc-ingot"),
    ] {
        let rendered = render(
            release,
            "ingot-system",
            &[
                "controllers={seeder}".to_owned(),
                "seeder.powerApi.callers[0].kind=Group".to_owned(),
                "seeder.powerApi.callers[0].name=operators".to_owned(),
                "seeder.powerApi.callers[0].apiGroup=rbac.authorization.k8s.io".to_owned(),
            ],
            &[],
        );
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&rendered)
            .map(|doc| <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap())
            .filter(|doc| !doc.is_null())
            .collect();
        let named = |kind: &str, wanted: &str| {
            docs.iter()
                .any(|d| d["kind"] == kind && d["metadata"]["name"] == wanted)
        };
        assert!(named("Deployment", name), "{release}");
        assert!(named("Service", name), "{release}");
        assert!(
            named("ClusterRole", &format!("{name}-power-caller")),
            "{release}"
        );
        let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        for arg in [
            format!("--lease-name={name}"),
            format!("--power-api-tls-secret={name}-power-api-tls"),
        ] {
            assert!(
                args.contains(&arg.as_str()),
                "{release}: {arg} not in {args:?}"
            );
        }
    }
}

/// docs/migrate-from-mcm-provider.md checks the Machines by their full name: with the CRDs the
/// manifests install, a bare `kubectl get machines` means Rufio's `bmc.tinkerbell.org` Machines.
#[tokio::test]
async fn the_mcm_guide_checks_gardeners_machines_by_their_full_name() {
    let env = ingot_testenv::shared().await;
    let guide = repo_file("docs/migrate-from-mcm-provider.md");
    assert!(
        guide.contains("`kubectl -n <namespace> get machines.machine.sapcloud.io`"),
        "the guide's check"
    );
    let kubeconfig = format!("--kubeconfig={}", env.kubeconfig_path().display());
    let explain = |resource: &str| {
        run(
            Command::new(kubectl()).args([&kubeconfig, "explain", resource]),
            None,
        )
    };
    assert!(
        explain("machines").contains("bmc.tinkerbell.org"),
        "a bare `machines` names Rufio's"
    );
    assert!(explain("machines.machine.sapcloud.io").contains("machine.sapcloud.io"));
    run(
        Command::new(kubectl()).args([
            &kubeconfig,
            "-n",
            "default",
            "get",
            "machines.machine.sapcloud.io",
        ]),
        None,
    );
}

/// Every `--flag` README.md, docs/install.md and the migration guides name is a flag of `ingot
/// run`, `ingot bmc` or `ingot power` (or of the kubectl, helm and cargo commands they show),
/// and the defaults docs/install.md and docs/seeder.md give are those `ingot run --help` prints.
#[test]
fn every_ingot_flag_the_docs_name_is_in_its_help() {
    const OTHER_COMMANDS: &[&str] = &[
        // kubectl, helm and cargo, as the docs run them
        "--all",
        "--audience",
        "--for",
        "--force-conflicts",
        "--from-literal",
        "--help",
        "--patch-file",
        "--replicas",
        "--server-side",
        "--set",
        "--subresource",
        "--type",
        "--workspace",
    ];
    let help = |command: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_ingot"))
            .args([command, "--help"])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "ingot {command} --help: {output:?}"
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let helps = [help("run"), help("bmc"), help("power")];
    let mut docs = vec![repo_file("README.md"), repo_file("docs/install.md")];
    for guide in ["seeder", "equinix-addon", "mcm-provider"] {
        docs.push(repo_file(&format!("docs/migrate-from-{guide}.md")));
    }
    let mut named = std::collections::BTreeSet::new();
    for doc in &docs {
        for (at, _) in doc.match_indices("--") {
            let flag: String = doc[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            if flag.starts_with(|c: char| c.is_ascii_lowercase()) {
                named.insert(format!("--{flag}"));
            }
        }
    }
    assert!(named.contains("--rufio-allow-cross-namespace"), "{named:?}");
    for flag in &named {
        if OTHER_COMMANDS.contains(&flag.as_str()) {
            continue;
        }
        let usage = format!("{flag} <");
        assert!(
            helps.iter().any(|h| h.contains(&usage)),
            "the docs name {flag}, which no `ingot` command has (or add it to OTHER_COMMANDS \
             if it is kubectl's, helm's or cargo's)"
        );
    }
    let run = &helps[0];
    for (flag, default) in [
        ("--request-header-timeout-seconds", "10"),
        ("--connection-lifetime-seconds", "120"),
        ("--power-api-max-connections", "64"),
        ("--http-max-connections", "256"),
        ("--events-max-connections", "256"),
        ("--events-max-streams", "1000"),
        ("--http-addr", "0.0.0.0:8080"),
        ("--rufio-machine-interval-seconds", "180"),
    ] {
        let section = run
            .split("\n      --")
            .find(|s| s.starts_with(&format!("{} <", &flag[2..])))
            .unwrap_or_else(|| panic!("{flag} in ingot run --help"));
        assert!(
            section.contains(&format!("[default: {default}]")),
            "{flag}: docs/install.md says {default}: {section}"
        );
    }
    for env in ["INGOT_RUFIO_ALLOW_CROSS_NAMESPACE", "INGOT_BMC_CA_BUNDLE"] {
        assert!(
            docs[1].contains(env) && run.contains(&format!("[env: {env}=")),
            "{env}"
        );
    }
}

/// The rendered documents, by kind and name.
fn documents(rendered: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(rendered)
        .map(|doc| <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .collect()
}

fn find<'a>(
    docs: &'a [serde_yaml::Value],
    kind: &str,
    name: &str,
) -> Option<&'a serde_yaml::Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn container_args(deployment: &serde_yaml::Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// The push events receiver in the chart (`seeder.events.push`): off by default (no flag, port,
/// Service or Secret); on with the seeder group: the four flags, the container port, a Service of
/// the chosen type selecting the operator's pods, and the key Secret (the chart's own, random,
/// or the one named) mounted read-only where --events-key-file reads it. Not with other groups.
#[test]
fn the_push_receiver_renders_only_when_enabled_with_its_flags_service_and_key() {
    let url = "https://10.0.0.5:30444/events";
    let push = |more: &[&str]| -> Vec<String> {
        let mut sets = vec![
            "controllers={seeder}".to_owned(),
            "seeder.events.push.enabled=true".to_owned(),
            format!("seeder.events.push.url={url}"),
        ];
        sets.extend(more.iter().map(|s| (*s).to_owned()));
        sets
    };
    // Off: nothing of it.
    for sets in [
        vec!["controllers={seeder}".to_owned()],
        // Enabled, but without the seeder group.
        vec![
            "controllers={rufio,fencing}".to_owned(),
            "seeder.events.push.enabled=true".to_owned(),
            format!("seeder.events.push.url={url}"),
        ],
    ] {
        let rendered = render("ingot", "ingot-system", &sets, &[]);
        for absent in ["--events-", "name: ingot-push-events", "name: events"] {
            assert!(
                !rendered.contains(absent),
                "{sets:?}: {absent} in {rendered}"
            );
        }
    }

    // On, NodePort, the chart's own key.
    let docs = documents(&render(
        "ingot",
        "ingot-system",
        &push(&[
            "seeder.events.push.service.type=NodePort",
            "seeder.events.push.service.nodePort=30444",
            "seeder.events.push.port=9443",
            "seeder.events.push.maxConnections=32",
            "seeder.events.push.maxStreams=50",
        ]),
        &[],
    ));
    let deployment = find(&docs, "Deployment", "ingot").unwrap();
    let events_flags: Vec<String> = container_args(deployment)
        .into_iter()
        .filter(|a| a.starts_with("--events-"))
        .collect();
    assert_eq!(
        events_flags,
        [
            "--events-addr=0.0.0.0:9443".to_owned(),
            format!("--events-url={url}"),
            "--events-key-file=/etc/ingot/events/key".to_owned(),
            "--events-max-connections=32".to_owned(),
            "--events-max-streams=50".to_owned(),
        ]
    );
    let pod = &deployment["spec"]["template"]["spec"];
    let ports = pod["containers"][0]["ports"].as_sequence().unwrap();
    assert!(
        ports
            .iter()
            .any(|p| p["name"] == "events" && p["containerPort"] == 9443),
        "{ports:?}"
    );
    let mount = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "events-key")
        .unwrap();
    assert_eq!(mount["mountPath"], "/etc/ingot/events");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "events-key")
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "ingot-push-events-key");
    assert_eq!(volume["secret"]["items"][0]["key"], "key");
    assert_eq!(volume["secret"]["items"][0]["path"], "key");
    let service = find(&docs, "Service", "ingot-push-events").unwrap();
    assert_eq!(service["spec"]["type"], "NodePort");
    assert_eq!(service["spec"]["ports"][0]["port"], 9443);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "events");
    assert_eq!(service["spec"]["ports"][0]["nodePort"], 30444);
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let secret = find(&docs, "Secret", "ingot-push-events-key").unwrap();
    let key = base64_decode(secret["data"]["key"].as_str().unwrap());
    assert_eq!(key.len(), 48, "a key of {} bytes", key.len());
    // Random: another rendering (no cluster to keep it from) makes another.
    let again = documents(&render("ingot", "ingot-system", &push(&[]), &[]));
    assert_ne!(
        find(&again, "Secret", "ingot-push-events-key").unwrap()["data"]["key"],
        secret["data"]["key"]
    );
    // ClusterIP by default, no nodePort.
    let service = find(&again, "Service", "ingot-push-events").unwrap();
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert!(service["spec"]["ports"][0]["nodePort"].is_null());

    // A Secret of the user's: mounted by its key, none made.
    let docs = documents(&render(
        "ingot",
        "ingot-system",
        &push(&[
            "seeder.events.push.keySecret.name=bmc-events",
            "seeder.events.push.keySecret.key=hmac",
        ]),
        &[],
    ));
    assert!(!docs.iter().any(|d| d["kind"] == "Secret"));
    let deployment = find(&docs, "Deployment", "ingot").unwrap();
    let volume = deployment["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "events-key")
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "bmc-events");
    assert_eq!(volume["secret"]["items"][0]["key"], "hmac");
    assert_eq!(volume["secret"]["items"][0]["path"], "key");
}

/// A Secret's `data` value, decoded as the API server decodes it.
fn base64_decode(text: &str) -> Vec<u8> {
    serde_json::from_value::<k8s_openapi::ByteString>(serde_json::json!(text))
        .unwrap()
        .0
}

/// Push enabled without its URL (or with one that is not https://): the chart does not render,
/// and says which value to set.
#[test]
fn push_without_its_url_is_refused_naming_the_value() {
    for (url, wanted) in [
        (None, "seeder.events.push.url is empty"),
        (
            Some("http://10.0.0.5:30444/events"),
            "seeder.events.push.url \"http://10.0.0.5:30444/events\" is not https://",
        ),
    ] {
        let mut command = Command::new(helm());
        command
            .args(["template", "ingot"])
            .arg(chart_dir())
            .args(["--set", "controllers={seeder}"])
            .args(["--set", "seeder.events.push.enabled=true"]);
        if let Some(url) = url {
            command.args(["--set", &format!("seeder.events.push.url={url}")]);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success(), "{url:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(wanted), "{stderr}");
    }
}

/// The chart's own key is kept across upgrades (`lookup`): `helm install` then `helm upgrade`
/// on the API server leave the Secret's key as it was, so the BMCs' subscriptions stay valid.
#[tokio::test]
async fn the_charts_push_key_is_kept_across_upgrades() {
    let env = ingot_testenv::shared().await;
    let admin = env.kubeconfig_path();
    let client = env.client().unwrap();
    let suffix = ingot_testenv::random_suffix(6);
    let namespace = format!("push-key-{suffix}");
    let release = format!("ingot-push-{suffix}");
    ensure_namespace(&client, &namespace).await;
    let helm_release = |verb: &str| {
        run(
            Command::new(helm())
                .args([verb, &release])
                .arg(chart_dir())
                .args(["--namespace", &namespace, "--skip-crds"])
                .args(["--set", "controllers={seeder}"])
                .args(["--set", "seeder.events.push.enabled=true"])
                .args([
                    "--set",
                    "seeder.events.push.url=https://10.0.0.5:30444/events",
                ])
                .arg(format!("--kubeconfig={}", admin.display())),
            None,
        )
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let key = async || {
        secrets
            .get(&format!("{release}-push-events-key"))
            .await
            .unwrap()
            .data
            .unwrap()["key"]
            .0
            .clone()
    };
    helm_release("install");
    let installed = key().await;
    assert!(installed.len() >= 32);
    helm_release("upgrade");
    assert_eq!(key().await, installed, "the key changed at the upgrade");
    // Its cluster-wide objects (ClusterRoles, bindings) go with the release.
    run(
        Command::new(helm())
            .args(["uninstall", &release, "--namespace", &namespace])
            .arg(format!("--kubeconfig={}", admin.display())),
        None,
    );
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&namespace, &DeleteParams::default())
        .await;
}

/// NodeHealthCheck's ClusterRole is opt-in (`fencing.nodeHealthCheck.aggregateRole`) and comes
/// with the fencing group only (its rules and their use: crates/ingot/tests/nhc_remediation.rs).
#[test]
fn the_nodehealthcheck_role_is_rendered_only_when_asked_with_fencing() {
    let label = "rbac.ext-remediation/aggregate-to-ext-remediation";
    for (sets, wanted) in [
        (vec!["controllers={fencing}"], false),
        (
            vec![
                "controllers={fencing}",
                "fencing.nodeHealthCheck.aggregateRole=true",
            ],
            true,
        ),
        (
            vec![
                "controllers={seeder}",
                "fencing.nodeHealthCheck.aggregateRole=true",
            ],
            false,
        ),
    ] {
        let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
        let docs = documents(&render("ingot", "ingot-system", &sets, &[]));
        let role = find(&docs, "ClusterRole", "ingot-nhc-remediation");
        assert_eq!(role.is_some(), wanted, "{sets:?}");
        if let Some(role) = role {
            assert_eq!(role["metadata"]["labels"][label], "true");
        }
        // Nothing binds it: NHC's aggregated ClusterRole takes its rules.
        assert!(
            !docs
                .iter()
                .any(|d| d["roleRef"]["name"] == "ingot-nhc-remediation"),
            "{sets:?}"
        );
    }
}
