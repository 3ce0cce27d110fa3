//! Virtual media: where each vendor keeps its devices and how it takes an image.

use crate::BmcState;
use serde::Serialize;
use serde_json::{Value, json};

/// How a vendor's virtual media devices take an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaInsert {
    /// The `InsertMedia` / `EjectMedia` actions (VirtualMedia 1.2 and later).
    Actions,
    /// The actions, but `InsertMedia` refuses `Inserted` and `WriteProtected` (400): some
    /// Supermicro boards take `Image` alone.
    ActionsImageOnly,
    /// No actions: a PATCH of `Image` and `Inserted` (services before VirtualMedia 1.2).
    Patch,
}

/// A vendor's virtual media devices.
#[derive(Clone, Copy, Debug)]
pub struct MediaProfile {
    /// `Systems` or `Managers`: the resource whose `VirtualMedia` lists the devices.
    pub owner: &'static str,
    /// `(Id, MediaTypes)` of each device.
    pub devices: &'static [(&'static str, &'static [&'static str])],
    pub insert: MediaInsert,
}

/// One device's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaState {
    pub id: String,
    pub image: Option<String>,
    pub inserted: bool,
    pub write_protected: bool,
}

pub(crate) fn initial(profile: &MediaProfile) -> Vec<MediaState> {
    profile
        .devices
        .iter()
        .map(|(id, _)| MediaState {
            id: (*id).to_owned(),
            ..MediaState::default()
        })
        .collect()
}

/// `{owner}/VirtualMedia`.
pub(crate) fn collection_path(b: &BmcState) -> String {
    let owner = if b.profile.media.owner == "Systems" {
        crate::redfish::system_path(b)
    } else {
        crate::redfish::manager_path(b)
    };
    format!("{owner}/VirtualMedia")
}

/// A device as the BMC serves it.
pub(crate) fn device(b: &BmcState, index: usize) -> Value {
    let (id, types) = b.profile.media.devices[index];
    let path = format!("{}/{id}", collection_path(b));
    let state = b.lock().media[index].clone();
    let mut v = json!({
        "@odata.id": path,
        "@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia",
        "Id": id,
        "Name": format!("Virtual {}", types[0]),
        "MediaTypes": types,
        "Image": state.image,
        "Inserted": state.inserted,
        "WriteProtected": state.write_protected,
        "ConnectedVia": if state.inserted { "URI" } else { "NotConnected" },
    });
    if b.profile.media.insert != MediaInsert::Patch {
        v["Actions"] = json!({
            "#VirtualMedia.InsertMedia": {"target": format!("{path}/Actions/VirtualMedia.InsertMedia")},
            "#VirtualMedia.EjectMedia": {"target": format!("{path}/Actions/VirtualMedia.EjectMedia")},
        });
    }
    v
}

/// Why a change was refused: `(HTTP status, MessageId, Message)`.
pub(crate) type Refusal = (u16, &'static str, &'static str);

/// `InsertMedia` with this body.
pub(crate) fn insert(b: &BmcState, index: usize, body: &Value) -> Result<(), Refusal> {
    if b.profile.media.insert == MediaInsert::ActionsImageOnly
        && (body.get("Inserted").is_some() || body.get("WriteProtected").is_some())
    {
        return Err((
            400,
            "Base.1.8.ActionParameterNotSupported",
            "The parameters Inserted and WriteProtected are not supported by this action.",
        ));
    }
    attach(b, index, body)
}

/// `EjectMedia`.
pub(crate) fn eject(b: &BmcState, index: usize) -> Result<(), Refusal> {
    let mut g = b.lock();
    let m = &mut g.media[index];
    if !m.inserted {
        return Err((
            400,
            "Base.1.8.ActionNotSupported",
            "No media is inserted in this device.",
        ));
    }
    m.image = None;
    m.inserted = false;
    m.write_protected = false;
    g.media_log
        .push(format!("eject {}", b.profile.media.devices[index].0));
    Ok(())
}

/// A PATCH of the device (vendors without the actions): an `Image` attaches it, a null
/// `Image` or `Inserted: false` ejects.
pub(crate) fn patch(b: &BmcState, index: usize, body: &Value) -> Result<(), Refusal> {
    if b.profile.media.insert != MediaInsert::Patch {
        return Err((
            405,
            "Base.1.8.OperationNotAllowed",
            "Use the InsertMedia and EjectMedia actions.",
        ));
    }
    let ejecting = body.get("Image").is_some_and(Value::is_null)
        || body.get("Inserted").and_then(Value::as_bool) == Some(false);
    if ejecting {
        return eject(b, index);
    }
    attach(b, index, body)
}

fn attach(b: &BmcState, index: usize, body: &Value) -> Result<(), Refusal> {
    let Some(image) = body
        .get("Image")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Err((
            400,
            "Base.1.8.ActionParameterMissing",
            "The action requires the parameter Image.",
        ));
    };
    let mut g = b.lock();
    let m = &mut g.media[index];
    // As many BMCs do: an occupied device must be emptied first.
    if m.inserted {
        return Err((
            400,
            "Base.1.8.ResourceInUse",
            "The device already holds media; eject it first.",
        ));
    }
    m.image = Some(image.to_owned());
    m.inserted = body
        .get("Inserted")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    m.write_protected = body
        .get("WriteProtected")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    g.media_log.push(format!(
        "insert {} {image}",
        b.profile.media.devices[index].0
    ));
    Ok(())
}
