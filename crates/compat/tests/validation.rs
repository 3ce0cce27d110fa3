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
