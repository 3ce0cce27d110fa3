//! Writes every generated CRD into a directory, one file each (used by scripts/update-crds.sh).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: write-crds DIR")?;
    for crd in ingot_api::crds::generated() {
        let path = std::path::Path::new(&dir).join(ingot_api::crds::file_name(&crd));
        std::fs::write(&path, ingot_api::crds::to_yaml(&crd)?)?;
    }
    Ok(())
}
