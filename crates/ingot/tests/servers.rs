//! The two servers of `ingot run` (`--http-addr`, `--power-api-addr`) under callers that are not
//! what they should be, on the real API server: a token that may update the Node but lacks the
//! power permission, a token for another audience, callers repeating a token (the API server's
//! answers are cached), a body sent without credentials or too large, clients that send their
//! handshake or headers slowly or not at all, more connections than allowed; the iPXE scripts
//! read from a watch; one certificate for every replica, from a Secret.
//!
//! Every `ingot run` here stands by on a Lease another identity holds: the servers are what is
//! tested, and every replica serves them.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chart_support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ingot_testenv::{Operator, wait_for};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const HELD_LEASE: &str = "held-by-another";

/// One `ingot run`, standing by (the Lease is another's), killed when dropped.
struct Ingot {
    operator: Operator,
    /// Its health and metrics port, and its power action API's (0 without Seeder).
    http: u16,
    power: u16,
}

impl Ingot {
    async fn start(
        kubeconfig: &Path,
        namespace: &str,
        name: &str,
        controllers: &str,
        extra: &[&str],
    ) -> Self {
        let mut builder = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .tag(name)
            .kubeconfig(kubeconfig)
            .controllers(controllers)
            .arg(format!("--lease-namespace={namespace}"))
            .arg(format!("--lease-name={HELD_LEASE}"))
            .arg(format!("--identity={name}"))
            .arg("--metal-api-url=http://127.0.0.1:9")
            .env("NAMESPACE", namespace);
        if controllers == "seeder" {
            builder = builder
                .arg("--power-api-addr=127.0.0.1:0")
                .arg(format!("--seeder-namespace={namespace}"))
                .arg(format!("--rufio-namespace={namespace}"));
        }
        let operator = builder.args(extra.iter().copied()).start();
        let http = operator.http_addr().await.port();
        let power = if controllers == "seeder" {
            operator.power_api_addr().await.port()
        } else {
            0
        };
        Self {
            operator,
            http,
            power,
        }
    }

    fn log(&self) -> String {
        self.operator.log()
    }

    /// A counter of /metrics (0 while absent).
    async fn counter(&self, series: &str) -> f64 {
        let metrics = self.operator.metrics().await;
        metrics.get(series).copied().unwrap_or(0.0)
    }

    async fn wait_serving(&mut self) {
        let port = self.http;
        wait_for(
            "ingot serving /healthz",
            Duration::from_secs(60),
            async || {
                if let Some(status) = self.operator.exit_status() {
                    panic!("ingot exited ({status}):\n{}", self.log());
                }
                let ok = reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
                    .await
                    .ok()?;
                ok.status().is_success().then_some(())
            },
        )
        .await;
    }
}

/// A Lease of `namespace` held by another identity for an hour: the replicas of these tests
/// stand by.
async fn held_lease(client: &Client, namespace: &str) {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(HELD_LEASE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("another-replica".to_owned()),
            lease_duration_seconds: Some(3600),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    Api::<Lease>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

/// A TLS client that accepts any certificate and keeps the one it was shown.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls(port: u16) -> Tls {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

fn peer_certificate(stream: &Tls) -> Vec<u8> {
    stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// Sends `head` (request line and headers, without the blank line) and `body`, and reads the
/// answer's status and body, within `bound` (`None`: no answer in time).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    head: &str,
    body: &[u8],
    bound: Duration,
) -> Option<(u16, String)> {
    stream
        .write_all(format!("{head}\r\nHost: ingot\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    stream.write_all(body).await.unwrap();
    stream.flush().await.unwrap();
    let mut answer = Vec::new();
    // The answer ends where the server closes; a full answer without the close is enough too.
    let read = tokio::time::timeout(bound, async {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    if read.is_err() && !text.contains("\r\n\r\n") {
        return None;
    }
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// A power action request over TLS.
async fn power_request(
    port: u16,
    token: Option<&str>,
    node: &str,
    action: &str,
    body: &str,
) -> (u16, String) {
    let mut stream = tls(port).await;
    let mut head = format!("POST /v1/harvester/nodes/{node}?action={action} HTTP/1.1");
    if let Some(token) = token {
        head.push_str(&format!("\r\nAuthorization: Bearer {token}"));
    }
    head.push_str(&format!(
        "\r\nContent-Type: application/json\r\nContent-Length: {}",
        body.len()
    ));
    exchange(&mut stream, &head, body.as_bytes(), Duration::from_secs(30))
        .await
        .expect("an answer within 30 s")
}

/// Whether the server closes `stream` within `bound` while the client sends `trickle` one byte
/// every 100 ms (none: the client stays silent).
async fn closed_by_server<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    trickle: &[u8],
    bound: Duration,
) -> bool {
    let deadline = Instant::now() + bound;
    let mut sent = 0;
    let mut buffer = [0u8; 1024];
    while Instant::now() < deadline {
        if sent < trickle.len() {
            if stream.write_all(&trickle[sent..=sent]).await.is_err()
                || stream.flush().await.is_err()
            {
                return true;
            }
            sent += 1;
        }
        // Closed: end of stream or a reset; an answer (a 408, say) is read on.
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer)).await
        {
            return true;
        }
    }
    false
}

async fn service_account_token(
    client: &Client,
    namespace: &str,
    name: &str,
    audiences: &[&str],
) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    if accounts.get_opt(name).await.unwrap().is_none() {
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        accounts
            .create(&PostParams::default(), &account)
            .await
            .unwrap();
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audiences.iter().map(|a| (*a).to_owned()).collect(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

/// A Node in maintenance, without an Inventory: a permitted `powerAction` gets as far as
/// `powerActionPossible` (424).
async fn node_in_maintenance(client: &Client, name: &str) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"harvesterhci.io/maintain-status": "completed"}}
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
}

// The power action API's callers, one behaviour per test, over one namespace, one Node in
// maintenance, the chart's power-caller RBAC and `ingot run` (`Power`; a second replica from
// `every_replica_serves_the_secret_s_certificate` on), in this order
// (`ingot_testenv::scenario!`).
ingot_testenv::scenario!(mod power: Power {
    a_caller_that_may_update_nodes_lacks_the_power_permission,
    a_caller_the_chart_permits_gets_as_far_as_the_action,
    repeated_callers_are_answered_from_the_cache,
    a_body_is_read_only_from_a_permitted_caller_within_the_limit,
    a_permitted_caller_s_unfinished_body_is_cut_off_at_the_deadline,
    by_default_nobody_holds_the_power_permission,
    every_replica_serves_the_secret_s_certificate,
    a_token_for_the_api_server_is_refused_where_ingot_s_audience_is_required,
    no_token_is_logged,
});

/// A namespace whose Lease another holds, a Node in maintenance, Harvester's ServiceAccount
/// permitted as the chart grants it, a ServiceAccount that may only update Nodes, and
/// `ingot run --controllers seeder` with a power API certificate from a Secret.
struct Power {
    client: Client,
    ns: String,
    node: String,
    harvester: String,
    updater: String,
    tls_names: &'static str,
    ingot: Ingot,
    port: u16,
    /// The second replica (from `every_replica_serves_the_secret_s_certificate` on).
    second: Option<Ingot>,
    /// Harvester's token for ingot's audience.
    for_ingot: Option<String>,
}

const REBOOT: &str = r#"{"operation":"reboot"}"#;

impl Power {
    async fn start() -> Self {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let ns = env.namespace("servers-power").await.unwrap();
        held_lease(&client, &ns).await;
        let node = format!("{ns}-node");
        node_in_maintenance(&client, &node).await;

        // Harvester's ServiceAccount gets the power permission as the chart grants it (by default
        // harvester-system/harvester; here one of this namespace).
        let rendered = chart_support::render(
            &format!("ingot-{ns}"),
            &ns,
            &[
                "controllers={seeder}".to_owned(),
                "seeder.powerApi.callers[0].kind=ServiceAccount".to_owned(),
                "seeder.powerApi.callers[0].name=harvester".to_owned(),
                format!("seeder.powerApi.callers[0].namespace={ns}"),
            ],
            &["--show-only", "templates/power-callers.yaml"],
        );
        chart_support::kubectl_apply(env.kubeconfig_path(), &rendered, &[]);
        let harvester = service_account_token(&client, &ns, "harvester", &[]).await;
        // What many DaemonSets and every kubelet may do: update Nodes.
        let updater = service_account_token(&client, &ns, "node-updater", &[]).await;
        chart_support::kubectl_apply(
            env.kubeconfig_path(),
            &format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {ns}-node-updater}}\n\
                 rules: [{{apiGroups: [\"\"], resources: [nodes], verbs: [get, list, update, patch]}}]\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {ns}-node-updater}}\n\
                 roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ns}-node-updater}}\n\
                 subjects: [{{kind: ServiceAccount, name: node-updater, namespace: {ns}}}]\n"
            ),
            &[],
        );

        let tls_names = "--power-api-tls-names=ingot-servers-test";
        let mut ingot = Ingot::start(
            env.kubeconfig_path(),
            &ns,
            "servers-a",
            "seeder",
            &[
                "--power-api-tls-secret=power-api-tls",
                tls_names,
                "--request-header-timeout-seconds=3",
            ],
        )
        .await;
        ingot.wait_serving().await;
        let port = ingot.power;
        wait_for(
            "the power action API",
            Duration::from_secs(30),
            async || TcpStream::connect(("127.0.0.1", port)).await.ok(),
        )
        .await;
        Power {
            client,
            ns,
            node,
            harvester,
            updater,
            tls_names,
            ingot,
            port,
            second: None,
            for_ingot: None,
        }
    }

    async fn finish(self) {
        drop((self.ingot, self.second));
        Api::<Node>::all(self.client.clone())
            .delete(&self.node, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// A caller that may update Nodes (as many DaemonSets and every kubelet may) is refused
    /// without the power permission.
    async fn a_caller_that_may_update_nodes_lacks_the_power_permission(&mut self) {
        let (port, node, updater, reboot) = (self.port, &self.node, &self.updater, REBOOT);
        let (code, body) = power_request(port, Some(updater), node, "powerAction", reboot).await;
        assert_eq!(code, 403, "{body}");
        assert!(body.contains("nodes/poweraction"), "{body}");
    }

    /// Harvester's ServiceAccount, permitted by the chart, gets as far as the action (424: no
    /// Inventory).
    async fn a_caller_the_chart_permits_gets_as_far_as_the_action(&mut self) {
        let (port, node, harvester, reboot) = (self.port, &self.node, &self.harvester, REBOOT);
        let (code, body) = power_request(port, Some(harvester), node, "powerAction", reboot).await;
        assert_eq!(code, 424, "{body}");
    }

    /// Repeated: the API server is not asked again.
    async fn repeated_callers_are_answered_from_the_cache(&mut self) {
        let (port, node, reboot) = (self.port, &self.node, REBOOT);
        let (harvester, updater, ingot) = (&self.harvester, &self.updater, &self.ingot);
        for _ in 0..4 {
            assert_eq!(
                power_request(port, Some(updater), node, "powerAction", reboot)
                    .await
                    .0,
                403
            );
            assert_eq!(
                power_request(port, Some(harvester), node, "powerAction", reboot)
                    .await
                    .0,
                424
            );
        }
        assert_eq!(
            power_request(port, Some(harvester), node, "powerActionPossible", "")
                .await
                .0,
            424
        );
        let reviews = ingot
            .counter(r#"ingot_kube_requests_total{verb="create",resource="tokenreviews"}"#)
            .await;
        let access_reviews = ingot
            .counter(r#"ingot_kube_requests_total{verb="create",resource="subjectaccessreviews"}"#)
            .await;
        // Two of each when every answer is reused (11 and 10 without the cache); a refusal is kept
        // for 10 s, so a loaded machine that stalls between requests may ask once or twice more.
        assert!(
            (2.0..=4.0).contains(&reviews) && (2.0..=4.0).contains(&access_reviews),
            "TokenReviews {reviews}, SubjectAccessReviews {access_reviews} for 2 callers, 11 requests"
        );
    }

    /// A body announced but not sent: without a token, from a caller without the permission and
    /// beyond the limit from a permitted one, the answer comes without it.
    async fn a_body_is_read_only_from_a_permitted_caller_within_the_limit(&mut self) {
        let (port, node) = (self.port, &self.node);
        let (harvester, updater) = (&self.harvester, &self.updater);
        let pending = "Content-Type: application/json\r\nContent-Length: 1000000";
        let path = format!("POST /v1/harvester/nodes/{node}?action=powerAction HTTP/1.1");
        for (token, expected) in [(None, 401), (Some(&updater), 403), (Some(&harvester), 413)] {
            let mut head = format!("{path}\r\n{pending}");
            if let Some(token) = token {
                head.push_str(&format!("\r\nAuthorization: Bearer {token}"));
            }
            let mut stream = tls(port).await;
            let answer = exchange(
                &mut stream,
                &head,
                b"{\"operation\"",
                Duration::from_secs(15),
            )
            .await;
            assert_eq!(
                answer.map(|(code, _)| code),
                Some(expected),
                "a request whose 1 MB body never comes, token {}",
                token.is_some()
            );
        }
    }

    /// A permitted caller's small body, never finished: 408 once the deadline passes.
    async fn a_permitted_caller_s_unfinished_body_is_cut_off_at_the_deadline(&mut self) {
        let (port, node, harvester) = (self.port, &self.node, &self.harvester);
        let path = format!("POST /v1/harvester/nodes/{node}?action=powerAction HTTP/1.1");
        let mut stream = tls(port).await;
        let head = format!(
            "{path}\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\
             Authorization: Bearer {harvester}"
        );
        let answer = exchange(
            &mut stream,
            &head,
            b"{\"operation\"",
            Duration::from_secs(15),
        )
        .await;
        assert_eq!(
            answer.map(|(code, _)| code),
            Some(408),
            "a permitted request whose 22-byte body stops after 12"
        );
    }

    /// By default nobody but cluster admins holds the power permission: the Harvester UI goes
    /// through Harvester's node API and the Inventory, not through this endpoint.
    async fn by_default_nobody_holds_the_power_permission(&mut self) {
        let defaults = chart_support::render(
            "ingot",
            "ingot-system",
            &["controllers={seeder}".to_owned()],
            &[],
        );
        assert!(defaults.contains("kind: Deployment"), "{defaults}");
        assert!(!defaults.contains("power-caller"), "{defaults}");
    }

    /// A second replica: the same certificate (the Secret's) as the first.
    async fn every_replica_serves_the_secret_s_certificate(&mut self) {
        let (client, ns, tls_names, port) = (&self.client, &self.ns, self.tls_names, self.port);
        let env = ingot_testenv::shared().await;
        let mut second = Ingot::start(
            env.kubeconfig_path(),
            ns,
            "servers-b",
            "seeder",
            &[
                "--power-api-tls-secret=power-api-tls",
                tls_names,
                "--power-api-audiences=ingot-servers-test",
            ],
        )
        .await;
        second.wait_serving().await;
        let second_port = second.power;
        wait_for(
            "the second power action API",
            Duration::from_secs(30),
            async || TcpStream::connect(("127.0.0.1", second_port)).await.ok(),
        )
        .await;
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get("power-api-tls")
            .await
            .unwrap();
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
        let stored = CertificateDer::from_pem_slice(&secret.data.unwrap()["tls.crt"].0)
            .unwrap()
            .to_vec();
        assert!(
            peer_certificate(&tls(port).await) == stored,
            "the first replica's certificate is not the Secret's"
        );
        assert!(
            peer_certificate(&tls(second_port).await) == stored,
            "the second replica's certificate is not the Secret's"
        );
        self.second = Some(second);
    }

    /// The second replica takes tokens for its audience only.
    async fn a_token_for_the_api_server_is_refused_where_ingot_s_audience_is_required(&mut self) {
        let (client, ns, node, harvester, reboot) =
            (&self.client, &self.ns, &self.node, &self.harvester, REBOOT);
        let second_port = self.second.as_ref().expect("the second replica runs").power;
        let (code, body) =
            power_request(second_port, Some(harvester), node, "powerAction", reboot).await;
        assert_eq!(
            code, 401,
            "a token for the API server, not this audience: {body}"
        );
        let for_ingot =
            service_account_token(client, ns, "harvester", &["ingot-servers-test"]).await;
        let (code, body) =
            power_request(second_port, Some(&for_ingot), node, "powerAction", reboot).await;
        assert_eq!(code, 424, "{body}");
        self.for_ingot = Some(for_ingot);
    }

    /// No caller's token is in either replica's log.
    async fn no_token_is_logged(&mut self) {
        let (ingot, second) = (
            &self.ingot,
            self.second.as_ref().expect("the second replica"),
        );
        let (harvester, updater) = (&self.harvester, &self.updater);
        let for_ingot = self.for_ingot.as_ref().expect("a token for ingot");
        let log = ingot.log() + &second.log();
        for token in [&harvester, &updater, &for_ingot] {
            assert!(!log.contains(token.as_str()), "a token in the log");
        }
    }
}

#[tokio::test]
async fn slow_silent_and_crowding_clients_are_cut_off() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("servers-slow").await.unwrap();
    held_lease(&client, &ns).await;
    let mut ingot = Ingot::start(
        env.kubeconfig_path(),
        &ns,
        "servers-slow",
        "seeder",
        &["--request-header-timeout-seconds=1"],
    )
    .await;
    ingot.wait_serving().await;
    let (http, power) = (ingot.http, ingot.power);
    wait_for(
        "the power action API",
        Duration::from_secs(30),
        async || TcpStream::connect(("127.0.0.1", power)).await.ok(),
    )
    .await;
    let bound = Duration::from_secs(20);
    // Headers one byte every 100 ms, never finished (300 bytes: 30 s).
    let slow_headers = format!(
        "GET /healthz HTTP/1.1\r\nHost: ingot\r\n{}",
        "X: y\r\n".repeat(50)
    );

    let mut plain = TcpStream::connect(("127.0.0.1", http)).await.unwrap();
    assert!(
        closed_by_server(&mut plain, slow_headers.as_bytes(), bound).await,
        "slow headers on --http-addr"
    );
    let mut silent = TcpStream::connect(("127.0.0.1", power)).await.unwrap();
    assert!(
        closed_by_server(&mut silent, b"", bound).await,
        "no TLS handshake on --power-api-addr"
    );
    let mut slow = tls(power).await;
    assert!(
        closed_by_server(&mut slow, slow_headers.as_bytes(), bound).await,
        "slow headers on --power-api-addr"
    );
    drop(ingot);

    // At the cap, one more connection is closed at once; a freed slot serves again.
    let ingot = Ingot::start(
        env.kubeconfig_path(),
        &ns,
        "servers-crowded",
        "rufio",
        &[
            "--http-max-connections=2",
            "--request-header-timeout-seconds=60",
        ],
    )
    .await;
    let http = ingot.http;
    let healthz = async || {
        let mut stream = TcpStream::connect(("127.0.0.1", http)).await.ok()?;
        exchange(
            &mut stream,
            "GET /healthz HTTP/1.1",
            b"",
            Duration::from_secs(5),
        )
        .await
    };
    wait_for(
        "ingot serving /healthz",
        Duration::from_secs(60),
        async || healthz().await.filter(|(code, _)| *code == 200),
    )
    .await;
    // Two connections held open, each once answered (so each holds its slot).
    let first = tokio::time::timeout(bound, held_connection(http))
        .await
        .expect("a first connection served");
    let _second = tokio::time::timeout(bound, held_connection(http))
        .await
        .expect("a second connection served");
    let mut third = TcpStream::connect(("127.0.0.1", http)).await.unwrap();
    assert!(
        closed_by_server(&mut third, b"", bound).await,
        "a third connection with 2 allowed"
    );
    drop(first);
    wait_for("a freed connection slot", bound, async || {
        healthz().await.filter(|(code, _)| *code == 200)
    })
    .await;
    drop(ingot);

    // A connection at the end of its life is closed (after its answer), however patient the
    // header deadline.
    let mut ingot = Ingot::start(
        env.kubeconfig_path(),
        &ns,
        "servers-lifetime",
        "rufio",
        &[
            "--connection-lifetime-seconds=1",
            "--request-header-timeout-seconds=60",
        ],
    )
    .await;
    ingot.wait_serving().await;
    let mut kept = tokio::time::timeout(bound, held_connection(ingot.http))
        .await
        .expect("a connection served");
    assert!(
        closed_by_server(&mut kept, b"", bound).await,
        "a kept-alive connection past --connection-lifetime-seconds"
    );
}

/// A connection to `port` answered once and kept open (HTTP/1.1 keep-alive).
async fn held_connection(port: u16) -> TcpStream {
    loop {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: ingot\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let mut buffer = [0u8; 1024];
        let answered = tokio::time::timeout(Duration::from_secs(5), async {
            while !String::from_utf8_lossy(&answer).contains("\r\n\r\nok") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => answer.extend_from_slice(&buffer[..n]),
                }
            }
            true
        })
        .await;
        if answered == Ok(true) {
            return stream;
        }
    }
}

#[tokio::test]
async fn install_scripts_are_read_from_the_watch_not_the_api_server() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("servers-ipxe").await.unwrap();
    held_lease(&client, &ns).await;
    let name = format!("{ns}-abcdefgh");
    let instance: ingot_api::equinix::Instance =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {}})).unwrap();
    let instances: Api<ingot_api::equinix::Instance> = Api::all(client.clone());
    instances
        .create(&PostParams::default(), &instance)
        .await
        .unwrap();
    let mut ingot = Ingot::start(env.kubeconfig_path(), &ns, "servers-ipxe", "pools", &[]).await;
    ingot.wait_serving().await;
    let url = format!("http://127.0.0.1:{}/ipxe/instances/{name}.ipxe", ingot.http);
    wait_for(
        "the Instance's script",
        Duration::from_secs(30),
        async || {
            let response = reqwest::get(&url).await.ok()?;
            (response.status() == 200).then_some(())
        },
    )
    .await;
    for _ in 0..10 {
        let response = reqwest::get(&url).await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.text().await.unwrap().starts_with("#!ipxe"));
    }
    let missing = reqwest::get(format!(
        "http://127.0.0.1:{}/ipxe/instances/{ns}-missing.ipxe",
        ingot.http
    ))
    .await
    .unwrap();
    assert_eq!(missing.status(), 404);
    let gets = ingot
        .counter(r#"ingot_kube_requests_total{verb="get",resource="instances"}"#)
        .await;
    assert_eq!(gets, 0.0, "Instance reads for 12 script requests");
    drop(ingot);
    instances
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}
