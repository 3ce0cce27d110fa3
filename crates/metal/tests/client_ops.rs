//! Every client operation over real HTTP against the emulator.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ingot_metal::equinix::wire::{self, *};
use ingot_metal::{
    BareMetalCloud, Boot, BootUpdate, CapacityLevel, CreateServer, Error, NetworkMode, PortKind,
    PowerAction, Reinstall, ServerState,
};

fn create_req(hostname: &str) -> DeviceCreateRequest {
    DeviceCreateRequest {
        metro: "sv".into(),
        plan: "c3.small.x86".into(),
        operating_system: "custom_ipxe".into(),
        hostname: Some(hostname.into()),
        billing_cycle: Some(BillingCycle::Hourly),
        ipxe_script_url: Some("http://127.0.0.1:9/boot.ipxe".into()),
        always_pxe: true,
        userdata: Some("#cloud-config\n".into()),
        tags: vec![OWNER.into(), "role=node".into()],
        spot_instance: Some(true),
        spot_price_max: Some(0.5),
        hardware_reservation_id: Some("b7d1b2a4-0b6f-4a43-9d51-3f6f2c1e9a10".into()),
        project_ssh_keys: vec!["1c9b4b41-7a2e-4c1f-8f0d-6a3e2b1c0d9e".into()],
        user_ssh_keys: vec!["2d8c5c52-8b3f-4d20-9a1e-7b4f3c2d1e0f".into()],
        ..DeviceCreateRequest::default()
    }
}

#[tokio::test]
async fn device_lifecycle_through_every_device_operation() {
    let srv = start(config()).await;
    let c = client(&srv);

    let d = c
        .create_device(PROJECT, &create_req("node-1"))
        .await
        .unwrap();
    assert_eq!(d.state.as_deref(), Some("queued"));
    assert_eq!(d.hostname.as_deref(), Some("node-1"));
    assert_eq!(d.tags, vec![OWNER.to_string(), "role=node".to_string()]);
    assert_eq!(d.always_pxe, Some(true));
    assert_eq!(d.spot_price_max, Some(0.5));
    assert_eq!(
        d.operating_system.as_ref().and_then(|o| o.slug.as_deref()),
        Some("custom_ipxe")
    );

    let got = c
        .get_device(&d.id, &["facility", "ip_addresses"])
        .await
        .unwrap();
    assert_eq!(got.state.as_deref(), Some("active"));
    assert_eq!(
        got.metro.as_ref().and_then(|m| m.code.as_deref()),
        Some("sv")
    );
    let q = srv
        .sim()
        .traffic()
        .into_iter()
        .find(|e| e.operation == "findDeviceById")
        .unwrap()
        .query;
    assert!(
        q.contains(&("include".to_string(), "facility,ip_addresses".to_string())),
        "{q:?}"
    );

    let upd = c
        .update_device(
            &d.id,
            &DeviceUpdateRequest {
                ipxe_script_url: Some("http://127.0.0.1:9/second.ipxe".into()),
                userdata: Some("#cloud-config\nfinal: true\n".into()),
                always_pxe: Some(false),
                tags: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        upd.ipxe_script_url.as_deref(),
        Some("http://127.0.0.1:9/second.ipxe")
    );
    assert_eq!(
        upd.userdata.as_deref(),
        Some("#cloud-config\nfinal: true\n")
    );
    assert_eq!(upd.always_pxe, Some(false));

    c.device_action(&d.id, &DeviceAction::simple(ActionType::PowerOff))
        .await
        .unwrap();
    assert_eq!(
        c.get_device(&d.id, &[]).await.unwrap().state.as_deref(),
        Some("inactive")
    );
    // Powering off an inactive device is refused with the API's message.
    match c
        .device_action(&d.id, &DeviceAction::simple(ActionType::PowerOff))
        .await
    {
        Err(Error::Validation { message }) => assert!(message.contains("inactive"), "{message}"),
        other => panic!("expected a validation error, got {other:?}"),
    }
    c.device_action(&d.id, &DeviceAction::simple(ActionType::PowerOn))
        .await
        .unwrap();
    assert_eq!(
        c.get_device(&d.id, &[]).await.unwrap().state.as_deref(),
        Some("active")
    );
    c.device_action(&d.id, &DeviceAction::simple(ActionType::Reboot))
        .await
        .unwrap();

    let reinstall = DeviceAction {
        kind: ActionType::Reinstall,
        preserve_data: Some(true),
        deprovision_fast: Some(true),
        operating_system: None,
        ipxe_script_url: None,
    };
    c.device_action(&d.id, &reinstall).await.unwrap();
    assert_eq!(
        c.get_device(&d.id, &[]).await.unwrap().state.as_deref(),
        Some("active")
    );
    let boot = srv.sim().boot_record(&d.id).unwrap();
    assert_eq!(boot.boot_count, 2, "first boot and the reinstall");
    assert_eq!(
        boot.userdata.as_deref(),
        Some("#cloud-config\nfinal: true\n")
    );

    c.delete_device(&d.id, true).await.unwrap();
    let del = srv
        .sim()
        .traffic()
        .into_iter()
        .find(|e| e.operation == "deleteDevice")
        .unwrap();
    assert_eq!(
        del.query,
        vec![("force_delete".to_string(), "true".to_string())]
    );
    assert_eq!(
        del.request, None,
        "force_delete travels as a query parameter, not a body"
    );
    match c.get_device(&d.id, &[]).await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected not found, got {other:?}"),
    }
}

#[tokio::test]
async fn facility_is_refused_before_anything_is_sent() {
    let srv = start(config()).await;
    let c = client(&srv);
    let mut req = create_req("old-style");
    req.facility = Some(vec!["sv15".into()]);
    match c.create_device(PROJECT, &req).await {
        Err(Error::InvalidRequest(m)) => assert!(m.contains("facility"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(srv.sim().metrics().total_requests, 0);
}

#[tokio::test]
async fn listing_follows_every_page_beyond_a_thousand_devices() {
    let srv = start(config()).await;
    let c = client(&srv);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1100u32 {
        let c = c.clone();
        tasks.spawn(async move {
            let mut req = DeviceCreateRequest {
                metro: "da".into(),
                plan: "m3.small.x86".into(),
                operating_system: "ubuntu_24_04".into(),
                hostname: Some(format!("host-{i:04}")),
                tags: vec![if i % 2 == 0 { "even" } else { "odd" }.into()],
                ..DeviceCreateRequest::default()
            };
            if i == 7 {
                req.hostname = Some("special-7".into());
            }
            c.create_device(PROJECT, &req).await.unwrap()
        });
        if tasks.len() >= 8 {
            tasks.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    srv.sim().reset_metrics();

    let all = c
        .list_devices(PROJECT, &DeviceFilter::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 1100);
    let mut ids: Vec<&str> = all.iter().map(|d| d.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 1100, "no device twice");
    assert_eq!(
        srv.sim().metrics().requests("findProjectDevices"),
        2,
        "two pages of 1000"
    );

    srv.sim().reset_metrics();
    let small = DeviceFilter {
        per_page: Some(100),
        ..DeviceFilter::default()
    };
    assert_eq!(c.list_devices(PROJECT, &small).await.unwrap().len(), 1100);
    assert_eq!(srv.sim().metrics().requests("findProjectDevices"), 11);

    let even = DeviceFilter {
        tag: Some("even".into()),
        ..DeviceFilter::default()
    };
    let even = c.list_devices(PROJECT, &even).await.unwrap();
    assert_eq!(even.len(), 550);
    assert!(even.iter().all(|d| d.tags == vec!["even".to_string()]));

    let by_name = DeviceFilter {
        hostname: Some("special".into()),
        ..DeviceFilter::default()
    };
    let found = c.list_devices(PROJECT, &by_name).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].hostname.as_deref(), Some("special-7"));
}

#[tokio::test]
async fn ports_bond_convert_and_carry_vlans_by_the_metal_rules() {
    let srv = start(config()).await;
    let c = client(&srv);
    let mut req = create_req("net-1");
    req.plan = "n3.xlarge.x86".into();
    let d = c.create_device(PROJECT, &req).await.unwrap();
    let d = c.get_device(&d.id, &[]).await.unwrap();
    let names: Vec<&str> = d
        .network_ports
        .iter()
        .filter_map(|p| p.name.as_deref())
        .collect();
    assert_eq!(names, ["bond0", "eth0", "eth1", "eth2", "eth3"]);
    let macs: Vec<String> = d
        .network_ports
        .iter()
        .filter_map(|p| p.data.mac.clone())
        .collect();
    let again: Vec<String> = c
        .get_device(&d.id, &[])
        .await
        .unwrap()
        .network_ports
        .iter()
        .filter_map(|p| p.data.mac.clone())
        .collect();
    assert_eq!(macs, again, "MAC addresses are stable");
    let mut uniq = macs.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), macs.len());
    let port = |name: &str| {
        d.network_ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .unwrap()
            .id
            .clone()
    };
    let (bond0, eth0, eth1) = (port("bond0"), port("eth0"), port("eth1"));
    assert_eq!(
        c.get_port(&bond0).await.unwrap().network_type.as_deref(),
        Some("layer3")
    );

    let v1000 = c
        .create_virtual_network(
            PROJECT,
            &VirtualNetworkCreateRequest {
                metro: "sv".into(),
                vxlan: Some(1000),
                description: Some("storage".into()),
                tags: vec![],
            },
        )
        .await
        .unwrap();
    let auto = c
        .create_virtual_network(
            PROJECT,
            &VirtualNetworkCreateRequest {
                metro: "sv".into(),
                vxlan: None,
                description: None,
                tags: vec![],
            },
        )
        .await
        .unwrap();
    assert_eq!(auto.vxlan, Some(1001), "next free number in 1000-1999");
    let elsewhere = c
        .create_virtual_network(
            PROJECT,
            &VirtualNetworkCreateRequest {
                metro: "da".into(),
                vxlan: Some(1000),
                description: None,
                tags: vec![],
            },
        )
        .await
        .unwrap();
    match c
        .create_virtual_network(
            PROJECT,
            &VirtualNetworkCreateRequest {
                metro: "sv".into(),
                vxlan: Some(1000),
                description: None,
                tags: vec![],
            },
        )
        .await
    {
        Err(Error::Validation { message }) => {
            assert!(message.contains("already in use"), "{message}")
        }
        other => panic!("duplicate vxlan accepted: {other:?}"),
    }
    let sv = c.list_virtual_networks(PROJECT, Some("sv")).await.unwrap();
    assert_eq!(sv.len(), 2);
    assert_eq!(
        c.list_virtual_networks(PROJECT, None).await.unwrap().len(),
        3
    );

    // A bonded port takes no VLAN.
    match c.assign_port(&eth1, "1000").await {
        Err(Error::Validation { message }) => assert!(message.contains("bonded"), "{message}"),
        other => panic!("expected refusal, got {other:?}"),
    }
    // A VLAN of another metro is refused.
    assert!(matches!(
        c.assign_port(&bond0, &elsewhere.id).await,
        Err(Error::Validation { .. })
    ));

    // hybrid: eth1 out of the bond, VLAN by number.
    let p = c.disbond_port(&eth1, false).await.unwrap();
    assert_eq!(p.network_type.as_deref(), Some("hybrid"));
    assert_eq!(p.data.bonded, Some(false));
    let p = c.assign_port(&eth1, "1000").await.unwrap();
    assert_eq!(
        p.virtual_networks
            .iter()
            .map(|h| h.id())
            .collect::<Vec<_>>(),
        [v1000.id.as_str()]
    );
    let p = c.unassign_port(&eth1, &v1000.id).await.unwrap();
    assert!(p.virtual_networks.is_empty());
    let p = c.bond_port(&eth1, false).await.unwrap();
    assert_eq!(p.network_type.as_deref(), Some("layer3"));

    // hybrid-bonded: a VLAN on the layer-3 bond.
    let p = c.assign_port(&bond0, &v1000.id).await.unwrap();
    assert_eq!(p.network_type.as_deref(), Some("hybrid-bonded"));
    c.unassign_port(&bond0, "1000").await.unwrap();

    // layer2-bonded, then layer2-individual.
    let p = c.convert_layer2(&bond0, None).await.unwrap();
    assert_eq!(p.network_type.as_deref(), Some("layer2-bonded"));
    assert!(
        c.get_device(&d.id, &[])
            .await
            .unwrap()
            .ip_addresses
            .is_empty(),
        "layer 2 has no IPs"
    );
    let p = c.disbond_port(&eth0, true).await.unwrap();
    assert_eq!(p.network_type.as_deref(), Some("layer2-individual"));
    let all = c.get_device(&d.id, &[]).await.unwrap();
    assert!(
        all.network_ports
            .iter()
            .filter(|p| p.kind.as_deref() == Some("NetworkPort"))
            .all(|p| p.data.bonded == Some(false))
    );

    // Batch: two VLANs at once on eth0, one native.
    let batch = c
        .batch_vlan_assignments(
            &eth0,
            &VlanBatchRequest {
                vlan_assignments: vec![
                    VlanAssignment {
                        vlan: "1000".into(),
                        state: VlanAssignmentState::Assigned,
                        native: Some(true),
                    },
                    VlanAssignment {
                        vlan: auto.id.clone(),
                        state: VlanAssignmentState::Assigned,
                        native: None,
                    },
                ],
            },
        )
        .await
        .unwrap();
    assert_eq!(batch.state.as_deref(), Some("completed"));
    assert_eq!(batch.quantity, Some(2));
    let p = c.get_port(&eth0).await.unwrap();
    assert_eq!(p.virtual_networks.len(), 2);
    assert_eq!(
        p.native_virtual_network.as_ref().map(|h| h.id()),
        Some(v1000.id.as_str())
    );
    // Converting back to layer 3 with VLANs still there is refused.
    assert!(matches!(
        c.convert_layer3(&bond0, &PortConvertLayer3::default_ips())
            .await,
        Err(Error::Validation { .. })
    ));
    c.batch_vlan_assignments(
        &eth0,
        &VlanBatchRequest {
            vlan_assignments: vec![
                VlanAssignment {
                    vlan: v1000.id.clone(),
                    state: VlanAssignmentState::Unassigned,
                    native: None,
                },
                VlanAssignment {
                    vlan: "1001".into(),
                    state: VlanAssignmentState::Unassigned,
                    native: None,
                },
            ],
        },
    )
    .await
    .unwrap();
    let p = c
        .convert_layer3(&bond0, &PortConvertLayer3::default_ips())
        .await
        .unwrap();
    assert_eq!(p.network_type.as_deref(), Some("layer3"));
    let back = c.get_device(&d.id, &[]).await.unwrap();
    assert!(
        back.network_ports
            .iter()
            .all(|p| p.data.bonded == Some(true))
    );
    assert_eq!(back.ip_addresses.len(), 3);
}

#[tokio::test]
async fn provider_sets_every_network_mode_and_is_idempotent() {
    let srv = start(config()).await;
    let cloud = cloud(&srv);
    let s = cloud.create_server(&ipxe_server("modes")).await.unwrap();
    let vlan = cloud.ensure_vlan("sv", 1200, "cluster").await.unwrap();
    assert_eq!(
        cloud.ensure_vlan("sv", 1200, "cluster").await.unwrap(),
        vlan,
        "found, not created twice"
    );
    assert_eq!(srv.sim().metrics().requests("createVirtualNetwork"), 1);

    for mode in [
        NetworkMode::Hybrid,
        NetworkMode::Layer2Bonded,
        NetworkMode::Layer2Individual,
        NetworkMode::Layer3,
        NetworkMode::HybridBonded,
        NetworkMode::Layer2Individual,
        NetworkMode::Hybrid,
        NetworkMode::Layer3,
    ] {
        let got = cloud.set_network_mode(&s.id, mode).await.unwrap();
        // hybrid-bonded is layer 3 until a VLAN sits on the bond.
        let expect = if mode == NetworkMode::HybridBonded {
            NetworkMode::Layer3
        } else {
            mode
        };
        assert_eq!(got.network_mode, Some(expect), "after asking for {mode:?}");
        let before = srv.sim().metrics();
        let again = cloud.set_network_mode(&s.id, mode).await.unwrap();
        assert_eq!(again.network_mode, Some(expect));
        let after = srv.sim().metrics();
        for op in ["bondPort", "disbondPort", "convertLayer2", "convertLayer3"] {
            assert_eq!(
                before.requests(op),
                after.requests(op),
                "{op} called again for {mode:?}"
            );
        }
    }

    // VLANs through the provider: numbers or ids, already-present ones left alone.
    let s = cloud
        .set_network_mode(&s.id, NetworkMode::HybridBonded)
        .await
        .unwrap();
    let bond = s.ports.iter().find(|p| p.kind == PortKind::Bond).unwrap();
    let p = cloud
        .assign_vlans(&bond.id, &["1200".to_string()])
        .await
        .unwrap();
    assert_eq!(p.vlans, vec![vlan.id.clone()]);
    assert_eq!(p.mode, Some(NetworkMode::HybridBonded));
    let calls = srv.sim().metrics().requests("assignPort");
    cloud
        .assign_vlans(&bond.id, std::slice::from_ref(&vlan.id))
        .await
        .unwrap();
    assert_eq!(
        srv.sim().metrics().requests("assignPort"),
        calls,
        "already assigned: no call"
    );
    let second = cloud.ensure_vlan("sv", 1201, "").await.unwrap();
    let third = cloud.ensure_vlan("sv", 1202, "").await.unwrap();
    let p = cloud
        .assign_vlans(&bond.id, &[second.id.clone(), "1202".to_string()])
        .await
        .unwrap();
    assert_eq!(p.vlans.len(), 3);
    assert_eq!(
        srv.sim()
            .metrics()
            .requests("createPortVlanAssignmentBatch"),
        1
    );
    let p = cloud
        .unassign_vlans(
            &bond.id,
            &[vlan.id.clone(), second.id.clone(), third.id.clone()],
        )
        .await
        .unwrap();
    assert!(p.vlans.is_empty());
    assert_eq!(cloud.list_vlans("sv").await.unwrap().len(), 3);
}

#[tokio::test]
async fn provider_create_is_idempotent_and_lists_by_owner() {
    let srv = start(config()).await;
    let cloud = cloud(&srv);
    let a = cloud.create_server(&ipxe_server("pool-a-0")).await.unwrap();
    let again = cloud.create_server(&ipxe_server("pool-a-0")).await.unwrap();
    assert_eq!(a.id, again.id);
    assert_eq!(srv.sim().metrics().requests("createDevice"), 1);
    assert!(a.provider_id.starts_with("equinixmetal://sv/"));
    assert!(a.provider_id.ends_with(&a.id));

    // Same hostname, other owner: another server.
    let mut other = ipxe_server("pool-a-0");
    other.owner_tag = "ingot.io/pool=other".into();
    let b = cloud.create_server(&other).await.unwrap();
    assert_ne!(a.id, b.id);

    cloud.create_server(&ipxe_server("pool-a-1")).await.unwrap();
    let mine = cloud.list_servers(OWNER).await.unwrap();
    assert_eq!(mine.len(), 2);
    let s = cloud.get_server(&a.provider_id).await.unwrap();
    assert_eq!(s.state, ServerState::Active);
    assert_eq!(s.macs().len(), 2);
    assert!(s.management_address(true, 4).is_some());
    assert!(s.management_address(false, 4).is_some());

    let s = cloud
        .update_boot(
            &a.id,
            &BootUpdate {
                ipxe_script_url: Some("http://127.0.0.1:9/x.ipxe".into()),
                userdata: Some("#!ipxe\nshell\n".into()),
                always_pxe: Some(true),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        s.ipxe_script_url.as_deref(),
        Some("http://127.0.0.1:9/x.ipxe")
    );
    assert!(s.always_pxe);
    cloud
        .reinstall(
            &a.id,
            &Reinstall {
                preserve_data: true,
                deprovision_fast: true,
                ..Reinstall::default()
            },
        )
        .await
        .unwrap();
    let r = srv
        .sim()
        .traffic()
        .into_iter()
        .rfind(|e| e.operation == "performAction")
        .unwrap();
    assert_eq!(
        r.request.unwrap(),
        serde_json::json!({"type": "reinstall", "preserve_data": true, "deprovision_fast": true})
    );
    cloud.power(&a.id, PowerAction::Off).await.unwrap();
    assert_eq!(
        cloud.get_server(&a.id).await.unwrap().state,
        ServerState::Off
    );
    cloud.power(&a.id, PowerAction::On).await.unwrap();
    cloud.power(&a.id, PowerAction::Reboot).await.unwrap();

    cloud.delete_server(&a.id).await.unwrap();
    cloud.delete_server(&a.id).await.unwrap();
    assert!(cloud.get_server(&a.id).await.unwrap_err().is_not_found());
    assert_eq!(cloud.find_server(OWNER, "pool-a-0").await.unwrap(), None);
}

#[tokio::test]
async fn lookups_plans_metros_capacity() {
    let srv = start(config()).await;
    let cloud = cloud(&srv);
    let plans = cloud.plans().await.unwrap();
    let n3 = plans.iter().find(|p| p.slug == "n3.xlarge.x86").unwrap();
    assert_eq!(n3.nics, 4);
    let metros = cloud.locations().await.unwrap();
    assert!(
        metros
            .iter()
            .any(|m| m.code == "sv" && m.name == "Silicon Valley")
    );
    assert_eq!(
        cloud.capacity("c3.small.x86", "sv").await.unwrap(),
        CapacityLevel::Normal
    );
    assert_eq!(
        cloud.capacity("nope", "sv").await.unwrap(),
        CapacityLevel::Unknown
    );
    let raw = cloud.client().list_plans().await.unwrap();
    assert_eq!(raw.len(), plans.len());
    assert!(
        cloud
            .client()
            .metro_capacity()
            .await
            .unwrap()
            .capacity
            .contains_key("am")
    );
}

#[tokio::test]
async fn tokens_and_projects_are_checked_and_the_token_never_leaks() {
    let mut cfg = config().with_project(TOKEN, OTHER_PROJECT);
    cfg.tokens.push(ingot_metal_sim::TokenConfig {
        token: "reader".into(),
        projects: vec![PROJECT.into()],
        read_only: true,
    });
    cfg.tokens.push(ingot_metal_sim::TokenConfig {
        token: "outsider".into(),
        projects: vec![OTHER_PROJECT.into()],
        read_only: false,
    });
    let srv = start(cfg).await;
    let c = client(&srv);
    let d = c
        .create_device(PROJECT, &create_req("authz"))
        .await
        .unwrap();

    let bad = client_with(
        &srv,
        "tok-wrong-secret-value",
        Duration::from_secs(5),
        fast_retry(),
    );
    let err = bad.get_device(&d.id, &[]).await.unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
    for shown in [format!("{err}"), format!("{err:?}"), format!("{bad:?}")] {
        assert!(
            !shown.contains("tok-wrong-secret-value"),
            "token leaked: {shown}"
        );
    }
    assert!(!format!("{c:?}").contains(TOKEN));

    let outsider = client_with(&srv, "outsider", Duration::from_secs(5), fast_retry());
    assert!(matches!(
        outsider.get_device(&d.id, &[]).await,
        Err(Error::Forbidden { .. })
    ));
    assert!(matches!(
        outsider
            .list_devices(PROJECT, &DeviceFilter::default())
            .await,
        Err(Error::Forbidden { .. })
    ));
    assert!(matches!(
        c.list_devices(
            "11111111-2222-4333-8444-555555555555",
            &DeviceFilter::default()
        )
        .await,
        Err(Error::NotFound { .. })
    ));
    let reader = client_with(&srv, "reader", Duration::from_secs(5), fast_retry());
    assert_eq!(reader.get_device(&d.id, &[]).await.unwrap().id, d.id);
    assert!(matches!(
        reader.delete_device(&d.id, false).await,
        Err(Error::Forbidden { .. })
    ));
    assert!(matches!(
        c.get_device("6b0b6c6e-0000-4000-8000-000000000000", &[])
            .await,
        Err(Error::NotFound { .. })
    ));
    // The token the emulator saw is the one configured, in X-Auth-Token.
    assert!(
        c.list_devices(OTHER_PROJECT, &DeviceFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn validation_errors_carry_the_api_message() {
    let srv = start(config()).await;
    let c = client(&srv);
    let mut req = create_req("bad-plan");
    req.plan = "z9.huge.x86".into();
    match c.create_device(PROJECT, &req).await {
        Err(Error::Validation { message }) => assert!(message.contains("z9.huge.x86"), "{message}"),
        other => panic!("expected validation error, got {other:?}"),
    }
    let mut req = create_req("no-script");
    req.ipxe_script_url = None;
    req.userdata = None;
    assert!(matches!(
        c.create_device(PROJECT, &req).await,
        Err(Error::InvalidRequest(_))
    ));
}

#[tokio::test]
async fn boot_hook_records_the_script_and_userdata() {
    // A loopback web server holding the iPXE script.
    let app = axum::Router::new().route(
        "/boot.ipxe",
        axum::routing::get(|| async { "#!ipxe\nchain http://127.0.0.1/harvester\n" }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let srv = start(config()).await;
    let cloud = cloud(&srv);
    let mut spec = ipxe_server("boot-url");
    spec.boot = Boot::Ipxe {
        script_url: Some(format!("http://{addr}/boot.ipxe")),
        always: false,
    };
    spec.userdata = Some("#cloud-config\ntoken: abc\n".into());
    let s = cloud.create_server(&spec).await.unwrap();
    assert_eq!(
        cloud.get_server(&s.id).await.unwrap().state,
        ServerState::Active
    );
    let mut rec = None;
    for _ in 0..200 {
        let r = reqwest::get(format!("{}/devices/{}/boot", srv.admin_url(), s.id))
            .await
            .unwrap();
        if r.status().is_success() {
            let b: ingot_metal_sim::BootRecord = r.json().await.unwrap();
            if b.ipxe_script.is_some() || b.ipxe_error.is_some() {
                rec = Some(b);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let rec = rec.expect("boot recorded");
    assert_eq!(rec.ipxe_source, "url");
    assert_eq!(
        rec.ipxe_script.as_deref(),
        Some("#!ipxe\nchain http://127.0.0.1/harvester\n")
    );
    assert_eq!(rec.userdata.as_deref(), Some("#cloud-config\ntoken: abc\n"));
    assert_eq!(rec.macs, s.macs());

    let mut spec = CreateServer::new(
        "boot-userdata",
        "c3.small.x86",
        "sv",
        OWNER,
        Boot::Ipxe {
            script_url: None,
            always: false,
        },
    );
    spec.userdata = Some("#!ipxe\ndhcp\nshell\n".into());
    let s = cloud.create_server(&spec).await.unwrap();
    cloud.get_server(&s.id).await.unwrap();
    let rec = srv.sim().boot_record(&s.id).unwrap();
    assert_eq!(rec.ipxe_source, "userdata");
    assert_eq!(rec.ipxe_script.as_deref(), Some("#!ipxe\ndhcp\nshell\n"));

    // An OS install is no custom_ipxe boot.
    let s = cloud
        .create_server(&CreateServer::new(
            "plain",
            "c3.small.x86",
            "sv",
            OWNER,
            Boot::Os("ubuntu_24_04".into()),
        ))
        .await
        .unwrap();
    cloud.get_server(&s.id).await.unwrap();
    assert!(srv.sim().boot_record(&s.id).is_none());
}

#[allow(dead_code)]
fn _wire_is_public(_: wire::Device) {}
