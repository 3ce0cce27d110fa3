//! Push events end to end on the real control plane: `ingot run --controllers seeder` with the
//! events receiver (HTTPS, self-signed), a local Inventory whose BMC is ingot's Redfish
//! emulator. The subscription is made on the BMC and read back there; an event the BMC pushes
//! becomes the Node Event within seconds although the Inventory is polled hourly (and before the
//! rest of a slow BMC's hardware is read); a power event
//! refreshes the Machine's power although it is read every ten minutes; forged events are
//! refused and counted; a BMC reset is repaired by the next poll; after a key change the old
//! key's subscription is replaced by the new one's; disabling the events and
//! deleting the Inventory remove the subscription; a BMC that refuses subscriptions is said
//! once on the Inventory.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;
mod push_support;
mod rufio_support;

use std::time::{Duration, Instant};

use ingot_api::rufio::Machine;
use ingot_api::seeder::Inventory;
use ingot_bmc_sim::{EventKnobs, SimBmc, SubscriptionView};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use push_support::*;
use rufio_support::*;
use serde_json::{Value, json};

const NAME: &str = "harvester-push";
const REFUSING: &str = "harvester-push-refused";

async fn wait_subscriptions(bmc: &SimBmc, what: &str, n: usize) -> Vec<SubscriptionView> {
    wait_for(what, Duration::from_secs(30), || async {
        let s = bmc.state.subscriptions();
        (s.len() == n).then_some(s)
    })
    .await
}

/// A POST to the receiver as a forger would send it; the answer's status.
async fn post_event(url: &str, secret: Option<&str>, body: &Value) -> u16 {
    let http = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let mut req = http.post(url).json(body);
    if let Some(s) = secret {
        req = req.header(SECRET_HEADER, s);
    }
    req.send().await.unwrap().status().as_u16()
}

/// A certificate and its key (PEM), as a kubernetes.io/tls Secret holds them.
struct Tls {
    cert_pem: String,
    key_pem: String,
}

/// A certificate for 127.0.0.1, where the test's BMCs and clients reach the receiver.
fn receiver_certificate() -> Tls {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    Tls {
        cert_pem: made.cert.pem(),
        key_pem: made.signing_key.serialize_pem(),
    }
}

/// The receiver's flags and key as the chart renders them from `seeder.events.push` (the
/// chart's own random key Secret): the `--events-*` flags of the Deployment, with the key file
/// where the pod mounts the Secret moved to a temporary directory holding the Secret's item as
/// the kubelet writes it, and the certificate of `seeder.events.push.tlsSecret` (`tls`) likewise.
/// Returns the flags and the key file.
fn chart_push_flags(port: u16, url: &str, tls: &Tls) -> (Vec<String>, std::path::PathBuf) {
    let rendered = chart_support::render(
        "ingot",
        chart_support::MANIFESTS_NAMESPACE,
        &[
            "controllers={seeder}".to_owned(),
            "seeder.events.push.enabled=true".to_owned(),
            format!("seeder.events.push.url={url}"),
            format!("seeder.events.push.port={port}"),
            "seeder.events.push.tlsSecret=push-events-tls".to_owned(),
        ],
        &[
            "--show-only",
            "templates/deployment.yaml",
            "--show-only",
            "templates/events.yaml",
        ],
    );
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&rendered)
        .map(|doc| <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .collect();
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let mount = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "events-key")
        .unwrap();
    assert_eq!(mount["readOnly"], true);
    let mount_path = mount["mountPath"].as_str().unwrap();
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "events-key")
        .unwrap();
    let secret_name = volume["secret"]["secretName"].as_str().unwrap();
    let secret = docs
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == secret_name)
        .unwrap();
    let item = &volume["secret"]["items"][0];
    let key: k8s_openapi::ByteString = serde_json::from_value(json!(
        secret["data"][item["key"].as_str().unwrap()]
            .as_str()
            .unwrap()
    ))
    .unwrap();
    let dir = temp_dir("push-key");
    std::fs::write(dir.join(item["path"].as_str().unwrap()), &key.0).unwrap();
    // The kubernetes.io/tls Secret named by tlsSecret, as the kubelet writes it.
    let tls_mount = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "events-tls")
        .unwrap();
    assert_eq!(tls_mount["readOnly"], true);
    let tls_path = tls_mount["mountPath"].as_str().unwrap();
    assert!(
        pod["volumes"].as_sequence().unwrap().iter().any(|v| {
            v["name"] == "events-tls" && v["secret"]["secretName"] == "push-events-tls"
        })
    );
    let tls_dir = temp_dir("push-tls");
    std::fs::write(tls_dir.join("tls.crt"), &tls.cert_pem).unwrap();
    std::fs::write(tls_dir.join("tls.key"), &tls.key_pem).unwrap();
    let flags: Vec<String> = pod["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .filter(|a| a.starts_with("--events-"))
        .map(|a| {
            a.replace(tls_path, &tls_dir.display().to_string())
                .replace(mount_path, &dir.display().to_string())
        })
        .collect();
    assert_eq!(
        flags,
        [
            format!("--events-addr=0.0.0.0:{port}"),
            format!("--events-url={url}"),
            format!("--events-key-file={}/key", dir.display()),
            "--events-max-connections=256".to_owned(),
            "--events-max-streams=1000".to_owned(),
            format!("--events-tls-cert={}/tls.crt", tls_dir.display()),
            format!("--events-tls-key={}/tls.key", tls_dir.display()),
        ]
    );
    (flags, dir.join("key"))
}

#[tokio::test]
async fn pushed_events_end_to_end() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    clean(&client, &[NAME, REFUSING]).await;

    let fleet = two_bmcs().await;
    let bmc = &fleet.bmcs[0];
    let refusing = &fleet.bmcs[1];
    let mut q = refusing.state.quirks();
    q.event_service_disabled = true;
    refusing.state.set_quirks(q);

    create_nodes_and_secrets(&client, &[NAME, REFUSING]).await;
    let port = closed_port();
    let url = format!("https://127.0.0.1:{port}/redfish-events");
    let tls = receiver_certificate();
    let (flags, key_file) = chart_push_flags(port, &url, &tls);

    let kubeconfig = chart_support::install_from_manifests(env.kubeconfig_path(), "seeder");
    let mut ingot =
        rufio_support::ingot_seeder_with_machine_interval(&kubeconfig, "ingot-push-test", 600)
            .args(flags)
            .start();

    // Polled hourly: after the first read, only a push can bring the hardware news quickly.
    let inventories: Api<Inventory> = Api::namespaced(client.clone(), NS);
    inventories
        .create(&PostParams::default(), &inventory(NAME, bmc, "1h"))
        .await
        .unwrap();
    inventories
        .create(&PostParams::default(), &inventory(REFUSING, refusing, "1s"))
        .await
        .unwrap();

    // The subscription, read back at the BMC.
    let subs = wait_subscriptions(bmc, "the subscription on the BMC", 1).await;
    assert_eq!(subs[0].destination, url);
    let context = subs[0].context.clone().unwrap();
    assert!(
        context.starts_with(&format!("ingot:{NS}/{NAME}:")),
        "{context}"
    );
    assert_eq!(subs[0].header_names, [SECRET_HEADER]);
    let created = wait_for(
        "the EventSubscriptionCreated Event",
        Duration::from_secs(20),
        || async {
            let e = inventory_events(&client, NAME, "EventSubscriptionCreated").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert!(created[0].contains(&url), "{created:?}");

    // The BMC that refuses subscriptions: said once on its Inventory, its polling goes on.
    let refused = wait_for(
        "the EventSubscriptionRefused Event",
        Duration::from_secs(30),
        || async {
            let e = inventory_events(&client, REFUSING, "EventSubscriptionRefused").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert!(refused[0].contains("disabled"), "{refused:?}");
    assert!(refused[0].contains("every 1s"), "{refused:?}");
    assert!(refusing.state.subscriptions().is_empty());
    // Polled every second, refused the same way each time: said once, not at each poll.
    let said = refusals_after(&client, REFUSING, refusing, 60).await;
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].count.unwrap_or(1) <= 1, "{said:?}");
    assert!(said[0].series.is_none(), "said again: {said:?}");

    // A hardware event at the BMC: a Node Event within seconds (the poll is hourly).
    let before = node_events(&client, NAME).await;
    let sent = Instant::now();
    bmc.state.add_log("Critical", "CPU 2 machine check error");
    let after = wait_for(
        "the pushed event's Node Event",
        Duration::from_secs(15),
        || async {
            let now = node_events(&client, NAME).await;
            now.iter()
                .any(|m| m.contains("CPU 2 machine check error"))
                .then_some(now)
        },
    )
    .await;
    let latency = sent.elapsed();
    eprintln!("event at the BMC to Node Event: {latency:?}");
    assert_eq!(
        after
            .iter()
            .filter(|m| m.contains("CPU 2 machine check error"))
            .count(),
        1,
        "{after:?}"
    );
    assert!(after.len() > before.len());
    assert!(
        bmc.state
            .counters
            .events_delivered
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );

    // A slow BMC (500 ms an answer): the log is read before the inventory and the sensors (40
    // requests more, 20 s at this pace), so the pushed entry is a Node Event within seconds.
    bmc.state
        .set_fault(Some(ingot_bmc_sim::Fault::Slow { delay_ms: 500 }));
    let sent = Instant::now();
    bmc.state
        .add_log("Warning", "DIMM A1 correctable ECC errors over threshold");
    wait_for(
        "the slow BMC's pushed event's Node Event",
        Duration::from_secs(10),
        || async {
            let now = node_events(&client, NAME).await;
            now.iter()
                .any(|m| m.contains("DIMM A1 correctable ECC"))
                .then_some(())
        },
    )
    .await;
    eprintln!("event at a slow BMC to Node Event: {:?}", sent.elapsed());
    bmc.state.set_fault(None);

    // A power change at the BMC (not through ingot): the Machine reads off within seconds,
    // although its power is read every ten minutes.
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    force_off(bmc).await;
    let off = Instant::now();
    wait_for(
        "the Machine's power off",
        Duration::from_secs(15),
        || async {
            let m = machines.get(NAME).await.ok()?;
            (m.status?.power_state.as_deref() == Some("off")).then_some(())
        },
    )
    .await;
    eprintln!(
        "power off at the BMC to the Machine's status: {:?}",
        off.elapsed()
    );

    // The secret: taken from the BMC's side; written nowhere in the cluster or the log.
    let headers = bmc.state.subscription_headers(subs[0].id);
    let secret = headers[0].1.clone();
    assert_eq!(secret.len(), 64);
    let mut seen = serde_json::to_string(&inventories.get(NAME).await.unwrap()).unwrap();
    seen +=
        &serde_json::to_string(&Api::<Node>::all(client.clone()).get(NAME).await.unwrap()).unwrap();
    for ns in [NS, "default"] {
        seen += &serde_json::to_string(
            &Api::<Event>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items,
        )
        .unwrap();
    }
    seen += &ingot.log();
    assert!(!seen.contains(&secret), "the secret was written out");
    // The genuine secret is taken.
    let genuine = json!({"Context": context, "Events": []});
    assert_eq!(post_event(&url, Some(&secret), &genuine).await, 204);
    // Over the certificate of the chart's tlsSecret: a client trusting only it is answered.
    let verifying = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(tls.cert_pem.as_bytes()).unwrap()])
        .build()
        .unwrap();
    let answer = verifying
        .post(&url)
        .header(SECRET_HEADER, &secret)
        .json(&genuine)
        .send()
        .await
        .expect("the receiver presents the certificate of --events-tls-cert");
    assert_eq!(answer.status().as_u16(), 204);

    // Forged events: refused and counted, by reason.
    let forged = json!({"Context": context, "Events": [{"MessageId": "Platform.1.0.PlatformEvent", "Message": "forged"}]});
    assert_eq!(post_event(&url, None, &forged).await, 401);
    assert_eq!(
        post_event(&url, Some("0123456789abcdef"), &forged).await,
        401
    );
    let unknown = json!({"Context": "ingot:harvester-system/nobody:00000000", "Events": []});
    assert_eq!(post_event(&url, Some("x"), &unknown).await, 404);
    assert_eq!(post_event(&url, None, &json!({"Events": []})).await, 400);
    let http = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    assert_eq!(http.get(&url).send().await.unwrap().status().as_u16(), 405);
    let huge = json!({"Context": context, "Pad": "x".repeat(70_000)});
    assert_eq!(post_event(&url, None, &huge).await, 413);
    let refused_count = |reason: &'static str| {
        let ingot = &ingot;
        async move {
            ingot
                .metric_sum(
                    "ingot_seeder_events_refused_total",
                    &[&format!("reason=\"{reason}\"")],
                )
                .await
        }
    };
    assert_eq!(refused_count("unauthenticated").await, 2.0);
    assert_eq!(refused_count("unknown_context").await, 1.0);
    assert_eq!(refused_count("malformed").await, 1.0);
    assert_eq!(refused_count("too_large").await, 1.0);
    assert!(
        ingot
            .metric_sum("ingot_seeder_events_accepted_total", &[])
            .await
            >= 3.0
    );
    assert!(
        node_events(&client, NAME)
            .await
            .iter()
            .all(|m| !m.contains("forged"))
    );

    // A replica that does not lead (the same Lease) answers 503, so that the BMC retries.
    let standby_port = closed_port();
    let standby_url = format!("https://127.0.0.1:{standby_port}/redfish-events");
    let standby =
        rufio_support::ingot_seeder_with_machine_interval(&kubeconfig, "ingot-push-test", 600)
            .arg(format!("--events-addr=127.0.0.1:{standby_port}"))
            .arg(format!("--events-url={standby_url}"))
            .arg(format!("--events-key-file={}", key_file.display()))
            .start();
    let standby_status = wait_for(
        "the standby's receiver",
        Duration::from_secs(30),
        || async {
            let http = reqwest::Client::builder()
                .tls_danger_accept_invalid_certs(true)
                .build()
                .unwrap();
            let r = http.post(&standby_url).json(&forged).send().await.ok()?;
            Some(r.status().as_u16())
        },
    )
    .await;
    assert_eq!(standby_status, 503, "{}", standby.log_tail());
    assert_eq!(
        standby
            .metric_sum(
                "ingot_seeder_events_refused_total",
                &["reason=\"not_leading\""]
            )
            .await,
        1.0
    );
    standby.kill();

    // A BMC reset loses the subscription: the next poll makes it again.
    set_events(
        &client,
        NAME,
        json!({"enabled": true, "pollingInterval": "2s"}),
    )
    .await;
    bmc.state.reset();
    assert!(bmc.state.subscriptions().is_empty());
    let again = wait_subscriptions(bmc, "the subscription made again", 1).await;
    assert_eq!(again[0].context.as_deref(), Some(context.as_str()));
    assert_eq!(again[0].destination, url);

    // The operator down, the BMC's deliveries fail: after its retries it terminates the
    // subscription. The event is not lost (the poll reads the log), and the next poll after the
    // restart makes the subscription again.
    bmc.state.set_event_knobs(EventKnobs {
        delivery_retry_attempts: 1,
        delivery_retry_interval: Duration::from_millis(200),
        ..EventKnobs::default()
    });
    ingot.kill();
    bmc.state.add_log("Warning", "PSU 1 lost input power");
    wait_for(
        "the subscription terminated",
        Duration::from_secs(30),
        || async {
            (bmc.state.terminated_subscriptions() == 1 && bmc.state.subscriptions().is_empty())
                .then_some(())
        },
    )
    .await;
    ingot.restart(None);
    let back = wait_subscriptions(bmc, "the subscription made again after termination", 1).await;
    assert_eq!(back[0].context.as_deref(), Some(context.as_str()));
    wait_for(
        "the missed event from the poll",
        Duration::from_secs(30),
        || async {
            node_events(&client, NAME)
                .await
                .iter()
                .any(|m| m.contains("PSU 1 lost input power"))
                .then_some(())
        },
    )
    .await;

    // Read every 2 s since: the pushed entry was still said once.
    let said = node_events(&client, NAME).await;
    assert_eq!(
        said.iter()
            .filter(|m| m.contains("CPU 2 machine check error"))
            .count(),
        1,
        "{said:?}"
    );

    // The operator key changed: at the next poll the subscription made under the old key is
    // deleted from the BMC and the new key's made; the BMC holds one.
    std::fs::write(&key_file, "n".repeat(48)).unwrap();
    ingot.restart(None);
    let renewed = wait_for(
        "the subscription of the new key alone",
        Duration::from_secs(90),
        || async {
            let s = bmc.state.subscriptions();
            (s.len() == 1 && s[0].context.as_deref() != Some(context.as_str())).then_some(s)
        },
    )
    .await;
    let new_context = renewed[0].context.clone().unwrap();
    assert!(
        new_context.starts_with(&format!("ingot:{NS}/{NAME}:")),
        "{new_context}"
    );
    assert_eq!(renewed[0].destination, url);

    // Events disabled: the subscription goes.
    set_events(
        &client,
        NAME,
        json!({"enabled": false, "pollingInterval": "2s"}),
    )
    .await;
    wait_subscriptions(bmc, "the subscription removed (events disabled)", 0).await;
    set_events(
        &client,
        NAME,
        json!({"enabled": true, "pollingInterval": "2s"}),
    )
    .await;
    wait_subscriptions(bmc, "the subscription back", 1).await;

    // The Inventory deleted: the subscription goes with it.
    inventories
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    wait_subscriptions(bmc, "the subscription removed (Inventory deleted)", 0).await;
    wait_for("the Inventory gone", Duration::from_secs(30), || async {
        inventories
            .get_opt(NAME)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    ingot.kill();
    clean(&client, &[NAME, REFUSING]).await;
}

/// Bad push settings stop the start with an error naming the flag and the fix.
#[test]
fn bad_push_settings_are_refused_at_start() {
    let dir = temp_dir("push-flags");
    let short = dir.join("short.key");
    std::fs::write(&short, "too short").unwrap();
    let good = dir.join("good.key");
    std::fs::write(&good, "k".repeat(48)).unwrap();
    let run = |url: &str, key: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ingot"))
            .args([
                "run",
                "--controllers=seeder",
                "--events-addr=127.0.0.1:0",
                &format!("--events-url={url}"),
                &format!("--events-key-file={}", key.display()),
            ])
            .env("INGOT_KUBECONFIG", dir.join("absent.kubeconfig"))
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run("https://10.0.0.5:8443/events", &short);
    assert!(
        e.contains("--events-key-file") && e.contains("at least 32"),
        "{e}"
    );
    let e = run("http://10.0.0.5:8443/events", &good);
    assert!(e.contains("--events-url") && e.contains("https://"), "{e}");
    let e = run("not a url", &good);
    assert!(
        e.contains("--events-url") && e.contains("is not a URL"),
        "{e}"
    );
}
