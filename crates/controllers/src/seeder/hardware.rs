//! Hardware facts → Node labels `manufacturer`, `model`, `serialNumber` (unprefixed: the
//! Harvester UI reads exactly these keys), as Seeder's cluster-event controller writes them.
//!
//! Values are sanitised as Seeder does (every space and dot removed: `Dell Inc.` → `DellInc`),
//! then made valid label values, which Seeder does not (a `/`, `(` or a value over 63 characters
//! made its whole Node update fail): any other character outside `[A-Za-z0-9_-]` becomes `_`,
//! the value is cut to 63 characters and trimmed to start and end alphanumeric. A value that
//! sanitises to nothing is not written.

use std::collections::BTreeMap;

use ingot_bmc::Inventory as Facts;
use serde_json::{Value, json};

pub const MANUFACTURER_LABEL: &str = "manufacturer";
pub const MODEL_LABEL: &str = "model";
pub const SERIAL_NUMBER_LABEL: &str = "serialNumber";
const MAX_LABEL_VALUE: usize = 63;

/// Seeder's `trimString`: every space and dot removed.
pub fn seeder_trim(value: &str) -> String {
    value.chars().filter(|c| *c != ' ' && *c != '.').collect()
}

/// Seeder's value made a valid label value, or `None` when nothing is left.
pub fn label_value(raw: &str) -> Option<String> {
    let replaced: String = seeder_trim(raw)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_LABEL_VALUE)
        .collect();
    let trimmed = replaced.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// The labels the facts give (the BMC's System first, its Chassis where the System is silent).
pub fn wanted_labels(facts: &Facts) -> BTreeMap<&'static str, String> {
    [
        (MANUFACTURER_LABEL, &facts.manufacturer),
        (MODEL_LABEL, &facts.model),
        (SERIAL_NUMBER_LABEL, &facts.serial_number),
    ]
    .into_iter()
    .filter_map(|(key, raw)| Some((key, label_value(raw.as_deref()?)?)))
    .collect()
}

/// A merge patch of the labels that differ, or `None` when the Node already has them all.
pub fn label_patch(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<&'static str, String>,
) -> Option<Value> {
    let changed: serde_json::Map<String, Value> = wanted
        .iter()
        .filter(|(k, v)| current.get(**k) != Some(*v))
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    (!changed.is_empty()).then(|| json!({"metadata": {"labels": changed}}))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn seeders_trim_then_a_valid_value() {
        assert_eq!(label_value("Dell Inc.").as_deref(), Some("DellInc"));
        assert_eq!(
            label_value("PowerEdge R640").as_deref(),
            Some("PowerEdgeR640")
        );
        assert_eq!(label_value("IL-1U").as_deref(), Some("IL-1U"));
        assert_eq!(
            label_value("ProLiant DL380 Gen10 (P/N 868703-B21)").as_deref(),
            Some("ProLiantDL380Gen10_P_N868703-B21")
        );
        assert_eq!(label_value(" .-_ ").as_deref(), None);
        assert_eq!(label_value("").as_deref(), None);
        assert_eq!(label_value("-x-").as_deref(), Some("x"));
        let long = "A".repeat(80) + "-";
        assert_eq!(label_value(&long).unwrap().len(), 63);
        assert_eq!(label_value("Ünïcode").as_deref(), Some("n_code"));
    }

    #[test]
    fn every_value_is_a_valid_label_value() {
        let valid = |v: &str| {
            v.len() <= 63
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())
        };
        for raw in [
            "a/b",
            "(x)",
            "x__",
            "--",
            "a.b.c",
            "1 2 3",
            &"z".repeat(70),
            "a\u{0}b",
            "Sushy Emulator",
        ] {
            if let Some(v) = label_value(raw) {
                assert!(valid(&v), "{raw:?} -> {v:?}");
            }
        }
    }

    #[test]
    fn only_changed_labels_are_patched() {
        let facts = Facts {
            manufacturer: Some("Sushy Emulator".into()),
            model: Some("3500RX".into()),
            serial_number: None,
            ..Facts::default()
        };
        let wanted = wanted_labels(&facts);
        assert_eq!(wanted.len(), 2);
        let mut current = BTreeMap::from([("manufacturer".to_owned(), "SushyEmulator".to_owned())]);
        assert_eq!(
            label_patch(&current, &wanted),
            Some(json!({"metadata": {"labels": {"model": "3500RX"}}}))
        );
        current.insert("model".into(), "3500RX".into());
        assert_eq!(label_patch(&current, &wanted), None);
    }
}
