//! The machine driver interface of Gardener's machine-controller-manager
//! (`pkg/util/provider/driver`): the six calls a machine controller makes to a cloud, and the
//! error codes (`pkg/util/provider/machinecodes/codes`) it reacts to. [`equinix`] implements it
//! for Equinix Metal, [`inventory`] for servers on premises; [`Providers`] picks by the class.

pub mod equinix;
pub mod inventory;

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use ingot_api::gardener::{Machine, MachineClass};

pub use equinix::EquinixDriver;
pub use inventory::{InventoryDriver, InventorySettings, Providers};

/// MCM's machine codes, with their numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    Ok = 0,
    Canceled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
    Uninitialized = 17,
}

impl Code {
    /// The name MCM writes into `lastOperation.errorCode`.
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Canceled => "Canceled",
            Code::Unknown => "Unknown",
            Code::InvalidArgument => "InvalidArgument",
            Code::DeadlineExceeded => "DeadlineExceeded",
            Code::NotFound => "NotFound",
            Code::AlreadyExists => "AlreadyExists",
            Code::PermissionDenied => "PermissionDenied",
            Code::ResourceExhausted => "ResourceExhausted",
            Code::FailedPrecondition => "FailedPrecondition",
            Code::Aborted => "Aborted",
            Code::OutOfRange => "OutOfRange",
            Code::Unimplemented => "Unimplemented",
            Code::Internal => "Internal",
            Code::Unavailable => "Unavailable",
            Code::DataLoss => "DataLoss",
            Code::Unauthenticated => "Unauthenticated",
            Code::Uninitialized => "Uninitialized",
        }
    }

    /// MCM's `StringToCode`: unknown names are `Unknown`.
    pub fn from_name(name: &str) -> Code {
        const ALL: [Code; 18] = [
            Code::Ok,
            Code::Canceled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
            Code::Uninitialized,
        ];
        ALL.into_iter()
            .find(|c| c.name() == name)
            .unwrap_or(Code::Unknown)
    }

    /// Worth retrying soon (MCM's ShortRetry codes).
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Code::Unknown | Code::DeadlineExceeded | Code::Aborted | Code::Unavailable
        )
    }
}

/// A driver error: a code and a message. Displays as MCM's `status.Error()` does, because that
/// text is what `lastOperation.description` carries.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Status {
    pub code: Code,
    pub message: String,
}

impl Status {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Status {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "machine codes error: code = [{}] message = [{}]",
            self.code.name(),
            self.message
        )
    }
}

pub type DriverResult<T> = Result<T, Status>;

/// The secret data a driver sees: `secretRef` merged with `credentialsSecretRef`.
/// `Debug` shows only the keys.
#[derive(Clone, Default, PartialEq)]
pub struct SecretData(pub BTreeMap<String, Vec<u8>>);

impl SecretData {
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.0.get(key).map(Vec::as_slice)
    }

    pub fn get_str(&self, key: &str) -> Option<String> {
        self.get(key)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
}

impl fmt::Debug for SecretData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// What every machine call gets.
#[derive(Clone, Debug)]
pub struct MachineRequest<'a> {
    pub machine: &'a Machine,
    pub class: &'a MachineClass,
    pub secret: &'a SecretData,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateMachineResponse {
    pub provider_id: String,
    pub node_name: String,
    pub last_known_state: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitializeMachineResponse {
    pub provider_id: String,
    pub node_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteMachineResponse {
    pub last_known_state: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GetMachineStatusResponse {
    pub provider_id: String,
    pub node_name: String,
}

/// `MachineList`: providerID -> machine name.
pub type ListMachinesResponse = BTreeMap<String, String>;

/// MCM's `Driver` interface.
#[async_trait]
pub trait Driver: Send + Sync {
    async fn create_machine(&self, req: MachineRequest<'_>) -> DriverResult<CreateMachineResponse>;
    async fn initialize_machine(
        &self,
        req: MachineRequest<'_>,
    ) -> DriverResult<InitializeMachineResponse>;
    /// Works with only the name and `spec.providerID` of the Machine set (orphan collection).
    async fn delete_machine(&self, req: MachineRequest<'_>) -> DriverResult<DeleteMachineResponse>;
    async fn get_machine_status(
        &self,
        req: MachineRequest<'_>,
    ) -> DriverResult<GetMachineStatusResponse>;
    async fn list_machines(
        &self,
        class: &MachineClass,
        secret: &SecretData,
    ) -> DriverResult<ListMachinesResponse>;
    async fn get_volume_ids(
        &self,
        specs: &[k8s_openapi::api::core::v1::PersistentVolumeSpec],
    ) -> DriverResult<Vec<String>>;
}

/// Secret key of the user data.
pub const USER_DATA_KEY: &str = "userData";

/// The Secret's user data, required (the Go provider's message).
pub fn user_data(secret: &SecretData) -> DriverResult<String> {
    secret
        .get_str(USER_DATA_KEY)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            Status::new(
                Code::InvalidArgument,
                "Error while validating Secret secretRef.userData: Required value: Required userData",
            )
        })
}

/// The tag naming a machine's cluster (its owner).
pub const CLUSTER_TAG: &str = "kubernetes.io/cluster/";
/// The tag naming a machine's role.
pub const ROLE_TAG: &str = "kubernetes.io/role/";

/// The last tag holding `marker` (the Go provider reads the last one).
pub fn last_tag(tags: Option<&[String]>, marker: &str) -> Option<String> {
    tags.into_iter()
        .flatten()
        .rev()
        .find(|t| t.contains(marker))
        .cloned()
}

/// A Machine name a server can take as host name.
pub fn validate_name(name: &str) -> DriverResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b == b'-' || b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Status::new(
            Code::InvalidArgument,
            format!("Machine name {name:?} is not valid: at most 63 characters of [-a-z0-9]"),
        ))
    }
}

/// The machine code for a cloud error: the class decides what MCM does next.
pub fn code_of(error: &ingot_metal::Error) -> Code {
    use ingot_metal::Error as E;
    match error {
        E::NotFound { .. } => Code::NotFound,
        E::Unauthorized { .. } => Code::Unauthenticated,
        E::Forbidden { .. } => Code::PermissionDenied,
        E::NoCapacity { .. } | E::NoServer { .. } => Code::ResourceExhausted,
        E::NotOnPremises { .. } => Code::Unimplemented,
        E::Validation { .. } | E::InvalidRequest(_) => Code::InvalidArgument,
        E::Conflict { .. } => Code::Aborted,
        E::RateLimited { .. } | E::Transient { .. } => Code::Unavailable,
        E::Protocol { .. } => Code::Unknown,
    }
}

pub fn status(error: ingot_metal::Error, context: &str) -> Status {
    Status::new(code_of(&error), format!("{context}: {error}"))
}

/// The device part of a provider id: the last `/`-separated segment, so that
/// `equinixmetal://<facility>/<uuid>`, `equinixmetal://<metro>/<uuid>`, `equinixmetal://<uuid>`
/// and a bare uuid name the same device.
pub fn device_uuid(provider_id: &str) -> &str {
    provider_id.rsplit('/').next().unwrap_or(provider_id)
}

/// Two provider ids name the same device.
pub fn same_device(a: &str, b: &str) -> bool {
    !device_uuid(a).is_empty() && device_uuid(a) == device_uuid(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_renders_like_mcm() {
        let s = Status::new(Code::ResourceExhausted, "no capacity");
        assert_eq!(
            s.to_string(),
            "machine codes error: code = [ResourceExhausted] message = [no capacity]"
        );
        assert_eq!(Code::from_name("Uninitialized"), Code::Uninitialized);
        assert_eq!(Code::from_name("Nope"), Code::Unknown);
        assert_eq!(Code::Uninitialized as i32, 17);
    }

    #[test]
    fn provider_ids_compare_by_uuid() {
        let uuid = "6f0c1c3e-1111-4222-8333-444455556666";
        assert!(same_device(
            &format!("equinixmetal://ny/{uuid}"),
            &format!("equinixmetal://ewr1/{uuid}")
        ));
        assert!(same_device(&format!("equinixmetal://{uuid}"), uuid));
        assert!(!same_device("equinixmetal://ny/a", "equinixmetal://ny/b"));
        assert!(!same_device("", ""));
    }

    #[test]
    fn secret_debug_hides_values() {
        let mut data = SecretData::default();
        data.0.insert("apiToken".into(), b"s3cr3t".to_vec());
        assert!(!format!("{data:?}").contains("s3cr3t"));
    }
}
