//! The rule packs under `examples/rules/` compile in the facets their
//! `rule.json` names and stay in the native subset, so that operators who
//! copy them get decisions in microseconds (a `some x in [...]` loop or a
//! `sprintf` would move a pack to regorus's RVM, tens of µs per call).

use std::path::Path;

use warden_engine::dialect::{Policy, Runtime};
use warden_engine::model::Facet;

#[test]
fn example_rule_packs_compile_natively() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rules");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/rules") {
        let pack = entry.expect("entry").path();
        if !pack.is_dir() {
            continue;
        }
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(pack.join("rule.json")).unwrap())
                .unwrap();
        let facets: Vec<Facet> = meta["operations"]
            .as_array()
            .expect("operations")
            .iter()
            .map(|f| match f.as_str() {
                Some("action") => Facet::Action,
                Some("retrieval") => Facet::Retrieval,
                other => panic!("{}: facet {other:?}", pack.display()),
            })
            .collect();
        let source = std::fs::read_to_string(pack.join("policy.rego")).unwrap();
        let policy = Policy::compile(&source, &facets)
            .unwrap_or_else(|e| panic!("{}: {e:?}", pack.display()));
        assert_eq!(policy.runtime(), Runtime::Native, "{}", pack.display());
        seen += 1;
    }
    assert_eq!(seen, 4);
}
