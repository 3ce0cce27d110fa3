use super::*;

fn spec(cidr: &str, gateway: &str, netmask: Option<&str>, reserved: &[&str]) -> AddressPoolSpec {
    AddressPoolSpec {
        cidr: cidr.to_owned(),
        gateway: gateway.to_owned(),
        netmask: netmask.map(str::to_owned),
        reserved_addresses: (!reserved.is_empty())
            .then(|| reserved.iter().map(|r| (*r).to_owned()).collect()),
    }
}

fn pool(cidr: &str, gateway: &str, reserved: &[&str]) -> Pool {
    Pool::parse(&spec(cidr, gateway, None, reserved)).unwrap()
}

fn owner(kind: &str, name: &str) -> AllocatedObject {
    AllocatedObject {
        kind: kind.to_owned(),
        name: name.to_owned(),
        namespace: "default".to_owned(),
    }
}

fn ip(text: &str) -> Ipv4Addr {
    text.parse().unwrap()
}

#[test]
fn a_24_hands_out_neither_network_broadcast_nor_gateway() {
    let pool = pool("10.0.0.0/24", "10.0.0.1", &[]);
    let mut status = settled(&pool, &AddressPoolStatus::default());
    assert_eq!(
        (status.start_address.as_str(), status.last_address.as_str()),
        ("10.0.0.1", "10.0.0.254")
    );
    assert_eq!(status.available_addresses, 253);
    assert_eq!(status.netmask, "255.255.255.0");
    let mut seen = BTreeSet::new();
    for i in 0..253 {
        let (a, changed) = allocate(
            &pool,
            &mut status,
            &owner("inventory", &format!("n{i}")),
            None,
        )
        .unwrap();
        assert!(changed);
        seen.insert(a);
    }
    assert_eq!(seen.len(), 253);
    for never in ["10.0.0.0", "10.0.0.255", "10.0.0.1"] {
        assert!(!seen.contains(&ip(never)), "{never} handed out");
    }
    assert_eq!(seen.first(), Some(&ip("10.0.0.2")));
    assert_eq!(status.status, EXHAUSTED);
    assert_eq!(
        allocate(&pool, &mut status, &owner("cluster", "late"), None),
        Err(AllocateError::Exhausted {
            cidr: "10.0.0.0/24".into()
        })
    );
}

#[test]
fn in_31_and_32_every_address_is_a_host() {
    let p32 = Pool::parse(&spec(
        "172.16.128.11/32",
        "172.16.128.1",
        Some("255.255.248.0"),
        &[],
    ))
    .unwrap();
    let mut status = settled(&p32, &AddressPoolStatus::default());
    assert_eq!(status.start_address, "172.16.128.11");
    assert_eq!(status.last_address, "172.16.128.11");
    assert_eq!(status.available_addresses, 1);
    assert_eq!(status.netmask, "255.255.248.0");
    assert_eq!(status.status, READY);
    let (a, _) = allocate(&p32, &mut status, &owner("inventory", "node"), None).unwrap();
    assert_eq!(a, ip("172.16.128.11"));
    assert_eq!(status.status, EXHAUSTED);

    let p31 = pool("10.0.0.0/31", "10.0.0.1", &[]);
    let mut status = settled(&p31, &AddressPoolStatus::default());
    assert_eq!(status.available_addresses, 1);
    let (a, _) = allocate(&p31, &mut status, &owner("cluster", "c"), None).unwrap();
    assert_eq!(a, ip("10.0.0.0"));
}

#[test]
fn an_owner_gets_the_address_it_holds_again() {
    let pool = pool("10.0.0.0/29", "10.0.0.1", &[]);
    let mut status = settled(&pool, &AddressPoolStatus::default());
    let (first, changed) = allocate(&pool, &mut status, &owner("cluster", "a"), None).unwrap();
    assert!(changed);
    // Read back from the written status, as after a restart.
    let mut reread: AddressPoolStatus =
        serde_json::from_value(serde_json::to_value(&status).unwrap()).unwrap();
    assert_eq!(
        allocate(&pool, &mut reread, &owner("cluster", "a"), Some("10.0.0.5")),
        Ok((first, false))
    );
    assert_eq!(
        reread.address_allocation[&first.to_string()],
        owner("cluster", "a")
    );
}

#[test]
fn a_static_address_is_honoured_or_refused_naming_the_field() {
    let pool = pool("10.0.0.0/24", "10.0.0.1", &["10.0.0.9"]);
    let mut status = settled(&pool, &AddressPoolStatus::default());
    assert_eq!(
        allocate(
            &pool,
            &mut status,
            &owner("cluster", "a"),
            Some("10.0.0.50")
        ),
        Ok((ip("10.0.0.50"), true))
    );
    let refused = |status: &mut AddressPoolStatus, address: &str| {
        allocate(&pool, status, &owner("cluster", "b"), Some(address)).unwrap_err()
    };
    let cases = [
        ("10.0.1.5", "not in the pool's cidr 10.0.0.0/24"),
        ("10.0.0.0", "is the network address"),
        ("10.0.0.255", "is the broadcast address"),
        ("10.0.0.1", "is the pool's gateway"),
        ("10.0.0.9", "reservedAddresses"),
        ("10.0.0.50", "held by cluster default/a"),
        ("ten", "not an IPv4 address"),
    ];
    for (address, says) in cases {
        let message = refused(&mut status, address).to_string();
        assert!(message.starts_with("staticAddress"), "{message}");
        assert!(message.contains(says), "{address}: {message}");
    }
    // Nothing was recorded for the refused owner.
    assert_eq!(held_by(&status, &owner("cluster", "b")), None);
}

#[test]
fn the_lowest_free_address_comes_first_and_a_release_frees_it() {
    let pool = pool("10.0.0.0/29", "10.0.0.1", &["10.0.0.3"]);
    let mut status = settled(&pool, &AddressPoolStatus::default());
    assert_eq!(status.address_allocation["10.0.0.3"], reserved_owner());
    let a = allocate(&pool, &mut status, &owner("inventory", "a"), None).unwrap();
    let b = allocate(&pool, &mut status, &owner("inventory", "b"), None).unwrap();
    assert_eq!((a.0, b.0), (ip("10.0.0.2"), ip("10.0.0.4")));
    assert!(release(&pool, &mut status, &owner("inventory", "a")));
    assert!(!release(&pool, &mut status, &owner("inventory", "a")));
    assert!(!release(&pool, &mut status, &reserved_owner()));
    let c = allocate(&pool, &mut status, &owner("inventory", "c"), None).unwrap();
    assert_eq!(c.0, ip("10.0.0.2"));
    assert_eq!(holders(&status).len(), 2);
}

#[test]
fn exhausted_and_ready_follow_the_allocations() {
    // .1 gateway, .2 reserved: .3 .4 .5 .6 to hand out (available counts .2 too).
    let pool = pool("10.0.0.0/29", "10.0.0.1", &["10.0.0.2"]);
    let mut status = settled(&pool, &AddressPoolStatus::default());
    assert_eq!(status.available_addresses, 5);
    for n in ["a", "b", "c", "d"] {
        assert_eq!(status.status, READY);
        allocate(&pool, &mut status, &owner("inventory", n), None).unwrap();
    }
    assert_eq!(status.status, EXHAUSTED);
    assert_eq!(
        status.address_allocation.len() as i64,
        status.available_addresses
    );
    release(&pool, &mut status, &owner("inventory", "b"));
    assert_eq!(status.status, READY);
}

#[test]
fn bad_specs_name_the_field_and_the_fix() {
    let cases = [
        (spec("10.0.0.0/33", "10.0.0.1", None, &[]), "spec.cidr"),
        (spec("10.0.0.0/24", "gw", None, &[]), "spec.gateway \"gw\""),
        (
            spec("10.0.0.0/24", "10.0.0.1", Some("255.0.255.0"), &[]),
            "spec.netmask",
        ),
        (
            spec("10.0.0.0/24", "10.0.1.1", None, &[]),
            "not on the pool's network 10.0.0.0/255.255.255.0",
        ),
        (
            spec("10.0.0.0/24", "10.0.0.1", None, &["10.0.1.1"]),
            "spec.reservedAddresses",
        ),
        (
            spec("10.0.0.0/24", "10.0.0.1", None, &["x"]),
            "spec.reservedAddresses",
        ),
    ];
    for (spec, says) in cases {
        let message = Pool::parse(&spec).unwrap_err().to_string();
        assert!(message.contains(says), "{spec:?}: {message}");
        assert!(message.contains("give"), "{message}");
    }
}

#[test]
fn overlap_is_any_shared_address() {
    let a = pool("10.0.0.0/24", "10.0.0.1", &[]);
    let b = pool("10.0.0.128/25", "10.0.0.129", &[]);
    let c = pool("10.0.1.0/24", "10.0.1.1", &[]);
    assert!(a.overlaps(&b) && b.overlaps(&a));
    assert!(!a.overlaps(&c) && !c.overlaps(&a));
}

#[test]
fn settling_drops_reserved_entries_no_longer_listed_and_keeps_owners() {
    let before = pool("10.0.0.0/29", "10.0.0.1", &["10.0.0.2", "10.0.0.3"]);
    let mut status = settled(&before, &AddressPoolStatus::default());
    allocate(&before, &mut status, &owner("cluster", "a"), None).unwrap();
    // The owner's 10.0.0.4 is then reserved too: it stays the owner's.
    let after = pool("10.0.0.0/29", "10.0.0.1", &["10.0.0.3", "10.0.0.4"]);
    let status = settled(&after, &status);
    assert!(!status.address_allocation.contains_key("10.0.0.2"));
    assert_eq!(status.address_allocation["10.0.0.3"], reserved_owner());
    assert_eq!(status.address_allocation["10.0.0.4"], owner("cluster", "a"));
}
