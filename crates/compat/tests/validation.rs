//! Invalid objects are refused by the API server itself, with a message that names the field
//! (and, for ingot's own rules, says what to write instead).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use kube::Discovery;
use serde_json::{Value, json};

struct Case {
    what: &'static str,
    object: Value,
    /// Substrings the API server's message must contain.
    expect: &'static [&'static str],
}

fn pool(spec: Value) -> Value {
    json!({"apiVersion": "equinix.harvesterhci.io/v1", "kind": "InstancePool",
        "metadata": {"name": format!("invalid-{}", ingot_testenv::random_suffix(8))}, "spec": spec})
}

/// A pool over Inventories, with `extra` merged into its spec.
fn on_premises(extra: Value) -> Value {
    let mut spec = json!({"count": 2, "inventorySelector": {"matchLabels": {"rack": "a"}},
        "inventoryNamespace": "metal", "addressPool": "nodes"});
    merge(&mut spec, extra);
    pool(spec)
}

fn inventory(spec_patch: Value) -> Value {
    let mut spec =
        json!({"baseboardSpec": {"connection": {"host": "10.0.0.5", "insecureTLS": false}}});
    merge(&mut spec, spec_patch);
    json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory", "metadata": {"name": "invalid"}, "spec": spec})
}

fn job(tasks: Value) -> Value {
    json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job", "metadata": {"name": "invalid"},
        "spec": {"machineRef": {"name": "m", "namespace": "default"}, "tasks": tasks}})
}

fn machine(connection: Value) -> Value {
    json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine", "metadata": {"name": "invalid"},
        "spec": {"connection": connection}})
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p,
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            what: "negative count",
            object: pool(json!({"count": -1})),
            expect: &["spec.count", "greater than or equal to 0"],
        },
        Case {
            what: "unknown network type",
            object: pool(json!({"networkingConfiguration": {"type": "layer4"}})),
            expect: &[
                "spec.networkingConfiguration.type",
                "Unsupported value: \"layer4\"",
                "hybrid-bonded",
            ],
        },
        Case {
            what: "bad duration",
            object: pool(json!({"nodeCleanupWaitInterval": "5 minutes"})),
            expect: &["spec.nodeCleanupWaitInterval", "Go duration such as 5m"],
        },
        Case {
            what: "VLAN id out of range",
            object: pool(json!({"networkingConfiguration": {"type": "hybrid",
                "interfaceConfiguration": [{"name": "eth1", "vlanIDS": ["1000", "4095"]}]}})),
            expect: &[
                "spec.networkingConfiguration.interfaceConfiguration[0].vlanIDS",
                "from 2 to 3999",
            ],
        },
        Case {
            what: "VLAN neither a number nor a UUID",
            object: pool(
                json!({"networkingConfiguration": {"interfaceConfiguration": [{"name": "bond0", "vlanIDS": ["vlan-a"]}]}}),
            ),
            expect: &["vlanIDS", "UUID of a Metal virtual network"],
        },
        Case {
            what: "retired facility",
            object: pool(json!({"facility": ["sg1"]})),
            expect: &["spec.facility", "set spec.metro instead"],
        },
        Case {
            what: "unknown billing cycle",
            object: pool(json!({"billingCycle": "weekly"})),
            expect: &["spec.billingCycle", "Unsupported value: \"weekly\""],
        },
        Case {
            what: "inventorySelector without inventoryNamespace",
            object: pool(json!({"inventorySelector": {"matchLabels": {"rack": "a"}}})),
            expect: &["spec.inventoryNamespace", "required with inventorySelector"],
        },
        Case {
            what: "inventorySelector without addressPool",
            object: pool(json!({"inventorySelector": {}, "inventoryNamespace": "metal"})),
            expect: &["spec.addressPool", "required with inventorySelector"],
        },
        Case {
            what: "addressPool without inventorySelector",
            object: pool(json!({"addressPool": "nodes"})),
            expect: &[
                "spec.addressPool",
                "set inventorySelector and inventoryNamespace",
            ],
        },
        Case {
            what: "bootMedia without inventorySelector",
            object: pool(json!({"bootMedia": "cd"})),
            expect: &["spec.bootMedia", "set inventorySelector"],
        },
        Case {
            what: "bootMedia neither pxe nor cd",
            object: on_premises(json!({"bootMedia": "usb"})),
            expect: &["spec.bootMedia", "Unsupported value: \"usb\""],
        },
        Case {
            what: "wipePolicy without inventorySelector",
            object: pool(json!({"wipePolicy": "metadata"})),
            expect: &["spec.wipePolicy", "set inventorySelector"],
        },
        Case {
            what: "wipePolicy neither none nor metadata",
            object: on_premises(json!({"wipePolicy": "everything"})),
            expect: &["spec.wipePolicy", "Unsupported value: \"everything\""],
        },
        Case {
            what: "inventoryMinimum without inventorySelector",
            object: pool(json!({"inventoryMinimum": {"cores": 32}})),
            expect: &["spec.inventoryMinimum", "set inventorySelector"],
        },
        Case {
            what: "inventoryMinimum of no cores",
            object: on_premises(json!({"inventoryMinimum": {"cores": 0}})),
            expect: &[
                "spec.inventoryMinimum.cores",
                "should be greater than or equal to 1",
            ],
        },
        Case {
            what: "inventoryNamespace without inventorySelector",
            object: pool(json!({"inventoryNamespace": "metal"})),
            expect: &["spec.inventorySelector", "required with inventoryNamespace"],
        },
        Case {
            what: "inventoryNamespace not a namespace name",
            object: on_premises(json!({"inventoryNamespace": "Metal_A"})),
            expect: &["spec.inventoryNamespace", "must be a namespace name"],
        },
        Case {
            what: "an unknown selector operator",
            object: on_premises(json!({"inventorySelector": {"matchExpressions": [
                {"key": "rack", "operator": "Sideways", "values": ["a"]}]}})),
            expect: &["spec.inventorySelector", "operator In or NotIn with values"],
        },
        Case {
            what: "In without values",
            object: on_premises(json!({"inventorySelector": {"matchExpressions": [
                {"key": "rack", "operator": "In"}]}})),
            expect: &[
                "spec.inventorySelector",
                "Exists or DoesNotExist without values",
            ],
        },
        Case {
            what: "plan on premises",
            object: on_premises(json!({"plan": "c3.small.x86"})),
            expect: &["spec.plan", "Equinix Metal field", "remove spec.plan"],
        },
        Case {
            what: "metro on premises",
            object: on_premises(json!({"metro": "SG"})),
            expect: &["spec.metro", "remove spec.metro"],
        },
        Case {
            what: "billingCycle on premises",
            object: on_premises(json!({"billingCycle": "hourly"})),
            expect: &["spec.billingCycle", "remove spec.billingCycle"],
        },
        Case {
            what: "spotInstance on premises",
            object: on_premises(json!({"spotInstance": true})),
            expect: &["spec.spotInstance", "remove spec.spotInstance"],
        },
        Case {
            what: "spotPriceMax on premises",
            object: on_premises(json!({"spotPriceMax": "0.5"})),
            expect: &["spec.spotPriceMax", "remove spec.spotPriceMax"],
        },
        Case {
            what: "createMissingVlans on premises",
            object: on_premises(json!({"createMissingVlans": true})),
            expect: &["spec.createMissingVlans", "remove spec.createMissingVlans"],
        },
        Case {
            what: "port network type on premises",
            object: on_premises(json!({"networkingConfiguration": {"type": "hybrid"}})),
            expect: &[
                "spec.networkingConfiguration.type",
                "Equinix Metal port modes",
                "remove spec.networkingConfiguration.type",
            ],
        },
        Case {
            what: "port VLAN assignment on premises",
            object: on_premises(
                json!({"networkingConfiguration": {"interfaceConfiguration": [{"name": "eth1", "vlanIDS": ["1000"]}]}}),
            ),
            expect: &[
                "spec.networkingConfiguration.interfaceConfiguration",
                "only sets the management network's VLAN",
                "named eth0 or bond0",
            ],
        },
        Case {
            what: "more than the management VLAN on premises",
            object: on_premises(
                json!({"networkingConfiguration": {"interfaceConfiguration": [{"name": "bond0", "vlanIDS": ["100", "200"]}]}}),
            ),
            expect: &[
                "spec.networkingConfiguration.interfaceConfiguration",
                "one VLAN number in vlanIDS",
            ],
        },
        Case {
            what: "a Metal virtual network as the management VLAN on premises",
            object: on_premises(
                json!({"networkingConfiguration": {"interfaceConfiguration": [{"name": "eth0", "vlanIDS": ["8b1c3f52-0d8e-4a8c-9a57-6f1f3c7b2a10"]}]}}),
            ),
            expect: &[
                "spec.networkingConfiguration.interfaceConfiguration",
                "one VLAN number in vlanIDS",
            ],
        },
        Case {
            what: "a management interface an Inventory does not have",
            object: on_premises(json!({"managementInterface": ["eth0", "eth1"]})),
            expect: &["spec.managementInterface", "may only name eth0"],
        },
        Case {
            what: "unknown power action requested",
            object: inventory(json!({"powerActionRequested": "explode"})),
            expect: &[
                "spec.powerActionRequested",
                "Unsupported value: \"explode\"",
                "poweron",
            ],
        },
        Case {
            what: "bad event polling interval",
            object: inventory(json!({"events": {"enabled": true, "pollingInterval": "hourly"}})),
            expect: &["spec.events.pollingInterval", "Go duration"],
        },
        Case {
            what: "unknown rufio power action",
            object: job(json!([{"powerAction": "explode"}])),
            expect: &[
                "spec.tasks[0].powerAction",
                "Unsupported value: \"explode\"",
            ],
        },
        Case {
            what: "two actions in one task",
            object: job(
                json!([{"powerAction": "on", "oneTimeBootDeviceAction": {"device": ["pxe"]}}]),
            ),
            expect: &["spec.tasks[0]", "must have at most 1"],
        },
        Case {
            what: "empty task list",
            object: job(json!([])),
            expect: &["spec.tasks", "should have at least 1"],
        },
        Case {
            what: "unknown boot device",
            object: job(json!([{"oneTimeBootDeviceAction": {"device": ["floppy"]}}])),
            expect: &[
                "spec.tasks[0].oneTimeBootDeviceAction.device",
                "pxe, disk, bios, cdrom, safe",
            ],
        },
        Case {
            what: "IPMI cipher suite 0",
            object: machine(
                json!({"host": "10.0.0.5", "insecureTLS": false, "providerOptions": {"ipmitool": {"cipherSuite": "0"}}}),
            ),
            expect: &[
                "spec.connection.providerOptions.ipmitool.cipherSuite",
                "suite 0",
            ],
        },
        Case {
            what: "empty BMC host",
            object: machine(json!({"host": "", "insecureTLS": false})),
            expect: &["spec.connection.host", "at least 1 chars long"],
        },
        Case {
            what: "port out of range",
            object: machine(json!({"host": "10.0.0.5", "port": 70000, "insecureTLS": false})),
            expect: &["spec.connection.port", "less than or equal to 65535"],
        },
        Case {
            what: "address pool CIDR",
            object: json!({"apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool", "metadata": {"name": "invalid"},
                "spec": {"cidr": "172.16.128.0/33", "gateway": "172.16.128.1"}}),
            expect: &["spec.cidr", "must be a CIDR"],
        },
    ]
}

#[tokio::test]
async fn invalid_objects_are_refused_with_the_field_named() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let namespace = env.namespace("validation").await.expect("namespace");
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");

    let mut problems = Vec::new();
    for case in cases() {
        match ingot_compat::create(&client, &discovery, &namespace, &case.object).await {
            Ok(_) => problems.push(format!("{}: accepted, should be refused", case.what)),
            Err(kube::Error::Api(status)) => {
                if status.code != 422 {
                    problems.push(format!(
                        "{}: HTTP {} instead of 422: {}",
                        case.what, status.code, status.message
                    ));
                }
                for needle in case.expect {
                    if !status.message.contains(needle) {
                        problems.push(format!(
                            "{}: message lacks {needle:?}: {}",
                            case.what, status.message
                        ));
                    }
                }
            }
            Err(other) => problems.push(format!("{}: {other}", case.what)),
        }
    }
    assert!(
        problems.is_empty(),
        "validation problems:\n  {}",
        problems.join("\n  ")
    );
}

/// The rules above refuse only what they name: an Equinix pool keeps every Equinix field, and a
/// pool over Inventories keeps the settings that apply on premises.
#[tokio::test]
async fn valid_pools_of_both_backends_are_accepted() {
    let env = ingot_testenv::shared().await;
    let client = env.client().expect("client");
    let namespace = env.namespace("validation").await.expect("namespace");
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let accepted = [
        (
            "an Equinix pool with every Equinix field",
            pool(
                json!({"count": 3, "plan": "c3.small.x86", "metro": "SG", "billingCycle": "hourly",
                "spotInstance": true, "spotPriceMax": "0.5", "createMissingVlans": true,
                "managementInterface": ["eth0", "eth1"],
                "networkingConfiguration": {"type": "hybrid",
                    "interfaceConfiguration": [{"name": "eth1", "vlanIDS": ["1000"]}]}}),
            ),
        ),
        (
            "a pool over Inventories with the settings that apply on premises",
            on_premises(
                json!({"ipxeScriptUrl": "http://boot.example/ipxe", "harvesterVersion": "v1.4.2",
                "managementInterface": ["eth0"], "managementBondingOptions": {"mode": "active-backup"},
                "installDisk": "/dev/nvme0n1", "nodeCleanupWaitInterval": "5m", "maxUnhealthy": 1,
                "bootMedia": "cd", "wipePolicy": "metadata",
                "inventoryMinimum": {"cores": 32, "memoryGiB": 128, "diskGiB": 400},
                "drainTimeout": "5m", "singleBoot": true, "isoUrl": "http://boot.example/harvester.iso",
                "plan": "", "metro": "", "facility": [], "billingCycle": "", "spotPriceMax": "",
                "spotInstance": false, "createMissingVlans": false,
                "networkingConfiguration": {"type": "", "interfaceConfiguration": []},
                "inventorySelector": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a", "b"]}]}}),
            ),
        ),
        (
            "a pool over Inventories on a tagged management network",
            on_premises(
                json!({"networkingConfiguration": {"interfaceConfiguration": [{"name": "bond0", "vlanIDS": ["100"]}]}}),
            ),
        ),
        (
            "a pool over every Inventory of a namespace",
            pool(
                json!({"count": 1, "inventorySelector": {}, "inventoryNamespace": "metal", "addressPool": "nodes"}),
            ),
        ),
    ];
    let mut problems = Vec::new();
    for (what, object) in accepted {
        if let Err(e) = ingot_compat::create(&client, &discovery, &namespace, &object).await {
            problems.push(format!("{what}: refused: {e}"));
        }
    }
    assert!(
        problems.is_empty(),
        "valid pools refused:\n  {}",
        problems.join("\n  ")
    );
}
