//! A server's port as the install config needs it: its name, whether it is a bond, its MAC.
//! (Network modes and VLANs are the cloud provider's business: `ingot_metal::BareMetalCloud`.)

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// A bond of physical ports (`bond0`); it has no MAC of its own.
    Bond,
    /// A physical NIC (`eth0`, ...).
    Physical,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub kind: PortKind,
    pub mac: Option<String>,
}

impl Port {
    pub fn physical(name: &str, mac: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind: PortKind::Physical,
            mac: Some(mac.to_owned()),
        }
    }

    pub fn bond(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind: PortKind::Bond,
            mac: None,
        }
    }
}
