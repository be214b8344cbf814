//! A small JSON Schema checker for the subset our own schemas use (`type`, `required`,
//! `properties`, `additionalProperties`, `items`, `minimum`, `enum`, local `$ref`), so the JSON that
//! stairbench writes is checked against the schemas in `schema/` without a network-capable
//! validator crate.

use serde_json::Value;

/// Checks `doc` against `schema`; returns one message per violation, with its JSON path.
pub fn validate(schema: &Value, doc: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    Checker { root: schema }.check(schema, doc, "$", &mut errors);
    errors
}

struct Checker<'a> {
    root: &'a Value,
}

impl Checker<'_> {
    fn check(&self, schema: &Value, doc: &Value, path: &str, errors: &mut Vec<String>) {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            match reference
                .strip_prefix('#')
                .and_then(|p| self.root.pointer(p))
            {
                Some(target) => return self.check(target, doc, path, errors),
                None => return errors.push(format!("{path}: unresolvable $ref {reference}")),
            }
        }
        if let Some(types) = schema.get("type") {
            let allowed: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            if !allowed.iter().any(|t| has_type(doc, t)) {
                errors.push(format!(
                    "{path}: expected {}, found {}",
                    allowed.join(" or "),
                    type_name(doc)
                ));
                return;
            }
        }
        if let Some(Value::Array(options)) = schema.get("enum") {
            if !options.contains(doc) {
                errors.push(format!(
                    "{path}: {doc} is not one of {}",
                    Value::Array(options.clone())
                ));
            }
        }
        if let (Some(min), Some(x)) = (schema.get("minimum").and_then(Value::as_f64), doc.as_f64())
        {
            if x < min {
                errors.push(format!("{path}: {x} is below the minimum {min}"));
            }
        }
        if let Value::Object(map) = doc {
            self.check_object(schema, map, path, errors);
        }
        if let (Value::Array(items), Some(item_schema)) = (doc, schema.get("items")) {
            for (i, item) in items.iter().enumerate() {
                self.check(item_schema, item, &format!("{path}[{i}]"), errors);
            }
        }
    }

    fn check_object(
        &self,
        schema: &Value,
        map: &serde_json::Map<String, Value>,
        path: &str,
        errors: &mut Vec<String>,
    ) {
        if let Some(Value::Array(required)) = schema.get("required") {
            for key in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(key) {
                    errors.push(format!("{path}: missing required key {key:?}"));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        for (key, value) in map {
            let sub = format!("{path}.{key}");
            match (props.and_then(|p| p.get(key)), additional) {
                (Some(s), _) => self.check(s, value, &sub, errors),
                (None, Some(Value::Bool(false))) => {
                    errors.push(format!("{sub}: key not allowed by the schema"))
                }
                (None, Some(s @ Value::Object(_))) => self.check(s, value, &sub, errors),
                (None, _) => {}
            }
        }
    }
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_u64() || v.is_i64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
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
        assert!(errs
            .iter()
            .any(|e| e.starts_with("$.b[0]: expected string")));
        assert_eq!(
            validate(&schema, &json!({})),
            vec!["$: missing required key \"a\"".to_string()]
        );
    }
}
