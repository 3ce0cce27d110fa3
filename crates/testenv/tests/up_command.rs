//! `ingot-testenv up` as scripts start it for a second cluster: bound to a VIP on loopback,
//! taking bootstrap tokens, without ingot's CRDs or kube-controller-manager.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const VIP: &str = "127.0.12.1";

/// Stops the command as scripts do (SIGTERM: it stops its processes), then waits.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.0.id()).unwrap());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn up_binds_the_vip_takes_bootstrap_tokens_and_leaves_out_crds_and_the_controller_manager() {
    let dir = std::env::temp_dir().join(format!(
        "ingot-testenv-up-{}",
        ingot_testenv::random_suffix(6)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let stdout = std::fs::File::create(dir.join("stdout")).unwrap();
    let mut up = Up(Command::new(env!("CARGO_BIN_EXE_ingot-testenv"))
        .args(["up", "--dir"])
        .arg(dir.join("plane"))
        .args(["--bind-address", VIP, "--bootstrap-token-auth"])
        .args(["--no-controller-manager", "--no-crds"])
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("ingot-testenv starts"));
    let ready = dir.join("plane/ready");
    let end = Instant::now() + Duration::from_secs(180);
    while !ready.is_file() {
        assert!(
            up.0.try_wait().unwrap().is_none(),
            "ingot-testenv up exited"
        );
        assert!(Instant::now() < end, "not ready after 180 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let url = std::fs::read_to_string(&ready).unwrap();
    assert!(url.starts_with(&format!("https://{VIP}:")), "{url}");

    let env = ingot_testenv::TestEnv::connect(&dir.join("plane/kubeconfig"))
        .await
        .unwrap();
    let client = env.client().unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(crds.items.is_empty(), "CRDs installed: {:?}", crds.items);
    let printed = std::fs::read_to_string(dir.join("stdout")).unwrap();
    assert!(printed.contains("kube-apiserver: pid"), "{printed}");
    assert!(!printed.contains("kube-controller-manager"), "{printed}");

    // A bootstrap token Secret authenticates its token: the bootstrappers may not list Nodes
    // (403), while an unknown token is not authenticated at all (401).
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "bootstrap-token-a1b2c3", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": "a1b2c3", "token-secret": "0123456789abcdef",
            "usage-bootstrap-authentication": "true"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client, "kube-system")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .no_proxy()
        .build()
        .unwrap();
    let status = |token: &'static str| {
        let request = http
            .get(format!("{url}/api/v1/nodes"))
            .bearer_auth(token)
            .send();
        async move { request.await.unwrap().status().as_u16() }
    };
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        // The token authenticator reads Secrets from its informer: poll until it has it.
        match status("a1b2c3.0123456789abcdef").await {
            403 => break,
            code => assert!(Instant::now() < end, "the bootstrap token got {code}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status("f0f0f0.0123456789abcdef").await, 401);
    drop(up);
    let _ = std::fs::remove_dir_all(&dir);
}
