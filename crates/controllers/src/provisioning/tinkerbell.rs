//! The opt-in Tinkerbell mode (`ingot run --provisioning-boot tinkerbell`), for sites that keep
//! Tinkerbell: per allocated node, the `tinkerbell.org/v1alpha1` Hardware, Template and
//! Workflow `<inventory namespace>/<inventory>` in Seeder's shapes (owner: the Cluster), from
//! which Smee serves the iPXE script and Hegel the install config (`spec.userData`); the
//! Workflow's state is followed (`super::node`).
//!
//! What is built here is pure ([`hardware_spec`], [`template_spec`], [`workflow_spec`],
//! [`workflow_state`], [`stack`]); [`disable_netboot`] and [`delete_all`] talk to the API
//! server. The Workflows, and the Services and ConfigMaps named [`TINK_STACK_SERVICE`] and
//! [`SEEDER_CONFIG`], are watched ([`Watches`], started in this mode only): a Workflow wakes its
//! Inventory, the Service or ConfigMap the Clusters of its namespace, and both read the stores.
//! Unlike Seeder: the Hardware is updated whenever its rendering changes (Seeder never updates
//! it); the Template is built per call (Seeder mutates package-level defaults); removal deletes
//! all three even when one is missing (Seeder's shared `notFound` flag skips the others); the
//! `tink-stack` Service's ingress list is checked before it is read.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use ingot_api::seeder::Inventory;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use kube::runtime::watcher::Config;
use kube::{Api, Client};
use serde::Serialize;
use serde_json::{Value, json};

/// Seeder's Inventory conditions for the three objects.
pub const TINK_HARDWARE_CREATED: &str = "tinkHardwareCreated";
pub const TINK_TEMPLATE_CREATED: &str = "tinkTemplateCreated";
pub const TINK_WORKFLOW_CREATED: &str = "tinkWorkflowCreated";
/// ingot's Inventory condition for a failed Workflow (an error, naming the task and action).
pub const TINK_WORKFLOW_FAILED: &str = "tinkWorkflowFailed";
/// The reason of Seeder's Workflow Events on the Cluster.
pub const WORKFLOW_EVENT: &str = "WorkflowEvent";
/// The Service whose load-balancer IP is Hegel's and Smee's address (Seeder's lookup).
pub const TINK_STACK_SERVICE: &str = "tink-stack";
/// The ConfigMap of the Cluster's namespace that overrides the Template's images.
pub const SEEDER_CONFIG: &str = "seeder-config";
/// Hegel's port.
pub const HEGEL_PORT: u16 = 50061;
/// Tink's Workflow states ingot acts on (`status.state`, and each action's `status`).
pub const STATE_SUCCESS: &str = "STATE_SUCCESS";
pub const STATE_FAILED: &str = "STATE_FAILED";
pub const STATE_TIMEOUT: &str = "STATE_TIMEOUT";

/// The three kinds ingot writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Hardware,
    Template,
    Workflow,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Hardware, Kind::Template, Kind::Workflow];

    pub fn resource(self) -> ApiResource {
        let (kind, plural) = match self {
            Kind::Hardware => ("Hardware", "hardware"),
            Kind::Template => ("Template", "templates"),
            Kind::Workflow => ("Workflow", "workflows"),
        };
        ApiResource {
            group: "tinkerbell.org".into(),
            version: "v1alpha1".into(),
            api_version: "tinkerbell.org/v1alpha1".into(),
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    /// Seeder's Inventory condition saying the object is written.
    pub fn condition(self) -> &'static str {
        match self {
            Kind::Hardware => TINK_HARDWARE_CREATED,
            Kind::Template => TINK_TEMPLATE_CREATED,
            Kind::Workflow => TINK_WORKFLOW_CREATED,
        }
    }

    /// The condition's message (Seeder's words).
    pub fn message(self) -> &'static str {
        match self {
            Kind::Hardware => "tink hardware created",
            Kind::Template => "tink template created",
            Kind::Workflow => "tink workflow created",
        }
    }
}

pub fn api(client: &Client, namespace: &str, kind: Kind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &kind.resource())
}

/// Keeps `allowPXE` and `allowWorkflow` off in `wanted` where the Hardware as found has them
/// off: they are turned off once per allocation (installed), never on again.
pub fn keep_netboot_off(wanted: &mut Value, found: &Value) {
    let found = &found["interfaces"][0]["netboot"];
    if let Some(netboot) = wanted
        .get_mut("interfaces")
        .and_then(|i| i.get_mut(0))
        .and_then(|i| i.get_mut("netboot"))
    {
        for flag in ["allowPXE", "allowWorkflow"] {
            if found[flag] == false {
                netboot[flag] = false.into();
            }
        }
    }
}

/// The Template's images (Seeder's defaults, overridable by [`SEEDER_CONFIG`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    pub stream: String,
    pub configure: String,
    pub reboot: String,
}

impl Default for Images {
    fn default() -> Self {
        Images {
            stream: "gmehta3/image2disk:dev".into(),
            configure: "gmehta3/configure-harvester:latest".into(),
            reboot: "gmehta3/reboot:latest".into(),
        }
    }
}

impl Images {
    /// The defaults with the ConfigMap's non-empty overrides: `stream-harvester-image` (and
    /// `steam-harvester-image`, the key Seeder's code reads), `configure-harvester-image`,
    /// `reboot-harvester-image`.
    pub fn from_config(data: Option<&BTreeMap<String, String>>) -> Self {
        let mut images = Images::default();
        let Some(data) = data else {
            return images;
        };
        let get = |key: &str| data.get(key).filter(|v| !v.trim().is_empty()).cloned();
        if let Some(v) = get("stream-harvester-image").or_else(|| get("steam-harvester-image")) {
            images.stream = v;
        }
        if let Some(v) = get("configure-harvester-image") {
            images.configure = v;
        }
        if let Some(v) = get("reboot-harvester-image") {
            images.reboot = v;
        }
        images
    }
}

/// What a Cluster's namespace says of its Tinkerbell stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Hegel's and Smee's address.
    pub address: String,
    pub images: Images,
}

impl Stack {
    /// Where Hegel serves a node its `userData` (by the node's source address).
    pub fn user_data_url(&self) -> String {
        format!(
            "http://{}:{HEGEL_PORT}/2009-04-04/user-data",
            host(&self.address)
        )
    }
}

fn host(address: &str) -> String {
    if address.contains(':') {
        format!("[{address}]")
    } else {
        address.to_owned()
    }
}

/// The stack of `namespace`: the address given (`--provisioning-tink-address`), else the
/// load-balancer IP of `service` (Service `tink-stack` there, as watched); the images from
/// `config` (ConfigMap `seeder-config` there), if any. `Err`: what is missing and the fix.
pub fn stack(
    namespace: &str,
    given: Option<&str>,
    service: Option<&Service>,
    config: Option<&ConfigMap>,
) -> Result<Stack, String> {
    let address = match given {
        Some(address) => address.to_owned(),
        None => {
            let service = service.ok_or_else(|| {
                format!(
                    "Service {namespace}/{TINK_STACK_SERVICE} does not exist: install the Tinkerbell stack in the Cluster's namespace, or give ingot run --provisioning-tink-address"
                )
            })?;
            load_balancer_ip(service).ok_or_else(|| {
                format!(
                    "waiting for ingress to be populated on svc {namespace}/{TINK_STACK_SERVICE} (status.loadBalancer.ingress has no ip): give it a load-balancer IP, or give ingot run --provisioning-tink-address"
                )
            })?
        }
    };
    Ok(Stack {
        address,
        images: Images::from_config(config.and_then(|c| c.data.as_ref())),
    })
}

/// Tinkerbell mode's stores (see [`Watches`]).
#[derive(Clone)]
pub struct Stores {
    pub workflows: Store<DynamicObject>,
    /// Services named [`TINK_STACK_SERVICE`].
    pub services: Store<Service>,
    /// ConfigMaps named [`SEEDER_CONFIG`].
    pub configs: Store<ConfigMap>,
}

impl Stores {
    /// Whether every watch has listed once.
    pub fn listed(&self) -> bool {
        matches!(
            self.workflows.wait_until_ready().now_or_never(),
            Some(Ok(()))
        ) && matches!(
            self.services.wait_until_ready().now_or_never(),
            Some(Ok(()))
        ) && matches!(self.configs.wait_until_ready().now_or_never(), Some(Ok(())))
    }

    pub fn workflow(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.workflows
            .get(&ObjectRef::new_with(name, Kind::Workflow.resource()).within(namespace))
    }

    /// Service [`TINK_STACK_SERVICE`] of `namespace`.
    pub fn service(&self, namespace: &str) -> Option<Arc<Service>> {
        self.services
            .get(&ObjectRef::new(TINK_STACK_SERVICE).within(namespace))
    }

    /// ConfigMap [`SEEDER_CONFIG`] of `namespace`.
    pub fn config(&self, namespace: &str) -> Option<Arc<ConfigMap>> {
        self.configs
            .get(&ObjectRef::new(SEEDER_CONFIG).within(namespace))
    }
}

/// The watches of Tinkerbell mode, within the provisioning namespace when one is set, each
/// bounded as provisioning's others are (at most `buffer` changes ahead of the controller they
/// wake, objects held without `managedFields`): every Workflow, and only the Services and
/// ConfigMaps of the stack's names (a field selector on `metadata.name`).
pub struct Watches {
    workflows: Writer<DynamicObject>,
    /// Workflow `<ns>/<name>` changed: Inventory `<ns>/<name>` is woken, once the store holds
    /// the change.
    wake: futures::channel::mpsc::Sender<ObjectRef<Inventory>>,
    woken: Option<futures::channel::mpsc::Receiver<ObjectRef<Inventory>>>,
    services: Writer<Service>,
    configs: Writer<ConfigMap>,
}

/// The changes of [`Watches`] that wake the controllers.
pub struct Triggers {
    /// The Inventories whose Workflow changed.
    pub workflows: futures::channel::mpsc::Receiver<ObjectRef<Inventory>>,
    pub services: ReflectHandle<Service>,
    pub configs: ReflectHandle<ConfigMap>,
}

impl Watches {
    pub fn new(buffer: usize) -> Self {
        let (wake, woken) = futures::channel::mpsc::channel(buffer);
        Watches {
            workflows: Writer::new(Kind::Workflow.resource()),
            wake,
            woken: Some(woken),
            services: Writer::new_shared(buffer, ()),
            configs: Writer::new_shared(buffer, ()),
        }
    }

    /// The triggers (once).
    pub fn triggers(&mut self) -> Option<Triggers> {
        Some(Triggers {
            services: self.services.subscribe()?,
            configs: self.configs.subscribe()?,
            workflows: self.woken.take()?,
        })
    }

    pub fn stores(&self) -> Stores {
        Stores {
            workflows: self.workflows.as_reader(),
            services: self.services.as_reader(),
            configs: self.configs.as_reader(),
        }
    }

    /// Fills the stores for as long as it is polled.
    pub async fn feed(self, client: &Client, namespace: Option<&str>) {
        use futures::SinkExt;
        use kube::runtime::WatchStreamExt;
        let named = |name: &str| Config::default().fields(&format!("metadata.name={name}"));
        let resource = Kind::Workflow.resource();
        let workflows: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let events = kube::runtime::watcher(workflows, Config::default())
            .default_backoff()
            .modify(|object: &mut DynamicObject| object.metadata.managed_fields = None);
        let wake = self.wake;
        let workflows = kube::runtime::reflector(self.workflows, events)
            .touched_objects()
            .for_each(move |touched| {
                let mut wake = wake.clone();
                async move {
                    match touched {
                        Ok(workflow) => {
                            if let (Some(name), Some(ns)) =
                                (workflow.metadata.name, workflow.metadata.namespace)
                            {
                                // Waits while the controller is `buffer` changes behind; fails
                                // only once it stopped.
                                let _ = wake.send(ObjectRef::new(&name).within(&ns)).await;
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, kind = "Workflow", "watch failed; listing again");
                        }
                    }
                }
            });
        tokio::join!(
            workflows,
            crate::feed_store(
                self.services,
                crate::api_in::<Service>(client, namespace),
                named(TINK_STACK_SERVICE)
            ),
            crate::feed_store(
                self.configs,
                crate::api_in::<ConfigMap>(client, namespace),
                named(SEEDER_CONFIG)
            ),
        );
    }
}

/// The first ingress IP of a Service's load balancer.
pub fn load_balancer_ip(service: &Service) -> Option<String> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .iter()
        .find_map(|i| i.ip.clone().filter(|ip| !ip.is_empty()))
}

/// One node, as its three objects need it.
#[derive(Clone, Debug)]
pub struct Node<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub mac: &'a str,
    /// `amd64` or `arm64`.
    pub arch: &'a str,
    pub address: &'a str,
    pub netmask: &'a str,
    pub gateway: &'a str,
    pub primary_disk: &'a str,
    pub version: &'a str,
    pub image_url: &'a str,
    /// The Harvester install config (Hegel's `userData`).
    pub user_data: &'a str,
    /// The iPXE script (Smee's `ipxe.contents`); `None` in stream-image mode.
    pub script: Option<&'a str>,
    /// The node reported its install: network boot and workflows are off.
    pub installed: bool,
    /// `clusterConfig.customProvisioningTemplate`, if set.
    pub custom_template: Option<&'a str>,
}

/// Tinkerbell's DHCP architecture name.
fn dhcp_arch(arch: &str) -> &'static str {
    if arch == "arm64" { "aarch64" } else { "x86_64" }
}

/// The Hardware's `spec` (Seeder's shape; the MAC lower-cased, as the CRD's pattern requires).
pub fn hardware_spec(node: &Node) -> Value {
    let allowed = !node.installed;
    let mut netboot = json!({"allowPXE": allowed, "allowWorkflow": allowed});
    if let Some(script) = node.script {
        netboot["ipxe"] = json!({"contents": script});
    }
    json!({
        "userData": node.user_data,
        "interfaces": [{
            "netboot": netboot,
            "dhcp": {
                "mac": node.mac.to_ascii_lowercase(),
                "hostname": format!("{}-{}", node.name, node.namespace),
                "lease_time": 86400,
                "arch": dhcp_arch(node.arch),
                "uefi": true,
                "ip": {"address": node.address, "netmask": node.netmask, "gateway": node.gateway},
            },
        }],
        "disks": [{"device": node.primary_disk}],
        "metadata": {
            "facility": {"facility_code": "on_prem"},
            "instance": {"operating_system": {"version": node.version, "distro": "harvester"}},
        },
    })
}

#[derive(Serialize)]
struct TemplateData {
    version: &'static str,
    name: &'static str,
    id: &'static str,
    global_timeout: u64,
    tasks: Vec<Task>,
}

#[derive(Serialize)]
struct Task {
    name: &'static str,
    worker: &'static str,
    actions: Vec<Action>,
    volumes: Vec<&'static str>,
}

#[derive(Serialize)]
struct Action {
    name: &'static str,
    image: String,
    timeout: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    volumes: Vec<&'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    environment: BTreeMap<&'static str, String>,
}

/// The Template's `spec`: `data`, the stream workflow (image2disk writes the raw image, the
/// configure action fetches the config from Hegel, then a reboot).
pub fn template_spec(node: &Node, stack: &Stack) -> Result<Value, String> {
    let base = node.image_url.trim_end_matches('/');
    let v = node.version;
    let data = TemplateData {
        version: "0.1",
        name: "harvester-installation",
        id: "",
        global_timeout: 36000,
        tasks: vec![Task {
            name: "harvester-os-installation",
            worker: "{{.device_1}}",
            actions: vec![
                Action {
                    name: "stream-harvester",
                    image: stack.images.stream.clone(),
                    timeout: 3000,
                    volumes: Vec::new(),
                    environment: BTreeMap::from([
                        ("COMPRESSED", "true".to_owned()),
                        ("DEST_DISK", node.primary_disk.to_owned()),
                        (
                            "IMG_URL",
                            format!("{base}/{v}/harvester-{v}-{}.raw.gz", node.arch),
                        ),
                    ]),
                },
                Action {
                    name: "configure-harvester",
                    image: stack.images.configure.clone(),
                    timeout: 90,
                    volumes: Vec::new(),
                    environment: BTreeMap::from([
                        ("HARVESTER_DEVICE", node.primary_disk.to_owned()),
                        ("HARVESTER_TTY", "tty1".to_owned()),
                        ("HARVESTER_STREAMDISK_CLOUDINIT_URL", stack.user_data_url()),
                    ]),
                },
                Action {
                    name: "reboot-harvester",
                    image: stack.images.reboot.clone(),
                    timeout: 90,
                    volumes: vec!["/worker:/worker"],
                    environment: BTreeMap::new(),
                },
            ],
            volumes: vec![
                "/dev:/dev",
                "/dev/console:/dev/console",
                "/lib/firmware:/lib/firmware",
            ],
        }],
    };
    let data = serde_yaml::to_string(&data).map_err(|e| e.to_string())?;
    Ok(json!({ "data": data }))
}

/// The Workflow's `spec`: the node's Template (or `customProvisioningTemplate`), its Hardware,
/// and `device_1` its MAC.
pub fn workflow_spec(node: &Node) -> Value {
    json!({
        "templateRef": node.custom_template.filter(|t| !t.is_empty()).unwrap_or(node.name),
        "hardwareRef": node.name,
        "hardwareMap": {"device_1": node.mac.to_ascii_lowercase()},
    })
}

/// An object of `kind` named after the node, owned by the Cluster.
pub fn object(
    kind: Kind,
    name: &str,
    namespace: &str,
    owner: OwnerReference,
    spec: Value,
) -> DynamicObject {
    let mut object = DynamicObject::new(name, &kind.resource()).within(namespace);
    object.metadata = ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    };
    object.data = json!({ "spec": spec });
    object
}

/// Whether `actual` holds everything of `wanted` (maps: each key of `wanted`; lists: the same
/// length, item by item): fields others add (defaults, status) do not make it stale.
pub fn contains(actual: &Value, wanted: &Value) -> bool {
    match (actual, wanted) {
        (Value::Object(a), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|x| contains(x, v))),
        (Value::Array(a), Value::Array(w)) => {
            a.len() == w.len() && a.iter().zip(w).all(|(x, v)| contains(x, v))
        }
        _ => actual == wanted,
    }
}

/// How a Workflow stands, from its `status` (as tink-controller writes it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkflowState {
    /// Not finished (or no state yet).
    Running,
    Succeeded,
    /// Failed or timed out: the first failed task and action, when the status names them.
    Failed {
        task: String,
        action: String,
    },
}

pub fn workflow_state(workflow: &DynamicObject) -> WorkflowState {
    let status = &workflow.data["status"];
    match status["state"].as_str() {
        Some(STATE_SUCCESS) => WorkflowState::Succeeded,
        Some(state @ (STATE_FAILED | STATE_TIMEOUT)) => {
            let failed = status["tasks"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|task| {
                    task["actions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|a| a["status"].as_str() == Some(state))
                        .map(|a| {
                            (
                                task["name"].as_str().unwrap_or_default().to_owned(),
                                a["name"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                });
            let (task, action) = failed.unwrap_or_default();
            WorkflowState::Failed { task, action }
        }
        _ => WorkflowState::Running,
    }
}

/// Sets `allowPXE` (and `allowWorkflow` when `workflow_too`) false on the Hardware's first
/// interface, under the `resourceVersion` read. `Ok(false)`: no such Hardware.
pub async fn disable_netboot(
    client: &Client,
    namespace: &str,
    name: &str,
    workflow_too: bool,
) -> Result<bool, kube::Error> {
    let api = api(client, namespace, Kind::Hardware);
    for attempt in 0..5 {
        let Some(hardware) = api.get_opt(name).await? else {
            return Ok(false);
        };
        let mut interfaces = hardware.data["spec"]["interfaces"].clone();
        let Some(netboot) = interfaces.get_mut(0).map(|i| &mut i["netboot"]) else {
            return Ok(true);
        };
        let pxe = netboot["allowPXE"].as_bool() != Some(false);
        let workflow = workflow_too && netboot["allowWorkflow"].as_bool() != Some(false);
        if !pxe && !workflow {
            return Ok(true);
        }
        netboot["allowPXE"] = false.into();
        if workflow_too {
            netboot["allowWorkflow"] = false.into();
        }
        let body = json!({
            "metadata": {"resourceVersion": hardware.metadata.resource_version},
            "spec": {"interfaces": interfaces},
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            Ok(_) => return Ok(true),
            Err(e) if crate::runtime::is_conflict(&e) && attempt < 4 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Deletes the node's Hardware, Template and Workflow: each one, whether or not another is
/// missing.
pub async fn delete_all(client: &Client, namespace: &str, name: &str) -> Result<(), kube::Error> {
    let mut first_error = None;
    for kind in Kind::ALL {
        match api(client, namespace, kind)
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node<'a>(script: Option<&'a str>, installed: bool) -> Node<'a> {
        Node {
            name: "node1",
            namespace: "default",
            mac: "0C:C4:7A:6B:84:20",
            arch: "amd64",
            address: "172.16.128.11",
            netmask: "255.255.248.0",
            gateway: "172.16.128.1",
            primary_disk: "/dev/sda",
            version: "v1.7.1",
            image_url: "http://images/iso/",
            user_data: "install: {}\n",
            script,
            installed,
            custom_template: None,
        }
    }

    #[test]
    fn the_hardware_has_seeder_s_shape_and_follows_the_install() {
        let spec = hardware_spec(&node(Some("#!ipxe"), false));
        let netboot = &spec["interfaces"][0]["netboot"];
        assert_eq!(netboot["allowPXE"], true);
        assert_eq!(netboot["allowWorkflow"], true);
        assert_eq!(netboot["ipxe"]["contents"], "#!ipxe");
        assert_eq!(spec["interfaces"][0]["dhcp"]["mac"], "0c:c4:7a:6b:84:20");
        assert_eq!(spec["interfaces"][0]["dhcp"]["hostname"], "node1-default");
        assert_eq!(spec["interfaces"][0]["dhcp"]["arch"], "x86_64");
        let installed = hardware_spec(&node(None, true));
        let netboot = &installed["interfaces"][0]["netboot"];
        assert_eq!(netboot["allowPXE"], false);
        assert_eq!(netboot.get("ipxe"), None, "stream mode: no script");
    }

    #[test]
    fn network_boot_once_off_is_never_turned_on_again() {
        let mut wanted = hardware_spec(&node(Some("#!ipxe"), false));
        let found =
            json!({"interfaces": [{"netboot": {"allowPXE": false, "allowWorkflow": true}}]});
        keep_netboot_off(&mut wanted, &found);
        assert_eq!(wanted["interfaces"][0]["netboot"]["allowPXE"], false);
        assert_eq!(wanted["interfaces"][0]["netboot"]["allowWorkflow"], true);
    }

    #[test]
    fn the_template_is_the_stream_workflow_with_overridden_images() {
        let data = BTreeMap::from([
            (
                "steam-harvester-image".to_owned(),
                "mirror/image2disk:1".to_owned(),
            ),
            ("reboot-harvester-image".to_owned(), " ".to_owned()),
        ]);
        let stack = Stack {
            address: "10.1.1.1".into(),
            images: Images::from_config(Some(&data)),
        };
        let spec = template_spec(&node(None, false), &stack).unwrap();
        let data: serde_yaml::Value = serde_yaml::from_str(spec["data"].as_str().unwrap()).unwrap();
        let actions = &data["tasks"][0]["actions"];
        assert_eq!(actions[0]["image"].as_str(), Some("mirror/image2disk:1"));
        assert_eq!(
            actions[0]["environment"]["IMG_URL"].as_str(),
            Some("http://images/iso/v1.7.1/harvester-v1.7.1-amd64.raw.gz")
        );
        assert_eq!(
            actions[1]["environment"]["HARVESTER_STREAMDISK_CLOUDINIT_URL"].as_str(),
            Some("http://10.1.1.1:50061/2009-04-04/user-data")
        );
        assert_eq!(actions[2]["image"].as_str(), Some("gmehta3/reboot:latest"));
        // An arm64 node: its own image and DHCP architecture (Seeder writes amd64).
        let mut arm = node(None, false);
        arm.arch = "arm64";
        let spec = template_spec(&arm, &stack).unwrap();
        assert!(
            spec["data"]
                .as_str()
                .unwrap()
                .contains("harvester-v1.7.1-arm64.raw.gz")
        );
        assert_eq!(
            hardware_spec(&arm)["interfaces"][0]["dhcp"]["arch"],
            "aarch64"
        );
    }

    #[test]
    fn a_custom_template_is_the_workflow_s() {
        let mut n = node(None, false);
        assert_eq!(workflow_spec(&n)["templateRef"], "node1");
        n.custom_template = Some("mine");
        assert_eq!(workflow_spec(&n)["templateRef"], "mine");
    }

    #[test]
    fn failed_workflows_name_their_task_and_action() {
        let mut w = DynamicObject::new("node1", &Kind::Workflow.resource());
        assert_eq!(workflow_state(&w), WorkflowState::Running);
        w.data = json!({"status": {"state": "STATE_FAILED", "tasks": [{"name": "t", "actions": [
            {"name": "a1", "status": "STATE_SUCCESS"}, {"name": "a2", "status": "STATE_FAILED"}]}]}});
        assert_eq!(
            workflow_state(&w),
            WorkflowState::Failed {
                task: "t".into(),
                action: "a2".into()
            }
        );
        w.data = json!({"status": {"state": "STATE_SUCCESS"}});
        assert_eq!(workflow_state(&w), WorkflowState::Succeeded);
    }

    #[test]
    fn fields_others_add_do_not_make_an_object_stale() {
        let wanted = json!({"a": [{"b": 1}], "c": "x"});
        assert!(contains(
            &json!({"a": [{"b": 1, "z": 2}], "c": "x", "d": 3}),
            &wanted
        ));
        assert!(!contains(&json!({"a": [{"b": 2}], "c": "x"}), &wanted));
        assert!(!contains(&json!({"a": [{"b": 1}, {}], "c": "x"}), &wanted));
    }
}
