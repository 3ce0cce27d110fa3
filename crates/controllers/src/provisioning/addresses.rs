//! The address API the Cluster controller calls: read the pool, decide with [`ipam`], write the
//! status under the `resourceVersion` read (a full `replace_status`), and on a 409 read again,
//! a bounded number of times. Two callers racing for the same address cannot both win: the
//! second write carries a stale `resourceVersion` and is refused, and its retry sees the first.

use std::net::Ipv4Addr;
use std::time::Duration;

use ingot_api::seeder::{AddressPool, AllocatedObject};
use kube::api::PostParams;
use kube::{Api, Client};
use rand::Rng;

use super::ipam::{self, AllocateError, Pool, SpecError};
use crate::runtime::is_conflict;

/// Attempts of one allocation or release before it gives up on conflicts.
pub const ATTEMPTS: u32 = 50;

/// A pool by namespace and name (an `addressPoolReference`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PoolRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AddressPool {}/{}", self.namespace, self.name)
    }
}

/// Why no address was given or released.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error("{0} does not exist; create it or name another in addressPoolReference")]
    NotFound(PoolRef),
    #[error("{0} is not ready ({1}); see its Ready condition")]
    NotReady(PoolRef, String),
    #[error("{0} is being deleted; name another pool")]
    Deleting(PoolRef),
    #[error("{0}: {1}")]
    Invalid(PoolRef, SpecError),
    #[error("{0}: {1}")]
    Refused(PoolRef, Box<AllocateError>),
    #[error("{0}: the status changed under {1} attempts in a row; try again")]
    Contended(PoolRef, u32),
    #[error("{0}: Kubernetes API: {1}")]
    Kube(PoolRef, #[source] kube::Error),
}

impl AddressError {
    /// Whether trying again later can help (the pool may appear, settle or free an address);
    /// a refused `staticAddress` needs a change of spec.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            AddressError::Refused(_, refused) if !matches!(**refused, AllocateError::Exhausted { .. })
        )
    }

    /// Whether the pool had no free address.
    pub fn is_exhausted(&self) -> bool {
        matches!(self, AddressError::Refused(_, refused) if matches!(**refused, AllocateError::Exhausted { .. }))
    }
}

/// The pool's address for `owner`: the one it holds, else `static_address`, else the lowest
/// free (see [`ipam::allocate`]). The pool must be accepted by the AddressPool controller
/// (`poolReady` or `poolExhausted`) and not being deleted.
pub async fn allocate_address(
    client: &Client,
    pool: &PoolRef,
    owner: &AllocatedObject,
    static_address: Option<&str>,
) -> Result<Ipv4Addr, AddressError> {
    let api: Api<AddressPool> = Api::namespaced(client.clone(), &pool.namespace);
    for attempt in 0..ATTEMPTS {
        let mut object = read(&api, pool).await?;
        let parsed = accepted(pool, &object)?;
        let status = object.status.get_or_insert_with(Default::default);
        let (address, changed) = ipam::allocate(&parsed, status, owner, static_address)
            .map_err(|e| AddressError::Refused(pool.clone(), Box::new(e)))?;
        if !changed {
            return Ok(address);
        }
        match write(&api, pool, &object).await? {
            true => return Ok(address),
            false => pause(attempt).await,
        }
    }
    Err(AddressError::Contended(pool.clone(), ATTEMPTS))
}

/// Addresses for several owners of one pool in one write: each as [`allocate_address`] gives
/// it, in order, all decided on one read and written under its `resourceVersion` (a 409 reads
/// again and decides them all again). The first refusal stops the batch: the owners before it
/// are written and returned with it, those after it are not tried (as one call after another
/// would stop at it).
pub async fn allocate_addresses(
    client: &Client,
    pool: &PoolRef,
    owners: &[(AllocatedObject, Option<String>)],
) -> (Vec<Ipv4Addr>, Option<AddressError>) {
    let api: Api<AddressPool> = Api::namespaced(client.clone(), &pool.namespace);
    for attempt in 0..ATTEMPTS {
        let mut object = match read(&api, pool).await {
            Ok(object) => object,
            Err(e) => return (Vec::new(), Some(e)),
        };
        let parsed = match accepted(pool, &object) {
            Ok(parsed) => parsed,
            Err(e) => return (Vec::new(), Some(e)),
        };
        let status = object.status.get_or_insert_with(Default::default);
        let mut given = Vec::with_capacity(owners.len());
        let mut changed = false;
        let mut refused = None;
        for (owner, static_address) in owners {
            match ipam::allocate(&parsed, status, owner, static_address.as_deref()) {
                Ok((address, new)) => {
                    given.push(address);
                    changed |= new;
                }
                Err(e) => {
                    refused = Some(AddressError::Refused(pool.clone(), Box::new(e)));
                    break;
                }
            }
        }
        if !changed {
            return (given, refused);
        }
        match write(&api, pool, &object).await {
            Ok(true) => return (given, refused),
            Ok(false) => pause(attempt).await,
            Err(e) => return (Vec::new(), Some(e)),
        }
    }
    (
        Vec::new(),
        Some(AddressError::Contended(pool.clone(), ATTEMPTS)),
    )
}

/// Frees what `owner` holds in the pool; `Ok(false)` when it held nothing (or the pool is
/// gone, taking its allocations with it).
pub async fn release_address(
    client: &Client,
    pool: &PoolRef,
    owner: &AllocatedObject,
) -> Result<bool, AddressError> {
    let api: Api<AddressPool> = Api::namespaced(client.clone(), &pool.namespace);
    for attempt in 0..ATTEMPTS {
        let mut object = match read(&api, pool).await {
            Err(AddressError::NotFound(_)) => return Ok(false),
            other => other?,
        };
        let Some(status) = object.status.as_mut() else {
            return Ok(false);
        };
        let changed = match Pool::parse(&object.spec) {
            Ok(parsed) => ipam::release(&parsed, status, owner),
            // A pool refused for its spec frees by removal alone.
            Err(_) => {
                let before = status.address_allocation.len();
                status.address_allocation.retain(|_, o| o != owner);
                before != status.address_allocation.len()
            }
        };
        if !changed {
            return Ok(false);
        }
        match write(&api, pool, &object).await? {
            true => return Ok(true),
            false => pause(attempt).await,
        }
    }
    Err(AddressError::Contended(pool.clone(), ATTEMPTS))
}

async fn read(api: &Api<AddressPool>, pool: &PoolRef) -> Result<AddressPool, AddressError> {
    api.get_opt(&pool.name)
        .await
        .map_err(|e| AddressError::Kube(pool.clone(), e))?
        .ok_or_else(|| AddressError::NotFound(pool.clone()))
}

/// The pool's parsed spec, if the controller accepted it and it is not going away.
fn accepted(pool: &PoolRef, object: &AddressPool) -> Result<Pool, AddressError> {
    if object.metadata.deletion_timestamp.is_some() {
        return Err(AddressError::Deleting(pool.clone()));
    }
    let state = object
        .status
        .as_ref()
        .map(|s| s.status.as_str())
        .unwrap_or_default();
    if state != ipam::READY && state != ipam::EXHAUSTED {
        let why = match state {
            "" => "not yet seen by the AddressPool controller".to_owned(),
            other => format!("status {other}"),
        };
        return Err(AddressError::NotReady(pool.clone(), why));
    }
    Pool::parse(&object.spec).map_err(|e| AddressError::Invalid(pool.clone(), e))
}

/// Replaces the status as of the `resourceVersion` read; `false` on a 409.
async fn write(
    api: &Api<AddressPool>,
    pool: &PoolRef,
    object: &AddressPool,
) -> Result<bool, AddressError> {
    match api
        .replace_status(&pool.name, &PostParams::default(), object)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(AddressError::Kube(pool.clone(), e)),
    }
}

/// A short random pause after a lost race, growing with the attempts (at most 0.2 s), so
/// that many callers spread out instead of colliding again.
async fn pause(attempt: u32) {
    let ceiling = 20 * u64::from(attempt.min(9) + 1);
    let millis = rand::rng().random_range(0..=ceiling);
    tokio::time::sleep(Duration::from_millis(millis)).await;
}
