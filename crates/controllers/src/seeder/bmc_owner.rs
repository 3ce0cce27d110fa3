//! Seeder's second admission rule, enforced by the Inventory controller: one Inventory per BMC
//! (`spec.baseboardSpec.connection` host and port). Seeder refused the second Inventory in a
//! validating webhook; a CRD's CEL rules cannot see other objects, so ingot lets it be created
//! and holds it instead: the Inventory created first (by `creationTimestamp`, then
//! `namespace/name`) has the BMC; a later one gets no rufio Machine (so no second session to the
//! BMC), an error condition naming the fields and the Inventory that has the BMC, and a Warning
//! Event. It proceeds once that Inventory is deleted or points elsewhere.
//!
//! Hosts compare case-insensitively (DNS names are); the port is the one Rufio uses, 623 when
//! the manifest leaves it out (the type's default). Local and provisioned Inventories alike.

use ingot_api::seeder::Inventory;
use kube::ResourceExt;

/// The wrangler condition of a held Inventory (an error while held, `False` after).
pub const BMC_IN_USE: &str = "bmcInUse";

/// The BMC an Inventory names, as compared: host (trimmed, lower case) and port.
pub fn bmc_of(inventory: &Inventory) -> (String, i64) {
    let connection = &inventory.spec.baseboard_spec.connection;
    (connection.host.trim().to_ascii_lowercase(), connection.port)
}

/// Where an Inventory stands in the order that decides who has a BMC.
fn rank(inventory: &Inventory) -> (Option<k8s_openapi::jiff::Timestamp>, String, String) {
    (
        inventory.metadata.creation_timestamp.as_ref().map(|t| t.0),
        inventory.namespace().unwrap_or_default(),
        inventory.name_any(),
    )
}

/// The Inventory that has `inventory`'s BMC when it is not `inventory` itself: the first, by
/// creation time then `namespace/name`, of the Inventories naming the same host and port
/// (those being deleted included: their Machine is still there until they are gone).
pub fn owner_of_bmc<'a, I>(inventory: &Inventory, all: I) -> Option<&'a Inventory>
where
    I: IntoIterator<Item = &'a Inventory>,
{
    let bmc = bmc_of(inventory);
    if bmc.0.is_empty() {
        return None;
    }
    let me = rank(inventory);
    all.into_iter()
        .filter(|other| rank(other) != me && bmc_of(other) == bmc)
        .filter(|other| rank(other) < me)
        .min_by_key(|other| rank(other))
}

/// The message of a held Inventory's condition and Event.
pub fn held_message(inventory: &Inventory, owner: &Inventory) -> String {
    let connection = &inventory.spec.baseboard_spec.connection;
    format!(
        "spec.baseboardSpec.connection.host/port: BMC {}:{} is Inventory {}/{}'s (one Inventory per BMC; no Machine is made for this one): point this Inventory at its own BMC, or delete the other",
        connection.host.trim(),
        connection.port,
        owner.namespace().unwrap_or_default(),
        owner.name_any(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inventory(
        namespace: &str,
        name: &str,
        created: &str,
        host: &str,
        port: Option<i64>,
    ) -> Inventory {
        let mut connection = json!({"host": host, "insecureTLS": true});
        if let Some(port) = port {
            connection["port"] = json!(port);
        }
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"baseboardSpec": {"connection": connection}}
        }))
        .unwrap()
    }

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-01T00:00:05Z";

    #[test]
    fn the_later_inventory_is_held_by_the_earlier_and_not_the_other_way() {
        let first = inventory("a", "zz", T1, "10.0.0.5", Some(623));
        let second = inventory("a", "aa", T2, "10.0.0.5", Some(623));
        let all = [first.clone(), second.clone()];
        assert_eq!(owner_of_bmc(&second, &all).unwrap().name_any(), "zz");
        assert!(owner_of_bmc(&first, &all).is_none());
        let message = held_message(&second, &first);
        assert!(
            message.contains("spec.baseboardSpec.connection.host/port"),
            "{message}"
        );
        assert!(
            message.contains("10.0.0.5:623") && message.contains("a/zz"),
            "{message}"
        );
    }

    #[test]
    fn same_time_is_decided_by_namespace_then_name() {
        let a = inventory("ns1", "b", T1, "bmc.example", Some(623));
        let b = inventory("ns2", "a", T1, "bmc.example", Some(623));
        let c = inventory("ns1", "c", T1, "bmc.example", Some(623));
        let all = [a.clone(), b.clone(), c.clone()];
        assert!(owner_of_bmc(&a, &all).is_none());
        assert_eq!(owner_of_bmc(&b, &all).unwrap().name_any(), "b");
        assert_eq!(owner_of_bmc(&c, &all).unwrap().name_any(), "b");
    }

    #[test]
    fn hosts_compare_without_case_and_a_missing_port_is_rufios_623() {
        let first = inventory("a", "one", T1, "BMC-1.Example", None);
        let second = inventory("a", "two", T2, " bmc-1.example", Some(623));
        assert!(owner_of_bmc(&second, &[first.clone(), second.clone()]).is_some());
    }

    #[test]
    fn another_port_or_host_is_another_bmc() {
        let first = inventory("a", "one", T1, "10.0.0.5", Some(623));
        for other in [
            inventory("a", "two", T2, "10.0.0.5", Some(624)),
            inventory("a", "two", T2, "10.0.0.6", Some(623)),
        ] {
            assert!(owner_of_bmc(&other, &[first.clone(), other.clone()]).is_none());
        }
    }

    #[test]
    fn an_inventory_alone_or_with_itself_is_not_held() {
        let one = inventory("a", "one", T1, "10.0.0.5", Some(623));
        assert!(owner_of_bmc(&one, std::slice::from_ref(&one)).is_none());
        assert!(owner_of_bmc(&one, std::iter::empty()).is_none());
    }
}
