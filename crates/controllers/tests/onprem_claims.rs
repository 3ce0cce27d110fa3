//! Claims of Inventories (`onprem::claims`) against a real API server: claimers racing for
//! fewer servers than they are never give one server two owners, the losers are told none was
//! left, a claim is found again by its owner and hostname (as after a restart), and only its
//! owner releases it.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use ingot_api::seeder::{INVENTORY_NODE_READY, Inventory};
use ingot_controllers::onprem::claims::{
    self, CLAIMED_LABEL, Claim, Claimed, HOSTNAME_ANNOTATION, OWNER_ANNOTATION,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const SERVERS: usize = 4;
const CLAIMERS: usize = 10;

async fn inventories(api: &Api<Inventory>, ns: &str) {
    for i in 0..SERVERS {
        let inventory: Inventory = serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": format!("server-{i}"), "labels": {"rack": "a"}},
            "spec": {"primaryDisk": "/dev/sda",
                     "managementInterfaceMacAddress": format!("aa:bb:cc:dd:ee:0{i}"),
                     "baseboardSpec": {"connection": {"host": format!("10.0.0.{i}"), "port": 623, "insecureTLS": true,
                        "authSecretRef": {"name": "bmc", "namespace": ns}}}},
        }))
        .unwrap();
        api.create(&PostParams::default(), &inventory)
            .await
            .unwrap();
        // Ready, as Seeder's Inventory controller writes it once the BMC answers.
        api.patch_status(
            &format!("server-{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"status": INVENTORY_NODE_READY}})),
        )
        .await
        .unwrap();
    }
}

async fn listed(api: &Api<Inventory>) -> Vec<Arc<Inventory>> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(Arc::new)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claimers_never_give_a_server_two_owners() {
    let env = ingot_testenv::shared().await;
    let client = env.client().unwrap();
    let ns = env.namespace("onprem-claims").await.unwrap();
    let api: Api<Inventory> = Api::namespaced(client.clone(), &ns);
    inventories(&api, &ns).await;
    let selector: LabelSelector =
        serde_json::from_value(json!({"matchLabels": {"rack": "a"}})).unwrap();

    // Every claimer read the same list, then all claim at once.
    let seen = listed(&api).await;
    let mut racing = Vec::new();
    for c in 0..CLAIMERS {
        let (api, seen, selector) = (api.clone(), seen.clone(), selector.clone());
        racing.push(tokio::spawn(async move {
            let claim = Claim {
                owner: "pool-a".into(),
                hostname: format!("node-{c}"),
            };
            let candidates = claims::candidates(&seen, &[], &selector, &claim.hostname);
            (
                claim.clone(),
                claims::claim(&api, &candidates, &claim).await.unwrap(),
            )
        }));
    }
    let mut took = BTreeMap::new();
    let mut none_left = 0;
    for r in racing {
        match r.await.unwrap() {
            (claim, Claimed::Took(inventory)) => {
                assert!(
                    took.insert(inventory.name_any(), claim.hostname).is_none(),
                    "{} claimed twice",
                    inventory.name_any()
                );
            }
            (_, Claimed::NoneLeft { tried }) => {
                assert!(tried >= 1);
                none_left += 1;
            }
        }
    }
    assert_eq!(took.len(), SERVERS, "every server claimed once: {took:?}");
    assert_eq!(none_left, CLAIMERS - SERVERS);

    // What the API server holds agrees: one owner mark per server, the claimed label on each.
    let now = listed(&api).await;
    for inventory in &now {
        let claim = claims::claim_of(inventory).expect("claimed");
        assert_eq!(claim.owner, "pool-a");
        assert_eq!(took.get(&inventory.name_any()), Some(&claim.hostname));
        assert_eq!(
            inventory.labels().get(CLAIMED_LABEL).map(String::as_str),
            Some("true")
        );
    }
    // Nothing is free now.
    assert!(claims::candidates(&now, &[], &selector, "node-x").is_empty());

    // After a restart a claimer finds its server by owner and hostname.
    let (name, hostname) = took.iter().next().unwrap();
    let found = claims::find(&now, "pool-a", hostname).unwrap();
    assert_eq!(&found.name_any(), name);

    // Only the owner releases it, and only from the Inventory as read.
    let stranger = Claim {
        owner: "pool-b".into(),
        hostname: hostname.clone(),
    };
    assert!(!claims::release(&api, found, &stranger).await.unwrap());
    let owner = Claim {
        owner: "pool-a".into(),
        hostname: hostname.clone(),
    };
    assert!(claims::release(&api, found, &owner).await.unwrap());
    let released = api.get(name).await.unwrap();
    assert!(claims::claim_of(&released).is_none());
    assert!(!released.labels().contains_key(CLAIMED_LABEL));
    assert!(!released.annotations().contains_key(OWNER_ANNOTATION));
    assert!(!released.annotations().contains_key(HOSTNAME_ANNOTATION));
    // The stale copy cannot release it again, nor a claim made since.
    let again = claims::claim(&api, &[Arc::new(released.clone())], &owner)
        .await
        .unwrap();
    assert!(matches!(again, Claimed::Took(_)));
    let err = claims::release(&api, found, &owner).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(e) if e.code == 409),
        "{err}"
    );
    // A stale copy of a free server is not claimed over the claim made since.
    let second = claims::claim(&api, &[Arc::new(released)], &stranger)
        .await
        .unwrap();
    assert!(matches!(second, Claimed::NoneLeft { tried: 1 }));
    assert_eq!(claims::claim_of(&api.get(name).await.unwrap()), Some(owner));
}
