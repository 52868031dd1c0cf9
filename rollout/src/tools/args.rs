//! Typed access to a call's JSON arguments (`null` counts as absent).

use serde_json::{Map, Value};

use super::{ToolError, ToolKind};

pub(super) struct Args<'a> {
    kind: ToolKind,
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    pub(super) fn new(kind: ToolKind, map: &'a Map<String, Value>) -> Self {
        Self { kind, map }
    }

    /// Refuses arguments outside `allowed`.
    pub(super) fn only(&self, allowed: &[&str]) -> Result<(), ToolError> {
        match self.map.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(arg) => Err(ToolError::UnknownArgument {
                tool: self.kind.name(),
                arg: arg.clone(),
                allowed: allowed.join(", "),
            }),
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, expected: &'static str) -> ToolError {
        ToolError::WrongType { tool: self.kind.name(), arg: key.to_string(), expected }
    }

    pub(super) fn string(&self, key: &str) -> Result<Option<&'a str>, ToolError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.wrong(key, "a string")),
        }
    }

    pub(super) fn required_string(&self, key: &'static str) -> Result<&'a str, ToolError> {
        self.string(key)?
            .ok_or(ToolError::MissingArgument { tool: self.kind.name(), arg: key })
    }

    /// A boolean (`true`/`false`, or those words as strings).
    pub(super) fn flag(&self, key: &str) -> Result<Option<bool>, ToolError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" => Ok(Some(true)),
            Some(Value::String(s)) if s == "false" => Ok(Some(false)),
            Some(_) => Err(self.wrong(key, "true or false")),
        }
    }

    /// A line number >= 1 (an integer, or digits as a string).
    pub(super) fn line(&self, key: &str) -> Result<Option<usize>, ToolError> {
        let parsed = match self.get(key) {
            None => return Ok(None),
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            Some(_) => None,
        };
        match parsed.and_then(|n| usize::try_from(n).ok()) {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(self.wrong(key, "a line number >= 1")),
        }
    }
}
