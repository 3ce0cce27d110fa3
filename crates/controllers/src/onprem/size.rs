//! How large a server is, and whether it is large enough: a pool's `spec.inventoryMinimum`
//! (the part of an Equinix plan that still means something on premises).
//!
//! An Inventory says nothing of its hardware (Seeder's schema has no such field), so ingot reads
//! it once from the BMC (Redfish `Processors`, `Memory`, `Storage`; IPMI FRU has none of it)
//! when the Inventory first turns ready, and records it on the Inventory ([`SIZE_ANNOTATIONS`],
//! [`SIZE_READ_ANNOTATION`]). A size the BMC does not report is left out: such a server never
//! fits a minimum on that dimension, and the refusal says so. Delete
//! [`SIZE_READ_ANNOTATION`] to have it read again (after a hardware change).

use std::collections::BTreeMap;

use ingot_api::seeder::Inventory;
use kube::ResourceExt;

/// The cores of every processor, summed.
pub const CORES_ANNOTATION: &str = "provisioning.ingot.dev/cores";
/// The memory in GiB (as reported, else the modules' sum), rounded down.
pub const MEMORY_ANNOTATION: &str = "provisioning.ingot.dev/memory-gib";
/// The largest disk in GiB (2^30 bytes), rounded down.
pub const DISK_ANNOTATION: &str = "provisioning.ingot.dev/disk-gib";
/// When the size was read from the BMC (RFC 3339): present, the size is known, and a dimension
/// absent from the annotations is one the BMC does not report.
pub const SIZE_READ_ANNOTATION: &str = "provisioning.ingot.dev/size-read";
/// Every size annotation ingot writes.
pub const SIZE_ANNOTATIONS: [&str; 3] = [CORES_ANNOTATION, MEMORY_ANNOTATION, DISK_ANNOTATION];

const GIB: u64 = 1 << 30;

/// The least a pool's server must have; `None` fields ask nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Minimum {
    pub cores: Option<u64>,
    pub memory_gib: Option<u64>,
    pub disk_gib: Option<u64>,
}

impl Minimum {
    /// A pool's `spec.inventoryMinimum` (the schema admits 1 and more).
    pub fn of(spec: Option<&ingot_api::equinix::InventoryMinimum>) -> Self {
        let positive = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok()).filter(|v| *v > 0);
        spec.map_or_else(Minimum::default, |m| Minimum {
            cores: positive(m.cores),
            memory_gib: positive(m.memory_gib),
            disk_gib: positive(m.disk_gib),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.cores.is_none() && self.memory_gib.is_none() && self.disk_gib.is_none()
    }
}

impl std::fmt::Display for Minimum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            self.cores.map(|c| format!("{c} cores")),
            self.memory_gib.map(|m| format!("{m} GiB of memory")),
            self.disk_gib.map(|d| format!("a {d} GiB disk")),
        ]
        .into_iter()
        .flatten()
        .collect();
        f.write_str(&parts.join(", "))
    }
}

/// Whether an Inventory is large enough.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fit {
    Yes,
    /// Its size has not been read from its BMC yet.
    Unknown,
    /// Too small, or its BMC does not report a size asked for: why, for the refusal.
    No(String),
}

/// The size annotations the BMC's facts give (a dimension it does not report is absent).
pub fn size_annotations(facts: &ingot_bmc::Inventory) -> BTreeMap<&'static str, String> {
    let cores: u64 = facts
        .cpus
        .iter()
        .filter_map(|c| c.cores)
        .map(u64::from)
        .sum();
    let modules_mib: u64 = facts.memory.iter().filter_map(|m| m.capacity_mib).sum();
    let memory_gib = facts
        .total_memory_gib
        .filter(|g| g.is_finite() && *g > 0.0)
        .map(|g| g.floor() as u64)
        .or((modules_mib > 0).then_some(modules_mib / 1024));
    let disk_gib = facts
        .disks
        .iter()
        .filter_map(|d| d.capacity_bytes)
        .max()
        .map(|b| b / GIB);
    [
        (CORES_ANNOTATION, (cores > 0).then_some(cores)),
        (MEMORY_ANNOTATION, memory_gib),
        (DISK_ANNOTATION, disk_gib),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?.to_string())))
    .collect()
}

/// Whether the Inventory's size was read from its BMC.
pub fn size_read(inventory: &Inventory) -> bool {
    inventory.annotations().contains_key(SIZE_READ_ANNOTATION)
}

/// Whether `inventory` has at least `minimum`.
pub fn fits(inventory: &Inventory, minimum: &Minimum) -> Fit {
    if minimum.is_empty() {
        return Fit::Yes;
    }
    if !size_read(inventory) {
        return Fit::Unknown;
    }
    let annotations = inventory.annotations();
    let has = |key: &str| -> Option<u64> { annotations.get(key)?.trim().parse().ok() };
    let mut short = Vec::new();
    for (asked, key, what) in [
        (minimum.cores, CORES_ANNOTATION, "cores"),
        (minimum.memory_gib, MEMORY_ANNOTATION, "GiB of memory"),
        (minimum.disk_gib, DISK_ANNOTATION, "GiB on its largest disk"),
    ] {
        let Some(asked) = asked else { continue };
        match has(key) {
            Some(n) if n >= asked => {}
            Some(n) => short.push(format!("{n} {what}")),
            None => short.push(format!("its BMC reports no {what}")),
        }
    }
    if short.is_empty() {
        Fit::Yes
    } else {
        Fit::No(short.join(", "))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inventory(annotations: serde_json::Value) -> Inventory {
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "node0", "namespace": "metal", "annotations": annotations},
            "spec": {"baseboardSpec": {"connection": {"host": "10.0.0.9", "port": 623,
                "insecureTLS": true, "authSecretRef": {"name": "s", "namespace": "metal"}}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_size_is_summed_from_the_bmc_s_parts() {
        let facts: ingot_bmc::Inventory = serde_json::from_value(json!({
            "vendor": "dell", "powerState": "on", "health": {},
            "cpus": [{"id": "CPU.1", "cores": 28}, {"id": "CPU.2", "cores": 28}, {"id": "CPU.3"}],
            "memory": [{"id": "DIMM.1", "capacityMib": 32768}, {"id": "DIMM.2", "capacityMib": 32768}],
            "totalMemoryGib": null,
            "nics": [],
            "disks": [{"id": "Disk.0", "capacityBytes": 480_103_981_056_u64},
                {"id": "Disk.1", "capacityBytes": 1_920_383_410_176_u64}]
        }))
        .unwrap();
        let size = size_annotations(&facts);
        assert_eq!(size[CORES_ANNOTATION], "56");
        assert_eq!(size[MEMORY_ANNOTATION], "64");
        assert_eq!(size[DISK_ANNOTATION], "1788");
        // A reported total wins over the modules; nothing reported, nothing written.
        let mut reported = facts.clone();
        reported.total_memory_gib = Some(255.9);
        assert_eq!(size_annotations(&reported)[MEMORY_ANNOTATION], "255");
        assert!(size_annotations(&ingot_bmc::Inventory::default()).is_empty());
    }

    #[test]
    fn a_server_fits_when_it_has_every_dimension_asked_for() {
        let minimum = Minimum {
            cores: Some(32),
            memory_gib: Some(128),
            disk_gib: None,
        };
        assert_eq!(fits(&inventory(json!({})), &Minimum::default()), Fit::Yes);
        assert_eq!(fits(&inventory(json!({})), &minimum), Fit::Unknown);
        let read = |cores: &str, memory: Option<&str>| {
            let mut a =
                json!({SIZE_READ_ANNOTATION: "2026-12-07T05:00:00Z", CORES_ANNOTATION: cores});
            if let Some(m) = memory {
                a[MEMORY_ANNOTATION] = m.into();
            }
            inventory(a)
        };
        assert_eq!(fits(&read("56", Some("256")), &minimum), Fit::Yes);
        assert_eq!(
            fits(&read("16", Some("128")), &minimum),
            Fit::No("16 cores".into())
        );
        assert_eq!(
            fits(&read("56", None), &minimum),
            Fit::No("its BMC reports no GiB of memory".into())
        );
        assert_eq!(minimum.to_string(), "32 cores, 128 GiB of memory");
    }
}
