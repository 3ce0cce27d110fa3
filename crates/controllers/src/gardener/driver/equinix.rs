//! The Equinix Metal driver: the Go provider's contract (providerSpec and Secret keys,
//! providerID `equinixmetal://<metro>/<uuid>`, hostname = Machine name) on top of
//! [`BareMetalCloud`], with its defects fixed: every page is listed, errors keep their class
//! (NotFound, auth, capacity -> ResourceExhausted, transient), a create first looks for the
//! device by hostname and cluster tag, and neither the token nor the user data is logged.

use std::sync::Arc;

use async_trait::async_trait;
use ingot_api::gardener::{EquinixMetalProviderSpec, MachineClass, PROVIDER_EQUINIX_METAL};
use ingot_metal::equinix::{ClientConfig, EquinixClient, EquinixMetal, RateLimiter};
use ingot_metal::{ApiToken, BareMetalCloud, Billing, Boot, CreateServer, Observer, Server};
use kube::ResourceExt;

use super::{
    Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverResult,
    GetMachineStatusResponse, InitializeMachineResponse, ListMachinesResponse, MachineRequest,
    SecretData, Status, device_uuid, last_tag, status, user_data, validate_name,
};

/// Secret key of the API token.
pub const API_TOKEN_KEY: &str = "apiToken";
/// Accepted by validation like the Go provider; used when `apiToken` is empty (the Go
/// provider then failed).
pub const ALTERNATE_API_TOKEN_KEY: &str = "alternateApiToken";
pub use super::USER_DATA_KEY;
pub use super::{CLUSTER_TAG, ROLE_TAG};

/// Makes a cloud for a token and a project (the per-class credentials of MCM). Tests inject
/// their own.
pub trait CloudFactory: Send + Sync {
    fn cloud(
        &self,
        token: ApiToken,
        project: &str,
    ) -> Result<Arc<dyn BareMetalCloud>, ingot_metal::Error>;
}

/// Equinix Metal clients at one base URL, sharing one rate limiter and one observer of their
/// calls (metrics).
pub struct EquinixClouds {
    pub base_url: String,
    pub limiter: Arc<RateLimiter>,
    pub observer: Observer,
}

impl CloudFactory for EquinixClouds {
    fn cloud(
        &self,
        token: ApiToken,
        project: &str,
    ) -> Result<Arc<dyn BareMetalCloud>, ingot_metal::Error> {
        let client = EquinixClient::with_limiter(
            ClientConfig::new(self.base_url.clone(), token),
            self.limiter.clone(),
        )?
        .with_observer(self.observer.clone());
        Ok(Arc::new(EquinixMetal::new(client, project)))
    }
}

/// The driver for `provider: EquinixMetal` classes.
pub struct EquinixDriver {
    clouds: Arc<dyn CloudFactory>,
}

/// A validated class: its spec, the two ownership tags, and a cloud for it.
struct Target {
    spec: EquinixMetalProviderSpec,
    cluster_tag: String,
    role_tag: String,
    cloud: Arc<dyn BareMetalCloud>,
}

impl EquinixDriver {
    pub fn new(clouds: Arc<dyn CloudFactory>) -> Self {
        EquinixDriver { clouds }
    }

    fn target(&self, class: &MachineClass, secret: &SecretData) -> DriverResult<Target> {
        check_provider(class)?;
        let spec = decode_provider_spec(class)?;
        let token = api_token(secret)?;
        let cluster_tag = last_tag(spec.tags.as_deref(), CLUSTER_TAG).unwrap_or_default();
        let role_tag = last_tag(spec.tags.as_deref(), ROLE_TAG).unwrap_or_default();
        let cloud = self
            .clouds
            .cloud(token, &spec.project_id)
            .map_err(|e| Status::new(Code::Internal, format!("Could not create session: {e}")))?;
        Ok(Target {
            spec,
            cluster_tag,
            role_tag,
            cloud,
        })
    }

    /// The machine's device: by its provider id, else by hostname and cluster tag (a lost
    /// provider id is recovered instead of creating a second device).
    async fn find(&self, t: &Target, name: &str, provider_id: &str) -> DriverResult<Server> {
        let not_found = || {
            Status::new(
                Code::NotFound,
                format!("Could not find a device for machine {name}"),
            )
        };
        let server = if device_uuid(provider_id).is_empty() {
            t.cloud
                .find_server(&t.cluster_tag, name)
                .await
                .map_err(|e| status(e, &format!("Could not look for device of machine {name}")))?
                .ok_or_else(not_found)?
        } else {
            let id = device_uuid(provider_id);
            t.cloud
                .get_server(id)
                .await
                .map_err(|e| status(e, &format!("Could not get device {id}")))?
        };
        if server.state.is_gone() {
            return Err(not_found());
        }
        Ok(server)
    }
}

fn check_provider(class: &MachineClass) -> DriverResult<()> {
    let provider = class.spec.provider.as_deref().unwrap_or("");
    if provider != PROVIDER_EQUINIX_METAL {
        return Err(Status::new(
            Code::InvalidArgument,
            format!(
                "Requested for Provider '{provider}', we only support '{PROVIDER_EQUINIX_METAL}'"
            ),
        ));
    }
    Ok(())
}

/// Decodes and validates `providerSpec` with the Go provider's field paths and messages.
pub fn decode_provider_spec(class: &MachineClass) -> DriverResult<EquinixMetalProviderSpec> {
    let spec: EquinixMetalProviderSpec = serde_json::from_value(class.spec.provider_spec.clone())
        .map_err(|e| {
        Status::new(
            Code::InvalidArgument,
            format!(
                "Error while decoding ProviderSpec of MachineClass {}: {e}",
                class.name_any()
            ),
        )
    })?;
    let mut errors = Vec::new();
    let blank = |s: &Option<String>| s.as_deref().unwrap_or("").is_empty();
    if blank(&spec.os) && blank(&spec.ipxe_script_url) {
        errors.push("providerSpec.os: Required value: OS or IPXEScriptURL is required");
    }
    if spec.machine_type.is_empty() {
        errors.push("providerSpec.machineType: Required value: Machine Type is required");
    }
    if spec.project_id.is_empty() {
        errors.push("providerSpec.projectID: Required value: Project ID is required");
    }
    if blank(&spec.metro) {
        errors.push("providerSpec.metro: Required value: Metro is required");
    }
    if last_tag(spec.tags.as_deref(), CLUSTER_TAG).is_none() {
        errors.push("spec.tags.kubernetes.io/cluster/: Required value: Tag required of the form kubernetes.io/cluster/****");
    }
    if last_tag(spec.tags.as_deref(), ROLE_TAG).is_none() {
        errors.push("spec.tags.kubernetes.io/role/: Required value: Tag required of the form kubernetes.io/role/****");
    }
    if !errors.is_empty() {
        return Err(Status::new(
            Code::InvalidArgument,
            format!(
                "Error while validating ProviderSpec [{}]",
                errors.join(", ")
            ),
        ));
    }
    Ok(spec)
}

fn api_token(secret: &SecretData) -> DriverResult<ApiToken> {
    [API_TOKEN_KEY, ALTERNATE_API_TOKEN_KEY]
        .into_iter()
        .filter_map(|k| secret.get_str(k))
        .map(ApiToken::new)
        .find(|t| !t.is_empty())
        .ok_or_else(|| {
            Status::new(
                Code::InvalidArgument,
                "Error while validating Secret secretRef.apiToken: Required value: Required Equinix Metal API Key one of 'apiToken' or 'alternateApiToken'",
            )
        })
}

fn billing(cycle: &str) -> DriverResult<Option<Billing>> {
    Ok(Some(match cycle {
        "" => return Ok(None),
        "hourly" => Billing::Hourly,
        "daily" => Billing::Daily,
        "monthly" => Billing::Monthly,
        "yearly" => Billing::Yearly,
        other => {
            return Err(Status::new(
                Code::InvalidArgument,
                format!(
                    "providerSpec.billingCycle {other:?} is not one of hourly, daily, monthly, yearly"
                ),
            ));
        }
    }))
}

#[async_trait]
impl Driver for EquinixDriver {
    async fn create_machine(&self, req: MachineRequest<'_>) -> DriverResult<CreateMachineResponse> {
        let t = self.target(req.class, req.secret)?;
        let user_data = user_data(req.secret)?;
        let name = req.machine.name_any();
        validate_name(&name)?;
        let billing = billing(&t.spec.billing_cycle)?;
        let boot = match t.spec.ipxe_script_url.clone().filter(|u| !u.is_empty()) {
            Some(url) => Boot::Ipxe {
                script_url: Some(url),
                always: false,
            },
            None => Boot::Os(t.spec.os.clone().unwrap_or_default()),
        };
        let mut create = CreateServer::new(
            name.clone(),
            t.spec.machine_type.clone(),
            t.spec.metro.clone().unwrap_or_default(),
            t.cluster_tag.clone(),
            boot,
        );
        create.tags = t.spec.tags.clone().unwrap_or_default();
        create.userdata = Some(user_data);
        create.billing = billing;
        create.project_ssh_keys = t.spec.ssh_keys.clone().unwrap_or_default();

        let done = |s: Server| CreateMachineResponse {
            provider_id: s.provider_id,
            node_name: name.clone(),
            last_known_state: String::new(),
        };
        let reservations = t.spec.reservation_ids.clone().unwrap_or_default();
        let mut last_refusal = None;
        for reservation in &reservations {
            let mut reserved = create.clone();
            reserved.reservation_id = Some(reservation.clone());
            match t.cloud.create_server(&reserved).await {
                Ok(s) => return Ok(done(s)),
                // This reservation is taken or unknown: try the next one.
                Err(
                    e @ (ingot_metal::Error::NoCapacity { .. }
                    | ingot_metal::Error::Validation { .. }
                    | ingot_metal::Error::NotFound { .. }),
                ) => {
                    last_refusal = Some(e.to_string());
                }
                Err(e) => return Err(status(e, "Could not create machine")),
            }
        }
        if t.spec.reserved_devices_only.unwrap_or(false) {
            return Err(Status::new(
                Code::ResourceExhausted,
                format!(
                    "could not get a device with the provided reservation IDs, and reservedOnly is true{}",
                    last_refusal
                        .map(|r| format!(" (last refusal: {r})"))
                        .unwrap_or_default()
                ),
            ));
        }
        // On demand: no reservation id at all (the Go provider kept the last one).
        t.cloud
            .create_server(&create)
            .await
            .map(done)
            .map_err(|e| status(e, "Could not create machine"))
    }

    async fn initialize_machine(
        &self,
        _req: MachineRequest<'_>,
    ) -> DriverResult<InitializeMachineResponse> {
        Err(Status::new(
            Code::Unimplemented,
            "Equinix Metal devices need no initialization",
        ))
    }

    async fn delete_machine(&self, req: MachineRequest<'_>) -> DriverResult<DeleteMachineResponse> {
        let t = self.target(req.class, req.secret)?;
        let name = req.machine.name_any();
        let provider_id = req.machine.spec.provider_id.clone().unwrap_or_default();
        let server = match self.find(&t, &name, &provider_id).await {
            Ok(s) => s,
            Err(s) if s.code == Code::NotFound => return Ok(DeleteMachineResponse::default()),
            Err(s) => return Err(s),
        };
        // Found by the provider id, it may be any device of the project (the id edited, or
        // copied from another Machine): only one with this cluster's tag is deleted.
        if !server.tags.contains(&t.cluster_tag) {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "Device {} of machine {name} does not carry the cluster tag {:?}: not deleting a device of another cluster; correct spec.providerID",
                    server.id, t.cluster_tag
                ),
            ));
        }
        t.cloud
            .delete_server(&server.id)
            .await
            .map_err(|e| status(e, &format!("Could not terminate machine {name}")))?;
        tracing::info!(machine = %name, device = %server.id, "device deleted");
        Ok(DeleteMachineResponse::default())
    }

    async fn get_machine_status(
        &self,
        req: MachineRequest<'_>,
    ) -> DriverResult<GetMachineStatusResponse> {
        let t = self.target(req.class, req.secret)?;
        let name = req.machine.name_any();
        let provider_id = req.machine.spec.provider_id.clone().unwrap_or_default();
        let server = self.find(&t, &name, &provider_id).await?;
        Ok(GetMachineStatusResponse {
            provider_id: server.provider_id,
            node_name: name,
        })
    }

    async fn list_machines(
        &self,
        class: &MachineClass,
        secret: &SecretData,
    ) -> DriverResult<ListMachinesResponse> {
        let t = self.target(class, secret)?;
        let servers = t
            .cloud
            .list_servers(&t.cluster_tag)
            .await
            .map_err(|e| status(e, "Could not list devices"))?;
        Ok(servers
            .into_iter()
            .filter(|s| !s.state.is_gone())
            .filter(|s| s.tags.contains(&t.cluster_tag) && s.tags.contains(&t.role_tag))
            .map(|s| (s.provider_id, s.hostname))
            .collect())
    }

    async fn get_volume_ids(
        &self,
        _specs: &[k8s_openapi::api::core::v1::PersistentVolumeSpec],
    ) -> DriverResult<Vec<String>> {
        // No Equinix block storage is attached by this driver: nothing to wait for on drain.
        Ok(Vec::new())
    }
}
