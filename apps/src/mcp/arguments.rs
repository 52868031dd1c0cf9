//! A tool's arguments, checked against the tool's declared input schema
//! before they are read: an unknown argument, a wrong type or a number out
//! of its range is a tool error that names the argument and what it
//! takes (`attempts: expected a whole number from 1 to 64, got the string
//! "two"`), never serde's wording about Rust types.

use std::borrow::Cow;

use rmcp::handler::server::common::FromContextPart;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The arguments of a tool call as `P`, or what is wrong with them, said
/// for a person. Named `Parameters` as rmcp's own wrapper is, so that
/// `#[tool]` declares `P`'s schema as the tool's input schema.
pub struct Parameters<P>(pub Result<P, String>);

impl<P: JsonSchema> JsonSchema for Parameters<P> {
    fn schema_name() -> Cow<'static, str> {
        P::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        P::json_schema(generator)
    }
}

impl<S, P: DeserializeOwned + JsonSchema> FromContextPart<ToolCallContext<'_, S>> for Parameters<P> {
    fn from_context_part(context: &mut ToolCallContext<S>) -> Result<Self, rmcp::ErrorData> {
        Ok(Parameters(parse(context.arguments.take().unwrap_or_default())))
    }
}

/// `arguments` as `P`, checked first against `P`'s schema.
pub fn parse<P: DeserializeOwned + JsonSchema>(arguments: JsonObject) -> Result<P, String> {
    let schema = serde_json::to_value(schemars::schema_for!(P)).unwrap_or_default();
    check(&schema, &arguments)?;
    serde_json::from_value(Value::Object(arguments)).map_err(|e| {
        // What the schema check leaves: a missing argument.
        let text = e.to_string();
        match text.strip_prefix("missing field `").and_then(|r| r.split_once('`')) {
            Some((name, _)) => format!("missing argument `{name}`: {}", expected(&schema["properties"][name])),
            None => format!("the arguments do not fit this tool: {text}"),
        }
    })
}

/// The first argument that `schema` (an object's JSON schema) does not
/// take: unknown, of another type, or out of range.
fn check(schema: &Value, arguments: &JsonObject) -> Result<(), String> {
    let properties = schema["properties"].as_object().cloned().unwrap_or_default();
    for (name, value) in arguments {
        let Some(property) = properties.get(name) else {
            let known: Vec<&str> = properties.keys().map(String::as_str).collect();
            // A long name is not echoed back.
            let unknown = if name.len() <= 64 { format!("`{name}`") } else { format!("of a {}-byte name", name.len()) };
            return Err(format!("unknown argument {unknown}: this tool takes {}", known.join(", ")));
        };
        if !fits(property, value) {
            return Err(format!("argument `{name}`: {}, got {}", expected(property), shown(value)));
        }
    }
    Ok(())
}

/// The JSON types `property` allows (`type` as a string or a list).
fn types(property: &Value) -> Vec<&str> {
    match &property["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn fits(property: &Value, value: &Value) -> bool {
    let allowed = types(property);
    if allowed.is_empty() {
        return true;
    }
    let of_type = allowed.iter().any(|t| match *t {
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        _ => true,
    });
    let Some(x) = value.as_f64() else { return of_type };
    let above = property["minimum"].as_f64().is_none_or(|m| x >= m);
    let below = property["maximum"].as_f64().is_none_or(|m| x <= m);
    of_type && above && below
}

/// What `property` takes, in words: "expected a whole number from 1 to 64".
fn expected(property: &Value) -> String {
    let allowed = types(property);
    let (min, max) = (property["minimum"].as_f64(), property["maximum"].as_f64());
    let range = match (min, max) {
        (Some(a), Some(b)) => format!(" from {a} to {b}"),
        (Some(a), None) => format!(" of at least {a}"),
        (None, Some(b)) => format!(" of at most {b}"),
        (None, None) => String::new(),
    };
    let what: Vec<String> = allowed
        .iter()
        .filter(|t| **t != "null")
        .map(|t| match *t {
            "integer" => format!("a whole number{range}"),
            "number" => format!("a number{range}"),
            "string" => "a string".into(),
            "boolean" => "true or false".into(),
            "object" => "an object".into(),
            "array" => "a list".into(),
            other => other.to_string(),
        })
        .collect();
    let optional = if allowed.contains(&"null") { " (or null, or left out)" } else { "" };
    format!("expected {}{optional}", if what.is_empty() { "a value".into() } else { what.join(" or ") })
}

/// A value as a person reads it: `the string "two"`, `2.5`, `a list`.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) if s.len() <= 40 => format!("the string {value}"),
        Value::String(s) => format!("a string of {} bytes", s.len()),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;
    use crate::mcp::{LocalizeParams, ReadParams};
    use serde_json::json;

    fn error<P: serde::de::DeserializeOwned + schemars::JsonSchema>(v: serde_json::Value) -> String {
        match parse::<P>(v.as_object().unwrap().clone()) {
            Ok(_) => panic!("{v} was taken"),
            Err(e) => e,
        }
    }

    /// Issue 65 item 10: a wrong type names the argument and what it
    /// takes, never serde's Rust wording ("expected usize").
    #[test]
    fn wrong_types_and_ranges_are_said_in_words() {
        let e = error::<LocalizeParams>(json!({"issue": "x", "attempts": "two"}));
        assert_eq!(e, "argument `attempts`: expected a whole number from 1 to 64 (or null, or left out), got the string \"two\"");
        for bad in [json!(0), json!(65), json!(-1), json!(2.5)] {
            let e = error::<LocalizeParams>(json!({"issue": "x", "attempts": bad}));
            assert!(e.starts_with("argument `attempts`: expected a whole number from 1 to 64"), "{e}");
        }
        let e = error::<LocalizeParams>(json!({"issue": 3}));
        assert_eq!(e, "argument `issue`: expected a string, got 3");
        let e = error::<LocalizeParams>(json!({"repo": "/r"}));
        assert!(e.starts_with("missing argument `issue`: expected a string"), "{e}");
        let e = error::<LocalizeParams>(json!({"issue": "x", "atempts": 2}));
        assert!(e.starts_with("unknown argument `atempts`: this tool takes issue, repo,"), "{e}");
        let long = "k".repeat(5000);
        let e = error::<LocalizeParams>(json!({"issue": "x", long.clone(): 1}));
        assert_eq!(e, "unknown argument of a 5000-byte name: this tool takes issue, repo, rev, attempts, select, temperature, max_issue_tokens, policy");
        let e = error::<ReadParams>(json!({"path": "a.py", "start_line": "ten"}));
        assert!(e.starts_with("argument `start_line`: expected a whole number of at least 0"), "{e}");
        assert!(!e.contains("usize") && !e.contains("u64"), "{e}");
        let ok = parse::<LocalizeParams>(json!({"issue": "x", "attempts": 4, "temperature": 0.5}).as_object().unwrap().clone()).unwrap();
        assert_eq!(ok.attempts, Some(4));
    }
}
