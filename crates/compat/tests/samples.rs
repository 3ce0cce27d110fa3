//! Every sample manifest of the seed documents and the upstream fixtures applies to the real
//! API server with ingot's CRDs, round-trips through ingot's Rust types without losing a field,
//! and reads back from the server with every field it was given.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use ingot_api::{equinix, gardener, rufio, seeder};
use ingot_compat::{
    create, fenced_blocks, fixture_documents, fork_manifest_and_snippets, missing_fields,
    readme_pool, shared_file, strip_server_metadata, yaml_documents,
};
use kube::Discovery;
use kube::api::{Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Fields of the Gardener provider's samples that Gardener's own CRDs do not declare, so the
/// API server prunes them (ingot installs those CRDs unchanged; upstream MCM sees the same).
/// The Rust types still keep them, which the round trip checks.
const PRUNED_BY_GARDENER_CRDS: &[&str] = &[".spec.template.spec.class.namespace"];

/// Deserializes a manifest into `T` and serializes it back.
fn through<T: DeserializeOwned + Serialize>(manifest: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(manifest.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// Round-trips a manifest through the Rust type of its kind; `None` for core kinds.
fn round_trip(manifest: &Value) -> Option<Result<Value, String>> {
    let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
    let kind = manifest["kind"].as_str().unwrap_or_default();
    Some(match (api_version, kind) {
        ("equinix.harvesterhci.io/v1", "InstancePool") => {
            through::<equinix::InstancePool>(manifest)
        }
        ("equinix.harvesterhci.io/v1", "Instance") => through::<equinix::Instance>(manifest),
        ("metal.harvesterhci.io/v1alpha1", "Inventory") => through::<seeder::Inventory>(manifest),
        ("metal.harvesterhci.io/v1alpha1", "Cluster") => through::<seeder::Cluster>(manifest),
        ("metal.harvesterhci.io/v1alpha1", "AddressPool") => {
            through::<seeder::AddressPool>(manifest)
        }
        ("bmc.tinkerbell.org/v1alpha1", "Machine") => through::<rufio::Machine>(manifest),
        ("bmc.tinkerbell.org/v1alpha1", "Job") => through::<rufio::Job>(manifest),
        ("bmc.tinkerbell.org/v1alpha1", "Task") => through::<rufio::Task>(manifest),
        ("machine.sapcloud.io/v1alpha1", "Machine") => through::<gardener::Machine>(manifest),
        ("machine.sapcloud.io/v1alpha1", "MachineClass") => {
            through::<gardener::MachineClass>(manifest)
        }
        ("machine.sapcloud.io/v1alpha1", "MachineSet") => through::<gardener::MachineSet>(manifest),
        ("machine.sapcloud.io/v1alpha1", "MachineDeployment") => {
            through::<gardener::MachineDeployment>(manifest)
        }
        ("v1", "Secret") => return None,
        other => panic!("no Rust type for {other:?}"),
    })
}

/// Checks one manifest end to end; returns the problems found, prefixed with `origin`.
async fn check(
    client: &kube::Client,
    discovery: &Discovery,
    namespace: &str,
    origin: &str,
    manifest: Value,
) -> Vec<String> {
    let mut problems = Vec::new();
    let kind = manifest["kind"].as_str().unwrap_or_default().to_owned();
    if let Some(result) = round_trip(&manifest) {
        match result {
            Ok(back) => problems.extend(
                missing_fields(&manifest, &back)
                    .into_iter()
                    .map(|p| format!("round trip {p}")),
            ),
            Err(error) => problems.push(format!("does not deserialize: {error}")),
        }
    }
    let stored = match create(client, discovery, namespace, &manifest).await {
        Ok(stored) => stored,
        Err(error) => {
            return vec![format!(
                "{origin} {kind}: refused by the API server: {error}"
            )];
        }
    };
    let mut stored = stored;
    if let Some(status) = manifest.get("status") {
        stored = write_status(client, discovery, namespace, &manifest, status).await;
    }
    if kind != "Secret" {
        let sent = strip_server_metadata(&manifest);
        problems.extend(
            missing_fields(&sent, &stored)
                .into_iter()
                .filter(|p| {
                    !PRUNED_BY_GARDENER_CRDS
                        .iter()
                        .any(|known| p.starts_with(known))
                })
                .map(|p| format!("stored object {p}")),
        );
        if let Some(Err(error)) = round_trip(&stored) {
            problems.push(format!("the stored object does not deserialize: {error}"));
        }
    }
    problems
        .into_iter()
        .map(|p| format!("{origin} {kind}: {p}"))
        .collect()
}

async fn write_status(
    client: &kube::Client,
    discovery: &Discovery,
    namespace: &str,
    manifest: &Value,
    status: &Value,
) -> Value {
    let (resource, namespaced) = ingot_compat::resource_of(discovery, manifest);
    let api: kube::Api<kube::api::DynamicObject> = if namespaced {
        kube::Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        kube::Api::all_with(client.clone(), &resource)
    };
    let name = manifest["metadata"]["name"].as_str().expect("name");
    let updated = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("writing the status of {name}: {e}"));
    serde_json::to_value(updated).expect("serialize")
}

/// Gives a cluster-scoped object a name of its own, so tests sharing a control plane do not
/// collide.
fn unique_name(mut manifest: Value, suffix: &str) -> Value {
    let name = manifest["metadata"]["name"]
        .as_str()
        .unwrap_or("sample")
        .to_owned();
    manifest["metadata"]["name"] = Value::String(format!("{name}-{suffix}"));
    manifest
}

async fn setup() -> (kube::Client, Discovery, String) {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let namespace = env.namespace("samples").await.expect("namespace");
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    (client, discovery, namespace)
}

fn fail_on(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "compatibility problems:\n  {}",
        problems.join("\n  ")
    );
}

#[tokio::test]
async fn seed_instance_pools_apply_and_round_trip() {
    let (client, discovery, namespace) = setup().await;
    let suffix = ingot_testenv::random_suffix(5);
    let mut problems = Vec::new();

    let pool = readme_pool();
    problems.extend(
        check(
            &client,
            &discovery,
            &namespace,
            "README",
            unique_name(pool.clone(), &suffix),
        )
        .await,
    );

    let (fork_pool, snippets) = fork_manifest_and_snippets();
    problems.extend(
        check(
            &client,
            &discovery,
            &namespace,
            "fork README",
            unique_name(fork_pool, &format!("fork-{suffix}")),
        )
        .await,
    );

    let types: Vec<&str> = snippets
        .iter()
        .map(|s| s["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        types,
        [
            "hybrid",
            "hybrid",
            "hybrid-bonded",
            "layer2-bonded",
            "layer2-individual"
        ],
        "the fork README's five variants"
    );
    for (index, snippet) in snippets.into_iter().enumerate() {
        let mut variant = pool.clone();
        variant["spec"]["networkingConfiguration"] = snippet;
        let variant = unique_name(variant, &format!("net{index}-{suffix}"));
        problems.extend(
            check(
                &client,
                &discovery,
                &namespace,
                &format!("fork README variant {index}"),
                variant,
            )
            .await,
        );
    }
    fail_on(problems);
}

#[tokio::test]
async fn hep_secret_inventory_and_cluster_apply_and_round_trip() {
    let (client, discovery, namespace) = setup().await;
    let hep = shared_file("seeds/harvester-seeder-embedded-mode-HEP.md");
    let json_blocks = fenced_blocks(&hep, "json");
    assert_eq!(
        json_blocks.len(),
        3,
        "the HEP shows a Secret, an Inventory and its status as JSON"
    );
    let parse = |block: &String| -> Value { serde_json::from_str(block).expect("HEP JSON") };
    // The HEP posts these to Harvester's typed endpoints (/v1/harvester/secrets and
    // /v1/harvester/metal.harvesterhci.io.inventories), whose path carries the type.
    let mut secret = parse(&json_blocks[0]);
    secret["apiVersion"] = json!("v1");
    secret["kind"] = json!("Secret");
    let mut inventory = parse(&json_blocks[1]);
    inventory["apiVersion"] = json!("metal.harvesterhci.io/v1alpha1");
    inventory["status"] = parse(&json_blocks[2]);
    let mut documents = vec![secret, inventory];
    let yaml_blocks = fenced_blocks(&hep, "yaml");
    assert_eq!(
        yaml_blocks.len(),
        1,
        "the HEP shows the local Cluster as YAML"
    );
    documents.extend(yaml_documents(&yaml_blocks[0]));
    let kinds: Vec<&str> = documents
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["Secret", "Inventory", "Cluster"]);

    let mut problems = Vec::new();
    for document in documents {
        problems.extend(check(&client, &discovery, &namespace, "HEP", document).await);
    }
    fail_on(problems);
}

#[tokio::test]
async fn upstream_sample_manifests_apply_and_round_trip() {
    let (client, discovery, _) = setup().await;
    let mut documents = fixture_documents("fixtures/upstream-samples");
    documents.extend(fixture_documents("fixtures/upstream-samples/mcm"));
    documents.extend(fixture_documents("fixtures/mcm-provider-samples"));
    documents.extend(fixture_documents("fixtures/mcm-provider-samples/machines"));
    assert!(
        documents.len() >= 20,
        "expected the whole sample set, found {}",
        documents.len()
    );

    // Several files reuse names (Secret and Inventory "node"): each file gets its own namespace.
    let env = ingot_testenv::shared().await;
    let mut namespaces = std::collections::HashMap::new();
    let mut problems = Vec::new();
    for (file, document) in documents {
        if !namespaces.contains_key(&file) {
            namespaces.insert(
                file.clone(),
                env.namespace("samples").await.expect("namespace"),
            );
        }
        let namespace = &namespaces[&file];
        problems.extend(check(&client, &discovery, namespace, &file, document).await);
    }
    fail_on(problems);
}
