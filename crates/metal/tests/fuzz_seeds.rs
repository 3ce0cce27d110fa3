//! The seed inputs of the `metal_wire` fuzz target (`fuzz/`): the Equinix Metal API's answers
//! as the emulator renders them (a device with its ports and addresses, a device list, plans,
//! metros, capacity, an error). Each seed is checked to decode as its wire type; with
//! `INGOT_FUZZ_SEEDS=DIR` they are also written to `DIR/metal_wire/<name>`, which is how
//! `scripts/fuzz.sh` makes its corpora.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingot_metal::equinix::{server, wire};
use ingot_metal_sim::world::{ApiError, World};
use ingot_metal_sim::{Faults, Timings, catalog};
use serde_json::{Value, json};

/// `metal_wire` input: the wire type's index (as the target numbers them), then the body.
fn seed(kind: u8, body: &Value) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(body.to_string().as_bytes());
    out
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut world = World::new(Timings::instant(), Faults::default());
    let input = serde_json::from_value(json!({
        "metro": "da",
        "plan": "m3.small.x86",
        "operating_system": "custom_ipxe",
        "hostname": "pool-a-1",
        "ipxe_script_url": "http://10.0.0.2:8080/ipxe/pool-a",
        "always_pxe": true,
        "tags": ["ingot-pool:default/pool-a"]
    }))
    .unwrap();
    let id = world
        .create_device("project-1", input, std::time::Instant::now())
        .unwrap();
    world.advance_all(std::time::Instant::now());
    let device = world.device_json(world.device(&id).unwrap());
    vec![
        ("device", seed(0, &device)),
        (
            "device_list",
            seed(1, &json!({"devices": [device], "meta": {"total": 1}})),
        ),
        (
            "plans",
            seed(
                4,
                &json!({"plans": catalog::PLANS.iter().take(2).map(catalog::plan_json).collect::<Vec<_>>()}),
            ),
        ),
        (
            "metros",
            seed(
                5,
                &json!({"metros": catalog::METROS.iter().take(2).map(catalog::metro_json).collect::<Vec<_>>()}),
            ),
        ),
        ("capacity", seed(6, &world.capacity_json())),
        (
            "error",
            seed(7, &ApiError::unprocessable("metro is required").body()),
        ),
        ("port", seed(8, &device["network_ports"][0])),
    ]
}

#[test]
fn seeds_decode_as_their_wire_types() {
    let seeds = seeds();
    for (name, bytes) in &seeds {
        let body = &bytes[1..];
        match *name {
            "device" => {
                let d: wire::Device = serde_json::from_slice(body).unwrap();
                let s = server(&d);
                assert_eq!(s.hostname, "pool-a-1");
                assert!(!s.ports.is_empty() && !s.addresses.is_empty(), "{s:?}");
            }
            "device_list" => {
                let l: wire::DeviceList = serde_json::from_slice(body).unwrap();
                assert_eq!(l.devices.len(), 1);
            }
            "plans" => {
                let p: wire::PlanList = serde_json::from_slice(body).unwrap();
                assert_eq!(p.plans.len(), 2);
            }
            "metros" => {
                let m: wire::MetroList = serde_json::from_slice(body).unwrap();
                assert_eq!(m.metros.len(), 2);
            }
            "capacity" => {
                serde_json::from_slice::<wire::CapacityList>(body).unwrap();
            }
            "error" => {
                let e: wire::ApiErrorBody = serde_json::from_slice(body).unwrap();
                assert_eq!(e.message(), "metro is required");
            }
            "port" => {
                serde_json::from_slice::<wire::Port>(body).unwrap();
            }
            other => panic!("no check for seed {other}"),
        }
    }
    if let Some(dir) = std::env::var_os("INGOT_FUZZ_SEEDS") {
        let dir = std::path::PathBuf::from(dir).join("metal_wire");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}
