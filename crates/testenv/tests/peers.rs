//! The harness's peers start on ports of their own and answer there: sushy-tools over TLS (its
//! certificate from the CA it hands out) and ipmi_sim (ipmitool against it).

use std::time::Duration;

use ingot_testenv::harness::peers;
use ingot_testenv::wait_for;

#[tokio::test]
async fn sushy_answers_over_tls_on_the_port_it_logged() {
    let sushy = peers::start_sushy_tls_with(
        "admin",
        "secret",
        &[peers::SushySystem {
            name: "second",
            uuid: "0c0c7e4a-3b5e-4d8a-9b1e-2f6a7c8d9e0f",
            power_state: "Off",
        }],
    );
    assert_ne!(sushy.port, 0);
    let fake = wait_for("sushy's fake system", Duration::from_secs(30), async || {
        sushy.system_named("admin", "secret", "fake").await
    })
    .await;
    assert_eq!(fake["PowerState"], "On", "{fake}");
    let second = sushy.system_named("admin", "secret", "second").await;
    assert_eq!(second.map(|s| s["PowerState"].clone()), Some("Off".into()));
    // Its certificate is the CA's.
    let ca = std::fs::read(&sushy.ca).unwrap_or_default();
    let ca = reqwest::Certificate::from_pem(&ca).unwrap_or_else(|e| panic!("{e}"));
    let http = reqwest::Client::builder()
        .tls_certs_only([ca])
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let root = http
        .get(format!("https://127.0.0.1:{}/redfish/v1/", sushy.port))
        .send()
        .await
        .unwrap_or_else(|e| panic!("sushy by its CA: {e}"));
    assert!(root.status().is_success(), "{}", root.status());
    // A wrong password is refused.
    assert!(sushy.system("admin", "wrong").await.is_none());
}

#[tokio::test]
async fn ipmi_sim_answers_ipmitool_on_the_port_it_bound() {
    let mut sim = peers::start_ipmi_sim(&ingot_ipmi_sim::FruInfo::example(1).encode());
    assert_ne!(sim.addr.port(), 0);
    sim.wait_answering().await;
    assert_eq!(
        sim.ipmitool(&["chassis", "power", "status"]),
        "Chassis Power is on"
    );
    sim.stop();
    assert_eq!(
        sim.ipmitool(&["-R", "1", "-N", "1", "chassis", "power", "status"]),
        ""
    );
}
