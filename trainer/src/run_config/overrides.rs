//! `--set section.key=value`: a config key set on the command line, on
//! top of the file (and what it `extends`), checked as the file's keys are
//! (unknown keys, types, values) with errors that name the `--set`.
//!
//! The value is read as a TOML value (`0.1`, `true`, `"text"`, `[1, 2]`,
//! `{ r = 8 }`); text that is not one is taken as a string, so
//! `--set model.path=models/x` needs no quotes (but a string that reads as
//! a number, boolean or date does: `--set 'name="2024"'`). Relative paths
//! are taken from the config file's folder, as in the file.
//!
//! A command's own flags that set a config key (`--group`, `--temperature`,
//! `--model`, ...) are overrides too ([`Override::flag`]), applied after
//! the `--set` keys through the same checks, so that a flag and its `--set`
//! give the same error for the same bad value (naming the flag). A path a
//! flag gives is taken as given, from the working directory.

use super::RunConfig;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// One `--set KEY=VALUE`, or a command's flag that sets a key.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The dotted key (`grpo.beta`).
    pub key: String,
    /// The value; none removes the key (`--no-adapter`).
    pub value: Option<toml::Value>,
    /// The argument as given (`KEY=VALUE` of a `--set`).
    pub text: String,
    /// The flag as given (`--group 0`) when a flag set the key, not a `--set`.
    pub flag: Option<String>,
}

impl std::str::FromStr for Override {
    type Err = String;

    /// `section.key=value`; the error says what is missing.
    fn from_str(s: &str) -> std::result::Result<Override, String> {
        let Some((key, raw)) = s.split_once('=') else { return Err(format!("expected section.key=value (e.g. grpo.beta=0.1), got {s:?}")) };
        let key = key.trim();
        let bare = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !key.split('.').all(bare) {
            return Err(format!("{key:?} is not a config key (dotted names of letters, digits, _ and -, e.g. grpo.beta)"));
        }
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(format!("no value for {key} (an empty string is {key}='\"\"')"));
        }
        let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
            Ok(t) if t.len() == 1 => t.into_iter().next().expect("one key").1,
            _ if looks_numeric(raw) => {
                return Err(format!("{key}={raw}: the number is out of range (integers from -2^63 to 2^63-1, floats up to about 1.8e308)"))
            }
            _ => toml::Value::String(raw.to_string()),
        };
        Ok(Override { key: key.to_string(), value: Some(value), text: s.to_string(), flag: None })
    }
}

/// Whether `raw` is spelled as a number (digits, a sign, `.`, `_`, an
/// exponent) though TOML could not read it: one out of range (`1e400`,
/// `99999999999999999999`), not a string.
fn looks_numeric(raw: &str) -> bool {
    fn digits(s: &str) -> &str {
        let rest = s.trim_start_matches(|c: char| c.is_ascii_digit() || c == '_');
        if rest.len() == s.len() || s.starts_with('_') { "\0" } else { rest }
    }
    let mut rest = digits(raw.strip_prefix(['+', '-']).unwrap_or(raw));
    if let Some(frac) = rest.strip_prefix('.') {
        rest = digits(frac);
    }
    if let Some(exp) = rest.strip_prefix(['e', 'E']) {
        rest = digits(exp.strip_prefix(['+', '-']).unwrap_or(exp));
    }
    rest.is_empty()
}

impl Override {
    /// The flag `flag` (as given: `--group 0`) setting `key` to `value`,
    /// checked as a `--set` of the key is; a value TOML cannot hold (an
    /// integer above 2^63-1) is refused naming the flag.
    pub fn flag(flag: impl Into<String>, key: &str, value: impl serde::Serialize) -> Result<Override> {
        let flag = flag.into();
        let value = toml::Value::try_from(value).map_err(|e| Error::Invalid { what: flag.clone(), message: format!("config key `{key}`: {e}") })?;
        let text = format!("{key}={value}");
        Ok(Override { key: key.to_string(), value: Some(value), text, flag: Some(flag) })
    }

    /// The flag `flag` removing `key` (back to its default: `--no-adapter`).
    pub fn flag_unset(flag: impl Into<String>, key: &str) -> Override {
        Override { key: key.to_string(), value: None, text: format!("{key} unset"), flag: Some(flag.into()) }
    }

    /// How it was given, as errors name it: `--set KEY=VALUE` or the flag.
    pub fn given(&self) -> String {
        self.flag.clone().unwrap_or_else(|| format!("--set {}", self.text))
    }

    /// An error about this override, naming what gave it and its key.
    fn error(&self, message: impl std::fmt::Display) -> Error {
        Error::Invalid { what: self.given(), message: format!("config key `{}`: {message}", self.key) }
    }

    /// Sets the key in `table`, making the sections it names.
    fn apply(&self, table: &mut toml::Table) -> Result<()> {
        let parts: Vec<&str> = self.key.split('.').collect();
        let (last, sections) = parts.split_last().expect("a key has a name");
        let mut t = table;
        for (i, part) in sections.iter().enumerate() {
            t = match t.entry(part.to_string()).or_insert_with(|| toml::Value::Table(Default::default())) {
                toml::Value::Table(inner) => inner,
                other => {
                    return Err(self.error(format!("`{}` is a {}, not a section: set it whole (e.g. --set '{}=...')", parts[..=i].join("."), other.type_str(), parts[..=i].join("."))))
                }
            };
        }
        match &self.value {
            Some(v) => t.insert(last.to_string(), v.clone()),
            None => t.remove(*last),
        };
        Ok(())
    }
}

fn from_table(table: &toml::Table) -> std::result::Result<RunConfig, toml::de::Error> {
    toml::Value::Table(table.clone()).try_into()
}

/// A serde error a later `--set` may still mend (a key it gives).
fn missing(e: &toml::de::Error) -> bool {
    e.message().starts_with("missing field")
}

/// The config of `path` (its text and table as read) with `overrides` in
/// order: the file's own errors first, located in it (a missing key aside:
/// a `--set` may give it), then the first `--set` that makes it fail.
pub(super) fn parse(path: &Path, text: &str, table: toml::Table, overrides: &[Override]) -> Result<RunConfig> {
    let mut chain: Vec<PathBuf> = vec![];
    let mut table = if table.contains_key("extends") { super::extended(path, table, &mut chain)? } else { table };
    if let Err(e) = from_table(&table) {
        if !missing(&e) {
            return Err(match (chain.is_empty(), toml::from_str::<RunConfig>(text)) {
                (true, Err(located)) => super::toml_error(path, text, &located),
                (true, Ok(_)) => Error::Invalid { what: path.display().to_string(), message: e.message().trim().to_string() },
                (false, _) => super::extends_error(path, &chain, e),
            });
        }
    }
    for o in overrides {
        o.apply(&mut table)?;
        if let Err(e) = from_table(&table) {
            if !missing(&e) {
                return Err(o.error(e.message().trim()));
            }
        }
    }
    let given: Vec<String> = overrides.iter().map(Override::given).collect();
    from_table(&table).map_err(|e| Error::Invalid { what: format!("{} with {}", path.display(), given.join(" ")), message: e.message().trim().to_string() })
}

/// A validation error (naming a key) as the error of the last `--set` or
/// flag of that key (or of its section), if one set it.
pub(super) fn blame(e: Error, overrides: &[Override]) -> Error {
    let Error::Config { path, key, message } = e else { return e };
    let names = |o: &Override| key.split(" / ").any(|k| k == o.key || k.starts_with(&format!("{}.", o.key)));
    match overrides.iter().rev().find(|o| names(o)) {
        Some(o) => Error::Invalid { what: o.given(), message: format!("config key `{key}`: {message}") },
        None => Error::Config { path, key, message },
    }
}

/// The keys whose value comes last from a flag: a path there is taken as
/// given (from the working directory), not from the config's folder.
pub(super) fn flag_keys(overrides: &[Override]) -> Vec<&str> {
    let mut keys: Vec<&str> = vec![];
    for o in overrides {
        keys.retain(|k| *k != o.key);
        if o.flag.is_some() {
            keys.push(&o.key);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> Override {
        s.parse().unwrap()
    }

    #[test]
    fn values_read_as_toml_else_as_strings() {
        assert_eq!(set("grpo.beta=0.1").value, Some(toml::Value::Float(0.1)));
        assert_eq!(set("train.steps=3").value, Some(toml::Value::Integer(3)));
        assert_eq!(set("rollout.group = 4").key, "rollout.group");
        assert_eq!(set("model.path=\"x\"").value, Some(toml::Value::String("x".into())));
        assert_eq!(set("model.path=models/x").value, Some(toml::Value::String("models/x".into())));
        assert_eq!(set("pipeline.pilot.lrs=[1e-5, 2e-5]").value.and_then(|v| v.as_array().map(Vec::len)), Some(2));
        // Another key smuggled in after a newline stays one string.
        assert_eq!(set("name=a\nb = 1").value, Some(toml::Value::String("a\nb = 1".into())));
        // Numbers TOML cannot hold are out of range, not strings (issue 66).
        for huge in ["99999999999999999999", "1e400", "-9223372036854775809"] {
            let e = format!("rollout.group={huge}").parse::<Override>().unwrap_err();
            assert!(e.contains("rollout.group") && e.contains("out of range"), "{e}");
        }
        for text in ["1.2.3", "2024-01-01x", "1e5x", "v1"] {
            assert!(matches!(set(&format!("name={text}")).value, Some(toml::Value::String(_))), "{text}");
        }
        for bad in ["grpo.beta", "grpo..beta=1", "=1", "grpo.beta=", "grpo beta=1"] {
            assert!(bad.parse::<Override>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_key_under_a_value_that_is_not_a_section_is_refused() {
        let mut t: toml::Table = toml::from_str("name = \"x\"").unwrap();
        let e = set("name.x=1").apply(&mut t).unwrap_err().to_string();
        assert!(e.starts_with("--set name.x=1: config key `name.x`: `name` is a string, not a section"), "{e}");
    }
}
