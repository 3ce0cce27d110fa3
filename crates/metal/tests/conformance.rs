//! Spec conformance: every request the client sends and every answer the emulator gives, for
//! every operation used, is validated against the pinned OpenAPI spec (shared/fixtures/
//! metal-openapi, multi-file, cross-file `$ref`s resolved here).
//!
//! Validation is strict where the spec is loose: an object schema that lists `properties` and
//! says nothing of `additionalProperties` refuses other properties, so a renamed field fails.
//! OpenAPI 3.0 specifics are mapped to JSON Schema 2020-12: `nullable`, `allOf` of object
//! schemas (merged, so strictness holds across the parts).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use common::*;
use ingot_metal::equinix::wire::*;
use ingot_metal::{BareMetalCloud, Boot, CreateServer, NetworkMode, PowerAction, Reinstall};
use ingot_metal_sim::{EndpointFault, Faults, RateLimitBurst};
use serde_json::{Map, Value, json};

// ---------- loading the spec ----------

fn shared_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("INGOT_SHARED_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn yaml_to_json(v: serde_yaml::Value) -> Value {
    use serde_yaml::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                json!(i)
            } else if let Some(u) = n.as_u64() {
                json!(u)
            } else {
                json!(n.as_f64().unwrap_or(0.0))
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(s) => Value::Array(s.into_iter().map(yaml_to_json).collect()),
        Y::Mapping(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        Y::Number(n) => n.to_string(),
                        Y::Bool(b) => b.to_string(),
                        other => format!("{other:?}"),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(t) => yaml_to_json(t.value),
    }
}

struct Spec {
    root: PathBuf,
    /// Every file reached through `$ref`, by name, refs rewritten to `#/$defs/<name>`.
    defs: Map<String, Value>,
    /// (method, path) -> operation, refs rewritten the same way.
    ops: BTreeMap<(String, String), Value>,
}

#[derive(Debug, PartialEq)]
enum Check {
    Ok,
    Bad(Vec<String>),
}

impl Spec {
    fn load() -> Spec {
        let root = shared_dir().join("fixtures/metal-openapi");
        let main = root.join("openapi3.yaml");
        assert!(
            main.exists(),
            "the pinned spec is missing at {}: set INGOT_SHARED_DIR to the shared folder",
            main.display()
        );
        let mut spec = Spec {
            root: normalize(&root),
            defs: Map::new(),
            ops: BTreeMap::new(),
        };
        let doc = spec.load_file(&normalize(&main));
        let paths = doc["paths"].as_object().expect("paths").clone();
        for (path, item) in paths {
            let item = spec.resolve_tree(item, &spec.root.clone());
            let item = spec.deref(&item);
            for method in ["get", "post", "put", "delete", "patch"] {
                if let Some(op) = item.get(method) {
                    spec.ops
                        .insert((method.to_uppercase(), path.clone()), op.clone());
                }
            }
        }
        // OpenAPI 3.0 -> JSON Schema, once every file is in.
        let raw = spec.defs.clone();
        for (_, v) in spec.defs.iter_mut() {
            *v = transform(v.clone(), &raw, 0);
        }
        spec
    }

    fn load_file(&mut self, file: &Path) -> Value {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let y: serde_yaml::Value = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("parsing {}: {e}", file.display()));
        yaml_to_json(y)
    }

    fn def_name(&self, file: &Path) -> String {
        let rel = file
            .strip_prefix(&self.root)
            .unwrap_or(file)
            .to_string_lossy()
            .to_string();
        rel.trim_end_matches(".yaml")
            .replace(['/', '.', '-', '{', '}'], "_")
    }

    /// Rewrites every file `$ref` under `v` (relative to `dir`) to `#/$defs/<name>`, loading
    /// the referenced files once.
    fn resolve_tree(&mut self, v: Value, dir: &Path) -> Value {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref")
                    && !r.starts_with('#')
                {
                    let (file, frag) = r.split_once('#').unwrap_or((r.as_str(), ""));
                    assert!(
                        frag.is_empty(),
                        "fragment refs are not used by this spec: {r}"
                    );
                    let target = normalize(&dir.join(file));
                    let name = self.def_name(&target);
                    if !self.defs.contains_key(&name) {
                        self.defs.insert(name.clone(), Value::Null);
                        let loaded = self.load_file(&target);
                        let parent = target.parent().unwrap_or(Path::new("")).to_path_buf();
                        let resolved = self.resolve_tree(loaded, &parent);
                        self.defs.insert(name.clone(), resolved);
                    }
                    let mut out = Map::new();
                    out.insert("$ref".into(), json!(format!("#/$defs/{name}")));
                    for (k, val) in m {
                        if k != "$ref" {
                            out.insert(k, val);
                        }
                    }
                    return Value::Object(out);
                }
                Value::Object(
                    m.into_iter()
                        .map(|(k, v)| (k, self.resolve_tree(v, dir)))
                        .collect(),
                )
            }
            Value::Array(a) => {
                Value::Array(a.into_iter().map(|v| self.resolve_tree(v, dir)).collect())
            }
            other => other,
        }
    }

    fn deref(&self, v: &Value) -> Value {
        let mut cur = v.clone();
        for _ in 0..10 {
            match cur
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
            {
                Some(name) => cur = self.defs[name].clone(),
                None => break,
            }
        }
        cur
    }

    fn op(&self, method: &str, path: &str) -> Option<&Value> {
        self.ops.get(&(method.to_string(), path.to_string()))
    }

    fn validate(&self, schema: &Value, instance: &Value) -> Check {
        let schema = transform(schema.clone(), &self.defs, 0);
        let mut root = match schema {
            Value::Object(m) => m,
            other => panic!("schema is not an object: {other}"),
        };
        let schemas: Map<String, Value> = self
            .defs
            .iter()
            .filter(|(k, _)| k.starts_with("components_schemas_"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        root.insert("$defs".into(), Value::Object(schemas));
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&Value::Object(root))
            .expect("schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if errors.is_empty() {
            Check::Ok
        } else {
            Check::Bad(errors)
        }
    }

    fn request_schema(&self, op: &Value) -> Option<(Value, bool)> {
        let rb = self.deref(op.get("requestBody")?);
        let required = rb.get("required").and_then(Value::as_bool).unwrap_or(false);
        Some((
            rb["content"]["application/json"]["schema"].clone(),
            required,
        ))
    }

    fn response_schema(&self, op: &Value, status: u16) -> Option<Option<Value>> {
        let r = op.get("responses")?.get(status.to_string())?;
        let r = self.deref(r);
        Some(
            r.get("content")
                .map(|c| c["application/json"]["schema"].clone()),
        )
    }

    fn query_params(&self, op: &Value) -> BTreeSet<String> {
        op.get("parameters")
            .and_then(Value::as_array)
            .map(|ps| {
                ps.iter()
                    .map(|p| self.deref(p))
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn error_schema(&self) -> Value {
        json!({"$ref": "#/$defs/components_schemas_Error"})
    }
}

/// OpenAPI 3.0 schema -> JSON Schema 2020-12 (strict objects).
fn transform(v: Value, defs: &Map<String, Value>, depth: usize) -> Value {
    assert!(depth < 40, "allOf nesting too deep");
    let Value::Object(mut m) = v else {
        return match v {
            Value::Array(a) => {
                Value::Array(a.into_iter().map(|x| transform(x, defs, depth)).collect())
            }
            other => other,
        };
    };
    if let Some(Value::Array(parts)) = m.remove("allOf") {
        let mut merged = Map::new();
        for part in parts {
            let part = match part
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
            {
                Some(name) => defs[name].clone(),
                None => part,
            };
            let part = transform(part, defs, depth + 1);
            merge_into(&mut merged, part);
        }
        let rest = std::mem::take(&mut m);
        merge_into(&mut merged, Value::Object(rest));
        m = merged;
    }
    if m.remove("nullable") == Some(Value::Bool(true))
        && let Some(Value::String(t)) = m.get("type").cloned()
    {
        m.insert("type".into(), json!([t, "null"]));
    }
    let is_schema_with_props = matches!(m.get("properties"), Some(Value::Object(_)));
    let out: Map<String, Value> = m
        .into_iter()
        .map(|(k, v)| {
            let v = match k.as_str() {
                // A map from names to schemas.
                "properties" | "$defs" => match v {
                    Value::Object(props) => Value::Object(
                        props
                            .into_iter()
                            .map(|(pk, pv)| (pk, transform(pv, defs, depth)))
                            .collect(),
                    ),
                    other => other,
                },
                "example" | "examples" | "default" | "enum" | "const" => v,
                _ => transform(v, defs, depth),
            };
            (k, v)
        })
        .collect();
    let mut out = out;
    if is_schema_with_props && !out.contains_key("additionalProperties") {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(out)
}

fn merge_into(into: &mut Map<String, Value>, part: Value) {
    let Value::Object(part) = part else { return };
    for (k, v) in part {
        match (k.as_str(), into.get_mut(&k), v) {
            ("properties", Some(Value::Object(have)), Value::Object(add)) => {
                for (pk, pv) in add {
                    have.insert(pk, pv);
                }
            }
            ("required", Some(Value::Array(have)), Value::Array(add)) => {
                for r in add {
                    if !have.contains(&r) {
                        have.push(r);
                    }
                }
            }
            // The parts' additionalProperties:false applied to each part alone; the merged
            // schema gets its own below.
            ("additionalProperties", _, Value::Bool(false)) => {}
            (_, _, v) => {
                into.insert(k, v);
            }
        }
    }
}

// ---------- the traffic ----------

/// Drives every operation the client has, successes and errors, with recording on.
async fn drive_every_operation(srv: &ingot_metal_sim::SimServer) {
    let c = client(srv);
    let cloud = cloud(srv);

    let mut req = CreateServer::new(
        "conf-1",
        "n3.xlarge.x86",
        "sv",
        OWNER,
        Boot::Ipxe {
            script_url: Some("http://127.0.0.1:9/a.ipxe".into()),
            always: true,
        },
    );
    req.userdata = Some("#cloud-config\n".into());
    req.tags = vec!["role=node".into()];
    req.billing = Some(ingot_metal::Billing::Hourly);
    req.spot_price_max = Some(0.25);
    req.reservation_id = Some("5c3f2a10-7d8e-4f90-a1b2-c3d4e5f60718".into());
    req.project_ssh_keys = vec!["0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9".into()];
    req.user_ssh_keys = vec!["9e8d7c6b-5a49-4837-9261-50f4e3d2c1b0".into()];
    let s = cloud.create_server(&req).await.unwrap();
    c.get_device(&s.id, &["facility"]).await.unwrap();
    cloud
        .update_boot(
            &s.id,
            &ingot_metal::BootUpdate {
                ipxe_script_url: Some("http://127.0.0.1:9/b.ipxe".into()),
                userdata: Some("#cloud-config\nx: 1\n".into()),
                always_pxe: Some(false),
            },
        )
        .await
        .unwrap();
    cloud.power(&s.id, PowerAction::Off).await.unwrap();
    cloud.power(&s.id, PowerAction::On).await.unwrap();
    cloud.power(&s.id, PowerAction::Reboot).await.unwrap();
    cloud
        .reinstall(
            &s.id,
            &Reinstall {
                preserve_data: true,
                deprovision_fast: true,
                os: None,
                ipxe_script_url: Some("http://127.0.0.1:9/c.ipxe".into()),
            },
        )
        .await
        .unwrap();
    cloud.get_server(&s.id).await.unwrap();

    let v = cloud.ensure_vlan("sv", 1100, "conformance").await.unwrap();
    let v2 = cloud.ensure_vlan("sv", 1101, "").await.unwrap();
    c.create_virtual_network(
        PROJECT,
        &VirtualNetworkCreateRequest {
            metro: "sv".into(),
            vxlan: None,
            description: None,
            tags: vec!["t".into()],
        },
    )
    .await
    .unwrap();
    for mode in [
        NetworkMode::Hybrid,
        NetworkMode::Layer2Bonded,
        NetworkMode::Layer2Individual,
        NetworkMode::Layer3,
    ] {
        cloud.set_network_mode(&s.id, mode).await.unwrap();
    }
    let s = cloud.get_server(&s.id).await.unwrap();
    let bond = s.port("bond0").unwrap().id.clone();
    let eth1 = s.port("eth1").unwrap().id.clone();
    cloud
        .assign_vlans(&bond, std::slice::from_ref(&v.id))
        .await
        .unwrap();
    cloud.unassign_vlans(&bond, &["1100".into()]).await.unwrap();
    c.convert_layer2(&bond, Some("1100")).await.unwrap();
    c.disbond_port(&eth1, false).await.unwrap();
    c.batch_vlan_assignments(
        &eth1,
        &VlanBatchRequest {
            vlan_assignments: vec![VlanAssignment {
                vlan: v2.id.clone(),
                state: VlanAssignmentState::Assigned,
                native: Some(true),
            }],
        },
    )
    .await
    .unwrap();
    c.get_port(&eth1).await.unwrap();
    cloud.list_vlans("sv").await.unwrap();
    cloud.plans().await.unwrap();
    cloud.locations().await.unwrap();
    cloud.capacity("c3.small.x86", "sv").await.unwrap();
    cloud.list_servers(OWNER).await.unwrap();
    // A page boundary with meta.next and meta.previous.
    for i in 0..3 {
        c.create_device(
            PROJECT,
            &DeviceCreateRequest {
                metro: "da".into(),
                plan: "c3.small.x86".into(),
                operating_system: "debian_12".into(),
                hostname: Some(format!("p{i}")),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    c.list_devices(
        PROJECT,
        &DeviceFilter {
            per_page: Some(2),
            metro: Some("da".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();

    // Errors the API documents: 401, 403, 404, 422.
    let bad = client_with(
        srv,
        "not-a-token",
        std::time::Duration::from_secs(5),
        fast_retry(),
    );
    assert!(bad.get_device(&s.id, &[]).await.is_err());
    assert!(
        c.list_devices(OTHER_PROJECT, &DeviceFilter::default())
            .await
            .is_err()
    );
    assert!(
        c.get_device("00000000-0000-4000-8000-000000000000", &[])
            .await
            .is_err()
    );
    assert!(c.assign_port(&bond, "3999").await.is_err());
    assert!(
        c.device_action(&s.id, &DeviceAction::simple(ActionType::PowerOn))
            .await
            .is_err()
    );
    assert!(
        c.create_device(
            PROJECT,
            &DeviceCreateRequest {
                metro: "sv".into(),
                plan: "nope".into(),
                operating_system: "debian_12".into(),
                ..Default::default()
            }
        )
        .await
        .is_err()
    );
    // Injected faults: a 500 and a 429.
    srv.sim().set_faults(Faults {
        endpoints: [(
            "findPlans".to_string(),
            EndpointFault {
                error_count: 1,
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        ..Faults::default()
    });
    c.list_plans().await.unwrap();
    srv.sim().set_faults(Faults {
        rate_limit_burst: Some(RateLimitBurst {
            count: 1,
            retry_after_secs: Some(0),
            reset_in_secs: 0,
        }),
        ..Faults::default()
    });
    c.list_metros().await.unwrap();
    srv.sim().set_faults(Faults::default());

    cloud.delete_server(&s.id).await.unwrap();
    c.delete_device(&s.id, false).await.unwrap_err();
}

const EMULATED_OPERATIONS: &[&str] = &[
    "findProjectDevices",
    "createDevice",
    "findDeviceById",
    "updateDevice",
    "deleteDevice",
    "performAction",
    "findPortById",
    "bondPort",
    "disbondPort",
    "convertLayer2",
    "convertLayer3",
    "assignPort",
    "unassignPort",
    "createPortVlanAssignmentBatch",
    "findVirtualNetworks",
    "createVirtualNetwork",
    "findPlans",
    "findMetros",
    "findCapacityForMetro",
];

#[tokio::test]
async fn every_request_and_answer_conforms_to_the_pinned_spec() {
    let spec = Spec::load();
    let srv = start(config().with_project("someone-else", OTHER_PROJECT)).await;
    let mut cfg_check = config();
    cfg_check.tokens.clear();
    drive_every_operation(&srv).await;
    let traffic = srv.sim().traffic();
    assert!(traffic.len() > 50, "traffic recorded: {}", traffic.len());

    let mut seen = BTreeSet::new();
    let mut statuses = BTreeSet::new();
    let mut failures = Vec::new();
    for ex in &traffic {
        let op = spec
            .op(&ex.method, &ex.path)
            .unwrap_or_else(|| panic!("{} {} is not in the spec", ex.method, ex.path));
        assert_eq!(
            op["operationId"],
            ex.operation.as_str(),
            "{} {}",
            ex.method,
            ex.path
        );
        seen.insert(ex.operation.clone());
        statuses.insert(ex.status);

        let declared = spec.query_params(op);
        for (k, _) in &ex.query {
            if !declared.contains(k) {
                failures.push(format!(
                    "{}: query parameter {k} is not in the spec",
                    ex.operation
                ));
            }
        }
        match (spec.request_schema(op), &ex.request) {
            (Some((schema, _)), Some(body)) => {
                if let Check::Bad(e) = spec.validate(&schema, body) {
                    failures.push(format!("{} request {body}: {e:?}", ex.operation));
                }
            }
            (Some((_, true)), None) => failures.push(format!(
                "{}: the spec requires a body, none sent",
                ex.operation
            )),
            (None, Some(body)) => failures.push(format!(
                "{}: a body was sent where the spec has none: {body}",
                ex.operation
            )),
            _ => {}
        }
        let documented = spec.response_schema(op, ex.status);
        let schema = match (documented, ex.status) {
            (Some(s), _) => s,
            (None, s) if s >= 400 => Some(spec.error_schema()),
            (None, s) => {
                failures.push(format!("{}: status {s} is not in the spec", ex.operation));
                continue;
            }
        };
        match (schema, &ex.response) {
            (Some(schema), Some(body)) => {
                if let Check::Bad(e) = spec.validate(&schema, body) {
                    failures.push(format!("{} {} response: {e:?}", ex.operation, ex.status));
                }
            }
            (Some(_), None) => failures.push(format!(
                "{} {}: a JSON answer was expected",
                ex.operation, ex.status
            )),
            (None, Some(body)) => failures.push(format!(
                "{} {}: the spec has no body here: {body}",
                ex.operation, ex.status
            )),
            (None, None) => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{} conformance failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let missing: Vec<&&str> = EMULATED_OPERATIONS
        .iter()
        .filter(|o| !seen.contains(**o))
        .collect();
    assert!(missing.is_empty(), "operations not exercised: {missing:?}");
    for s in [200, 201, 202, 204, 401, 403, 404, 422, 429, 500] {
        assert!(statuses.contains(&s), "status {s} not exercised");
    }
}

#[tokio::test]
async fn a_renamed_or_mistyped_field_fails_the_check() {
    let spec = Spec::load();
    let srv = start(config()).await;
    let c = client(&srv);
    let mut req = DeviceCreateRequest {
        metro: "sv".into(),
        plan: "c3.small.x86".into(),
        operating_system: "debian_12".into(),
        hostname: Some("r".into()),
        tags: vec!["a".into()],
        ..Default::default()
    };
    req.always_pxe = true;
    let d = c.create_device(PROJECT, &req).await.unwrap();
    let got = c.get_device(&d.id, &[]).await.unwrap();
    assert_eq!(got.id, d.id);
    let traffic = srv.sim().traffic();
    let create = traffic
        .iter()
        .find(|e| e.operation == "createDevice")
        .unwrap();
    let get = traffic
        .iter()
        .find(|e| e.operation == "findDeviceById")
        .unwrap();
    let (req_schema, _) = spec
        .request_schema(spec.op("POST", "/projects/{id}/devices").unwrap())
        .unwrap();
    let resp_schema = spec
        .response_schema(spec.op("GET", "/devices/{id}").unwrap(), 200)
        .unwrap()
        .unwrap();
    let body = create.request.clone().unwrap();
    assert_eq!(spec.validate(&req_schema, &body), Check::Ok);
    let answer = get.response.clone().unwrap();
    assert_eq!(spec.validate(&resp_schema, &answer), Check::Ok);

    let rename = |v: &Value, from: &str, to: &str| {
        let mut v = v.clone();
        let o = v.as_object_mut().unwrap();
        let x = o.remove(from).unwrap_or_else(|| panic!("{from} present"));
        o.insert(to.into(), x);
        v
    };
    assert!(matches!(
        spec.validate(&req_schema, &rename(&body, "hostname", "host_name")),
        Check::Bad(_)
    ));
    assert!(matches!(
        spec.validate(&req_schema, &rename(&body, "always_pxe", "alwaysPxe")),
        Check::Bad(_)
    ));
    assert!(matches!(
        spec.validate(&resp_schema, &rename(&answer, "network_ports", "ports")),
        Check::Bad(_)
    ));
    let mut nested = answer.clone();
    let port = nested["network_ports"][1].as_object_mut().unwrap();
    let data = port.remove("data").unwrap();
    port.insert("port_data".into(), data);
    assert!(
        matches!(spec.validate(&resp_schema, &nested), Check::Bad(_)),
        "a renamed nested field fails too"
    );
    let mut typed = body.clone();
    typed["tags"] = json!("a");
    assert!(matches!(spec.validate(&req_schema, &typed), Check::Bad(_)));
    // A facility-only create matches the other branch of the oneOf, not ours: the metro is required.
    let facility =
        json!({"facility": ["sv15"], "plan": "c3.small.x86", "operating_system": "debian_12"});
    assert_eq!(
        spec.validate(&req_schema, &facility),
        Check::Ok,
        "the spec itself still allows facility"
    );
}

#[tokio::test]
async fn the_emulator_refuses_unknown_fields_and_wrong_types_as_the_api_does() {
    let spec = Spec::load();
    let srv = start(config()).await;
    let http = reqwest::Client::new();
    let url = format!("{}/projects/{PROJECT}/devices", srv.base_url());
    let post = |body: Value| {
        http.post(&url)
            .header("X-Auth-Token", TOKEN)
            .json(&body)
            .send()
    };
    let error_schema = spec.error_schema();
    for body in [
        json!({"metro": "sv", "plan": "c3.small.x86", "operating_system": "debian_12", "host_name": "x"}),
        json!({"metro": "sv", "plan": 5, "operating_system": "debian_12"}),
        json!({"metro": "sv", "plan": "c3.small.x86", "operating_system": "debian_12", "tags": "a"}),
        json!({"metro": "sv", "operating_system": "debian_12"}),
    ] {
        let r = post(body.clone()).await.unwrap();
        assert_eq!(r.status(), 422, "{body}");
        let answer: Value = r.json().await.unwrap();
        let errors = answer["errors"]
            .as_array()
            .unwrap_or_else(|| panic!("errors array for {body}: {answer}"));
        assert!(!errors.is_empty());
        assert_eq!(spec.validate(&error_schema, &answer), Check::Ok);
    }
    let r = post(json!({"metro": "sv", "plan": "c3.small.x86", "operating_system": "debian_12", "host_name": "x"})).await.unwrap();
    let answer: Value = r.json().await.unwrap();
    assert!(
        answer["errors"][0].as_str().unwrap().contains("host_name"),
        "{answer}"
    );
    let r = http
        .post(&url)
        .header("X-Auth-Token", TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(srv.sim().device_count(PROJECT), 0);
    // Unauthenticated: 401 with the `error` form.
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let answer: Value = r.json().await.unwrap();
    assert!(answer["error"].is_string());
}
