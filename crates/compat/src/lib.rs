//! Helpers of the compatibility tests: reading the upstream sample manifests (from the shared
//! fixtures and seed documents, never copied into this repository), applying them to the real
//! API server, and comparing what comes back.

// A test-support crate: a panic with a message is how it reports a failed expectation.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

use kube::api::{DynamicObject, PostParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use kube::{Api, Client};
use serde_json::Value;

/// Parses a multi-document YAML stream into JSON values, skipping empty documents.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|doc| {
            let value = <Value as serde::Deserialize>::deserialize(doc)
                .unwrap_or_else(|e| panic!("invalid YAML: {e}"));
            (!value.is_null()).then_some(value)
        })
        .collect()
}

/// Reads a file of the shared fixtures or seeds.
pub fn shared_file(relative: &str) -> String {
    let path = ingot_testenv::shared_dir().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (set INGOT_SHARED_DIR to the shared directory)",
            path.display()
        )
    })
}

/// The YAML documents of every `.yaml` file in a fixtures folder, with their file names.
pub fn fixture_documents(relative_dir: &str) -> Vec<(String, Value)> {
    let dir = ingot_testenv::shared_dir().join(relative_dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|path| {
            let name = file_name(path);
            let text =
                std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            yaml_documents(&text)
                .into_iter()
                .map(move |doc| (name.clone(), doc))
        })
        .collect()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Every leaf of `expected` is present in `actual` with the same value. Extra fields in
/// `actual` (server defaults, metadata) are allowed. Returns the paths that differ.
pub fn missing_fields(expected: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    compare(expected, actual, String::new(), &mut out);
    out
}

fn compare(expected: &Value, actual: &Value, path: String, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(want), Value::Object(have)) => {
            for (key, value) in want {
                let child = format!("{path}.{key}");
                match have.get(key) {
                    Some(found) => compare(value, found, child, out),
                    None if value.is_null() => {}
                    None => out.push(format!("{child}: missing (expected {value})")),
                }
            }
        }
        (Value::Array(want), Value::Array(have)) if want.len() == have.len() => {
            for (index, (w, h)) in want.iter().zip(have).enumerate() {
                compare(w, h, format!("{path}[{index}]"), out);
            }
        }
        (want, have) if numbers_equal(want, have) || want == have => {}
        (want, have) => out.push(format!("{path}: expected {want}, found {have}")),
    }
}

fn numbers_equal(a: &Value, b: &Value) -> bool {
    matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if x == y)
}

/// The API resource of a manifest's apiVersion and kind, found by discovery.
pub fn resource_of(discovery: &Discovery, manifest: &Value) -> (ApiResource, bool) {
    let api_version = manifest["apiVersion"].as_str().expect("apiVersion");
    let kind = manifest["kind"].as_str().expect("kind");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    for api_group in discovery.groups() {
        if api_group.name() != group {
            continue;
        }
        for (resource, capabilities) in api_group.versioned_resources(version) {
            if resource.kind == kind {
                return (resource, capabilities.scope == Scope::Namespaced);
            }
        }
    }
    panic!("the API server does not serve {api_version} {kind}")
}

/// Creates a manifest (in `namespace` if the kind is namespaced) and returns what the server
/// stored. Server-populated metadata in the manifest (uid, resourceVersion, ...) is dropped,
/// as `kubectl create` requires.
pub async fn create(
    client: &Client,
    discovery: &Discovery,
    namespace: &str,
    manifest: &Value,
) -> kube::Result<Value> {
    let (resource, namespaced) = resource_of(discovery, manifest);
    let mut object: DynamicObject =
        serde_json::from_value(strip_server_metadata(manifest)).expect("object");
    let api: Api<DynamicObject> = if namespaced {
        object.metadata.namespace = Some(namespace.to_owned());
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let created = api.create(&PostParams::default(), &object).await?;
    Ok(serde_json::to_value(created).expect("serialize"))
}

/// A manifest without the metadata a server sets (the HEP's Cluster was copied from a live
/// cluster) and with its namespace left to the caller.
pub fn strip_server_metadata(manifest: &Value) -> Value {
    let mut manifest = manifest.clone();
    if let Some(metadata) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "creationTimestamp",
            "generation",
            "resourceVersion",
            "uid",
            "namespace",
            "managedFields",
        ] {
            metadata.remove(key);
        }
    }
    manifest
}

// The seed documents: their manifests are read from the shared seeds, never copied.

/// The fenced blocks of a Markdown document with the given info string.
pub fn fenced_blocks(markdown: &str, language: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_start().starts_with(&format!("```{language}")) => {
                current = Some(String::new())
            }
            Some(block) if line.trim_start().starts_with("```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// The InstancePool of the original README.
pub fn readme_pool() -> Value {
    let readme = shared_file("seeds/harvester-equinix-addon-README.md");
    let blocks = fenced_blocks(&readme, "yaml");
    assert_eq!(blocks.len(), 1, "the README has one YAML manifest");
    yaml_documents(&blocks[0]).remove(0)
}

/// The fork README (a rendered page): its InstancePool manifest, and every
/// `networkingConfiguration` snippet it shows.
pub fn fork_manifest_and_snippets() -> (Value, Vec<Value>) {
    let text = shared_file("seeds/harvester-equinix-addon-fork-README.txt");
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("apiVersion: equinix.harvesterhci.io/v1"))
        .expect("manifest");
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.trim().is_empty())
            .expect("manifest end");
    let manifest = yaml_documents(&lines[start..end].join("\n")).remove(0);

    let mut snippets = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        if line.trim() == "networkingConfiguration:" {
            let indent = line.len() - line.trim_start().len();
            let body: Vec<&str> = lines[index + 1..]
                .iter()
                .take_while(|l| !l.trim().is_empty() && l.len() - l.trim_start().len() > indent)
                .copied()
                .collect();
            let block = format!(
                "{}\n{}",
                line.trim_start(),
                body.iter()
                    .map(|l| &l[indent..])
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            let value = yaml_documents(&block).remove(0);
            snippets.push(value["networkingConfiguration"].clone());
        }
    }
    (manifest, snippets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn missing_fields_reports_what_a_type_drops() {
        let manifest = json!({
            "apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
            "metadata": {"name": "p"},
            "spec": {"count": 1, "networkingConfiguration": {"interfaceConfiguration": [{"name": "eth1", "vlanIDs": ["1000"]}]}}
        });
        let typed: ingot_api::equinix::InstancePool =
            serde_json::from_value(manifest.clone()).expect("deserialize");
        let back = serde_json::to_value(typed).expect("serialize");
        let missing = missing_fields(&manifest, &back);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].contains("vlanIDs"),
            "a mis-cased field is reported: {missing:?}"
        );
        assert!(
            missing_fields(
                &json!({"a": 1, "b": [1, 2]}),
                &json!({"a": 1.0, "b": [1, 2], "c": 3})
            )
            .is_empty()
        );
        assert_eq!(
            missing_fields(&json!({"b": [1, 2]}), &json!({"b": [2, 1]})).len(),
            2
        );
    }
}
