//! The Cluster's and its nodes' addresses, on top of [`super::addresses`]: owners as Seeder
//! writes them (`{kind: cluster|inventory, name, namespace}`), pools named by the Cluster's
//! references (its own namespace unless the operator allows another).

use ingot_api::seeder::{AddressPool, AllocatedObject, Cluster, Inventory};
use kube::{Api, ResourceExt};

use super::addresses::{self, AddressError, PoolRef};
use super::cluster::observe::MemberView;
use super::cluster::phase::Vip;
use super::cluster::reference_namespace;
use super::ipam::{self, KIND_CLUSTER, KIND_INVENTORY};
use super::{Error, ProvisioningContext, Stores};

/// A node's address with the pool's gateway and netmask (its `pxeBootConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeAddress {
    pub address: String,
    pub gateway: String,
    pub netmask: String,
}

pub fn cluster_owner(cluster: &Cluster) -> AllocatedObject {
    AllocatedObject {
        kind: KIND_CLUSTER.to_owned(),
        name: cluster.name_any(),
        namespace: cluster.namespace().unwrap_or_default(),
    }
}

pub fn inventory_owner(namespace: &str, name: &str) -> AllocatedObject {
    AllocatedObject {
        kind: KIND_INVENTORY.to_owned(),
        name: name.to_owned(),
        namespace: namespace.to_owned(),
    }
}

fn vip_pool(cluster: &Cluster) -> PoolRef {
    let r = &cluster.spec.vip_config.address_pool_reference;
    PoolRef {
        namespace: reference_namespace(&r.namespace, cluster),
        name: r.name.clone(),
    }
}

/// Refuses a pool of another namespace than the Cluster's, unless the operator allows it.
fn check_tenancy(
    ctx: &ProvisioningContext,
    cluster_ns: &str,
    pool: &PoolRef,
    field: &str,
) -> Result<(), String> {
    if ctx.may_use(cluster_ns, &pool.namespace) {
        return Ok(());
    }
    Err(format!(
        "{field}: a Cluster of namespace {cluster_ns} may not take addresses from {pool}: use a pool of its own namespace, or allow it with --rufio-allow-cross-namespace {cluster_ns}={}",
        pool.namespace
    ))
}

/// The VIP as the pool shows it.
pub fn vip(cluster: &Cluster, ctx: &ProvisioningContext, stores: &Stores) -> Vip {
    let pool = vip_pool(cluster);
    let own = cluster.namespace().unwrap_or_default();
    if let Err(why) = check_tenancy(ctx, &own, &pool, "spec.vipConfig.addressPoolReference") {
        return Vip::Blocked(why);
    }
    let Some(object) = stores.pool(&pool.namespace, &pool.name) else {
        return Vip::Blocked(format!(
            "spec.vipConfig.addressPoolReference: {pool} does not exist; create it or name another"
        ));
    };
    let status = object.status.clone().unwrap_or_default();
    if let Some(address) = ipam::held_by(&status, &cluster_owner(cluster)) {
        return Vip::Held(address.to_string());
    }
    let why = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "False")
        .map(|c| format!(": {}", c.message))
        .unwrap_or_default();
    match status.status.as_str() {
        ipam::READY => Vip::Free,
        other => Vip::Blocked(format!(
            "spec.vipConfig.addressPoolReference: waiting for address pool {} to be ready (it is {other:?}{why})",
            pool.name
        )),
    }
}

fn address_error(field: &str, error: AddressError) -> Error {
    match error {
        AddressError::Kube(_, e) => Error::Kube(e),
        other => Error::Address(format!("{field}: {other}")),
    }
}

pub async fn allocate_vip(cluster: &Cluster, ctx: &ProvisioningContext) -> Result<String, Error> {
    let field = "spec.vipConfig";
    let pool = vip_pool(cluster);
    let own = cluster.namespace().unwrap_or_default();
    check_tenancy(ctx, &own, &pool, field).map_err(Error::Address)?;
    let static_address = cluster
        .spec
        .vip_config
        .static_address
        .as_deref()
        .filter(|a| !a.is_empty());
    addresses::allocate_address(&ctx.client, &pool, &cluster_owner(cluster), static_address)
        .await
        .map(|a| a.to_string())
        .map_err(|e| address_error(field, e))
}

/// The addresses of several nodes of one pool (each its `staticAddress` if given), in one
/// write of the pool ([`addresses::allocate_addresses`]): the addresses of the members before
/// the first refusal, in order, and that refusal.
pub async fn allocate_nodes(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    stores: &Stores,
    members: &[&MemberView],
) -> (Vec<NodeAddress>, Option<Error>) {
    let Some(first) = members.first() else {
        return (Vec::new(), None);
    };
    let pool = PoolRef {
        namespace: first.pool_namespace.clone(),
        name: first.pool_name.clone(),
    };
    let own = cluster.namespace().unwrap_or_default();
    let field = |m: &MemberView| format!("spec.nodes[{}]", m.index);
    if let Err(why) = check_tenancy(
        ctx,
        &own,
        &pool,
        &format!("{}.addressPoolReference", field(first)),
    ) {
        return (Vec::new(), Some(Error::Address(why)));
    }
    let owners: Vec<_> = members
        .iter()
        .map(|m| {
            (
                inventory_owner(&m.namespace, &m.name),
                m.static_address.clone(),
            )
        })
        .collect();
    let (given, refused) = addresses::allocate_addresses(&ctx.client, &pool, &owners).await;
    // The member a refusal is about: the one after those given.
    let refused = refused.map(|e| {
        let at = members.get(given.len()).copied().unwrap_or(first);
        address_error(&field(at), e)
    });
    // The gateway and netmask from the pool's spec (its status may not be settled yet), read
    // from the API server when the store has not seen the pool yet (just after a start): an
    // address is never recorded without them.
    let spec = match stores.pool(&pool.namespace, &pool.name) {
        Some(p) => Some(p.spec.clone()),
        None => Api::<AddressPool>::namespaced(ctx.client.clone(), &pool.namespace)
            .get_opt(&pool.name)
            .await
            .ok()
            .flatten()
            .map(|p| p.spec),
    };
    let Some(link) = spec.and_then(|s| ipam::Pool::parse(&s).ok()) else {
        let unread = Error::Address(format!(
            "{}.addressPoolReference: the AddressPool {}/{} could not be read; retrying",
            field(first),
            pool.namespace,
            pool.name
        ));
        return (Vec::new(), Some(refused.unwrap_or(unread)));
    };
    let given = given
        .into_iter()
        .map(|address| NodeAddress {
            address: address.to_string(),
            gateway: link.gateway().to_string(),
            netmask: link.netmask().to_string(),
        })
        .collect();
    (given, refused)
}

/// Frees whatever `owner` holds, in every pool the store shows holding it.
async fn release_everywhere(
    ctx: &ProvisioningContext,
    stores: &Stores,
    owner: &AllocatedObject,
) -> Result<(), Error> {
    let holding: Vec<PoolRef> = stores
        .pools
        .state()
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .is_some_and(|s| ipam::held_by(s, owner).is_some())
        })
        .map(|p| PoolRef {
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
        })
        .collect();
    for pool in holding {
        addresses::release_address(&ctx.client, &pool, owner)
            .await
            .map_err(|e| address_error("release", e))?;
    }
    Ok(())
}

pub async fn release_node(
    inventory: &Inventory,
    ctx: &ProvisioningContext,
    stores: &Stores,
) -> Result<(), Error> {
    let owner = inventory_owner(
        &inventory.namespace().unwrap_or_default(),
        &inventory.name_any(),
    );
    release_everywhere(ctx, stores, &owner).await
}

pub async fn release_cluster(
    cluster: &Cluster,
    ctx: &ProvisioningContext,
    stores: &Stores,
) -> Result<(), Error> {
    release_everywhere(ctx, stores, &cluster_owner(cluster)).await
}
