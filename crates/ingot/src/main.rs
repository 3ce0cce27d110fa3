//! `ingot`: the operator (`ingot run`) and its tools (`ingot crds`, `ingot bmc`, `ingot power`).

mod allocator;
mod boot;
#[cfg(feature = "crash-points")]
mod crash;
mod events;
mod gardener;
mod http;
mod leader;
mod power;
mod power_api;
mod run;
mod serve;
mod telemetry;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// ingot runs the lifecycle of bare-metal Kubernetes and Harvester nodes: it provisions
/// Equinix Metal servers into Harvester clusters (InstancePool / Instance), talks to BMCs over
/// Redfish and IPMI (bmc.tinkerbell.org Machine / Job / Task), runs Harvester Seeder's embedded
/// mode on top of them (Inventory, the local Cluster, power actions), and acts as the
/// machine controller for Gardener's machine.sapcloud.io Machines. Its resources are
/// wire-compatible with harvester-equinix-addon, Harvester Seeder, Tinkerbell Rufio and the
/// Gardener Equinix Metal provider.
#[derive(Parser)]
#[command(name = "ingot", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator (--controllers: pools, rufio, seeder, provisioning, gardener): watch the
    /// resources and reconcile them (one replica leads at a time).
    Run(Box<run::RunArgs>),
    /// Print the CustomResourceDefinitions ingot generates, as YAML (apply them with kubectl).
    Crds,
    /// Talk to one BMC over Redfish or IPMI: power, boot override, inventory, event log, and its
    /// events followed as they come (`events`).
    ///
    /// Example: `BMC_PASSWORD=... ingot bmc --host 10.0.0.5 --user admin --password-env
    /// BMC_PASSWORD power status`. The protocol is detected (Redfish first, then IPMI) unless
    /// --protocol is given; --json prints one stable JSON document (`events`: one per line; see
    /// docs/bmc.md).
    Bmc(ingot_bmc::cli::BmcArgs),
    /// Request a power action on a Harvester Node through its Inventory, as Harvester's node
    /// action does: allowed when you hold the power permission on the Node (create on
    /// nodes/poweraction in seeder.ingot.dev) and it is in maintenance.
    ///
    /// Example: `ingot power node-1 reboot`. The action is carried out by `ingot run
    /// --controllers seeder` (see docs/seeder.md).
    Power(power::PowerArgs),
}

fn main() -> ExitCode {
    allocator::fix_mmap_threshold();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(error),
    };
    match cli.command {
        Command::Crds => match ingot_api::crds::all_to_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: rendering the CRDs: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Bmc(args) => block_on(ingot_bmc::cli::run(args)),
        Command::Power(args) => block_on(power::run(args)),
        Command::Run(args) => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("error: starting the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            let outcome = runtime.block_on(run::run(*args));
            // Work that cannot be cancelled (a host name lookup for a BMC that does not
            // answer) does not hold the process up.
            runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            match outcome {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(error = format!("{error:#}"), "ingot stopped");
                    eprintln!("error: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// A command line clap refuses, said on one line (the argument, and the valid values when there
/// is a list), exit code 2; help and version are printed as usual.
fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    let text = error.render().to_string();
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect::<Vec<_>>()
        .join("; ");
    eprintln!("{line} (see --help)");
    ExitCode::from(2)
}

/// Runs a one-shot command on a single-threaded runtime.
fn block_on(command: impl std::future::Future<Output = anyhow::Result<ExitCode>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
