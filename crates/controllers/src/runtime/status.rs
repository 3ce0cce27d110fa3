//! Status written only when it changed.
//!
//! A reconcile computes the whole status it wants; comparing it with what the object holds
//! (as JSON, so that field order and defaults do not count) saves a write, an event on every
//! watcher and a resourceVersion bump on each pass of a steady fleet.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Whether `desired` differs from `current` once both are JSON.
pub fn changed<S: Serialize>(current: Option<&S>, desired: &S) -> bool {
    let desired = serde_json::to_value(desired).ok();
    let current = current.and_then(|c| serde_json::to_value(c).ok());
    current != desired
}

/// Merge-patches `status` to `desired` when it differs from `current`; returns whether it
/// wrote. Fields `desired` leaves out (None) are left as they are by the merge patch.
pub async fn patch_if_changed<K, S>(
    api: &Api<K>,
    name: &str,
    current: Option<&S>,
    desired: &S,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize,
{
    if !changed(current, desired) {
        return Ok(false);
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": desired })),
    )
    .await?;
    Ok(true)
}

/// The merge-patch body that turns `current` into `desired`: `desired` as JSON, with `null` for
/// each field that `current` has and `desired` leaves out, at every depth of nested objects, so
/// that a cleared field is removed rather than left as it was.
pub fn replacing<S: Serialize>(current: &S, desired: &S) -> Result<serde_json::Value, kube::Error> {
    let mut body = serde_json::to_value(desired).map_err(kube::Error::SerdeError)?;
    let old = serde_json::to_value(current).map_err(kube::Error::SerdeError)?;
    null_removed(&old, &mut body);
    Ok(body)
}

fn null_removed(old: &serde_json::Value, new: &mut serde_json::Value) {
    if let (serde_json::Value::Object(old), serde_json::Value::Object(new)) = (old, new) {
        for (key, was) in old {
            match new.get_mut(key) {
                Some(now) => null_removed(was, now),
                None => {
                    new.insert(key.clone(), serde_json::Value::Null);
                }
            }
        }
    }
}

/// Writes `desired` over `current` (see [`replacing`]) when it differs; returns whether it
/// wrote.
pub async fn replace_if_changed<K, S>(
    api: &Api<K>,
    name: &str,
    current: &S,
    desired: &S,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize,
{
    if !changed(Some(current), desired) {
        return Ok(false);
    }
    let body = replacing(current, desired)?;
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": body })),
    )
    .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct S {
        a: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        b: Option<String>,
    }

    #[test]
    fn only_a_different_status_is_a_change() {
        let now = S { a: 1, b: None };
        assert!(!changed(Some(&S { a: 1, b: None }), &now));
        assert!(changed(Some(&S { a: 2, b: None }), &now));
        assert!(changed(
            Some(&S {
                a: 1,
                b: Some("x".into())
            }),
            &now
        ));
        assert!(changed(None, &now));
    }

    #[test]
    fn a_nested_field_cleared_is_written_as_null() {
        let old = serde_json::json!({"a": {"b": 1, "c": 2}, "d": [1]});
        let new = serde_json::json!({"a": {"c": 2}, "d": []});
        assert_eq!(
            replacing(&old, &new).unwrap(),
            serde_json::json!({"a": {"b": null, "c": 2}, "d": []})
        );
    }

    #[test]
    fn a_field_cleared_is_written_as_null() {
        let before = S {
            a: 1,
            b: Some("x".into()),
        };
        let after = S { a: 2, b: None };
        assert_eq!(
            replacing(&before, &after).unwrap(),
            json!({"a": 2, "b": null})
        );
        assert_eq!(replacing(&after, &after).unwrap(), json!({"a": 2}));
    }
}
