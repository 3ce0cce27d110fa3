//! The operator's API server client against a real kube-apiserver, reached through a TCP relay
//! in this process that counts the connections and can stop relaying without closing them (a
//! partition, as a dead node or a dropped route leaves it); and against a server that offers
//! HTTP/1.1 only.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use ingot_controllers::Metrics;
use ingot_controllers::api_client::{self, Pings};
use ingot_controllers::metrics::kube_request_labels;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, WatchParams};
use kube::{Api, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test]
async fn requests_in_flight_share_one_http2_connection() {
    let env = ingot_testenv::shared().await;
    let relay = Relay::start(&env.config()).await;
    let metrics = Arc::new(Metrics::default());
    let client = api_client::client(relay.config.clone(), &metrics).unwrap();

    // The first request's connection negotiates HTTP/2. (Requests sent before it has, on a
    // cold pool, each open a connection, closed once HTTP/2 is known.)
    let version = get(&client, "/version").await;
    assert_eq!(version.version(), http::Version::HTTP_2);

    let api: Api<Namespace> = Api::all(client.clone());
    let params = ListParams::default();
    let lists = (0..64).map(|_| api.list(&params));
    let lists = futures::future::try_join_all(lists).await.unwrap();
    assert!(lists.iter().all(|l| !l.items.is_empty()));
    let peers = relay.peers.lock().unwrap().clone();
    assert_eq!(
        peers.len(),
        1,
        "a get, then 64 lists at once, went over {peers:?}"
    );
    // Without TCP_NODELAY a request's last frame waits for the server's delayed ACK.
    assert!(no_delay(peers[0].port()), "TCP_NODELAY is set");

    let counted = metrics
        .kube_requests
        .get_or_create(&kube_request_labels("GET", "/api/v1/namespaces", None))
        .get();
    assert_eq!(counted, 64, "every request is counted");
}

#[tokio::test]
async fn a_watch_on_a_partitioned_connection_ends_when_its_ping_goes_unanswered() {
    let env = ingot_testenv::shared().await;
    let relay = Relay::start(&env.config()).await;
    let pings = Pings {
        every: Duration::from_millis(500),
        answer_within: Duration::from_millis(500),
    };
    let client =
        api_client::client_with_pings(relay.config.clone(), &Arc::new(Metrics::default()), pings)
            .unwrap();
    let api: Api<Namespace> = Api::all(client);
    let listed = api.list(&ListParams::default()).await.unwrap();
    let version = listed.metadata.resource_version.unwrap();
    // The server would end this watch after 290 s: nothing else ends it but the ping.
    let mut watch = api
        .watch(&WatchParams::default().timeout(290), &version)
        .await
        .unwrap()
        .boxed();
    relay.partition();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match watch.next().await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return format!("failed: {e}"),
                None => return "ended".to_owned(),
            }
        }
    })
    .await
    .expect("the watch still waits 20 s after the partition");
    assert!(!ended.is_empty());
}

#[tokio::test]
async fn a_server_that_offers_only_http1_is_spoken_to_in_http1() {
    // An emulated BMC: HTTPS whose ALPN offers `http/1.1` alone, like some proxies in front of
    // an API server.
    let fleet = ingot_bmc_sim::Fleet::uniform(
        ingot_bmc_sim::FleetOptions {
            tls: true,
            ..ingot_bmc_sim::FleetOptions::default()
        },
        1,
        ingot_bmc_sim::BmcSpec::default(),
    )
    .await
    .unwrap();
    let mut config = Config::new(fleet.bmcs[0].url().parse().unwrap());
    config.accept_invalid_certs = true;
    let client = api_client::client(config, &Arc::new(Metrics::default())).unwrap();
    let root = get(&client, "/redfish/v1/").await;
    assert_eq!(root.status(), http::StatusCode::OK);
    assert_eq!(root.version(), http::Version::HTTP_11);
}

#[tokio::test]
async fn a_configured_proxy_is_left_to_kube_which_names_what_it_lacks() {
    // The HTTP/2 stack does not speak to proxies: with one configured, kube's own client is
    // built, and this build of kube refuses HTTP proxies with an error naming the feature.
    let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
    config.proxy_url = Some("http://127.0.0.1:3128".parse().unwrap());
    let Err(refused) = api_client::client(config, &Arc::new(Metrics::default())) else {
        panic!("a client was built for a proxy this build cannot speak to");
    };
    assert!(
        matches!(refused, kube::Error::ProxyProtocolDisabled { .. }),
        "{refused:?}"
    );
}

/// The answer to a GET of `path`, as the client received it (its HTTP version included).
async fn get(client: &kube::Client, path: &str) -> http::Response<kube::client::Body> {
    let request = http::Request::get(path)
        .body(kube::client::Body::empty())
        .unwrap();
    client.send(request).await.unwrap()
}

/// Relays TCP connections to the API server of `config`; `config` (in the relay) points at it.
struct Relay {
    config: Config,
    /// Where each connection came from.
    peers: Arc<Mutex<Vec<SocketAddr>>>,
    partitioned: Arc<AtomicBool>,
}

impl Relay {
    async fn start(server: &Config) -> Self {
        let target = format!(
            "{}:{}",
            server.cluster_url.host().unwrap(),
            server.cluster_url.port_u16().unwrap()
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut config = server.clone();
        config.cluster_url = format!("https://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let peers = Arc::new(Mutex::new(Vec::new()));
        let partitioned = Arc::new(AtomicBool::new(false));
        let (seen, cut) = (peers.clone(), partitioned.clone());
        tokio::spawn(async move {
            while let Ok((client, peer)) = listener.accept().await {
                seen.lock().unwrap().push(peer);
                let server = TcpStream::connect(&target).await.unwrap();
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pipe(client_read, server_write, cut.clone()));
                tokio::spawn(pipe(server_read, client_write, cut.clone()));
            }
        });
        Self {
            config,
            peers,
            partitioned,
        }
    }

    /// From now on nothing passes either way, and no connection is closed.
    fn partition(&self) {
        self.partitioned.store(true, Ordering::SeqCst);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    partitioned: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if partitioned.load(Ordering::SeqCst) {
            // Hold both ends open and let nothing through, as a partition does.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Whether this process's TCP socket bound to local `port` has TCP_NODELAY set (the client's
/// socket is inside its connection pool: found by its port among the process's descriptors).
#[allow(unsafe_code)]
fn no_delay(port: u16) -> bool {
    use nix::sys::socket::{SockaddrIn, getsockname, getsockopt, sockopt};
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let Some(fd) = entry
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
        else {
            continue;
        };
        let bound = getsockname::<SockaddrIn>(fd);
        if bound.is_ok_and(|a| a.port() == port) {
            // SAFETY: the descriptor is only queried, while this process holds it open.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            return getsockopt(&fd, sockopt::TcpNoDelay).unwrap();
        }
    }
    panic!("no socket of this process is bound to port {port}");
}
