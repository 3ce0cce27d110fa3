//! Serve a few simulated BMCs on 127.0.0.1 until interrupted:
//! `cargo run -p ingot-ipmi-sim --example fleet -- 3 password`
//! then e.g. `ipmitool -I lanplus -C 17 -H 127.0.0.1 -p PORT -U admin -P password mc info`.

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let count = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    let password = args.next().unwrap_or_else(|| "password".into());
    let fleet =
        ingot_ipmi_sim::serve(ingot_ipmi_sim::FleetConfig::uniform(count, &password)).await?;
    for b in fleet.bmcs() {
        println!("{}", b.addr());
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}
