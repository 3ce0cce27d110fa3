//! The driver of `provider: Inventory` MachineClasses: machines on servers the user owns. Each
//! call makes an [`InventoryCloud`] for the class (its Inventory selector and namespace, its
//! AddressPool) acting for the class's cluster tag only, so a class sees and deletes only its
//! cluster's claims. A create claims a free, ready Inventory under the cluster tag and the
//! Machine's name (a create repeated after a crash finds that claim again), takes an address,
//! and boots the class's OS image with the Secret's `userData` as cloud-init data
//! ([`crate::onprem::image`]); a delete powers the server off, confirms it off at the BMC, frees
//! the address and returns the Inventory to the free set.
//!
//! The provider id is `inventory://<namespace>/<name>`; the Node is named after the Machine.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ingot_api::gardener::{InventoryProviderSpec, MachineClass, PROVIDER_INVENTORY};
use ingot_metal::{BareMetalCloud, Boot, CreateServer, Server, ServerState};
use kube::{Client, ResourceExt};

use super::{
    CLUSTER_TAG, Code, CreateMachineResponse, DeleteMachineResponse, Driver, DriverResult,
    GetMachineStatusResponse, InitializeMachineResponse, ListMachinesResponse, MachineRequest,
    ROLE_TAG, SecretData, Status, last_tag, status, user_data, validate_name,
};
use crate::onprem::cloud::{InventoryCloud, PROVIDER_SCHEME, Settings as CloudSettings};
use crate::onprem::image::{Image, ImageRequest};
use crate::onprem::wipe::WipePolicy;
use crate::provisioning::addresses::PoolRef;
use crate::provisioning::node::phase::BootMedia;

/// What the operator allows and provides to `Inventory` classes.
#[derive(Clone, Debug)]
pub struct InventorySettings {
    /// The namespaces whose Inventories a class may name (`--machine-inventory-namespaces`);
    /// empty: any.
    pub namespaces: Vec<String>,
    /// Where servers reach ingot's boot server (`--boot-url`).
    pub boot_url: Option<url::Url>,
    /// The site's wipe image, for classes with `wipePolicy: metadata`.
    pub wipe_image: Option<crate::onprem::wipe::WipeImage>,
    /// How long one delete waits for the power off to be read back.
    pub off_wait: Duration,
    /// Test hook: the crash points of [`InventoryCloud`].
    pub crash_point: Option<String>,
}

/// The driver for `provider: Inventory` classes, on ingot's own cluster (where the Inventories,
/// AddressPools and BMC Jobs are).
pub struct InventoryDriver {
    client: Client,
    settings: InventorySettings,
}

/// A validated class: its spec, its cluster tag (the owner of its claims) and its cloud.
struct Target {
    spec: InventoryProviderSpec,
    image: Image,
    cloud: Arc<InventoryCloud>,
    owner: String,
    /// The class's role tag: recorded on its claims, and what its machines are listed by.
    role: String,
}

impl InventoryDriver {
    pub fn new(client: Client, settings: InventorySettings) -> Self {
        InventoryDriver { client, settings }
    }

    fn target(&self, class: &MachineClass) -> DriverResult<Target> {
        let spec = decode_provider_spec(class)?;
        let namespaces = &self.settings.namespaces;
        if !namespaces.is_empty() && !namespaces.contains(&spec.inventory_namespace) {
            return Err(Status::new(
                Code::PermissionDenied,
                format!(
                    "providerSpec.inventoryNamespace {:?} is not one ingot may take Inventories from ({}); name one of those, or add it to --machine-inventory-namespaces",
                    spec.inventory_namespace,
                    namespaces.join(", ")
                ),
            ));
        }
        let owner = last_tag(spec.tags.as_deref(), CLUSTER_TAG).unwrap_or_default();
        let role = last_tag(spec.tags.as_deref(), ROLE_TAG).unwrap_or_default();
        let wipe = WipePolicy::parse(spec.wipe_policy.as_deref())
            .map_err(|why| Status::new(Code::InvalidArgument, format!("providerSpec.{why}")))?;
        let cloud = InventoryCloud::new(
            self.client.clone(),
            CloudSettings {
                namespaces: vec![spec.inventory_namespace.clone()],
                selector: spec.inventory_selector.clone(),
                address_pool: PoolRef {
                    namespace: spec.inventory_namespace.clone(),
                    name: spec.address_pool.clone(),
                },
                off_wait: self.settings.off_wait,
                poll: Duration::from_secs(1),
                owner: Some(owner.clone()),
                boot_url: self.settings.boot_url.clone(),
                // By network, unless the Inventory asks for the CD
                // (`provisioning.ingot.dev/boot-media: cd`).
                boot_media: BootMedia::Pxe,
                wipe,
                wipe_image: self.settings.wipe_image.clone(),
                minimum: crate::onprem::size::Minimum::of(spec.inventory_minimum.as_ref()),
                crash_point: self.settings.crash_point.clone(),
            },
        )
        .map_err(|e| status(e, "providerSpec.inventorySelector"))?;
        // Present: decode_provider_spec requires it.
        let image = spec
            .image
            .clone()
            .map(|i| Image {
                kernel: i.kernel,
                initrd: i.initrd,
                cmdline: i.cmdline,
            })
            .unwrap_or_default();
        Ok(Target {
            image,
            spec,
            cloud: Arc::new(cloud),
            owner,
            role,
        })
    }

    /// The machine's server: by its provider id, else by cluster tag and Machine name.
    async fn find(&self, t: &Target, name: &str, provider_id: &str) -> DriverResult<Server> {
        let not_found = || {
            Status::new(
                Code::NotFound,
                format!("Could not find an Inventory claimed for machine {name}"),
            )
        };
        let id = provider_id.strip_prefix(PROVIDER_SCHEME).unwrap_or("");
        let server = if id.is_empty() {
            t.cloud
                .find_server(&t.owner, name)
                .await
                .map_err(|e| {
                    status(
                        e,
                        &format!("Could not look for the server of machine {name}"),
                    )
                })?
                .ok_or_else(not_found)?
        } else {
            match t.cloud.get_server(id).await {
                Ok(s) => s,
                Err(ingot_metal::Error::NotFound { .. }) => return Err(not_found()),
                Err(e) => return Err(status(e, &format!("Could not get server {id}"))),
            }
        };
        // Found by the provider id: only this machine's claim is its server (an id copied from
        // another Machine of the cluster must not reach that Machine's server).
        if server.hostname != name {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "Inventory {} is claimed for machine {:?}, not {name}; correct spec.providerID",
                    server.id, server.hostname
                ),
            ));
        }
        Ok(server)
    }
}

/// Decodes and validates an `Inventory` class's `providerSpec`, naming each field at fault.
pub fn decode_provider_spec(class: &MachineClass) -> DriverResult<InventoryProviderSpec> {
    let provider = class.spec.provider.as_deref().unwrap_or("");
    if provider != PROVIDER_INVENTORY {
        return Err(Status::new(
            Code::InvalidArgument,
            format!(
                "Requested for Provider '{provider}', this driver serves '{PROVIDER_INVENTORY}'"
            ),
        ));
    }
    let spec: InventoryProviderSpec = serde_json::from_value(class.spec.provider_spec.clone())
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
    if spec.inventory_namespace.is_empty() {
        errors.push(
            "providerSpec.inventoryNamespace: Required value: the namespace of the Inventories"
                .to_owned(),
        );
    }
    if spec.address_pool.is_empty() {
        errors.push("providerSpec.addressPool: Required value: an AddressPool of inventoryNamespace, for the servers' static addresses".to_owned());
    }
    match &spec.image {
        None => errors.push(
            "providerSpec.image: Required value: the OS image (kernel, initrd, cmdline) the servers boot".to_owned(),
        ),
        Some(image) => {
            let request = ImageRequest {
                image: Image {
                    kernel: image.kernel.clone(),
                    initrd: image.initrd.clone(),
                    cmdline: image.cmdline.clone(),
                },
                user_data: String::new(),
            };
            if let Some(problem) = request.problem() {
                errors.push(problem);
            }
        }
    }
    if last_tag(spec.tags.as_deref(), CLUSTER_TAG).is_none() {
        errors.push("spec.tags.kubernetes.io/cluster/: Required value: Tag required of the form kubernetes.io/cluster/****".to_owned());
    }
    if last_tag(spec.tags.as_deref(), ROLE_TAG).is_none() {
        errors.push("spec.tags.kubernetes.io/role/: Required value: Tag required of the form kubernetes.io/role/****".to_owned());
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

#[async_trait]
impl Driver for InventoryDriver {
    async fn create_machine(&self, req: MachineRequest<'_>) -> DriverResult<CreateMachineResponse> {
        let t = self.target(req.class)?;
        let user_data = user_data(req.secret)?;
        let name = req.machine.name_any();
        validate_name(&name)?;
        let request = ImageRequest {
            image: t.image.clone(),
            user_data,
        };
        if let Some(problem) = request.problem() {
            return Err(Status::new(Code::InvalidArgument, problem));
        }
        let mut create = CreateServer::new(
            name.clone(),
            String::new(),
            t.spec.inventory_namespace.clone(),
            t.owner.clone(),
            Boot::Os(String::new()),
        );
        create.userdata = Some(request.to_userdata());
        create.tags = vec![t.owner.clone(), t.role.clone()];
        let server = t
            .cloud
            .create_server(&create)
            .await
            .map_err(|e| status(e, "Could not create machine"))?;
        tracing::info!(machine = %name, inventory = %server.id, "Inventory claimed and booting");
        Ok(CreateMachineResponse {
            provider_id: server.provider_id,
            node_name: name,
            last_known_state: String::new(),
        })
    }

    async fn initialize_machine(
        &self,
        _req: MachineRequest<'_>,
    ) -> DriverResult<InitializeMachineResponse> {
        Err(Status::new(
            Code::Unimplemented,
            "servers on premises need no initialization",
        ))
    }

    async fn delete_machine(&self, req: MachineRequest<'_>) -> DriverResult<DeleteMachineResponse> {
        let t = self.target(req.class)?;
        let name = req.machine.name_any();
        let provider_id = req.machine.spec.provider_id.clone().unwrap_or_default();
        let server = match self.find(&t, &name, &provider_id).await {
            Ok(s) => s,
            Err(s) if s.code == Code::NotFound => return Ok(DeleteMachineResponse::default()),
            Err(s) => return Err(s),
        };
        // Powered off and confirmed off before the address and the Inventory are free; until
        // then Unavailable, and MCM asks again.
        t.cloud.delete_server(&server.id).await.map_err(|e| {
            status(
                e,
                &format!("Could not release the server of machine {name}"),
            )
        })?;
        tracing::info!(machine = %name, inventory = %server.id, "Inventory powered off and released");
        Ok(DeleteMachineResponse::default())
    }

    async fn get_machine_status(
        &self,
        req: MachineRequest<'_>,
    ) -> DriverResult<GetMachineStatusResponse> {
        let t = self.target(req.class)?;
        let name = req.machine.name_any();
        let provider_id = req.machine.spec.provider_id.clone().unwrap_or_default();
        let server = self.find(&t, &name, &provider_id).await?;
        if server.state == ServerState::Queued {
            // Claimed, its boot not recorded (a create cut short): not a server yet, so that
            // the machine controller creates it again, which adopts the claim and goes on.
            return Err(Status::new(
                Code::NotFound,
                format!(
                    "Inventory {} is claimed for machine {name} but not booted yet",
                    server.id
                ),
            ));
        }
        Ok(GetMachineStatusResponse {
            provider_id: server.provider_id,
            node_name: name,
        })
    }

    async fn list_machines(
        &self,
        class: &MachineClass,
        _secret: &SecretData,
    ) -> DriverResult<ListMachinesResponse> {
        let t = self.target(class)?;
        let servers = t
            .cloud
            .list_servers(&t.owner)
            .await
            .map_err(|e| status(e, "Could not list the claimed Inventories"))?;
        // As on Equinix Metal: the class's machines are those of its cluster and its role.
        Ok(servers
            .into_iter()
            .filter(|s| !s.state.is_gone())
            // A claim made before roles were recorded has its cluster's tag alone.
            .filter(|s| s.tags.len() == 1 || s.tags.contains(&t.role))
            .map(|s| (s.provider_id, s.hostname))
            .collect())
    }

    async fn get_volume_ids(
        &self,
        _specs: &[k8s_openapi::api::core::v1::PersistentVolumeSpec],
    ) -> DriverResult<Vec<String>> {
        Ok(Vec::new())
    }
}

/// The drivers of the providers ingot serves, chosen by the class's `provider`.
pub struct Providers {
    pub equinix: Arc<dyn Driver>,
    pub inventory: Arc<dyn Driver>,
}

impl Providers {
    fn of(&self, class: &MachineClass) -> &dyn Driver {
        if class.spec.provider.as_deref() == Some(PROVIDER_INVENTORY) {
            self.inventory.as_ref()
        } else {
            self.equinix.as_ref()
        }
    }
}

#[async_trait]
impl Driver for Providers {
    async fn create_machine(&self, req: MachineRequest<'_>) -> DriverResult<CreateMachineResponse> {
        self.of(req.class).create_machine(req).await
    }

    async fn initialize_machine(
        &self,
        req: MachineRequest<'_>,
    ) -> DriverResult<InitializeMachineResponse> {
        self.of(req.class).initialize_machine(req).await
    }

    async fn delete_machine(&self, req: MachineRequest<'_>) -> DriverResult<DeleteMachineResponse> {
        self.of(req.class).delete_machine(req).await
    }

    async fn get_machine_status(
        &self,
        req: MachineRequest<'_>,
    ) -> DriverResult<GetMachineStatusResponse> {
        self.of(req.class).get_machine_status(req).await
    }

    async fn list_machines(
        &self,
        class: &MachineClass,
        secret: &SecretData,
    ) -> DriverResult<ListMachinesResponse> {
        self.of(class).list_machines(class, secret).await
    }

    async fn get_volume_ids(
        &self,
        specs: &[k8s_openapi::api::core::v1::PersistentVolumeSpec],
    ) -> DriverResult<Vec<String>> {
        self.equinix.get_volume_ids(specs).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn class(spec: serde_json::Value) -> MachineClass {
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "inv", "namespace": "shoot"},
            "provider": "Inventory",
            "providerSpec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn a_class_is_validated_field_by_field() {
        let good = json!({
            "inventoryNamespace": "racks",
            "inventorySelector": {"matchLabels": {"rack": "a"}},
            "addressPool": "nodes",
            "image": {"kernel": "http://img/vmlinuz", "initrd": "http://img/initrd"},
            "tags": ["kubernetes.io/cluster/shoot--a", "kubernetes.io/role/node"],
        });
        let spec = decode_provider_spec(&class(good)).unwrap();
        assert_eq!(spec.inventory_namespace, "racks");
        let e = decode_provider_spec(&class(json!({"tags": []}))).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        for field in [
            "providerSpec.inventoryNamespace",
            "providerSpec.addressPool",
            "providerSpec.image",
            "kubernetes.io/cluster/",
            "kubernetes.io/role/",
        ] {
            assert!(e.message.contains(field), "{field}: {}", e.message);
        }
        let bad_image = json!({
            "inventoryNamespace": "racks", "addressPool": "nodes",
            "image": {"kernel": "file:///vmlinuz", "initrd": "http://img/initrd"},
            "tags": ["kubernetes.io/cluster/a", "kubernetes.io/role/node"],
        });
        let e = decode_provider_spec(&class(bad_image)).unwrap_err();
        assert!(
            e.message.contains("providerSpec.image.kernel"),
            "{}",
            e.message
        );
    }
}
