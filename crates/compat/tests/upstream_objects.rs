//! Objects as the upstream Go programs write them (the shapes of the research notes: their
//! finalizers, annotations, nulls for unset fields, always-present status fields, wrangler
//! conditions) are accepted by ingot's CRDs and read by ingot's types without error.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use ingot_api::{equinix, gardener, rufio, seeder};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Creates `object` (status through the status subresource) and reads it back as `T`.
async fn store_and_read<T>(
    client: &kube::Client,
    discovery: &Discovery,
    namespace: &str,
    mut object: Value,
) -> T
where
    T: Resource + DeserializeOwned + Clone + std::fmt::Debug,
{
    let status = object.as_object_mut().and_then(|o| o.remove("status"));
    let (resource, namespaced) = ingot_compat::resource_of(discovery, &object);
    let api: Api<DynamicObject> = if namespaced {
        object["metadata"]["namespace"] = json!(namespace);
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let name = object["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let dynamic: DynamicObject = serde_json::from_value(object).expect("object");
    api.create(&PostParams::default(), &dynamic)
        .await
        .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    if let Some(status) = status {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("writing the status of {name}: {e}"));
    }
    let stored = api.get(&name).await.expect("read back");
    let value = serde_json::to_value(stored).expect("serialize");
    serde_json::from_value(value)
        .unwrap_or_else(|e| panic!("{name} does not read as the Rust type: {e}"))
}

#[tokio::test]
async fn objects_written_by_the_go_programs_read_without_error() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let namespace = env.namespace("upstream-objects").await.expect("namespace");
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let suffix = ingot_testenv::random_suffix(5);

    // harvester-equinix-addon: Go structs without omitempty write every field, nil pointers
    // and slices as null, and the status in full, including the join token in the clear.
    let pool_name = format!("harvester-pxe-worker-{suffix}");
    let pool: equinix::InstancePool = store_and_read(&client, &discovery, &namespace, json!({
        "apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
        "metadata": {"name": pool_name},
        "spec": {
            "count": 1, "billingCycle": "hourly", "spotInstance": false, "spotPriceMax": "0",
            "customData": "", "usersshKeys": null, "projectsshKeys": null, "features": null, "nosshKeys": false,
            "managementInterface": ["eth0"], "managementBondingOptions": {"mode": "balance-tlb", "miimon": "100"},
            "ipxeScriptUrl": "", "isoUrl": "", "plan": "c3.small.x86", "metro": "SG", "facility": null,
            "nodeCleanupWaitInterval": "5m0s",
            "networkingConfiguration": {"type": "", "interfaceConfiguration": null}
        },
        "status": {"status": "ready", "ready": 1, "requested": 1, "needed": 0, "token": "K10abc::server:def"}
    })).await;
    let status = pool.status.expect("status");
    assert_eq!(
        (status.status.as_str(), status.ready, status.requested),
        ("ready", 1, 1)
    );
    assert_eq!(
        status.token.as_deref(),
        Some("K10abc::server:def"),
        "the original's plaintext token is read (and later cleared)"
    );
    assert_eq!(
        pool.spec.node_cleanup_wait_interval.as_deref(),
        Some("5m0s")
    );

    let instance: equinix::Instance = store_and_read(&client, &discovery, &namespace, json!({
        "apiVersion": "equinix.harvesterhci.io/v1", "kind": "Instance",
        "metadata": {
            "name": format!("{pool_name}-zaoolitj"),
            "labels": {"instancePool": pool_name},
            "annotations": {"token": "metal-token", "password": "abcdefghijklmnop", "reconfig_ipxe_url": "https://example.invalid/master.ipxe"},
            "finalizers": [equinix::INSTANCE_FINALIZER, equinix::WRANGLER_INSTANCE_FINALIZER]
        },
        "spec": {
            "plan": "c3.small.x86", "facility": null, "metro": "SG", "operating_system": "custom_ipxe",
            "billingCycle": "hourly", "projectID": "8f3a0bd2-1111-2222-3333-444455556666",
            "userdata": "#cloud-config\n", "tags": null, "description": "", "ipxeScriptUrl": "https://example.invalid/shell.ipxe",
            "publicIPv4SubnetSize": 0, "alwaysPxe": false, "hardwareReservation_id": "", "spotInstance": false,
            "spotPriceMax": "0", "customData": "", "usersshKeys": null, "projectsshKeys": null, "features": null,
            "nosshKeys": false, "nodeCleanupWaitInterval": "5m0s", "managementInterfaces": ["eth0"],
            "managementBondingOptions": {"mode": "balance-tlb", "miimon": "100"},
            "networkingConfiguration": {"type": "", "interfaceConfiguration": null}
        },
        "status": {"status": "managed", "instanceID": "1c6106a0-13e6-44fa-af2c-bec67d4b6c65", "publicIP": "145.40.73.137", "privateIP": "10.8.23.5"}
    })).await;
    assert_eq!(
        instance.metadata.finalizers.as_deref().map(<[String]>::len),
        Some(2)
    );
    assert_eq!(
        instance.spec.operating_system.as_deref(),
        Some("custom_ipxe")
    );
    assert_eq!(instance.spec.hardware_reservation_id.as_deref(), Some(""));
    assert_eq!(
        instance.status.expect("status").instance_id,
        "1c6106a0-13e6-44fa-af2c-bec67d4b6c65"
    );

    // Seeder: wrangler conditions with string times, the always-present objects, the typo'd
    // condition type, the finalizer, the local-inventory annotations.
    let inventory: seeder::Inventory = store_and_read(&client, &discovery, &namespace, json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
        "metadata": {
            "name": "harvester-659jw",
            "annotations": {seeder::LOCAL_INVENTORY_ANNOTATION: "true", seeder::LOCAL_NODE_NAME_ANNOTATION: "harvester-659jw"},
            "finalizers": [seeder::INVENTORY_FINALIZER]
        },
        "spec": {
            "primaryDisk": "", "managementInterfaceMacAddress": "",
            "baseboardSpec": {"connection": {"host": "172.19.1.172", "port": 623, "insecureTLS": true,
                "authSecretRef": {"name": "harvester-659jw", "namespace": "harvester-system"}}},
            "events": {"enabled": true, "pollingInterval": "1h"},
            "powerActionRequested": "reboot"
        },
        "status": {
            "status": "inventoryNodeReady",
            "conditions": [
                {"type": "bmcObjectCreated", "status": "True", "lastUpdateTime": "2023-03-26T22:50:15Z"},
                {"type": "bmcJobErrorr", "status": "False", "lastUpdateTime": "2023-03-26T22:51:15Z"},
                {"type": "machineNotContactable", "status": "True", "reason": "Error", "message": "dial tcp: i/o timeout", "lastUpdateTime": "2023-03-26T22:52:15Z"}
            ],
            "pxeBootConfig": {"address": "172.19.109.10"},
            "ownerCluster": {"name": "", "namespace": ""},
            "powerAction": {"lastJobName": "harvester-659jw-reboot-x7k2p"},
            "machinePowerState": "on"
        }
    })).await;
    let status = inventory.status.expect("status");
    assert_eq!(status.status.as_deref(), Some(seeder::INVENTORY_NODE_READY));
    assert_eq!(status.conditions[1].type_, "bmcJobErrorr");
    assert_eq!(
        status.power_action.action_status, None,
        "actionStatus stays absent while a job runs"
    );

    // Rufio: Machine status with metav1.Time, a running Job and a completed Task it owns.
    let machine: rufio::Machine = store_and_read(&client, &discovery, &namespace, json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
        "metadata": {"name": "harvester-659jw", "finalizers": [seeder::INVENTORY_FINALIZER]},
        "spec": {"connection": {"host": "172.19.1.172", "port": 623, "insecureTLS": true,
            "authSecretRef": {"name": "harvester-659jw", "namespace": "harvester-system"}}},
        "status": {"powerState": "on", "conditions": [{"type": "Contactable", "status": "True", "lastUpdateTime": "2023-03-26T22:50:15Z"}]}
    })).await;
    assert_eq!(
        machine.status.expect("status").power_state.as_deref(),
        Some(rufio::power_state::ON)
    );

    let job: rufio::Job = store_and_read(&client, &discovery, &namespace, json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job",
        "metadata": {"name": "harvester-659jw-reboot-x7k2p", "labels": {seeder::JOB_INVENTORY_LABEL: "harvester-659jw"}},
        "spec": {"machineRef": {"name": "harvester-659jw", "namespace": namespace},
            "tasks": [{"powerAction": "off"}, {"oneTimeBootDeviceAction": {"device": ["pxe"]}}, {"powerAction": "on"}]},
        "status": {"conditions": [{"type": "Running", "status": "True"}], "startTime": "2023-03-26T22:50:15Z"}
    })).await;
    assert_eq!(job.spec.tasks.len(), 3);

    // Gardener: a Running Machine as the Equinix Metal machine controller leaves it.
    let gardener_machine: gardener::Machine = store_and_read(&client, &discovery, &namespace, json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {
            "name": "eqx-test-machine-deployment-5d855-zn2cw",
            "finalizers": [gardener::MCM_FINALIZER],
            "labels": {"test-label": "test-label", "machine-template-hash": "1841129019", "node": "eqx-test-machine-deployment-5d855-zn2cw"},
            "annotations": {"machinepriority.machine.sapcloud.io": "3"}
        },
        "spec": {"class": {"kind": "MachineClass", "name": "eqx-mc"}, "providerID": "equinixmetal://ny/6f0c1c3e-0000-4000-8000-000000000000"},
        "status": {
            "currentStatus": {"phase": "Running", "lastUpdateTime": "2026-01-01T00:00:00Z"},
            "lastOperation": {"description": "Machine eqx-test-machine-deployment-5d855-zn2cw successfully joined the cluster in 14m3s",
                "lastUpdateTime": "2026-01-01T00:00:00Z", "state": "Successful", "type": "Create"}
        }
    })).await;
    let status = gardener_machine.status.expect("status");
    assert_eq!(
        status.current_status.and_then(|c| c.phase).as_deref(),
        Some("Running")
    );
    assert_eq!(
        gardener_machine.spec.provider_id.as_deref(),
        Some("equinixmetal://ny/6f0c1c3e-0000-4000-8000-000000000000")
    );
}
