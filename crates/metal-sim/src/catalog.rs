//! Plans and metros the emulator offers.

use serde_json::{Value, json};

#[derive(Debug)]
pub struct Metro {
    pub id: &'static str,
    pub code: &'static str,
    pub name: &'static str,
    pub country: &'static str,
}

#[derive(Debug)]
pub struct Plan {
    pub id: &'static str,
    pub slug: &'static str,
    pub name: &'static str,
    pub class: &'static str,
    /// Number of physical NICs: eth0 .. eth{n-1}, all members of bond0.
    pub nics: usize,
    pub cpus: u32,
    pub memory: &'static str,
    pub price_hour: f64,
}

pub const METROS: &[Metro] = &[
    Metro {
        id: "108b2cfb-246b-45e3-885a-bf3e82fce1a0",
        code: "am",
        name: "Amsterdam",
        country: "NL",
    },
    Metro {
        id: "d3d6b29f-042d-43b7-b3ce-0bf53d5754ca",
        code: "da",
        name: "Dallas",
        country: "US",
    },
    Metro {
        id: "f6ada324-8226-4bfc-99a8-453d47caf2dc",
        code: "fr",
        name: "Frankfurt",
        country: "DE",
    },
    Metro {
        id: "96a57b6d-c62c-41b5-ab8e-f8d63a7f9887",
        code: "ny",
        name: "New York",
        country: "US",
    },
    Metro {
        id: "5f72cbf6-96e4-44f2-ae60-213888fa2b9f",
        code: "sg",
        name: "Singapore",
        country: "SG",
    },
    Metro {
        id: "2991b022-b8c4-497e-8db7-5a407c3a209b",
        code: "sv",
        name: "Silicon Valley",
        country: "US",
    },
];

pub const PLANS: &[Plan] = &[
    Plan {
        id: "e69c0169-4726-46ea-98f1-939c9e8a3607",
        slug: "c3.small.x86",
        name: "c3.small.x86",
        class: "c3.small.x86",
        nics: 2,
        cpus: 1,
        memory: "32GB",
        price_hour: 0.75,
    },
    Plan {
        id: "8ea03255-89f9-4e62-9d3f-8817db82ceed",
        slug: "c3.medium.x86",
        name: "c3.medium.x86",
        class: "c3.medium.x86",
        nics: 2,
        cpus: 1,
        memory: "64GB",
        price_hour: 1.5,
    },
    Plan {
        id: "9a2ad27b-ac0b-4d97-8d1c-5a1bd1dd4d8d",
        slug: "m3.small.x86",
        name: "m3.small.x86",
        class: "m3.small.x86",
        nics: 2,
        cpus: 1,
        memory: "64GB",
        price_hour: 1.05,
    },
    Plan {
        id: "e0b3d09a-ac0d-4b32-ab0b-ca9ee1e9c9e4",
        slug: "m3.large.x86",
        name: "m3.large.x86",
        class: "m3.large.x86",
        nics: 2,
        cpus: 1,
        memory: "256GB",
        price_hour: 3.1,
    },
    Plan {
        id: "4ec5e4d6-4f2b-4a5b-8e62-4b0b7d3f2a11",
        slug: "n3.xlarge.x86",
        name: "n3.xlarge.x86",
        class: "n3.xlarge.x86",
        nics: 4,
        cpus: 2,
        memory: "512GB",
        price_hour: 4.5,
    },
];

/// A metro by code or id. Codes match regardless of case, as the API's did: manifests name
/// metros `SG` as often as `sg`.
pub fn metro(code_or_id: &str) -> Option<&'static Metro> {
    METROS
        .iter()
        .find(|m| m.code.eq_ignore_ascii_case(code_or_id) || m.id == code_or_id)
}

pub fn plan(slug_or_id: &str) -> Option<&'static Plan> {
    PLANS
        .iter()
        .find(|p| p.slug == slug_or_id || p.id == slug_or_id)
}

pub fn metro_json(m: &Metro) -> Value {
    json!({"id": m.id, "code": m.code, "name": m.name, "country": m.country})
}

pub fn plan_json(p: &Plan) -> Value {
    let metros: Vec<Value> = METROS
        .iter()
        .map(|m| json!({"href": format!("/metal/v1/locations/metros/{}", m.id), "price": {"hour": p.price_hour}}))
        .collect();
    json!({
        "id": p.id,
        "slug": p.slug,
        "name": p.name,
        "class": p.class,
        "line": "baremetal",
        "type": "standard",
        "categories": ["compute", "current_gen"],
        "deployment_types": ["on_demand", "spot_market"],
        "pricing": {"hour": p.price_hour},
        "available_in_metros": metros,
        "specs": {
            "cpus": [{"count": p.cpus, "type": "x86"}],
            "memory": {"total": p.memory},
            "nics": [{"count": p.nics, "type": "25Gbps"}],
            "drives": [{"count": 2, "type": "SSD", "size": "480GB", "category": "boot"}],
            "features": {"raid": true, "txt": true, "uefi": true}
        }
    })
}

/// Operating systems a device may be created with.
pub const OPERATING_SYSTEMS: &[(&str, &str, &str, &str)] = &[
    ("custom_ipxe", "Custom iPXE", "custom_ipxe", ""),
    ("ubuntu_22_04", "Ubuntu 22.04 LTS", "ubuntu", "22.04"),
    ("ubuntu_24_04", "Ubuntu 24.04 LTS", "ubuntu", "24.04"),
    ("debian_12", "Debian 12", "debian", "12"),
    ("flatcar_stable", "Flatcar (stable)", "flatcar", "stable"),
];
