//! `ingot run --controllers gardener`: the flags of the Gardener machine controller, named as
//! upstream machine-controller-manager's machine controller names them, and its context.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use ingot_controllers::Metrics;
use ingot_controllers::gardener::driver::equinix::EquinixClouds;
use ingot_controllers::gardener::driver::{
    EquinixDriver, InventoryDriver, InventorySettings, Providers,
};
use ingot_controllers::gardener::{
    Clusters, GardenerContext, Settings, SharedDriver, parse_go_duration,
};
use ingot_metal::Observer;
use ingot_metal::equinix::RateLimiter;
use kube::{Client, Config};
use tracing::info;

use crate::run::{connect, connect_without_retry};

/// Upstream's `--control-kubeconfig` value for the pod's own service account.
const IN_CLUSTER_CONFIG: &str = "inClusterConfig";
/// Upstream's `--target-kubeconfig` value for "no target cluster" (not supported here).
const NO_TARGET: &str = "none";

fn go_duration(text: &str) -> Result<Duration, String> {
    parse_go_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration such as 90s, 20m or 2h"))
}

/// Settings of the Gardener machine controller (Machines of `provider: EquinixMetal` and
/// `provider: Inventory` classes).
#[derive(Args, Debug)]
pub struct GardenerArgs {
    /// Kubeconfig of the control cluster, where the Machines, MachineClasses and their Secrets
    /// live (upstream `--control-kubeconfig`); `inClusterConfig` for the pod's service account.
    /// Default: the same cluster as --target-kubeconfig.
    #[arg(long, value_name = "FILE")]
    control_kubeconfig: Option<String>,

    /// Kubeconfig of the target cluster, where the Nodes join and are drained (upstream
    /// `--target-kubeconfig`). Default: ingot's own cluster (--kubeconfig). The leader Lease
    /// always stays on ingot's own cluster.
    #[arg(long, value_name = "FILE")]
    target_kubeconfig: Option<PathBuf>,

    /// Namespace of the Machines, MachineClasses and their Secrets (upstream `--namespace`).
    #[arg(long = "namespace", default_value = "default")]
    namespace: String,

    /// Time a Machine has to join before it is Failed.
    #[arg(long, default_value = "20m", value_parser = go_duration)]
    machine_creation_timeout: Duration,

    /// Time an unhealthy (Unknown) Machine has before it is Failed.
    #[arg(long, default_value = "10m", value_parser = go_duration)]
    machine_health_timeout: Duration,

    /// Time the drain of a deleted Machine's Node may take before pods are deleted.
    #[arg(long, default_value = "2h", value_parser = go_duration)]
    machine_drain_timeout: Duration,

    /// Evictions tried per pod, 20 s apart, before the pod is deleted instead; capped at
    /// --machine-drain-timeout / 20 s (so 0, deleting at once, below 20 s). A pod whose budget
    /// allows no disruption at all with every pod healthy is not deleted this way: the drain
    /// waits for the drain timeout.
    #[arg(long, default_value_t = 360)]
    machine_max_evict_retries: u32,

    /// Period of the orphan-device collector.
    #[arg(long, default_value = "15m", value_parser = go_duration)]
    machine_safety_orphan_vms_period: Duration,

    /// Node conditions that make a Machine unhealthy when True, comma-separated.
    #[arg(
        long,
        default_value = "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable"
    )]
    node_conditions: String,

    /// `auth-extra-groups` of the bootstrap tokens.
    #[arg(long, default_value = "")]
    bootstrap_token_auth_extra_groups: String,

    /// Retry period of a create refused for lack of capacity (ResourceExhausted).
    #[arg(long, default_value = "10m", value_parser = go_duration)]
    resource_exhausted_retry: Duration,

    /// How long a Failed machine with the preserve annotation is kept.
    #[arg(long, default_value = "96h", value_parser = go_duration)]
    machine_preserve_timeout: Duration,

    /// The namespaces whose Inventories `provider: Inventory` MachineClasses may name,
    /// comma-separated (default: any). A class naming another one is refused.
    #[arg(long, value_delimiter = ',')]
    machine_inventory_namespaces: Vec<String>,

    /// How long one delete of an Inventory machine waits for the power off to be read back from
    /// the BMC before it answers "not yet" (MCM asks again).
    #[arg(long, default_value = "20s", value_parser = go_duration)]
    machine_release_wait: Duration,
}

impl GardenerArgs {
    /// The control and target clusters, as upstream resolves its two flags: the target is
    /// `--target-kubeconfig` (else ingot's own cluster); the control cluster is
    /// `--control-kubeconfig` (`inClusterConfig`: the pod's service account), else the target.
    pub async fn clusters(
        &self,
        own: &Client,
        own_evictions: &Client,
        metrics: &Arc<Metrics>,
    ) -> anyhow::Result<Clusters> {
        let (target, target_evictions) = match self.target_kubeconfig.as_deref() {
            None => (own.clone(), own_evictions.clone()),
            Some(path) if path.as_os_str().is_empty() => (own.clone(), own_evictions.clone()),
            Some(path) if path == Path::new(NO_TARGET) => anyhow::bail!(
                "--target-kubeconfig={NO_TARGET} (machines without a target cluster) is not supported"
            ),
            Some(path) => (
                connect(Some(path), metrics)
                    .await
                    .context("the target cluster (--target-kubeconfig)")?,
                connect_without_retry(Some(path), metrics)
                    .await
                    .context("the target cluster (--target-kubeconfig)")?,
            ),
        };
        let control = match self.control_kubeconfig.as_deref() {
            None | Some("") => target.clone(),
            Some(IN_CLUSTER_CONFIG) => {
                let config = Config::incluster()
                    .context("the control cluster (--control-kubeconfig=inClusterConfig)")?;
                ingot_controllers::api_client::client(config, metrics)
                    .context("creating the control cluster's client")?
            }
            Some(path) => connect(Some(Path::new(path)), metrics)
                .await
                .context("the control cluster (--control-kubeconfig)")?,
        };
        info!(
            control = self.control_kubeconfig.as_deref().unwrap_or("the target"),
            target = %self
                .target_kubeconfig
                .as_deref()
                .map_or("ingot's own".into(), Path::to_string_lossy),
            "gardener clusters"
        );
        Ok(Clusters {
            control,
            target,
            target_evictions,
        })
    }

    /// Starts the Gardener controllers as replica `identity`; they stop when `shutdown`
    /// completes.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn(
        &self,
        clusters: Clusters,
        metal_api_url: &str,
        limiter: Arc<RateLimiter>,
        own: Client,
        boot_url: Option<url::Url>,
        wipe_image: Option<ingot_controllers::onprem::wipe::WipeImage>,
        metrics: Arc<Metrics>,
        crash_points: Option<String>,
        identity: String,
        shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let settings = Settings {
            namespace: self.namespace.clone(),
            creation_timeout: self.machine_creation_timeout,
            health_timeout: self.machine_health_timeout,
            drain_timeout: self.machine_drain_timeout,
            max_evict_retries: self.machine_max_evict_retries,
            orphan_vms_period: self.machine_safety_orphan_vms_period,
            node_conditions: self
                .node_conditions
                .split(',')
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect(),
            bootstrap_token_auth_extra_groups: self.bootstrap_token_auth_extra_groups.clone(),
            resource_exhausted_retry: self.resource_exhausted_retry,
            preserve_timeout: self.machine_preserve_timeout,
        };
        let clouds = Arc::new(EquinixClouds {
            base_url: metal_api_url.to_owned(),
            limiter,
            observer: Observer::new(metrics.clone()),
        });
        let inventory = InventoryDriver::new(
            own,
            InventorySettings {
                namespaces: self
                    .machine_inventory_namespaces
                    .iter()
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
                    .collect(),
                boot_url,
                wipe_image,
                off_wait: self.machine_release_wait,
                crash_point: crash_points.clone(),
            },
        );
        let driver: SharedDriver = Arc::new(Providers {
            equinix: Arc::new(EquinixDriver::new(clouds)),
            inventory: Arc::new(inventory),
        });
        tokio::spawn(async move {
            let ctx = GardenerContext::new(clusters, driver, settings)
                .with_crash_points(crash_points)
                .with_identity(identity)
                .with_metrics(metrics);
            ingot_controllers::gardener::run(Arc::new(ctx), shutdown).await;
        })
    }
}
