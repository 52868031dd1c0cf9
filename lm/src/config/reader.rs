//! Typed access to config.json's keys, every error naming the file and key.

use super::config_err;
use crate::error::{Error, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// Typed field access on the raw config with errors that name the key.
pub(super) struct Reader<'a> {
    pub(super) raw: &'a Map<String, Value>,
    pub(super) path: &'a Path,
}

impl Reader<'_> {
    pub(super) fn err(&self, key: &str, message: &str) -> Error {
        config_err(self.path, key, message)
    }
    /// A present, non-null value.
    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        self.raw.get(key).filter(|v| !v.is_null())
    }
    pub(super) fn usize(&self, key: &str) -> Result<usize> {
        match self.get(key) {
            None => Err(self.err(key, "missing")),
            Some(v) => v
                .as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| self.err(key, &format!("expected a non-negative integer, found {v}"))),
        }
    }
    pub(super) fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(_) => self.usize(key),
        }
    }
    pub(super) fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| self.err(key, &format!("expected a number, found {v}"))),
        }
    }
    pub(super) fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.err(key, &format!("expected true or false, found {v}"))),
        }
    }
    pub(super) fn expect_str_if_present(&self, key: &str, allowed: &[&str]) -> Result<()> {
        match self.get(key) {
            None => Ok(()),
            Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(()),
            Some(v) => Err(self.err(key, &format!("unsupported value {v}; supported: {allowed:?}"))),
        }
    }
    pub(super) fn expect_false_if_present(&self, key: &str) -> Result<()> {
        match self.get(key) {
            None | Some(Value::Bool(false)) => Ok(()),
            Some(v) => Err(self.err(key, &format!("unsupported value {v}; only false is supported"))),
        }
    }
    /// `rope_parameters.rope_theta` (transformers >= 5), else `rope_theta`.
    pub(super) fn rope_theta(&self) -> Result<f64> {
        if let Some(Value::Object(m)) = self.get("rope_parameters") {
            if let Some(v) = m.get("rope_theta") {
                return v
                    .as_f64()
                    .ok_or_else(|| self.err("rope_parameters.rope_theta", "expected a number"));
            }
        }
        self.f64_or("rope_theta", 10_000.0)
    }
}
