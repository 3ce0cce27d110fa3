//! Finalizers added and removed with optimistic concurrency.
//!
//! Each write carries the `resourceVersion` the decision was made on, so a write made on a
//! stale copy (another replica, a concurrent edit) fails with 409 instead of dropping a
//! finalizer someone else just added; the watch then brings the new object and the
//! reconcile decides again.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Whether `object` holds `finalizer`.
pub fn has<K: Resource>(object: &K, finalizer: &str) -> bool {
    object
        .meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer)
}

/// `current` with each of `wanted` appended (in order) where missing, or `None` if none is.
pub fn with(current: &[String], wanted: &[&str]) -> Option<Vec<String>> {
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|w| !current.iter().any(|c| c == w))
        .collect();
    (!missing.is_empty()).then(|| {
        current
            .iter()
            .cloned()
            .chain(missing.into_iter().map(str::to_owned))
            .collect()
    })
}

/// `current` without `gone`, or `None` if it is not there.
pub fn without(current: &[String], gone: &str) -> Option<Vec<String>> {
    current
        .iter()
        .any(|f| f == gone)
        .then(|| current.iter().filter(|f| *f != gone).cloned().collect())
}

/// The merge patch that sets `finalizers` on the object as it was at `resource_version`.
pub fn patch(finalizers: &[String], resource_version: Option<&str>) -> serde_json::Value {
    match resource_version {
        Some(version) => {
            json!({"metadata": {"finalizers": finalizers, "resourceVersion": version}})
        }
        None => json!({"metadata": {"finalizers": finalizers}}),
    }
}

/// Writes `finalizers` on `object`, guarded by its `resourceVersion`; returns the object
/// as the API server now has it.
pub async fn set<K>(api: &Api<K>, object: &K, finalizers: &[String]) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch(finalizers, object.meta().resource_version.as_deref())),
    )
    .await
}

/// Adds `wanted` (in order) where missing; `None` when nothing was written.
pub async fn add<K>(api: &Api<K>, object: &K, wanted: &[&str]) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match with(object.finalizers(), wanted) {
        Some(finalizers) => set(api, object, &finalizers).await.map(Some),
        None => Ok(None),
    }
}

/// Removes `gone`; `None` when it was not there.
pub async fn remove<K>(api: &Api<K>, object: &K, gone: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match without(object.finalizers(), gone) {
        Some(finalizers) => set(api, object, &finalizers).await.map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn adds_what_is_missing_in_order_and_removes_one() {
        assert_eq!(with(&[], &["a", "b"]), Some(owned(&["a", "b"])));
        assert_eq!(
            with(&owned(&["x", "b"]), &["a", "b"]),
            Some(owned(&["x", "b", "a"]))
        );
        assert_eq!(with(&owned(&["a", "b"]), &["a", "b"]), None);
        assert_eq!(without(&owned(&["a", "b"]), "a"), Some(owned(&["b"])));
        assert_eq!(without(&owned(&["b"]), "a"), None);
    }

    #[test]
    fn the_patch_carries_the_resource_version_it_was_decided_on() {
        assert_eq!(
            patch(&owned(&["a"]), Some("7")),
            json!({"metadata": {"finalizers": ["a"], "resourceVersion": "7"}})
        );
        assert_eq!(patch(&[], None), json!({"metadata": {"finalizers": []}}));
    }
}
