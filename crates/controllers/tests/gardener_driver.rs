//! The Equinix Metal driver against the Metal emulator (the real HTTP client underneath,
//! injected through the driver's cloud factory): upstream's providerSpec and Secret keys,
//! provider ids, idempotent create, error classes, orphan listing, and the sample class with
//! hardware reservations.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use ingot_api::gardener::{Machine, MachineClass, MachineSpec};
use ingot_controllers::gardener::driver::equinix::{EquinixClouds, decode_provider_spec};
use ingot_controllers::gardener::driver::{
    Code, Driver, EquinixDriver, MachineRequest, SecretData, device_uuid,
};
use ingot_metal::equinix::RateLimiter;
use ingot_metal_sim::{EndpointFault, HardwareReservationConfig, PlanMetro, SimConfig, SimServer};
use kube::api::ObjectMeta;
use serde_json::{Value, json};

const TOKEN: &str = "driver-test-token";
const PROJECT: &str = "e3db5484-f789-43e1-8aea-a1921cae50dd";
const CLUSTER_TAG: &str = "kubernetes.io/cluster/shoot--test: 1";
const ROLE_TAG: &str = "kubernetes.io/role/node: 1";

struct Fixture {
    sim: SimServer,
    driver: EquinixDriver,
    class: MachineClass,
    secret: SecretData,
}

fn class(provider_spec: Value) -> MachineClass {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": "eqx-mc", "namespace": "default"},
        "provider": "EquinixMetal",
        "providerSpec": provider_spec,
        "secretRef": {"name": "test-secret", "namespace": "default"},
    }))
    .unwrap()
}

fn provider_spec() -> Value {
    json!({
        "projectID": PROJECT,
        "OS": "ubuntu_22_04",
        "metro": "ny",
        "machineType": "c3.small.x86",
        "billingCycle": "hourly",
        "facilities": ["ewr1", "ny5"],
        "tags": ["Name: sample", CLUSTER_TAG, ROLE_TAG, "tag1: tag1-value"],
    })
}

fn secret(token: &str) -> SecretData {
    let mut data = SecretData::default();
    data.0
        .insert("apiToken".into(), format!("{token}\n").into_bytes());
    data.0.insert(
        "userData".into(),
        b"#!/bin/sh\necho I am user data\n".to_vec(),
    );
    data
}

fn machine(name: &str, provider_id: Option<&str>) -> Machine {
    Machine {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        spec: MachineSpec {
            provider_id: provider_id.map(str::to_owned),
            ..MachineSpec::default()
        },
        status: None,
    }
}

async fn fixture() -> Fixture {
    let sim = SimServer::start(
        SimConfig::single(TOKEN, PROJECT),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let clouds = EquinixClouds {
        base_url: sim.base_url(),
        limiter: Arc::new(RateLimiter::new(1000.0, 100)),
        observer: Default::default(),
    };
    Fixture {
        sim,
        driver: EquinixDriver::new(Arc::new(clouds)),
        class: class(provider_spec()),
        secret: secret(TOKEN),
    }
}

impl Fixture {
    fn req<'a>(&'a self, m: &'a Machine) -> MachineRequest<'a> {
        MachineRequest {
            machine: m,
            class: &self.class,
            secret: &self.secret,
        }
    }

    fn devices(&self) -> Vec<Value> {
        self.sim
            .sim()
            .device_listing(Some(PROJECT))
            .into_iter()
            .map(|e| e["device"].clone())
            .filter(|d| d["state"] != "deleted")
            .collect()
    }
}

#[tokio::test]
async fn create_sends_the_provider_spec_and_is_idempotent_by_hostname_and_cluster_tag() {
    let f = fixture().await;
    let m = machine("machine-0", None);
    let created = f.driver.create_machine(f.req(&m)).await.unwrap();
    let uuid = device_uuid(&created.provider_id).to_owned();
    assert_eq!(created.provider_id, format!("equinixmetal://ny/{uuid}"));
    assert_eq!(created.node_name, "machine-0");
    let devices = f.devices();
    assert_eq!(devices.len(), 1);
    let d = &devices[0];
    assert_eq!(d["hostname"], "machine-0");
    assert_eq!(d["plan"]["slug"], "c3.small.x86");
    assert_eq!(d["operating_system"]["slug"], "ubuntu_22_04");
    assert_eq!(d["userdata"], "#!/bin/sh\necho I am user data\n");
    let tags: Vec<&str> = d["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for tag in ["Name: sample", CLUSTER_TAG, ROLE_TAG, "tag1: tag1-value"] {
        assert!(tags.contains(&tag), "{tag} in {tags:?}");
    }
    // A create repeated after a lost answer (no provider id recorded) adopts the device.
    let again = f.driver.create_machine(f.req(&m)).await.unwrap();
    assert_eq!(again.provider_id, created.provider_id);
    assert_eq!(f.devices().len(), 1, "no second device");
}

#[tokio::test]
async fn status_finds_the_device_by_uuid_or_by_hostname_and_says_not_found_when_gone() {
    let f = fixture().await;
    let created = f
        .driver
        .create_machine(f.req(&machine("machine-1", None)))
        .await
        .unwrap();
    let uuid = device_uuid(&created.provider_id).to_owned();
    // By provider id, also in the facility form older providers wrote.
    for id in [
        created.provider_id.clone(),
        format!("equinixmetal://ewr1/{uuid}"),
        format!("equinixmetal://{uuid}"),
    ] {
        let m = machine("machine-1", Some(&id));
        let s = f.driver.get_machine_status(f.req(&m)).await.unwrap();
        assert_eq!(s.provider_id, created.provider_id);
        assert_eq!(s.node_name, "machine-1");
    }
    // A lost provider id is recovered by hostname and cluster tag.
    let s = f
        .driver
        .get_machine_status(f.req(&machine("machine-1", None)))
        .await
        .unwrap();
    assert_eq!(s.provider_id, created.provider_id);
    let missing = f
        .driver
        .get_machine_status(f.req(&machine("machine-x", None)))
        .await
        .unwrap_err();
    assert_eq!(missing.code, Code::NotFound);

    f.driver
        .delete_machine(f.req(&machine("machine-1", Some(&created.provider_id))))
        .await
        .unwrap();
    let gone = f
        .driver
        .get_machine_status(f.req(&machine("machine-1", Some(&created.provider_id))))
        .await
        .unwrap_err();
    assert_eq!(gone.code, Code::NotFound, "{gone}");
}

#[tokio::test]
async fn delete_is_ok_for_a_missing_device_and_finds_one_without_provider_id() {
    let f = fixture().await;
    f.driver
        .create_machine(f.req(&machine("machine-2", None)))
        .await
        .unwrap();
    assert_eq!(f.devices().len(), 1);
    // Only the name is known (killed before the provider id was written).
    f.driver
        .delete_machine(f.req(&machine("machine-2", None)))
        .await
        .unwrap();
    f.sim.sim().tick();
    assert!(
        f.devices().iter().all(|d| d["state"] != "active"),
        "{:?}",
        f.devices()
    );
    f.driver
        .delete_machine(f.req(&machine(
            "machine-3",
            Some("equinixmetal://ny/00000000-0000-4000-8000-000000000000"),
        )))
        .await
        .unwrap();
    f.driver
        .delete_machine(f.req(&machine("machine-4", None)))
        .await
        .unwrap();
}

/// A provider id that names a device of another cluster (edited, or copied from another
/// Machine) is refused, and the device stays.
#[tokio::test]
async fn delete_by_provider_id_refuses_a_device_without_the_cluster_tag() {
    let f = fixture().await;
    let mut other_spec = provider_spec();
    other_spec["tags"] = json!(["kubernetes.io/cluster/shoot--other: 1", ROLE_TAG]);
    let other = class(other_spec);
    let theirs = machine("theirs-0", None);
    let created = f
        .driver
        .create_machine(MachineRequest {
            machine: &theirs,
            class: &other,
            secret: &f.secret,
        })
        .await
        .unwrap();
    let error = f
        .driver
        .delete_machine(f.req(&machine("machine-0", Some(&created.provider_id))))
        .await
        .unwrap_err();
    assert_eq!(error.code, Code::FailedPrecondition, "{error:?}");
    assert!(
        error.message.contains(device_uuid(&created.provider_id))
            && error.message.contains("cluster tag"),
        "{error:?}"
    );
    f.sim.sim().tick();
    assert_eq!(
        f.devices()
            .iter()
            .filter(|d| d["state"] == "active"
                || d["state"] == "provisioning"
                || d["state"] == "queued")
            .count(),
        1,
        "the other cluster's device stays: {:?}",
        f.devices()
    );
    // Its own Machine still deletes it.
    let theirs_with_id = machine("theirs-0", Some(&created.provider_id));
    f.driver
        .delete_machine(MachineRequest {
            machine: &theirs_with_id,
            class: &other,
            secret: &f.secret,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn list_machines_returns_the_cluster_and_role_devices_only() {
    let f = fixture().await;
    for i in 0..12 {
        f.driver
            .create_machine(f.req(&machine(&format!("machine-{i}"), None)))
            .await
            .unwrap();
    }
    // Another role of the same cluster: not ours to list.
    let mut other_spec = provider_spec();
    other_spec["tags"] = json!([CLUSTER_TAG, "kubernetes.io/role/other: 1"]);
    let other = class(other_spec);
    let m = machine("other-0", None);
    f.driver
        .create_machine(MachineRequest {
            machine: &m,
            class: &other,
            secret: &f.secret,
        })
        .await
        .unwrap();
    let listed = f.driver.list_machines(&f.class, &f.secret).await.unwrap();
    assert_eq!(
        listed.len(),
        12,
        "more than the API's default page of 10: {listed:?}"
    );
    assert!(listed.values().all(|name| name.starts_with("machine-")));
    assert!(listed.keys().all(|id| id.starts_with("equinixmetal://ny/")));
}

#[tokio::test]
async fn errors_keep_their_class() {
    let f = fixture().await;
    // No capacity: ResourceExhausted (the autoscaler backs off), not Unavailable.
    f.sim.sim().update_faults(|faults| {
        faults.capacity_exhausted.push(PlanMetro {
            plan: "c3.small.x86".into(),
            metro: "ny".into(),
        })
    });
    let err = f
        .driver
        .create_machine(f.req(&machine("machine-5", None)))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::ResourceExhausted, "{err}");
    assert!(err.to_string().starts_with(
        "machine codes error: code = [ResourceExhausted] message = [Could not create machine: "
    ));
    f.sim
        .sim()
        .update_faults(|faults| faults.capacity_exhausted.clear());

    // A wrong token: Unauthenticated, and the token is not in the message.
    let bad = secret("wrong-token-value");
    let m = machine("machine-5", None);
    let err = f
        .driver
        .get_machine_status(MachineRequest {
            machine: &m,
            class: &f.class,
            secret: &bad,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::Unauthenticated, "{err}");
    assert!(!err.to_string().contains("wrong-token-value"));

    // The API keeps failing: Unavailable (retried soon), not NotFound.
    f.sim.sim().update_faults(|faults| {
        faults.endpoints.insert(
            "findDeviceById".into(),
            EndpointFault {
                error_count: 50,
                status: Some(503),
                ..EndpointFault::default()
            },
        );
    });
    let m = machine(
        "machine-5",
        Some("equinixmetal://ny/00000000-0000-4000-8000-000000000000"),
    );
    let err = f.driver.get_machine_status(f.req(&m)).await.unwrap_err();
    assert_eq!(err.code, Code::Unavailable, "{err}");
}

#[tokio::test]
async fn bad_classes_and_secrets_are_invalid_arguments_naming_the_field() {
    let f = fixture().await;
    let m = machine("machine-6", None);
    let mut wrong = f.class.clone();
    wrong.spec.provider = Some("AWS".into());
    let err = f
        .driver
        .create_machine(MachineRequest {
            machine: &m,
            class: &wrong,
            secret: &f.secret,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument);
    assert!(
        err.message
            .contains("Requested for Provider 'AWS', we only support 'EquinixMetal'")
    );

    let incomplete = class(json!({"tags": ["x"]}));
    let err = decode_provider_spec(&incomplete).unwrap_err();
    for field in [
        "providerSpec.os",
        "providerSpec.machineType",
        "providerSpec.projectID",
        "providerSpec.metro",
        "spec.tags.kubernetes.io/cluster/",
        "spec.tags.kubernetes.io/role/",
    ] {
        assert!(err.message.contains(field), "{field} in {}", err.message);
    }

    let mut no_token = f.secret.clone();
    no_token.0.remove("apiToken");
    let err = f
        .driver
        .create_machine(MachineRequest {
            machine: &m,
            class: &f.class,
            secret: &no_token,
        })
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("Required Equinix Metal API Key one of 'apiToken' or 'alternateApiToken'")
    );

    let mut no_user_data = f.secret.clone();
    no_user_data.0.remove("userData");
    let err = f
        .driver
        .create_machine(MachineRequest {
            machine: &m,
            class: &f.class,
            secret: &no_user_data,
        })
        .await
        .unwrap_err();
    assert!(err.message.contains("Required userData"), "{err}");
    // Delete does not need user data.
    f.driver
        .delete_machine(MachineRequest {
            machine: &m,
            class: &f.class,
            secret: &no_user_data,
        })
        .await
        .unwrap();

    let err = f
        .driver
        .create_machine(f.req(&machine("Bad_Name", None)))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument);
    assert!(f.devices().is_empty());
}

#[tokio::test]
async fn initialize_is_unimplemented_and_there_are_no_volumes() {
    let f = fixture().await;
    let m = machine("machine-7", None);
    assert_eq!(
        f.driver
            .initialize_machine(f.req(&m))
            .await
            .unwrap_err()
            .code,
        Code::Unimplemented
    );
    assert!(f.driver.get_volume_ids(&[]).await.unwrap().is_empty());
}

/// The provider's sample class with reservations (`eqx-mc-ny-reserved` of machine-class.yaml:
/// `reservationIDs`, `reservedDevicesOnly: true`), filled in as its README says (cluster and role
/// names); its retired plan and OS swapped for current ones.
fn reserved_sample_class() -> (MachineClass, Vec<String>) {
    let path = ingot_testenv::shared_dir().join("fixtures/mcm-provider-samples/machine-class.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut class: Value = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .find(|c| c["metadata"]["name"] == "eqx-mc-ny-reserved")
        .expect("the sample class with reservations");
    assert_eq!(class["providerSpec"]["reservedDevicesOnly"], true);
    assert_eq!(class["providerSpec"]["projectID"], PROJECT);
    let spec = &mut class["providerSpec"];
    spec["machineType"] = json!("c3.small.x86");
    spec["OS"] = json!("ubuntu_22_04");
    for tag in spec["tags"].as_array_mut().unwrap() {
        let filled = tag
            .as_str()
            .unwrap()
            .replace("YOUR_CLUSTER_NAME", "shoot--test")
            .replace("YOUR_ROLE_NAME", "node");
        *tag = json!(filled);
    }
    let ids = spec["reservationIDs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    (serde_json::from_value(class).unwrap(), ids)
}

#[tokio::test]
async fn the_sample_reservation_class_creates_on_a_free_reservation_or_fails_clearly() {
    let (reserved_class, ids) = reserved_sample_class();
    assert_eq!(ids.len(), 2);
    let mut config = SimConfig::single(TOKEN, PROJECT);
    // The first reservation is a spare (not provisionable), the second a free server.
    config.hardware_reservations = vec![
        HardwareReservationConfig {
            id: ids[0].clone(),
            project: PROJECT.into(),
            plan: "c3.small.x86".into(),
            metro: "ny".into(),
            provisionable: false,
        },
        HardwareReservationConfig {
            id: ids[1].clone(),
            project: PROJECT.into(),
            plan: "c3.small.x86".into(),
            metro: "ny".into(),
            provisionable: true,
        },
    ];
    // No on-demand capacity: a device that exists is a reserved one.
    config.faults.capacity_exhausted = vec![PlanMetro {
        plan: "c3.small.x86".into(),
        metro: "ny".into(),
    }];
    let sim = SimServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let clouds = EquinixClouds {
        base_url: sim.base_url(),
        limiter: Arc::new(RateLimiter::new(1000.0, 100)),
        observer: Default::default(),
    };
    let driver = EquinixDriver::new(Arc::new(clouds));
    let secret = secret(TOKEN);
    let create = async |class: &MachineClass, name: &str| {
        let m = machine(name, None);
        driver
            .create_machine(MachineRequest {
                machine: &m,
                class,
                secret: &secret,
            })
            .await
    };

    // The spare is refused, the free reservation taken.
    let first = create(&reserved_class, "reserved-0").await.unwrap();
    let first_uuid = device_uuid(&first.provider_id).to_owned();
    assert_eq!(
        sim.sim().reservation_device(&ids[1]).unwrap(),
        Some(first_uuid.clone())
    );
    assert_eq!(sim.sim().reservation_device(&ids[0]).unwrap(), None);

    // Both taken or refused, reservedDevicesOnly: no device, a clear ResourceExhausted.
    let err = create(&reserved_class, "reserved-1").await.unwrap_err();
    assert_eq!(err.code, Code::ResourceExhausted, "{err}");
    let message = err.to_string();
    assert!(
        message.contains(
            "could not get a device with the provided reservation IDs, and reservedOnly is true"
        ) && message.contains(&format!("{} is already provisioned", ids[1])),
        "{message}"
    );
    let hostnames = |sim: &SimServer| -> Vec<String> {
        sim.sim()
            .device_listing(Some(PROJECT))
            .into_iter()
            .filter(|e| e["device"]["state"] != "deprovisioning")
            .map(|e| e["device"]["hostname"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(hostnames(&sim), ["reserved-0"]);

    // Without reservedDevicesOnly the same class falls back to an on-demand device (no
    // reservation id), which the exhausted capacity refuses here; with capacity back it is made.
    let mut fallback = reserved_class.clone();
    fallback.spec.provider_spec["reservedDevicesOnly"] = json!(false);
    let err = create(&fallback, "on-demand-0").await.unwrap_err();
    assert_eq!(err.code, Code::ResourceExhausted, "{err}");
    assert!(err.to_string().contains("capacity"), "{err}");
    sim.sim()
        .update_faults(|faults| faults.capacity_exhausted.clear());
    let on_demand = create(&fallback, "on-demand-0").await.unwrap();
    let uuid = device_uuid(&on_demand.provider_id).to_owned();
    let device = sim
        .sim()
        .device_listing(Some(PROJECT))
        .into_iter()
        .map(|e| e["device"].clone())
        .find(|d| d["id"] == uuid.as_str())
        .unwrap();
    assert!(device["hardware_reservation"].is_null(), "{device}");

    // The reserved device deleted and gone, its reservation is free for the next Machine.
    let m = machine("reserved-0", Some(&first.provider_id));
    driver
        .delete_machine(MachineRequest {
            machine: &m,
            class: &reserved_class,
            secret: &secret,
        })
        .await
        .unwrap();
    sim.sim().tick();
    assert_eq!(sim.sim().reservation_device(&ids[1]).unwrap(), None);
    let again = create(&reserved_class, "reserved-2").await.unwrap();
    assert_eq!(
        sim.sim().reservation_device(&ids[1]).unwrap(),
        Some(device_uuid(&again.provider_id).to_owned())
    );
}
