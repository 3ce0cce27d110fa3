//! The CRDs in deploy/helm/ingot/crds/ are what the code generates: a change to the types without
//! `scripts/update-crds.sh` fails here.

use std::path::Path;

#[test]
fn committed_crds_match_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/ingot/crds");
    let mut expected_files = Vec::new();
    for crd in ingot_api::crds::generated() {
        let file = ingot_api::crds::file_name(&crd);
        let want = ingot_api::crds::to_yaml(&crd).expect("render CRD");
        let have = std::fs::read_to_string(dir.join(&file)).unwrap_or_else(|e| {
            panic!("deploy/helm/ingot/crds/{file} is missing ({e}): run scripts/update-crds.sh")
        });
        assert!(
            have == want,
            "deploy/helm/ingot/crds/{file} differs from the code: run scripts/update-crds.sh"
        );
        expected_files.push(file);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("read deploy/helm/ingot/crds")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    present.sort();
    expected_files.sort();
    assert_eq!(
        present, expected_files,
        "deploy/helm/ingot/crds holds files the code no longer generates"
    );
}
