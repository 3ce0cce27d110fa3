//! Small accessors over `serde_json::Value` for Redfish payloads.

use crate::types::Health;
use serde_json::Value;

pub fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

pub fn uint(v: &Value, key: &str) -> Option<u64> {
    let x = v.get(key)?;
    x.as_u64()
        .or_else(|| x.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

/// The `@odata.id` of a navigation property.
pub fn link(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(|l| l.get("@odata.id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

pub fn list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Health from a `Status` object; `rollup` prefers `HealthRollup`.
pub fn status_health(status: &Value, rollup: bool) -> Option<Health> {
    let pick = |k: &str| {
        status
            .get(k)
            .and_then(Value::as_str)
            .and_then(Health::from_redfish)
    };
    if rollup {
        pick("HealthRollup").or_else(|| pick("Health"))
    } else {
        pick("Health")
    }
}

pub fn health(resource: &Value, rollup: bool) -> Option<Health> {
    resource
        .get("Status")
        .and_then(|s| status_health(s, rollup))
}
