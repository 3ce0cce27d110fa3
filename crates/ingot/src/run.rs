//! `ingot run`: connect, serve health and metrics, win the lease, run the chosen controllers,
//! and stop cleanly on SIGTERM.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use futures::FutureExt;
use ingot_controllers::metrics::LeaderTransition;
use ingot_controllers::{ControllerKind, Metrics, fencing, pools, provisioning, rufio, seeder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::http::{self, Health};
use crate::leader::{LeaderElector, LeaseConfig};
use crate::power_api;
use crate::telemetry::{self, LogFormat};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Kubeconfig to use; without it, KUBECONFIG, ~/.kube/config or the in-cluster service
    /// account, in that order.
    #[arg(long, env = "INGOT_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,

    /// Controllers to run, comma-separated. `seeder` also starts `rufio`, whose Machines and
    /// Jobs it drives.
    #[arg(long, value_delimiter = ',', default_value = "pools")]
    controllers: Vec<ControllerArg>,

    /// Address of /healthz, /readyz, /metrics and the servers' iPXE scripts (/ipxe/...).
    #[arg(long, default_value = "0.0.0.0:8080", env = "INGOT_HTTP_ADDR")]
    http_addr: SocketAddr,

    /// Namespace of the leader-election Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,

    /// Name of the leader-election Lease; replicas with the same Lease share the work.
    #[arg(long, default_value = "ingot")]
    lease_name: String,

    /// This replica's identity in the Lease (default: POD_NAME, else the host name plus a random
    /// suffix).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,

    /// Seconds a Lease may go unrenewed before another replica takes over.
    #[arg(long, default_value_t = 10)]
    lease_duration_seconds: u64,

    /// Connections open at once on --http-addr; one more is closed at once.
    #[arg(long, default_value_t = 256)]
    http_max_connections: usize,

    /// Seconds a client of either server has for the TLS handshake and for each request's
    /// headers (and a power action caller for its body); then the connection is closed.
    #[arg(long, default_value_t = 10.0)]
    request_header_timeout_seconds: f64,

    /// Seconds after which a connection to either server is closed, once its request in
    /// flight is answered (clients reconnect).
    #[arg(long, default_value_t = 120.0)]
    connection_lifetime_seconds: f64,

    /// Log format.
    #[arg(long, value_enum, default_value = "text", env = "INGOT_LOG_FORMAT")]
    log_format: LogFormat,

    /// Log level or filter (RUST_LOG, when set, wins).
    #[arg(long, default_value = "info")]
    log_level: String,

    #[command(flatten)]
    pools: PoolsArgs,

    #[command(flatten)]
    gardener: Box<crate::gardener::GardenerArgs>,
    // Boxed: the argument structs live on the heap, keeping `Command` small.
    #[command(flatten)]
    rufio: Box<RufioArgs>,

    #[command(flatten)]
    seeder: SeederArgs,

    #[command(flatten)]
    provisioning: ProvisioningArgs,

    #[command(flatten)]
    fencing: FencingArgs,
}

/// Settings of fencing (dead Nodes powered off through their Inventories' BMCs, then tainted
/// out of service).
#[derive(Args, Debug)]
struct FencingArgs {
    /// Seconds a Node must be NotReady before it is fenced (with `fencing`).
    #[arg(long, env = "INGOT_FENCING_AFTER_SECONDS", default_value_t = 300)]
    fencing_after_seconds: u64,

    /// Nodes NotReady at most, as a count (2) or a percent of all Nodes, rounded down (40%),
    /// for any Node to be fenced: above it a partition is suspected and nothing is fenced.
    #[arg(long, env = "INGOT_FENCING_MAX_UNHEALTHY", default_value = "40%")]
    fencing_max_unhealthy: String,

    /// Once a fenced Node's pods are gone: power the server on again, or leave it off.
    #[arg(
        long,
        value_enum,
        env = "INGOT_FENCING_RECOVERY",
        default_value = "power-on"
    )]
    fencing_recovery: FencingRecovery,

    /// Fence only the Nodes a BMCRemediation names (medik8s NodeHealthCheck decides, through
    /// its external remediation template BMCRemediationTemplate); without it, ingot's own
    /// NotReady delay decides too.
    #[arg(long, env = "INGOT_FENCING_REMEDIATIONS_ONLY")]
    fencing_remediations_only: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FencingRecovery {
    PowerOn,
    StayOff,
}

impl FencingArgs {
    fn settings(&self, rufio: &rufio::Settings) -> anyhow::Result<fencing::Settings> {
        let max_unhealthy = fencing::MaxUnhealthy::parse(&self.fencing_max_unhealthy)
            .map_err(anyhow::Error::msg)?;
        Ok(fencing::Settings {
            namespace: rufio.namespace.clone(),
            after: Duration::from_secs(self.fencing_after_seconds),
            max_unhealthy,
            recovery: match self.fencing_recovery {
                FencingRecovery::PowerOn => fencing::Recovery::PowerOn,
                FencingRecovery::StayOff => fencing::Recovery::StayOff,
            },
            remediations_only: self.fencing_remediations_only,
            crash_point: rufio.crash_point.clone(),
        })
    }
}

/// Settings of provisioning (Seeder's full mode: Clusters, Inventories, AddressPools, and the
/// boot server).
#[derive(Args, Debug)]
struct ProvisioningArgs {
    /// Reconcile Clusters, Inventories and AddressPools of this namespace only (with
    /// `provisioning`; default: every namespace, as Seeder). Unless rufio or seeder is chosen
    /// too, the Inventories' Machines, Jobs and Tasks are watched in it only as well.
    #[arg(long, env = "INGOT_PROVISIONING_NAMESPACE")]
    provisioning_namespace: Option<String>,

    /// Serve the boot server (iPXE scripts by MAC, install configs, the installer's webhook)
    /// on this address, e.g. 0.0.0.0:8082 (with `provisioning`).
    #[arg(long, env = "INGOT_BOOT_ADDR")]
    boot_addr: Option<SocketAddr>,

    /// The URL servers reach the boot server at, written into their scripts and configs,
    /// e.g. http://10.0.0.5:8082 (needed to provision).
    #[arg(long, env = "INGOT_BOOT_URL")]
    boot_url: Option<url::Url>,

    /// A directory with isolinux.bin, ldlinux.c32 and ipxe.lkrn (Debian: the isolinux,
    /// syslinux-common and ipxe packages): the boot server then serves each node being
    /// installed a boot CD for virtual media, `GET /media/<namespace>/<name>.iso`. With
    /// ipxe.efi there too (iPXE 1.21.1 or later), the CD also boots UEFI machines.
    #[arg(long, env = "INGOT_BOOT_MEDIA_DIR")]
    boot_media_dir: Option<std::path::PathBuf>,

    /// Sources besides a node's own address that may fetch its install config and report its
    /// install (a NAT or relay between the servers and ingot), as CIDRs, comma-separated.
    #[arg(long, env = "INGOT_BOOT_ALLOW_SOURCE", value_delimiter = ',')]
    boot_allow_source: Vec<ipnet::IpNet>,

    /// Servers at most between their install boot and their installer's SUCCEEDED, across
    /// every Cluster: the others wait their turn.
    #[arg(
        long,
        env = "INGOT_PROVISIONING_MAX_CONCURRENT_INSTALLS",
        default_value_t = 20
    )]
    provisioning_max_concurrent_installs: usize,

    /// Seconds after its boot an install that has not reported SUCCEEDED is held with a
    /// condition (never booted again on its own).
    #[arg(
        long,
        env = "INGOT_PROVISIONING_INSTALL_TIMEOUT_SECONDS",
        default_value_t = 7200
    )]
    provisioning_install_timeout_seconds: u64,

    /// Who boots the provisioned servers: `ingot` (its boot server serves each node's iPXE
    /// script and install config) or `tinkerbell` (ingot writes Tinkerbell Hardware, Template
    /// and Workflow objects as Seeder does, and Smee and Hegel serve the boot; needed for
    /// `clusterConfig.streamImageMode`).
    #[arg(
        long,
        env = "INGOT_PROVISIONING_BOOT",
        value_enum,
        default_value = "ingot"
    )]
    provisioning_boot: BootArg,

    /// With `--provisioning-boot tinkerbell` (refused without it): the address of Hegel and
    /// Smee. Default: the load-balancer IP of Service `tink-stack` in the Cluster's namespace,
    /// as Seeder reads it.
    #[arg(long, env = "INGOT_PROVISIONING_TINK_ADDRESS")]
    provisioning_tink_address: Option<std::net::IpAddr>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BootArg {
    Ingot,
    Tinkerbell,
}

impl ProvisioningArgs {
    fn namespace(&self) -> Option<String> {
        self.provisioning_namespace
            .clone()
            .filter(|n| !n.is_empty())
    }

    /// Refuses settings that would be ignored.
    fn check(&self) -> anyhow::Result<()> {
        if let (Some(address), BootArg::Ingot) =
            (self.provisioning_tink_address, self.provisioning_boot)
        {
            anyhow::bail!(
                "--provisioning-tink-address {address} is only used with --provisioning-boot tinkerbell, and --provisioning-boot is ingot: add --provisioning-boot tinkerbell (INGOT_PROVISIONING_BOOT=tinkerbell), or remove --provisioning-tink-address (INGOT_PROVISIONING_TINK_ADDRESS)"
            );
        }
        Ok(())
    }

    fn settings(&self, rufio: &rufio::Settings) -> provisioning::Settings {
        provisioning::Settings {
            namespace: self.namespace(),
            boot_url: self.boot_url.clone(),
            max_concurrent_installs: self.provisioning_max_concurrent_installs.max(1),
            install_timeout: Duration::from_secs(self.provisioning_install_timeout_seconds),
            cross_namespace: rufio.cross_namespace.clone(),
            crash_point: rufio.crash_point.clone(),
            boot: match self.provisioning_boot {
                BootArg::Ingot => provisioning::BootMode::Ingot,
                BootArg::Tinkerbell => provisioning::BootMode::Tinkerbell {
                    address: self.provisioning_tink_address.map(|a| a.to_string()),
                },
            },
        }
    }
}

/// Settings of the Seeder controller (embedded mode: Inventory and the local Cluster).
#[derive(Args, Debug)]
struct SeederArgs {
    /// Reconcile Inventories of this namespace only (default: every namespace, as Seeder).
    /// The local Cluster is always harvester-system/local.
    #[arg(long, env = "INGOT_SEEDER_NAMESPACE")]
    seeder_namespace: Option<String>,

    /// Serve Harvester's node power actions over HTTPS on this address (with `seeder`):
    /// `POST /v1/harvester/nodes/<node>?action=powerActionPossible|powerAction`, for callers
    /// with a Kubernetes token who hold the power permission on the Node (create on
    /// nodes/poweraction in seeder.ingot.dev), on Nodes in maintenance.
    #[arg(long)]
    power_api_addr: Option<SocketAddr>,

    /// Connections open at once on --power-api-addr; one more is closed at once.
    #[arg(long, default_value_t = 64)]
    power_api_max_connections: usize,

    /// Audiences a caller's token must carry (TokenReview audiences), comma-separated; empty:
    /// the API server's own (a ServiceAccount's mounted token).
    #[arg(long, value_delimiter = ',', env = "INGOT_POWER_API_AUDIENCES")]
    power_api_audiences: Vec<String>,

    /// The power action API's certificate (PEM chain); without it or --power-api-tls-secret, a
    /// self-signed certificate is made at start.
    #[arg(
        long,
        requires = "power_api_tls_key",
        conflicts_with = "power_api_tls_secret"
    )]
    power_api_tls_cert: Option<PathBuf>,

    /// The kubernetes.io/tls Secret (in --lease-namespace) holding the power action API's
    /// certificate: read at start, or made self-signed for --power-api-tls-names by the first
    /// replica that finds it missing, so that every replica and every start present the same.
    #[arg(long)]
    power_api_tls_secret: Option<String>,

    /// The names the certificate made for --power-api-tls-secret is for (the Service's DNS
    /// names), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "localhost")]
    power_api_tls_names: Vec<String>,

    /// The private key (PEM) of --power-api-tls-cert.
    #[arg(long, requires = "power_api_tls_cert")]
    power_api_tls_key: Option<PathBuf>,

    /// Receive the BMCs' pushed Redfish events on this address (with `seeder`): each local
    /// Inventory with spec.events.enabled gets an EventService subscription on its BMC
    /// pointing at --events-url, and each event it pushes reads the Inventory's hardware at
    /// once (a power event its power too); where the BMC refuses the subscription but offers
    /// server-sent events, its stream is followed instead (--events-max-streams). Polling at
    /// spec.events.pollingInterval goes on.
    #[arg(long, requires_all = ["events_url", "events_key_file"])]
    events_addr: Option<SocketAddr>,

    /// The receiver's URL as the BMCs reach it (https://<address or name>:<port>/<path>),
    /// the Destination of every subscription. The receiver serves HTTPS with a self-signed
    /// certificate made at start for the URL's host (BMCs do not verify it).
    #[arg(long, requires = "events_addr")]
    events_url: Option<String>,

    /// A file holding the key (at least 32 bytes, e.g. from a Secret) each Inventory's
    /// subscription secret is derived from (HMAC-SHA256 of the key and the Inventory's uid):
    /// the same on every replica and every start.
    #[arg(long, requires = "events_addr")]
    events_key_file: Option<PathBuf>,

    /// Connections open at once on --events-addr; one more is closed at once.
    #[arg(long, default_value_t = 256)]
    events_max_connections: usize,

    /// The receiver's certificate (PEM chain, e.g. the tls.crt of a kubernetes.io/tls Secret);
    /// without it, a certificate self-signed for the host of --events-url is made at start.
    #[arg(long, requires_all = ["events_tls_key", "events_addr"])]
    events_tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --events-tls-cert.
    #[arg(long, requires = "events_tls_cert")]
    events_tls_key: Option<PathBuf>,

    /// BMC event streams held at once (with --events-addr). A local Inventory whose BMC
    /// refuses push subscriptions but offers Redfish server-sent events has that stream
    /// followed (one connection each, reopened after a drop), each event read as a pushed one;
    /// beyond this many, such Inventories are only polled, which an Event on each says.
    #[arg(long, default_value_t = seeder::streams::DEFAULT_MAX_STREAMS)]
    events_max_streams: usize,
}

/// The smallest key --events-key-file may hold.
const MIN_EVENTS_KEY_BYTES: usize = 32;

impl SeederArgs {
    /// The push events' settings (`None` without --events-addr), checked.
    fn push(&self) -> anyhow::Result<Option<Arc<seeder::push::PushSettings>>> {
        let (Some(_), Some(url), Some(key_file)) =
            (&self.events_addr, &self.events_url, &self.events_key_file)
        else {
            return Ok(None);
        };
        let parsed = url::Url::parse(url).map_err(|e| {
            anyhow::anyhow!("--events-url {url:?} is not a URL ({e}): give the receiver's address as the BMCs reach it, e.g. https://10.0.0.5:8443/events")
        })?;
        if parsed.scheme() != "https" || parsed.host_str().is_none() {
            anyhow::bail!(
                "--events-url {url:?} must be an https:// URL with a host (the receiver serves HTTPS)"
            );
        }
        let key = std::fs::read(key_file)
            .with_context(|| format!("reading --events-key-file {}", key_file.display()))?;
        let key: Vec<u8> = key.trim_ascii().to_vec();
        if key.len() < MIN_EVENTS_KEY_BYTES {
            anyhow::bail!(
                "--events-key-file {} holds {} bytes: the key must be at least {MIN_EVENTS_KEY_BYTES} (e.g. 48 random bytes, base64-encoded)",
                key_file.display(),
                key.len()
            );
        }
        Ok(Some(Arc::new(
            seeder::push::PushSettings::new(url.clone(), key)
                .with_max_streams(self.events_max_streams),
        )))
    }

    fn settings(&self) -> seeder::Settings {
        seeder::Settings {
            namespace: self.seeder_namespace.clone().filter(|n| !n.is_empty()),
            ..seeder::Settings::default()
        }
    }
}

/// Settings of the Rufio controllers (Machine, Job, Task of bmc.tinkerbell.org).
#[derive(Args, Debug)]
struct RufioArgs {
    /// Reconcile Machines, Jobs and Tasks of this namespace only (Rufio's --kube-namespace).
    #[arg(long, env = "INGOT_RUFIO_NAMESPACE")]
    rufio_namespace: Option<String>,

    /// Seconds between two power-state reads of a Machine (±10 % per Machine).
    #[arg(long, default_value_t = 180.0)]
    rufio_machine_interval_seconds: f64,

    /// Seconds a Task may take before it fails.
    #[arg(long, default_value_t = 600.0)]
    rufio_task_timeout_seconds: f64,

    /// Longest wait in seconds between reads of the BMC while a Task waits for its effect
    /// (the first read comes 0.25 s after the send, then the waits grow to this).
    #[arg(long, default_value_t = 3.0)]
    rufio_task_poll_seconds: f64,

    /// Machines reconciled at once (and Seeder Inventories' hardware reads).
    #[arg(long, default_value_t = 256)]
    rufio_machine_concurrency: u16,

    /// Jobs and Tasks reconciled at once.
    #[arg(long, default_value_t = 256)]
    rufio_task_concurrency: u16,

    /// BMC requests in flight across the fleet (a hedged read and its copies count once).
    #[arg(long, default_value_t = 256)]
    rufio_fleet_limit: usize,

    /// Seconds a Redfish request may take.
    #[arg(long, default_value_t = 10.0)]
    rufio_redfish_timeout_seconds: f64,

    /// Seconds an IPMI exchange waits before retransmitting (3 retransmissions).
    #[arg(long, default_value_t = 1.0)]
    rufio_ipmi_timeout_seconds: f64,

    /// Seconds between sweeps that log out of BMCs no Machine or Task refers to any more.
    #[arg(long, default_value_t = 60.0)]
    rufio_evict_interval_seconds: f64,

    /// Namespace pairs FROM=TO, comma-separated: Machines, Jobs and Tasks in FROM may name
    /// Secrets (`authSecretRef.namespace`) and Machines (`machineRef.namespace`) in TO. Without
    /// a pair, a reference to another namespace is refused, and nothing is read or sent.
    #[arg(
        long,
        env = "INGOT_RUFIO_ALLOW_CROSS_NAMESPACE",
        value_delimiter = ',',
        value_name = "FROM=TO"
    )]
    rufio_allow_cross_namespace: Vec<String>,

    /// PEM file of CA certificates trusted for BMC certificates (Redfish over HTTPS), besides
    /// the system roots.
    #[arg(long, env = "INGOT_BMC_CA_BUNDLE", value_name = "FILE")]
    bmc_ca_bundle: Option<PathBuf>,
}

impl RufioArgs {
    fn settings(&self) -> anyhow::Result<rufio::Settings> {
        let secs = |s: f64| Duration::from_secs_f64(s.max(0.01));
        let cross_namespace =
            rufio::tenancy::CrossNamespace::parse(&self.rufio_allow_cross_namespace)?;
        let ca_bundle_pem = match &self.bmc_ca_bundle {
            Some(path) => Some(Arc::new(read_ca_bundle(path)?)),
            None => None,
        };
        Ok(rufio::Settings {
            namespace: self.rufio_namespace.clone().filter(|n| !n.is_empty()),
            machine_interval: secs(self.rufio_machine_interval_seconds),
            task_timeout: secs(self.rufio_task_timeout_seconds),
            task_poll: secs(self.rufio_task_poll_seconds),
            machine_concurrency: self.rufio_machine_concurrency.max(1),
            task_concurrency: self.rufio_task_concurrency.max(1),
            fleet_limit: self.rufio_fleet_limit.max(1),
            redfish_timeout: secs(self.rufio_redfish_timeout_seconds),
            ipmi_timeout: secs(self.rufio_ipmi_timeout_seconds),
            evict_interval: secs(self.rufio_evict_interval_seconds),
            cross_namespace,
            ca_bundle_pem,
            ..rufio::Settings::default()
        })
    }
}

/// The `--bmc-ca-bundle` file, checked to hold at least one PEM certificate.
fn read_ca_bundle(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let pem = std::fs::read(path)
        .with_context(|| format!("--bmc-ca-bundle: reading {}", path.display()))?;
    let options = ingot_bmc::redfish::RedfishOptions {
        tls: ingot_bmc::redfish::TlsOptions {
            insecure: false,
            ca_bundle_pem: Some(pem.clone()),
            pinned_sha256: None,
        },
        ..ingot_bmc::redfish::RedfishOptions::default()
    };
    ingot_bmc::redfish::http_client(&options).map_err(|e| {
        anyhow::anyhow!(
            "--bmc-ca-bundle {}: {e}; give a file of PEM certificates (-----BEGIN CERTIFICATE-----)",
            path.display()
        )
    })?;
    Ok(pem)
}

/// Settings of the pools controllers (InstancePool, Instance).
#[derive(Args, Debug)]
struct PoolsArgs {
    /// Base URL of the Equinix Metal API (point it at `ingot-sim metal` for local runs).
    #[arg(long, env = "INGOT_METAL_API_URL", default_value = ingot_metal::equinix::DEFAULT_BASE_URL)]
    metal_api_url: String,

    /// Requests per second to the Metal API, shared by every controller.
    #[arg(long, default_value_t = 10.0)]
    metal_rate_limit: f64,

    /// URL at which servers reach this operator's HTTP address; each Instance's install iPXE
    /// script is served at `<url>/ipxe/instances/<instance>.ipxe`.
    #[arg(long, env = "INGOT_IPXE_BASE_URL")]
    ipxe_base_url: Option<String>,

    /// The cluster VIP new nodes join (default: the load-balancer address of
    /// kube-system/ingress-expose, as the original addon finds it).
    #[arg(long, env = "INGOT_CLUSTER_ADDRESS")]
    cluster_address: Option<String>,

    /// Name of the Secret holding METAL_AUTH_TOKEN and PROJECT_ID (the original addon's
    /// EQUINIX_SECRET).
    #[arg(long, env = "EQUINIX_SECRET", default_value = pools::DEFAULT_SECRET_NAME)]
    equinix_secret: String,

    /// Namespace of that Secret and of the Instances' OS-password Secrets (the original addon's
    /// NAMESPACE).
    #[arg(long, env = "NAMESPACE", default_value = pools::DEFAULT_SECRET_NAMESPACE)]
    equinix_secret_namespace: String,

    /// rancherd config with the join `token:`, read when the environment has no TOKEN.
    #[arg(long, default_value = "/etc/rancher/rancherd/config.yaml")]
    rancherd_config: PathBuf,

    /// Seconds between looks at a server in progress (provisioning, reinstalling).
    #[arg(long, default_value_t = 10.0)]
    metal_poll_seconds: f64,

    /// Seconds after the installed server turned active before one that has not joined is
    /// installed again (doubled per retry, at most four times this).
    #[arg(long, default_value_t = 2700)]
    install_retry_seconds: u64,

    /// Install retries before the server is replaced.
    #[arg(long, default_value_t = 3)]
    install_retries: u32,

    /// Seconds a new server may take to become active before it is replaced.
    #[arg(long, default_value_t = 1800)]
    provision_timeout_seconds: u64,

    /// Seconds a reinstall may take to bring the server back before it is replaced.
    #[arg(long, default_value_t = 1800)]
    reinstall_timeout_seconds: u64,

    /// First delay after a failed reconcile, doubled per failure with jitter.
    #[arg(long, default_value_t = 5.0)]
    error_backoff_seconds: f64,

    /// Longest delay after failed reconciles.
    #[arg(long, default_value_t = 300.0)]
    error_backoff_max_seconds: f64,

    /// Test hook: abort the process at these points (comma-separated: after-create,
    /// before-reinstall, after-reinstall, during-finalize; onprem-after-claim,
    /// onprem-after-boot-job, onprem-after-wipe-job, onprem-after-off-confirmed; gardener-after-create,
    /// gardener-during-drain, gardener-during-delete; rufio-after-send-ahead,
    /// rufio-after-destructive-send; seeder-after-job-create; provisioning-after-allocation,
    /// provisioning-after-boot-job, provisioning-after-webhook; fencing-after-power-off-job,
    /// fencing-after-taint, fencing-after-power-on-job).
    /// Compiled into test builds only (the `crash-points` feature).
    #[cfg(feature = "crash-points")]
    #[arg(long, env = "INGOT_CRASH_POINT", hide = true)]
    crash_point: Option<String>,

    /// A mirror of Harvester's release artifacts (kernel, initrd, rootfs, ISO).
    #[arg(long, env = "INGOT_HARVESTER_MIRROR")]
    harvester_mirror: Option<String>,

    /// The namespaces whose Inventories a pool with spec.inventorySelector may draw servers
    /// from, comma-separated (default: any). A pool naming another one is refused.
    #[arg(long, env = "INGOT_POOL_INVENTORY_NAMESPACES", value_delimiter = ',')]
    pool_inventory_namespaces: Vec<String>,

    /// Seconds one pass of a delete on premises waits for the power off to be read back from
    /// the BMC before it looks again later.
    #[arg(long, default_value_t = 20)]
    pool_release_wait_seconds: u64,

    /// Seconds after which a pool's Instance that found no Inventory to take looks again; a
    /// watch of Inventories wakes it as soon as one is free and ready.
    #[arg(long, default_value_t = 15)]
    pool_no_inventory_retry_seconds: u64,

    /// The kernel of the site's wipe image, which a pool or an Inventory MachineClass with
    /// `wipePolicy: metadata` boots its released servers into (with --wipe-initrd-url and
    /// --boot-url). The image's agent reads
    /// `ingot.wipe`, `ip=` and `ingot.report` from its command line (docs/onprem.md).
    #[arg(long, env = "INGOT_WIPE_KERNEL_URL")]
    wipe_kernel_url: Option<url::Url>,

    /// The initrd of the site's wipe image (with --wipe-kernel-url).
    #[arg(long, env = "INGOT_WIPE_INITRD_URL")]
    wipe_initrd_url: Option<url::Url>,
}

impl PoolsArgs {
    /// The armed crash points (test builds only).
    #[cfg(feature = "crash-points")]
    fn crash_points(&self) -> Option<String> {
        self.crash_point.clone().filter(|p| !p.is_empty())
    }

    /// The shipped binary has no crash points.
    #[cfg(not(feature = "crash-points"))]
    fn crash_points(&self) -> Option<String> {
        None
    }

    /// `boot_url`: where servers reach the boot server (`--boot-url`).
    /// The site's wipe image (`--wipe-kernel-url`, `--wipe-initrd-url`): both or neither.
    fn wipe_image(&self) -> anyhow::Result<Option<ingot_controllers::onprem::wipe::WipeImage>> {
        ingot_controllers::onprem::wipe::WipeImage::from_flags(
            self.wipe_kernel_url.as_ref(),
            self.wipe_initrd_url.as_ref(),
        )
        .map_err(|why| anyhow::anyhow!(why))
    }

    fn settings(&self, boot_url: Option<url::Url>) -> anyhow::Result<pools::Settings> {
        let wipe_image = self.wipe_image()?;
        Ok(pools::Settings {
            secret: pools::SecretLocation {
                namespace: self.equinix_secret_namespace.clone(),
                name: self.equinix_secret.clone(),
            },
            join: pools::JoinSettings {
                // The original addon's TOKEN: environment only, never a flag (a flag shows in
                // the process list).
                token: std::env::var("TOKEN")
                    .ok()
                    .filter(|t| !t.is_empty())
                    .map(ingot_harvester::Secret::new),
                cluster_address: self.cluster_address.clone(),
                rancherd_config: self.rancherd_config.clone(),
            },
            metal_api_url: self.metal_api_url.clone(),
            ipxe_base_url: self.ipxe_base_url.clone(),
            harvester_mirror: self.harvester_mirror.clone(),
            poll_interval: Duration::from_secs_f64(self.metal_poll_seconds.max(0.1)),
            install_retry: Duration::from_secs(self.install_retry_seconds),
            install_retries: self.install_retries,
            provision_timeout: Duration::from_secs(self.provision_timeout_seconds),
            reinstall_timeout: Duration::from_secs(self.reinstall_timeout_seconds),
            error_backoff: Duration::from_secs_f64(self.error_backoff_seconds.max(0.01)),
            error_backoff_max: Duration::from_secs_f64(self.error_backoff_max_seconds.max(0.01)),
            inventory_namespaces: self
                .pool_inventory_namespaces
                .iter()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect(),
            boot_url,
            release_off_wait: Duration::from_secs(self.pool_release_wait_seconds),
            no_inventory_retry: Duration::from_secs(self.pool_no_inventory_retry_seconds.max(1)),
            wipe_image,
            crash_point: self.crash_points(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
enum ControllerArg {
    /// InstancePool and Instance (Equinix Metal servers into Harvester).
    Pools,
    /// The Gardener machine controller for `provider: EquinixMetal` and `provider: Inventory`
    /// MachineClasses (the latter with provisioning, for the boot server and the addresses).
    Gardener,
    /// Machine, Job and Task of bmc.tinkerbell.org (Tinkerbell Rufio).
    Rufio,
    /// Harvester Seeder's embedded mode: the local Cluster, Inventories, power actions (starts
    /// rufio too).
    Seeder,
    /// Harvester Seeder's full (provisioning) mode: AddressPools and their addresses.
    Provisioning,
    /// Fencing: a Node NotReady too long is powered off through its Inventory's BMC, then
    /// tainted out of service (starts rufio too).
    Fencing,
}

impl From<ControllerArg> for ControllerKind {
    fn from(arg: ControllerArg) -> Self {
        match arg {
            ControllerArg::Pools => ControllerKind::Pools,
            ControllerArg::Gardener => ControllerKind::Gardener,
            ControllerArg::Rufio => ControllerKind::Rufio,
            ControllerArg::Seeder => ControllerKind::Seeder,
            ControllerArg::Provisioning => ControllerKind::Provisioning,
            ControllerArg::Fencing => ControllerKind::Fencing,
        }
    }
}

/// The Rufio controllers' settings. Provisioning's Inventories' Machines and Jobs live in its
/// namespace: with only that namespace watched, the Rufio controllers watch it too unless they
/// (or Seeder) are chosen themselves.
fn rufio_settings(args: &RunArgs) -> anyhow::Result<rufio::Settings> {
    let mut settings = rufio::Settings {
        crash_point: args.pools.crash_points(),
        ..args.rufio.settings()?
    };
    let rufio_chosen = args
        .controllers
        .iter()
        .any(|c| matches!(c, ControllerArg::Rufio | ControllerArg::Seeder));
    if !rufio_chosen && settings.namespace.is_none() {
        settings.namespace = args.provisioning.namespace();
    }
    Ok(settings)
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format, &args.log_level);
    #[cfg(feature = "crash-points")]
    if args.pools.crash_points().is_some() {
        ingot_controllers::set_crash_hook(crate::crash::abort_at);
    }
    let controllers = chosen_controllers(&args.controllers);
    let rufio_settings = rufio_settings(&args)?;
    // A bad fencing setting stops the start, before any controller runs.
    args.fencing.settings(&rufio_settings)?;
    args.provisioning.check()?;
    let push = args.seeder.push()?;
    if push.is_some() && !controllers.contains(&ControllerKind::Seeder) {
        anyhow::bail!(
            "--events-addr receives the Inventories' pushed events: add seeder to --controllers"
        );
    }
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    info!(version = env!("CARGO_PKG_VERSION"), %identity, controllers = ?controllers, "starting ingot");

    let metrics = Arc::new(Metrics::default());
    let client = connect_and_check(args.kubeconfig.as_deref(), &metrics).await?;
    let parts = Parts::resolve(&args, &controllers, client, metrics, identity).await?;
    let (client, metrics) = (parts.client.clone(), parts.metrics.clone());

    let ready = Arc::new(AtomicBool::new(true));
    let stop = Stop::new();
    let receiver = push.map(|p| seeder::push::Receiver::new(p, metrics.clone()));
    let servers = Servers::start(
        &args,
        &controllers,
        &parts,
        &ready,
        receiver.as_ref(),
        &stop,
    )
    .await?;

    let mut elector = LeaderElector::new(client.clone(), lease_config(&args, &parts.identity));
    let shutdown_signal = termination_signal()?;
    // Stand by until the lease is ours, or stop if asked to first.
    tokio::select! {
        () = elector.acquire() => {}
        signal = shutdown_signal.clone() => {
            info!(signal, "stopping before leading");
            stop.now();
            servers.stopped().await;
            return Ok(());
        }
    }
    metrics.leader.set(1);
    metrics.leader_transition(LeaderTransition::Acquired);

    // One Rufio context (one BMC session per BMC) for the Rufio controllers and the Seeder
    // controller's hardware reads.
    let rufio_ctx = Arc::new(rufio::RufioContext::new(
        client.clone(),
        metrics.clone(),
        parts.identity.clone(),
        rufio_settings,
    ));
    let tasks =
        parts.start_controllers(&args, &controllers, &rufio_ctx, receiver.as_ref(), &stop)?;

    let outcome = tokio::select! {
        lost = elector.hold() => Err(anyhow::Error::new(lost).context("lost leadership; exiting so that no two replicas reconcile")),
        signal = shutdown_signal => {
            info!(signal, "shutting down");
            Ok(())
        }
    };
    if outcome.is_err() {
        metrics.leader_transition(LeaderTransition::Lost);
        // Fencing: the lease is gone (or could not be renewed in time, which is before another
        // replica may take it), so in-flight reconciles are cancelled now rather than allowed
        // to finish; a deposed leader makes no further call.
        for task in &tasks {
            task.abort();
        }
    }
    ready.store(false, Ordering::Relaxed);
    stop_controllers(tasks, &stop).await;
    // Then log out of every BMC, in parallel, each within a short deadline.
    if controllers.contains(&ControllerKind::Rufio) {
        let closed = rufio_ctx.shutdown().await;
        info!(sessions = closed, "closed the BMC sessions");
    }
    metrics.leader.set(0);
    if outcome.is_ok() {
        elector.release().await;
    }
    servers.stopped().await;
    outcome
}

/// What the controllers share, resolved before leading so that a bad setting stops the
/// process at once rather than once it leads.
struct Parts {
    client: Client,
    metrics: Arc<Metrics>,
    identity: String,
    /// One Metal rate limit for every controller that calls the Metal API.
    metal_limiter: Arc<ingot_metal::equinix::RateLimiter>,
    /// The Gardener controllers' control and target clusters.
    gardener_clusters: Option<ingot_controllers::gardener::Clusters>,
    pools: Arc<pools::PoolsShared>,
}

impl Parts {
    async fn resolve(
        args: &RunArgs,
        controllers: &HashSet<ControllerKind>,
        client: Client,
        metrics: Arc<Metrics>,
        identity: String,
    ) -> anyhow::Result<Self> {
        if controllers.contains(&ControllerKind::Pools) {
            warn_if_credentials_missing(&client, &args.pools).await;
        }
        let metal_limiter = Arc::new(ingot_metal::equinix::RateLimiter::new(
            args.pools.metal_rate_limit,
            5,
        ));
        let connector = Arc::new(
            pools::EquinixConnector::with_limiter(
                args.pools.metal_api_url.clone(),
                metal_limiter.clone(),
            )
            .with_observer(ingot_metal::Observer::new(metrics.clone())),
        );
        let eviction_client = connect_without_retry(args.kubeconfig.as_deref(), &metrics).await?;
        let gardener_clusters = if controllers.contains(&ControllerKind::Gardener) {
            Some(
                args.gardener
                    .clusters(&client, &eviction_client, &metrics)
                    .await?,
            )
        } else {
            None
        };
        let pools = Arc::new(
            pools::PoolsShared::new(
                args.pools.settings(args.provisioning.boot_url.clone())?,
                connector,
            )
            .with_eviction_client(eviction_client),
        );
        Ok(Self {
            client,
            metrics,
            identity,
            metal_limiter,
            gardener_clusters,
            pools,
        })
    }

    /// The Seeder controller's context: embedded mode when chosen, provisioning's Inventories
    /// when that is.
    fn seeder_context(
        &self,
        args: &RunArgs,
        controllers: &HashSet<ControllerKind>,
        rufio_ctx: &Arc<rufio::RufioContext>,
        receiver: Option<&Arc<seeder::push::Receiver>>,
    ) -> Arc<seeder::SeederContext> {
        let embedded = controllers.contains(&ControllerKind::Seeder);
        let mut settings = seeder::Settings {
            embedded,
            provisioning: controllers.contains(&ControllerKind::Provisioning),
            push: receiver.map(|r| r.settings.clone()),
            ..args.seeder.settings()
        };
        // Without embedded mode, the Inventories are provisioning's: in its namespace.
        if !embedded && settings.namespace.is_none() {
            settings.namespace = args.provisioning.namespace();
        }
        let ctx = Arc::new(seeder::SeederContext::new(
            self.client.clone(),
            self.metrics.clone(),
            self.identity.clone(),
            settings,
            rufio_ctx.clone(),
        ));
        if let Some(receiver) = receiver {
            receiver.attach(ctx.clone());
        }
        ctx
    }

    /// Starts each chosen controller as its own task, all stopping on `stop`.
    fn start_controllers(
        self,
        args: &RunArgs,
        controllers: &HashSet<ControllerKind>,
        rufio_ctx: &Arc<rufio::RufioContext>,
        receiver: Option<&Arc<seeder::push::Receiver>>,
        stop: &Stop,
    ) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
        let ctx = Arc::new(pools::PoolsContext::new(
            self.client.clone(),
            self.metrics.clone(),
            self.identity.clone(),
            self.pools.clone(),
        ));
        let mut tasks = Vec::new();
        for kind in controllers {
            let shutdown = stop.signal().shared();
            info!(controller = kind.name(), "starting controller");
            tasks.push(match kind {
                ControllerKind::Pools => tokio::spawn(pools::run(ctx.clone(), shutdown)),
                ControllerKind::Gardener => args.gardener.spawn(
                    self.gardener_clusters
                        .clone()
                        .context("the Gardener clusters were resolved at start")?,
                    &args.pools.metal_api_url,
                    self.metal_limiter.clone(),
                    self.client.clone(),
                    args.provisioning.boot_url.clone(),
                    args.pools.wipe_image()?,
                    self.metrics.clone(),
                    args.pools.crash_points(),
                    self.identity.clone(),
                    shutdown,
                ),
                ControllerKind::Rufio => tokio::spawn(rufio::run(rufio_ctx.clone(), shutdown)),
                ControllerKind::Seeder => tokio::spawn(seeder::run(
                    self.seeder_context(args, controllers, rufio_ctx, receiver),
                    shutdown,
                )),
                ControllerKind::Provisioning => {
                    let ctx = Arc::new(provisioning::ProvisioningContext::new(
                        self.client.clone(),
                        self.metrics.clone(),
                        self.identity.clone(),
                        args.provisioning.settings(&rufio_ctx.settings),
                    ));
                    // Inventories' Machines and readiness are Seeder's common chain: without
                    // embedded mode, its Inventory controller runs for provisioning alone.
                    let seeder = (!controllers.contains(&ControllerKind::Seeder)).then(|| {
                        seeder::run(
                            self.seeder_context(args, controllers, rufio_ctx, None),
                            shutdown.clone(),
                        )
                    });
                    tokio::spawn(async move {
                        let seeder = async move {
                            if let Some(seeder) = seeder {
                                seeder.await;
                            }
                        };
                        tokio::join!(provisioning::run(ctx, shutdown), seeder);
                    })
                }
                ControllerKind::Fencing => tokio::spawn(fencing::run(
                    Arc::new(fencing::FencingContext::new(
                        self.client.clone(),
                        self.metrics.clone(),
                        self.identity.clone(),
                        args.fencing.settings(&rufio_ctx.settings)?,
                    )),
                    shutdown,
                )),
            });
        }
        Ok(tasks)
    }
}

fn lease_config(args: &RunArgs, identity: &str) -> LeaseConfig {
    LeaseConfig {
        namespace: args.lease_namespace.clone(),
        name: args.lease_name.clone(),
        identity: identity.to_owned(),
        lease_duration: Duration::from_secs(args.lease_duration_seconds),
        retry_period: Duration::from_secs((args.lease_duration_seconds / 5).max(1)),
        renew_deadline: Duration::from_secs(args.lease_duration_seconds * 2 / 3),
    }
}

/// Resolves with the name of the first SIGTERM or SIGINT.
fn termination_signal()
-> anyhow::Result<futures::future::Shared<futures::future::BoxFuture<'static, &'static str>>> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        }
    }
    .boxed()
    .shared())
}

/// The HTTP servers of every replica (health, metrics, iPXE scripts; Seeder's power API),
/// serving from start, leading or not, until the process stops.
struct Servers {
    http: tokio::task::JoinHandle<()>,
    power_api: Option<tokio::task::JoinHandle<()>>,
    events: Option<tokio::task::JoinHandle<()>>,
    boot: Option<tokio::task::JoinHandle<()>>,
}

impl Servers {
    async fn start(
        args: &RunArgs,
        controllers: &HashSet<ControllerKind>,
        parts: &Parts,
        ready: &Arc<AtomicBool>,
        receiver: Option<&Arc<seeder::push::Receiver>>,
        stop: &Stop,
    ) -> anyhow::Result<Self> {
        let health = Health {
            metrics: parts.metrics.clone(),
            ready: ready.clone(),
            pools: parts.pools.clone(),
            instances: controllers
                .contains(&ControllerKind::Pools)
                .then(|| watch_instances_for_scripts(&parts.client, stop)),
        };
        let power_api = serve_power_api(args, controllers, &parts.client, stop).await?;
        let boot = serve_boot(args, controllers, parts, stop).await?;
        let events = match receiver {
            Some(receiver) => {
                Some(serve_events(args, receiver.clone(), &parts.client, stop).await?)
            }
            None => None,
        };
        let http = http::serve(
            args.http_addr,
            health,
            server_limits(args, args.http_max_connections),
            stop.signal(),
        )
        .await?;
        Ok(Self {
            http,
            power_api,
            events,
            boot,
        })
    }

    /// Waits for the servers to finish once [`Stop::now`] was called.
    async fn stopped(self) {
        let _ = self.http.await;
        if let Some(power_api) = self.power_api {
            let _ = power_api.await;
        }
        if let Some(events) = self.events {
            let _ = events.await;
        }
        if let Some(boot) = self.boot {
            let _ = boot.await;
        }
    }
}

/// The boot server (`--boot-addr`), serving from its own watches on every replica until the
/// process stops; it needs the provisioning controller.
async fn serve_boot(
    args: &RunArgs,
    controllers: &HashSet<ControllerKind>,
    parts: &Parts,
    stop: &Stop,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = args.provisioning.boot_addr else {
        return Ok(None);
    };
    if !controllers.contains(&ControllerKind::Provisioning) {
        anyhow::bail!("--boot-addr serves provisioned servers: add provisioning to --controllers");
    }
    let media = match &args.provisioning.boot_media_dir {
        Some(dir) => {
            let files = ingot_controllers::provisioning::media::MediaFiles::load(dir)
                .map_err(|e| anyhow::anyhow!("--boot-media-dir: {e}"))?;
            if files.ipxe_efi.is_none() {
                warn!(
                    dir = %dir.display(),
                    "--boot-media-dir has no ipxe.efi: the boot CD boots BIOS machines only, not UEFI ones"
                );
            }
            Some(std::sync::Arc::new(files))
        }
        None => None,
    };
    let (service, feed) = ingot_controllers::provisioning::boot::BootService::new(
        parts.client.clone(),
        parts.metrics.clone(),
        parts.identity.clone(),
        ingot_controllers::provisioning::boot::BootSettings {
            namespace: args.provisioning.namespace(),
            allowed_sources: args.provisioning.boot_allow_source.clone(),
            crash_point: args.pools.crash_points(),
            tinkerbell: args.provisioning.provisioning_boot == BootArg::Tinkerbell,
            boot_url: args.provisioning.boot_url.clone(),
            media,
        },
    );
    let stopped = stop.signal();
    tokio::spawn(async move {
        tokio::select! {
            () = feed => {}
            () = stopped => {}
        }
    });
    let served = crate::boot::serve(
        addr,
        service,
        server_limits(args, args.http_max_connections),
        stop.signal(),
    )
    .await?;
    Ok(Some(served))
}

/// The one stop signal of the process: the servers and every controller wait on it.
struct Stop(watch::Sender<bool>);

impl Stop {
    fn new() -> Self {
        Self(watch::channel(false).0)
    }

    /// Resolves once [`Stop::now`] is called (at once if it was).
    fn signal(&self) -> impl std::future::Future<Output = ()> + Send + Sync + 'static {
        let mut rx = self.0.subscribe();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    fn now(&self) {
        let _ = self.0.send(true);
    }
}

/// Stops reconciling: the controllers take no new work and get a short grace period for what
/// is in flight (a status write), then whatever is still running (a read from a BMC that does
/// not answer) is cancelled; reconciles can be stopped at any line.
async fn stop_controllers(tasks: Vec<tokio::task::JoinHandle<()>>, stop: &Stop) {
    stop.now();
    let grace = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    let mut cancelled = Vec::new();
    for mut task in tasks {
        if tokio::time::timeout_at(grace, &mut task).await.is_err() {
            task.abort();
            cancelled.push(task);
        }
    }
    for task in cancelled {
        let _ = task.await;
    }
}

/// A client of the API server, checked by asking its version within
/// [`API_SERVER_DEADLINE`]: an unreachable server stops the process with one line saying
/// which server, why, and where its address came from.
async fn connect_and_check(
    kubeconfig: Option<&std::path::Path>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Client> {
    let client = connect(kubeconfig, metrics).await?;
    let version = match tokio::time::timeout(API_SERVER_DEADLINE, client.apiserver_version()).await
    {
        Ok(Ok(version)) => version,
        failed => {
            let config = load_config(kubeconfig).await?;
            let why = match failed {
                Ok(Err(error)) => format!("{:#}", anyhow::Error::new(error)),
                _ => format!("no answer within {} s", API_SERVER_DEADLINE.as_secs()),
            };
            let source = match kubeconfig {
                Some(path) => format!("--kubeconfig {}", path.display()),
                None => "KUBECONFIG, ~/.kube/config or the in-cluster service account".to_owned(),
            };
            anyhow::bail!(
                "cannot reach the Kubernetes API server {} ({why}): start it, or point --kubeconfig (or KUBECONFIG) at one that answers; the server comes from {source}",
                config.cluster_url
            );
        }
    };
    info!(server = %version.git_version, "connected to the Kubernetes API server");
    Ok(client)
}

/// The Instances for the iPXE scripts, watched by every replica (a script request reads the
/// store, not the API server) until the process stops.
fn watch_instances_for_scripts(
    client: &Client,
    stop: &Stop,
) -> kube::runtime::reflector::Store<ingot_api::equinix::Instance> {
    let (store, writer) = kube::runtime::reflector::store();
    let feed = ingot_controllers::feed_store(
        writer,
        kube::Api::<ingot_api::equinix::Instance>::all(client.clone()),
        kube::runtime::watcher::Config::default(),
    );
    let stopped = stop.signal();
    tokio::spawn(async move {
        tokio::select! {
            () = feed => {}
            () = stopped => {}
        }
    });
    store
}

fn server_limits(args: &RunArgs, max_connections: usize) -> crate::serve::Limits {
    crate::serve::Limits {
        max_connections,
        header_timeout: Duration::from_secs_f64(args.request_header_timeout_seconds.max(0.1)),
        connection_lifetime: Duration::from_secs_f64(args.connection_lifetime_seconds.max(1.0)),
    }
}

/// The push events receiver (`--events-addr`), serving on every replica until the process
/// stops (a replica that does not lead answers 503: the BMC retries).
async fn serve_events(
    args: &RunArgs,
    receiver: Arc<seeder::push::Receiver>,
    client: &Client,
    stop: &Stop,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let seeder = &args.seeder;
    let addr = seeder
        .events_addr
        .context("--events-addr is set with the push settings")?;
    let host = url::Url::parse(&receiver.settings.url)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()))
        .unwrap_or_else(|| "localhost".to_owned());
    let certificate = match (&seeder.events_tls_cert, &seeder.events_tls_key) {
        (Some(cert), Some(key)) => power_api::Certificate::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        _ => power_api::Certificate::SelfSigned(vec![host, addr.ip().to_string()]),
    };
    let mut config = power_api::server_config(certificate, client).await?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = Some(Arc::new(config));
    crate::events::serve(
        addr,
        receiver,
        tls,
        server_limits(args, seeder.events_max_connections),
        stop.signal(),
    )
    .await
}

/// Seeder's power API (`--power-api-addr`), serving until the process stops; it needs the
/// seeder controller.
async fn serve_power_api(
    args: &RunArgs,
    controllers: &HashSet<ControllerKind>,
    client: &Client,
    stop: &Stop,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = args.seeder.power_api_addr else {
        return Ok(None);
    };
    if !controllers.contains(&ControllerKind::Seeder) {
        anyhow::bail!(
            "--power-api-addr serves Seeder's power actions: add seeder to --controllers"
        );
    }
    let certificate = match (
        &args.seeder.power_api_tls_cert,
        &args.seeder.power_api_tls_key,
        &args.seeder.power_api_tls_secret,
    ) {
        (Some(cert), Some(key), _) => power_api::Certificate::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        (_, _, Some(name)) => power_api::Certificate::Secret {
            namespace: args.lease_namespace.clone(),
            name: name.clone(),
            names: args.seeder.power_api_tls_names.clone(),
        },
        _ => {
            power_api::Certificate::SelfSigned(vec!["localhost".to_owned(), addr.ip().to_string()])
        }
    };
    let namespace = args
        .seeder
        .seeder_namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| ingot_api::seeder::LOCAL_CLUSTER_NAMESPACE.to_owned());
    let audiences = args
        .seeder
        .power_api_audiences
        .iter()
        .filter(|a| !a.is_empty())
        .cloned()
        .collect();
    let served = power_api::serve(
        addr,
        certificate,
        power_api::Reviews::new(client.clone(), audiences),
        namespace,
        server_limits(args, args.seeder.power_api_max_connections),
        stop.signal(),
    )
    .await?;
    Ok(Some(served))
}

/// Time the API server has to answer the first request at start.
const API_SERVER_DEADLINE: Duration = Duration::from_secs(10);

/// Time the controllers have to finish what they are doing once asked to stop (SIGTERM);
/// then it is cancelled. With the BMC logouts' deadline ([`ingot_bmc::manager::LOGOUT_DEADLINE`])
/// the process is gone well within 5 s of SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The controllers to start: those asked for, plus `rufio` when `seeder` is asked for (Seeder's
/// embedded mode runs the Rufio controllers itself).
fn chosen_controllers(args: &[ControllerArg]) -> HashSet<ControllerKind> {
    let mut kinds: HashSet<ControllerKind> = args.iter().map(|c| (*c).into()).collect();
    if kinds.contains(&ControllerKind::Seeder)
        || kinds.contains(&ControllerKind::Provisioning)
        || kinds.contains(&ControllerKind::Fencing)
    {
        kinds.insert(ControllerKind::Rufio);
    }
    kinds
}

pub(crate) async fn connect(
    kubeconfig: Option<&std::path::Path>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Client> {
    let config = load_config(kubeconfig).await?;
    counting_client(config, metrics)
}

/// A client that does not retry 429s itself: an eviction refused by a PodDisruptionBudget
/// answers 429, and that answer is the drain's to act on, not the client's to retry.
pub(crate) async fn connect_without_retry(
    kubeconfig: Option<&std::path::Path>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Client> {
    let mut config = load_config(kubeconfig).await?;
    config.default_retry = false;
    counting_client(config, metrics)
}

/// A client whose every request is counted by verb and resource (`ingot_kube_requests_total`),
/// speaking HTTP/2 to the API server where it is offered.
fn counting_client(config: Config, metrics: &Arc<Metrics>) -> anyhow::Result<Client> {
    ingot_controllers::api_client::client(config, metrics).context("creating the Kubernetes client")
}

pub(crate) async fn load_config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Config> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading the kubeconfig {}", path.display()))?
        }
        None => Config::infer()
            .await
            .context("finding a kubeconfig or an in-cluster service account")?,
    };
    Ok(config)
}

/// One line at start when the pools' Metal credentials Secret is missing, naming the command
/// that makes it. ingot keeps running: its pools wait with `CredentialsReady=False` and go on
/// once the Secret exists, and the other controllers are not held up by it.
async fn warn_if_credentials_missing(client: &Client, pools: &PoolsArgs) {
    let (namespace, name) = (&pools.equinix_secret_namespace, &pools.equinix_secret);
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), namespace);
    match secrets.get_metadata_opt(name).await {
        Ok(Some(_)) => {}
        Ok(None) => warn!(
            "the Metal credentials Secret {namespace}/{name} does not exist: create it with \
             `kubectl -n {namespace} create secret generic {name} --from-literal=METAL_AUTH_TOKEN=<token> \
             --from-literal=PROJECT_ID=<project>` (or name another with --equinix-secret); pools wait \
             for it with CredentialsReady=False"
        ),
        Err(error) => warn!(
            "cannot read the Metal credentials Secret {namespace}/{name} ({error}): pools wait for it \
             with CredentialsReady=False"
        ),
    }
}

fn default_identity() -> String {
    use rand::Rng;
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "ingot".to_owned());
    let suffix: u32 = rand::rng().random();
    format!("{host}-{suffix:08x}")
}
