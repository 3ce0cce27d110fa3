//! `ingot run --controllers gardener`: the flags of the Gardener machine controller, named as
//! upstream machine-controller-manager's machine controller names them, and its context.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use ingot_controllers::gardener::driver::EquinixDriver;
use ingot_controllers::gardener::driver::equinix::EquinixClouds;
use ingot_controllers::gardener::{EquinixDriverArc, GardenerContext, Settings, parse_go_duration};
use ingot_metal::equinix::RateLimiter;
use kube::Client;

fn go_duration(text: &str) -> Result<Duration, String> {
    parse_go_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration such as 90s, 20m or 2h"))
}

/// Settings of the Gardener machine controller (Machines of `provider: EquinixMetal` classes).
#[derive(Args, Debug)]
pub struct GardenerArgs {
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

    /// Accepted for upstream's flag set and not used: ingot retries a refused eviction until
    /// --machine-drain-timeout, then forces the drain.
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
}

impl GardenerArgs {
    /// Starts the Gardener controllers; they stop when `shutdown` completes.
    pub fn spawn(
        &self,
        client: Client,
        eviction_client: Client,
        metal_api_url: &str,
        limiter: Arc<RateLimiter>,
        crash_points: Option<String>,
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
        });
        let driver: EquinixDriverArc = Arc::new(EquinixDriver::new(clouds));
        tokio::spawn(async move {
            let ctx = GardenerContext::new(client, driver, settings)
                .with_eviction_client(eviction_client)
                .with_crash_points(crash_points);
            ingot_controllers::gardener::run(Arc::new(ctx), shutdown).await;
        })
    }
}
