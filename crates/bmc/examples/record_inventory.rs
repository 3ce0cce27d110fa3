//! Records the documents the Redfish client reads for an inventory (with the service root) as
//! the JSON the inventory mapping's tests load (`src/redfish/inventory/testdata/`).
//!
//! ```text
//! cargo run -p ingot-bmc --example record_inventory -- sim dell > dell.json
//! cargo run -p ingot-bmc --example record_inventory -- http://127.0.0.1:8000 USER PASSWORD > x.json
//! ```
//! `sim VENDOR` starts one emulated BMC of that vendor profile (dell, hpe, lenovo, supermicro).

use ingot_bmc::redfish::fuzzing::inventory_documents;
use ingot_bmc::redfish::{RedfishClient, RedfishOptions};
use ingot_bmc::{Endpoint, Password};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (_fleet, url, user, password) = match args.as_slice() {
        [sim, vendor] if sim == "sim" => {
            let spec = BmcSpec {
                vendor: vendor.parse()?,
                ..BmcSpec::default()
            };
            let fleet = Fleet::start(FleetOptions::default(), vec![spec.clone()]).await?;
            let url = fleet.bmcs[0].url();
            (Some(fleet), url, spec.username, spec.password)
        }
        [url, user, password] => (None, url.clone(), user.clone(), password.clone()),
        _ => return Err("usage: record_inventory (sim VENDOR | URL USER PASSWORD)".into()),
    };
    let endpoint = Endpoint::parse(&url, None)?;
    let client = RedfishClient::new(
        &endpoint,
        user,
        Password::new(password),
        RedfishOptions::default(),
    )?;
    let recorded = inventory_documents(&client).await?;
    println!("{}", serde_json::to_string_pretty(&recorded)?);
    ingot_bmc::Bmc::close(&client).await?;
    Ok(())
}
