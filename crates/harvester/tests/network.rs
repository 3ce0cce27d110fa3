#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use ingot_harvester::network::{
    InterfaceVlans, Layer, NetworkError, NetworkMode, PlanInput, Port, PortKind, PortVlan, Step,
    VlanRef, apply, plan,
};
use pretty_assertions::assert_eq;

const UUID_1000: &str = "0b5f7c2a-1111-4a0e-9f7e-2f0c0c0c1000";

/// A device as Metal provisions it: bond0 (layer 3) over eth0..eth{n-1}, all bonded.
fn device(n: usize) -> Vec<Port> {
    let mut ports = vec![Port::bond("bond0")];
    for i in 0..n {
        ports.push(Port::physical(
            &format!("eth{i}"),
            &format!("0c:c4:7a:00:00:{i:02x}"),
        ));
    }
    ports
}

fn project() -> Vec<PortVlan> {
    vec![PortVlan {
        vxlan: Some(1000),
        id: Some(UUID_1000.into()),
    }]
}

fn s(port: &str) -> String {
    port.to_owned()
}

/// The README's example VLANs for a mode.
fn readme_vlans(mode: NetworkMode) -> Vec<InterfaceVlans> {
    match mode {
        NetworkMode::Layer3 => vec![],
        NetworkMode::Hybrid => vec![InterfaceVlans::new("eth1", &["1000", "1001"])],
        NetworkMode::HybridBonded | NetworkMode::Layer2Bonded => {
            vec![InterfaceVlans::new("bond0", &["1000", "1001"])]
        }
        NetworkMode::Layer2Individual => vec![
            InterfaceVlans::new("eth0", &["1000"]),
            InterfaceVlans::new("eth1", &["1000", "1001"]),
        ],
    }
}

fn plan_for(
    mode: NetworkMode,
    vlans: &[InterfaceVlans],
    ports: &[Port],
    project: &[PortVlan],
) -> Result<Vec<Step>, NetworkError> {
    plan(&PlanInput {
        mode: Some(mode.as_str()),
        interfaces: vlans,
        ports,
        create_vlans: true,
        project_vlans: project,
    })
}

/// Applies `steps` to the state, panicking if the model refuses one.
fn run(ports: &mut [Port], project: &mut Vec<PortVlan>, steps: &[Step]) {
    for step in steps {
        apply(ports, project, step).unwrap_or_else(|e| panic!("{step}: {e}"));
    }
}

#[test]
fn golden_plans_from_metals_default() {
    use NetworkMode::*;
    let v1000 = || VlanRef::Vxlan(1000);
    let v1001 = || VlanRef::Vxlan(1001);
    let cases: Vec<(NetworkMode, Vec<Step>)> = vec![
        (Layer3, vec![]),
        (
            Hybrid,
            vec![
                Step::CreateVlan { vxlan: 1001 },
                Step::Disbond { port: s("eth1") },
                Step::Disbond { port: s("eth3") },
                Step::AssignVlan {
                    port: s("eth1"),
                    vlan: v1000(),
                },
                Step::AssignVlan {
                    port: s("eth1"),
                    vlan: v1001(),
                },
            ],
        ),
        (
            HybridBonded,
            vec![
                Step::CreateVlan { vxlan: 1001 },
                Step::AssignVlan {
                    port: s("bond0"),
                    vlan: v1000(),
                },
                Step::AssignVlan {
                    port: s("bond0"),
                    vlan: v1001(),
                },
            ],
        ),
        (
            Layer2Bonded,
            vec![
                Step::CreateVlan { vxlan: 1001 },
                Step::ConvertToLayer2 { port: s("bond0") },
                Step::AssignVlan {
                    port: s("bond0"),
                    vlan: v1000(),
                },
                Step::AssignVlan {
                    port: s("bond0"),
                    vlan: v1001(),
                },
            ],
        ),
        (
            Layer2Individual,
            vec![
                Step::CreateVlan { vxlan: 1001 },
                Step::ConvertToLayer2 { port: s("bond0") },
                Step::Disbond { port: s("eth0") },
                Step::Disbond { port: s("eth1") },
                Step::Disbond { port: s("eth2") },
                Step::Disbond { port: s("eth3") },
                Step::AssignVlan {
                    port: s("eth0"),
                    vlan: v1000(),
                },
                Step::AssignVlan {
                    port: s("eth1"),
                    vlan: v1000(),
                },
                Step::AssignVlan {
                    port: s("eth1"),
                    vlan: v1001(),
                },
            ],
        ),
    ];
    for (mode, expected) in cases {
        let steps = plan_for(mode, &readme_vlans(mode), &device(4), &project()).unwrap();
        assert_eq!(steps, expected, "{mode}");
    }
}

#[test]
fn no_type_means_no_change() {
    let steps = plan(&PlanInput {
        mode: None,
        ports: &device(2),
        ..Default::default()
    })
    .unwrap();
    assert!(steps.is_empty());
    let vlans = [InterfaceVlans::new("eth1", &["1000"])];
    let err = plan(&PlanInput {
        mode: Some(""),
        interfaces: &vlans,
        ports: &device(2),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(err, NetworkError::VlansWithoutMode);
}

#[test]
fn vlans_are_not_created_unless_opted_in() {
    let vlans = readme_vlans(NetworkMode::HybridBonded);
    let steps = plan(&PlanInput {
        mode: Some("hybrid-bonded"),
        interfaces: &vlans,
        ports: &device(2),
        create_vlans: false,
        project_vlans: &[],
    })
    .unwrap();
    assert!(
        !steps.iter().any(|s| matches!(s, Step::CreateVlan { .. })),
        "{steps:?}"
    );
}

/// Every mode from every other mode's converged state (2- and 4-port devices): the plan
/// applies cleanly, the result re-plans to nothing, satisfies the mode, and every partial
/// application re-plans to exactly the remaining steps.
#[test]
fn every_transition_converges_and_replans_idempotently() {
    use NetworkMode::*;
    for n in [2, 4] {
        for from in NetworkMode::ALL {
            let mut project = project();
            let mut start = device(n);
            let steps = plan_for(from, &readme_vlans(from), &start, &project).unwrap();
            run(&mut start, &mut project, &steps);
            assert!(
                plan_for(from, &readme_vlans(from), &start, &project)
                    .unwrap()
                    .is_empty()
            );

            for to in NetworkMode::ALL {
                let vlans = readme_vlans(to);
                let steps = plan_for(to, &vlans, &start, &project).unwrap();
                for k in 0..=steps.len() {
                    let mut ports = start.clone();
                    let mut proj = project.clone();
                    run(&mut ports, &mut proj, &steps[..k]);
                    let rest = plan_for(to, &vlans, &ports, &proj).unwrap();
                    assert_eq!(
                        rest,
                        steps[k..].to_vec(),
                        "{n} ports, {from} -> {to}, after {k} steps"
                    );
                }
                let mut ports = start.clone();
                let mut proj = project.clone();
                run(&mut ports, &mut proj, &steps);
                check_mode(to, &ports, &vlans);
            }
        }
    }

    fn check_mode(mode: NetworkMode, ports: &[Port], vlans: &[InterfaceVlans]) {
        let bond = ports.iter().find(|p| p.kind == PortKind::Bond).unwrap();
        let layer = match mode {
            Layer3 | Hybrid | HybridBonded => Layer::L3,
            Layer2Bonded | Layer2Individual => Layer::L2,
        };
        assert_eq!(bond.layer, layer, "{mode}");
        for p in ports.iter().filter(|p| p.kind == PortKind::Physical) {
            let idx: u32 = p.name[3..].parse().unwrap();
            let bonded = match mode {
                Layer3 | HybridBonded | Layer2Bonded => true,
                Hybrid => idx.is_multiple_of(2),
                Layer2Individual => false,
            };
            assert_eq!(p.bonded, bonded, "{mode} {}", p.name);
        }
        for p in ports {
            let want: Vec<u16> = vlans
                .iter()
                .filter(|i| i.name.as_deref() == Some(&p.name))
                .flat_map(|i| i.vlan_ids.iter().map(|v| v.parse::<u16>().unwrap()))
                .collect();
            let have: Vec<u16> = p.vlans.iter().map(|v| v.vxlan.unwrap()).collect();
            assert_eq!(have, want, "{mode} {}", p.name);
        }
    }
}

#[test]
fn hybrid_to_layer3_unassigns_before_rebonding() {
    let mut project = project();
    let mut ports = device(2);
    let hybrid = readme_vlans(NetworkMode::Hybrid);
    let steps = plan_for(NetworkMode::Hybrid, &hybrid, &ports, &project).unwrap();
    run(&mut ports, &mut project, &steps);
    let back = plan_for(NetworkMode::Layer3, &[], &ports, &project).unwrap();
    assert_eq!(
        back,
        vec![
            Step::UnassignVlan {
                port: s("eth1"),
                vlan: VlanRef::Id(UUID_1000.into())
            },
            Step::UnassignVlan {
                port: s("eth1"),
                vlan: VlanRef::Vxlan(1001)
            },
            Step::Bond { port: s("eth1") },
        ]
    );
}

#[test]
fn vlans_by_uuid_match_assigned_vxlans() {
    let mut ports = device(2);
    ports[0].vlans = project();
    let vlans = [InterfaceVlans::new("bond0", &[&UUID_1000.to_uppercase()])];
    let steps = plan_for(NetworkMode::HybridBonded, &vlans, &ports, &project()).unwrap();
    assert!(steps.is_empty(), "{steps:?}");
    // By number, too.
    let vlans = [InterfaceVlans::new("bond0", &["1000"])];
    assert!(
        plan_for(NetworkMode::HybridBonded, &vlans, &ports, &project())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn port_that_cannot_disbond_stays_bonded() {
    let mut ports = device(4);
    ports[4].disbond_supported = false; // eth3
    let steps = plan_for(
        NetworkMode::Hybrid,
        &readme_vlans(NetworkMode::Hybrid),
        &ports,
        &project(),
    )
    .unwrap();
    assert!(
        !steps.contains(&Step::Disbond { port: s("eth3") }),
        "{steps:?}"
    );
    let vlans = [InterfaceVlans::new("eth3", &["1000"])];
    let err = plan_for(NetworkMode::Hybrid, &vlans, &ports, &project()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "networkingConfiguration.interfaceConfiguration[0].vlanIDS: mode hybrid needs eth3 unbonded for its VLANs, but Metal does not support disbonding eth3 on this device; move the VLANs to another port"
    );
}

#[test]
fn validation_errors_name_the_field_and_the_fix() {
    let ports = device(2);
    let cases: Vec<(&str, Vec<InterfaceVlans>, &str)> = vec![
        (
            "layer3",
            vec![InterfaceVlans::new("bond0", &["1000"])],
            "networkingConfiguration.interfaceConfiguration[0].vlanIDS: mode layer3 does not allow VLANs on bond0; layer3 carries no VLANs: remove interfaceConfiguration, or pick hybrid, hybrid-bonded, layer2-bonded or layer2-individual (ports that may carry VLANs here: none)",
        ),
        (
            "hybrid",
            vec![InterfaceVlans::new("eth0", &["1000"])],
            "networkingConfiguration.interfaceConfiguration[0].vlanIDS: mode hybrid does not allow VLANs on eth0; in hybrid mode VLANs go on the odd ports that are unbonded from bond0 (ports that may carry VLANs here: eth1)",
        ),
        (
            "hybrid-bonded",
            vec![InterfaceVlans::new("eth1", &["1000"])],
            "networkingConfiguration.interfaceConfiguration[0].vlanIDS: mode hybrid-bonded does not allow VLANs on eth1; VLANs go on the bond (ports that may carry VLANs here: bond0)",
        ),
        (
            "layer2-individual",
            vec![
                InterfaceVlans::new("eth0", &["1000"]),
                InterfaceVlans::new("bond0", &["1001"]),
            ],
            "networkingConfiguration.interfaceConfiguration[1].vlanIDS: mode layer2-individual does not allow VLANs on bond0; VLANs go on the individual physical ports (ports that may carry VLANs here: eth0, eth1)",
        ),
        (
            "layer2-bonded",
            vec![InterfaceVlans::new("eth5", &["1000"])],
            "networkingConfiguration.interfaceConfiguration[0].name names port \"eth5\", which the device does not have; ports that exist: bond0, eth0, eth1",
        ),
        (
            "layer2-bonded",
            vec![InterfaceVlans {
                name: None,
                vlan_ids: vec!["1000".into()],
            }],
            "networkingConfiguration.interfaceConfiguration[0].name is missing; name the port, e.g. eth1 or bond0",
        ),
        (
            "layer2-bonded",
            vec![InterfaceVlans::new("bond0", &["1000", "4000"])],
            "networkingConfiguration.interfaceConfiguration[0].vlanIDS[1] has \"4000\", which is neither a vxlan number from 2 to 3999 nor a virtual network UUID",
        ),
        (
            "hybird",
            vec![],
            "networkingConfiguration.type \"hybird\" is not a network mode; use layer3, hybrid, hybrid-bonded, layer2-bonded or layer2-individual",
        ),
    ];
    for (mode, vlans, message) in cases {
        let err = plan(&PlanInput {
            mode: Some(mode),
            interfaces: &vlans,
            ports: &ports,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    let no_bond: Vec<Port> = device(2)
        .into_iter()
        .filter(|p| p.kind != PortKind::Bond)
        .collect();
    let err = plan(&PlanInput {
        mode: Some("layer3"),
        ports: &no_bond,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(
        err,
        NetworkError::NoBond {
            mode: NetworkMode::Layer3
        }
    );
}

#[test]
fn the_model_refuses_what_metal_refuses() {
    let mut ports = device(2);
    let mut project = project();
    // VLAN on a bonded physical port.
    let err = apply(
        &mut ports,
        &mut project,
        &Step::AssignVlan {
            port: s("eth1"),
            vlan: VlanRef::Vxlan(1000),
        },
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("a bonded physical port cannot carry VLANs"),
        "{err}"
    );
    // A VLAN the project does not have.
    let err = apply(
        &mut ports,
        &mut project,
        &Step::AssignVlan {
            port: s("bond0"),
            vlan: VlanRef::Vxlan(1001),
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    // Bonding a port that still has VLANs.
    run(
        &mut ports,
        &mut project,
        &[Step::Disbond { port: s("eth1") }],
    );
    run(
        &mut ports,
        &mut project,
        &[Step::AssignVlan {
            port: s("eth1"),
            vlan: VlanRef::Vxlan(1000),
        }],
    );
    let err = apply(&mut ports, &mut project, &Step::Bond { port: s("eth1") }).unwrap_err();
    assert!(err.to_string().contains("still has VLANs"), "{err}");
}

#[test]
fn metal_port_fields_map_onto_the_model() {
    assert_eq!(
        PortKind::from_metal_type("NetworkPort"),
        Some(PortKind::Physical)
    );
    assert_eq!(
        PortKind::from_metal_type("NetworkBondPort"),
        Some(PortKind::Bond)
    );
    assert_eq!(PortKind::from_metal_type("Port"), None);
    for (t, layer) in [
        ("layer3", Layer::L3),
        ("hybrid", Layer::L3),
        ("hybrid-bonded", Layer::L3),
        ("layer2-bonded", Layer::L2),
        ("layer2-individual", Layer::L2),
        ("layer2", Layer::L2),
    ] {
        assert_eq!(Layer::from_network_type(t), Some(layer), "{t}");
    }
    assert_eq!(Layer::from_network_type("layer-3"), None);
    // Every mode name is also a network_type Metal reports on the bond.
    for mode in NetworkMode::ALL {
        assert!(Layer::from_network_type(mode.as_str()).is_some(), "{mode}");
    }
}
