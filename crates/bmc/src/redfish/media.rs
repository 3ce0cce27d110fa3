//! Virtual media: the devices of the system (or of its managers), insert and eject by action or
//! by PATCH on older services.

use super::RedfishClient;
use super::json::{link, list, string};
use crate::error::BmcError;
use crate::types::*;
use reqwest::Method;
use serde_json::{Value, json};

impl RedfishClient {
    /// The system's virtual media devices as slots.
    pub(super) async fn media_slots(&self) -> Result<Vec<MediaSlot>, BmcError> {
        Ok(self.media_devices().await?.iter().map(media_slot).collect())
    }

    /// The system's virtual media devices: its own `VirtualMedia` (Redfish 1.12 and later,
    /// newer iDRAC firmware), else those of the managers that manage it (`Links.ManagedBy`,
    /// else every manager), where older services keep them.
    async fn media_devices(&self) -> Result<Vec<Value>, BmcError> {
        let (_, system, _) = self.system().await?;
        if let Some(own) = link(&system, "VirtualMedia") {
            match self.members(&own).await {
                Ok(devices) if !devices.is_empty() => return Ok(devices),
                Ok(_) => {}
                Err(e) if e.is_auth() || e.is_transient() => return Err(e),
                // Linked but not served (404, 501...): the managers may have them.
                Err(e) => {
                    tracing::debug!(bmc = %self.base, collection = %own, error = %e, "system virtual media unreadable; trying the managers");
                }
            }
        }
        let mut managers: Vec<String> = system
            .pointer("/Links/ManagedBy")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|m| string(m, "@odata.id")).collect())
            .unwrap_or_default();
        if managers.is_empty() {
            let root = self.root().await?;
            if let Some(all) = root.managers.as_deref() {
                managers = self.member_links(all).await?;
            }
        }
        let mut devices = Vec::new();
        for manager in managers {
            let manager = self.get(&manager).await?;
            if let Some(l) = link(&manager, "VirtualMedia") {
                devices.extend(self.members(&l).await?);
            }
        }
        Ok(devices)
    }

    /// Ejects a device's media: its `EjectMedia` action, else (services before VirtualMedia
    /// 1.2) a PATCH that empties it.
    async fn eject(&self, device: &Value) -> Result<(), BmcError> {
        let path = string(device, "@odata.id").unwrap_or_default();
        let (method, target, body) = match device
            .pointer("/Actions/#VirtualMedia.EjectMedia/target")
            .and_then(Value::as_str)
        {
            Some(action) => (Method::POST, action.to_owned(), json!({})),
            None => (
                Method::PATCH,
                path,
                json!({"Image": null, "Inserted": false}),
            ),
        };
        self.request(method, &target, Some(&body), &[])
            .await
            .map(|_| ())
    }

    /// Attaches `image` to a device: its `InsertMedia` action with `Inserted` and
    /// `WriteProtected`, again with `Image` alone when the BMC refuses those (some Supermicro
    /// boards), else (services before VirtualMedia 1.2) a PATCH.
    async fn insert(&self, device: &Value, image: &str) -> Result<(), BmcError> {
        let path = string(device, "@odata.id").unwrap_or_default();
        let Some(target) = device
            .pointer("/Actions/#VirtualMedia.InsertMedia/target")
            .and_then(Value::as_str)
        else {
            return self
                .request(
                    Method::PATCH,
                    &path,
                    Some(&json!({"Image": image, "Inserted": true})),
                    &[],
                )
                .await
                .map(|_| ());
        };
        let full = json!({"Image": image, "Inserted": true, "WriteProtected": true});
        match self.request(Method::POST, target, Some(&full), &[]).await {
            Err(BmcError::Http {
                status: 400 | 422, ..
            }) => {
                tracing::debug!(bmc = %self.base, device = %path, "InsertMedia refused with Inserted/WriteProtected; sending Image alone");
                self.request(Method::POST, target, Some(&json!({"Image": image})), &[])
                    .await
                    .map(|_| ())
            }
            other => other.map(|_| ()),
        }
    }

    /// Attaches or ejects virtual media (see [`crate::Bmc::set_virtual_media`]).
    pub(super) async fn attach_media(
        &self,
        kind: MediaKind,
        image: Option<String>,
    ) -> Result<(), BmcError> {
        let devices = self.media_devices().await?;
        let slots: Vec<(MediaSlot, &Value)> = devices
            .iter()
            .map(|d| (media_slot(d), d))
            .filter(|(slot, _)| slot.takes(kind))
            .collect();
        if slots.is_empty() {
            let offered: Vec<String> = devices
                .iter()
                .flat_map(|d| media_slot(d).media_types)
                .collect();
            return Err(BmcError::Unsupported(format!(
                "virtual media of kind {} (the BMC offers: {})",
                kind.redfish(),
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            )));
        }
        let Some(image) = image else {
            for (slot, device) in &slots {
                if slot.inserted {
                    self.eject(device).await?;
                }
            }
            return Ok(());
        };
        // Already attached: nothing is sent (ejecting it again could pull the media from
        // under a host that is booting from it).
        if slots
            .iter()
            .any(|(s, _)| s.inserted && s.image.as_deref() == Some(image.as_str()))
        {
            return Ok(());
        }
        // The first device that takes the kind, emptied first (as bmclib does: inserting
        // into an occupied device fails on many BMCs).
        let (slot, device) = &slots[0];
        if slot.inserted {
            self.eject(device).await?;
        }
        self.insert(device, &image).await
    }
}

/// A virtual media device as the BMC reports it. `Inserted` is optional in the schema: an
/// attached image without it counts as inserted.
pub(super) fn media_slot(device: &Value) -> MediaSlot {
    let image = string(device, "Image");
    MediaSlot {
        id: string(device, "@odata.id").unwrap_or_default(),
        media_types: device.get("MediaTypes").map(list).unwrap_or_default(),
        inserted: device
            .get("Inserted")
            .and_then(Value::as_bool)
            .unwrap_or(image.is_some()),
        image,
    }
}
