//! `ingot bmc` before it is wired into the `ingot` binary:
//! `cargo run -p ingot-bmc --example bmc -- --host https://h:8443 --user U --password-env VAR power status`

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bmc",
    about = "Power, boot, inventory and event log of one BMC"
)]
struct Cli {
    #[command(flatten)]
    args: ingot_bmc::cli::BmcArgs,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<ExitCode> {
    ingot_bmc::cli::run(Cli::parse().args).await
}
