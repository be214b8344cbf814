//! The JSON that stairbench writes, checked against the schemas in `schema/` by a real JSON
//! Schema (draft 2020-12) implementation, `boon`, so every keyword counts (`maximum`,
//! `minItems`, `maxItems`, `exclusiveMinimum`, ... as well as types and required keys). It is
//! offline: the schema is handed over as a resource and boon carries the draft's metaschemas,
//! so no `$ref` is fetched.

use serde_json::Value;

/// Where the schema under test is registered (never fetched: it is added as a resource).
const SCHEMA_URL: &str = "http://stairbench.invalid/schema.json";

/// Checks `doc` against `schema`; returns one message per violated keyword (the leaves of the
/// validator's error tree), each with its JSON pointer. A schema that does not compile is one
/// message saying why.
pub fn validate(schema: &Value, doc: &Value) -> Vec<String> {
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    if let Err(e) = compiler.add_resource(SCHEMA_URL, schema.clone()) {
        return vec![format!("the schema does not compile: {e}")];
    }
    let index = match compiler.compile(SCHEMA_URL, &mut schemas) {
        Ok(index) => index,
        Err(e) => return vec![format!("the schema does not compile: {e}")],
    };
    match schemas.validate(doc, index) {
        Ok(()) => Vec::new(),
        Err(e) => {
            let mut out = Vec::new();
            leaves(&e, &mut out);
            out
        }
    }
}

fn leaves(e: &boon::ValidationError, out: &mut Vec<String>) {
    if e.causes.is_empty() {
        let at = e.instance_location.to_string();
        let at = if at.is_empty() { "/".to_string() } else { at };
        out.push(format!("{at}: {}", e.kind));
    }
    for cause in &e.causes {
        leaves(cause, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_each_violation_with_its_path() {
        let schema = json!({"type": "object", "required": ["a"], "additionalProperties": false,
            "properties": {"a": {"type": "integer", "minimum": 0}, "b": {"type": "array", "items": {"type": "string"}}}});
        assert!(validate(&schema, &json!({"a": 1, "b": ["x"]})).is_empty());
        let errs = validate(&schema, &json!({"a": -1, "b": [1], "c": 0}));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs.iter().any(|e| e.starts_with("/b/0: ")), "{errs:?}");
        let errs = validate(&schema, &json!({}));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("/: missing properties 'a'"), "{errs:?}");
    }

    /// The keywords the hand-written checker this replaced ignored.
    #[test]
    fn maximum_and_item_counts_are_checked() {
        let schema = json!({"type": "object", "properties": {
            "share": {"type": "number", "minimum": 0, "maximum": 1},
            "pair": {"type": "array", "minItems": 2, "maxItems": 2},
            "df": {"type": "number", "exclusiveMinimum": 0}}});
        assert!(validate(&schema, &json!({"share": 0.5, "pair": [1, 2], "df": 1})).is_empty());
        let errs = validate(&schema, &json!({"share": 1.5, "pair": [1], "df": 0}));
        assert_eq!(errs.len(), 3, "{errs:?}");
        let errs = validate(&schema, &json!({"pair": [1, 2, 3]}));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("/pair: "), "{errs:?}");
    }

    #[test]
    fn a_remote_ref_is_an_error_not_a_fetch() {
        let schema = json!({"$ref": "https://example.com/remote.json"});
        let errs = validate(&schema, &json!(1));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("the schema does not compile"),
            "{errs:?}"
        );
    }
}
