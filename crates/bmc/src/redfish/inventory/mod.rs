//! Inventory: the documents are fetched here (the HTTP reads, each part that cannot be read
//! skipped) and mapped to [`Inventory`] by [`map`], which does no I/O.

pub(super) mod map;

use super::RedfishClient;
use super::json::{link, string};
use crate::error::BmcError;
use crate::types::Inventory;
use map::{ChassisParts, Documents, StorageParts};
use serde_json::Value;

impl RedfishClient {
    /// Hardware inventory (see [`crate::Bmc::inventory`]).
    pub(super) async fn read_inventory(&self) -> Result<Inventory, BmcError> {
        let (_, system, _) = self.system().await?;
        let vendor = self.vendor_of(&system).await;
        let documents = self.inventory_documents(system).await?;
        Ok(map::inventory(&documents, vendor))
    }

    /// Every document the inventory of `system` is made of, read in this order: processors,
    /// memory, NICs, storage and its drives, PCIe devices, the chassis' sensors, the older
    /// SimpleStorage (only when no drive was read), the system's chassis and manager.
    pub(super) async fn inventory_documents(&self, system: Value) -> Result<Documents, BmcError> {
        let processors = self.optional_members(&system, "Processors").await;
        let memory = self.optional_members(&system, "Memory").await;
        let ethernet_interfaces = self.optional_members(&system, "EthernetInterfaces").await;
        let storage = self.storage_parts(&system).await;
        let pcie_devices = self.optional_members(&system, "PCIeDevices").await;
        let chassis_sensors = self.chassis_parts().await;
        let simple_storage = if storage.iter().all(|s| s.drives.is_empty()) {
            self.optional_members(&system, "SimpleStorage").await
        } else {
            Vec::new()
        };
        let chassis = match system
            .pointer("/Links/Chassis/0/@odata.id")
            .and_then(Value::as_str)
        {
            Some(ch) => self.get(ch).await.ok(),
            None => None,
        };
        let manager = self.first_manager(&system).await?;
        Ok(Documents {
            system,
            processors,
            memory,
            ethernet_interfaces,
            storage,
            pcie_devices,
            chassis_sensors,
            simple_storage,
            chassis,
            manager,
        })
    }

    /// Each storage controller with the drives that could be read (drives hang off each
    /// controller).
    async fn storage_parts(&self, system: &Value) -> Vec<StorageParts> {
        let mut parts = Vec::new();
        for controller in self.optional_members(system, "Storage").await {
            let links: Vec<String> = controller
                .get("Drives")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|d| string(d, "@odata.id"))
                .collect();
            let mut drives = Vec::new();
            for l in links {
                match self.get(&l).await {
                    Ok(d) => drives.push(d),
                    Err(e) => {
                        tracing::debug!(bmc = %self.base, drive = %l, error = %e, "skipping drive")
                    }
                }
            }
            parts.push(StorageParts { controller, drives });
        }
        parts
    }

    /// Fans, temperatures, power supplies and network adapters of every chassis (whatever it is
    /// named: Seeder reads only a chassis named `Computer System Chassis`). A part that cannot
    /// be read is skipped.
    async fn chassis_parts(&self) -> Vec<ChassisParts> {
        let Ok(root) = self.root().await else {
            return Vec::new();
        };
        let Some(chassis) = &root.chassis else {
            return Vec::new();
        };
        let links = match self.member_links(chassis).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(bmc = %self.base, error = %e, "skipping chassis sensors");
                return Vec::new();
            }
        };
        let mut parts = Vec::new();
        for l in links {
            let Ok(ch) = self.get(&l).await else {
                continue;
            };
            let thermal = match link(&ch, "Thermal") {
                Some(t) => self.get(&t).await.ok(),
                None => self.thermal_subsystem(&ch).await,
            };
            let power = match link(&ch, "Power") {
                Some(p) => self.get(&p).await.ok(),
                None => self.power_subsystem(&ch).await,
            };
            let network_adapters = self.optional_members(&ch, "NetworkAdapters").await;
            parts.push(ChassisParts {
                thermal,
                power,
                network_adapters,
            });
        }
        parts
    }

    /// Without `Thermal`: the fans and temperatures of `ThermalSubsystem` (its `Fans` and
    /// `ThermalMetrics`), in the shape of `Thermal`.
    async fn thermal_subsystem(&self, ch: &Value) -> Option<Value> {
        let ts = self.get(&link(ch, "ThermalSubsystem")?).await.ok()?;
        let fans = self.optional_members(&ts, "Fans").await;
        let metrics = match link(&ts, "ThermalMetrics") {
            Some(m) => self.get(&m).await.ok(),
            None => None,
        };
        Some(map::thermal_from_subsystem(&fans, metrics.as_ref()))
    }

    /// Without `Power`: the power supplies of `PowerSubsystem`, in the shape of `Power`.
    async fn power_subsystem(&self, ch: &Value) -> Option<Value> {
        let ps = self.get(&link(ch, "PowerSubsystem")?).await.ok()?;
        let supplies = self.optional_members(&ps, "PowerSupplies").await;
        Some(serde_json::json!({ "PowerSupplies": supplies }))
    }

    /// The system's first manager (`Links.ManagedBy`, else the first of the root's
    /// `Managers`), if it can be read.
    async fn first_manager(&self, system: &Value) -> Result<Option<Value>, BmcError> {
        let manager = match system
            .pointer("/Links/ManagedBy/0/@odata.id")
            .and_then(Value::as_str)
        {
            Some(m) => Some(m.to_owned()),
            None => {
                let root = self.root().await?;
                match &root.managers {
                    Some(l) => self.member_links(l).await?.into_iter().next(),
                    None => None,
                }
            }
        };
        Ok(match manager {
            Some(m) => self.get(&m).await.ok(),
            None => None,
        })
    }
}
