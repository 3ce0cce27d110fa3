//! `ingot power NODE OPERATION`: Harvester's node power action from the command line, under the
//! rules of the HTTPS API (the caller, here the kubeconfig's identity, holds the power permission
//! on the Node; the Node is in maintenance; its Inventory is ready; the last request has its answer).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ingot_controllers::seeder::node_api::{self, Caller};

#[derive(Args, Debug)]
pub struct PowerArgs {
    /// The Node (its Inventory has the same name).
    node: String,

    /// shutdown, poweron or reboot.
    #[arg(value_parser = node_api::OPERATIONS)]
    operation: String,

    /// The kubeconfig to act as (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,

    /// The namespace of the Inventories (Harvester's).
    #[arg(long, default_value = ingot_api::seeder::LOCAL_CLUSTER_NAMESPACE)]
    namespace: String,
}

pub async fn run(args: PowerArgs) -> anyhow::Result<ExitCode> {
    let config = crate::run::load_config(args.kubeconfig.as_deref()).await?;
    let client = kube::Client::try_from(config)?;
    match node_api::request_power_action(
        &client,
        &args.namespace,
        &args.node,
        &args.operation,
        &Caller::Myself,
    )
    .await
    {
        Ok(()) => {
            println!(
                "{} requested on node {}: follow it with `kubectl -n {} get inventory {} -o jsonpath='{{.status.powerAction}}'`",
                args.operation, args.node, args.namespace, args.node
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(refusal) => {
            eprintln!("error: {} ({})", refusal.message, refusal.status);
            Ok(ExitCode::FAILURE)
        }
    }
}
